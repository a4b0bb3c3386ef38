/* Functions shared between the CPU backend's bf16 files (not public). */
#ifndef MT_KERNELS_CPU_BF16_INTERNAL_H
#define MT_KERNELS_CPU_BF16_INTERNAL_H

#include <stddef.h>

#include "kernels/kernels.h"

/* The three products of a linear layer (gemm_bf16.c says which is which) */
enum { MT_GEMM_NT = 0, MT_GEMM_NN = 1, MT_GEMM_TN = 2 };

/* C (m,n) = op(A) op(B) on bf16 A, B with fp32 accumulation.
 * NT, NN: into bf16 Cb (Cf NULL): Cb = round(product + bias) (bias (n) or
 * NULL), or with accumulate Cb = round(Cb + product) (bias unused).
 * TN: into fp32 Cf (Cb NULL, bias NULL): Cf = product, or Cf += product.
 * runtime_m: the row count changes from call to call (grouped GEMM), so a
 * cached oneDNN primitive should not be specialised to it. */
void mt_cpu_gemm_bf16(int form, int m, int n, int k, const mt_bf16 *A, const mt_bf16 *B,
                      const mt_bf16 *bias, mt_bf16 *Cb, float *Cf, int accumulate,
                      int runtime_m);

/* The sgemm path's tile: rows, columns and depth block (0: the default,
 * 1024). Tests make them small to run several tiles on small shapes. */
void mt_cpu_gemm_bf16_set_block(int mb, int nb, int kb);

/* dst (rows, n) = each row the bf16 row src (n), in fp32 */
void mt_bf16_rows_to_f32(float *dst, const mt_bf16 *src, int rows, int n);

/* Conversions of n elements on the calling thread alone (inside parallel
 * regions); the same bits as the scalar mt_bf16_from_f32 / _to_f32. */
void mt_bf16_from_f32_serial(mt_bf16 *dst, const float *src, size_t n);
void mt_bf16_to_f32_serial(float *dst, const mt_bf16 *src, size_t n);

/* the ops of mt_ops_bf16 that live in their own files */
void mt_cpu_matmul_forward_bf16(mt_bf16 *out, const mt_bf16 *inp, const mt_bf16 *w,
                                const mt_bf16 *bias, int N, int C, int OC);
void mt_cpu_matmul_backward_bf16(mt_bf16 *dinp, float *dw, float *dbias, const mt_bf16 *dout,
                                 const mt_bf16 *inp, const mt_bf16 *w, int N, int C, int OC);
void mt_cpu_grouped_matmul_forward_bf16(mt_bf16 *out, const mt_bf16 *inp, const mt_bf16 *w,
                                        const mt_bf16 *bias, const int *off, int G, int C,
                                        int OC);
void mt_cpu_grouped_matmul_backward_bf16(mt_bf16 *dinp, float *dw, float *dbias,
                                         const mt_bf16 *dout, const mt_bf16 *inp,
                                         const mt_bf16 *w, const int *off, int G, int C, int OC);
void mt_cpu_gelu_forward_bf16(mt_bf16 *out, const mt_bf16 *inp, size_t n);
void mt_cpu_gelu_backward_bf16(mt_bf16 *dinp, const mt_bf16 *inp, const mt_bf16 *dout, size_t n);
void mt_cpu_attn_forward_bf16(const mt_attn_block *a, mt_bf16 *out, float *lse, const mt_bf16 *q,
                              const mt_bf16 *k, const mt_bf16 *v);
void mt_cpu_attn_merge_bf16(const mt_attn_block *a, mt_bf16 *out, float *lse,
                            const mt_bf16 *part, const float *part_lse);
void mt_cpu_attn_backward_bf16(const mt_attn_block *a, mt_bf16 *dq, mt_bf16 *dk, mt_bf16 *dv,
                               const mt_bf16 *dout, const mt_bf16 *out, const float *lse,
                               const mt_bf16 *q, const mt_bf16 *k, const mt_bf16 *v);
void mt_cpu_gather_rows_bf16(mt_bf16 *out, const mt_bf16 *inp, const int *idx, int n, int C);
void mt_cpu_moe_combine_bf16(mt_bf16 *out, const mt_bf16 *y, const int *slot, const float *w,
                             int N, int C, int k);
void mt_cpu_moe_combine_backward_bf16(mt_bf16 *dy, float *dw, const mt_bf16 *dout,
                                      const mt_bf16 *y, const int *slot, const float *w, int N,
                                      int C, int k);
void mt_cpu_moe_gather_sum_bf16(mt_bf16 *dx, const mt_bf16 *src, const int *slot, int N, int C,
                                int k);

#endif
