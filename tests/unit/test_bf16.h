/* Shared by the bf16 unit tests (test_bf16.c, test_bf16_attn.c; include
 * once, from the program's source file): the op table on bf16 and on fp32 and
 * main's first step (test_bf16_start), inputs that bf16 represents exactly,
 * and the comparison of a bf16 op's result with the fp32 op's on the same
 * inputs.
 *
 * Tolerance. bf16 keeps 8 significant bits: rounding to nearest even moves
 * a value by at most u = 2^-8 of itself (half of the 2^-7 spacing in
 * [1,2)). A bf16 op computes in fp32 and rounds each stored element once,
 * so against the fp32 op's result y:
 *     |got - y| <= 2^-8 |y| + d,
 * d being how far the two fp32 computations may drift apart: 0 where the
 * arithmetic is the same, a few fp32 roundings of the terms of a sum where
 * the order differs (mt_bf16_tol's floor), and for a product of depth k
 * 2 gamma_k sum|a b|, gamma_k = k 2^-24 (both sums of the same exact
 * products, any order: Higham's bound, twice). Every check is NaN-aware:
 * !(err <= tol) fails. */
#ifndef MT_TEST_BF16_H
#define MT_TEST_BF16_H

#include "core/core.h"
#include "kernels/kernels.h"
#include "../check.h"
#include "../test_rng.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BF16_U (1.0 / 256.0)   /* unit roundoff of bf16, 2^-8 */
#define FP32_U (1.0 / 16777216.0) /* of fp32, 2^-24 */

static const mt_ops *f32ops;     /* the reference: the fp32 CPU table */
static const mt_ops *bops;      /* under test: the same table on bf16 (MT_DT_BF16) */

/* main's first step: the tables, 2 threads, the seed of the inputs; prints
 * "prog: <table> on bf16 against <table> on fp32, 2 threads" */
static inline void test_bf16_start(const char *prog) {
  g_rng = 0x2545F4914F6CDD1Dull;
  f32ops = mt_ops_cpu();
  bops = mt_ops_cpu();
  mt_kernels_set_threads(2);
  printf("%s: %s on bf16 against %s on fp32, %d threads\n", prog, bops->name, f32ops->name,
         mt_kernels_threads());
}

/* n values in [lo, hi) that bf16 holds exactly: bf16 copy b, fp32 copy f */
static inline void test_rand_pair(mt_bf16 *b, float *f, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++) {
    b[i] = mt_bf16_from_f32((float)rng_uniform_f64(lo, hi));
    f[i] = mt_bf16_to_f32(b[i]);
  }
}

/* worst of |got - ref| / tol_i over n elements, tol_i = 2^-8 |ref| (when
 * rounded) + extra_i (extra NULL: 0) + floor; > 1 fails, NaN fails */
static inline double test_worst_bf16(const mt_bf16 *got, const float *ref, const double *extra,
                              size_t n, double floor_abs) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double g = mt_bf16_to_f32(got[i]), r = ref[i];
    double tol = BF16_U * fabs(r) + (extra ? extra[i] : 0.0) + floor_abs;
    double e = fabs(g - r) / (tol > 0 ? tol : 1e-30);
    if (g == r) e = 0.0;
    worst = mt_worst(worst, e);
  }
  return worst;
}

/* the same for an fp32 result (no rounding to bf16) */
static inline double test_worst_f32(const float *got, const float *ref, const double *extra, size_t n,
                             double floor_abs) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) {
    double g = got[i], r = ref[i];
    double tol = (extra ? extra[i] : 0.0) + floor_abs;
    double e = g == r ? 0.0 : fabs(g - r) / (tol > 0 ? tol : 1e-30);
    worst = mt_worst(worst, e);
  }
  return worst;
}

static inline double test_max_abs(const float *x, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) m = fabs(x[i]) > m ? fabs(x[i]) : m;
  return m;
}

/* prints the worst error (in units of its tolerance) and checks it */
#define TEST_WITHIN(what, worst)                                                              \
  do {                                                                                        \
    double w_ = (worst);                                                                      \
    MT_CHECK(w_ <= 1.0, "%s: worst error %.3g of its tolerance", what, w_);                   \
  } while (0)

#endif
