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
#include "kernels/cpu/exp_poly.h"

float mt_cpu_exp(float x) { return mt_exp_poly(x); }

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
    float e = mt_exp_poly(x[i] - shift);
    y[i] = e;
    sum += e;
  }
  return sum;
}

double mt_cpu_row_exp_f64(float *y, const float *x, int n, float shift) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; i++) {
    float e = mt_exp_poly(x[i] - shift);
    y[i] = e;
    sum += e;
  }
  return sum;
}
