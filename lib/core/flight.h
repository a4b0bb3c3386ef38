/* The flight recorder and the watchdog: every blocking communication call
 * (a collective, a point-to-point wait, an agreement on errors, a device
 * synchronisation) opens an entry in this rank's ring of its last
 * operations when it starts and closes it when it ends. A watchdog thread
 * gives the open call a deadline. When it passes, the rank writes its
 * record (flight/rank_N.json under the run's output folder) and a trigger
 * file; every other rank's watchdog sees the trigger and writes its own,
 * whatever its main thread is doing (a rank stuck in a loop or a sleep
 * included); the first rank that waited too long then reads the records of
 * its group, prints one line naming the group, the call, the ranks that did
 * not arrive and their last operation, and the job ends with exit 3.
 *
 * The recorder costs two clock reads and a few stores per call; the
 * watchdog wakes every timeout / 10 (at most once a second) to look at the
 * open call and at the trigger file. The main thread only writes the ring;
 * the watchdog only reads it and the files (it makes no MPI call). */
#ifndef MT_FLIGHT_H
#define MT_FLIGHT_H

typedef struct {
  const char *dir;        /* where the records go (made when one is written) */
  int rank, world;        /* this process in MPI_COMM_WORLD */
  double timeout_s;       /* a blocking call's deadline, seconds (0: no watchdog) */
  double step_multiple;   /* inside a step, also at most this many median
                             steps (at least MT_FLIGHT_STEP_FLOOR_S; 0: off) */
  const char *prog;       /* names the error line */
  const char *how_to_read;/* appended to the error line (how to merge the records) */
} mt_flight_opts;

#define MT_FLIGHT_STEP_FLOOR_S 10.0

/* Starts the recorder and the watchdog thread (timeout_s > 0; else neither). Not
 * collective; the caller makes the folder's earlier records safe first
 * (mt_flight_rotate on one rank, then a barrier). Returns 0, or -1 when
 * the thread could not be started (the recorder still runs). */
int mt_flight_start(const mt_flight_opts *o);
/* Stops the watchdog (joins it); the recorder stops recording. */
void mt_flight_stop(void);
/* An earlier run's records in dir (a job requeued after a hang) move to
 * dir.1, dir.2, ... (the first free). Returns 0 or -1 (errno). The folder
 * itself is made only when a record is written. */
int mt_flight_rotate(const char *dir);

/* A blocking call begins: its name, the group (name, world ranks world0 +
 * q * stride for q < size), the peer's world rank for a point-to-point
 * call (else -1), the call's number on the group (MT_FLIGHT_NEW: a new
 * collective, numbered per group, so the same number on every member; a
 * number returned before: the wait for that call; 0: point-to-point),
 * bytes. Returns the entry's handle for mt_flight_end and mt_flight_call
 * (-1 when the recorder is off). The test hook MT_TEST_STALL=RANK:STEP:OP stalls
 * rank RANK forever before the first OP at step STEP (OP "step": at the
 * step's start). */
#define MT_FLIGHT_NEW (-1L)
int mt_flight_begin(const char *op, const char *group, int world0, int stride, int size,
                    int peer, long call, double bytes);
void mt_flight_end(int handle);
/* a call of this rank alone (a device synchronisation: group "device") */
int mt_flight_begin_self(const char *op);
/* the number of the call handle stands for (0 when the recorder is off) */
long mt_flight_call(int handle);
/* the step now running (1-based) begins and ends; its seconds feed the
 * median that train.collective_timeout_steps multiplies */
void mt_flight_step_begin(long step);
void mt_flight_step_end(double seconds);

/* the record of this rank as JSON: why it was written, how long the open
 * call had waited (0: not this rank's deadline); the caller frees */
char *mt_flight_record_json(const char *reason, double waited);

#endif
