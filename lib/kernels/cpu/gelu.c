/* The MLP's activations on the CPU, GELU (tanh approximation) and SwiGLU,
 * over the storage type (bodies in gelu_t.h, instantiated for float and
 * bf16 by typed.h), vectorised.
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
#include "kernels/cpu/exp_poly.h"

/* sqrt(2/pi) */
#define GELU_SCALE 0.7978845608028654f
#define GELU_CUBIC 0.044715f

/* tanh(u) = (e^{2u} - 1) / (e^{2u} + 1); beyond |u| = 9 it is +-1 in fp32.
 * Absolute error below 3e-7, which is what 0.5 x (1 + tanh) needs. */
static inline float fast_tanhf(float u) {
  u = fminf(fmaxf(u, -9.0f), 9.0f);
  float e = mt_exp_poly(2.0f * u);
  return (e - 1.0f) / (e + 1.0f);
}

#define MT_TYPED_BODY "kernels/cpu/gelu_t.h"
#include "kernels/cpu/typed.h"
