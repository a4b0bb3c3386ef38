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
  int world_rank, pp_rank, dp_rank, cp_rank, tp_rank;
  int ep_rank, etp_rank, edp_rank; /* on the folded mesh of MoE blocks */
  /* bytes this rank allocates, by mt_mem_cat; exact, except comm with
   * pp > 1 (the pipeline's send buffers grow with the messages in flight:
   * comm is then the fixed part) */
  double mem[MT_MEM_NCAT];
  int comm_exact;
  /* bytes this rank sends per training step (no evaluation, no checkpoint)
   * over each group, as comm counts them; dp: the dp x cp group, where
   * gradients, ZeRO shards and the loss are reduced */
  double dp_bytes, tp_bytes, pp_bytes, cp_bytes;
  /* MoE: over ep (the dispatch's all-to-alls, as a balanced routing implies:
   * exact when every expert gets the same share of the slots, e.g. k = E),
   * etp (gathers and reduce-scatters inside experts) and edp (the experts'
   * gradients) */
  double ep_bytes, etp_bytes, edp_bytes;
  double dp_state_bytes; /* of dp_bytes, the gradients' and parameters' (no scalar sums) */
  double params_numel;   /* parameters it holds (its tp/pp share; ZeRO-3: its shard) */
  int n_buckets;         /* dp buckets (reductions per step) */
  int layers;            /* blocks on this rank (all its chunks) */
  mt_group groups[4];    /* tp, cp, ep, etp: the sizes and ranks the model points to */
} mt_plan_rank;

typedef struct {
  mt_train_layout lay;
  int n;                 /* every rank of the mesh */
  mt_plan_rank *r;
} mt_plan;

/* The plan of every rank of cfg's mesh (world_size 0: the mesh as given).
 * Needs no MPI. Returns 0, or -1 with e set (the validation's errors). */
int mt_plan_build(const mt_config *cfg, int world_size, mt_plan *p, mt_err *e);
/* One rank's plan (pp, dp, cp, tp coordinates), for a running rank's checks. */
int mt_plan_rank_build(const mt_config *cfg, const mt_train_layout *lay, int pp_rank, int dp_rank,
                       int cp_rank, int tp_rank, mt_plan_rank *out, mt_err *e);
void mt_plan_free(mt_plan *p);
/* mt_plan_rank_build that also hands back the count-only model it built
 * (keep: free it with mt_gpt_destroy; its registry carries the dp placement) */
int mt_plan_rank_model(const mt_config *cfg, const mt_train_layout *lay, int pp_rank, int dp_rank,
                       int cp_rank, int tp_rank, mt_plan_rank *out, mt_gpt *keep, mt_err *e);
/* The model as the rank (pp_rank, dp_rank, cp_rank, tp_rank) of cfg's mesh
 * would create it, allocating nothing (mt_gpt_create_plan; free with
 * mt_gpt_destroy). groups[4] (tp, cp, ep, etp: sizes and ranks, no MPI)
 * must outlive m. */
int mt_plan_model(const mt_config *cfg, const mt_train_layout *lay, int pp_rank, int dp_rank,
                  int cp_rank, int tp_rank, mt_group groups[4], mt_gpt *m, mt_err *e);
/* The table meshtrain --plan prints: per pipeline stage, memory by category
 * and bytes per group per step (the largest rank of the stage). */
void mt_plan_print(const mt_plan *p, const mt_config *cfg, FILE *f);
/* Every rank's figures as JSON (meshtrain --plan-json). */
void mt_plan_write_json(const mt_plan *p, const mt_config *cfg, FILE *f);
double mt_plan_rank_total(const mt_plan_rank *r);

/* What meshtrain prints without training (no MPI): one OK line for a
 * configuration valid on `ranks` ranks; the plan table (and every rank as
 * JSON into json_path unless NULL); every pp rank's schedule and its
 * simulated bubble (out NULL: print nothing, e.g. on ranks other than 0).
 * Return 0, or -1 with e set. */
int mt_train_check_report(const mt_config *cfg, int ranks, FILE *out, mt_err *e);
int mt_plan_report(const mt_config *cfg, int ranks, const char *json_path, FILE *out,
                   mt_err *e);
int mt_train_print_schedule(const mt_config *cfg, FILE *out, mt_err *e);

/* ------------------------------------------------------------------ */
/* the cost model: a layout's step time on a machine (cost.c, meshplan) */

#define MT_COST_MAX_GEMM 32

/* A hardware profile's [cost] section (inputs/hw/<name>.ini), per device
 * (= rank): what the cost model needs to price a layout. */
typedef struct {
  char name[128];
  int devices_per_node;
  double mem_bytes;          /* memory per device (mem_gib) */
  double peak_gflops;        /* dense peak of the precision trained in, for MFU */
  /* achievable matmul GFLOP/s by FLOPs per call (gemm = "flops:gflops ...",
   * increasing flops; log-log interpolation between the points) */
  int n_gemm;
  double gemm_flops[MT_COST_MAX_GEMM], gemm_gflops[MT_COST_MAX_GEMM];
  double elementwise_gbs;    /* memory bandwidth for elementwise work, GB/s */
  double intra_gbs, intra_us; /* collective bus bandwidth per rank and latency inside a node */
  double inter_gbs, inter_us; /* ... across nodes */
  double overlap;            /* share of a backward that dp communication may hide behind */
  double act_bytes;          /* bytes of an activation element (act_bytes, optional: 4 fp32,
                                2 bf16/fp16) */
} mt_cost_profile;

/* Loads the [cost] section; a missing or bad key is one line naming it. */
int mt_cost_profile_load(mt_cost_profile *p, const char *name_or_path, mt_err *e);
/* A profile file (an [hw] and a [cost] section) that loads back to p. */
void mt_cost_profile_write(const mt_cost_profile *p, const char *description, FILE *f);
double mt_cost_gemm_gflops(const mt_cost_profile *p, double flops);

typedef struct {
  int world, fits;
  double step_s;             /* predicted step time, and its parts: */
  double compute_s;          /*   matmuls and elementwise work of every micro-batch */
  double tp_s;               /*   tensor-parallel collectives */
  double cp_s, ep_s;         /*   context-parallel exchanges beyond what attention hides; MoE
                                  all-to-alls (balanced routing) */
  double pp_bubble_s;        /*   the schedule's idle time */
  double pp_p2p_s;           /*   pipeline messages */
  double dp_total_s, dp_exposed_s; /* dp collectives, and what backward does not hide */
  double optim_s;            /*   AdamW */
  double tokens_per_s, mfu, model_flops;
  /* the plan's figures, the largest rank's of any stage */
  double mem_bytes, mem[MT_MEM_NCAT];
  double dp_bytes, tp_bytes, pp_bytes;
} mt_cost;

/* The predicted step of cfg's layout on profile p. Returns 0, or -1 with e
 * set (the configuration's validation errors). */
int mt_cost_estimate(const mt_config *cfg, const mt_cost_profile *p, mt_cost *out, mt_err *e);

/* What a calibration reads: meshbench JSON lines of gemm (at the shapes of
 * the ranks' threads), of a collective (allreduce, 2 or more ranks; rows with
 * nodes > 1 give the network, the others the inside of a node) and of
 * stream; and what meshbench cannot measure. */
typedef struct {
  const char *name, *gemm_json, *coll_json, *stream_json;
  int devices_per_node;      /* 0: the collective rows' ranks per node */
  double mem_gib;            /* memory per device */
  double peak_gflops;        /* 0: the fastest matmul measured */
  double overlap;            /* share of a backward dp communication hides behind */
} mt_calibration_input;
int mt_cost_calibrate(const mt_calibration_input *in, mt_cost_profile *p, mt_err *e);

/* Every layout of base's model and batch on `nodes` nodes of p, priced and
 * sorted (those that fit first, fastest first). */
typedef struct {
  int tp, pp, dp, cp, ep, zero, micro_batch, sp, recompute, virtual_stages;
  char schedule[MT_CFG_STR_MAX];
  mt_cost cost;
} mt_search_row;

typedef struct {
  mt_search_row *r;
  int n, cap;
  int tried, valid, fitting;
  double smallest_mem;       /* bytes per device of the leanest valid layout */
  double seconds;            /* time the search took */
} mt_search;

/* Returns 0, or -1 with one line in e: no valid layout, or none fits (how
 * much memory the leanest needs and how short the profile is). */
int mt_search_layouts(const mt_config *base, const mt_cost_profile *p, int nodes, mt_search *s,
                      mt_err *e);
void mt_search_free(mt_search *s);
/* the row as a campaign layout: "tp=..,pp=..,cp=..,dp=..,zero=..,mb=..,..." */
void mt_search_layout_text(const mt_search_row *r, char *buf, size_t len);

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
  /* the device (device.c): kind, precision, this rank's GPU (-1: none) */
  mt_device_kind device;
  mt_precision precision;
  int gpu, gpu_shared;
  char gpu_name[256];
  float *ckpt_host;      /* page-locked snapshot of device state for checkpoints */
  size_t ckpt_host_n;
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
  double last_dp_bytes, last_tp_bytes, last_pp_bytes, last_cp_bytes; /* the last step's, this
                                                                         rank */
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
