/* GELU (tanh approximation) on bf16 tensors: fp32 math inside, one rounding
 * per stored value. The polynomial exp and tanh are gelu_cpu.c's (same
 * constants, same order), so on the same inputs the result is the fp32
 * op's, rounded. Compiled with gelu_cpu.c's flags (-ffinite-math-only
 * -fno-trapping-math, see CMakeLists.txt) so the clamps vectorise; the
 * rounding to bf16 is integer arithmetic and keeps NaN whatever the flags. */
#include <math.h>
#include <stdint.h>

#include "kernels/cpu/bf16_internal.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

/* exp(x), x clamped to [-87, 88]: x = n ln2 + r, e^r by its degree-6 Taylor
 * polynomial (relative error below 2e-7), 2^n put into the exponent bits */
static inline float fast_expf(float x) {
  x = fminf(fmaxf(x, -87.0f), 88.0f);
  float t = x * 1.4426950408889634f;
  int32_t ni = (int32_t)(t + copysignf(0.5f, t));
  float n = (float)ni;
  float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f;
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 +
            r * (1.0f / 120 + r * (1.0f / 720))))));
  union {
    int32_t i;
    float f;
  } two_n;
  two_n.i = (ni + 127) << 23;
  return p * two_n.f;
}

static inline float fast_tanhf(float u) {
  u = fminf(fmaxf(u, -9.0f), 9.0f);
  float e = fast_expf(2.0f * u);
  return (e - 1.0f) / (e + 1.0f);
}

void mt_cpu_gelu_forward_bf16(mt_bf16 *out, const mt_bf16 *inp, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = mt_bf16_to_f32(inp[i]);
    out[i] = mt_bf16_from_f32(0.5f * x *
                              (1.0f + fast_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x))));
  }
}

/* dinp = round(dinp + gelu'(inp) dout) */
void mt_cpu_gelu_backward_bf16(mt_bf16 *dinp, const mt_bf16 *inp, const mt_bf16 *dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = mt_bf16_to_f32(inp[i]);
    float th = fast_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
    float local = 0.5f * (1.0f + th) +
                  0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    dinp[i] = mt_bf16_from_f32(mt_bf16_to_f32(dinp[i]) + local * mt_bf16_to_f32(dout[i]));
  }
}
