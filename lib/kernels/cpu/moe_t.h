/* Bodies of moe.c, over the storage type T (typed.h). */

/* out (n,C) WRITES: row i = inp row idx[i] */
void FN(gather_rows)(void *out_, const void *inp_, const int *idx, int n, int C) {
  T *out = out_;
  const T *inp = inp_;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < n; i++)
    memcpy(out + (size_t)i * C, inp + (size_t)idx[i] * C, (size_t)C * sizeof(T));
}

/* out row n = sum over slots >= 0 of w y[slot], fp32 in j order, one
 * rounding */
void FN(moe_combine)(void *out_, const void *y_, const int *slot, const float *w, int N, int C,
                     int k) {
  T *out = out_;
  const T *y = y_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    T *o = out + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float acc = 0.0f;
      for (int j = 0; j < k; j++) {
        int s = slot[(size_t)n * k + j];
        if (s >= 0) acc += w[(size_t)n * k + j] * LD(y[(size_t)s * C + c]);
      }
      o[c] = ST(acc);
    }
  }
}

/* dy row slot = w dout row n (WRITES); dw (N,k) fp32 = dot(dout, y row) */
void FN(moe_combine_backward)(void *dy_, float *dw, const void *dout_, const void *y_,
                              const int *slot, const float *w, int N, int C, int k) {
  T *dy = dy_;
  const T *dout = dout_, *y = y_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const T *g = dout + (size_t)n * C;
    for (int j = 0; j < k; j++) {
      int s = slot[(size_t)n * k + j];
      if (s < 0) {
        dw[(size_t)n * k + j] = 0.0f;
        continue;
      }
      const T *yr = y + (size_t)s * C;
      T *dyr = dy + (size_t)s * C;
      float wj = w[(size_t)n * k + j], dot = 0.0f;
      for (int c = 0; c < C; c++) {
        float gc = LD(g[c]);
        dyr[c] = ST(wj * gc);
        dot += gc * LD(yr[c]);
      }
      dw[(size_t)n * k + j] = dot;
    }
  }
}

/* dx row n = dx + the rows src[slot] of slots >= 0, fp32 in j order, one
 * rounding */
void FN(moe_gather_sum)(void *dx_, const void *src_, const int *slot, int N, int C, int k) {
  T *dx = dx_;
  const T *src = src_;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    T *d = dx + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float acc = LD(d[c]);
      for (int j = 0; j < k; j++) {
        int s = slot[(size_t)n * k + j];
        if (s >= 0) acc += LD(src[(size_t)s * C + c]);
      }
      d[c] = ST(acc);
    }
  }
}
