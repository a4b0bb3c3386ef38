/* Functions shared between the CPU backend's files (not public). */
#ifndef MT_KERNELS_CPU_INTERNAL_H
#define MT_KERNELS_CPU_INTERNAL_H

#include <stddef.h>

void mt_cpu_gelu_forward(float *out, const float *inp, size_t n);
void mt_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* OpenBLAS to one thread for a parallel region whose threads each call
 * sgemm (returns the previous count), and back (ops_cpu.c). */
int mt_cpu_blas_serial_begin(void);
void mt_cpu_blas_serial_end(int n);

/* Mixture-of-Experts ops (moe_cpu.c) and the grouped GEMM (grouped_gemm.c),
 * as in kernels.h. */
void mt_cpu_moe_router_forward(float *probs, float *lse, int *top_idx, float *top_w,
                               const float *logits, int N, int E, int k);
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
