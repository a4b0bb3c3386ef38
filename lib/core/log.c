/* Rank-tagged logging, checked allocation and collective error agreement. */
#include "core/core.h"
#include "core/flight.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_rank = 0;

void mt_log_init(int world_rank) { g_rank = world_rank; }
int mt_log_rank(void) { return g_rank; }

int mt_mpi_init(int *argc, char ***argv, int required) {
  int provided = MPI_THREAD_SINGLE, rank = 0;
  /* before this call MPI's default handler aborts on a failed MPI_Init */
  MT_MPI_CHECK(MPI_Init_thread(argc, argv, required, &provided));
  MT_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
  mt_log_init(rank);
  return provided;
}

const char *mt_mpi_strerror(int rc, char *buf) {
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS)
    snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error code %d", rc);
  return buf;
}

/* one line on f: "[rank R] " and prefix where rank_tag, then the message */
static void vline(FILE *f, int rank_tag, const char *prefix, const char *fmt, va_list ap) {
  if (rank_tag) fprintf(f, "[rank %d] %s", g_rank, prefix);
  vfprintf(f, fmt, ap);
  fputc('\n', f);
  fflush(f);
}

void mt_info0(const char *fmt, ...) {
  if (g_rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  vline(stdout, 0, "", fmt, ap);
  va_end(ap);
}

void mt_info(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vline(stdout, 1, "", fmt, ap);
  va_end(ap);
}

void mt_warn(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vline(stderr, 1, "warning: ", fmt, ap);
  va_end(ap);
}

void mt_die_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "[rank %d] fatal: ", g_rank);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (%s:%d)\n", file, line);
  fflush(stderr);
  /* an MPI that cannot say counts as not running: exit alone */
  int init = 0, fin = 1;
  if (MPI_Initialized(&init) != MPI_SUCCESS) init = 0;
  if (MPI_Finalized(&fin) != MPI_SUCCESS) fin = 1;
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, MT_EXIT_RUNTIME);
  exit(MT_EXIT_RUNTIME);
}

void *mt_malloc_at(size_t bytes, const char *file, int line) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) mt_die_at(file, line, "out of memory allocating %zu bytes", bytes);
  return p;
}

void *mt_calloc_at(size_t n, size_t size, const char *file, int line) {
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) mt_die_at(file, line, "out of memory allocating %zu x %zu bytes", n, size);
  return p;
}

static void err_vset(mt_err *e, int code, const char *file, int line, const char *fmt,
                     va_list ap) {
  if (!e || e->failed) return;
  e->failed = 1;
  e->code = code;
  vsnprintf(e->msg, sizeof e->msg, fmt, ap);
  e->depth = 0;
  mt_err_pass_at(e, file, line);
}

void mt_err_set_at(mt_err *e, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_vset(e, MT_EXIT_BADINPUT, file, line, fmt, ap);
  va_end(ap);
}

void mt_err_runtime_at(mt_err *e, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  err_vset(e, MT_EXIT_RUNTIME, file, line, fmt, ap);
  va_end(ap);
}

void mt_err_pass_at(mt_err *e, const char *file, int line) {
  if (!e || !e->failed || e->depth >= MT_ERR_TRACE_MAX) return;
  e->trace[e->depth].file = file;
  e->trace[e->depth].line = line;
  e->depth++;
}

void mt_err_trace_format(const mt_err *e, char *buf, size_t size) {
  size_t used = 0;
  if (size) buf[0] = 0;
  for (int i = 0; i < e->depth && used < size; i++) {
    const char *f = e->trace[i].file, *slash = strrchr(f, '/');
    int n = snprintf(buf + used, size - used, "%s%s:%d", i ? " <- " : "", slash ? slash + 1 : f,
                     e->trace[i].line);
    if (n < 0) break;
    used += (size_t)n;
  }
}

int mt_err_exit_code(const mt_err *e) {
  if (!e || !e->failed) return MT_EXIT_OK;
  return e->code == MT_EXIT_RUNTIME ? MT_EXIT_RUNTIME : MT_EXIT_BADINPUT;
}

int mt_err_agree(mt_err *e, MPI_Comm comm) {
  int rank, size;
  MT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MT_MPI_CHECK(MPI_Comm_size(comm, &size));
  int mine = e->failed ? rank : size, first = size;
  /* (recorded on the world only: its calls are numbered alike everywhere) */
  int world = 0;
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  const int fl = size == world && comm == MPI_COMM_WORLD
                     ? mt_flight_begin("agree", "world", 0, 1, world, -1, MT_FLIGHT_NEW, 0.0)
                     : -1;
  MT_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  mt_flight_end(fl);
  if (first == size) return 0;
  /* message and exit code of the lowest failing rank; the chain's file
   * pointers are this binary's, so only that rank's own chain is kept */
  int code = e->code;
  MT_MPI_CHECK(MPI_Bcast(e->msg, (int)sizeof e->msg, MPI_CHAR, first, comm));
  MT_MPI_CHECK(MPI_Bcast(&code, 1, MPI_INT, first, comm));
  if (rank != first) e->depth = 0;
  e->failed = 1;
  e->code = code;
  return 1;
}

void mt_err_report(const mt_err *e, const char *prog) {
  if (g_rank != 0) return;
  fprintf(stderr, "%s: error: %s\n", prog, e->msg);
  const char *trace = getenv("MT_ERR_TRACE");
  if (trace && trace[0] == '1' && e->depth > 0) {
    char buf[512];
    mt_err_trace_format(e, buf, sizeof buf);
    fprintf(stderr, "%s: error: at %s\n", prog, buf);
  }
  fflush(stderr);
}

void mt_err_check_all(mt_err *e, MPI_Comm comm, const char *prog) {
  if (!mt_err_agree(e, comm)) return;
  mt_err_report(e, prog);
  MT_MPI_CHECK(MPI_Finalize());
  exit(mt_err_exit_code(e));
}

double mt_wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
