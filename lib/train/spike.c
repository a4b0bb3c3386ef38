/* Loss spikes and non-finite values (train.on_spike). The rule: a step
 * whose loss or gradient norm is not finite, or (train.spike_factor > 0)
 * whose loss is above spike_factor x the median loss of the last
 * spike_window normal steps (once 5 are known), is a spike. Every rank
 * holds the same global loss and norm; the step loop agrees on the verdict
 * over the world all the same (one flag), so no threshold splits them. A
 * spike stops the run (exit 3, naming the step and how to go on past it
 * by hand), or rolls back: the newest checkpoint is loaded again and the
 * windows of the steps since it, the offending one included, are skipped
 * (the data position moves past them; the run goes on from the
 * checkpoint's step), as the OPT and PaLM logbooks did by hand. */
#include "train/train_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIN_KNOWN 5 /* steps known before the factor rule applies */

static double median(const mt_trainer *t) {
  const int n = t->spike_n < t->cfg.spike_window ? t->spike_n : t->cfg.spike_window;
  double *s = mt_malloc((size_t)n * sizeof *s);
  memcpy(s, t->spike_hist, (size_t)n * sizeof *s);
  const double m = mt_median(s, n);
  free(s);
  return m;
}

int mt_spike_test(mt_trainer *t, double loss, double norm, char *why, size_t size) {
  t->spike_median = -1.0;
  if (!isfinite(loss) || !isfinite(norm)) {
    snprintf(why, size, "%s is %g", !isfinite(loss) ? "the loss" : "the gradient norm",
             !isfinite(loss) ? loss : norm);
    return 1;
  }
  if (t->cfg.spike_factor <= 0 || t->spike_n < MIN_KNOWN) return 0;
  const double m = median(t);
  t->spike_median = m;
  if (!(loss > t->cfg.spike_factor * m)) return 0;
  snprintf(why, size, "loss %.4f > train.spike_factor %g x %.4f, the median of the last %d steps",
           loss, t->cfg.spike_factor, m,
           t->spike_n < t->cfg.spike_window ? t->spike_n : t->cfg.spike_window);
  return 1;
}

void mt_spike_note(mt_trainer *t, double loss) {
  if (t->cfg.spike_factor <= 0) return;
  if (!t->spike_hist) t->spike_hist = mt_calloc((size_t)t->cfg.spike_window, sizeof(double));
  t->spike_hist[t->spike_n % t->cfg.spike_window] = loss;
  t->spike_n++;
}

/* the run stops here: one line, exit 3 on every rank (all decided alike) */
static void stop(mt_trainer *t, long long done, const char *why, const char *more) {
  mt_err e = {0};
  mt_err_runtime(&e, "loss spike at step %lld: %s; %s", done, why, more);
  mt_err_report(&e, "meshtrain");
  MT_MPI_CHECK(MPI_Finalize());
  exit(MT_EXIT_RUNTIME);
}

long long mt_spike_handle(mt_trainer *t, int step, const char *why) {
  const mt_config *cfg = &t->cfg;
  const long long done = step + 1;
  char more[1024];
  const long long newest = t->last_saved; /* the newest checkpoint's step (or the start) */
  if (cfg->on_spike == MT_SPIKE_STOP || cfg->ckpt_mode == MT_CKPT_MODE_NONE ||
      t->rollbacks >= cfg->max_rollbacks) {
    if (cfg->on_spike == MT_SPIKE_ROLLBACK && cfg->ckpt_mode == MT_CKPT_MODE_NONE)
      snprintf(more, sizeof more, "train.on_spike = rollback, but ckpt.mode = none: nothing to "
                                  "roll back to");
    else if (cfg->on_spike == MT_SPIKE_ROLLBACK)
      snprintf(more, sizeof more, "train.max_rollbacks = %d rollbacks made already",
               cfg->max_rollbacks);
    else
      snprintf(more, sizeof more, "train.on_spike = stop");
    if (cfg->ckpt_mode != MT_CKPT_MODE_NONE && newest > 0) {
      size_t k = strlen(more);
      snprintf(more + k, sizeof more - k,
               " (to go on past it: train.resume = %s/checkpoints/step_%lld with "
               "train.skip_samples = %lld)",
               cfg->output_dir, newest, (done - newest) * (long long)cfg->global_batch);
    }
    stop(t, done, why, more);
  }
  mt_err err = {0};
  /* the position after the offending step; the run's own start (its
   * attempt's figures and the data's sample arithmetic count from it) */
  const long long start = t->start_step, start_samples = t->samples_done;
  const long long from_samples = start_samples + (done - start) * cfg->global_batch;
  char resumed[sizeof t->resumed_from];
  snprintf(resumed, sizeof resumed, "%s", t->resumed_from);
  t->resumed_from[0] = '\0';
  const int rc = mt_train_load_checkpoint(t, "auto", &err);
  const int found = t->resumed_from[0] != '\0';
  const long long to = t->start_step, at_samples = t->samples_done;
  snprintf(t->resumed_from, sizeof t->resumed_from, "%s", resumed);
  t->start_step = start;
  if (rc != 0 || !found) {
    if (rc == 0)
      snprintf(more, sizeof more, "train.on_spike = rollback, but %s/checkpoints holds no "
                                  "checkpoint yet", cfg->output_dir);
    else
      snprintf(more, sizeof more, "the rollback failed: %s", err.msg);
    stop(t, done, why, more);
  }
  /* the windows of the steps since the checkpoint, the offending one's
   * too, are skipped: step `to` + 1 trains on the windows after them */
  const long long skipped = from_samples - at_samples;
  t->samples_done = from_samples - (to - start) * cfg->global_batch;
  if (t->world_rank == 0) {
    fclose(t->metrics_f);
    if (mt_train_truncate_metrics(cfg->output_dir, to, &err) != 0)
      mt_info0("meshtrain: warning: %s", err.msg);
    t->metrics_f = mt_train_open_out(cfg->output_dir, "metrics.jsonl", "a");
  }
  mt_spike_event *ev = &t->spike_events[t->rollbacks % MT_SPIKE_EVENTS];
  ev->at_step = done;
  ev->to_step = to;
  ev->skipped = skipped;
  snprintf(ev->why, sizeof ev->why, "%s", why);
  t->rollbacks++;
  t->rolled_back_from = done;
  t->rolled_back_skipped = skipped;
  t->last_saved = to;
  mt_info0("meshtrain: loss spike at step %lld (%s): rolled back to step %lld, skipping the "
           "%lld windows of steps %lld-%lld (rollback %d of at most %d)",
           done, why, to, skipped, to + 1, done, t->rollbacks, cfg->max_rollbacks);
  return to;
}

cJSON *mt_spike_json(const mt_trainer *t) {
  cJSON *arr = cJSON_CreateArray();
  const int n = t->rollbacks < MT_SPIKE_EVENTS ? t->rollbacks : MT_SPIKE_EVENTS;
  for (int i = 0; i < n; i++) {
    const mt_spike_event *ev = &t->spike_events[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "at_step", (double)ev->at_step);
    cJSON_AddNumberToObject(o, "to_step", (double)ev->to_step);
    cJSON_AddNumberToObject(o, "skipped_samples", (double)ev->skipped);
    cJSON_AddStringToObject(o, "why", ev->why);
    cJSON_AddItemToArray(arr, o);
  }
  return arr;
}
