/* fp32 <-> bf16 conversion of whole tensors, vectorised.
 * The rounding is integer arithmetic on the fp32 bits (kernels.h's
 * mt_bf16_from_f32): gcc turns the loop into AVX-512 integer compares,
 * adds and shifts. Not vcvtneps2bf16: that instruction treats subnormal
 * inputs as zero and flushes subnormal results, so it would not round like
 * the scalar definition (and it exists only on AVX512-BF16 CPUs). Memory
 * bound either way. */
#include "kernels/cpu/bf16_internal.h"

#include <omp.h>
#include <string.h>

/* above this many elements the work is split over the threads in
 * contiguous pieces (one core does not saturate memory bandwidth) */
#define MT_CVT_PAR_MIN ((size_t)1 << 15)

void mt_bf16_from_f32_serial(mt_bf16 *dst, const float *src, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) dst[i] = mt_bf16_from_f32(src[i]);
}

void mt_bf16_to_f32_serial(float *dst, const mt_bf16 *src, size_t n) {
#pragma omp simd
  for (size_t i = 0; i < n; i++) dst[i] = mt_bf16_to_f32(src[i]);
}

void mt_bf16_from_f32_n(mt_bf16 *dst, const float *src, size_t n) {
  if (n < MT_CVT_PAR_MIN || omp_in_parallel()) {
    mt_bf16_from_f32_serial(dst, src, n);
    return;
  }
#pragma omp parallel
  {
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    mt_bf16_from_f32_serial(dst + i0, src + i0, i1 - i0);
  }
}

void mt_bf16_to_f32_n(float *dst, const mt_bf16 *src, size_t n) {
  if (n < MT_CVT_PAR_MIN || omp_in_parallel()) {
    mt_bf16_to_f32_serial(dst, src, n);
    return;
  }
#pragma omp parallel
  {
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    mt_bf16_to_f32_serial(dst + i0, src + i0, i1 - i0);
  }
}

void mt_bf16_rows_to_f32(float *dst, const mt_bf16 *src, int rows, int n) {
  if (rows <= 0) return;
  mt_bf16_to_f32_serial(dst, src, (size_t)n);
  for (int r = 1; r < rows; r++) memcpy(dst + (size_t)r * n, dst, (size_t)n * sizeof(float));
}
