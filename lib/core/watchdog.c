/* The watchdog thread (see flight.h): the open call's deadline, the trigger
 * file that makes every rank write its record, and the verdict of the rank
 * whose deadline passed: which members of its group did not arrive, and
 * what each was doing. Makes no MPI call: it ends the process itself, with
 * exit 3, and the launcher ends the job. */
#include "core/flight_internal.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define F mt_flight_g
#define MAX_NAMED 8       /* ranks named on the line; the rest counted */
#define MAX_READ 65536    /* members whose records the verdict reads */

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* the tick's wait, which mt_flight_stop cuts short (a 1 s sleep here made
 * every run's exit wait up to a second for the thread's join) */
static pthread_mutex_t g_tick_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_tick_cv = PTHREAD_COND_INITIALIZER;

static void wait_tick(double s) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until); /* the condition variable's clock */
  until.tv_sec += (time_t)s;
  until.tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
  if (until.tv_nsec >= 1000000000L) {
    until.tv_sec++;
    until.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&g_tick_mu);
  while (!atomic_load(&F.stop))
    if (pthread_cond_timedwait(&g_tick_cv, &g_tick_mu, &until) == ETIMEDOUT) break;
  pthread_mutex_unlock(&g_tick_mu);
}

void mt_flight_watchdog_wake(void) {
  pthread_mutex_lock(&g_tick_mu);
  pthread_cond_broadcast(&g_tick_cv);
  pthread_mutex_unlock(&g_tick_mu);
}

static double tick_s(void) {
  double t = F.timeout_s / 10.0;
  return t < 0.02 ? 0.02 : t > 1.0 ? 1.0 : t;
}

static void trigger_path(char *buf, size_t size) { snprintf(buf, size, "%s/trigger", F.dir); }

/* rank r's record, parsed (NULL: none, or unreadable) */
static cJSON *read_record(int r) {
  char path[1100];
  mt_flight_record_path(r, path, sizeof path);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len + 4096 + 1 > cap) {
      cap = 2 * cap + 8192;
      char *nb = realloc(buf, cap);
      if (!nb) break;
      buf = nb;
    }
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0) break;
  }
  fclose(f);
  if (!buf) return NULL;
  buf[len] = 0;
  cJSON *j = cJSON_Parse(buf);
  free(buf);
  return j;
}

static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : "?";
}
static double num_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

/* what rank r's record says it was doing, as of `now` */
static void describe(const cJSON *rec, double now, char *buf, size_t size) {
  const cJSON *open = cJSON_GetObjectItemCaseSensitive(rec, "open");
  const long step = (long)num_of(rec, "step");
  if (cJSON_IsObject(open)) {
    snprintf(buf, size, "step %ld, waiting %.1f s in %s on %s%s", step,
             now - num_of(open, "start"), str_of(open, "op"), str_of(open, "group"),
             num_of(open, "call") > 0 ? "" : " (point-to-point)");
    return;
  }
  const cJSON *ops = cJSON_GetObjectItemCaseSensitive(rec, "ops");
  const cJSON *last = cJSON_IsArray(ops) ? cJSON_GetArrayItem(ops, cJSON_GetArraySize(ops) - 1)
                                         : NULL;
  if (!last) {
    snprintf(buf, size, "step %ld, no call recorded", step);
    return;
  }
  const double call = num_of(last, "call");
  char nr[32] = "";
  if (call > 0) snprintf(nr, sizeof nr, " call %.0f", call);
  snprintf(buf, size, "step %ld, in no call since %s on %s%s ended %.1f s before", step,
           str_of(last, "op"), str_of(last, "group"), nr, now - num_of(last, "end"));
}

/* append to buf */
static void add(char *buf, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *buf, size_t size, const char *fmt, ...) {
  size_t used = strlen(buf);
  if (used + 1 >= size) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, size - used, fmt, ap);
  va_end(ap);
}

/* The members of e's group (the peer of a point-to-point call) that did
 * not arrive, as a clause of the error line. */
static void not_arrived(const mt_flight_entry *e, char *buf, size_t size) {
  const double now = mt_flight_realtime();
  int named = 0, more = 0, read = 0;
  const int n = e->peer >= 0 ? 1 : e->size;
  for (int q = 0; q < n && read < MAX_READ; q++) {
    const int r = e->peer >= 0 ? e->peer : e->world0 + q * e->stride;
    if (r == F.rank) continue;
    cJSON *rec = read_record(r);
    read++;
    int arrived = 0;
    if (rec && e->peer < 0) {
      const cJSON *calls = cJSON_GetObjectItemCaseSensitive(rec, "calls");
      const double c = num_of(calls, e->group);
      arrived = c >= (double)e->call;
    }
    if (!arrived) {
      if (named < MAX_NAMED) {
        char what[512];
        if (rec) describe(rec, now, what, sizeof what);
        else snprintf(what, sizeof what, "no record: the process did not answer");
        add(buf, size, "%srank %d (%s)", named ? "; " : "", r, what);
        named++;
      } else {
        more++;
      }
    }
    cJSON_Delete(rec);
  }
  if (more) add(buf, size, "; and %d more", more);
  if (!named && e->size == 1 && e->peer < 0)
    add(buf, size, "none: a call of this rank alone (a device synchronisation: the device did "
                   "not finish the work queued before it)");
  else if (!named)
    add(buf, size, "none: every member arrived, and the call itself did not complete (the "
                   "network or MPI)");
}

/* whether a rank below this one also waited too long (it speaks first) */
static int lower_rank_expired(void) {
  for (int r = 0; r < F.rank && r < MAX_READ; r++) {
    cJSON *rec = read_record(r);
    int expired = rec && strcmp(str_of(rec, "reason"), "timeout") == 0;
    cJSON_Delete(rec);
    if (expired) return 1;
  }
  return 0;
}

static void expire(const mt_flight_entry *cur, double waited, double limit) {
  const mt_flight_entry e = *cur; /* (the main thread may reuse the slot) */
  mt_flight_write_record("timeout", waited);
  char trig[1100];
  trigger_path(trig, sizeof trig);
  int fd = open(trig, O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (fd >= 0) {
    dprintf(fd, "%d\n", F.rank);
    close(fd);
  }
  /* every watchdog looks for the trigger each tick: their records first */
  sleep_s(3.0 * tick_s() + 0.5);
  if (lower_rank_expired()) { /* that rank prints the line and ends the job */
    sleep_s(2.0 + tick_s());
    _exit(MT_EXIT_RUNTIME);
  }
  char line[4096];
  snprintf(line, sizeof line, "watchdog: rank %d waited %.1f s (limit %.1f s) in %s on group %s",
           F.rank, waited, limit, e.op, e.group);
  if (e.peer >= 0)
    add(line, sizeof line, " with rank %d", e.peer);
  else
    add(line, sizeof line, " (call %ld; world ranks %d + %d x [0, %d))", e.call, e.world0,
        e.stride, e.size);
  if (e.step > 0) add(line, sizeof line, " at step %ld", e.step);
  add(line, sizeof line, "; did not arrive: ");
  not_arrived(&e, line, sizeof line);
  add(line, sizeof line, "; flight records in %s%s", F.dir, F.how);
  fprintf(stderr, "%s: error: %s\n", F.prog, line);
  fflush(stderr);
  fflush(stdout);
  _exit(MT_EXIT_RUNTIME);
}

void *mt_flight_watchdog(void *arg) {
  (void)arg;
  char trig[1100];
  trigger_path(trig, sizeof trig);
  int dumped = 0;
  while (!atomic_load(&F.stop)) {
    wait_tick(tick_s());
    if (atomic_load(&F.stop)) break;
    if (!dumped && access(trig, F_OK) == 0) { /* another rank's deadline passed */
      mt_flight_write_record("peer_timeout", 0.0);
      dumped = 1;
    }
    const long open = atomic_load_explicit(&F.open, memory_order_acquire);
    if (!open) continue;
    const mt_flight_entry *e = &F.ring[(open - 1) % MT_FLIGHT_RING];
    const double waited = mt_wall_now() - e->start_mono;
    double limit = F.timeout_s;
    const double step_limit = atomic_load(&F.step_deadline);
    if (atomic_load(&F.in_step) && step_limit > 0 && step_limit < limit) limit = step_limit;
    if (waited <= limit) continue;
    if (atomic_load(&F.open) != open || e->end > 0) continue; /* it ended meanwhile */
    expire(e, waited, limit);
  }
  return NULL;
}
