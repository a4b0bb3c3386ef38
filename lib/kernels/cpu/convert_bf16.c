/* fp32 <-> bf16 conversion of whole tensors, vectorised.
 * The rounding is integer arithmetic on the fp32 bits (kernels.h's
 * mt_bf16_from_f32): gcc turns the loop into AVX-512 integer compares,
 * adds and shifts. Not vcvtneps2bf16: that instruction treats subnormal
 * inputs as zero and flushes subnormal results, so it would not round like
 * the scalar definition (and it exists only on AVX512-BF16 CPUs). Memory
 * bound either way. */
#include "kernels/cpu/cpu_internal.h"

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

/* the op table's convert: widened, rounded, or copied */
void mt_cpu_convert(void *dst, mt_dtype dst_t, const void *src, mt_dtype src_t, size_t n) {
  if (dst_t == MT_DT_BF16 && src_t == MT_DT_F32)
    mt_bf16_from_f32_n(dst, src, n);
  else if (dst_t == MT_DT_F32 && src_t == MT_DT_BF16)
    mt_bf16_to_f32_n(dst, src, n);
  else if (dst_t == src_t && dst_t == MT_DT_F32)
    mt_cpu_copy_f32(dst, src, n);
  else if (dst_t == src_t && dst_t == MT_DT_BF16)
    mt_cpu_copy_bf16(dst, src, n);
  else
    mt_die("convert: %s to %s is not a conversion of the op table", mt_dtype_name(src_t),
           mt_dtype_name(dst_t));
}
