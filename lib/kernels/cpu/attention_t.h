/* Bodies of attention.c, over the storage type T (typed.h). */

/* rows x hs elements of T at src (row stride rs) as fp32 rows: the rows
 * where they are (float: *ld = rs), or widened into buf (bf16: *ld = hs) */
static inline const float *FN(rows_f32)(float *buf, const T *src, size_t rs, int rows, int hs,
                                        size_t *ld) {
#if IS_BF16
  for (int r = 0; r < rows; r++)
    mt_bf16_to_f32_serial(buf + (size_t)r * hs, src + r * rs, (size_t)hs);
  *ld = (size_t)hs;
  return buf;
#else
  (void)buf, (void)rows, (void)hs;
  *ld = rs;
  return src;
#endif
}

/* rows x hs elements of T at dst (row stride rs) = 0 */
static inline void FN(zero_rows)(T *dst, size_t rs, int rows, int hs) {
  for (int r = 0; r < rows; r++) memset(dst + r * rs, 0, (size_t)hs * sizeof(T));
}

/* the fp32 accumulator of rows x hs elements of T at dst (row stride rs):
 * dst itself (float: the products accumulate in place, *ld = rs; first:
 * zeroed first), or buf zeroed (bf16: *ld = hs), added to dst with one
 * rounding by acc_end (first: to 0, the bits of a zeroed dst) */
static inline float *FN(acc_begin)(float *buf, T *dst, size_t rs, int rows, int hs, int first,
                                   size_t *ld) {
#if IS_BF16
  (void)first;
  memset(buf, 0, (size_t)rows * hs * sizeof(float));
  *ld = (size_t)hs;
  return buf;
#else
  (void)buf;
  if (first) FN(zero_rows)(dst, rs, rows, hs);
  *ld = rs;
  return dst;
#endif
}

static inline void FN(acc_end)(T *dst, size_t rs, const float *acc, int rows, int hs, int first) {
#if IS_BF16
  for (int r = 0; r < rows; r++) {
    T *d = dst + r * rs;
    const float *x = acc + (size_t)r * hs;
    if (first)
      for (int c = 0; c < hs; c++) d[c] = ST(0.0f + x[c]);
    else
      for (int c = 0; c < hs; c++) d[c] = ST(LD(d[c]) + x[c]);
  }
#else
  (void)dst, (void)rs, (void)acc, (void)rows, (void)hs, (void)first;
#endif
}

/* ------------------------------------------------------------------ */
/* forward                                                             */

/* Query rows [i0, i0 + ATT_BR) of head h, batch b against every key of the
 * block. S holds one key block's scores and then probabilities, acc the
 * unnormalised output (rows x hs), m and l each row's running maximum and
 * sum of exp(score - maximum). */
static void FN(forward_task)(const mt_attn_block *a, T *out, float *lse, const T *q, const T *k,
                             const T *v, int b, int h, int i0, const fwd_scratch *w) {
  const int hs = a->hs, i1 = mt_min_int(i0 + ATT_BR, a->Tq), rows = i1 - i0;
  const float scale = 1.0f / sqrtf((float)hs);
  const T *qb = q + (size_t)b * a->q_bs + (size_t)i0 * a->q_rs + (size_t)h * hs;
  const T *kb = k + (size_t)b * a->k_bs + (size_t)h * hs;
  const T *vb = v + (size_t)b * a->v_bs + (size_t)h * hs;
  size_t ldq = 0, ldk, ldv;
  const float *Q = w->dp ? NULL : FN(rows_f32)(w->Q, qb, a->q_rs, rows, hs, &ldq);
  for (int r = 0; r < rows; r++) {
    w->m[r] = -FLT_MAX;
    w->l[r] = 0.0f;
  }
  memset(w->acc, 0, (size_t)rows * hs * sizeof(float));
  const int kend = keys_end(a, i1);
  for (int j0 = keys_begin(a, b, i0); j0 < kend; j0 += ATT_BC) {
    const int cols = mt_min_int(ATT_BC, kend - j0);
#if IS_BF16
    if (w->dp) {
      mt_cpu_dot_pack_pairs(w->Kp, ATT_BC, kb + (size_t)j0 * a->k_rs, a->k_rs, cols, hs / 2);
      mt_cpu_dot_nt_bf16(w->S, ATT_BC, qb, a->q_rs, rows, w->Kp, ATT_BC, cols, hs / 2, scale, 0);
    } else
#endif
    {
      const float *K = FN(rows_f32)(w->K, kb + (size_t)j0 * a->k_rs, a->k_rs, cols, hs, &ldk);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, Q, (int)ldq, K,
                  (int)ldk, 0.0f, w->S, ATT_BC);
    }
    for (int r = 0; r < rows; r++) {
      float *s = w->S + (size_t)r * ATT_BC;
      int lo;
      const int vis = keys_visible(a, b, i0 + r, j0, cols, &lo);
      if (vis == 0) { /* nothing visible here: P row = 0 */
        memset(s, 0, (size_t)cols * sizeof(float));
        continue;
      }
      float mx = mt_cpu_row_max(s + lo, vis), m_new = mx > w->m[r] ? mx : w->m[r];
      float corr = mt_cpu_exp(w->m[r] - m_new); /* exactly 1 when the maximum stays */
      w->l[r] = w->l[r] * corr + exp_row(s, lo, vis, cols, m_new);
      w->m[r] = m_new;
      if (corr != 1.0f) {
        float *ar = w->acc + (size_t)r * hs;
#pragma omp simd
        for (int d = 0; d < hs; d++) ar[d] *= corr;
      }
    }
#if IS_BF16
    if (w->dp) {
      /* acc += P V on dot products: P rounded to bf16 once for the product
       * (as GPU flash attention does; the row sums l stay those of the fp32
       * P), V's rows packed in pairs of keys */
      mt_cpu_dot_round_rows(w->Pb, ATT_BC, w->S, ATT_BC, rows, cols);
      mt_cpu_dot_pack_rows(w->Vr, (size_t)mt_dot_round_nc(hs), vb + (size_t)j0 * a->v_rs, a->v_rs,
                           cols, hs);
      mt_cpu_dot_nt_bf16(w->acc, hs, w->Pb, ATT_BC, rows, w->Vr, (size_t)mt_dot_round_nc(hs), hs,
                         (cols + 1) / 2, 1.0f, 1);
      continue;
    }
#endif
    const float *V = FN(rows_f32)(w->V, vb + (size_t)j0 * a->v_rs, a->v_rs, cols, hs, &ldv);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, 1.0f, w->S, ATT_BC, V,
                (int)ldv, 1.0f, w->acc, hs);
  }
  for (int r = 0; r < rows; r++) {
    T *o = out + (size_t)b * a->o_bs + (size_t)(i0 + r) * a->o_rs + (size_t)h * hs;
    float *L = lse + (size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)(i0 + r);
    const float *ar = w->acc + (size_t)r * hs;
    if (w->l[r] > 0.0f) {
      float inv = 1.0f / w->l[r];
      for (int d = 0; d < hs; d++) o[d] = ST(ar[d] * inv);
      *L = w->m[r] + logf(w->l[r]);
    } else { /* no visible key in this block */
      memset(o, 0, (size_t)hs * sizeof(T));
      *L = -INFINITY;
    }
  }
}

void FN(attn_forward)(const mt_attn_block *a, void *out, float *lse, const void *q,
                      const void *k, const void *v) {
  const int nqb = (a->Tq + ATT_BR - 1) / ATT_BR, ntask = a->B * a->NH * nqb;
  if (ntask == 0) return;
  const size_t hs = (size_t)a->hs;
  const int dp = IS_BF16 && mt_cpu_dot_bf16_usable(a->hs); /* once per call, for every task */
  int blas_threads, team = mt_cpu_blas_serial_begin(&blas_threads);
#pragma omp parallel num_threads(team)
  {
    fwd_scratch w = {.S = scratch(SC_S, (size_t)ATT_BR * ATT_BC),
                     .acc = scratch(SC_ACC, ATT_BR * hs), .m = scratch(SC_M, ATT_BR),
                     .l = scratch(SC_L, ATT_BR), .dp = dp};
    if (IS_BF16 && dp) {
      w.Kp = mt_cpu_scratch(SC_KP, (size_t)ATT_BC * (hs / 2) * sizeof(uint32_t));
      w.Pb = mt_cpu_scratch(SC_PB, (size_t)ATT_BR * ATT_BC * sizeof(mt_bf16));
      w.Vr = mt_cpu_scratch(SC_V, (size_t)(ATT_BC / 2) * mt_dot_round_nc(a->hs) * sizeof(uint32_t));
    } else if (IS_BF16) {
      w.V = scratch(SC_V, ATT_BC * hs);
      w.Q = scratch(SC_Q, ATT_BR * hs), w.K = scratch(SC_K, ATT_BC * hs);
    }
    /* later query blocks see more keys: hand tasks out one at a time */
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < ntask; task++) {
      int qb = task % nqb, bh = task / nqb;
      FN(forward_task)(a, out, lse, q, k, v, bh / a->NH, bh % a->NH, qb * ATT_BR, &w);
    }
  }
  mt_cpu_blas_serial_end(blas_threads);
}

/* ------------------------------------------------------------------ */
/* merge                                                               */

/* (out, lse) and (part, part_lse) over disjoint key sets -> the result
 * over both; the weights in double, as the LSE sits in float. */
void FN(attn_merge)(const mt_attn_block *a, void *out_, float *lse, const void *part_,
                    const float *part_lse) {
  T *out = out_;
  const T *part = part_;
  const int hs = a->hs, NH = a->NH, rows = a->B * a->Tq;
#pragma omp parallel for schedule(static)
  for (int bi = 0; bi < rows; bi++) {
    int b = bi / a->Tq, i = bi % a->Tq;
    for (int h = 0; h < NH; h++) {
      size_t lo = (size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)i;
      size_t oo = (size_t)b * a->o_bs + (size_t)i * a->o_rs + (size_t)h * hs;
      float l1 = lse[lo], l2 = part_lse[lo];
      if (l2 == -INFINITY) continue;
      T *o = out + oo;
      const T *p = part + oo;
      if (l1 == -INFINITY) {
        memcpy(o, p, (size_t)hs * sizeof(T));
        lse[lo] = l2;
        continue;
      }
      double mx = l1 > l2 ? l1 : l2;
      double w1 = exp((double)l1 - mx), w2 = exp((double)l2 - mx), s = w1 + w2;
      float c1 = (float)(w1 / s), c2 = (float)(w2 / s);
      for (int d = 0; d < hs; d++) o[d] = ST(c1 * LD(o[d]) + c2 * LD(p[d]));
      lse[lo] = (float)(mx + log(s));
    }
  }
}

/* ------------------------------------------------------------------ */
/* backward                                                            */

/* Every query block of head h, batch b against every key block it sees:
 *   P  = exp(scale q.k - lse)            (recomputed, rows x cols)
 *   dV += P^T dO         dP = dO V^T      dS = P (dP - D),  D = rowsum(dO O)
 *   dQ += scale dS K     dK += scale dS^T Q
 * P in S, dP and then dS in dP (ATT_BR x ATT_BC each); D, L (ATT_BR). */
static void FN(backward_head)(const mt_attn_block *a, T *dq, T *dk, T *dv, const T *dout,
                              const T *out, const float *lse, const T *q, const T *k,
                              const T *v, int b, int h, const bwd_scratch *w) {
  const int hs = a->hs, first = w->first;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t hoff = (size_t)h * hs;
  const int kall = keys_end(a, a->Tq); /* every key a row of this call sees */
  if (first) { /* the rows no product reaches: the keys no row sees */
    FN(zero_rows)(dk + (size_t)b * a->k_bs + hoff + (size_t)kall * a->k_rs, a->k_rs,
                  a->Tk - kall, hs);
    FN(zero_rows)(dv + (size_t)b * a->v_bs + hoff + (size_t)kall * a->v_rs, a->v_rs,
                  a->Tk - kall, hs);
  }
  if (kall == 0) {
    if (first) FN(zero_rows)(dq + (size_t)b * a->q_bs + hoff, a->q_rs, a->Tq, hs);
    return;
  }
  const T *kb = k + (size_t)b * a->k_bs + hoff, *vb = v + (size_t)b * a->v_bs + hoff;
  size_t ldk = 0, ldv = 0, lddk, lddv;
  const float *K = NULL, *V = NULL;
#if IS_BF16
  /* Kp, Vp: the head's keys packed once in pairs along hs (for S and dP),
   * Kr in pairs of keys (for dQ) */
  const size_t ldp = (size_t)mt_dot_round_nc(kall), ldh = (size_t)mt_dot_round_nc(hs);
  if (w->dp) {
    mt_cpu_dot_pack_pairs(w->Kp, ldp, kb, a->k_rs, kall, hs / 2);
    mt_cpu_dot_pack_pairs(w->Vp, ldp, vb, a->v_rs, kall, hs / 2);
    mt_cpu_dot_pack_rows(w->Kr, ldh, kb, a->k_rs, kall, hs);
  } else
#endif
  {
    K = FN(rows_f32)(w->K, kb, a->k_rs, kall, hs, &ldk);
    V = FN(rows_f32)(w->V, vb, a->v_rs, kall, hs, &ldv);
  }
  float *dK =
      FN(acc_begin)(w->dK, dk + (size_t)b * a->k_bs + hoff, a->k_rs, kall, hs, first, &lddk);
  float *dV =
      FN(acc_begin)(w->dV, dv + (size_t)b * a->v_bs + hoff, a->v_rs, kall, hs, first, &lddv);
  for (int i0 = 0; i0 < a->Tq; i0 += ATT_BR) {
    const int i1 = mt_min_int(i0 + ATT_BR, a->Tq), rows = i1 - i0;
    const int kbeg = keys_begin(a, b, i0), kend = keys_end(a, i1);
    const size_t qoff = (size_t)b * a->q_bs + (size_t)i0 * a->q_rs + hoff;
    if (kend <= kbeg) {
      if (first) FN(zero_rows)(dq + qoff, a->q_rs, rows, hs);
      continue;
    }
    const size_t ooff = (size_t)b * a->o_bs + (size_t)i0 * a->o_rs + hoff;
    size_t ldq = 0, ldo, lddo, lddq;
    const float *Q = NULL;
#if IS_BF16
    if (w->dp) { /* q and dout in pairs of rows, for dK and dV */
      mt_cpu_dot_pack_rows(w->Qr, ldh, q + qoff, a->q_rs, rows, hs);
      mt_cpu_dot_pack_rows(w->dOr, ldh, dout + ooff, a->o_rs, rows, hs);
    } else
#endif
      Q = FN(rows_f32)(w->Q, q + qoff, a->q_rs, rows, hs, &ldq);
    const float *O = FN(rows_f32)(w->O, out + ooff, a->o_rs, rows, hs, &ldo);
    const float *dO = FN(rows_f32)(w->dO, dout + ooff, a->o_rs, rows, hs, &lddo);
    float *dQ = FN(acc_begin)(w->dQ, dq + qoff, a->q_rs, rows, hs, first, &lddq);
    for (int r = 0; r < rows; r++) {
      const float *o = O + (size_t)r * ldo, *dy = dO + (size_t)r * lddo;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < hs; d++) dot += o[d] * dy[d];
      w->D[r] = dot;
      w->L[r] = lse[(size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)(i0 + r)];
    }
    for (int j0 = kbeg; j0 < kend; j0 += ATT_BC) {
      const int cols = mt_min_int(ATT_BC, kend - j0);
#if IS_BF16
      if (w->dp)
        mt_cpu_dot_nt_bf16(w->S, ATT_BC, q + qoff, a->q_rs, rows, w->Kp + j0, ldp, cols, hs / 2,
                           scale, 0);
      else
#endif
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, Q, (int)ldq,
                    K + (size_t)j0 * ldk, (int)ldk, 0.0f, w->S, ATT_BC);
      for (int r = 0; r < rows; r++) {
        float *s = w->S + (size_t)r * ATT_BC;
        int lo = 0, vis = w->L[r] == -INFINITY ? 0 : keys_visible(a, b, i0 + r, j0, cols, &lo);
        exp_row(s, lo, vis, cols, w->L[r] == -INFINITY ? 0.0f : w->L[r]);
      }
#if IS_BF16
      if (w->dp) {
        /* dV += P^T dO with P rounded to bf16 once (as GPU flash attention
         * does), packed in pairs of query rows */
        mt_cpu_dot_round_rows(w->Pb, ATT_BC, w->S, ATT_BC, rows, cols);
        mt_cpu_dot_pack_rows(w->Pw, ATT_BC, w->Pb, ATT_BC, rows, cols);
        mt_cpu_dot_tn_bf16(dV + (size_t)j0 * lddv, (int)lddv, w->Pw, ATT_BC, cols, w->dOr, ldh, hs,
                           (rows + 1) / 2, 1.0f, 1);
        mt_cpu_dot_nt_bf16(w->dP, ATT_BC, dout + ooff, a->o_rs, rows, w->Vp + j0, ldp, cols,
                           hs / 2, 1.0f, 0);
      } else
#endif
      {
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, 1.0f, w->S, ATT_BC,
                    dO, (int)lddo, 1.0f, dV + (size_t)j0 * lddv, (int)lddv);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, 1.0f, dO, (int)lddo,
                    V + (size_t)j0 * ldv, (int)ldv, 0.0f, w->dP, ATT_BC);
      }
      for (int r = 0; r < rows; r++) {
        const float *p = w->S + (size_t)r * ATT_BC;
        float *ds = w->dP + (size_t)r * ATT_BC, Dr = w->D[r];
#pragma omp simd
        for (int c = 0; c < cols; c++) ds[c] = p[c] * (ds[c] - Dr);
      }
#if IS_BF16
      if (w->dp) {
        /* dQ += scale dS K, dK += scale dS^T Q with dS rounded to bf16 once
         * (as GPU flash attention does); j0 is even (keys_begin), so Kr's
         * pairs start at key j0 */
        mt_cpu_dot_round_rows(w->Pb, ATT_BC, w->dP, ATT_BC, rows, cols);
        mt_cpu_dot_nt_bf16(dQ, (int)lddq, w->Pb, ATT_BC, rows, w->Kr + (size_t)(j0 / 2) * ldh, ldh,
                           hs, (cols + 1) / 2, scale, 1);
        mt_cpu_dot_pack_rows(w->Pw, ATT_BC, w->Pb, ATT_BC, rows, cols);
        mt_cpu_dot_tn_bf16(dK + (size_t)j0 * lddk, (int)lddk, w->Pw, ATT_BC, cols, w->Qr, ldh, hs,
                           (rows + 1) / 2, scale, 1);
        continue;
      }
#endif
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, scale, w->dP, ATT_BC,
                  K + (size_t)j0 * ldk, (int)ldk, 1.0f, dQ, (int)lddq);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, scale, w->dP, ATT_BC, Q,
                  (int)ldq, 1.0f, dK + (size_t)j0 * lddk, (int)lddk);
    }
    FN(acc_end)(dq + qoff, a->q_rs, dQ, rows, hs, first);
  }
  FN(acc_end)(dk + (size_t)b * a->k_bs + hoff, a->k_rs, dK, kall, hs, first);
  FN(acc_end)(dv + (size_t)b * a->v_bs + hoff, a->v_rs, dV, kall, hs, first);
}

/* attn_backward (first 0: dq, dk, dv accumulate) and attn_backward_first
 * (1: written) */
static void FN(attn_bwd)(const mt_attn_block *a, void *dq, void *dk, void *dv, const void *dout,
                         const void *out, const float *lse, const void *q, const void *k,
                         const void *v, int first) {
  const int nhead = a->B * a->NH;
  if (nhead == 0) return;
  if (a->Tq == 0 || a->Tk == 0) {
    /* nothing to sum: the first call still writes its zeros (a head's
     * rows of dq, dk, dv; the ones the other side leaves empty) */
    if (first)
#pragma omp parallel for schedule(static)
      for (int bh = 0; bh < nhead; bh++) {
        const size_t b = (size_t)(bh / a->NH), ho = (size_t)(bh % a->NH) * a->hs;
        FN(zero_rows)((T *)dq + b * a->q_bs + ho, a->q_rs, a->Tq, a->hs);
        FN(zero_rows)((T *)dk + b * a->k_bs + ho, a->k_rs, a->Tk, a->hs);
        FN(zero_rows)((T *)dv + b * a->v_bs + ho, a->v_rs, a->Tk, a->hs);
      }
    return;
  }
  const size_t hs = (size_t)a->hs, tk = (size_t)a->Tk;
  const int dp = IS_BF16 && mt_cpu_dot_bf16_usable(a->hs); /* once per call, for every task */
  int blas_threads, team = mt_cpu_blas_serial_begin(&blas_threads);
#pragma omp parallel num_threads(team)
  {
    bwd_scratch w = {.S = scratch(SC_S, (size_t)ATT_BR * ATT_BC),
                     .dP = scratch(SC_DP, (size_t)ATT_BR * ATT_BC), .D = scratch(SC_M, ATT_BR),
                     .L = scratch(SC_L, ATT_BR), .dp = dp, .first = first};
    if (IS_BF16) {
      w.O = scratch(SC_O, ATT_BR * hs);
      w.dO = scratch(SC_DO, ATT_BR * hs), w.dQ = scratch(SC_ACC, ATT_BR * hs);
      w.dK = scratch(SC_DK, tk * hs), w.dV = scratch(SC_DV, tk * hs);
      if (dp) {
        size_t np = hs / 2, ldp = (size_t)mt_dot_round_nc(a->Tk), ldh = mt_dot_round_nc(a->hs);
        w.Kp = mt_cpu_scratch(SC_KP, np * ldp * sizeof(uint32_t));
        w.Vp = mt_cpu_scratch(SC_VP, np * ldp * sizeof(uint32_t));
        w.Kr = mt_cpu_scratch(SC_K, (tk + 1) / 2 * ldh * sizeof(uint32_t));
        w.Qr = mt_cpu_scratch(SC_Q, ATT_BR / 2 * ldh * sizeof(uint32_t));
        w.dOr = mt_cpu_scratch(SC_V, ATT_BR / 2 * ldh * sizeof(uint32_t));
        w.Pb = mt_cpu_scratch(SC_PB, (size_t)ATT_BR * ATT_BC * sizeof(mt_bf16));
        w.Pw = mt_cpu_scratch(SC_PW, (size_t)(ATT_BR / 2) * ATT_BC * sizeof(uint32_t));
      } else {
        w.Q = scratch(SC_Q, ATT_BR * hs), w.K = scratch(SC_K, tk * hs);
        w.V = scratch(SC_V, tk * hs);
      }
    }
#pragma omp for schedule(static)
    for (int bh = 0; bh < nhead; bh++)
      FN(backward_head)(a, dq, dk, dv, dout, out, lse, q, k, v, bh / a->NH, bh % a->NH, &w);
  }
  mt_cpu_blas_serial_end(blas_threads);
}

void FN(attn_backward)(const mt_attn_block *a, void *dq, void *dk, void *dv, const void *dout,
                       const void *out, const float *lse, const void *q, const void *k,
                       const void *v) {
  FN(attn_bwd)(a, dq, dk, dv, dout, out, lse, q, k, v, 0);
}

void FN(attn_backward_first)(const mt_attn_block *a, void *dq, void *dk, void *dv,
                             const void *dout, const void *out, const float *lse, const void *q,
                             const void *k, const void *v) {
  FN(attn_bwd)(a, dq, dk, dv, dout, out, lse, q, k, v, 1);
}
