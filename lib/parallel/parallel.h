/* parallel: data and pipeline parallelism over the model.
 *
 *   dp.c        the dp/ZeRO engine: the training state as the registry
 *               places it over dp x cp (its buffers, initial values and
 *               checkpoint ranges); dp_reduce.c the bucketed gradient
 *               reduction overlapped with backward; dp_gather.c ZeRO-3's
 *               gathers; dp_update.c the norm, clipping and AdamW
 *   schedule.c  pipeline schedules as data (per rank, the op list) and
 *               their validator
 *   pp.c        the pipeline executor: runs this rank's op list, driving
 *               the model (its passes, piece by piece) and the dp engine
 *               (each piece's registry units acquired, released and, in
 *               backward, reported complete)
 *   step.c      one training step of this rank as the trainer and the plan
 *               run it: the schedule, the gradient sync, the tied tensors,
 *               the loss, the optimizer
 * Depends on model (downward: the model knows nothing of dp or pipelines),
 * optim, registry and comm. */
#ifndef MT_PARALLEL_H
#define MT_PARALLEL_H

#include <stddef.h>
#include <stdio.h>
#include "comm/comm.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "optim/muon.h"
#include "optim/optim.h"
#include "registry/registry.h"

/* ------------------------------------------------------------------ */
/* data parallelism and ZeRO                                           */

/* One bucket at run time (the plan is the registry's mt_bucket_plan). */
typedef struct {
  mt_request req;       /* its reduction in flight */
  int launched;
  int units_left;       /* zero >= 2: units of the bucket whose gradients are not complete */
  int buf;              /* zero >= 2: the gradient buffer it holds, -1 none */
  int hold;             /* pp: holds a tied tensor: reduced only at the end of the step,
                           after the stages summed it */
  int narrowed;         /* zero <= 1: its reduction in flight is in the narrower reduction
                           type: widened into the gradients on completion */
} mt_bucket;

/* A unit's gathered parameters (ZeRO-3). */
typedef struct {
  int buf;             /* gather buffer holding it, -1 none */
  int state;           /* 0 released, 1 gathering, 2 gathered */
  mt_request req;
} mt_unit_gather;

/* A buffer of a pool (ZeRO-2/3 gradients, ZeRO-3 gathered parameters). */
typedef struct {
  void *mem;            /* numel elements: the gradients' type (mt_dp gdt), or the weights'
                           (wdt) for a gathered unit */
  /* gradient buffers: mem in the reduction's type (rdt: mem itself where the
   * types agree, else a narrowed copy), this rank's part of the
   * reduce-scatter (part_numel elements of rdt), and fp32 gradients' part
   * in fp32 (part itself when reduced in fp32, else part widened) */
  void *red, *part;
  float *wide;
  size_t numel, part_numel;
  int owner;            /* bucket or unit using it, -1 free */
} mt_pool_buf;

/* An fp32 slot of bf16 gradient accumulation (MT_DP_GRADS_BF16). */
typedef struct {
  float *mem;
  size_t cap;           /* elements */
  int owner;            /* unit, -1 free */
  void *home;           /* the owner's bf16 gradients (len elements) it rounds into */
  size_t len;
} mt_grad_slot;
/* The groups the dp engine works over: per reduction group of the
 * registry (mt_grad_group: [MT_GROUP_DP] the dp x cp ranks of the dense
 * tensors, [MT_GROUP_EDP] the edp ranks of the experts; NULL where the
 * registry has no tensor of the group), and the axes the global gradient
 * norm sums over (tp: the tp-sharded tensors once per shard; pp: the
 * stages' tensors; ep, etp: the experts' shards); NULL or size 1: absent. */
typedef struct {
  mt_group *reduce[MT_NGROUPS];
  mt_group *tp, *pp, *ep, *etp;
} mt_dp_groups;

/* The dp/ZeRO engine: owns the training state as the registry places it
 * (mt_registry_shard), reduces gradients over each tensor's reduction group
 * bucket by bucket (overlapped with backward), clips and runs AdamW on this
 * rank's share.
 *   zero 0: every rank holds everything; buckets all-reduced.
 *   zero 1: AdamW moments sharded; gradients reduce-scattered, parameters
 *           all-gathered after the update.
 *   zero 2: gradients sharded too: each micro-batch's gradients of a bucket
 *           are reduce-scattered as soon as the bucket is complete and
 *           added to this rank's shard; the whole gradient never exists.
 *   zero 3: parameters sharded too: a unit's parameters are all-gathered
 *           before its forward and again before its backward (the next
 *           unit's gather started while the current one computes) and
 *           released after use. */
typedef struct {
  mt_group *groups[MT_NGROUPS]; /* per reduction group: dp x cp, edp */
  mt_group *ep_g, *etp_g; /* MoE: the expert tensors' axes, for the norm (NULL: size 1) */
  int zero;
  const mt_registry *reg;
  const mt_ops *ops;
  const mt_tp *tp;       /* sequence parallelism: partial gradients summed over tp first */
  mt_group *tp_g;        /* NULL: no tensor parallelism */
  mt_group *pp_g;        /* NULL: no pipeline parallelism */
  size_t norm_skip_begin, norm_skip_end; /* flat range left out of the norm here */
  /* the element type of each role: the weights' compute copy (fp32: the
   * master itself), the gradients as they accumulate (train.grad_dtype),
   * their reduction over dp x cp (parallel.grad_reduce_dtype) */
  mt_dtype wdt, gdt, rdt;
  /* state */
  float *params;         /* the fp32 master: reg->numel_local, or the shard
                            (reg->shard_numel) where master_sharded */
  void *copy;            /* the weights' compute copy (wdt bf16; NULL under fp32):
                            reg->numel_local elements, or the shard at zero 3 */
  int master_sharded;    /* zero 3, or zero >= 1 with a compute copy */
  void *grads;           /* zero <= 1: the gradients (gdt), reg->numel_local */
  void *shard;           /* zero >= 1: this rank's shard of the reduced gradients (gdt) */
  /* fp32 gradients reduced in bf16 (rdt != gdt), zero <= 1: narrowed into
   * red before the reduction (reg->numel_local) and, zero 1, reduced into
   * red_shard, then widened back (accumulation stays fp32). Comm buffers. */
  void *red, *red_shard;
  mt_adamw opt;          /* moments over reg->shard_numel */
  mt_bucket *buckets;    /* as reg->buckets */
  int next_bucket;
  int reduce_now;        /* zero <= 1: the backward under way is the step's last: launch */
  int *unit_done;        /* zero <= 1: per unit, gradients complete for the step (reported in
                            its chunk's last op) */
  int open_fills;        /* zero >= 2: a gradient buffer per bucket (MT_DP_OPEN_FILLS,
                            MT_DP_RUNS) */
  int unit_bufs;         /* zero 3: a gather buffer per unit of the stage (MT_DP_RUNS) */
  int *unit_buf;         /* zero 3: per unit, its gather buffer (-1: another stage's) */
  int ahead;             /* the most units a layer has (2 with MoE blocks, whose pieces bind
                            two): zero 3 prefetches that many past the unit bound */
  int *unit_class;       /* per unit: its layer's parity and place in it, which the units and
                            buckets sharing gather and gradient buffers have in common */
  int *bucket_gbuf;      /* zero >= 2, ahead > 1: per bucket, its gradient buffer */
  int defer;             /* zero >= 2: complete buckets wait for the end of the run */
  int partial_done;      /* zero <= 1: sp partial gradients summed over tp this step */
  /* zero >= 2: gradient buffers; zero 3: gather buffers and per-unit state */
  mt_pool_buf *gbufs;
  int n_gbufs;
  mt_pool_buf *pbufs;
  int n_pbufs;
  mt_unit_gather *gather;
  double last_grad_norm;
  struct mt_dp_muon *muon; /* Muon's matrices and their exchange (dp_muon.c), or NULL: AdamW */
  /* this step's bytes of the state's collectives (gradients, parameters),
   * per reduction group, as comm counted them (the rest of the group's
   * bytes are scalar sums: the norm, the loss) */
  double state_bytes[MT_NGROUPS];
  /* this step's bytes of gradient reductions, and of those the part
   * launched during the schedule (overlapped with backward) rather than by
   * mt_dp_finish_sync after it */
  double grad_bytes, grad_bytes_early;
  int in_finish;
  /* gradients accumulated in bf16 (gdt bf16: MT_DP_GRADS_BF16,
   * train.grad_dtype = bf16; reduced in bf16): each piece of a backward
   * pass accumulates a unit's gradients into an fp32 slot that starts as its
   * bf16 gradients (zero <= 1: in grads; zero >= 2: in its bucket's
   * buffer) widened (exact) and is rounded back into them when the piece
   * ends (mt_dp_grads_pause): one rounding per micro-batch for a block, two
   * for the embeddings (the LM head's, the embedding's), as a bf16 gradient
   * buffer takes each weight-gradient GEMM on GPUs. Slots are made when
   * first needed, each the size of the unit that needed it, and reused by
   * any unit they hold (the smallest free one that fits): the units of one
   * piece (the LM head: the embeddings and the final LayerNorm). zero >= 2:
   * each micro-batch's bf16 gradient buffer is reduce-scattered in bf16
   * and added to the shard with one rounding. */
  mt_grad_slot *slots;
  int n_slots;
  int *unit_slot;        /* per unit, the slot it holds, -1 none */
} mt_dp;

/* Allocates the state and builds the buckets' run-time state from reg's
 * shard (call mt_registry_shard first; each reduction group of g must be
 * the registry's, rank for rank). tp: the model's tensor parallelism, whose
 * partial gradients (sequence parallelism's norms, a MoE router) are summed
 * over tp before dp reduces them (NULL: none). */
/* How the schedule uses the state, which decides the buffer pools: */
enum {
  /* a split backward (zb-h1): every bucket's gradients may be open at once
   * (input pass to weight pass): a gradient buffer per bucket */
  MT_DP_OPEN_FILLS = 1,
  /* runs of micro-batches of one chunk (breadth-first): a chunk's units stay
   * gathered for the run (ZeRO-3: a gather buffer per unit of the stage,
   * the stage's parameters whole, as ZeRO-2 holds them) and its gradients
   * accumulate over the run before one reduction (ZeRO-2/3: a gradient
   * buffer per bucket, the stage's gradients whole, as ZeRO-1 holds them);
   * the shards of the optimizer state stay as they are */
  MT_DP_RUNS = 2,
  /* gradients reduced in bf16 over dp x cp (parallel.grad_reduce_dtype =
   * bf16; needs bf16 weights): half the bytes, each
   * addition of two ranks' parts rounded to bf16; they accumulate in fp32 */
  MT_DP_REDUCE_BF16 = 4,
  /* gradients accumulated in bf16 (train.grad_dtype = bf16; needs bf16
   * weights, and reduces in bf16 as MT_DP_REDUCE_BF16 does): half the bytes of
   * the held gradients, each unit's gradients of a micro-batch added to
   * them with one rounding (see mt_dp.slots) */
  MT_DP_GRADS_BF16 = 8
};
/* weights: the storage type of the weights' compute copy, what
 * mt_dp_params returns. MT_DT_F32: the fp32 parameters themselves.
 * MT_DT_BF16: a bf16 copy refreshed from the fp32 master by every update
 * (AdamW writes both in one pass); with it the master is sharded from ZeRO-1
 * on, as the ZeRO paper's 2 + 2 + 12 bytes per parameter has it: zero 0,
 * master and copy whole; zero 1 and 2, the master is this rank's shard
 * (reg->shard_numel, like ZeRO-3's) and the copy whole, all-gathered in
 * bf16 after the update; zero 3, both the shard, and a unit's copy is
 * gathered in bf16 into bf16 buffers. Copy memory counted as
 * MT_MEM_PARAMS, its gather buffers as MT_MEM_GATHER. */
void mt_dp_create(mt_dp *d, const mt_dp_groups *g, const mt_registry *reg, const mt_ops *ops,
                  mt_dtype weights, const mt_tp *tp, float beta1, float beta2, float eps,
                  float weight_decay, int flags);
void mt_dp_destroy(mt_dp *d);
/* The fp32 master was written other than by mt_dp_optimizer_step (a
 * checkpoint loaded into mt_dp_state_ranges): the bf16 copy made from it
 * again (collective over dp under ZeRO-1/2: the copy is all-gathered). */
void mt_dp_master_changed(mt_dp *d);
/* The state unit by unit (see mt_registry units), as a pass uses it:
 *   mt_dp_params(u, pass):   the unit's whole parameters (the memory of its
 *                            first element), valid until mt_dp_params_done
 *                            (ZeRO-3: gathered over dp, waiting for a
 *                            prefetch started earlier, and the next unit of
 *                            the pass prefetched, the next two with MoE
 *                            blocks); NULL for a unit this stage does not
 *                            hold;
 *   mt_dp_grads(u):          where the unit's gradients accumulate in this
 *                            backward;
 *   mt_dp_grads_done(u):     the unit's gradients of this micro-batch are
 *                            complete (the engine may reduce them now).
 * The units used at both ends of a pass (the embeddings, the final
 * LayerNorm) are released only after their last use in backward; after a
 * forward-only pass mt_dp_release_params lets every unit go. */
mt_act *mt_dp_params(mt_dp *d, int u, mt_pass pass);
void mt_dp_params_done(mt_dp *d, int u, mt_pass pass);
float *mt_dp_grads(mt_dp *d, int u);
void mt_dp_grads_done(mt_dp *d, int u);
/* The piece of the pass that wrote into mt_dp_grads(u) has ended; the unit
 * may be written again before mt_dp_grads_done (the embeddings: the LM
 * head first, the embedding's backward last). bf16 gradients: the unit's
 * slot is rounded into them and freed, so only the units of one piece
 * hold a slot at a time. */
void mt_dp_grads_pause(mt_dp *d, int u);
/* zero >= 2, MT_DP_RUNS: while on, a bucket whose units are all complete
 * keeps accumulating (the next micro-batch of the run adds to it) instead
 * of being reduced; the pass run with it off reduces it. */
void mt_dp_defer_reduce(mt_dp *d, int on);
/* Initial values of every element this rank holds (mt_registry_init_values). */
void mt_dp_init_params(mt_dp *d, uint64_t seed);

/* The step: zero the gradients and start the bucket bookkeeping. */
void mt_dp_begin_step(mt_dp *d);
/* zero <= 1: the backward that follows is the step's last, so each unit's
 * completed gradients may be reduced at once (overlapped with the rest of
 * backward). Without this call the reduction waits for mt_dp_finish_sync. */
void mt_dp_reduce_during_backward(mt_dp *d, int on);
/* Launch what is left (summing sp partial gradients over tp first) and wait
 * for every bucket; then the gradients are reduced. */
void mt_dp_finish_sync(mt_dp *d);
/* ZeRO-3: let every gathered unit go (after a forward-only pass). */
void mt_dp_release_params(mt_dp *d);
/* This rank's (not yet reduced) gradient of flat element off of a tied
 * tensor, of type d->gdt (zero <= 1: in the whole buffer; zero >= 2: in
 * its held bucket's buffer), for the sum across stages before
 * mt_dp_finish_sync. */
void *mt_dp_grads_at(mt_dp *d, size_t off);

/* Global gradient norm over the reduced gradients, then clip, AdamW on this
 * rank's share, and (zero 1, 2) all-gather the updated parameters. Returns
 * the pre-clip global norm. */
double mt_dp_optimizer_step(mt_dp *d, float lr, float grad_clip);

/* Muon for the matrices mt_muon_takes (AdamW keeps the rest), distributed
 * as Canzona (dp_muon.c); call after mt_dp_create. Its momentum is the
 * first moment's buffer, so checkpoints carry it as they carry AdamW's. */
void mt_dp_muon_create(mt_dp *d, const mt_muon_opts *o);
void mt_dp_muon_destroy(mt_dp *d);
/* Muon's update of this rank's parts (mt_dp_optimizer_step calls it after
 * AdamW's): the momentum, the exchange, the owned matrices orthogonalised,
 * the update with decoupled weight decay and the compute copy. */
void mt_dp_muon_step(mt_dp *d, float lr, float grad_scale);
/* What Muon does on this rank: its Newton-Schulz FLOPs per step (the
 * matrices it owns), the busiest and the mean rank's of its groups (summed
 * over the dense and the expert group), and the bytes its exchange has sent
 * so far over each reduction group and each shard axis (tp, etp), counted
 * apart from the gradients' and parameters' (zero for AdamW) */
typedef struct {
  int matrices, owned;
  double owned_flops, busiest_flops, mean_flops;
  double bytes_red[MT_NGROUPS], bytes_shard[MT_NGROUPS];
} mt_dp_muon_stats;
mt_dp_muon_stats mt_dp_muon_get_stats(const mt_dp *d);

/* Training state as flat ranges, for checkpoints. which: 0 parameters, 1 AdamW
 * first moments, 2 second moments. for_save: the ranges this rank writes
 * (its dp part of every bucket: the registry's write partition, balanced
 * over dp at any zero level); otherwise everything this rank holds.
 * Returns the count; *out is malloc'ed (free it). */
int mt_dp_state_ranges(const mt_dp *d, int which, int for_save, mt_flat_range **out);

/* ------------------------------------------------------------------ */
/* pipeline parallelism: schedules as data (schedule.c)                */

/* One operation of a pipeline rank. Virtual stages: the model's layers are
 * cut into pp*v consecutive chunks; chunk c of pp rank r is virtual stage
 * c*pp + r (Megatron's interleaving; v = 1: one chunk per rank). Activations
 * go from virtual stage s to s+1 (pp rank r -> r+1 mod pp), gradients back. */
typedef enum {
  MT_PP_FWD,        /* forward of micro-batch mb on chunk */
  MT_PP_BWD,        /* full backward (input and weight gradients) */
  MT_PP_BWD_INPUT,  /* zero-bubble B: input gradient only */
  MT_PP_BWD_WEIGHT, /* zero-bubble W: weight gradient only */
  MT_PP_SEND_ACT, MT_PP_RECV_ACT, MT_PP_SEND_GRAD, MT_PP_RECV_GRAD,
  MT_PP_NKINDS
} mt_pp_op_kind;

typedef struct {
  mt_pp_op_kind kind;
  int mb;    /* micro-batch, 0..m-1 */
  int chunk; /* virtual stage index on this rank, 0..v-1 */
} mt_pp_op;

/* (mt_pp_sched and mt_pp_sched_name, parallel.schedule's enum: core.h) */

typedef struct {
  mt_pp_sched kind;
  int pp, m, v;
  /* token slices (parallel.pp_token_slices, TeraPipe): each micro-batch's
   * sequences cut into k slices of tokens that go through the pipeline one
   * after the other. The ops' mb is then a unit u = micro-batch x k + slice
   * (m counts units: micro-batches x k); a stage forwards a micro-batch's
   * slices in order (slice i attends the keys and values of slices <= i,
   * kept on the stage) and backs them in reverse (slice i's backward adds
   * to the key and value gradients of the slices before it). k = 1: whole
   * sequences, u = mb. */
  int k;
  int vshape;      /* placement: 0 looping (chunk c of rank r is virtual stage c*pp + r),
                      1 V (v = 2: rank r holds virtual stages r and 2pp-1-r; zb-v) */
  int *n_ops;      /* per pp rank */
  mt_pp_op **ops;  /* per pp rank, n_ops[r] operations in program order */
  int *max_inflight; /* per pp rank: the most (micro-batch, chunk) activation sets the
                        schedule promises to hold at once (1F1B: min(m, pp - rank)) */
} mt_pp_schedule;

const char *mt_pp_op_name(mt_pp_op_kind kind);

/* Checks (pp, m, v, layers) for the schedule: m >= pp for 1f1b, interleaved
 * and zb-h1; v = 1 unless interleaved (v >= 2 there) or breadth-first (any
 * v); m % pp == 0 for
 * interleaved (Megatron's rule); pp*v <= layers. Returns 0, or -1 with a
 * one-line message naming the config keys. */
int mt_pp_sched_check(mt_pp_sched kind, int pp, int m, int v, int n_layer, mt_err *e);
/* The virtual stage of chunk c of pp rank r, and the pp rank of virtual
 * stage vs, under s's placement. */
int mt_pp_vs_of(const mt_pp_schedule *s, int r, int c);
int mt_pp_vs_rank(const mt_pp_schedule *s, int vs);
/* Builds the op lists of every pp rank (call mt_pp_sched_check first). */
void mt_pp_schedule_build(mt_pp_schedule *s, mt_pp_sched kind, int pp, int m, int v);
/* ... with the virtual stages placed in a V (vshape 1, v = 2) or a loop
 * whatever the kind: gpipe in zb-v's placement is its evaluation order (each
 * micro-batch down the V and back) */
void mt_pp_schedule_build_placed(mt_pp_schedule *s, mt_pp_sched kind, int pp, int m, int v,
                                 int vshape);
/* ... of m micro-batches cut into k token slices each (gpipe, 1f1b and
 * interleaved; mt_pp_slices_check): s->m = m x k units. The warm-up grows
 * by what the last slice of a micro-batch needs before its backward (1F1B:
 * k - 1 forwards). */
void mt_pp_schedule_build_sliced(mt_pp_schedule *s, mt_pp_sched kind, int pp, int m, int v,
                                 int vshape, int k);
/* Checks k token slices against the schedule kind (gpipe, 1f1b,
 * interleaved) and the tokens of a sequence on a rank (T: seq_len / cp).
 * 0, or -1 with one line naming the keys. */
int mt_pp_slices_check(mt_pp_sched kind, int k, int T, mt_err *e);
void mt_pp_schedule_free(mt_pp_schedule *s);
/* "rank R: F0.0 SA0.0 ..." one op a line, for --print-schedule */
void mt_pp_schedule_print(const mt_pp_schedule *s, int rank, FILE *f);

/* What the validator measured, in unit-time simulation (t_f per forward,
 * t_b per full backward, t_bi + t_bw for a split one; sends and receives take
 * no time, a receive waits for its send). */
typedef struct {
  double makespan;      /* time units from the first op to the last, all ranks */
  double bubble;        /* mean over ranks of idle / makespan */
  double rank_bubble[64]; /* per rank (first 64) */
  int peak_inflight[64];  /* per rank (first 64): most activation sets held at once */
  double chunk_grads_end[64][8]; /* per rank and chunk (first 64, 8): when the chunk's last
                                    backward (or weight pass) ends */
  double rank_grads_end[64]; /* per rank (first 64): when its last backward (or weight pass)
                                ends, the last of its gradients complete */
} mt_pp_sim;

/* Simulates s and checks: every (mb, chunk) is forwarded once and backed once
 * (F before B, B before W), token slices in causal order on every virtual
 * stage (slice i forwarded after slice i - 1 and backed after slice i + 1), data dependencies across virtual stages hold,
 * every send has its receive and each channel (src, dst, kind) carries the
 * same (mb, chunk) sequence on both ends, no rank waits forever (so an
 * executor with non-blocking sends and blocking receives in this order
 * cannot deadlock), and per-rank in-flight activation sets stay within
 * s->max_inflight. t_f, t_b (full backward), t_bi, t_bw (split) are op times
 * of one chunk. Returns 0, or -1 with the first violation in e. */
int mt_pp_schedule_validate(const mt_pp_schedule *s, double t_f, double t_b, double t_bi,
                            double t_bw, mt_pp_sim *out, mt_err *e);
/* The same with messages that take time, as the executor sends them (non-
 * blocking: the sender goes on): links[2 r + d] is rank r's link towards
 * r + 1 (d = 0) or r - 1 (d = 1, mod pp), both kinds of message on it; a
 * message leaves when the link is free, holds it for xfer and arrives lat
 * after that. links NULL: messages take no time (validate). */
typedef struct {
  double xfer, lat;
} mt_pp_link;
int mt_pp_schedule_simulate(const mt_pp_schedule *s, double t_f, double t_b, double t_bi,
                            double t_bw, const mt_pp_link *links, mt_pp_sim *out, mt_err *e);
/* ... with each rank's own op times (times[r], r < pp: stages that differ,
 * the embedding's and the LM head's) */
typedef struct {
  double f, b, bi, bw;
} mt_pp_times;
int mt_pp_schedule_simulate_ranks(const mt_pp_schedule *s, const mt_pp_times *times,
                                  const mt_pp_link *links, mt_pp_sim *out, mt_err *e);
/* ... and each rank's ops on the timeline: rank r's op i began at
 * start[r][i] and ended at end[r][i] (s->n_ops[r] each; a receive begins
 * when the rank reaches it and ends when its message is there); start NULL,
 * or start[r] NULL: not wanted */
int mt_pp_schedule_simulate_trace(const mt_pp_schedule *s, const mt_pp_times *times,
                                  const mt_pp_link *links, double *const *start,
                                  double *const *end, mt_pp_sim *out, mt_err *e);

/* ------------------------------------------------------------------ */
/* pipeline executor (pp.c)                                            */

#define MT_PP_MAX_CHUNKS 64

/* The micro-batches of one run of a schedule, as data: n_mb micro-batches
 * of up to B sequences of T tokens (this rank's tokens of each sequence);
 * inputs and targets (n_mb, B, T) on the host; with documents, doc (n_mb,
 * B, T_seq) the position where the document of each position of the whole
 * sequence (T_seq = T x cp) begins (mt_doc_starts), else NULL; rows[mb] sequences in
 * micro-batch mb (0..B); dloss scales the summed position losses in
 * backward; eval: a forward-only pass whose losses are weighted by
 * sequences (training weights them by tokens); same_tokens: every
 * micro-batch reads the first's tokens (a count, where their values do not
 * matter). */
typedef struct {
  int n_mb, B, T;
  const int *inputs, *targets, *rows;
  const int *doc;
  float dloss;
  int eval, same_tokens;
} mt_pp_batch;

/* This rank's pipeline stage (pp = 1: one stage holding the whole model):
 * the chunks of layers it holds, activation sets (slots) for the
 * micro-batches in flight, and the point-to-point buffers. A slot is taken
 * at a micro-batch's first op on a chunk and released after its last
 * backward op (forward_only: after its forward), so the slots held at once
 * are the schedule's in-flight activation sets. */
typedef struct {
  mt_group *g;              /* pp */
  mt_gpt *model;
  mt_dp *dp;
  const mt_ops *ops;        /* the backend: buffers, copies, and where they live */
  int rank, pp, v, last_vs;
  int l0[MT_PP_MAX_CHUNKS], l1[MT_PP_MAX_CHUNKS]; /* the layers of each chunk */
  int vs[MT_PP_MAX_CHUNKS];  /* each chunk's virtual stage (the schedule's placement) */
  int n_slots, next_free_hint;
  size_t set_numel;         /* floats of one activation set (the largest chunk's, no head) */
  float **slot_mem;         /* allocated at first use, kept */
  mt_gpt_acts *acts;        /* per slot */
  int *slot_busy;
  /* The head's activations (final LN, logits, losses: the logits alone
   * B x T x V_local, more than many layers' sets) are held apart, on the
   * stage of the last virtual stage only: one per micro-batch whose head
   * pass is in flight (taken with its slot, given back with it), not one
   * per slot. */
  size_t head_numel;        /* floats of one (0: this rank has no head) */
  float **head_mem;         /* per entry (n_slots of them), allocated at first use, kept */
  int *head_busy;
  int *head_of;             /* per slot: its head entry, -1 none */
  int *slot_of;             /* this run: (mb * v + chunk) -> slot, -1 none */
  mt_act **dout;            /* per slot: received output gradient */
  size_t max_msg;           /* floats of the largest hidden state */
  mt_piece *pieces;         /* room for one pass's pieces */
  /* send buffers: a message is copied into a free one and sent; a buffer is
   * free again once its send completed (tested, never waited for mid-run:
   * waiting could block on a peer that waits for us, as with a rendezvous
   * send). The pool grows to the messages in flight. */
  float **send_buf;
  mt_request *send_req;
  int n_send, cap_send;
  mt_request recv;
  const mt_act *din;        /* the last backward's input gradient (the model's scratch) */
  /* the last run, this rank */
  double wall_s, wait_s, compute_s; /* wait: in receives and sends; compute: in the model */
  int peak_slots;           /* most activation sets held at once */
  int peak_heads;           /* most head entries held at once */
  /* bytes the model's compute ops counted per chunk on its groups, [tp, cp,
   * ep, etp] (the cost model prices a chunk with them) */
  double chunk_bytes[MT_PP_MAX_CHUNKS][4];
  /* per chunk, this run's seconds in its forward ops, backward ops (the
   * input pass of a split one) and weight passes (the cost model's op
   * times, priced on a virtual clock) */
  double chunk_s[MT_PP_MAX_CHUNKS][3];
  double loss_sum;          /* last virtual stage: the micro-batches' losses (mean x tokens;
                               eval: mean x sequences) */
  int overlap_dp;           /* zero <= 1: reduce over dp during each chunk's last backward
                               (else after the run, in mt_dp_finish_sync) */
  /* token slices (the schedule's k > 1): this run's tokens slice by slice
   * ((mb, slice, B, T / k) each, host), and a K|V cache (backend memory,
   * cache_bytes: the model's for the largest chunk) per micro-batch in flight
   * on a chunk: taken at its first slice's forward, released after its first
   * slice's backward (forward_only: after its last slice's forward), made at
   * first use and kept; at most n_slots */
  int *sl_in, *sl_tg;
  size_t sl_cap, cache_bytes;
  void **cache_mem;
  int *cache_busy, *cache_of;
} mt_pp_exec;

/* The stage of pp rank pp_group->rank under schedule s: chunk c holds the
 * blocks [l0[c], l1[c]) (v chunks); n_slots activation sets (s's
 * max_inflight for this rank). The model and the dp engine hold the state;
 * a pipeline of one stage (pp = 1) sends nothing and allocates no message
 * buffers. */
void mt_pp_exec_create(mt_pp_exec *x, mt_group *pp_group, const mt_pp_schedule *s, mt_gpt *model,
                       mt_dp *dp, const int *l0, const int *l1);
void mt_pp_exec_destroy(mt_pp_exec *x);
/* Runs this rank's op list of s (the schedule of the creation, or a
 * forward-only one with as many chunks) once over the batch: non-blocking
 * sends from copies (waited for at the end), receives posted and waited for
 * in order. forward_only: skips every backward op and gradient message.
 * Returns the loss sum of the last virtual stage (0 elsewhere). */
double mt_pp_exec_run(mt_pp_exec *x, const mt_pp_schedule *s, const mt_pp_batch *b,
                      int forward_only);

/* Tied tensors across stages: for every tensor this stage holds that has a
 * copy on another stage (pp_copy), owner and copy exchange their gradients
 * (this rank's unreduced gradients, mt_dp_grads_at) and each adds the
 * other's, so the two stay bitwise equal (a + b == b + a) and so do their
 * updates. scratch holds the largest such tensor (twice over where the
 * gradients are bf16: both widened, the sum rounded once).
 * Collective over the stages that hold one. */
void mt_pp_sum_tied_grads(mt_group *pp_group, const mt_registry *reg, const mt_ops *ops,
                          mt_dp *dp, float *scratch);
/* Floats of the largest tied tensor this stage holds (0: none). */
size_t mt_pp_tied_numel(const mt_registry *reg);

/* ------------------------------------------------------------------ */
/* one training step (step.c)                                          */

/* What a rank's step is made of: the model (its layout by mt_gpt_parallel),
 * the dp engine, the schedule and its executor. */
typedef struct {
  /* the model: its shape, the largest micro-batch, the split */
  const mt_model_shape *shape;
  int micro_batch;
  mt_gpt_parallel par;
  /* the dp engine: ZeRO level, bucket size (bytes), AdamW */
  int zero;
  size_t bucket_bytes;
  float beta1, beta2, eps, weight_decay;
  mt_muon_opts muon; /* optim.name = muon (muon.on) */
  /* the pipeline: schedule, micro-batches per step, virtual stages, and the
   * blocks of every virtual stage (stage_l0/l1[vs] for vs < pp * v) */
  mt_pp_sched sched;
  int accum, virtual_stages;
  const int *stage_l0, *stage_l1;
  /* the dtype of every role (mt_dtypes_resolve) */
  mt_dtypes dtypes;
  int overlap_dp; /* zero <= 1: reduce during each chunk's last backward */
} mt_step_opts;

/* The mesh groups a step uses (the mesh's, or a count-only mesh's). */
typedef struct {
  mt_group *tp, *cp, *dp, *pp, *dpcp, *ep, *etp, *edp;
} mt_step_groups;

typedef struct {
  mt_gpt model;
  mt_dp dp;
  mt_pp_schedule sched;
  mt_pp_exec exec;
  mt_step_groups groups;
  float *tied_scratch;   /* pp: the other stage's gradient of a tied tensor */
  size_t tied_numel;
} mt_step;

/* Creates the model (mt_gpt_create_stage, state external), places the state
 * on dp x cp (edp for experts) and creates the dp engine (parameters not
 * yet initialised: mt_dp_init_params or a checkpoint), builds the schedule
 * and the executor. Returns 0, or -1 with e set (the model's checks). */
int mt_step_create(mt_step *s, const mt_step_opts *o, const mt_step_groups *g, const mt_ops *ops,
                   mt_err *e);
void mt_step_destroy(mt_step *s);
/* The forward and backward of the step's micro-batches through the schedule
 * and the gradient sync over dp x cp (and edp), the tied tensors' gradients
 * summed across stages and the loss of the last stage to every stage.
 * Returns the loss summed over this pp column's tokens. */
double mt_step_gradients(mt_step *s, const mt_pp_batch *b);
/* Clip and AdamW (ZeRO: then the parameters all-gathered); *loss_sum, the
 * value mt_step_gradients returned, becomes the sum over dp x cp. Returns
 * the pre-clip global gradient norm. */
double mt_step_update(mt_step *s, float lr, float grad_clip, double *loss_sum);
/* A forward-only pass (evaluation) over the batch, one micro-batch at a
 * time; returns the loss of the last stage, summed over pp. */
double mt_step_evaluate(mt_step *s, const mt_pp_batch *b);

#endif
