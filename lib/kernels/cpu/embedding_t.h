/* Bodies of embedding.c, over the storage type T (typed.h). */

/* Vocabulary-parallel encoder: rows [v0, v0+Vl) of wte live here as (Vl,C).
 * out = wte[inp-v0] (or 0 for a token held elsewhere) + wpe[position] (when
 * wpe is given; the position pos[bt], or t without pos): the one addition of the whole encoder, so summing the ranks'
 * outputs (one holds the token, the others add exact zeros) reproduces it.
 * A lone term is stored as it is (exact in bf16 too). */
void FN(encoder_vp_forward)(void *out_, const int *inp, const void *wte_, int v0, int Vl,
                            const void *wpe_, const int *pos, int B, int T_, int C) {
  T *out = out_;
  const T *wte = wte_, *wpe = wpe_;
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T_; bt++) {
    int row = inp[bt] - v0;
    T *o = out + (size_t)bt * C;
    const T *e = row >= 0 && row < Vl ? wte + (size_t)row * C : NULL;
    const T *p = wpe ? wpe + (size_t)(pos ? pos[bt] : bt % T_) * C : NULL;
    if (e && p)
      for (int c = 0; c < C; c++) o[c] = ST(LD(e[c]) + LD(p[c]));
    else if (e || p)
      memcpy(o, e ? e : p, (size_t)C * sizeof(T));
    else
      memset(o, 0, (size_t)C * sizeof(T));
  }
}

/* out (B,T,C) = wte[inp[b,t]] (Vp,C) + wpe[t] (T_max,C) */
void FN(encoder_forward)(void *out, const int *inp, const void *wte, const void *wpe, int B,
                         int T_, int C) {
  FN(encoder_vp_forward)(out, inp, wte, 0, 1 << 30, wpe, NULL, B, T_, C);
}

/* dwte[inp-v0] += dout for tokens in [v0, v0+Vl), dwpe[position] += dout
 * (pos[bt], or t) unless dwpe is NULL, in fp32. Two positions may carry the same token, so the
 * work is split by channel block, not by position: each thread owns whole
 * columns of dwte and dwpe and adds positions in (b,t) order, the same
 * order at any thread count. */
void FN(encoder_vp_backward)(float *dwte, float *dwpe, const void *dout_, const int *inp,
                             const int *pos, int v0, int Vl, int B, int T_, int C) {
  const T *dout = dout_;
  int nblocks = (C + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * MT_COL_BLOCK, c1 = mt_min_int(c0 + MT_COL_BLOCK, C);
    for (int bt = 0; bt < B * T_; bt++) {
      int row = inp[bt] - v0;
      const T *dy = dout + (size_t)bt * C;
      if (row >= 0 && row < Vl) {
        float *d = dwte + (size_t)row * C;
        for (int c = c0; c < c1; c++) d[c] += LD(dy[c]);
      }
      if (dwpe) {
        float *d = dwpe + (size_t)(pos ? pos[bt] : bt % T_) * C;
        for (int c = c0; c < c1; c++) d[c] += LD(dy[c]);
      }
    }
  }
}

void FN(encoder_backward)(float *dwte, float *dwpe, const void *dout, const int *inp, int B,
                          int T_, int C) {
  FN(encoder_vp_backward)(dwte, dwpe, dout, inp, NULL, 0, 1 << 30, B, T_, C);
}
