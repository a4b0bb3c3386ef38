/* train: a training run as phases, for any layout.
 *
 *   mt_train_validate   the configuration for a world size, without MPI
 *                       (meshtrain --check, --plan, and setup itself)
 *   mt_train_setup      mesh, registry and model, dp/ZeRO state, pipeline
 *                       schedule and stage, memory check, data
 *   mt_train_resume     load a checkpoint written under any layout
 *   mt_train_loop       the step loop: data -> the schedule's forward and
 *                       backward (pp = 1 is a one-stage schedule) ->
 *                       gradient sync -> clip -> optimizer -> metrics ->
 *                       checkpoint and signal policy
 *   mt_train_summary    summary.json and the closing lines
 *
 * and the plan: from the configuration and the registry alone, the bytes
 * each rank holds by category and sends per step on each group. */
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

#define MT_PP_MAX_CHUNKS 64

/* What validation derives from the configuration for a world size. */
typedef struct {
  mt_model_shape shape;
  int world;             /* ranks the mesh needs: pp x dp x cp x tp */
  int per_rank;          /* sequences per dp rank per step */
  int accum;             /* micro-batches per dp rank per step */
  mt_pp_sched sched;     /* pipeline schedule (pp = 1: 1f1b, one stage) */
  int split[MT_PP_MAX_CHUNKS], has_split; /* parallel.pp_split */
  int *stage_of_layer;   /* per block: its pp rank (NULL when pp = 1) */
} mt_train_layout;

/* Every check of the configuration that needs no data and no MPI: keys,
 * model shape, the mesh against world_size (0: take the mesh as given),
 * batch and micro-batches, pipeline split and schedule, ZeRO level, the
 * hardware profile, output and checkpoint options. Pure: every rank gets
 * the same answer. Returns 0, or -1 with one line in e naming the keys. */
int mt_train_validate(const mt_config *cfg, int world_size, mt_train_layout *lay, mt_err *e);
void mt_train_layout_free(mt_train_layout *lay);
/* Layers [*l0, *l1) of virtual stage vs under lay. */
void mt_train_stage_layers(const mt_config *cfg, const mt_train_layout *lay, int vs, int *l0,
                           int *l1);

/* ------------------------------------------------------------------ */
/* the plan: memory and bytes from placement alone                     */

typedef struct {
  int world_rank, pp_rank, dp_rank, tp_rank;
  int ep_rank, etp_rank, edp_rank; /* on the folded mesh of MoE blocks */
  /* bytes this rank allocates, by mt_mem_cat; exact, except comm with
   * pp > 1 (the pipeline's send buffers grow with the messages in flight:
   * comm is then the fixed part) */
  double mem[MT_MEM_NCAT];
  int comm_exact;
  /* bytes this rank sends per training step (no evaluation, no checkpoint)
   * over each group, as comm counts them */
  double dp_bytes, tp_bytes, pp_bytes;
  /* MoE: over ep (the dispatch's all-to-alls, as a balanced routing implies:
   * exact when every expert gets the same share of the slots, e.g. k = E),
   * etp (gathers and reduce-scatters inside experts) and edp (the experts'
   * gradients) */
  double ep_bytes, etp_bytes, edp_bytes;
  double dp_state_bytes; /* of dp_bytes, the gradients' and parameters' (no scalar sums) */
  double params_numel;   /* parameters it holds (its tp/pp share; ZeRO-3: its shard) */
} mt_plan_rank;

typedef struct {
  mt_train_layout lay;
  int n;                 /* every rank of the mesh */
  mt_plan_rank *r;
} mt_plan;

/* The plan of every rank of cfg's mesh (world_size 0: the mesh as given).
 * Needs no MPI. Returns 0, or -1 with e set (the validation's errors). */
int mt_plan_build(const mt_config *cfg, int world_size, mt_plan *p, mt_err *e);
/* One rank's plan (pp, dp, tp coordinates), for a running rank's checks. */
int mt_plan_rank_build(const mt_config *cfg, const mt_train_layout *lay, int pp_rank, int dp_rank,
                       int tp_rank, mt_plan_rank *out, mt_err *e);
void mt_plan_free(mt_plan *p);
/* The table meshtrain --plan prints: per pipeline stage, memory by category
 * and bytes per group per step (the largest rank of the stage). */
void mt_plan_print(const mt_plan *p, const mt_config *cfg, FILE *f);
/* Every rank's figures as JSON (meshtrain --plan-json). */
void mt_plan_write_json(const mt_plan *p, const mt_config *cfg, FILE *f);
double mt_plan_rank_total(const mt_plan_rank *r);

/* ------------------------------------------------------------------ */
/* the run                                                             */

/* A pipeline stage as the executor sees it (pp = 1: the whole model). */
typedef struct {
  mt_gpt *model;
  mt_dp *dp;
  const mt_ops *ops;
  int pp, v, rank, last_vs;
  int l0[MT_PP_MAX_CHUNKS], l1[MT_PP_MAX_CHUNKS]; /* layers of each chunk */
  int B, T;          /* micro-batch sequences (slots are laid out for B), tokens */
  int n_mb;          /* micro-batches of this run */
  int *inp, *tgt;    /* (n_mb, B, T) host tokens */
  int *rows;         /* sequences in each micro-batch (<= B) */
  int n_slots;
  size_t set_numel;  /* floats of one activation set (the largest chunk) */
  float **slot_mem;  /* allocated at first use, kept */
  mt_gpt_acts *acts;
  double loss_sum;   /* last virtual stage: the micro-batches' losses (mean x tokens) */
  int eval;          /* forward-only pass: losses weighted by sequences */
  float dloss;
} mt_train_stage;

typedef struct {
  mt_config cfg;
  mt_train_layout lay;
  int world_rank, world_size;
  double t_start;        /* when setup began (seconds, mt_now) */
  mt_mesh mesh;
  mt_hw_profile hw;
  mt_pp_schedule sched;
  /* data */
  mt_dataset train_file, val_file, train_ds, val_ds;
  int have_val_file;
  mt_sampler sampler, val_sampler;
  int n_val_seq;
  /* compute */
  const mt_ops *ops;
  mt_gpt model;
  mt_dp dp;
  mt_train_stage stage;
  mt_pp_exec exec;
  float *tied_scratch;   /* pp: the other stage's gradient of a tied tensor */
  size_t tied_numel;
  /* the run's position */
  long long start_step, samples_done;
  char resumed_from[2 * MT_CFG_STR_MAX];
  double peak_flops, peak_per_rank, flops_per_token;
  const char *peak_source;
  long long tokens_per_step;
  FILE *metrics_f;
  /* results */
  double setup_s, resume_s, wall_s, total_step_s, sum_tok_s, first_loss, last_loss, last_val;
  double total_ckpt_s;
  int timed_steps, exit_code;
  long long last_step_done, last_saved;
  double last_dp_bytes, last_tp_bytes, last_pp_bytes; /* the last step's, this rank */
  double last_ep_bytes, last_etp_bytes, last_edp_bytes;
} mt_trainer;

/* Collective: everything before the first step. Bad input ends every rank
 * with one line from rank 0 and exit code 2 (nothing under output.dir
 * touched). */
void mt_train_setup(mt_trainer *t, const mt_config *cfg);
/* Collective: train.resume (a checkpoint under any layout), then the
 * outputs (config.ini, metrics.jsonl continued). */
void mt_train_resume(mt_trainer *t);
/* Collective: the step loop; returns the exit code (0, or 75 when stopped by
 * a signal after checkpointing). */
int mt_train_loop(mt_trainer *t);
/* Collective: summary.json and the closing lines. */
void mt_train_summary(mt_trainer *t);
void mt_train_destroy(mt_trainer *t);

/* The stage and its evaluation (stage.c). */
void mt_train_stage_create(mt_trainer *t);
void mt_train_stage_destroy(mt_trainer *t);
/* One training step's forward and backward of the stage's micro-batches
 * (inputs already in t->stage); returns the loss summed over this pp
 * column's tokens (every stage gets the last stage's). */
double mt_train_stage_step(mt_trainer *t);
/* Mean validation loss over the first t->n_val_seq validation windows,
 * split over dp; the same for any layout. */
double mt_train_evaluate(mt_trainer *t);

/* Preemption: SIGUSR1/SIGTERM only set a flag (installed first thing in
 * setup); the ranks agree on it at a step boundary. */
void mt_train_install_signals(void);
int mt_train_signalled(void);

/* Checkpoint the state at `done` steps; with async (per-writer) the write
 * goes on in the background. Returns the blocking seconds. */
double mt_train_save(mt_trainer *t, long long done, long long samples, int is_final,
                     mt_ckpt_async **async);

#endif
