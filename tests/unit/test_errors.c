/* The error idiom of core.h on one rank:
 *   - a failure set several calls deep comes back as -1 with its message,
 *     its exit code and a chain of file:line frames (the place that set it,
 *     then each MT_TRY and mt_err_pass that passed it up), innermost first;
 *   - the chain keeps its innermost MT_ERR_TRACE_MAX frames;
 *   - after mt_mpi_init, MPI_COMM_WORLD returns errors: an MT_MPI_TRY whose
 *     call fails (a negative count) becomes a runtime error naming the call,
 *     where MPI's default handler would have ended the process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "core/core.h"

static int g_set_line, g_try_line, g_pass_line;

static int inner(int bad, mt_err *e) {
  if (bad) {
    g_set_line = __LINE__ + 1;
    mt_err_set(e, "inner: value %d is bad", bad);
    return -1;
  }
  return 0;
}

static int middle(int bad, mt_err *e) {
  g_try_line = __LINE__ + 1;
  MT_TRY(e, inner(bad, e));
  return 0;
}

static int outer(int bad, mt_err *e) {
  char *scratch = mt_malloc(16);
  if (middle(bad, e) != 0) {
    free(scratch);
    g_pass_line = __LINE__ + 1;
    return mt_err_pass(e);
  }
  free(scratch);
  return 0;
}

/* passes a failure up depth times */
static int deep(int depth, mt_err *e) {
  if (depth == 0) return inner(1, e);
  MT_TRY(e, deep(depth - 1, e));
  return 0;
}

static int bcast_bad_count(mt_err *e) {
  int v = 0;
  MT_MPI_TRY(e, MPI_Bcast(&v, -1, MPI_INT, 0, MPI_COMM_WORLD));
  return 0;
}

static void test_chain(void) {
  mt_err e = {0};
  MT_CHECK(outer(0, &e) == 0 && !e.failed && e.depth == 0, "no failure: no error, no chain");
  MT_CHECK(outer(7, &e) == -1, "a failure comes back as -1");
  MT_CHECK(e.failed && !strcmp(e.msg, "inner: value 7 is bad"), "message: '%s'", e.msg);
  MT_CHECK(mt_err_exit_code(&e) == MT_EXIT_BADINPUT, "exit code %d", mt_err_exit_code(&e));
  MT_CHECK(e.depth == 3, "three frames (set, MT_TRY, mt_err_pass), got %d", e.depth);
  char want[256], got[512];
  snprintf(want, sizeof want, "test_errors.c:%d <- test_errors.c:%d <- test_errors.c:%d",
           g_set_line, g_try_line, g_pass_line);
  mt_err_trace_format(&e, got, sizeof got);
  MT_CHECK(!strcmp(got, want), "chain '%s', expected '%s'", got, want);
  /* the first error wins: a second one neither replaces it nor its chain */
  mt_err_runtime(&e, "later");
  MT_CHECK(!strcmp(e.msg, "inner: value 7 is bad") && e.depth == 3 &&
               mt_err_exit_code(&e) == MT_EXIT_BADINPUT,
           "a later error changed the first: '%s'", e.msg);
}

static void test_deep_chain(void) {
  mt_err e = {0};
  MT_CHECK(deep(2 * MT_ERR_TRACE_MAX, &e) == -1, "deep failure");
  MT_CHECK(e.depth == MT_ERR_TRACE_MAX, "depth %d, at most %d", e.depth, MT_ERR_TRACE_MAX);
  MT_CHECK(e.trace[0].line == g_set_line, "the innermost frame (where it was set) is kept");
}

static void test_mpi_returns(void) {
  mt_err e = {0};
  int rc = bcast_bad_count(&e);
  MT_CHECK(rc == -1 && e.failed, "MPI_Bcast with count -1: rc %d", rc);
  MT_CHECK(mt_err_exit_code(&e) == MT_EXIT_RUNTIME, "a runtime error, exit %d",
           mt_err_exit_code(&e));
  MT_CHECK(strstr(e.msg, "MPI_Bcast(&v, -1, MPI_INT, 0, MPI_COMM_WORLD) failed: ") == e.msg,
           "message names the call: '%s'", e.msg);
  MT_CHECK(e.depth == 1, "set where the call failed: %d frame(s)", e.depth);
}

int main(int argc, char **argv) {
  int provided = mt_mpi_init(&argc, &argv, MPI_THREAD_SINGLE);
  MT_CHECK(provided >= MPI_THREAD_SINGLE, "thread level %d", provided);
  MPI_Errhandler h;
  MT_MPI_CHECK(MPI_Comm_get_errhandler(MPI_COMM_WORLD, &h));
  MT_CHECK(h == MPI_ERRORS_RETURN, "mt_mpi_init leaves MPI_COMM_WORLD returning errors");
  MT_MPI_CHECK(MPI_Errhandler_free(&h));
  test_chain();
  test_deep_chain();
  test_mpi_returns();
  printf("test_errors: %d checks, %d failures\n", *mt_check_count(), *mt_check_failures());
  MT_MPI_CHECK(MPI_Finalize());
  return *mt_check_failures() ? 1 : 0;
}
