/* Comparisons for tests, where NaN is a failure.
 *
 * fmax(worst, NaN) returns worst, and `err > tol` is false for NaN: a kernel
 * that starts producing NaN would pass a test built on either. Collect errors
 * with mt_worst (NaN, once seen, stays) and accept with !(err <= tol). */
#ifndef MT_TESTS_CHECK_H
#define MT_TESTS_CHECK_H

#include <math.h>

/* the larger of two errors; NaN when either is NaN */
static inline double mt_worst(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  return b > a ? b : a;
}

#endif
