/* Shared by flight.c (the ring) and watchdog.c (its thread): not API. */
#ifndef MT_FLIGHT_INTERNAL_H
#define MT_FLIGHT_INTERNAL_H

#include "core/flight.h"

#include <pthread.h>
#include <stdatomic.h>

#define MT_FLIGHT_RING 256
#define MT_FLIGHT_GROUPS 32
#define MT_FLIGHT_STEPS 15 /* the steps whose median sets the step deadline */

typedef struct {
  const char *op, *group; /* static strings */
  int world0, stride, size, peer;
  long call;              /* the group's collective number (1-based), 0 for point-to-point */
  long step;
  double bytes;
  double start, end;      /* CLOCK_REALTIME seconds; end 0 while open */
  double start_mono;      /* the deadline's clock */
  long prev_open;         /* the open entry (+1) this one hides, 0 none */
} mt_flight_entry;

typedef struct {
  atomic_int on;
  char dir[1024], prog[64], how[1024];
  int rank, world;
  double timeout_s, step_multiple;
  pthread_t main_thread, thread;
  int thread_running;
  atomic_int stop;
  mt_flight_entry ring[MT_FLIGHT_RING];
  atomic_long begun;       /* entries begun so far */
  atomic_long open;        /* 1 + the innermost open entry's index, 0 none */
  atomic_long step;        /* the step running, or the last (0 before any) */
  atomic_int in_step;
  _Atomic double step_deadline; /* seconds; 0 until steps were measured */
  double steps_s[MT_FLIGHT_STEPS];
  int n_steps;
  struct {
    const char *name;
    long calls;
  } groups[MT_FLIGHT_GROUPS];
  atomic_int n_groups;
  /* the test hook */
  int stall_rank;
  long stall_step;
  char stall_op[32];
} mt_flight_state;

extern mt_flight_state mt_flight_g;

double mt_flight_realtime(void);
/* path of rank r's record */
void mt_flight_record_path(int r, char *buf, size_t size);
/* writes this rank's record (reason: "timeout", "peer_timeout") atomically;
 * waited: the open call's seconds at expiry (0 for others) */
int mt_flight_write_record(const char *reason, double waited);
/* the watchdog thread, and its wake-up from its tick's wait (after stop is set) */
void *mt_flight_watchdog(void *arg);
void mt_flight_watchdog_wake(void);

#endif
