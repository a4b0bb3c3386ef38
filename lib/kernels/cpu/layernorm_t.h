/* Bodies of layernorm.c, over the storage type T (typed.h). */

/* out (N,C) = (inp - mean) * rstd * w + b, per row n of inp (N,C);
 * mean (N), rstd (N) = 1/sqrt(var + 1e-5) with the biased variance */
void FN(layernorm_forward)(void *out_, float *mean, float *rstd, const void *inp_,
                           const void *w_, const void *b_, int N, int C) {
  T *out = out_;
  const T *inp = inp_, *w = w_, *b = b_;
  const float eps = 1e-5f;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T *x = inp + (size_t)n * C;
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
    T *y = out + (size_t)n * C;
    for (int c = 0; c < C; c++) y[c] = ST((LD(x[c]) - m) * s * LD(w[c]) + LD(b[c]));
    mean[n] = m;
    rstd[n] = s;
  }
}

/* With norm = (inp - mean) * rstd and g = w * dout (per row, over C):
 *   dinp += (g - mean_c(g) - norm * mean_c(g * norm)) * rstd
 *   dw   += sum_n dout * norm        db += sum_n dout */
void FN(layernorm_backward)(void *dinp_, float *dw, float *db, const void *dout_,
                            const void *inp_, const void *w_, const float *mean,
                            const float *rstd, int N, int C) {
  T *dinp = dinp_;
  const T *dout = dout_, *inp = inp_, *w = w_;
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
      dx[c] = ST(LD(dx[c]) + (g - g_mean - norm * gnorm_mean) * s);
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

/* RMSNorm: out (N,C) = inp * rstd * w, rstd (N) = 1/sqrt(mean_c(inp^2) + eps) */
void FN(rmsnorm_forward)(void *out_, float *rstd, const void *inp_, const void *w_, int N, int C,
                         float eps) {
  T *out = out_;
  const T *inp = inp_, *w = w_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T *x = inp + (size_t)n * C;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int c = 0; c < C; c++) ss += LD(x[c]) * LD(x[c]);
    float s = 1.0f / sqrtf(ss / C + eps);
    T *y = out + (size_t)n * C;
    for (int c = 0; c < C; c++) y[c] = ST(LD(x[c]) * s * LD(w[c]));
    rstd[n] = s;
  }
}

/* With norm = inp * rstd and g = w * dout (per row, over C):
 *   dinp += (g - norm * mean_c(g * norm)) * rstd        dw += sum_n dout * norm */
void FN(rmsnorm_backward)(void *dinp_, float *dw, const void *dout_, const void *inp_,
                          const void *w_, const float *rstd, int N, int C) {
  T *dinp = dinp_;
  const T *dout = dout_, *inp = inp_, *w = w_;
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
      dx[c] = ST(LD(dx[c]) + (g - norm * gnorm_mean) * s);
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
