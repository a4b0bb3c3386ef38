/* Grouped GEMM on the CPU: the experts of a MoE layer, each a contiguous
 * block of rows (its tokens), one sgemm per expert per direction.
 *
 * Threading: with at least as many non-empty groups as threads, the groups
 * are shared out over OpenMP threads (dynamic: token counts differ) and each
 * sgemm runs on one BLAS thread; a group's result then depends on its rows
 * alone, not on which thread ran it, so a run is bitwise the same twice and
 * at any thread count. With fewer groups than threads (one big expert, a
 * tiny layer) they run one after the other with threaded sgemms, as
 * matmul_forward does. */
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <omp.h>
#include <string.h>

#define MT_COL_BLOCK 64

static int nonempty_groups(const int *off, int G) {
  int n = 0;
  for (int g = 0; g < G; g++) n += off[g + 1] > off[g];
  return n;
}

static void forward_group(float *out, const float *inp, const float *w, const float *bias,
                          const int *off, int g, int C, int OC) {
  int rows = off[g + 1] - off[g];
  if (rows <= 0) return;
  float *o = out + (size_t)off[g] * OC;
  const float *x = inp + (size_t)off[g] * C, *wg = w + (size_t)g * OC * C;
  float beta = 0.0f;
  if (bias) {
    for (int r = 0; r < rows; r++)
      memcpy(o + (size_t)r * OC, bias + (size_t)g * OC, (size_t)OC * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, OC, C, 1.0f, x, C, wg, C, beta, o,
              OC);
}

static void backward_group(float *dinp, float *dw, float *dbias, const float *dout,
                           const float *inp, const float *w, const int *off, int g, int C,
                           int OC) {
  int rows = off[g + 1] - off[g];
  if (rows <= 0) return;
  const float *dy = dout + (size_t)off[g] * OC;
  if (dinp)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, C, OC, 1.0f, dy, OC,
                w + (size_t)g * OC * C, C, 1.0f, dinp + (size_t)off[g] * C, C);
  if (dw)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, rows, 1.0f, dy, OC,
                inp + (size_t)off[g] * C, C, 1.0f, dw + (size_t)g * OC * C, C);
  if (dbias) { /* column sums in row order, a column block at a time */
    float *db = dbias + (size_t)g * OC;
    for (int o0 = 0; o0 < OC; o0 += MT_COL_BLOCK) {
      int o1 = o0 + MT_COL_BLOCK < OC ? o0 + MT_COL_BLOCK : OC;
      float acc[MT_COL_BLOCK] = {0};
      for (int r = 0; r < rows; r++) {
        const float *row = dy + (size_t)r * OC;
        for (int o = o0; o < o1; o++) acc[o - o0] += row[o];
      }
      for (int o = o0; o < o1; o++) db[o] += acc[o - o0];
    }
  }
}

void mt_cpu_grouped_matmul_forward(float *out, const float *inp, const float *w,
                                   const float *bias, const int *off, int G, int C, int OC) {
  int threads = mt_kernels_threads();
  if (threads > 1 && nonempty_groups(off, G) >= threads) {
    int blas, team = mt_cpu_blas_serial_begin(&blas);
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int g = 0; g < G; g++) forward_group(out, inp, w, bias, off, g, C, OC);
    mt_cpu_blas_serial_end(blas);
  } else {
    for (int g = 0; g < G; g++) forward_group(out, inp, w, bias, off, g, C, OC);
  }
}

void mt_cpu_grouped_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                    const float *inp, const float *w, const int *off, int G,
                                    int C, int OC) {
  int threads = mt_kernels_threads();
  if (threads > 1 && nonempty_groups(off, G) >= threads) {
    int blas, team = mt_cpu_blas_serial_begin(&blas);
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int g = 0; g < G; g++) backward_group(dinp, dw, dbias, dout, inp, w, off, g, C, OC);
    mt_cpu_blas_serial_end(blas);
  } else {
    for (int g = 0; g < G; g++) backward_group(dinp, dw, dbias, dout, inp, w, off, g, C, OC);
  }
}
