/* Shared by lib/train's files (not part of the API). */
#ifndef MT_TRAIN_INTERNAL_H
#define MT_TRAIN_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "train/train.h"

/* Every rank's n doubles of mine, in rank order, into all (size x n) on
 * every rank of g: a sum of vectors holding each rank's part in its slot
 * (figures for the records: a few doubles per rank). */
void mt_train_gather_f64(mt_group *g, const double *mine, size_t n, double *all);
/* <dir>/<name> opened with mode, or a rank-tagged fatal error naming it */
FILE *mt_train_open_out(const char *dir, const char *name, const char *mode);
/* {"device": kind, precision, GPU, memory, comm paths} added to parent */
void mt_train_device_json(const mt_trainer *t, cJSON *parent);
/* tests only: sleep the seconds the environment variable env names (unset:
 * no sleep); a stop signal ends the wait */
void mt_train_test_sleep(const char *env);
/* the test hook MT_TEST_DIE=RANK:STEP:MARKER (tests only): rank RANK kills
 * itself (SIGKILL) at the start of step STEP, once: when it can make the
 * file MARKER, which a later attempt then finds */
void mt_train_test_die(const mt_trainer *t, long long step);
/* The watchdog and flight recorder (core/flight.h) from here on, records
 * in <output.dir>/flight (an earlier run's moved to flight.N first).
 * Collective over the world; after the output folder exists. */
void mt_train_watchdog_start(mt_trainer *t);

/* ---- loss spikes (spike.c) ---- */
/* whether the step's global loss or norm is a spike (train.on_spike's
 * rule); why it is in why */
int mt_spike_test(mt_trainer *t, double loss, double norm, char *why, size_t size);
/* a normal step's loss joins the running window */
void mt_spike_note(mt_trainer *t, double loss);
/* a spike at step index `step` (0-based): stops the run (exit 3 on every
 * rank), or rolls back to the newest checkpoint past the windows since it
 * and returns the step index to go on from. Collective. A checkpoint in
 * flight is committed first (the caller). */
long long mt_spike_handle(mt_trainer *t, int step, const char *why);
/* the rollbacks made, for summary.json */
cJSON *mt_spike_json(const mt_trainer *t);
/* resume.c: loads the checkpoint `which` names (auto: the newest in
 * <output.dir>/checkpoints) into the trainer's state; its position in
 * start_step, samples_done; resumed_from empty when none was found.
 * Collective; 0, or -1 with err set. */
int mt_train_load_checkpoint(mt_trainer *t, const char *which, mt_err *err);
/* rank 0: metrics.jsonl without the records after last_step */
int mt_train_truncate_metrics(const char *dir, long long last_step, mt_err *e);
/* the architecture of shape s into a checkpoint's metadata m (format 1.4) */
void mt_train_meta_arch(mt_ckpt_meta *m, const mt_model_shape *s);

#endif
