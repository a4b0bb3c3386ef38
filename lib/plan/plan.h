/* plan: what a configuration means before anything runs, without MPI.
 *
 *   mt_layout_validate  every check of a configuration for a world size,
 *                       and the layout it derives (layout.c)
 *   mt_plan_*           memory per rank by category and bytes per group per
 *                       step: the real model, dp engine and pipeline of a
 *                       rank run on the null backend over a count-only
 *                       mesh, counted (plan.c)
 *   mt_cost_*           a layout's step time on a hardware profile (cost.c),
 *                       profiles fitted from meshbench (calibrate.c)
 *   mt_search_*         every layout of a model on N nodes, priced (search.c)
 *   reports             what meshtrain --check/--plan/--print-schedule print
 *                       (report.c)
 * Depends on model, parallel, registry, metrics and core; train depends on
 * it (setup validates and checks memory against the plan), never the
 * reverse. */
#ifndef MT_PLAN_H
#define MT_PLAN_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "metrics/metrics.h"
#include "model/model.h"
#include "parallel/parallel.h"


/* What validation derives from the configuration for a world size. */
typedef struct {
  mt_model_shape shape;
  int world;             /* ranks the mesh needs: pp x dp x cp x tp */
  int per_rank;          /* sequences per dp rank per step */
  int accum;             /* micro-batches per dp rank per step */
  mt_pp_sched sched;     /* pipeline schedule (pp = 1: 1f1b, one stage) */
  int split[MT_PP_MAX_CHUNKS], has_split; /* parallel.pp_split */
  int *stage_of_layer;   /* per block: its pp rank (NULL when pp = 1) */
  mt_dtypes dtypes;      /* the dtype of every role of the state (train.precision, ...) */
} mt_layout;

/* Every check of the configuration that needs no data and no MPI: keys,
 * model shape, the mesh against world_size (0: take the mesh as given),
 * batch and micro-batches, pipeline split and schedule, ZeRO level, the
 * hardware profile, output and checkpoint options. Pure: every rank gets
 * the same answer. Returns 0, or -1 with one line in e naming the keys. */
int mt_layout_validate(const mt_config *cfg, int world_size, mt_layout *lay, mt_err *e);
void mt_layout_free(mt_layout *lay);
/* Layers [*l0, *l1) of virtual stage vs under lay. */
void mt_layout_stage_layers(const mt_config *cfg, const mt_layout *lay, int vs, int *l0,
                           int *l1);

/* What a rank of cfg's mesh is made of (mt_step_create's options): the
 * model's split over the mesh's groups, the ZeRO level and buckets, AdamW,
 * the schedule and every virtual stage's blocks (in l0l1, 2 x pp x v ints
 * the caller provides and keeps while o is used). The trainer and the plan
 * build a rank from the same options. */
void mt_layout_step_opts(const mt_config *cfg, const mt_layout *lay, mt_mesh *mesh, int *l0l1,
                         mt_step_opts *o, mt_step_groups *g);

/* ------------------------------------------------------------------ */
/* the plan: the real code, counted                                    */

/* A rank of cfg's mesh built for counting, in this process without MPI:
 * the real model, dp engine, schedule and executor (mt_step_create) on the
 * null backend over a count-only mesh. Its memory is counted into acct (the
 * process's own figures untouched) and its bytes on the mesh's groups. */
typedef struct {
  mt_mesh mesh;         /* count-only (mt_mesh_count) */
  mt_step step;
  mt_mem_account acct;
  int *tokens, *rows;   /* the step's micro-batches (zeros: their values do not matter) */
  mt_pp_batch batch;
} mt_plan_world;

typedef struct {
  int world_rank, pp_rank, dp_rank, cp_rank, tp_rank;
  int ep_rank, etp_rank, edp_rank; /* on the folded mesh of MoE blocks */
  /* bytes this rank allocates, by mt_mem_cat (the peak of a training step,
   * set-up included); exact, except comm with pp > 1 (the pipeline's send
   * buffers are one per message in flight, which depends on the peers'
   * timing: comm is then the least a run holds) */
  double mem[MT_MEM_NCAT];
  int comm_exact;
  /* bytes this rank sends per training step (no evaluation, no checkpoint)
   * over each group, counted where a run counts them; dp: the dp x cp
   * group, where gradients, ZeRO shards and the loss are reduced */
  double dp_bytes, tp_bytes, pp_bytes, cp_bytes;
  /* MoE: over ep (the dispatch's all-to-alls, of a balanced routing: exact
   * when every expert gets the same share of the slots, e.g. k = E), etp
   * (gathers and reduce-scatters inside experts) and edp (the experts'
   * gradients) */
  double ep_bytes, etp_bytes, edp_bytes;
  double dp_state_bytes; /* of dp_bytes, the gradients' and parameters' (no scalar sums) */
  double params_numel;   /* parameters it holds (its tp/pp share; ZeRO-3: its shard) */
  int n_buckets;         /* dp buckets (reductions per step) */
  int layers;            /* blocks on this rank (all its chunks) */
} mt_plan_rank;

typedef struct {
  mt_layout lay;
  int n;                 /* every rank of the mesh */
  mt_plan_rank *r;
  int counted;           /* ranks built and counted: one per class of equal figures */
} mt_plan;

/* The plan of every rank of cfg's mesh (world_size 0: the mesh as given),
 * counting one rank of each class of ranks whose figures are the same (the
 * same stage and the same shard sizes), so a plan of any mesh takes
 * seconds. Needs no MPI. Returns 0, or -1 with e set (the validation's
 * errors). */
int mt_plan_build(const mt_config *cfg, int world_size, mt_plan *p, mt_err *e);
/* One rank's plan (pp, dp, cp, tp coordinates), for a running rank's checks. */
int mt_plan_rank_build(const mt_config *cfg, const mt_layout *lay, int pp_rank, int dp_rank,
                       int cp_rank, int tp_rank, mt_plan_rank *out, mt_err *e);
void mt_plan_free(mt_plan *p);
/* mt_plan_rank_build that also hands back the rank it counted (keep it:
 * free it with mt_plan_world_destroy). Its executor's chunk_bytes are the
 * step's bytes per chunk on tp, cp, ep and etp (the cost model's). */
int mt_plan_rank_world(const mt_config *cfg, const mt_layout *lay, int pp_rank, int dp_rank,
                       int cp_rank, int tp_rank, mt_plan_rank *out, mt_plan_world *keep,
                       mt_err *e);
void mt_plan_world_destroy(mt_plan_world *w);
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
int mt_plan_check_report(const mt_config *cfg, int ranks, FILE *out, mt_err *e);
int mt_plan_report(const mt_config *cfg, int ranks, const char *json_path, FILE *out,
                   mt_err *e);
int mt_plan_print_schedule(const mt_config *cfg, FILE *out, mt_err *e);

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
/* JSON pieces the plan and the run's summary share                    */

/* {"world", "dp", "tp", "pp", "cp", "zero", "sp"} of cfg, added to parent as key */
cJSON *mt_plan_json_layout(cJSON *parent, const char *key, const mt_config *cfg, int world);
/* {category name: bytes} for every mt_mem_cat, added to parent as key */
cJSON *mt_plan_json_mem(cJSON *parent, const char *key, const double *bytes);

#endif
