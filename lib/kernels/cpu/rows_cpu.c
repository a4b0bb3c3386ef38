/* Row loops of the softmaxes (attention, cross-entropy) on CPU, vectorised:
 * the maximum of a row and exp(x - shift) with its sum. libm's expf is a
 * call that may set errno, and a maximum with NaN semantics is no single
 * instruction, so neither loop vectorises as plain C; here exp comes from a
 * polynomial and the clamps and the maximum from fminf/fmaxf, which this
 * file's flags (-ffinite-math-only -fno-trapping-math -fno-math-errno, see
 * CMakeLists.txt) let gcc turn into AVX min/max. Callers pass finite values
 * (scores and logits of a healthy model; a NaN loss still shows, since the
 * loss adds the target's logit outside this file). The same bits on every
 * run and at any thread count. */
#include <math.h>
#include <stdint.h>

#include "kernels/cpu/cpu_internal.h"

/* exp(x) for x <= 88: x clamped below at -87 (exp(-87) = 1.6e-38 stands in
 * for anything smaller; next to a row's largest term, exp(0) = 1, such terms
 * vanish); x = n ln2 + r with |r| <= ln2/2, e^r by its degree-6 Taylor
 * polynomial (relative error below 2e-7), 2^n put into the exponent bits. */
static inline float exp_poly(float x) {
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

float mt_cpu_exp(float x) { return exp_poly(x); }

float mt_cpu_row_max(const float *x, int n) {
  float mx = x[0];
#pragma omp simd reduction(max : mx)
  for (int i = 1; i < n; i++) mx = fmaxf(mx, x[i]);
  return mx;
}

float mt_cpu_row_exp(float *y, const float *x, int n, float shift) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; i++) {
    float e = exp_poly(x[i] - shift);
    y[i] = e;
    sum += e;
  }
  return sum;
}

double mt_cpu_row_exp_f64(float *y, const float *x, int n, float shift) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; i++) {
    float e = exp_poly(x[i] - shift);
    y[i] = e;
    sum += e;
  }
  return sum;
}
