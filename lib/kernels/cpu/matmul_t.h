/* Bodies of matmul.c, over the storage type T (typed.h). */

/* ---- the GEMM engine of the type: the three products of a linear layer */

/* out (rows, OC) = x (rows, C) @ w^T (w (OC,C)) + bias (OC, or NULL).
 * fp32: the bias written first (a row at a time), then one sgemm "NT" with
 * beta = 1. grouped: a group of a grouped GEMM (its rows vary per call). */
static void FN(gemm_nt)(T *out, const T *x, const T *w, const T *bias, int rows, int C, int OC,
                        int grouped) {
#if IS_BF16
  mt_cpu_gemm_bf16(MT_GEMM_NT, rows, OC, C, x, w, bias, out, NULL, 0, grouped);
#else
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static) if (!grouped)
    for (int n = 0; n < rows; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, OC, C, 1.0f, x, C, w, C, beta, out,
              OC);
#endif
}

/* dx (rows, C) += dy (rows, OC) @ w (OC,C); acc 0: dx = (beta 0) */
static void FN(gemm_nn)(T *dx, const T *dy, const T *w, int rows, int C, int OC, int acc,
                        int grouped) {
#if IS_BF16
  mt_cpu_gemm_bf16(MT_GEMM_NN, rows, C, OC, dy, w, NULL, dx, NULL, acc, grouped);
#else
  (void)grouped;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, C, OC, 1.0f, dy, OC, w, C,
              acc ? 1.0f : 0.0f, dx, C);
#endif
}

/* dw (OC,C) += dy^T (OC, rows) @ x (rows, C), fp32 */
static void FN(gemm_tn_acc)(float *dw, const T *dy, const T *x, int rows, int C, int OC,
                            int grouped) {
#if IS_BF16
  mt_cpu_gemm_bf16(MT_GEMM_TN, OC, C, rows, dy, x, NULL, NULL, dw, 1, grouped);
#else
  (void)grouped;
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, rows, 1.0f, dy, OC, x, C, 1.0f, dw,
              C);
#endif
}

/* dbias (OC) += column sums of dy (rows, OC), in fp32: a column block per
 * task, rows in order (the same bits at any thread count) */
static void FN(dbias_add)(float *dbias, const T *dy, int rows, int OC, int parallel) {
  int nblocks = (OC + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static) if (parallel)
  for (int blk = 0; blk < nblocks; blk++) {
    int o0 = blk * MT_COL_BLOCK, o1 = mt_min_int(o0 + MT_COL_BLOCK, OC);
    float acc[MT_COL_BLOCK] = {0};
    for (int n = 0; n < rows; n++) {
      const T *d = dy + (size_t)n * OC;
      for (int o = o0; o < o1; o++) acc[o - o0] += LD(d[o]);
    }
    for (int o = o0; o < o1; o++) dbias[o] += acc[o - o0];
  }
}

/* ---- linear layers ---- */

/* out (N,OC) = inp (N,C) @ w^T + bias */
void FN(matmul_forward)(void *out, const void *inp, const void *w, const void *bias, int N, int C,
                        int OC) {
  FN(gemm_nt)(out, inp, w, bias, N, C, OC, 0);
}

/* dinp += dout @ w (acc 0: dinp =), dw += dout^T @ inp, dbias += sums of
 * dout; any of dinp, dw, dbias may be NULL (skipped) */
static void FN(linear_backward)(void *dinp, float *dw, float *dbias, const void *dout,
                                const void *inp, const void *w, int N, int C, int OC, int acc) {
  if (dinp) FN(gemm_nn)(dinp, dout, w, N, C, OC, acc, 0);
  if (dw) FN(gemm_tn_acc)(dw, dout, inp, N, C, OC, 0);
  if (dbias) FN(dbias_add)(dbias, dout, N, OC, 1);
}

void FN(matmul_backward)(void *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                         const void *w, int N, int C, int OC) {
  FN(linear_backward)(dinp, dw, dbias, dout, inp, w, N, C, OC, 1);
}

void FN(matmul_backward_first)(void *dinp, float *dw, float *dbias, const void *dout,
                               const void *inp, const void *w, int N, int C, int OC) {
  FN(linear_backward)(dinp, dw, dbias, dout, inp, w, N, C, OC, 0);
}

/* ---- the grouped GEMM: group g is rows [off[g], off[g+1]) ---- */

static void FN(forward_group)(T *out, const T *inp, const T *w, const T *bias, const int *off,
                              int g, int C, int OC) {
  int rows = off[g + 1] - off[g];
  if (rows <= 0) return;
  FN(gemm_nt)(out + (size_t)off[g] * OC, inp + (size_t)off[g] * C, w + (size_t)g * OC * C,
              bias ? bias + (size_t)g * OC : NULL, rows, C, OC, 1);
}

static void FN(backward_group)(T *dinp, float *dw, float *dbias, const T *dout, const T *inp,
                               const T *w, const int *off, int g, int C, int OC, int parallel) {
  int rows = off[g + 1] - off[g];
  if (rows <= 0) return;
  const T *dy = dout + (size_t)off[g] * OC;
  if (dinp)
    FN(gemm_nn)(dinp + (size_t)off[g] * C, dy, w + (size_t)g * OC * C, rows, C, OC, 1, 1);
  if (dw) FN(gemm_tn_acc)(dw + (size_t)g * OC * C, dy, inp + (size_t)off[g] * C, rows, C, OC, 1);
  if (dbias) FN(dbias_add)(dbias + (size_t)g * OC, dy, rows, OC, parallel);
}

void FN(grouped_matmul_forward)(void *out, const void *inp, const void *w, const void *bias,
                                const int *off, int G, int C, int OC) {
  if (groups_on_threads(off, G)) {
    int blas, team = mt_cpu_blas_serial_begin(&blas);
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int g = 0; g < G; g++) FN(forward_group)(out, inp, w, bias, off, g, C, OC);
    mt_cpu_blas_serial_end(blas);
  } else {
    for (int g = 0; g < G; g++) FN(forward_group)(out, inp, w, bias, off, g, C, OC);
  }
}

void FN(grouped_matmul_backward)(void *dinp, float *dw, float *dbias, const void *dout,
                                 const void *inp, const void *w, const int *off, int G, int C,
                                 int OC) {
  if (groups_on_threads(off, G)) {
    int blas, team = mt_cpu_blas_serial_begin(&blas);
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int g = 0; g < G; g++)
      FN(backward_group)(dinp, dw, dbias, dout, inp, w, off, g, C, OC, 0);
    mt_cpu_blas_serial_end(blas);
  } else {
    for (int g = 0; g < G; g++)
      FN(backward_group)(dinp, dw, dbias, dout, inp, w, off, g, C, OC, 1);
  }
}
