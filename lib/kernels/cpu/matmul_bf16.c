/* bf16 linear layers and the grouped GEMM of the experts (see kernels.h's
 * mt_ops_bf16): the products through mt_cpu_gemm_bf16 (gemm_bf16.c), the
 * bias gradient here. */
#include "kernels/cpu/bf16_internal.h"
#include "kernels/cpu/cpu_internal.h"

#include <omp.h>

/* Columns per task of the bias gradient: each task owns its columns and
 * walks the rows in order (the same bits at any thread count). */
#define MT_COL_BLOCK 64

/* dbias (OC) += column sums of dout (rows, OC) bf16, in fp32, rows in order */
static void dbias_add(float *dbias, const mt_bf16 *dout, int rows, int OC, int parallel) {
  int nblocks = (OC + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static) if (parallel)
  for (int blk = 0; blk < nblocks; blk++) {
    int o0 = blk * MT_COL_BLOCK, o1 = o0 + MT_COL_BLOCK < OC ? o0 + MT_COL_BLOCK : OC;
    float acc[MT_COL_BLOCK] = {0};
    for (int n = 0; n < rows; n++) {
      const mt_bf16 *dy = dout + (size_t)n * OC;
      for (int o = o0; o < o1; o++) acc[o - o0] += mt_bf16_to_f32(dy[o]);
    }
    for (int o = o0; o < o1; o++) dbias[o] += acc[o - o0];
  }
}

/* out (N,OC) = round(inp (N,C) @ w^T + bias) */
void mt_cpu_matmul_forward_bf16(mt_bf16 *out, const mt_bf16 *inp, const mt_bf16 *w,
                                const mt_bf16 *bias, int N, int C, int OC) {
  mt_cpu_gemm_bf16(MT_GEMM_NT, N, OC, C, inp, w, bias, out, NULL, 0, 0);
}

/* dinp = round(dinp + dout @ w); dw += dout^T @ inp; dbias += sums of dout */
void mt_cpu_matmul_backward_bf16(mt_bf16 *dinp, float *dw, float *dbias, const mt_bf16 *dout,
                                 const mt_bf16 *inp, const mt_bf16 *w, int N, int C, int OC) {
  if (dinp) mt_cpu_gemm_bf16(MT_GEMM_NN, N, C, OC, dout, w, NULL, dinp, NULL, 1, 0);
  if (dw) mt_cpu_gemm_bf16(MT_GEMM_TN, OC, C, N, dout, inp, NULL, NULL, dw, 1, 0);
  if (dbias) dbias_add(dbias, dout, N, OC, 1);
}

/* ------------------------------------------------------------------ */
/* grouped GEMM: as grouped_gemm.c. With at least as many non-empty groups
 * as threads, groups go to threads (dynamic) and each product runs on its
 * thread alone, so a group's result depends on its rows only: the same
 * bits at any thread count. Otherwise the groups run in turn, each product
 * on every thread. */

static int nonempty_groups(const int *off, int G) {
  int n = 0;
  for (int g = 0; g < G; g++) n += off[g + 1] > off[g];
  return n;
}

static void forward_group(mt_bf16 *out, const mt_bf16 *inp, const mt_bf16 *w,
                          const mt_bf16 *bias, const int *off, int g, int C, int OC) {
  int rows = off[g + 1] - off[g];
  if (rows <= 0) return;
  mt_cpu_gemm_bf16(MT_GEMM_NT, rows, OC, C, inp + (size_t)off[g] * C, w + (size_t)g * OC * C,
                   bias ? bias + (size_t)g * OC : NULL, out + (size_t)off[g] * OC, NULL, 0, 1);
}

static void backward_group(mt_bf16 *dinp, float *dw, float *dbias, const mt_bf16 *dout,
                           const mt_bf16 *inp, const mt_bf16 *w, const int *off, int g, int C,
                           int OC, int parallel) {
  int rows = off[g + 1] - off[g];
  if (rows <= 0) return;
  const mt_bf16 *dy = dout + (size_t)off[g] * OC;
  if (dinp)
    mt_cpu_gemm_bf16(MT_GEMM_NN, rows, C, OC, dy, w + (size_t)g * OC * C, NULL,
                     dinp + (size_t)off[g] * C, NULL, 1, 1);
  if (dw)
    mt_cpu_gemm_bf16(MT_GEMM_TN, OC, C, rows, dy, inp + (size_t)off[g] * C, NULL, NULL,
                     dw + (size_t)g * OC * C, 1, 1);
  if (dbias) dbias_add(dbias + (size_t)g * OC, dy, rows, OC, parallel);
}

void mt_cpu_grouped_matmul_forward_bf16(mt_bf16 *out, const mt_bf16 *inp, const mt_bf16 *w,
                                        const mt_bf16 *bias, const int *off, int G, int C,
                                        int OC) {
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

void mt_cpu_grouped_matmul_backward_bf16(mt_bf16 *dinp, float *dw, float *dbias,
                                         const mt_bf16 *dout, const mt_bf16 *inp,
                                         const mt_bf16 *w, const int *off, int G, int C,
                                         int OC) {
  int threads = mt_kernels_threads();
  if (threads > 1 && nonempty_groups(off, G) >= threads) {
    int blas, team = mt_cpu_blas_serial_begin(&blas);
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int g = 0; g < G; g++)
      backward_group(dinp, dw, dbias, dout, inp, w, off, g, C, OC, 0);
    mt_cpu_blas_serial_end(blas);
  } else {
    for (int g = 0; g < G; g++) backward_group(dinp, dw, dbias, dout, inp, w, off, g, C, OC, 1);
  }
}
