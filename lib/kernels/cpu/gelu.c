/* GELU (tanh approximation) on the CPU, over the storage type (bodies in
 * gelu_t.h, instantiated for float and bf16 by typed.h), vectorised.
 * libm's tanhf is a scalar call and was a quarter of a training step; here
 * tanh comes from a polynomial exp that the compiler turns into AVX
 * instructions. This file is compiled with -ffinite-math-only and
 * -fno-trapping-math (see CMakeLists.txt) so that the clamps (fminf/fmaxf)
 * vectorise; it never sees infinities or NaNs from a healthy model, and the
 * results are the same bits on every run (the rounding to bf16 is integer
 * arithmetic and keeps NaN whatever the flags). */
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

#define MT_TYPED_BODY "kernels/cpu/gelu_t.h"
#include "kernels/cpu/typed.h"
