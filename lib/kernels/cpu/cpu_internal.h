/* Functions shared between the CPU backend's files (not public). */
#ifndef MT_KERNELS_CPU_INTERNAL_H
#define MT_KERNELS_CPU_INTERNAL_H

#include <stddef.h>

#include "kernels/kernels.h"

void mt_cpu_gelu_forward(float *out, const float *inp, size_t n);
void mt_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* attention by blocks and strided copies (attention_flash.c; see kernels.h) */
void mt_cpu_attn_forward(const mt_attn_block *a, float *out, float *lse, const float *q,
                         const float *k, const float *v);
void mt_cpu_attn_merge(const mt_attn_block *a, float *out, float *lse, const float *part,
                       const float *part_lse);
void mt_cpu_attn_backward(const mt_attn_block *a, float *dq, float *dk, float *dv,
                          const float *dout, const float *out, const float *lse, const float *q,
                          const float *k, const float *v);
void mt_cpu_copy_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                    size_t cols);
void mt_cpu_add_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                   size_t cols);

/* The OpenBLAS pool size is global: set it to 1 for a parallel region whose
 * threads each call sgemm (*blas_threads: the size to restore), and back.
 * Returns the team size the region must ask for with num_threads(): an
 * OpenMP OpenBLAS changes OpenMP's default along with its pool. */
int mt_cpu_blas_serial_begin(int *blas_threads);
void mt_cpu_blas_serial_end(int blas_threads);

/* Row loops of the softmaxes, vectorised (rows_cpu.c: a polynomial exp,
 * relative error below 2e-7; arguments below -87 give exp(-87)). The inputs
 * must be finite. y may alias x. */
float mt_cpu_exp(float x);                             /* one value */
float mt_cpu_row_max(const float *x, int n);           /* max of x[0..n), n >= 1 */
/* y[i] = exp(x[i] - shift) for i < n; returns their sum (float, or double) */
float mt_cpu_row_exp(float *y, const float *x, int n, float shift);
double mt_cpu_row_exp_f64(float *y, const float *x, int n, float shift);

/* Mixture-of-Experts ops (moe_cpu.c) and the grouped GEMM (grouped_gemm.c),
 * as in kernels.h. */
void mt_cpu_moe_router_forward(float *probs, float *lse, int *top_idx, float *top_w,
                               const float *logits, const float *bias, int N, int E, int k);
void mt_cpu_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                const int *top_idx, const float *top_w, const float *dtop_w,
                                const float *aux_grad, int rows_per_seq, float z_grad, int N,
                                int E, int k);
void mt_cpu_moe_prob_sums(float *sums, const float *probs, int N, int E, int rows_per_seq);
void mt_cpu_gather_rows(float *out, const float *inp, const int *idx, int n, int C);
void mt_cpu_moe_combine(float *out, const float *y, const int *slot, const float *w, int N, int C,
                        int k);
void mt_cpu_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y,
                                 const int *slot, const float *w, int N, int C, int k);
void mt_cpu_moe_gather_sum(float *dx, const float *src, const int *slot, int N, int C, int k);
void mt_cpu_grouped_matmul_forward(float *out, const float *inp, const float *w,
                                   const float *bias, const int *off, int G, int C, int OC);
void mt_cpu_grouped_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                    const float *inp, const float *w, const int *off, int G,
                                    int C, int OC);

#endif
