/* Checks for the C tests: one way to assert, one failure count, NaN a failure.
 *
 *   MT_CHECK(cond, fmt, ...)   a condition that must hold; a failed one prints
 *                              "FAIL file:line: <message>" on stderr
 *   MT_FAIL(fmt, ...)          a failure found by other means
 *   mt_check_err(what, e, t)   one row of a comparison table on stdout
 *                              ("what  err  tol  ok|FAIL"); fails unless e <= t
 *   mt_check_true(what, ok)    a row of the same table for a yes/no outcome
 *   mt_check_failures()        the failures so far (the test's exit status)
 *   mt_check_count()           the checks made so far (MT_CHECK and the rows)
 *   mt_check_set_rank(r)       MPI tests: failures start "[rank r] "
 *
 * fmax(worst, NaN) returns worst, and `err > tol` is false for NaN: a kernel
 * that starts producing NaN would pass a test built on either. Collect errors
 * with mt_worst (NaN, once seen, stays) and accept with !(err <= tol), as
 * mt_check_err does. */
#ifndef MT_TESTS_CHECK_H
#define MT_TESTS_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

/* the larger of two errors; NaN when either is NaN */
static inline double mt_worst(double a, double b) {
  if (isnan(a) || isnan(b)) return NAN;
  return b > a ? b : a;
}

static inline int *mt_check_failures(void) {
  static int failures;
  return &failures;
}

static inline int *mt_check_count(void) {
  static int checks;
  return &checks;
}

/* the rank a failure line names; -1 (the default): none */
static inline int *mt_check_rank_slot(void) {
  static int rank = -1;
  return &rank;
}
static inline void mt_check_set_rank(int rank) { *mt_check_rank_slot() = rank; }

static inline void mt_check_fail_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline void mt_check_fail_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (*mt_check_rank_slot() >= 0) fprintf(stderr, "[rank %d] ", *mt_check_rank_slot());
  fprintf(stderr, "FAIL %s:%d: ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  ++*mt_check_failures();
}

#define MT_CHECK(cond, ...)                                         \
  do {                                                              \
    ++*mt_check_count();                                            \
    if (!(cond)) mt_check_fail_at(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

#define MT_FAIL(...) mt_check_fail_at(__FILE__, __LINE__, __VA_ARGS__)

/* one compared quantity: relative or absolute error err against tol */
static inline void mt_check_err(const char *what, double err, double tol) {
  int ok = err <= tol; /* NaN fails */
  ++*mt_check_count();
  printf("  %-62s err %.2e  tol %.0e  %s\n", what, err, tol, ok ? "ok" : "FAIL");
  if (!ok) {
    if (*mt_check_rank_slot() >= 0) fprintf(stderr, "[rank %d] ", *mt_check_rank_slot());
    fprintf(stderr, "FAIL: %s: error %.3e exceeds tolerance %.1e\n", what, err, tol);
    ++*mt_check_failures();
  }
}

static inline void mt_check_true(const char *what, int ok) {
  ++*mt_check_count();
  printf("  %-62s %s\n", what, ok ? "ok" : "FAIL");
  if (!ok) {
    if (*mt_check_rank_slot() >= 0) fprintf(stderr, "[rank %d] ", *mt_check_rank_slot());
    fprintf(stderr, "FAIL: %s\n", what);
    ++*mt_check_failures();
  }
}

#endif
