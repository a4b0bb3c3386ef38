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
 *   mt_check_summary(prog)     the end of main: "prog: all N checks passed"
 *                              on stdout, or "prog: F check(s) failed" on
 *                              stderr; returns the exit status (0 or 1)
 *   mt_check_report(prog, f, p) the same for F failures counted elsewhere
 *                              (an MPI test's sum over ranks), printed
 *                              where p (rank 0)
 *   mt_max_rel_err(x, ref, n)  max |x - ref| / max |ref| (NaN stays)
 *
 * For the op tests (tests/unit), buffers and finite differences:
 *   test_alloc(bytes), zeros(n) zeroed memory; out of memory ends the test
 *   dot(a, b, n)               sum a_i b_i in double
 *   gradcheck(loss, ctx, x, grad, n, stride)
 *                              grad against central differences of loss
 *                              (step FD_EPS): the worst of |analytic -
 *                              numeric| / max(|analytic|, |numeric|, 1e-2)
 *
 * fmax(worst, NaN) returns worst, and `err > tol` is false for NaN: a kernel
 * that starts producing NaN would pass a test built on either. Collect errors
 * with mt_worst (NaN, once seen, stays) and accept with !(err <= tol), as
 * mt_check_err does. */
#ifndef MT_TESTS_CHECK_H
#define MT_TESTS_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

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

/* The end of a test with `failures` failed checks: "prog: all N checks
 * passed" (N the checks made; a test that fails only by MT_FAIL counts
 * none) on stdout or "prog: F check(s) failed" on stderr, where `print` (an
 * MPI test prints on rank 0 only); the exit status, 0 or 1. */
static inline int mt_check_report(const char *prog, int failures, int print) {
  if (print && failures)
    fprintf(stderr, "%s: %d check(s) failed\n", prog, failures);
  else if (print && *mt_check_count() > 0)
    printf("%s: all %d checks passed\n", prog, *mt_check_count());
  else if (print)
    printf("%s: all checks passed\n", prog);
  return failures ? 1 : 0;
}
static inline int mt_check_summary(const char *prog) {
  return mt_check_report(prog, *mt_check_failures(), 1);
}

/* max_i |x_i - ref_i| / max_i |ref_i| (over 1 where ref is all 0); NaN in
 * either stays NaN */
static inline double mt_max_rel_err(const float *x, const float *ref, size_t n) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; i++) {
    diff = mt_worst(diff, fabs((double)x[i] - (double)ref[i]));
    if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
  }
  return diff / (scale > 0 ? scale : 1.0);
}

/* ------------------------------------------------------------------ */
/* buffers and finite differences for the op tests                      */

/* `bytes` zeroed bytes (at least one allocated); out of memory ends the test */
static inline void *test_alloc(size_t bytes) {
  void *p = calloc(bytes ? bytes : 1, 1);
  if (!p) {
    fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

/* n zeroed floats (at least one allocated) */
static inline float *zeros(size_t n) {
  float *x = calloc(n ? n : 1, sizeof(float));
  if (!x) {
    fprintf(stderr, "out of memory (%zu floats)\n", n);
    exit(1);
  }
  return x;
}

static inline double dot(const float *a, const float *b, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)b[i];
  return s;
}

/* the finite-difference step: fp32 ops, so large enough that the loss's
 * rounding noise (summed in double) stays far below the difference */
#define FD_EPS 1e-2f

typedef double (*loss_fn)(void *ctx);

/* Central differences of loss(ctx) with respect to x[i] for i = 0, stride,
 * 2*stride, ... < n, against grad[i]: the worst |analytic - numeric| /
 * max(|analytic|, |numeric|, 1e-2) (the floor keeps near-zero entries from
 * dividing fp32 rounding noise by ~0). The quotient divides by the
 * perturbation actually stored in float: (L(x+) - L(x-)) / (x+ - x-). */
static inline double gradcheck(loss_fn loss, void *ctx, float *x, const float *grad, size_t n,
                               size_t stride) {
  double worst = 0.0;
  for (size_t i = 0; i < n; i += stride) {
    float x0 = x[i], xp = x0 + FD_EPS, xm = x0 - FD_EPS;
    x[i] = xp;
    double lp = loss(ctx);
    x[i] = xm;
    double lm = loss(ctx);
    x[i] = x0;
    double numeric = (lp - lm) / ((double)xp - (double)xm);
    double analytic = grad[i];
    double denom = fmax(fmax(fabs(analytic), fabs(numeric)), 1e-2);
    worst = mt_worst(worst, fabs(analytic - numeric) / denom);
  }
  return worst;
}

#endif
