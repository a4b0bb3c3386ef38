/* plan: what a configuration means before anything runs, without MPI.
 *
 *   mt_layout_validate  every check of a configuration for a world size,
 *                       and the layout it derives (layout.c)
 *   mt_plan_*           memory per rank by category and bytes per group per
 *                       step: the real model, dp engine and pipeline of a
 *                       rank run on the null backend over a count-only
 *                       mesh, counted (plan.c)
 *   mt_cost_*           a layout's step time on a hardware profile (cost.c,
 *                       its pieces in cost_*.c: cost_internal.h), profiles
 *                       fitted from meshbench (calibrate.c)
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

#include "data/data.h"
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
  int chunks;            /* virtual stages per pp rank (parallel.virtual_stages; pp = 1: 1) */
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
  double update_state_bytes; /* of the dp x cp state bytes, what the optimizer step sent */
  mt_comm_rec rec;      /* priced: the step's collectives in order (comm.h) */
  /* a step priced from shorter ones (mt_plan_rank_world_scaled): rec is
   * the step of rec_m[1] micro-batches, rec_prev of rec_m[0]; else rec_m 0 */
  mt_comm_rec rec_prev;
  int rec_m[2];
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
  /* parallel.ep_balance = least-loaded: the most the exchange of expert
   * weights and gradients adds to ep_bytes in a step (the plan's routing is
   * balanced, so ep_bytes holds none of it) */
  double ep_llep_bytes;
  double dp_state_bytes; /* of dp_bytes, the gradients' and parameters' (no scalar sums) */
  double dp_update_bytes; /* of dp_state_bytes, the updated parameters gathered after the
                             optimizer step (ZeRO 1, 2; Muon's matrices at ZeRO 0) */
  /* optim.name = muon (mt_dp_muon_get_stats of the rank's dp engine): the
   * Newton-Schulz FLOPs per step of the matrices it owns, the busiest and
   * the mean rank's of its groups (dense and expert summed), the matrices
   * it owns; and its exchange's bytes per step, which dp_bytes, tp_bytes,
   * edp_bytes and etp_bytes include (comm counts every byte of a group):
   * over dp x cp, tp (the shard axis of dense matrices), edp and etp */
  double muon_owned_flops, muon_busiest_flops, muon_mean_flops;
  int muon_matrices, muon_owned;
  double muon_dp_bytes, muon_tp_bytes, muon_edp_bytes, muon_etp_bytes;
  double params_numel;   /* parameters it holds (its tp/pp share; ZeRO-3: its shard) */
  double moments_numel;  /* elements of each moment it holds (the rest of the optimizer's
                            bytes: Muon's exchange buffers and scratch) */
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
 * same stage and the same shard sizes; under optim.name = muon also the
 * same place in the groups, which sets the matrices a rank owns), so a
 * plan of any mesh takes seconds. Needs no MPI. Returns 0, or -1 with e
 * set (the validation's errors). */
int mt_plan_build(const mt_config *cfg, int world_size, mt_plan *p, mt_err *e);
/* One rank's plan (pp, dp, cp, tp coordinates), for a running rank's checks. */
int mt_plan_rank_build(const mt_config *cfg, const mt_layout *lay, int pp_rank, int dp_rank,
                       int cp_rank, int tp_rank, mt_plan_rank *out, mt_err *e);
void mt_plan_free(mt_plan *p);
/* mt_plan_rank_build that also hands back the rank it counted (keep it:
 * free it with mt_plan_world_destroy). Its executor's chunk_bytes are the
 * step's bytes per chunk on tp, cp, ep and etp (the cost model's). With
 * price, the step runs on the virtual device's op table over a clock of
 * its own (the caller's clock is put back after): the executor's chunk_s
 * are then the step's op seconds per chunk at those prices. */
int mt_plan_rank_world(const mt_config *cfg, const mt_layout *lay, int pp_rank, int dp_rank,
                       int cp_rank, int tp_rank, const mt_price *price, mt_plan_rank *out,
                       mt_plan_world *keep, mt_err *e);
void mt_plan_world_destroy(mt_plan_world *w);
/* mt_plan_rank_world of dp, cp and tp rank 0 that, with many micro-batches
 * (at least 20 pp; not GPipe or breadth-first), runs three shorter steps
 * (3 to 5 pp micro-batches, and m mod pp) and takes each figure on the line through
 * them where every figure is affine in the micro-batches (the same to
 * rounding), else runs the whole step (plan_scaled.c). The world kept ran the longest of
 * the three: its executor's chunk_bytes and chunk_s are the step's at
 * lay->accum, the rest of its state the shorter step's; its rec_prev and
 * rec the two longer steps' recordings (rec_m their micro-batches). */
int mt_plan_rank_world_scaled(const mt_config *cfg, const mt_layout *lay, int pp_rank,
                              const mt_price *price, mt_plan_rank *out, mt_plan_world *keep,
                              mt_err *e);
/* The table meshtrain --plan prints: per pipeline stage, memory by category
 * and bytes per group per step (the largest rank of the stage); under
 * optim.name = muon the gradients' and parameters' bytes in the table, and
 * per stage Muon's assignment (Newton-Schulz FLOPs owned, busiest over
 * mean) and its exchange's bytes per group apart. */
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
/* the cost model: a layout's step time on a machine (cost*.c, meshplan) */

#define MT_COST_MAX_GEMM MT_PRICE_MAX_GEMM

/* A hardware profile's [cost] section (inputs/hw/<name>.ini), per device
 * (= rank): what the cost model needs to price a layout. */
typedef struct {
  char name[128];
  int devices_per_node;
  double mem_bytes;          /* memory per device (mem_gib) */
  double peak_gflops;        /* dense peak of the precision trained in, for MFU */
  /* achievable matmul GFLOP/s by FLOPs per call, a curve for each operand
   * width (core's mt_price_width: [0] bf16, [1] fp32; "flops:gflops ...",
   * increasing flops, log-log interpolation between the points). Key gemm
   * is the curve of the width the profile's runs train in (act_bytes);
   * gemm_bf16 or gemm_fp32 the other width's, measured (meshbench, a
   * published benchmark), else gemm's scaled by the ratio of the [hw]
   * section's peaks (peak_gflops_bf16, peak_gflops_fp32; 1 without them).
   * gemm_given: bit w set where gemm[w] was read, not derived. */
  mt_price_curve gemm[2];
  unsigned gemm_given;
  double elementwise_gbs;    /* memory bandwidth for elementwise work, GB/s */
  double intra_gbs, intra_us; /* collective bus bandwidth per rank and latency inside a node */
  double inter_gbs, inter_us; /* ... across nodes */
  double overlap;            /* share of the compute a collective issued beside it may hide
                                behind (dp buckets in backward, ZeRO-3's prefetched gathers) */
  double act_bytes;          /* bytes of an activation element (act_bytes, optional: 4 fp32,
                                2 bf16: the runs priced on this profile train in bf16) */
  /* block attention (optional keys): attn_block = BR:BC, query rows and keys of one
   * tile (default 64:256, the CPU backend's blocks); attn_gflops, the fused kernel's
   * FLOP/s on whole tiles (0, the default: each tile's two products priced on the
   * matmul curve at their size, as the CPU backend calls them), by mt_price_width as
   * gemm: the profile's attn_gflops at act_bytes' width, attn_gflops_bf16 or _fp32 the
   * other's (or the one given scaled by the [hw] peaks' ratio); attn_given, which
   * widths were given (bits by width) */
  int attn_br, attn_bc;
  double attn_gflops[2];
  unsigned attn_given;
  /* the attention kernel priced: 0 block attention (what meshtrain's
   * backends run), 1 materialized (another stack's batched QK^T and PV
   * GEMMs over the whole T x T square, a fused scale-mask-softmax and
   * attention dropout through memory: Megatron-LM before FlashAttention);
   * key attention = block | materialized, meshplan --attention */
  int attn_materialized;
  /* collectives across nodes: 0 hierarchical (NCCL's rings on nodes with a
   * network link a GPU: core's mt_price_coll_s), 1 flat (every rank's
   * whole ring volume on its own network link: a stack or fabric whose
   * collectives gain nothing from the node); key collectives =
   * hierarchical | flat, meshplan --collectives */
  int coll_flat;
  /* expert parallelism's dispatch and combine across nodes: 0 flat (each
   * routed copy of a token crosses the network to its expert's rank:
   * meshtrain's all-to-all), 1 per-node (one copy a destination node
   * crosses the network and is forwarded inside the node: DeepEP's
   * internode kernels); key ep_dispatch = flat | per-node, meshplan
   * --ep-dispatch */
  int ep_per_node;
  /* ring_step_us, small_step_us = INSIDE:ACROSS (optional, default 0:0): a
   * ring step's latency inside a node and across, of the protocol for large
   * messages and of the one for small ones (at a quarter of the
   * bandwidth), as core's mt_price_coll_s prices them */
  double ring_step_us[2], small_step_us[2];
  /* compute_efficiency (meshplan --compute-efficiency, a stack preset's
   * value; 0 is read as 1): a factor on the matmul curve and the fused
   * attention rate, applied once where they become core's prices
   * (mt_cost_price): how far a software stack's kernels and the overheads
   * between them sit from the profile's measured rates. 1 is meshtrain's
   * own; the elementwise work and the collectives keep their rates. */
  double compute_efficiency;
  /* stage_us (optional, default 0): seconds x 1e6 each pipeline op (one micro-batch's
   * forward or backward of a chunk) costs beyond its compute: the p2p hand-over's
   * synchronisation and the launches of a short op sequence */
  double stage_us;
} mt_cost_profile;

/* Loads the [cost] section; a missing or bad key is one line naming it. */
int mt_cost_profile_load(mt_cost_profile *p, const char *name_or_path, mt_err *e);
/* A profile file (an [hw] and a [cost] section) that loads back to p. */
void mt_cost_profile_write(const mt_cost_profile *p, const char *description, FILE *f);
double mt_cost_gemm_gflops(const mt_cost_profile *p, double es, double flops);
/* the share of a flat all-to-all's network bytes a per-node expert
 * dispatch sends (ep_dispatch = per-node): topk of E experts even over
 * `nodes` nodes, each remote node holding any crossed to once (cost_comm.c) */
double mt_cost_ep_node_share(double E, double topk, int nodes);
/* The profile's prices as core's mt_price (what the virtual device and
 * the cost model price with). */
void mt_cost_price(const mt_cost_profile *p, mt_price *out);

/* Bytes per element of each category of state and traffic, as priced.
 * Precision is applied once, by the run's own code: the plan a price reads
 * is counted in the configuration's dtypes (meshtrain's layout resolves
 * train.precision, train.grad_dtype and parallel.grad_reduce_dtype), in
 * every attention mode, and the cost model turns each category's counted
 * bytes into these by one factor, priced over counted bytes per element
 * (1 where they agree: a bf16 run is priced as it allocates and sends).
 * Defaults (mt_cost_dtypes_default): train.precision = bf16, the run's own
 * dtypes; else, on a profile with act_bytes = 2, mixed bf16 as Megatron-LM
 * trains (bf16 weights copy, activations and tp/sp/cp/pp/ep messages,
 * fp32 master weights, gradients, moments and gradient reductions); else
 * fp32 everywhere (weights = master). --dtype overrides a category. */
typedef struct {
  double weights;     /* the compute copy of the parameters (ZeRO-3 gathers it) */
  double master;      /* separate master weights, sharded like the moments (0: none) */
  double grads;       /* gradient accumulation buffers */
  double moments;     /* each of AdamW's two moments */
  double acts;        /* activations kept for backward and their gradients */
  double grad_reduce; /* gradient reductions over dp x cp (and edp) */
  double msg;         /* tp, sp, cp, pp and ep messages */
} mt_cost_dtypes;
/* cfg may be NULL (the profile's defaults alone) */
void mt_cost_dtypes_default(const mt_config *cfg, const mt_cost_profile *p, mt_cost_dtypes *d);
/* the bytes per element a plan counted in the run's dtypes holds and sends
 * (an fp32 run: master 0, its weights being the master) */
void mt_cost_dtypes_counted(const mt_dtypes *run, mt_cost_dtypes *d);
/* "category=bytes" (weights, master, grads, moments, acts, grad_reduce, msg;
 * bytes 0, 1, 2 or 4; master also 0): 0, or -1 with one line in e */
int mt_cost_dtypes_set(mt_cost_dtypes *d, const char *assignment, mt_err *e);
void mt_cost_dtypes_text(const mt_cost_dtypes *d, char *buf, size_t len);
/* Stack presets (stacks.c, meshplan --stack NAME): a published software
 * stack as the values of meshplan's own pricing options. attention and
 * collectives: what --attention and --collectives would set (NULL: the
 * profile's); dtypes: --dtype assignments applied in order over the
 * defaults (NULL-terminated). The first row, meshtrain, sets nothing. */
#define MT_PLAN_STACK_MAX_DTYPES 8
typedef struct {
  const char *name;
  const char *stands_for;  /* the published stack and its source */
  const char *attention;   /* "block", "materialized" or NULL */
  const char *collectives; /* "hierarchical", "flat" or NULL */
  const char *dtypes[MT_PLAN_STACK_MAX_DTYPES];
  double compute_efficiency; /* what --compute-efficiency would set (1: meshtrain's own) */
  /* the layouts the stack could run, which a search under it ranks (a
   * layout priced alone, --only, is priced whatever it is): ZeRO up to
   * zero_max, sequence and context parallelism and token slices where set,
   * tp and pp up to tp_max and pp_max (0: any), the pipeline schedules
   * named in schedules (comma-separated parallel.schedule names; NULL: all) */
  int zero_max, sp, cp, slices, tp_max, pp_max;
  const char *schedules;
} mt_plan_stack;
/* the layout the search would try is one the stack could run */
int mt_plan_stack_runs(const mt_plan_stack *s, int tp, int pp, int cp, int zero, int sp,
                       int slices, mt_pp_sched schedule);
/* what a stack's search leaves out, as a phrase ("" where nothing) */
void mt_plan_stack_limits(const mt_plan_stack *s, char *buf, size_t len);
int mt_plan_stack_count(void);
const mt_plan_stack *mt_plan_stack_at(int i);
/* the preset named; NULL with one line in e listing the names */
const mt_plan_stack *mt_plan_stack_find(const char *name, mt_err *e);
/* the preset's values into p (attention, collectives, compute efficiency) and dt (after
 * mt_cost_dtypes_default; explicit flags go after this). 0, or -1 with e set */
int mt_plan_stack_apply(const mt_plan_stack *s, mt_cost_profile *p, mt_cost_dtypes *dt,
                        mt_err *e);
/* Bytes per device the planner keeps free (plan.headroom; -1: 3 GiB, or a
 * tenth of the profile's memory when that is less). */
double mt_cost_headroom(const mt_config *cfg, const mt_cost_profile *p);

/* Documents in the plan (docs.c): from plan.doc_lengths' histogram, the
 * share of packed attention's work the documents leave (density) and the
 * dp ranks' mean largest work over their mean under data.balance
 * (imbalance); both 1 and priced 0 without documents or a histogram. Under
 * data.seq_policy = varlen (varlen 1): imbalance over dp x cp, pad_factor
 * (a dp rank's rows over its windows) and exchange_share (the micro-batches
 * that need the cp exchange) of the run's plan of the simulated steps.
 * Returns 0, or -1 with e set (an unreadable or malformed histogram). */
typedef struct {
  double density, imbalance, pad_factor, exchange_share;
  int priced, varlen;
} mt_plan_docs;
int mt_plan_docs_price(const mt_config *cfg, const mt_model_shape *s, mt_plan_docs *out,
                       mt_err *e);
/* The work that sets a step's balance with documents: lin, the matmul
 * FLOPs of a token (mt_train_flops_per_token_mm without its attention
 * term), and att = 12 n_layer C, the FLOPs of one visible (query, key)
 * pair, forward and backward (the model's 6 n_layer C T per token over T / 2
 * pairs). data.balance, varlen's plan and the planner weigh with these. */
void mt_doc_work(const mt_model_shape *s, double *lin, double *att);
/* varlen's plan's shape (lib/data/varlen.c) for a model, a cp layout (its
 * chunks and mode), dp ranks and a global batch (each dp rank holds at most
 * twice its windows) */
void mt_varlen_shape_of(const mt_model_shape *s, const mt_cp_layout *l, int dp, int global_batch,
                        mt_varlen_shape *out);
/* data.balance's hand-out of n items of cost[i] to bins of n / bins items
 * each: in order (item i to bin i / (n / bins)), or with flops the dearest
 * first (ties by index), each to the least loaded bin with room (ties: the
 * lower bin). order[b x n / bins + k]: bin b's k-th item. Returns the
 * largest bin's cost over the mean (1 when all are 0). */
double mt_balance_assign(const double *cost, int n, int bins, int flops, int *order);

typedef struct {
  int world, fits;
  double step_s;             /* predicted step time, and its parts: */
  double compute_s;          /*   matmuls, block attention and elementwise work */
  double tp_s;               /*   tensor-parallel collectives */
  double cp_s, ep_s;         /*   context-parallel exchanges beyond what attention hides; MoE
                                  all-to-alls (balanced routing) */
  double pp_bubble_s;        /*   the schedule's idle time */
  double pp_p2p_s;           /*   what the pipeline messages add to the schedule (their exposed part) and the per-op stage overhead */
  double dp_total_s, dp_exposed_s; /* dp collectives, and what compute does not hide */
  /* per pipeline stage (first 64): its dp bytes over the link, and the part
   * beyond its last backward and the cool-down after it (pp > 1; the
   * step's dp_exposed_s is the largest, plus the calls' latencies) */
  double stage_dp_s[64], stage_dp_exposed_s[64];
  double optim_s;            /*   the optimizer step: AdamW's, and under optim.name = muon
                                  (after the backward and the reductions, not hidden) Muon's: */
  double optim_ns_s;         /*     the busiest owner's Newton-Schulz iterations */
  double optim_exchange_s;   /*     the exchange's all-to-alls over dp x cp and tp (edp, etp) */
  double optim_momentum_s;   /*     the momentum and update's elementwise work */
  double optim_flops;        /*   Muon: the busiest rank's Newton-Schulz FLOPs per step */
  /* Muon's exchange's bytes per step over dp x cp (and edp) and tp (and
   * etp), the plan's first rank's of a stage, the most: not in dp_bytes,
   * tp_bytes */
  double muon_dp_bytes, muon_tp_bytes;
  double tokens_per_s, mfu, model_flops;
  /* the plan's figures in the run's dtypes, the largest rank's of any stage */
  double mem_bytes, mem[MT_MEM_NCAT];
  double headroom;           /* bytes kept free: fits = mem_bytes + headroom <= the device */
  double dp_bytes, tp_bytes, pp_bytes;
  mt_plan_docs docs;         /* documents: attention's share, dp imbalance (x the schedule) */
} mt_cost;

/* The predicted step of cfg's layout on profile p, in dtypes dt (NULL: the
 * defaults). Returns 0, or -1 with e set (the configuration's validation
 * errors). */
int mt_cost_estimate(const mt_config *cfg, const mt_cost_profile *p, mt_cost *out, mt_err *e);
int mt_cost_estimate_dt(const mt_config *cfg, const mt_cost_profile *p, const mt_cost_dtypes *dt,
                        mt_cost *out, mt_err *e);
/* Without the plan, from the shape alone: a lower bound of cfg's step time
 * (the slowest stage's matmuls and attention, every micro-batch, and the
 * pipeline's fill; l_first, l_mid, l_last: the layers of the first, a
 * middle and the last stage; act_bytes_lb: at most the activations' bytes
 * per element; msg_bytes: a message element's priced bytes, dt's msg) and of its memory per device (the state of
 * the stage with the most layers, no activations) in dtypes dt. The search
 * prunes with them. */
double mt_cost_step_lower_bound(const mt_config *cfg, const mt_cost_profile *p,
                                const mt_model_shape *sh, double act_bytes_lb, double msg_bytes,
                                int l_first, int l_mid, int l_last);
/* sets: the most activation sets the schedule has the first stage hold at
 * once (forwarded, not yet backed; mt_pp_first_stage_sets), each of a
 * chunk's l_first / v layers; 0: at least min(units, pp) */
double mt_cost_mem_lower_bound(const mt_config *cfg, const mt_cost_dtypes *dt,
                               const mt_model_shape *sh, int l_first, int l_most, int sets);
/* one layer's forward + backward seconds and the embedding's and the LM
 * head's (a micro-batch of cfg's layout, compute only): the search balances
 * the first and last pipeline stages with them */
void mt_cost_layer_times(const mt_config *cfg, const mt_cost_profile *p, const mt_model_shape *sh,
                         double *layer_s, double *embed_s, double *head_s);

/* What a calibration reads: meshbench JSON lines of gemm (at the shapes of
 * the ranks' threads), of a collective (allreduce, 2 or more ranks; rows with
 * nodes > 1 give the network, the others the inside of a node), of stream
 * and, optionally, of attention (the block kernels' forward + backward: the
 * profile's attn_gflops, which prices them as timed at those shapes); and
 * what meshbench cannot measure. */
typedef struct {
  const char *name, *gemm_json, *coll_json, *stream_json;
  const char *attn_json; /* NULL: attention at the matmul curve */
  int devices_per_node;      /* 0: the collective rows' ranks per node */
  double mem_gib;            /* memory per device */
  double peak_gflops;        /* 0: the fastest matmul measured */
  double overlap;            /* share of a backward dp communication hides behind */
} mt_calibration_input;
int mt_cost_calibrate(const mt_calibration_input *in, mt_cost_profile *p, mt_err *e);

/* Every layout of base's model and batch on a number of ranks, priced and
 * sorted (fastest first). */
typedef struct {
  int tp, pp, dp, cp, ep, zero, micro_batch, sp, recompute, virtual_stages;
  int pp_first, pp_last;     /* uneven first/last stages (0: an even split) */
  int pp_slices;             /* token slices of each sequence (parallel.pp_token_slices; 0, 1:
                                none) */
  mt_pp_sched schedule;
  mt_cost cost;
} mt_search_row;

typedef struct {
  mt_search_row *r;          /* the layouts priced that fit, fastest first */
  int n, cap;
  int tried;                 /* layouts enumerated */
  int valid;                 /* of them, the run would accept (checked when priced) */
  int fitting;               /* priced and fit */
  int pruned_mem;            /* certain not to fit by the memory lower bound */
  int pruned_time;           /* slower by the step-time lower bound than the kept rows */
  int bounds_over;           /* priced layouts whose step-time or memory lower bound exceeds
                                their price (the pruning is sound only at 0) */
  double smallest_mem;       /* bytes per device of the leanest layout (lower bound where
                                none was priced) */
  double seconds;            /* time the search took */
} mt_search;

typedef struct {
  int world;                 /* ranks (devices) */
  int keep;                  /* price until this many fitting layouts are certain to be
                                the fastest (0: price every layout that may fit) */
  const mt_cost_dtypes *dt;  /* NULL: the profile's defaults */
  const mt_plan_stack *stack; /* only the layouts it could run (NULL: every one) */
} mt_search_opts;

/* The rules (stated in docs/planner.md): tp a power of two inside a node
 * dividing the heads; pp dividing the layers evenly, or with the first and
 * last stages balanced against the embedding and the LM head
 * (parallel.pp_first_layers / pp_last_layers); cp (ring) only when a rank
 * would otherwise hold more than plan.cp_min_tokens tokens of a sequence
 * and keeps at least 1024; ep a power of two dividing the experts, inside a
 * node (tp and ep across nodes only with plan.across_nodes); dp the
 * rest; ZeRO 0-3 (2 and 3 with one stage); micro-batches of powers of two;
 * the schedules 1F1B, interleaved (2, 4 chunks) and ZB-H1; recompute off
 * and on; sp with tp. A layout the run would refuse, or whose memory in the
 * run's dtypes plus plan.headroom exceeds the device, is never ranked.
 * Returns 0, or -1 with one line in e: no valid layout, or none fits (how
 * much memory the leanest needs and how short the profile is). */
int mt_search_run(const mt_config *base, const mt_cost_profile *p, const mt_search_opts *o,
                  mt_search *s, mt_err *e);
/* mt_search_run on nodes x devices_per_node ranks, every layout priced */
int mt_search_layouts(const mt_config *base, const mt_cost_profile *p, int nodes, mt_search *s,
                      mt_err *e);
void mt_search_free(mt_search *s);
/* the row as a campaign layout: "tp=..,pp=..,cp=..,dp=..,zero=..,mb=..,..." */
void mt_search_layout_text(const mt_search_row *r, char *buf, size_t len);
/* the row's settings applied to cfg (the mesh, ZeRO, micro-batch, schedule,
 * split, recompute, sp, ep) */
void mt_search_row_apply(const mt_search_row *r, mt_config *cfg);

/* the profile parallel.layout = auto plans on: plan.hw, else on the virtual
 * device train.virtual_hw (the hardware it emulates), else metrics.hw */
const char *mt_plan_auto_hw(const mt_config *cfg);
/* parallel.layout = auto: the fastest layout of cfg's model and batch on
 * `world` ranks of the profile mt_plan_auto_hw names, written into cfg;
 * best and (if any) second receive the two fastest rows. Pure: every rank
 * gets the same answer. Returns 0, or -1 with one line in e naming what to
 * change (no cost profile, no layout that fits). */
int mt_plan_auto(mt_config *cfg, int world, mt_search_row *best, mt_search_row *second,
                 int *n_ranked, mt_err *e);

/* ------------------------------------------------------------------ */
/* JSON pieces the plan and the run's summary share                    */

/* {"world", "dp", "tp", "pp", "cp", "zero", "sp"} of cfg, added to parent as key */
cJSON *mt_plan_json_layout(cJSON *parent, const char *key, const mt_config *cfg, int world);
/* {category name: bytes} for every mt_mem_cat, added to parent as key */
cJSON *mt_plan_json_mem(cJSON *parent, const char *key, const double *bytes);

#endif
