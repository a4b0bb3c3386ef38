/* train: a training run as phases, for any layout.
 *
 *   mt_layout_validate   the configuration for a world size, without MPI
 *                       (meshtrain --check, --plan, and setup itself)
 *   mt_train_setup      mesh, memory check, data, and this rank's step
 *                       (lib/parallel's mt_step: model, dp/ZeRO state,
 *                       pipeline schedule and executor)
 *   mt_train_resume     load a checkpoint written under any layout
 *   mt_train_loop       the step loop: data -> mt_step_gradients (the
 *                       schedule's forward and backward, pp = 1 a one-stage
 *                       schedule, and the gradient sync) -> mt_step_update
 *                       (clip, optimizer) -> metrics -> checkpoint and
 *                       signal policy
 *   mt_train_evaluate   the validation loss (eval.c)
 *   mt_train_summary    summary.json and the closing lines
 *
 * Validation, the plan and the cost model live in lib/plan (plan/plan.h). */
#ifndef MT_TRAIN_H
#define MT_TRAIN_H

#include <stdio.h>

#include "ckpt/ckpt.h"
#include "comm/comm.h"
#include "core/core.h"
#include "data/data.h"
#include "kernels/kernels.h"
#include "metrics/metrics.h"
#include "model/model.h"
#include "parallel/parallel.h"
#include "plan/plan.h"

/* ------------------------------------------------------------------ */
/* the run                                                             */

#define MT_SPIKE_EVENTS 16
typedef struct {
  long long at_step, to_step, skipped; /* the spike's step, the checkpoint's, windows skipped */
  char why[160];
} mt_spike_event;

typedef struct {
  mt_config cfg;
  mt_layout lay;
  int world_rank, world_size;
  double t_start;        /* when setup began (seconds, mt_now) */
  mt_mesh mesh;
  mt_hw_profile hw;
  /* data */
  mt_sources sources;     /* data.train or data.blend's sources, their files */
  int synthetic;          /* tokens drawn from the vocabulary, no file (setup.c) */
  mt_blend blend;         /* the training stream over them */
  mt_sampler *val_sampler; /* per source: its validation windows */
  int *val_seq;           /* per source: the validation windows evaluated */
  double *val_by_source;  /* per source: the last evaluation's mean loss */
  const char **source_names; /* per source: its name (in sources) */
  int n_val_seq;          /* in all */
  /* the device (device.c): kind, precision, this rank's GPU (-1: none) */
  mt_device_kind device;
  mt_precision precision;
  int gpu, gpu_shared;
  char gpu_name[256];
  mt_cost_profile vprof; /* train.device = virtual: the profile that prices it */
  double emul_wall_s;    /* virtual: the wall seconds the step loop took to emulate */
  float *ckpt_host;      /* page-locked snapshot of device state for checkpoints */
  size_t ckpt_host_n;
  /* compute: the model, the dp engine, the schedule and its executor */
  const mt_ops *ops;
  mt_step step;
  /* the step's micro-batches: (accum, micro_batch, T) host tokens and the
   * sequences in each (T: this rank's tokens of a sequence, seq_len / cp);
   * data.documents: where each position's document begins, (accum,
   * micro_batch, seq_len) over the whole sequences (else NULL) */
  int *inp, *tgt, *rows;
  int *doc;
  /* documents (balance.c): the step's samples, dp rank d's from order[d x
   * per_rank], and the step's FLOP imbalance over the dp x cp ranks */
  uint64_t *order;
  double flop_imbalance;
  /* the micro-batches this step runs: lay.accum, or under data.seq_policy
   * = varlen as many as its plan gives this dp rank (varlen.c): its windows
   * (G, 2 seq_len: inputs, targets) and the
   * plan's figures for the step record */
  int n_mb;
  int *vl_win;
  int *vl_seg, vl_seg_cap; /* the step's sequences: window, start, length (vl_seg_cap each) */
  mt_varlen_plan vl_plan;
  int vl_exchange_mb;
  uint64_t vl_hash;
  /* data.hash_batches: this rank's windows of the step so far, and the
   * step's sum over the dp ranks (loop.c batch_hash) */
  uint64_t data_hash_local, data_hash;
  /* the run's position */
  long long start_step, samples_done;
  char resumed_from[2 * MT_CFG_STR_MAX];
  double peak_flops, peak_per_rank, flops_per_token;
  const char *peak_source;
  int mfu_warned; /* rank 0 said once that the MFU passed 100% (the peak is too low) */
  long long tokens_per_step;
  FILE *metrics_f;
  /* results */
  double setup_s, resume_s, wall_s, total_step_s, sum_tok_s, first_loss, last_loss, last_val;
  double total_ckpt_s;
  int timed_steps, exit_code;
  long long last_step_done, last_saved;
  double last_dp_bytes, last_tp_bytes, last_pp_bytes, last_cp_bytes; /* the last step's, this
                                                                         rank */
  double last_ep_bytes, last_etp_bytes, last_edp_bytes;
  /* optim.name = muon: the Newton-Schulz FLOPs per step this rank owns and
   * the job's (every rank's summed); the last step's bytes of its exchange
   * over dp x cp, tp, edp, etp (of last_*_bytes) and its counters so far */
  double optimizer_flops, optimizer_flops_job;
  double last_muon_bytes[4], muon_bytes_seen[4];
  /* loss spikes (spike.c): the running window of normal losses, the
   * median the last test used (-1: none), the rollbacks made and the
   * first MT_SPIKE_EVENTS of them, what the next step record reports;
   * poison: the test hook's factor on this rank's loss (1: none) */
  double *spike_hist, spike_median, poison, poison_factor;
  uint64_t poison_sample;
  int spike_n, rollbacks;
  mt_spike_event spike_events[MT_SPIKE_EVENTS];
  long long rolled_back_from, rolled_back_skipped;
} mt_trainer;

/* Collective: everything before the first step. Bad input ends every rank
 * with one line from rank 0 and exit code 2 (nothing under output.dir
 * touched). */
void mt_train_setup(mt_trainer *t, const mt_config *cfg);
/* Collective: train.resume (a checkpoint under any layout), then the
 * outputs (config.ini, metrics.jsonl continued). */
void mt_train_resume(mt_trainer *t);
/* train.init_from: the model's shape read from the checkpoint into cfg (a
 * shape key given that disagrees: an error; a shorter model.seq_len: kept,
 * the position table sliced at load). Collective. 0, or -1 with e set. */
int mt_train_init_from_shape(mt_config *cfg, mt_err *e);
/* Collective: the step loop; returns the exit code (0; 75 when SIGUSR1
 * stopped it after a checkpoint; 76 when SIGTERM did). */
int mt_train_loop(mt_trainer *t);
/* Collective: summary.json and the closing lines. */
void mt_train_summary(mt_trainer *t);
void mt_train_destroy(mt_trainer *t);

/* Mean validation loss: per source, over its first t->val_seq[i] validation
 * windows (into t->val_by_source[i]); the sources' losses weighted by the
 * blend's weights (one source: its loss),
 * split over dp; the same for any layout (eval.c). */
double mt_train_evaluate(mt_trainer *t);

/* data.documents (balance.c): the samples of the step whose first is s0,
 * dp rank d's per_rank from order[d x per_rank] (data.balance = flops: by
 * their FLOPs; else in sample order), and the FLOP imbalance over the dp x
 * cp ranks they give. The same on every rank (reads all G windows). */
void mt_balance_step(mt_trainer *t, uint64_t s0, uint64_t *order, double *imbalance);

/* data.seq_policy = varlen (varlen.c). The rows a dp rank can hold. */
int mt_varlen_row_cap(const mt_trainer *t);
/* At start, collective: a document longer than model.seq_len refused (with
 * data.long_documents = refuse; a file source) into e. */
void mt_varlen_check(mt_trainer *t, mt_err *e);
/* The step whose first sample is s0: its plan, and this dp rank's rows of
 * it as t->n_mb micro-batches (t->inp, tgt, doc, rows). */
void mt_varlen_load(mt_trainer *t, uint64_t s0);
/* one window as the trainer reads it: its sample index and tokens, hashed */
uint64_t mt_window_hash(uint64_t g, const int *tok, int n);

/* Stop signals only set a flag (installed first thing in setup); the ranks
 * agree on it at a step boundary (the largest value wins), checkpoint and
 * exit. SIGUSR1 (Slurm's warning before the walltime, a preemption drill)
 * asks to be requeued: exit 75 (MT_EXIT_PREEMPTED). SIGTERM (scancel, a
 * shutdown) asks to stop for good: exit MT_EXIT_CANCELLED, which the job
 * scripts do not requeue. SIGINT (Ctrl-C) stops for good too, with the
 * shell's code for it, 130 (MT_EXIT_INTERRUPTED); a second SIGINT ends the
 * process at once. SIGINT wins over SIGTERM, SIGTERM over SIGUSR1. */
enum { MT_STOP_NONE = 0, MT_STOP_PREEMPT = 1, MT_STOP_CANCEL = 2, MT_STOP_INTERRUPT = 3 };
#define MT_EXIT_CANCELLED 76
#define MT_EXIT_INTERRUPTED 130 /* 128 + SIGINT */
void mt_train_install_signals(void);
int mt_train_signalled(void); /* MT_STOP_* */

/* The device (device.c). Collective: resolve train.device/precision (bad
 * input ends every rank with exit 2), pick this rank's GPU by node-local
 * rank, start the CUDA backend, set up comm's device paths (NCCL, staging). */
void mt_train_device_setup(mt_trainer *t);
void mt_train_device_destroy(mt_trainer *t);
/* Collective over the node: need (bytes of tensors per rank, the plan's)
 * plus the backend's scratch, summed over the ranks sharing this GPU,
 * against its free memory; e set when it does not fit. */
void mt_train_device_check_memory(mt_trainer *t, double need, mt_err *e);
/* Checkpoint state held on the device: to_host replaces each range's memory
 * by a host snapshot (kept in t); for a load, host_buffers makes host ranges
 * shaped like dev (free the returned block with mt_cuda_host_free and each
 * host[g] with free), upload copies them into place. */
void mt_train_state_to_host(mt_trainer *t, mt_flat_range **r, const int *n);
float *mt_train_state_host_buffers(mt_trainer *t, mt_flat_range **host, mt_flat_range *const *dev,
                                   const int *n);
void mt_train_state_upload(mt_trainer *t, mt_flat_range *const *host, mt_flat_range *const *dev,
                           const int *n);

/* Checkpoint the state at `done` steps; with async (per-writer) the write
 * goes on in the background. Returns the blocking seconds. */
double mt_train_save(mt_trainer *t, long long done, long long samples, int is_final,
                     mt_ckpt_async **async);

#endif
