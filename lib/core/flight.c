/* The flight recorder: this rank's ring of its last blocking calls (see
 * flight.h), the step it is in, and its record as JSON. Only the main
 * thread records (the asynchronous checkpoint writer makes no MPI call);
 * the watchdog thread reads the ring while it changes, which can tear one
 * entry of a record written at that moment, never more. */
#include "core/flight_internal.h"
#include "core/core.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

mt_flight_state mt_flight_g;
#define F mt_flight_g

double mt_flight_realtime(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mt_flight_record_path(int r, char *buf, size_t size) {
  snprintf(buf, size, "%s/rank_%d.json", F.dir, r);
}

/* ------------------------------------------------------------------ */
/* start and stop                                                      */

static void parse_stall_hook(void) {
  F.stall_rank = -1;
  const char *v = getenv("MT_TEST_STALL");
  if (!v || !v[0]) return;
  int rank = -1;
  long step = -1;
  char op[32] = "";
  if (sscanf(v, "%d:%ld:%31s", &rank, &step, op) == 3) {
    F.stall_rank = rank;
    F.stall_step = step;
    snprintf(F.stall_op, sizeof F.stall_op, "%s", op);
  }
}

int mt_flight_rotate(const char *dir) {
  struct stat st;
  if (stat(dir, &st) != 0) return 0;
  char next[1100];
  for (int k = 1; k < 100000; k++) { /* the first free dir.k */
    snprintf(next, sizeof next, "%s.%d", dir, k);
    if (stat(next, &st) != 0) return rename(dir, next);
  }
  errno = EEXIST;
  return -1;
}

int mt_flight_start(const mt_flight_opts *o) {
  mt_flight_stop();
  memset(&F, 0, sizeof F);
  snprintf(F.dir, sizeof F.dir, "%s", o->dir);
  snprintf(F.prog, sizeof F.prog, "%s", o->prog ? o->prog : "meshtrain");
  snprintf(F.how, sizeof F.how, "%s", o->how_to_read ? o->how_to_read : "");
  F.rank = o->rank;
  F.world = o->world;
  F.timeout_s = o->timeout_s;
  F.step_multiple = o->step_multiple;
  F.main_thread = pthread_self();
  parse_stall_hook();
  if (o->timeout_s <= 0) return 0; /* no watchdog: nothing would read the ring */
  atomic_store(&F.on, 1); /* (the folder is made when a record is written) */
  if (pthread_create(&F.thread, NULL, mt_flight_watchdog, NULL) != 0) return -1;
  F.thread_running = 1;
  return 0;
}

void mt_flight_stop(void) {
  atomic_store(&F.on, 0);
  if (!F.thread_running) return;
  atomic_store(&F.stop, 1);
  mt_flight_watchdog_wake();
  pthread_join(F.thread, NULL);
  F.thread_running = 0;
}

/* ------------------------------------------------------------------ */
/* recording                                                           */

/* a collective's number on its group (the members count alike) */
static long next_call(const char *group) {
  int n = atomic_load(&F.n_groups);
  for (int i = 0; i < n; i++)
    if (F.groups[i].name == group || strcmp(F.groups[i].name, group) == 0)
      return ++F.groups[i].calls;
  if (n == MT_FLIGHT_GROUPS) return 0;
  F.groups[n].name = group;
  F.groups[n].calls = 1;
  atomic_store(&F.n_groups, n + 1); /* (the watchdog reads up to n_groups) */
  return 1;
}

static void stall_forever(const char *what) {
  fprintf(stderr, "%s: test: rank %d stalls %s at step %ld (MT_TEST_STALL)\n", F.prog, F.rank,
          what, atomic_load(&F.step));
  fflush(stderr);
  for (;;) sleep(60);
}

int mt_flight_begin(const char *op, const char *group, int world0, int stride, int size,
                    int peer, long call, double bytes) {
  if (!atomic_load_explicit(&F.on, memory_order_relaxed) ||
      !pthread_equal(pthread_self(), F.main_thread))
    return -1;
  const long step = atomic_load_explicit(&F.step, memory_order_relaxed);
  if (F.stall_rank == F.rank && F.stall_step == step && strcmp(F.stall_op, op) == 0)
    stall_forever(op); /* before the call: the others see it never arrive */
  long k = atomic_load_explicit(&F.begun, memory_order_relaxed);
  mt_flight_entry *e = &F.ring[k % MT_FLIGHT_RING];
  e->op = op;
  e->group = group;
  e->world0 = world0;
  e->stride = stride;
  e->size = size;
  e->peer = peer;
  e->call = call == MT_FLIGHT_NEW ? next_call(group) : call;
  e->step = step;
  e->bytes = bytes;
  e->end = 0.0;
  e->start = mt_flight_realtime();
  e->start_mono = mt_wall_now();
  e->prev_open = atomic_load_explicit(&F.open, memory_order_relaxed);
  atomic_store_explicit(&F.begun, k + 1, memory_order_release);
  atomic_store_explicit(&F.open, k + 1, memory_order_release);
  return (int)(k % MT_FLIGHT_RING);
}

int mt_flight_begin_self(const char *op) {
  return mt_flight_begin(op, "device", F.rank, 1, 1, -1, MT_FLIGHT_NEW, 0.0);
}

void mt_flight_end(int handle) {
  if (handle < 0) return;
  mt_flight_entry *e = &F.ring[handle];
  e->end = mt_flight_realtime();
  atomic_store_explicit(&F.open, e->prev_open, memory_order_release);
}

long mt_flight_call(int handle) { return handle < 0 ? 0 : F.ring[handle].call; }

void mt_flight_step_begin(long step) {
  atomic_store(&F.step, step);
  atomic_store(&F.in_step, 1);
  if (F.stall_rank == F.rank && F.stall_step == step && strcmp(F.stall_op, "step") == 0)
    stall_forever("at the start of the step");
}

void mt_flight_step_end(double seconds) {
  atomic_store(&F.in_step, 0);
  if (F.step_multiple <= 0) return;
  /* the first step carries warm-up: not counted */
  if (atomic_load(&F.step) > 1 || F.n_steps > 0) {
    F.steps_s[F.n_steps % MT_FLIGHT_STEPS] = seconds;
    F.n_steps++;
  }
  int n = F.n_steps < MT_FLIGHT_STEPS ? F.n_steps : MT_FLIGHT_STEPS;
  if (n < 3) return; /* a median of a few steps first */
  double s[MT_FLIGHT_STEPS];
  memcpy(s, F.steps_s, (size_t)n * sizeof *s);
  double d = F.step_multiple * mt_median(s, n);
  atomic_store(&F.step_deadline, d > MT_FLIGHT_STEP_FLOOR_S ? d : MT_FLIGHT_STEP_FLOOR_S);
}

/* ------------------------------------------------------------------ */
/* the record                                                          */

static cJSON *entry_json(const mt_flight_entry *e, long index) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "index", (double)index);
  cJSON_AddStringToObject(o, "op", e->op ? e->op : "?");
  cJSON_AddStringToObject(o, "group", e->group ? e->group : "?");
  int r[3] = {e->world0, e->stride, e->size};
  cJSON_AddItemToObject(o, "ranks", cJSON_CreateIntArray(r, 3)); /* world0, stride, size */
  cJSON_AddNumberToObject(o, "call", (double)e->call);
  cJSON_AddNumberToObject(o, "peer", e->peer);
  cJSON_AddNumberToObject(o, "bytes", e->bytes);
  cJSON_AddNumberToObject(o, "step", (double)e->step);
  cJSON_AddNumberToObject(o, "start", e->start);
  if (e->end > 0) cJSON_AddNumberToObject(o, "end", e->end);
  else cJSON_AddNullToObject(o, "end");
  return o;
}

char *mt_flight_record_json(const char *reason, double waited) {
  cJSON *root = cJSON_CreateObject();
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  cJSON_AddNumberToObject(root, "rank", F.rank);
  cJSON_AddNumberToObject(root, "world", F.world);
  cJSON_AddStringToObject(root, "host", host);
  cJSON_AddNumberToObject(root, "pid", (double)getpid());
  cJSON_AddStringToObject(root, "reason", reason);
  cJSON_AddNumberToObject(root, "written", mt_flight_realtime());
  cJSON_AddNumberToObject(root, "step", (double)atomic_load(&F.step));
  cJSON_AddBoolToObject(root, "in_step", atomic_load(&F.in_step));
  cJSON_AddNumberToObject(root, "timeout_s", F.timeout_s);
  if (waited > 0) cJSON_AddNumberToObject(root, "waited_s", waited);
  cJSON *groups = cJSON_AddObjectToObject(root, "calls"); /* collectives begun per group */
  int ng = atomic_load(&F.n_groups);
  for (int i = 0; i < ng; i++)
    cJSON_AddNumberToObject(groups, F.groups[i].name, (double)F.groups[i].calls);
  long begun = atomic_load(&F.begun), open = atomic_load(&F.open);
  if (open > 0 && begun - open < MT_FLIGHT_RING)
    cJSON_AddItemToObject(root, "open", entry_json(&F.ring[(open - 1) % MT_FLIGHT_RING], open - 1));
  else
    cJSON_AddNullToObject(root, "open");
  cJSON *ops = cJSON_AddArrayToObject(root, "ops"); /* oldest first */
  for (long k = begun > MT_FLIGHT_RING ? begun - MT_FLIGHT_RING : 0; k < begun; k++)
    cJSON_AddItemToArray(ops, entry_json(&F.ring[k % MT_FLIGHT_RING], k));
  char *s = cJSON_Print(root);
  cJSON_Delete(root);
  return s;
}

int mt_flight_write_record(const char *reason, double waited) {
  char path[1100], tmp[1200];
  mt_flight_record_path(F.rank, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  char *s = mt_flight_record_json(reason, waited);
  if (!s) return -1;
  mkdir(F.dir, 0755); /* (every rank: one of them makes it) */
  FILE *f = fopen(tmp, "w");
  int rc = -1;
  if (f) {
    rc = fputs(s, f) < 0 ? -1 : 0;
    if (fclose(f) != 0) rc = -1;
    if (rc == 0) rc = rename(tmp, path);
  }
  free(s);
  return rc;
}
