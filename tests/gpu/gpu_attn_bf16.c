/* gpu_attn_bf16: the CUDA backend's block attention and cross-entropy on
 * bf16 storage (attn_forward, attn_merge, attn_backward,
 * softmax_xent_forward, softmax_xent_backward, xent_vp_max, xent_vp_exp,
 * xent_vp_finish, xent_vp_backward of mt_ops_cuda, t = MT_DT_BF16) against
 * the CPU's (mt_ops_cpu) on the same bf16 inputs.
 *
 *   gpu_attn_bf16 fp32|bf16    (the backend's precision; these ops are the
 *                               same under both)
 *
 * Attention on the layouts gpu_ops uses (attn_pair): q|k|v in the fused
 * (B,T,3C) buffer, keys and values in the ring's (B,T,2C) buffer, blocks at
 * row offsets with zigzag positions, Tq != Tk, causal and not, head sizes
 * 24 to 256 (each tile shape of the kernels), rows that see no key (LSE
 * exactly -inf, out exactly 0). Every buffer starts random, outputs too, so
 * a write outside the block shows. Merge: of the CPU's halves of a key block
 * on both sides, and the GPU's halves merged against one CPU call over the
 * block. The backward runs on the same out and LSE (the CPU's), so that
 * only the backward differs. Cross-entropy with V < Vp (padding exactly 0),
 * in place, the vocabulary-parallel pieces on slices (one without real
 * columns), and the pieces with v0 = 0, Vl = Vp, nvalid = V against the
 * whole, bit for bit. Two runs give the same bits. The table has no NULL
 * member.
 *
 * Error: max |gpu - cpu| / max |cpu| over the tensor, bf16 widened exactly
 * (NaN fails: mt_check_err accepts only err <= tol).
 * Tolerances. Each stored bf16 element (out, dq, dk, dv, probabilities) is
 * one rounding of an fp32 value that both sides compute from the same bf16
 * inputs; the fp32 values differ by the GPU's expf against the CPU's
 * polynomial exp (2e-7 relative) and by summation order over up to 120
 * keys: within 1e-5 of max |ref| (gpu_ops's fp32 tolerance for the same
 * kernels). Rounding to nearest moves each by at most half a unit in the
 * last place (ulp), so the two can differ by the fp32 difference plus one
 * ulp, and one ulp of a bf16 value v (8 significant bits) is at most 2^-7
 * |v| <= 2^-7 max |ref|:
 *   TOL_BF16 = 2^-7 + 1e-5        one rounding on each side; and since
 *                                 two values within 1e-5 round apart only
 *                                 where a rounding boundary falls between
 *                                 them (about 1e-5 / 2^-8 of the elements
 *                                 at the most), at most TOL_SHARE = 1% of
 *                                 the elements may differ at all (measured:
 *                                 under 0.05%). Rounding at other points (P
 *                                 or a probability rounded to bf16 before
 *                                 its last product, a truncating store)
 *                                 moves 20-50% of them while its error stays
 *                                 within TOL_BF16.
 *   TOL_BF16_2 = 2 * 2^-7 + 1e-5  the GPU's halves (each rounded) merged
 *                                 (rounded again) against one CPU call
 *   TOL_FP32 = 1e-5               LSE (relative to max(1, |lse|)), losses,
 *                                 the row sums (relative to max(1, |sum|))
 *   0                             the row max, and the backward of the
 *                                 cross-entropy on the same probabilities
 *                                 ((p - onehot) dloss, the same two fp32
 *                                 operations and one rounding on both sides)
 * No GPU: prints "SKIP: <reason>" and exits 77. */
#include "gpu_compare.h"

#define ULP_BF16 (1.0 / 128)
#define TOL_FP32 1e-5
#define TOL_BF16 (ULP_BF16 + TOL_FP32)
#define TOL_BF16_2 (2 * ULP_BF16 + TOL_FP32)
#define TOL_SHARE 0.01

/* ------------------------------------------------------------------ */
/* bf16 comparisons                                                    */

/* A bf16 tensor (device d) against the CPU's (host r): max |gpu - ref| /
 * max |ref| within tol and, where share_tol >= 0, the share of elements
 * whose bits differ within share_tol */
static void cmp_bf16(const char *what, const mt_bf16 *r, const mt_bf16 *d, size_t n, double tol,
                     double share_tol) {
  mt_bf16 *h = host_bytes(d, n * sizeof(mt_bf16));
  double diff = 0.0, scale = 0.0;
  size_t differ = 0;
  for (size_t i = 0; i < n; i++) {
    double x = mt_bf16_to_f32(r[i]);
    diff = mt_worst(diff, fabs((double)mt_bf16_to_f32(h[i]) - x));
    if (fabs(x) > scale) scale = fabs(x);
    differ += h[i] != r[i];
  }
  free(h);
  mt_check_err(what, diff / (scale > 0 ? scale : 1.0), tol);
  if (share_tol >= 0) {
    char line[128];
    snprintf(line, sizeof line, "  elements not bit-equal: %zu of %zu", differ, n);
    mt_check_err(line, n ? (double)differ / n : 0.0, share_tol);
  }
}
/* one rounding on each side (see the tolerances) */
#define CMPB1(what, r, d, n) cmp_bf16(what, r, d, n, TOL_BF16, TOL_SHARE)
#define CMPB(what, r, d, n, tol) cmp_bf16(what, r, d, n, tol, -1.0)

/* 1 when the two device buffers hold the same bytes */
static int same_dev_bytes(const void *d1, const void *d2, size_t bytes) {
  void *x = host_bytes(d1, bytes);
  int same = same_bytes(x, d2, bytes);
  free(x);
  return same;
}

/* 1 when columns [c0, cols) of every row of device d (rows, cols) are 0 */
static int zero_columns(const mt_bf16 *d, int rows, int cols, int c0) {
  mt_bf16 *h = host_bytes(d, (size_t)rows * cols * sizeof(mt_bf16));
  int zero = 1;
  for (int n = 0; n < rows; n++)
    for (int j = c0 < 0 ? 0 : c0; j < cols; j++) zero &= h[(size_t)n * cols + j] == 0;
  free(h);
  return zero;
}

/* ------------------------------------------------------------------ */
/* block attention                                                     */

static void attn_case(const attn_pair *p) {
  const attn_layout L = attn_layout_of(p);
  /* the block as the CPU reads it (documents' starts on the host) and as
   * the GPU does (on the device) */
  int *doc_h = attn_doc_lo(p), *doc_d = doc_h ? devi(doc_h, (size_t)p->B * p->Tq) : NULL;
  mt_attn_block ah = L.a;
  ah.q_lo = doc_h;
  const mt_attn_block *a = &ah, ad = attn_on(&ah, doc_d);
  const size_t sq = L.n_qkv * 2, skv = L.n_kv * 2, so = L.n_out * 2, sl = L.n_lse * 4;
  /* host: inputs and outputs random; out2, lse2 start as out, lse (the
   * GPU's merged halves are compared with the CPU's out over the whole
   * buffer) */
  mt_bf16 *qkv = rnd_bf16(L.n_qkv, -2, 2), *kv = rnd_bf16(L.n_kv, -2, 2);
  mt_bf16 *out = rnd_bf16(L.n_out, -1, 1), *dout = rnd_bf16(L.n_out, -1, 1);
  mt_bf16 *dqkv = rnd_bf16(L.n_qkv, -1, 1), *dkv = rnd_bf16(L.n_kv, -1, 1);
  mt_bf16 *part = rnd_bf16(L.n_out, -1, 1), *out2 = dup_bytes(out, so);
  float *lse = rnd(L.n_lse, -1, 1), *part_lse = rnd(L.n_lse, -1, 1), *lse2 = dup_bytes(lse, sl);
  mt_bf16 *d_qkv = dev_bytes(qkv, sq), *d_kv = dev_bytes(kv, skv), *d_out = dev_bytes(out, so);
  mt_bf16 *d_dout = dev_bytes(dout, so), *d_dqkv = dev_bytes(dqkv, sq);
  mt_bf16 *d_dkv = dev_bytes(dkv, skv), *d_part = dev_bytes(part, so);
  mt_bf16 *d_out2 = dev_bytes(out2, so);
  float *d_lse = dev(lse, L.n_lse), *d_part_lse = dev(part_lse, L.n_lse);
  float *d_lse2 = dev(lse2, L.n_lse);
  /* where the keys (and values, and their gradients) are */
  const mt_bf16 *kb = L.fused ? qkv : kv, *d_kb = L.fused ? d_qkv : d_kv;
  mt_bf16 *dkb = L.fused ? dqkv : dkv, *d_dkb = L.fused ? d_dqkv : d_dkv;
  char what[128];

  /* forward over the whole key block */
  cpu->attn_forward(BF16, a, out + L.oo, lse + L.lo, qkv + L.qo, kb + L.ko, kb + L.vo);
  gpu->attn_forward(BF16, &ad, d_out + L.oo, d_lse + L.lo, d_qkv + L.qo, d_kb + L.ko, d_kb + L.vo);
  CMPB1("attn_forward out", out, d_out, L.n_out);
  mt_check_err("attn_forward lse (-inf rows exactly)", lse_err_of(lse, d_lse, L.n_lse),
               TOL_FP32);
  {
    mt_bf16 *go = host_bytes(d_out, so);
    long no_key = 0, nonzero = 0;
    for (int b = 0; b < a->B; b++)
      for (int h = 0; h < a->NH; h++)
        for (int i = 0; i < a->Tq; i++) {
          if (!isinf(lse[(size_t)b * a->l_bs + (size_t)h * a->l_hs + L.lo + i])) continue;
          no_key++;
          const mt_bf16 *o = go + (size_t)b * a->o_bs + L.oo + (size_t)i * a->o_rs +
                             (size_t)h * a->hs;
          for (int c = 0; c < a->hs; c++) nonzero += o[c] != 0;
        }
    snprintf(what, sizeof what, "attn_forward: %ld rows see no key: out exactly 0", no_key);
    mt_check_true(what, nonzero == 0);
    free(go);
  }

  /* the key block's halves: out2 = the later half, part = the earlier one */
  mt_attn_block first = *a, second = *a;
  const int half = a->Tk / 2;
  first.Tk = half;
  second.Tk = a->Tk - half;
  second.k_pos0 = a->k_pos0 + half;
  const size_t hk = (size_t)half * L.krs;
  const mt_attn_block firstd = attn_on(&first, doc_d), secondd = attn_on(&second, doc_d);
  cpu->attn_forward(BF16, &second, out2 + L.oo, lse2 + L.lo, qkv + L.qo, kb + L.ko + hk,
                    kb + L.vo + hk);
  cpu->attn_forward(BF16, &first, part + L.oo, part_lse + L.lo, qkv + L.qo, kb + L.ko, kb + L.vo);
  gpu->attn_forward(BF16, &secondd, d_out2 + L.oo, d_lse2 + L.lo, d_qkv + L.qo, d_kb + L.ko + hk,
                    d_kb + L.vo + hk);
  gpu->attn_forward(BF16, &firstd, d_part + L.oo, d_part_lse + L.lo, d_qkv + L.qo, d_kb + L.ko,
                    d_kb + L.vo);
  {
    /* the CPU's halves merged on both sides */
    mt_bf16 *e_out2 = dev_bytes(out2, so), *e_part = dev_bytes(part, so);
    float *e_lse2 = dev(lse2, L.n_lse), *e_part_lse = dev(part_lse, L.n_lse);
    mt_bf16 *m_out = dup_bytes(out2, so);
    float *m_lse = dup_bytes(lse2, sl);
    cpu->attn_merge(BF16, a, m_out + L.oo, m_lse + L.lo, part + L.oo, part_lse + L.lo);
    gpu->attn_merge(BF16, &ad, e_out2 + L.oo, e_lse2 + L.lo, e_part + L.oo, e_part_lse + L.lo);
    CMPB1("attn_merge out (the CPU's halves)", m_out, e_out2, L.n_out);
    mt_check_err("attn_merge lse (the CPU's halves)", lse_err_of(m_lse, e_lse2, L.n_lse),
                 TOL_FP32);
    dfree(e_out2, so), dfree(e_part, so), dfree(e_lse2, sl), dfree(e_part_lse, sl);
    free(m_out), free(m_lse);
  }
  /* the GPU's halves merged = one CPU call over the block */
  gpu->attn_merge(BF16, &ad, d_out2 + L.oo, d_lse2 + L.lo, d_part + L.oo, d_part_lse + L.lo);
  CMPB("GPU halves merged = one CPU call: out", out, d_out2, L.n_out, TOL_BF16_2);
  mt_check_err("GPU halves merged = one CPU call: lse", lse_err_of(lse, d_lse2, L.n_lse),
               TOL_FP32);

  /* backward from the CPU's out and lse on both sides, accumulating into
   * random gradients */
  gpu->upload(d_out, out, so);
  gpu->upload(d_lse, lse, sl);
  cpu->attn_backward(BF16, a, dqkv + L.qo, dkb + L.ko, dkb + L.vo, dout + L.oo, out + L.oo,
                     lse + L.lo, qkv + L.qo, kb + L.ko, kb + L.vo);
  gpu->attn_backward(BF16, &ad, d_dqkv + L.qo, d_dkb + L.ko, d_dkb + L.vo, d_dout + L.oo,
                     d_out + L.oo, d_lse + L.lo, d_qkv + L.qo, d_kb + L.ko, d_kb + L.vo);
  CMPB1(L.fused ? "attn_backward dq|dk|dv (one buffer)" : "attn_backward dq", dqkv, d_dqkv,
        L.n_qkv);
  if (!L.fused) CMPB1("attn_backward dk|dv", dkv, d_dkv, L.n_kv);

  dfree(d_qkv, sq), dfree(d_kv, skv), dfree(d_out, so), dfree(d_dout, so), dfree(d_dqkv, sq);
  dfree(d_dkv, skv), dfree(d_part, so), dfree(d_out2, so), dfree(d_lse, sl);
  dfree(d_part_lse, sl), dfree(d_lse2, sl);
  free(qkv), free(kv), free(out), free(dout), free(dqkv), free(dkv), free(part), free(out2);
  free(lse), free(part_lse), free(lse2);
  if (doc_d) dfree(doc_d, (size_t)p->B * p->Tq * 4);
  free(doc_h);
}

static void test_attn(void) {
  /* zigzag chunks of context parallelism over 2 ranks, chunk length 48:
   * rank 0 holds positions [0, 48) and [144, 192), rank 1 [48, 144) */
  const attn_pair pairs[] = {
      /* the model's own block, one per tile shape: hs <= 64, <= 128, > 128 */
      {"self", 2, 2, 64, 100, 0, 0, 100, 0, 0, 100, 0, 1, 0},
      {"self", 1, 2, 128, 70, 0, 0, 70, 0, 0, 70, 0, 0, 0},
      {"self", 1, 1, 256, 40, 0, 0, 40, 0, 0, 40, 0, 1, 0},
      {"self", 1, 3, 24, 37, 0, 0, 37, 0, 0, 37, 0, 0, 0},
      /* ring: rank 0's late chunk against its own, and against rank 1's
       * early chunk as it arrives in the (B,T,2C) buffer */
      {"ring diagonal", 1, 2, 64, 96, 0, 48, 48, 144, 48, 48, 144, 1, 0},
      {"ring received", 2, 2, 64, 96, 96, 48, 48, 144, 0, 48, 48, 1, 0},
      /* Tq != Tk, partly visible (a head size that is no tile's multiple) */
      {"Tq != Tk", 1, 2, 96, 90, 130, 10, 75, 100, 5, 120, 60, 1, 0},
      {"Tq != Tk", 1, 2, 200, 50, 70, 3, 45, 0, 1, 60, 500, 0, 0},
      /* keys partly, then wholly, after the queries: rows see no key */
      {"later keys", 1, 2, 32, 60, 0, 0, 60, 0, 0, 60, 30, 1, 0},
      {"no key visible", 1, 1, 16, 30, 0, 0, 30, 0, 0, 30, 100, 1, 0},
      /* documents: each row sees its own document only */
      {"documents self", 2, 2, 64, 100, 0, 0, 100, 0, 0, 100, 0, 1, 23},
      {"documents ring received", 2, 2, 64, 96, 96, 48, 48, 144, 0, 48, 48, 1, 40},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) attn_case(&pairs[i]);
}

/* ------------------------------------------------------------------ */
/* cross-entropy                                                       */

/* the pieces on one slice [v0, v0 + Vl) of the padded vocabulary */
static void xent_slice(const int *tgt, const int *d_tgt, int N, int V, int v0, int Vl) {
  const int nvalid = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;
  const size_t nl = (size_t)N * Vl, sb = nl * 2, sf = (size_t)N * 4, sd = 2 * (size_t)N * 8;
  printf("cross-entropy pieces v0=%d Vl=%d nvalid=%d\n", v0, Vl, nvalid);
  mt_bf16 *lg = rnd_bf16(nl, -5, 5);
  float *rmax = rnd(N, 0, 1), *ls = rnd(N, 0, 1);
  double *st = malloc(sd);
  mt_bf16 *d_lg = dev_bytes(lg, sb);
  float *d_rmax = dev(rmax, N), *d_ls = dev(ls, N);
  double *d_st = gpu->alloc(MT_MEM_OTHER, sd);

  cpu->xent_vp_max(BF16, rmax, lg, N, Vl, nvalid);
  gpu->xent_vp_max(BF16, d_rmax, d_lg, N, Vl, nvalid);
  if (nvalid > 0) {
    CMP("xent_vp_max", rmax, d_rmax, N, 0.0);
  } else {
    float *h = host_bytes(d_rmax, sf);
    int all_inf = 1;
    for (int i = 0; i < N; i++) all_inf &= isinf(h[i]) && h[i] < 0;
    mt_check_true("xent_vp_max of a slice without real columns is -inf", all_inf);
    free(h);
    for (int i = 0; i < N; i++) rmax[i] = 0.0f; /* a global max from elsewhere */
    gpu->upload(d_rmax, rmax, sf);
  }
  cpu->xent_vp_exp(BF16, st, lg, rmax, tgt, v0, N, Vl, nvalid);
  gpu->xent_vp_exp(BF16, d_st, d_lg, d_rmax, d_tgt, v0, N, Vl, nvalid);
  double *hst = host_bytes(d_st, sd), se = 0.0;
  for (int i = 0; i < 2 * N; i++) se = mt_worst(se, fabs(hst[i] - st[i]) / fmax(fabs(st[i]), 1.0));
  mt_check_err("xent_vp_exp stats (sum, target logit)", se, TOL_FP32);
  mt_check_true("xent_vp_exp leaves the logits as they are", same_bytes(lg, d_lg, sb));
  for (int i = 0; i < N; i++) st[2 * i] += 1.0, hst[2 * i] += 1.0; /* other ranks' sums */
  gpu->upload(d_st, hst, sd);
  /* in place: probabilities over the logits */
  cpu->xent_vp_finish(BF16, ls, lg, lg, st, rmax, tgt, N, Vl, nvalid);
  gpu->xent_vp_finish(BF16, d_ls, d_lg, d_lg, d_st, d_rmax, d_tgt, N, Vl, nvalid);
  CMP("xent_vp_finish losses", ls, d_ls, N, TOL_FP32);
  CMPB1("xent_vp_finish probs (in place)", lg, d_lg, nl);
  mt_check_true("xent_vp_finish: padding columns exactly 0", zero_columns(d_lg, N, Vl, nvalid));
  /* backward on the same probabilities (the CPU's), in place */
  gpu->upload(d_lg, lg, sb);
  cpu->xent_vp_backward(BF16, lg, lg, tgt, v0, 0.5f, N, Vl, nvalid);
  gpu->xent_vp_backward(BF16, d_lg, d_lg, d_tgt, v0, 0.5f, N, Vl, nvalid);
  CMPB("xent_vp_backward (in place, the CPU's probs)", lg, d_lg, nl, 0.0);
  mt_check_true("xent_vp_backward: padding columns exactly 0", zero_columns(d_lg, N, Vl, nvalid));
  dfree(d_lg, sb), dfree(d_rmax, sf), dfree(d_ls, sf), dfree(d_st, sd);
  free(lg), free(rmax), free(ls), free(st), free(hst);
}

static void test_xent(int N, int V, int Vp) {
  printf("cross-entropy N=%d V=%d Vp=%d\n", N, V, Vp);
  const size_t n = (size_t)N * Vp, sb = n * 2, sf = (size_t)N * 4;
  mt_bf16 *logits = rnd_bf16(n, -5, 5), *probs = rnd_bf16(n, 0, 1);
  float *losses = rnd(N, 0, 1);
  int *tgt = malloc((size_t)N * sizeof(int));
  for (int i = 0; i < N; i++) tgt[i] = (int)(urand(0, 1) * (V - 1));
  tgt[0] = V - 1; /* the last real column */
  mt_bf16 *d_logits = dev_bytes(logits, sb), *d_probs = dev_bytes(probs, sb);
  float *d_losses = dev(losses, N);
  int *d_tgt = devi(tgt, N);

  cpu->softmax_xent_forward(BF16, losses, probs, logits, tgt, N, V, Vp);
  gpu->softmax_xent_forward(BF16, d_losses, d_probs, d_logits, d_tgt, N, V, Vp);
  CMP("softmax_xent_forward losses", losses, d_losses, N, TOL_FP32);
  CMPB1("softmax_xent_forward probs", probs, d_probs, n);
  mt_check_true("softmax_xent_forward: padding columns exactly 0", zero_columns(d_probs, N, Vp, V));
  mt_check_true("softmax_xent_forward leaves the logits as they are",
                same_bytes(logits, d_logits, sb));
  /* in place (probs over logits): the CPU's bits, and the GPU's own */
  mt_bf16 *l2 = dup_bytes(logits, sb), *d_l2 = dev_bytes(logits, sb);
  float *d_losses2 = dev(losses, N);
  cpu->softmax_xent_forward(BF16, losses, l2, l2, tgt, N, V, Vp);
  gpu->softmax_xent_forward(BF16, d_losses2, d_l2, d_l2, d_tgt, N, V, Vp);
  CMPB1("softmax_xent_forward in place", l2, d_l2, n);
  mt_check_true("softmax_xent_forward in place = out of place, bit for bit",
                same_dev_bytes(d_l2, d_probs, sb) && same_dev_bytes(d_losses2, d_losses, sf));

  /* the pieces with v0 = 0, Vl = Vp, nvalid = V: the whole's bits */
  {
    float *d_rmax = gpu->alloc(MT_MEM_OTHER, sf), *d_ls = dev(losses, N);
    double *d_st = gpu->alloc(MT_MEM_OTHER, 2 * (size_t)N * 8);
    mt_bf16 *d_p = dev_bytes(logits, sb);
    gpu->xent_vp_max(BF16, d_rmax, d_p, N, Vp, V);
    gpu->xent_vp_exp(BF16, d_st, d_p, d_rmax, d_tgt, 0, N, Vp, V);
    gpu->xent_vp_finish(BF16, d_ls, d_p, d_p, d_st, d_rmax, d_tgt, N, Vp, V);
    mt_check_true("xent_vp pieces (v0 = 0, Vl = Vp) = softmax_xent_forward, bit for bit",
                  same_dev_bytes(d_p, d_probs, sb) && same_dev_bytes(d_ls, d_losses, sf));
    gpu->xent_vp_backward(BF16, d_p, d_p, d_tgt, 0, 0.01f, N, Vp, V);
    gpu->softmax_xent_backward(BF16, d_l2, d_probs, d_tgt, 0.01f, N, V, Vp);
    mt_check_true("xent_vp_backward (v0 = 0) = softmax_xent_backward, bit for bit",
                  same_dev_bytes(d_p, d_l2, sb));
    dfree(d_rmax, sf), dfree(d_ls, sf), dfree(d_st, 2 * (size_t)N * 8), dfree(d_p, sb);
  }
  /* backward on the same probabilities (the CPU's), in place */
  gpu->upload(d_probs, probs, sb);
  cpu->softmax_xent_backward(BF16, probs, probs, tgt, 0.01f, N, V, Vp);
  gpu->softmax_xent_backward(BF16, d_probs, d_probs, d_tgt, 0.01f, N, V, Vp);
  CMPB("softmax_xent_backward (in place, the CPU's probs)", probs, d_probs, n, 0.0);
  mt_check_true("softmax_xent_backward: padding columns exactly 0",
                zero_columns(d_probs, N, Vp, V));

  /* the vocabulary-parallel pieces on a slice, and on one beyond V */
  xent_slice(tgt, d_tgt, N, V, V / 3, Vp / 2);
  xent_slice(tgt, d_tgt, N, V, V + 3, Vp - V - 3);

  dfree(d_logits, sb), dfree(d_probs, sb), dfree(d_losses, sf), dfree(d_tgt, (size_t)N * 4);
  dfree(d_l2, sb), dfree(d_losses2, sf);
  free(logits), free(probs), free(losses), free(tgt), free(l2);
}

/* ------------------------------------------------------------------ */
/* the same inputs twice: the same bits                                */

static void test_determinism(void) {
  printf("determinism\n");
  const attn_pair p = {"twice", 1, 2, 64, 80, 0, 0, 80, 0, 0, 80, 0, 1, 0};
  const attn_layout L = attn_layout_of(&p);
  const mt_attn_block *a = &L.a;
  const size_t sq = L.n_qkv * 2, so = L.n_out * 2, sl = L.n_lse * 4;
  const int N = 20, V = 90, Vp = 96;
  const size_t sx = (size_t)N * Vp * 2;
  mt_bf16 *qkv = rnd_bf16(L.n_qkv, -2, 2), *dout = rnd_bf16(L.n_out, -1, 1);
  mt_bf16 *logits = rnd_bf16((size_t)N * Vp, -5, 5);
  int tgt[20];
  for (int i = 0; i < N; i++) tgt[i] = (int)(urand(0, 1) * (V - 1));
  int *d_tgt = devi(tgt, N);
  void *res[2][4];
  for (int run = 0; run < 2; run++) {
    mt_bf16 *d_qkv = dev_bytes(qkv, sq), *d_dout = dev_bytes(dout, so);
    mt_bf16 *d_out = gpu->alloc(MT_MEM_OTHER, so), *d_dqkv = gpu->alloc(MT_MEM_OTHER, sq);
    float *d_lse = gpu->alloc(MT_MEM_OTHER, sl), *d_losses = gpu->alloc(MT_MEM_OTHER, N * 4);
    mt_bf16 *d_p = dev_bytes(logits, sx);
    gpu->attn_forward(BF16, a, d_out, d_lse, d_qkv, d_qkv + L.ko, d_qkv + L.vo);
    gpu->attn_backward(BF16, a, d_dqkv, d_dqkv + L.ko, d_dqkv + L.vo, d_dout, d_out, d_lse, d_qkv,
                       d_qkv + L.ko, d_qkv + L.vo);
    gpu->softmax_xent_forward(BF16, d_losses, d_p, d_p, d_tgt, N, V, Vp);
    res[run][0] = host_bytes(d_out, so);
    res[run][1] = host_bytes(d_dqkv, sq);
    res[run][2] = host_bytes(d_p, sx);
    res[run][3] = host_bytes(d_losses, (size_t)N * 4);
    dfree(d_qkv, sq), dfree(d_dout, so), dfree(d_out, so), dfree(d_dqkv, sq);
    dfree(d_lse, sl), dfree(d_losses, (size_t)N * 4), dfree(d_p, sx);
  }
  mt_check_true("attn_forward twice: same bits", !memcmp(res[0][0], res[1][0], so));
  mt_check_true("attn_backward twice: same bits", !memcmp(res[0][1], res[1][1], sq));
  mt_check_true("softmax_xent_forward twice: same bits",
                !memcmp(res[0][2], res[1][2], sx) && !memcmp(res[0][3], res[1][3], N * 4));
  for (int run = 0; run < 2; run++)
    for (int i = 0; i < 4; i++) free(res[run][i]);
  dfree(d_tgt, (size_t)N * 4);
  free(qkv), free(dout), free(logits);
}

/* ------------------------------------------------------------------ */

/* the nine ops under test are members of a complete table */
static int test_table(void) {
  printf("the CUDA op table\n");
  char missing[512];
  int n = mt_ops_missing(gpu, missing, sizeof missing);
  if (n) printf("  the CUDA table lacks %s\n", missing);
  mt_check_err("CUDA table: members missing", n, 0);
  return n == 0;
}

int main(int argc, char **argv) {
  int bf16, rc = gpu_compare_start(&argc, &argv, "gpu_attn_bf16", 54321, &bf16);
  if (rc != 0) return rc;
  if (test_table()) {
    test_attn();
    test_xent(37, 101, 128);
    test_determinism();
  }
  return gpu_compare_finish("gpu_attn_bf16");
}
