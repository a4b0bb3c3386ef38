/* parallel: data parallelism over the dp group — bucketed gradient reduction
 * overlapped with backward, ZeRO 1-3 (optimizer state, gradients and
 * parameters sharded over dp) — the communication of tensor parallelism (Megatron's conjugate f/g
 * operators, and sequence parallelism's all-gather / reduce-scatter along the
 * sequence). Works on the registry's flat buffers; knows the model only
 * through layer offsets handed in by the caller. */
#ifndef MT_PARALLEL_H
#define MT_PARALLEL_H

#include <stddef.h>
#include "comm/comm.h"
#include "kernels/kernels.h"
#include "optim/optim.h"
#include "registry/registry.h"

/* ------------------------------------------------------------------ */
/* how the model reaches its state                                     */

/* The model's tensors live where the dp/ZeRO engine keeps them; the model
 * asks for them one unit (one layer's tensors, see mt_registry units) at a
 * time and says when it is done. Pointers returned are the memory of the
 * unit's first element (flat offset units[u].begin); the unit's tensors
 * follow at their offsets from it.
 *   params(u, pass):   the unit's whole parameters, valid until
 *                      params_done(u) (ZeRO-3: gathered over dp, waiting for
 *                      a prefetch started earlier, and the next unit of the
 *                      pass prefetched);
 *   grads(u):          where the unit's gradients accumulate in this
 *                      backward;
 *   grads_done(u):     the unit's gradients of this micro-batch are complete
 *                      (the engine may reduce them now).
 * The model calls params_done for the units it uses at both ends of a pass
 * (the embeddings, the final LayerNorm) only after their last use in
 * backward; after a forward-only pass the caller releases them with
 * mt_dp_release_params. */
typedef enum { MT_PASS_FORWARD = 0, MT_PASS_BACKWARD = 1 } mt_pass;

typedef struct {
  void *ctx;
  float *(*params)(void *ctx, int unit, mt_pass pass);
  void (*params_done)(void *ctx, int unit, mt_pass pass);
  float *(*grads)(void *ctx, int unit);
  void (*grads_done)(void *ctx, int unit);
} mt_state_source;

/* ------------------------------------------------------------------ */
/* data parallelism and ZeRO                                           */

typedef struct mt_tp mt_tp; /* below */

/* One bucket at run time (the plan is the registry's mt_bucket_plan). */
typedef struct {
  mt_request req;       /* its reduction in flight */
  int launched;
  int units_left;       /* zero >= 2: units of the bucket whose gradients are not complete */
  int buf;              /* zero >= 2: the gradient buffer it holds, -1 none */
} mt_bucket;

/* A unit's gathered parameters (ZeRO-3). */
typedef struct {
  int buf;             /* gather buffer holding it, -1 none */
  int state;           /* 0 released, 1 gathering, 2 gathered */
  mt_request req;
} mt_unit_gather;

/* A buffer of a pool (ZeRO-2/3 gradients, ZeRO-3 gathered parameters). */
typedef struct {
  float *mem;           /* its elements */
  float *part;          /* gradient buffers: this rank's part of the reduce-scatter */
  size_t numel, part_numel;
  int owner;            /* bucket or unit using it, -1 free */
} mt_pool_buf;

/* The dp/ZeRO engine: owns the training state as the registry places it
 * on dp (mt_registry_shard_dp), reduces gradients over dp bucket by bucket
 * (overlapped with backward), clips and runs AdamW on this rank's share.
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
  mt_group *g;           /* dp */
  mt_group *groups[MT_NGROUPS]; /* per reduction group: dp, edp (mt_dp_set_expert_groups) */
  mt_group *ep_g, *etp_g; /* MoE: the expert tensors' axes, for the norm (NULL: size 1) */
  int zero;
  const mt_registry *reg;
  const mt_ops *ops;
  const mt_tp *tp;       /* sequence parallelism: partial gradients summed over tp first */
  mt_group *tp_g;        /* NULL: no tensor parallelism */
  mt_group *pp_g;        /* NULL: no pipeline parallelism */
  size_t norm_skip_begin, norm_skip_end; /* flat range left out of the norm here */
  /* state */
  float *params;         /* zero <= 2: reg->numel_local; zero 3: the shard, reg->shard_numel */
  float *grads;          /* zero <= 1: reg->numel_local; else NULL */
  float *grad_shard;     /* zero >= 1: reduced gradient of this rank's shard */
  mt_adamw opt;          /* moments over reg->shard_numel */
  mt_bucket *buckets;    /* as reg->buckets */
  int next_bucket;
  int reduce_now;        /* zero <= 1: the backward under way is the step's last: launch */
  int *unit_done;        /* per unit: gradients complete in this micro-batch */
  int partial_done;      /* zero <= 1: sp partial gradients summed over tp this step */
  /* zero >= 2: gradient buffers; zero 3: gather buffers and per-unit state */
  mt_pool_buf *gbufs;
  int n_gbufs;
  mt_pool_buf *pbufs;
  int n_pbufs;
  mt_unit_gather *gather;
  double last_grad_norm;
} mt_dp;

/* Allocates the state and builds the buckets' run-time state from reg's dp
 * placement (call mt_registry_shard_dp first). tp: the model's tensor
 * parallelism (NULL: none). */
void mt_dp_create(mt_dp *d, mt_group *dp_group, const mt_registry *reg, const mt_ops *ops,
                  const mt_tp *tp, float beta1, float beta2, float eps, float weight_decay);
void mt_dp_destroy(mt_dp *d);
/* The source the model reads its state through. */
mt_state_source mt_dp_state_source(mt_dp *d);
/* Initial values of every element this rank holds (mt_registry_init_values). */
void mt_dp_init_params(mt_dp *d, uint64_t seed);

/* MoE: the expert tensors' buckets are reduced (and sharded) over edp; the
 * global norm sums their shards over ep and etp. Call after mt_dp_create
 * when the registry has expert tensors (before any reduction). */
void mt_dp_set_expert_groups(mt_dp *d, mt_group *edp, mt_group *ep, mt_group *etp);
/* Tensor parallelism: the global gradient norm then counts each tp-sharded
 * tensor once per shard (summed over tp_group) and each replicated tensor
 * once. tp_group may be NULL or of size 1. */
void mt_dp_set_tp(mt_dp *d, mt_group *tp_group);
/* Pipeline parallelism: each stage's buffers hold only its own tensors; the
 * global norm sums the stages' parts over pp_group, leaving out this rank's
 * flat range [skip_begin, skip_end) (a copy of a tensor another stage owns,
 * counted there). */
void mt_dp_set_pp(mt_dp *d, mt_group *pp_group, size_t skip_begin, size_t skip_end);

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
/* Gradients of the whole flat buffer (zero <= 1; NULL otherwise). */
float *mt_dp_full_grads(mt_dp *d);

/* Global gradient norm over the reduced gradients, then clip, AdamW on this
 * rank's share, and (zero 1, 2) all-gather the updated parameters. Returns
 * the pre-clip global norm. */
double mt_dp_optimizer_step(mt_dp *d, float lr, float grad_clip);

/* Training state as flat ranges, for checkpoints. which: 0 parameters, 1 AdamW
 * first moments, 2 second moments. for_save: the ranges this rank writes
 * (its dp part of every bucket: the registry's write partition, balanced
 * over dp at any zero level); otherwise everything this rank holds.
 * Returns the count; *out is malloc'ed (free it). */
int mt_dp_state_ranges(const mt_dp *d, int which, int for_save, mt_flat_range **out);

/* ------------------------------------------------------------------ */
/* tensor and sequence parallelism                                     */

/* The tp group as the model sees it. Without tensor parallelism (g NULL or
 * of size 1) every call below is a no-op or a copy. Activations are
 * (B,T,C) row-major; under sequence parallelism (sp) a rank's slice of the
 * sequence is (B,T/size,C), positions [rank*T/size, (rank+1)*T/size).
 * Buffers live where the backend (ops) keeps its tensors. */
struct mt_tp {
  mt_group *g;
  const mt_ops *ops;
  int size, rank;
  int sp;
  float *scratch;   /* the reduce-scatter's running sums, 2 slices (MT_MEM_COMM) */
  size_t scratch_n;
  float *grad_buf;  /* packs the partial gradients of one layer (MT_MEM_COMM) */
  size_t grad_buf_n;
};

/* max_act: the largest (B,T,C) activation, in elements, that will be
 * reduce-scattered; max_partial_grads: the most elements of tp_partial_grad
 * tensors in one range handed to mt_tp_reduce_partial_grads. */
void mt_tp_create(mt_tp *tp, mt_group *g, int sp, size_t max_act, size_t max_partial_grads,
                  const mt_ops *ops);
void mt_tp_destroy(mt_tp *tp);
/* Comm-buffer bytes mt_tp_create allocates for these arguments (the plan). */
size_t mt_tp_comm_bytes(int tp_size, int sp, size_t max_act, size_t max_partial_grads);

/* Sum (in place) of the ranks' partial results: the forward of a
 * row-parallel layer ("g") or the backward of a column-parallel one ("f"). */
void mt_tp_allreduce(const mt_tp *tp, float *x, size_t n);
void mt_tp_allreduce_max(const mt_tp *tp, float *x, size_t n);
void mt_tp_allreduce_f64(const mt_tp *tp, double *x, size_t n);
/* Sequence parallelism: the slices (B,T/size,C) of every rank -> full
 * (B,T,C) on every rank ... */
void mt_tp_gather_seq(const mt_tp *tp, const float *local, float *full, int B, int T, int C);
/* ... and partial sums (B,T,C) -> this rank's slice (B,T/size,C) of the sum. */
void mt_tp_reduce_scatter_seq(const mt_tp *tp, const float *full, float *local, int B, int T,
                              int C);
/* Sum over the group, in one all-reduce, the gradients of every tensor in
 * the flat range [begin, end) that the registry marks tp_partial_grad. Once
 * per reduction of those gradients over dp, before it. buf holds flat
 * elements from buf_begin on (the whole flat buffer: buf_begin = 0). */
void mt_tp_reduce_partial_grads_at(const mt_tp *tp, const mt_registry *reg, float *buf,
                                   size_t buf_begin, size_t begin, size_t end);
void mt_tp_reduce_partial_grads(const mt_tp *tp, const mt_registry *reg, float *grads,
                                size_t begin, size_t end);
/* Elements of tp_partial_grad tensors this rank holds in [begin, end). */
size_t mt_tp_partial_numel(const mt_registry *reg, size_t begin, size_t end);

/* ------------------------------------------------------------------ */
/* context parallelism: attention over a sequence split across ranks (cp.c) */

/* Each sequence of T tokens is split over the cp group of size N.
 *   ring:    into 2N chunks of T/(2N); rank r holds chunks r and 2N-1-r
 *            (zigzag: an early and a late chunk, so every rank does the
 *            same causal work), K and V pass around the ring;
 *   ulysses: into N contiguous chunks of T/N; an all-to-all turns sequence
 *            shards into head shards (each rank then attends over the whole
 *            sequence with NH/N heads) and back; heads must divide by N.
 * A rank holds its chunks of every sequence one after the other: local row
 * j*len + i of a sequence is position chunk_pos[j] + i. Every other layer
 * works on local rows as they are (the rows of a sequence need not be
 * contiguous positions); the embedding adds the positions' wpe rows. */
typedef enum { MT_CP_RING = 0, MT_CP_ULYSSES = 1 } mt_cp_mode;
/* "ring" | "ulysses" -> mode; -1 if unknown */
int mt_cp_mode_parse(const char *name);
const char *mt_cp_mode_name(mt_cp_mode mode);

typedef struct {
  int size, rank;
  mt_cp_mode mode;
  int T;               /* global sequence length */
  int T_local;         /* tokens of each sequence on this rank */
  int n_chunks;        /* 1 (cp = 1, ulysses) or 2 (ring) */
  int chunk_len;
  int chunk_pos[2];    /* global position of each chunk's first token */
} mt_cp_layout;

/* The layout of rank `rank` of `size` (the caller checked that T splits:
 * T % (2 size) == 0 for ring, T % size == 0 for ulysses). */
void mt_cp_layout_make(mt_cp_layout *l, int size, int rank, mt_cp_mode mode, int T);
/* seq (T tokens of one sequence) -> this rank's local tokens (T_local) */
void mt_cp_take_tokens(const mt_cp_layout *l, const int *seq, int *local);

/* What attention keeps for backward, per layer and micro-batch (pieces of
 * the model's activation sets): lse (B, NH, T_local) floats, the rows' LSE
 * (under ulysses in the head layout (B, NH/N, T), as many floats); ulysses
 * only, the head layout's q|k|v (B, T, 3C/N) and output (B, T, C/N), as
 * many floats as the local qkv and output. */
typedef struct {
  float *lse, *qkv_h, *out_h;
} mt_cp_saved;

/* Attention of one tensor-parallel rank's heads under context parallelism.
 * C = its attention channels, NH its heads (hs = C/NH). */
typedef struct {
  mt_cp_layout lay;
  mt_group *g;          /* NULL at cp = 1 */
  const mt_ops *ops;
  int max_B, C, NH, hs;
  /* ring: K|V (max_B, T_local, 2C) buffers, two for K/V in flight and three
   * for dK/dV (this step's part, the one arriving, the one leaving);
   * MT_MEM_COMM */
  size_t kv_numel;
  float *kv[2], *dkv[3];
  /* the model's scratch (activations), set with mt_cp_set_scratch: ring:
   * part (max_B, T_local, C) and part_lse (max_B, NH, T_local), a block's
   * partial result before its merge; ulysses: dout_h (max_B, T_local, C)
   * and dqkv_h (max_B, T_local, 3C), gradients in the head layout */
  float *part, *part_lse, *dout_h, *dqkv_h;
} mt_cp;

/* g: the cp group (NULL or size 1: no context parallelism, lay of size 1). */
void mt_cp_create(mt_cp *cp, mt_group *g, const mt_cp_layout *lay, int max_B, int C, int NH,
                  const mt_ops *ops);
void mt_cp_destroy(mt_cp *cp);
/* Comm-buffer bytes mt_cp_create allocates (the plan). */
size_t mt_cp_comm_bytes(const mt_cp_layout *lay, int max_B, int C);
/* Floats of the scratch the model provides: what (0 part, 1 part_lse, 2
 * dout_h, 3 dqkv_h) for this layout (0 where the mode needs none). */
size_t mt_cp_scratch_numel(const mt_cp_layout *lay, int max_B, int C, int NH, int what);
void mt_cp_set_scratch(mt_cp *cp, float *part, float *part_lse, float *dout_h, float *dqkv_h);
/* Floats of the saved pieces per layer (lse, qkv_h, out_h; 0: not kept). */
size_t mt_cp_saved_numel(const mt_cp_layout *lay, int B, int C, int NH, int what);
/* Bytes this rank sends over cp for one layer's attention forward
 * (backward = 0) or backward (1) of a micro-batch of B sequences. */
double mt_cp_bytes(const mt_cp_layout *lay, int B, int C, int backward);

/* out (B, T_local, C) = causal attention of the local queries over the
 * whole sequence, from qkv (B, T_local, 3C) (this rank's q|k|v); keeps s.
 * Collective over the cp group. */
void mt_cp_attention_forward(mt_cp *cp, float *out, const float *qkv, const mt_cp_saved *s,
                             int B);
/* WRITES dqkv (B, T_local, 3C), the gradient of this rank's q|k|v, from
 * dout (B, T_local, C) and the forward's out, qkv and s. Collective. */
void mt_cp_attention_backward(mt_cp *cp, float *dqkv, const float *dout, const float *out,
                              const float *qkv, const mt_cp_saved *s, int B);
/* expert parallelism: MoE token dispatch on the folded mesh (ep.c)    */

/* The tokens of a MoE layer go to their experts' ranks and back. Each rank
 * routes its own local tokens (N = S sequence slices of Ts tokens: whole
 * sequences, or under tensor parallelism its 1/tp slice of each, the slices
 * of one sequence held by the ranks of seq_g). A token's k choices become
 * slots; a slot is dispatched by all-to-all-v over ep (the counts exchanged
 * first) to the rank holding its expert, the etp ranks of that rank gather
 * each other's received rows (each computes its share of every expert's
 * hidden units for all of them), and the results come back by
 * reduce-scatter over etp (summing the shares) and all-to-all-v over ep.
 *
 * Layouts, all deterministic: slots are sent expert-major (expert, then
 * token, in order); a rank's received rows come by source rank, experts
 * in order within each; after the etp gather the rows of etp rank t come
 * before those of t+1 ("gathered order"); the experts compute on
 * expert-major rows (expert, then etp rank, then ep source rank).
 *
 * Capacity (capacity factor c > 0): expert e takes at most ceil(c T k / E)
 * slots of each sequence of T tokens, first choices before second choices,
 * each in position order; the rest are dropped (their weight stays in the
 * renormalisation, their output is 0). Counted per sequence, so the same
 * tokens are dropped under any layout and micro-batch size. Dropless
 * (c = 0) keeps every slot. */
typedef struct {
  mt_group *ep_g, *etp_g, *seq_g; /* NULL or size 1: that axis is absent */
  const mt_ops *ops;
  int E, k, E_l;                  /* experts, choices per token, experts per ep rank */
  int ep, ep_rank, etp, etp_rank, seq_size, seq_rank;
  int T;                          /* tokens of a whole sequence */
  int cap;                        /* slots an expert takes per sequence; 0: dropless */
  int max_seqs, max_tokens;       /* S and N of the largest micro-batch */
  size_t max_send, max_recv, max_rows; /* bounds of n_send, n_recv, n_rows */
  int *h;                         /* host scratch (routing decisions) */
  size_t h_n;
} mt_ep;

/* What routing decided, as ints (host; the model keeps a copy with the
 * micro-batch's activations): MT_EP_N_SEND slots sent, MT_EP_N_RECV rows
 * received over ep, MT_EP_N_ROWS rows after the etp gather, MT_EP_DROPPED
 * local slots dropped, then send_counts[ep], recv_counts[ep] (rows to and
 * from each ep rank), etp_rows[etp] (rows received by each etp rank) and
 * expert_off[E_l + 1] (the experts' offsets in expert-major rows). */
enum { MT_EP_N_SEND, MT_EP_N_RECV, MT_EP_N_ROWS, MT_EP_DROPPED, MT_EP_HEAD };
/* ints of a routing record for these axes (E_l experts per ep rank) */
int mt_ep_meta_ints(int ep, int etp, int E_l);
const int *mt_ep_send_counts(const mt_ep *x, const int *meta);
const int *mt_ep_recv_counts(const mt_ep *x, const int *meta);
const int *mt_ep_etp_rows(const mt_ep *x, const int *meta);
const int *mt_ep_expert_off(const mt_ep *x, const int *meta);

/* Row bounds for micro-batches of S sequence slices of Ts tokens: slots a
 * rank sends, rows it receives over ep, rows after the etp gather (what the
 * buffers are sized for: every source rank's tokens could choose this rank's
 * experts; under capacity, at most the capacity of each). */
void mt_ep_bounds(int E, int k, int ep, int etp, int T, double capacity, int S, int Ts,
                  size_t *max_send, size_t *max_recv, size_t *max_rows);
/* slots an expert takes per sequence of T tokens at capacity factor c (0: 0, dropless) */
int mt_ep_capacity(double c, int T, int k, int E);

/* Groups (NULL: absent), the routing shape, the largest micro-batch. */
void mt_ep_create(mt_ep *x, mt_group *ep_g, mt_group *etp_g, mt_group *seq_g, const mt_ops *ops,
                  int E, int k, int T, double capacity, int max_seqs, int ts);
void mt_ep_destroy(mt_ep *x);

/* Routing statistics of one call, for the metrics (host). */
typedef struct {
  double *tokens;   /* E: slots this rank routed to each expert (before dropping), added */
  double dropped;   /* slots dropped, added */
} mt_ep_stats;

/* Decide and lay out the dispatch of N = S * Ts local tokens from the
 * router's choices top_idx (N,k, backend memory). Collective over seq_g
 * (the per-sequence counts), ep and etp (the counts). Writes (backend
 * memory): slot (N,k) the send position of each choice or -1 (dropped);
 * send_tok (n_send) the token of each sent slot; perm (n_rows): row i of
 * expert-major order is row perm[i] of gathered order, inv its inverse;
 * seq_frac (S,E) the fraction of each sequence's slots (all slices, before
 * dropping) routed to each expert. meta (host) as above; st may be NULL. */
void mt_ep_route(mt_ep *x, const int *top_idx, int S, int Ts, int *slot, int *send_tok, int *perm,
                 int *inv, float *seq_frac, int *meta, mt_ep_stats *st);
/* send (n_send, C), expert-major per ep rank -> all-to-all-v over ep ->
 * recv (n_recv, C) -> all-gather-v over etp -> rows (n_rows, C), gathered
 * order (without etp, rows may be recv). */
void mt_ep_dispatch(const mt_ep *x, const int *meta, const float *send, float *recv, float *rows,
                    int C);
/* rows (n_rows, C), gathered order, this etp rank's partial sums ->
 * reduce-scatter-v over etp -> recv (n_recv, C) -> all-to-all-v over ep
 * back -> send (n_send, C), in send order (without etp, recv may be rows). */
void mt_ep_combine(const mt_ep *x, const int *meta, const float *rows, float *recv, float *send,
                   int C);
/* Bytes this rank sends per MoE layer and micro-batch of N local tokens
 * (forward and backward) over ep, etp and seq_g, when every expert receives
 * the same share of the slots (k = E routes every token to every expert, so
 * the figure is then exact): [0] ep, [1] etp, [2] seq_g. C floats per row. */
void mt_ep_bytes_balanced(int E, int k, int ep, int etp, int seq_size, int S, int Ts, int C,
                          double out[3]);

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

typedef enum { MT_SCHED_GPIPE, MT_SCHED_1F1B, MT_SCHED_INTERLEAVED, MT_SCHED_ZBH1 } mt_pp_sched;

typedef struct {
  mt_pp_sched kind;
  int pp, m, v;
  int *n_ops;      /* per pp rank */
  mt_pp_op **ops;  /* per pp rank, n_ops[r] operations in program order */
  int *max_inflight; /* per pp rank: the most (micro-batch, chunk) activation sets the
                        schedule promises to hold at once (1F1B: min(m, pp - rank)) */
} mt_pp_schedule;

/* "gpipe" | "1f1b" | "interleaved" | "zb-h1" -> kind; -1 if unknown. */
int mt_pp_sched_parse(const char *name);
const char *mt_pp_sched_name(mt_pp_sched kind);
const char *mt_pp_op_name(mt_pp_op_kind kind);

/* Checks (pp, m, v, layers) for the schedule: m >= pp for 1f1b, interleaved
 * and zb-h1; v = 1 unless interleaved (v >= 2 there); m % pp == 0 for
 * interleaved (Megatron's rule); pp*v <= layers. Returns 0, or -1 with a
 * one-line message naming the config keys. */
int mt_pp_sched_check(mt_pp_sched kind, int pp, int m, int v, int n_layer, mt_err *e);
/* Builds the op lists of every pp rank (call mt_pp_sched_check first). */
void mt_pp_schedule_build(mt_pp_schedule *s, mt_pp_sched kind, int pp, int m, int v);
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
} mt_pp_sim;

/* Simulates s and checks: every (mb, chunk) is forwarded once and backed once
 * (F before B, B before W), data dependencies across virtual stages hold,
 * every send has its receive and each channel (src, dst, kind) carries the
 * same (mb, chunk) sequence on both ends, no rank waits forever (so an
 * executor with non-blocking sends and blocking receives in this order
 * cannot deadlock), and per-rank in-flight activation sets stay within
 * s->max_inflight. t_f, t_b (full backward), t_bi, t_bw (split) are op times
 * of one chunk. Returns 0, or -1 with the first violation in msg. */
int mt_pp_schedule_validate(const mt_pp_schedule *s, double t_f, double t_b, double t_bi,
                            double t_bw, mt_pp_sim *out, char *msg, size_t msg_len);

/* Layers [*l0, *l1) of virtual stage vs (0..pp*v-1), balanced: the first
 * n_layer % (pp*v) virtual stages get one more. split (NULL or pp entries
 * summing to n_layer, each a multiple of v) gives the layers of each stage
 * explicitly: stage s's v chunks get split[s] / v layers each, the virtual
 * stages in order vs = chunk * pp + stage along the model (as Megatron's
 * uneven first/last stages with interleaving). */
void mt_pp_stage_layers(int n_layer, int pp, int v, const int *split, int vs, int *l0, int *l1);


/* ------------------------------------------------------------------ */
/* pipeline executor (pp.c)                                            */

/* What a stage computes, supplied by the caller (the executor knows the
 * model only through these). slot: which activation set (0..n_slots-1) holds
 * micro-batch mb of chunk; a slot is taken at the micro-batch's first op and
 * released after its last backward op (forward_only: after its forward). */
typedef struct {
  void *ctx;
  /* floats of the hidden state sent between stages for micro-batch mb */
  size_t (*msg_numel)(void *ctx, int mb);
  /* where slot's input hidden state goes (filled by a receive) */
  float *(*input)(void *ctx, int slot, int chunk);
  /* forward; returns the output hidden state (read by a send until the slot
   * is reused), or NULL on the last virtual stage */
  float *(*forward)(void *ctx, int slot, int mb, int chunk);
  /* backward from dout (NULL on the last virtual stage); returns the input
   * gradient (scratch: copied before the next call), NULL on the first.
   * input_only (a split backward's BWD_INPUT): leave the weight gradients to
   * backward_weight */
  const float *(*backward)(void *ctx, int slot, int mb, int chunk, const float *dout,
                           int input_only);
  /* BWD_WEIGHT: the weight gradients of the micro-batch's earlier input-only
   * backward; NULL: BWD_INPUT computes the whole backward, BWD_WEIGHT only
   * releases the slot */
  void (*backward_weight)(void *ctx, int slot, int mb, int chunk);
} mt_pp_stage_fns;

typedef struct {
  mt_group *g;
  const mt_ops *ops;        /* the backend: buffers, copies, and where they live */
  const mt_pp_schedule *s;
  mt_pp_stage_fns fn;
  int rank, n_slots, next_free_hint;
  size_t max_msg;           /* floats of the largest hidden state */
  int *slot_of;             /* (mb * v + chunk) -> slot, -1 none */
  int *slot_busy;
  float **dout;             /* per slot: received output gradient */
  float **out;              /* per slot: the forward's output hidden state (the caller's) */
  /* send buffers: a message is copied into a free one and sent; a buffer is
   * free again once its send completed (tested, never waited for mid-run:
   * waiting could block on a peer that waits for us, as with a rendezvous
   * send). The pool grows to the messages in flight. */
  float **send_buf;
  mt_request *send_req;
  int n_send, cap_send;
  mt_request recv;
  const float *din;         /* the last backward's input gradient (the caller's scratch) */
  /* the last run, this rank */
  double wall_s, wait_s, compute_s; /* wait: in receives and sends; compute: in fn */
  int peak_slots;           /* most activation sets held at once */
} mt_pp_exec;

/* n_slots: activation sets the caller can hold (s->max_inflight[rank]);
 * max_msg: floats of the largest hidden state message. A pipeline of one
 * stage (pp = 1) sends nothing and allocates no message buffers. */
void mt_pp_exec_create(mt_pp_exec *x, mt_group *pp_group, const mt_ops *ops,
                       const mt_pp_schedule *s, const mt_pp_stage_fns *fn, int n_slots,
                       size_t max_msg);
/* Comm-buffer bytes of an executor for pp stages with n_slots slots and
 * max_msg-float messages, before any send (sends add pool buffers of
 * max_msg floats as messages are in flight). */
size_t mt_pp_exec_comm_bytes(int pp, int n_slots, size_t max_msg);
void mt_pp_exec_destroy(mt_pp_exec *x);
/* Runs this rank's op list once: non-blocking sends from copies (waited for
 * at the end), receives posted and waited for in order. forward_only: skips
 * every backward op and gradient message. */
void mt_pp_exec_run(mt_pp_exec *x, int forward_only);

/* Tied tensors across stages: for every tensor this stage holds that has a
 * copy on another stage (pp_copy), owner and copy exchange their gradients
 * (grads: the flat gradient buffer) and each adds the other's, so the two
 * stay bitwise equal (a + b == b + a) and so do their updates. scratch
 * holds the largest such tensor. Collective over the stages that hold
 * one. */
void mt_pp_sum_tied_grads(mt_group *pp_group, const mt_registry *reg, const mt_ops *ops,
                          float *grads, float *scratch);
/* Floats of the largest tied tensor this stage holds (0: none). */
size_t mt_pp_tied_numel(const mt_registry *reg);

#endif
