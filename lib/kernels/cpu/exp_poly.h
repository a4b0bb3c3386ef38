/* The polynomial exp of the CPU kernels' vectorised loops (rows_cpu.c's
 * softmax rows, gelu.c's tanh), one definition: included by files compiled
 * with -ffinite-math-only -fno-trapping-math (CMakeLists.txt), whose clamps
 * (fminf/fmaxf) then vectorise. Not part of the API. */
#ifndef MT_KERNELS_CPU_EXP_POLY_H
#define MT_KERNELS_CPU_EXP_POLY_H

#include <math.h>
#include <stdint.h>

/* exp(x) for x <= 88: x clamped below at -87 (exp(-87) = 1.6e-38 stands in
 * for anything smaller; next to a row's largest term, exp(0) = 1, such terms
 * vanish); x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor
 * polynomial (relative error below 2e-7), 2^n put into the exponent bits. */
static inline float mt_exp_poly(float x) {
  x = fminf(fmaxf(x, -87.0f), 88.0f);
  float t = x * 1.4426950408889634f;
  int32_t ni = (int32_t)(t + copysignf(0.5f, t)); /* round to nearest */
  float n = (float)ni;
  float r = x - n * 0.693145751953125f - n * 1.428606765330187e-06f; /* ln2 = hi + lo */
  float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 +
            r * (1.0f / 120 + r * (1.0f / 720))))));
  union { /* a union: gcc vectorises neither a call nor a memcpy here */
    int32_t i;
    float f;
  } two_n;
  two_n.i = (ni + 127) << 23;
  return p * two_n.f;
}

#endif
