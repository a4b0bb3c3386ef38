/* GELU (tanh approximation) on CPU, vectorised.
 * libm's tanhf is a scalar call and was a quarter of a training step; here
 * tanh comes from a polynomial exp that the compiler turns into AVX
 * instructions. This file is compiled with -ffinite-math-only and
 * -fno-trapping-math (see CMakeLists.txt) so that the clamps (fminf/fmaxf)
 * vectorise; it never sees infinities or NaNs from a healthy model, and the
 * results are the same bits on every run. */
#include <math.h>
#include <stdint.h>

#include "kernels/cpu/cpu_internal.h"

/* sqrt(2/pi) */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBIC 0.044715f

/* exp(x), x clamped to [-87, 88]: x = n ln2 + r with |r| <= ln2/2, e^r by its
 * degree-6 Taylor polynomial (relative error below 2e-7), 2^n put into the
 * exponent bits. */
static inline float fast_expf(float x) {
  x = fminf(fmaxf(x, -87.0f), 88.0f);
  float t = x * 1.4426950408889634f;
  int32_t ni = (int32_t)(t + copysignf(0.5f, t)); /* round to nearest */
  float n = (float)ni;
  float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f; /* ln2 = hi + lo */
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 +
            r * (1.0f / 120 + r * (1.0f / 720))))));
  union {
    int32_t i;
    float f;
  } two_n;
  two_n.i = (ni + 127) << 23;
  return p * two_n.f;
}

/* tanh(u) = (e^{2u} - 1) / (e^{2u} + 1); beyond |u| = 9 it is +-1 in fp32.
 * Absolute error below 3e-7, which is what 0.5 x (1 + tanh) needs. */
static inline float fast_tanhf(float u) {
  u = fminf(fmaxf(u, -9.0f), 9.0f);
  float e = fast_expf(2.0f * u);
  return (e - 1.0f) / (e + 1.0f);
}

/* out = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as GPT-2; n elements */
void mt_cpu_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    out[i] = 0.5f * x * (1.0f + fast_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x)));
  }
}

/* dinp += gelu'(inp) * dout, with u = sqrt(2/pi)(x + 0.044715 x^3):
 * gelu'(x) = 0.5 (1 + tanh u) + 0.5 x sech^2(u) sqrt(2/pi) (1 + 3*0.044715 x^2) */
void mt_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) {
    float x = inp[i];
    float th = fast_tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
    float local = 0.5f * (1.0f + th) +
                  0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    dinp[i] += local * dout[i];
  }
}
