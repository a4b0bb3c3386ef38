/* How I/O errors of the ckpt module are described, and the fault switch
 * that makes them happen on purpose (tests, benchmarks).
 *
 * Every failing system or HDF5 call becomes one line in an mt_err: what was
 * being done, to which file, on which rank, and the cause (strerror, or the
 * HDF5 error stack's API entry and its innermost cause). Nothing here prints
 * or aborts: the callers agree on the error over all ranks and the caller of
 * the public API reports it once. */
#include "ckpt/core/ckpt_core.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ */
/* error text                                                          */

/* Which failures of a system call mean "this input will never work" (a path
 * that does not exist or may not be read) rather than a runtime condition
 * (a full disk, an I/O error, a quota, a limit) that a later attempt may
 * get past. Only reads of a checkpoint ask: every failure of a save is a
 * runtime condition (the run is fine, its surroundings failed). */
static int errno_is_input(int err) {
  return err == ENOENT || err == ENOTDIR || err == EISDIR || err == EACCES || err == EPERM ||
         err == ENAMETOOLONG || err == ELOOP;
}

static void vset(mt_err *e, const char *file, int line, int runtime, const char *cause,
                 const char *fmt, va_list ap) {
  if (!e || e->failed) return;
  char what[400];
  vsnprintf(what, sizeof what, fmt, ap);
  if (runtime) mt_err_runtime_at(e, file, line, "%s: %s", what, cause);
  else mt_err_set_at(e, file, line, "%s: %s", what, cause);
}

void mt_ckpt_err_sys_at(mt_err *e, const char *file, int line, int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset(e, file, line, 1, strerror(err ? err : EIO), fmt, ap);
  va_end(ap);
}

void mt_ckpt_err_read_sys_at(mt_err *e, const char *file, int line, int err, const char *fmt,
                             ...) {
  va_list ap;
  va_start(ap, fmt);
  vset(e, file, line, !errno_is_input(err ? err : EIO), strerror(err ? err : EIO), fmt, ap);
  va_end(ap);
}

/* The API entry (first walked downward) and the innermost entry of the
 * HDF5 error stack. */
typedef struct {
  int n;
  char api[160], inner_func[64], inner_desc[400];
} h5_stack;

static herr_t walk_entry(unsigned n, const H5E_error2_t *err, void *data) {
  h5_stack *s = data;
  if (n == 0)
    snprintf(s->api, sizeof s->api, "%s(): %s", err->func_name ? err->func_name : "?",
             err->desc ? err->desc : "");
  snprintf(s->inner_func, sizeof s->inner_func, "%s", err->func_name ? err->func_name : "?");
  snprintf(s->inner_desc, sizeof s->inner_desc, "%s", err->desc ? err->desc : "");
  s->n++;
  return 0;
}

/* The cause in an HDF5 error: the innermost entry's "error message = '...'"
 * (the driver's strerror) when there is one, else its description. */
static void h5_cause(const h5_stack *s, char *out, size_t len) {
  const char *m = strstr(s->inner_desc, "error message = '");
  if (m) {
    m += strlen("error message = '");
    const char *end = strchr(m, '\'');
    int n = end ? (int)(end - m) : (int)strlen(m);
    snprintf(out, len, "%.*s", n, m);
  } else {
    snprintf(out, len, "%s() %s", s->inner_func, s->inner_desc);
  }
}

/* The HDF5 error stack as one cause; *sys: the innermost entry carried a
 * system error (the driver's errno) */
static void h5_describe(char *cause, size_t len, int *sys) {
  int sys_err = errno; /* the failed call's, where HDF5 kept no record of it */
  h5_stack s;
  memset(&s, 0, sizeof s);
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_entry, &s);
  H5Eclear2(H5E_DEFAULT);
  *sys = 0;
  if (s.n == 0) {
    snprintf(cause, len, "%s (an HDF5 call failed without an error record)",
             sys_err ? strerror(sys_err) : "unknown cause");
    *sys = 1;
  } else {
    char inner[520];
    h5_cause(&s, inner, sizeof inner);
    snprintf(cause, len, "%s (HDF5 %s)", inner, s.api);
    *sys = strstr(s.inner_desc, "errno = ") != NULL || strstr(s.inner_desc, "error message = ") != NULL;
  }
}

/* the message with HDF5's cause; a read's failure is bad input (a damaged
 * file) unless the cause is the system's (an I/O error: runtime) */
static void vset_h5(mt_err *e, const char *file, int line, int read, const char *fmt,
                    va_list ap) {
  char cause[800];
  int sys;
  h5_describe(cause, sizeof cause, &sys);
  vset(e, file, line, read ? sys : 1, cause, fmt, ap);
}

void mt_ckpt_err_h5_at(mt_err *e, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset_h5(e, file, line, 0, fmt, ap);
  va_end(ap);
}

void mt_ckpt_err_h5_read_at(mt_err *e, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vset_h5(e, file, line, 1, fmt, ap);
  va_end(ap);
}

/* ------------------------------------------------------------------ */
/* fault switch:
 * MT_CKPT_FAULT="rank=R,op=OP,errno=NAME[,step=N][,after=K][,short=1][,stamp=FILE]" */

static const struct {
  const char *name;
  int value;
} g_errnos[] = {{"ENOSPC", ENOSPC}, {"EDQUOT", EDQUOT}, {"EIO", EIO},       {"EACCES", EACCES},
                {"EPERM", EPERM},   {"EROFS", EROFS},   {"ENOENT", ENOENT}, {"ESTALE", ESTALE},
                {"EFBIG", EFBIG},   {"EMFILE", EMFILE}, {"ENOMEM", ENOMEM}};

static const char *g_ops = "create|write|index|sync|close|rename|open|read";

typedef struct {
  int parsed, active;
  int rank;     /* -1: every rank */
  char op[16];
  int err;
  int64_t step; /* -1: any save */
  long after;   /* matching calls that succeed before the first failure */
  int short_write; /* the first failing write is a short write instead */
  char stamp[512];
} fault_spec;

static fault_spec g_fault;
static atomic_long g_fault_calls;
static atomic_int g_fault_stamped;
static atomic_int g_fault_short_done;
static int g_fault_rank;
static int64_t g_fault_step; /* the save in progress, -1 for a load */

int mt_ckpt_fault_init(int world_rank, int64_t step, mt_err *e) {
  g_fault_rank = world_rank;
  g_fault_step = step;
  if (g_fault.parsed) return 0;
  g_fault.parsed = 1;
  const char *v = getenv("MT_CKPT_FAULT");
  if (!v || !v[0]) return 0;
  g_fault.rank = -1;
  g_fault.step = -1;
  g_fault.err = 0;
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", v);
  for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq) {
      mt_err_set(e, "MT_CKPT_FAULT: '%s' is not key=value", kv);
      return -1;
    }
    *eq = '\0';
    const char *key = kv, *val = eq + 1;
    char *end = NULL;
    if (!strcmp(key, "rank")) {
      if (!strcmp(val, "all")) g_fault.rank = -1;
      else if ((g_fault.rank = (int)strtol(val, &end, 10)) < 0 || *end) {
        mt_err_set(e, "MT_CKPT_FAULT: rank '%s' is not a rank number or all", val);
        return -1;
      }
    } else if (!strcmp(key, "op")) {
      char want[64];
      snprintf(want, sizeof want, "|%s|", val);
      char ops[64];
      snprintf(ops, sizeof ops, "|%s|", g_ops);
      if (!val[0] || !strstr(ops, want)) {
        mt_err_set(e, "MT_CKPT_FAULT: op '%s' is not one of %s", val, g_ops);
        return -1;
      }
      snprintf(g_fault.op, sizeof g_fault.op, "%s", val);
    } else if (!strcmp(key, "errno")) {
      for (size_t i = 0; i < sizeof g_errnos / sizeof g_errnos[0]; i++)
        if (!strcmp(val, g_errnos[i].name)) g_fault.err = g_errnos[i].value;
      if (!g_fault.err) {
        long n = strtol(val, &end, 10);
        if (*end || n <= 0) {
          mt_err_set(e, "MT_CKPT_FAULT: errno '%s' is not a known name (ENOSPC, EIO, EACCES, "
                        "EROFS, ...) or a positive number", val);
          return -1;
        }
        g_fault.err = (int)n;
      }
    } else if (!strcmp(key, "step")) {
      g_fault.step = strtoll(val, &end, 10);
      if (*end || g_fault.step < 0) {
        mt_err_set(e, "MT_CKPT_FAULT: step '%s' is not a step number", val);
        return -1;
      }
    } else if (!strcmp(key, "after")) {
      g_fault.after = strtol(val, &end, 10);
      if (*end || g_fault.after < 0) {
        mt_err_set(e, "MT_CKPT_FAULT: after '%s' is not a count", val);
        return -1;
      }
    } else if (!strcmp(key, "short")) {
      if (strcmp(val, "0") != 0 && strcmp(val, "1") != 0) {
        mt_err_set(e, "MT_CKPT_FAULT: short '%s' is not 0 or 1", val);
        return -1;
      }
      g_fault.short_write = val[0] == '1';
    } else if (!strcmp(key, "stamp")) {
      snprintf(g_fault.stamp, sizeof g_fault.stamp, "%s", val);
    } else {
      mt_err_set(e, "MT_CKPT_FAULT: unknown key '%s' (rank, op, errno, step, after, short, stamp)", key);
      return -1;
    }
  }
  if (!g_fault.op[0] || !g_fault.err) {
    mt_err_set(e, "MT_CKPT_FAULT: needs op=%s and errno=NAME", g_ops);
    return -1;
  }
  if (g_fault.short_write && strcmp(g_fault.op, "write") != 0 && strcmp(g_fault.op, "index") != 0) {
    mt_err_set(e, "MT_CKPT_FAULT: short=1 goes with op=write or op=index");
    return -1;
  }
  g_fault.active = 1;
  return 0;
}

int mt_ckpt_fault(const char *op) {
  int64_t step = g_fault_step;
  if (!g_fault.active || strcmp(op, g_fault.op) != 0) return 0;
  if (g_fault.rank >= 0 && g_fault.rank != g_fault_rank) return 0;
  if (g_fault.step >= 0 && step >= 0 && step != g_fault.step) return 0;
  if (atomic_fetch_add(&g_fault_calls, 1) < g_fault.after) return 0;
  if (g_fault.stamp[0] && atomic_exchange(&g_fault_stamped, 1) == 0) {
    /* when it fired (wall clock, seconds), for measuring how fast every rank exits */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    FILE *f = fopen(g_fault.stamp, "a");
    if (f) {
      fprintf(f, "%d %.6f\n", g_fault_rank, (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec);
      fclose(f);
    }
  }
  return g_fault.err;
}

int mt_ckpt_fault_write(const char *op, size_t *bytes) {
  int err = mt_ckpt_fault(op);
  if (err && g_fault.short_write && *bytes > 1 && atomic_exchange(&g_fault_short_done, 1) == 0) {
    *bytes /= 2; /* this call writes half; the next one fails */
    return 0;
  }
  return err;
}
