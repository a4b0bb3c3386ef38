/* Functions shared between the CPU backend's files (not public). */
#ifndef MT_KERNELS_CPU_INTERNAL_H
#define MT_KERNELS_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

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
 * threads each call sgemm (returns the size to restore), and back. */
int mt_cpu_blas_serial_begin(void);
void mt_cpu_blas_serial_end(int n);

/* exp(x) for x <= 0 in loops the compiler vectorises (libm's expf is a
 * call that may set errno, which stops vectorisation: gcc reports it as
 * clobbering memory). x is clamped to [-87, 0]: exp(-87) = 1.6e-38 stands
 * in for anything smaller (softmax terms that small vanish next to the
 * row's largest, which is exp(0) = 1). x = n ln2 + r with |r| <= ln2/2, e^r
 * by its degree-6 Taylor polynomial (relative error below 2e-7), 2^n put
 * into the exponent bits. Only comparisons and arithmetic: no -ffast-math
 * needed, the same bits on every run. Call it in loops marked
 * `#pragma omp simd` (with reduction clauses for sums and maxima): the
 * pragma lets gcc if-convert the clamps and reassociate the reductions,
 * which it does not do for plain loops without -ffast-math. */
static inline float mt_cpu_exp_neg(float x) {
  x = x < -87.0f ? -87.0f : x;
  x = x > 0.0f ? 0.0f : x;
  float t = x * 1.4426950408889634f - 0.5f; /* t <= 0: truncation rounds to nearest */
  int32_t ni = (int32_t)t;
  float n = (float)ni;
  float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f; /* ln2 = hi + lo */
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 +
            r * (1.0f / 120 + r * (1.0f / 720))))));
  union {
    int32_t i;
    float f;
  } two_n; /* a union, not memcpy: gcc vectorises neither a call nor a memcpy here */
  two_n.i = (ni + 127) << 23;
  return p * two_n.f;
}

#endif
