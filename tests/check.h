/* Comparisons for tests, where NaN is a failure.
 *
 * fmax(worst, NaN) returns worst, and `err > tol` is false for NaN: a kernel
 * that starts producing NaN would pass a test built on either. Collect errors
 * with mt_worst (NaN, once seen, stays) and accept with !(err <= tol). */
#ifndef MT_TESTS_CHECK_H
#define MT_TESTS_CHECK_H

#include <math.h>
#include <stdio.h>

/* the larger of two errors; NaN when either is NaN */
static inline double mt_worst(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  return b > a ? b : a;
}

/* A condition that must hold: a failed one prints "FAIL: <message>" and
 * counts in mt_check_failures() (the test's exit status). */
static inline int *mt_check_failures(void) {
  static int failures;
  return &failures;
}
#define MT_CHECK(cond, ...)                 \
  do {                                      \
    if (!(cond)) {                          \
      fprintf(stderr, "FAIL: ");            \
      fprintf(stderr, __VA_ARGS__);         \
      fprintf(stderr, "\n");               \
      ++*mt_check_failures();               \
    }                                       \
  } while (0)

#endif
