/* Bodies of layernorm.c, over the storage type T (typed.h). */

/* one row of layernorm_forward: y (C) = (x - mean) * rstd * w + b; the
 * fused residual_layernorm_forward runs the same code on the row it has
 * just summed (the same bits) */
static inline __attribute__((always_inline)) void FN(layernorm_row)(
    T *y, float *mean, float *rstd, const T *x, const T *w, const T *b, int C) {
  const float eps = 1e-5f;
  float m = 0.0f;
#pragma omp simd reduction(+ : m)
  for (int c = 0; c < C; c++) m += LD(x[c]);
  m /= C;
  float v = 0.0f;
#pragma omp simd reduction(+ : v)
  for (int c = 0; c < C; c++) {
    float d = LD(x[c]) - m;
    v += d * d;
  }
  v /= C;
  float s = 1.0f / sqrtf(v + eps);
  for (int c = 0; c < C; c++) y[c] = ST((LD(x[c]) - m) * s * LD(w[c]) + LD(b[c]));
  *mean = m;
  *rstd = s;
}

/* one row of rmsnorm_forward: y (C) = x * rstd * w */
static inline __attribute__((always_inline)) void FN(rmsnorm_row)(T *y, float *rstd, const T *x,
                                                                  const T *w, int C, float eps) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; c++) ss += LD(x[c]) * LD(x[c]);
  float s = 1.0f / sqrtf(ss / C + eps);
  for (int c = 0; c < C; c++) y[c] = ST(LD(x[c]) * s * LD(w[c]));
  *rstd = s;
}

/* one row of residual_forward: r (C) = a + b, r may alias a or b */
static inline __attribute__((always_inline)) void FN(residual_row)(T *r, const T *a, const T *b,
                                                                   int C) {
#pragma omp simd
  for (int c = 0; c < C; c++) r[c] = ST(LD(a[c]) + LD(b[c]));
}

/* out (N,C) = (inp - mean) * rstd * w + b, per row n of inp (N,C);
 * mean (N), rstd (N) = 1/sqrt(var + 1e-5) with the biased variance */
void FN(layernorm_forward)(void *out_, float *mean, float *rstd, const void *inp_,
                           const void *w_, const void *b_, int N, int C) {
  T *out = out_;
  const T *inp = inp_, *w = w_, *b = b_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    FN(layernorm_row)(out + (size_t)n * C, mean + n, rstd + n, inp + (size_t)n * C, w, b, C);
}

/* res = a + b, then out = layernorm(res), row by row in one parallel
 * region: the norm reads the row it has just written while it is in
 * cache. The same bits as residual_forward then layernorm_forward. */
void FN(residual_layernorm_forward)(void *res_, void *out_, float *mean, float *rstd,
                                    const void *a_, const void *b_, const void *w_,
                                    const void *bias_, int N, int C) {
  T *res = res_, *out = out_;
  const T *a = a_, *b = b_, *w = w_, *bias = bias_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const size_t o = (size_t)n * C;
    FN(residual_row)(res + o, a + o, b + o, C);
    FN(layernorm_row)(out + o, mean + n, rstd + n, res + o, w, bias, C);
  }
}

/* With norm = (inp - mean) * rstd and g = w * dout (per row, over C):
 *   dinp += (g - mean_c(g) - norm * mean_c(g * norm)) * rstd (acc 0: = 0 + that)
 *   dw   += sum_n dout * norm        db += sum_n dout */
static void FN(layernorm_bwd)(T *dinp, float *dw, float *db, const T *dout, const T *inp,
                              const T *w, const float *mean, const float *rstd, int N, int C,
                              int acc) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n];
    float g_mean = 0.0f, gnorm_mean = 0.0f;
#pragma omp simd reduction(+ : g_mean, gnorm_mean)
    for (int c = 0; c < C; c++) {
      float norm = (LD(x[c]) - m) * s;
      float g = LD(w[c]) * LD(dy[c]);
      g_mean += g;
      gnorm_mean += g * norm;
    }
    g_mean /= C;
    gnorm_mean /= C;
    T *dx = dinp + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float norm = (LD(x[c]) - m) * s;
      float g = LD(w[c]) * LD(dy[c]);
      dx[c] = ST((acc ? LD(dx[c]) : 0.0f) + (g - g_mean - norm * gnorm_mean) * s);
    }
  }
  int nblocks = (C + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * MT_COL_BLOCK, c1 = mt_min_int(c0 + MT_COL_BLOCK, C);
    float dw_acc[MT_COL_BLOCK] = {0}, db_acc[MT_COL_BLOCK] = {0};
    for (int n = 0; n < N; n++) {
      const T *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
      float m = mean[n], s = rstd[n];
      for (int c = c0; c < c1; c++) {
        dw_acc[c - c0] += (LD(x[c]) - m) * s * LD(dy[c]);
        db_acc[c - c0] += LD(dy[c]);
      }
    }
    for (int c = c0; c < c1; c++) {
      dw[c] += dw_acc[c - c0];
      db[c] += db_acc[c - c0];
    }
  }
}

void FN(layernorm_backward)(void *dinp, float *dw, float *db, const void *dout, const void *inp,
                            const void *w, const float *mean, const float *rstd, int N, int C) {
  FN(layernorm_bwd)(dinp, dw, db, dout, inp, w, mean, rstd, N, C, 1);
}

void FN(layernorm_backward_first)(void *dinp, float *dw, float *db, const void *dout,
                                  const void *inp, const void *w, const float *mean,
                                  const float *rstd, int N, int C) {
  FN(layernorm_bwd)(dinp, dw, db, dout, inp, w, mean, rstd, N, C, 0);
}

/* RMSNorm: out (N,C) = inp * rstd * w, rstd (N) = 1/sqrt(mean_c(inp^2) + eps) */
void FN(rmsnorm_forward)(void *out_, float *rstd, const void *inp_, const void *w_, int N, int C,
                         float eps) {
  T *out = out_;
  const T *inp = inp_, *w = w_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++)
    FN(rmsnorm_row)(out + (size_t)n * C, rstd + n, inp + (size_t)n * C, w, C, eps);
}

/* res = a + b, then out = rmsnorm(res), row by row (as
 * residual_layernorm_forward) */
void FN(residual_rmsnorm_forward)(void *res_, void *out_, float *rstd, const void *a_,
                                  const void *b_, const void *w_, int N, int C, float eps) {
  T *res = res_, *out = out_;
  const T *a = a_, *b = b_, *w = w_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const size_t o = (size_t)n * C;
    FN(residual_row)(res + o, a + o, b + o, C);
    FN(rmsnorm_row)(out + o, rstd + n, res + o, w, C, eps);
  }
}

/* With norm = inp * rstd and g = w * dout (per row, over C):
 *   dinp += (g - norm * mean_c(g * norm)) * rstd (acc 0: = 0 + that)
 *   dw += sum_n dout * norm */
static void FN(rmsnorm_bwd)(T *dinp, float *dw, const T *dout, const T *inp, const T *w,
                            const float *rstd, int N, int C, int acc) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    float s = rstd[n], gnorm_mean = 0.0f;
#pragma omp simd reduction(+ : gnorm_mean)
    for (int c = 0; c < C; c++) gnorm_mean += LD(w[c]) * LD(dy[c]) * LD(x[c]) * s;
    gnorm_mean /= C;
    T *dx = dinp + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float norm = LD(x[c]) * s, g = LD(w[c]) * LD(dy[c]);
      dx[c] = ST((acc ? LD(dx[c]) : 0.0f) + (g - norm * gnorm_mean) * s);
    }
  }
  int nblocks = (C + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * MT_COL_BLOCK, c1 = mt_min_int(c0 + MT_COL_BLOCK, C);
    float dw_acc[MT_COL_BLOCK] = {0};
    for (int n = 0; n < N; n++) {
      const T *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
      float s = rstd[n];
      for (int c = c0; c < c1; c++) dw_acc[c - c0] += LD(x[c]) * s * LD(dy[c]);
    }
    for (int c = c0; c < c1; c++) dw[c] += dw_acc[c - c0];
  }
}

void FN(rmsnorm_backward)(void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                          const float *rstd, int N, int C) {
  FN(rmsnorm_bwd)(dinp, dw, dout, inp, w, rstd, N, C, 1);
}

void FN(rmsnorm_backward_first)(void *dinp, float *dw, const void *dout, const void *inp,
                                const void *w, const float *rstd, int N, int C) {
  FN(rmsnorm_bwd)(dinp, dw, dout, inp, w, rstd, N, C, 0);
}
