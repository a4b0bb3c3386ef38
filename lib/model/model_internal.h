/* Shared by lib/model's files (not part of the API): where one layer's
 * activations are, the block's forward and backward, the MoE block's and
 * attention's internals. */
#ifndef MT_MODEL_INTERNAL_H
#define MT_MODEL_INTERNAL_H

#include "model/model.h"

/* ------------------------------------------------------------------ */
/* tensor parallelism: the linears and their collectives (linear.c)    */

/* max_act: the largest (B,T,C) activation, in elements, that will be
 * reduce-scattered; max_partial_grads: the most elements of tp_partial_grad
 * tensors in one range handed to mt_tp_reduce_partial_grads. */
void mt_tp_create(mt_tp *tp, mt_group *g, int sp, size_t max_act, size_t max_partial_grads,
                  const mt_ops *ops, mt_dtype dt);
void mt_tp_destroy(mt_tp *tp);
void mt_tp_set_linear(mt_tp *tp, int T, int C, mt_act *full_in, mt_act *full_out,
                      mt_act *dx_local);
/* the scratch of the sums launched without blocking (mt_tp's async_*):
 * full (BT,C); under sp also pack (BT,C) and local (BTs,C), else NULL */
void mt_tp_set_async(mt_tp *tp, mt_act *full, mt_act *pack, mt_act *local);

/* Sum (in place) of the ranks' partial results: the forward of a
 * row-parallel layer ("g") or the backward of a column-parallel one ("f"). */
void mt_tp_allreduce(const mt_tp *tp, mt_act *x, size_t n);
void mt_tp_allreduce_max(const mt_tp *tp, float *x, size_t n);
void mt_tp_allreduce_f64(const mt_tp *tp, double *x, size_t n);
/* Sequence parallelism: the slices (B,T/size,C) of every rank -> full
 * (B,T,C) on every rank ... */
void mt_tp_gather_seq(const mt_tp *tp, const mt_act *local, mt_act *full, int B, int T, int C);
/* ... and partial sums (B,T,C) -> this rank's slice (B,T/size,C) of the sum. */
void mt_tp_reduce_scatter_seq(const mt_tp *tp, const mt_act *full, mt_act *local, int B, int T,
                              int C);

/* Elements of tp_partial_grad tensors this rank holds in [begin, end). */
size_t mt_tp_partial_numel(const mt_registry *reg, size_t begin, size_t end);

/* Column-parallel linear (Megatron's ColumnParallelLinear): y (BT, OC) =
 * f(x) W^T + b with this rank's OC rows of W (OC, C) and b (OC, or NULL).
 * f is the identity forward without sp (x is the (BT,C) copy every tp rank
 * holds) and an all-gather along T under sp (x is this rank's (BTs,C)
 * slice); f(x) is what mt_linear_col_input returns. */
const mt_act *mt_linear_col_input(const mt_tp *tp, const mt_act *x, int B);
void mt_linear_col_forward(const mt_tp *tp, mt_act *y, const mt_act *x, const mt_act *w,
                           const mt_act *b, int B, int OC);
/* Its backward from dy (BT, OC): dw += dy^T f(x) and db += sum dy (f(x)
 * gathered again under sp; x NULL: no weight gradient, dw and db unused),
 * and the input gradient dy W formed in dpart (BT,C) and summed over tp
 * (f's backward: an all-reduce in place, or a reduce-scatter along T into
 * this rank's (BTs,C) slice). Returns the summed input gradient. */
const mt_act *mt_linear_col_backward(const mt_tp *tp, mt_act *dpart, float *dw, float *db,
                                     const mt_act *dy, const mt_act *x, const mt_act *w, int B,
                                     int OC);
/* The same with the input gradient's sum over tp launched without
 * blocking: returns where it will be (the tp scratch) after
 * mt_linear_row_wait(r); one at a time. And the same as
 * mt_linear_col_backward whose sum follows the non-blocking one before (one
 * channel: in the order issued). */
const mt_act *mt_linear_col_backward_async(const mt_tp *tp, float *dw, float *db,
                                           const mt_act *dy, const mt_act *x, const mt_act *w,
                                           int B, int OC, mt_request *r);
const mt_act *mt_linear_col_backward_after(const mt_tp *tp, mt_act *dpart, float *dw, float *db,
                                           const mt_act *dy, const mt_act *x, const mt_act *w,
                                           int B, int OC, mt_request *before);
/* The weight gradients alone (a split backward's weight pass). */
void mt_linear_col_backward_weight(const mt_tp *tp, float *dw, float *db, const mt_act *dy,
                                   const mt_act *x, int B, int OC);
/* Row-parallel linear (Megatron's RowParallelLinear): y = g(x W^T + b)
 * with x (BT, IC) this rank's IC input channels, W (C, IC), b (C) added by
 * tp rank 0 only (before the sum); g sums the partial outputs over tp: an
 * all-reduce into y (BT,C), or under sp a reduce-scatter along T into y
 * (BTs,C). */
void mt_linear_row_forward(const mt_tp *tp, mt_act *y, const mt_act *x, const mt_act *w,
                           const mt_act *b, int B, int IC);
/* The same with g launched without blocking (all-reduce in place, or under
 * sp a reduce-scatter of the partial sum packed rank by rank): y holds the
 * sum after mt_linear_row_wait(r). One at a time (the scratch is one). */
void mt_linear_row_forward_async(const mt_tp *tp, mt_act *y, const mt_act *x, const mt_act *w,
                                 const mt_act *b, int B, int IC, mt_request *r);
void mt_linear_row_wait(const mt_tp *tp, mt_request *r);
/* mt_linear_row_forward whose sum over tp follows the earlier non-blocking
 * one before: the matmul runs while that is in flight, then the sums go in
 * the order they were issued (one channel, as one NCCL stream runs them) */
void mt_linear_row_forward_after(const mt_tp *tp, mt_act *y, const mt_act *x, const mt_act *w,
                                 const mt_act *b, int B, int IC, mt_request *before);
/* g in two halves, for a row-parallel layer that is not a matmul (the
 * vocabulary-parallel embedding): where the partial (BT,C) output goes (y
 * itself, or under sp a scratch), then the sum over tp into y. */
mt_act *mt_linear_row_partial(const mt_tp *tp, mt_act *y);
void mt_linear_row_reduce(const mt_tp *tp, mt_act *y, int B);
/* g's backward: the full (BT,C) output gradient from this rank's part dy
 * (identity without sp, all-gather along T with). */
const mt_act *mt_linear_row_dout(const mt_tp *tp, const mt_act *dy, int B);
/* dx (BT, IC) = dy W (written), dw += dy^T x, db += sum dy (dw, db NULL:
 * skipped); dy is g's backward's full output gradient. */
void mt_linear_row_backward(const mt_tp *tp, mt_act *dx, float *dw, float *db,
                            const mt_act *dy, const mt_act *x, const mt_act *w, int B, int IC);
/* The weight gradients alone (a split backward's weight pass). */
void mt_linear_row_backward_weight(const mt_tp *tp, float *dw, float *db, const mt_act *dy,
                                   const mt_act *x, int B, int IC);

/* ------------------------------------------------------------------ */
/* attention (attention.c; context parallelism: attention_cp.c)        */


/* g: the cp group (NULL or size 1: no context parallelism, lay of size 1);
 * kv_group, kv_h0: the query heads per key/value head and the ops' first
 * head index (mt_attention's kv_of; 1 and 0 without gqa). */
void mt_attention_create(mt_attention *a, mt_group *g, const mt_cp_layout *lay, int max_B, int C,
                         int NH, int kv_group, int kv_h0, const mt_ops *ops, mt_dtype dt);
void mt_attention_destroy(mt_attention *a);
/* the compact key/value head local query head h reads (kv_group, kv_h0) */
int mt_attention_kv_of(const mt_attention *a, int h);
/* Elements of the scratch the model provides: what (0 part, 1 part_lse, 2
 * dout_h, 3 dqkv_h) for this layout (0 where the mode needs none). */
size_t mt_cp_scratch_numel(const mt_cp_layout *lay, int max_B, int C, int NH, int what);
void mt_attention_set_scratch(mt_attention *a, mt_act *part, float *part_lse, mt_act *dout_h,
                              mt_act *dqkv_h);
/* documents: where this rank's rows' documents begin (max_B, T_local) and,
 * under Ulysses, the whole sequence's (max_B, T); NULL: no documents */
void mt_attention_set_documents(mt_attention *a, const int *doc_lo, const int *doc_lo_seq);
/* the model's positions at creation (positions.c): this rank's tokens'
 * places in the sequence, the rotary table, attention's documents */
void mt_gpt_positions_init(mt_gpt *m);
/* token slices: attention's K|V cache bound to layer l's part of the pass's
 * (mt_gpt_set_slice); nothing without slices */
void mt_gpt_slice_layer(mt_gpt *m, int l);
/* token slices: this slice's rows of K|V between its (B, T / slices, 3C)
 * q|k|v (columns C..3C) and a cache of the sequences' (B, T, 2C): into the
 * cache (to_cache), else back (C: the channels of the layout, a rank's or
 * under Ulysses a head group's) */
void mt_attention_slice_rows(const mt_attention *at, mt_act *qkv, mt_act *cache, int B, size_t C,
                             size_t T, int to_cache);
/* Elements of the saved pieces per layer (lse, qkv_h, out_h; 0: not kept). */
size_t mt_cp_saved_numel(const mt_cp_layout *lay, int B, int C, int NH, int what);

/* out (B, T_local, C) = causal attention of the local queries over the
 * whole sequence, from qkv (B, T_local, 3C) (this rank's q|k|v); keeps s.
 * Collective over the cp group. */
void mt_attention_forward(mt_attention *a, mt_act *out, const mt_act *qkv, const mt_cp_saved *s,
                          int B);
/* WRITES dqkv (B, T_local, 3C), the gradient of this rank's q|k|v, from
 * dout (B, T_local, C) and the forward's out, qkv and s. Collective. */
void mt_attention_backward(mt_attention *a, mt_act *dqkv, const mt_act *dout,
                           const mt_act *out, const mt_act *qkv, const mt_cp_saved *s, int B);

/* ------------------------------------------------------------------ */
/* expert parallelism: MoE token dispatch (moe_dispatch.c)             */

/* LLEP's bounds for E_l experts a rank on ep ranks: a rank helps with at
 * most as many experts as it holds (H = E_l: twice its experts' weights at
 * most), and lends at most max(E_l, ep - 1) pairs (L; so one hot expert can
 * spread over every other rank) */
void mt_ep_llep_caps(int E_l, int ep, int *H, int *L);

/* What routing decided, as ints (host; the model keeps a copy with the
 * micro-batch's activations): MT_EP_N_SEND slots sent, MT_EP_N_RECV rows
 * received over ep, MT_EP_N_ROWS rows after the etp gather, MT_EP_DROPPED
 * local slots dropped, then send_counts[ep], recv_counts[ep] (rows to and
 * from each ep rank), etp_rows[etp] (rows received by each etp rank) and
 * expert_off[E_l + H + 1] (the offsets in expert-major rows of the rank's
 * experts, then of the experts it helps with under LLEP); under LLEP then
 * the record of mt_ep_llep. */
enum { MT_EP_N_SEND, MT_EP_N_RECV, MT_EP_N_ROWS, MT_EP_DROPPED, MT_EP_HEAD };
/* ints of a routing record for these axes (E_l experts per ep rank; llep:
 * least-loaded expert parallelism on) */
int mt_ep_meta_ints(int ep, int etp, int E_l, int llep);
/* Under LLEP, what a rank exchanges for a block (every rank of the ep group
 * computes the whole plan from the same counts): MT_LLEP_N_HELP experts it
 * computes for their owners, MT_LLEP_N_LEND (expert, helper) pairs it lends,
 * MT_LLEP_PAIRS the pairs of the whole group (0: no weights move), then
 * help_e[H] (ordered by owner, then expert: the order their weights
 * arrive), lend_e[L] and lend_q[L] (ordered by helper, then expert). */
enum { MT_LLEP_N_HELP, MT_LLEP_N_LEND, MT_LLEP_PAIRS, MT_LLEP_HEAD };
const int *mt_ep_llep(const mt_ep *x, const int *meta);
const int *mt_ep_send_counts(const mt_ep *x, const int *meta);
const int *mt_ep_recv_counts(const mt_ep *x, const int *meta);
const int *mt_ep_etp_rows(const mt_ep *x, const int *meta);
const int *mt_ep_expert_off(const mt_ep *x, const int *meta);

/* Row bounds for micro-batches of S sequence slices of Ts tokens: slots a
 * rank sends, rows it receives over ep, rows after the etp gather. factor 0:
 * the worst case (every source rank's tokens could choose this rank's
 * experts; under capacity, at most the capacity of each); factor f > 0
 * (parallel.moe_buffer_factor): f x a balanced routing's N k received rows
 * where that is less, what the buffers start at (mt_ep_fit grows them). */
void mt_ep_bounds(int E, int k, int ep, int etp, int T, double capacity, double factor, int S,
                  int Ts, size_t *max_send, size_t *max_recv, size_t *max_rows);
/* A routing receives n_recv rows over ep and n_rows after the etp gather:
 * where that exceeds the bounds they grow (by a quarter at least, to the
 * worst case at most) and the host permutations with them; 1 if they grew
 * (the model then grows its buffers: moe.c). */
int mt_ep_fit(mt_ep *x, size_t n_recv, size_t n_rows);
/* slots an expert takes per sequence of T tokens at capacity factor c (0: 0, dropless) */
int mt_ep_capacity(double c, int T, int k, int E);

/* Groups (NULL: absent), the routing shape, the largest micro-batch, and
 * which ep rank owns each of the E experts (the registry's placement,
 * mt_registry_ep_owner; NULL: E/ep consecutive experts per rank). */
void mt_ep_create(mt_ep *x, mt_group *ep_g, mt_group *etp_g, mt_group *seq_g, const mt_ops *ops,
                  int E, int k, int T, double capacity, double factor, int max_seqs, int ts,
                  const int *owner);
/* Least-loaded expert parallelism from now on (alpha >= 1; needs ep > 1 and
 * etp = 1). Each block, after dropping: a rank whose rows exceed
 * ceil(alpha x the group's mean) keeps that many; the rest of its heaviest
 * experts' rows (the last in source order) go to the least-loaded ranks, each
 * filled up to the same bound (within mt_ep_llep_caps), in pieces of at
 * least min_rows rows (a smaller piece would cost more in weights moved
 * than it saves). Every row still meets the same weights, so outputs are those without
 * it; the helpers receive the experts' weights and send back their
 * gradients (moe.c). */
void mt_ep_set_balance(mt_ep *x, double alpha, int min_rows);
void mt_ep_destroy(mt_ep *x);

/* Routing statistics of one call, for the metrics (host). */
typedef struct {
  double *tokens;   /* E: slots this rank routed to each expert (before dropping), added */
  double dropped;   /* slots dropped, added */
  double rows;      /* expert rows this rank computed (after LLEP), added */
  double moved;     /* rows LLEP moved in the whole ep group (counted by ep rank 0), added */
} mt_ep_stats;

/* Decide and lay out the dispatch of N = S * Ts local tokens from the
 * router's choices top_idx (N,k, backend memory). Collective over seq_g
 * (the per-sequence counts), ep and etp (the counts). Writes (backend
 * memory): slot (N,k) the send position of each choice or -1 (dropped);
 * send_tok (n_send) the token of each sent slot; seq_frac (S,E) the
 * fraction of each sequence's slots (all slices, before dropping) routed
 * to each expert. meta (host) as above; st may be NULL.
 * The permutations (host, x->perm_h, for mt_ep_upload_perm): row i of
 * expert-major order is row perm[i] of gathered order, inv its inverse. */
void mt_ep_route(mt_ep *x, const int *top_idx, int S, int Ts, int *slot, int *send_tok,
                 float *seq_frac, int *meta, mt_ep_stats *st);
/* The last routing's permutations (n_rows each; see mt_ep_route) to perm
 * and inv in backend memory, once the caller has room for them (mt_ep_fit
 * may have grown the bounds); nothing after a reused routing (the backend
 * computes nothing from them: ops->moe_routing_id). */
void mt_ep_upload_perm(mt_ep *x, int *perm, int *inv);
/* send (n_send, C), expert-major per ep rank -> all-to-all-v over ep ->
 * recv (n_recv, C) -> all-gather-v over etp -> rows (n_rows, C), gathered
 * order (without etp, rows may be recv). */
void mt_ep_dispatch(const mt_ep *x, const int *meta, const mt_act *send, mt_act *recv,
                    mt_act *rows, int C);
/* rows (n_rows, C), gathered order, this etp rank's partial sums ->
 * reduce-scatter-v over etp -> recv (n_recv, C) -> all-to-all-v over ep
 * back -> send (n_send, C), in send order (without etp, recv may be rows). */
void mt_ep_combine(const mt_ep *x, const int *meta, const mt_act *rows, mt_act *recv,
                   mt_act *send, int C);

/* ------------------------------------------------------------------ */
/* activations (acts.c)                                                */

/* One MoE block's slot of an activation set (shapes in mt_gpt_acts). */
typedef struct {
  float *probs, *lse, *topw, *frac;   /* the router's: fp32 always */
  mt_act *xe, *h, *g, *ys;            /* rows: the activations' dtype */
  int *top, *slot, *meta, *perm, *inv;
  /* where perm, inv, xe, h, g (fwd) and dy, dh (grads) live: growable,
   * NULL pointers until mt_moe_rows_fit gives them memory */
  mt_moe_rows *fwd, *grads;
  /* split backward only (in the kept set, also under recompute): the
   * experts' output and hidden gradients (R,C), (R,Fe) in expert-major
   * rows, from the input pass for the weight pass */
  mt_act *dy, *dh;
} mt_moe_acts;

/* Where one layer's activations are (shapes as in mt_gpt_acts, one layer):
 * slot j of a set, or under recompute the workspace m->ws for all but the
 * output res3 (always slot j of the set: the next layer's input). A MoE
 * block also has its slot among the set's MoE blocks (moe). */
typedef struct {
  mt_act *ln1, *qkv, *atty, *attproj, *res2, *ln2, *fch, *fchg, *fcproj, *res3;
  float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
  mt_act *dy_qkv, *dy_attproj, *dy_fc, *dy_fcproj; /* split backward only */
  mt_cp_saved att;  /* what attention keeps: the rows' LSE (Ulysses: head-layout q|k|v, out) */
  int is_moe;
  mt_moe_acts moe;
} mt_layer_acts;

/* Activation sets: SET_KEPT is a set as the model keeps it for backward
 * (see mt_gpt_parallel), SET_WORKSPACE every per-layer activation
 * (recompute's one-layer workspace). */
typedef enum { MT_SET_KEPT, MT_SET_WORKSPACE } mt_act_set_kind;
size_t mt_act_set_numel(const mt_gpt *m, int n_layers, int B, int with_head, mt_act_set_kind k);
void mt_act_set_bind(const mt_gpt *m, mt_gpt_acts *a, void *mem, int n_layers, int B,
                     int with_head, mt_act_set_kind k);
/* layer l of a set holding the range that starts at l0 */
mt_layer_acts mt_layer_at(const mt_gpt *m, const mt_gpt_acts *a, int l, int l0, int B);
/* The MoE rows of a set's slot (acts.c): o's row pointers from its
 * entries (NULL where not allocated yet); fit: its forward's (grads 0) or
 * split backward's (1) entry holding the model's row bound m->moe.rows,
 * remade larger where it holds less (contents lost), then bound; the bytes
 * of an entry of rows rows; free: every entry (at the model's end). */
void mt_moe_rows_bind(const mt_gpt *m, mt_moe_acts *o);
void mt_moe_rows_fit(const mt_gpt *m, mt_moe_acts *o, int grads);
size_t mt_moe_rows_bytes(const mt_gpt *m, int grads, size_t rows);
void mt_moe_rows_free(const mt_gpt *m);
/* the input hidden state (BTs,C) of slot j: the range's input or slot j-1's output */
const mt_act *mt_layer_input(const mt_gpt *m, const mt_gpt_acts *a, size_t j, int B);

/* ------------------------------------------------------------------ */
/* the activations' dtype                                              */

/* element i of an activation or weight array of the model's dtype (es
 * bytes an element); NULL stays NULL */
static inline mt_act *mt_act_at(size_t es, const mt_act *p, size_t i) {
  return p ? (mt_act *)((const char *)p + i * es) : NULL;
}

/* ------------------------------------------------------------------ */
/* the embedding and the LM head (head.c)                              */

/* The embedding of x's tokens into x->a->encoded (summed over tp), and its
 * backward from the residual stream's gradient dres. */
void mt_embed_forward(mt_gpt *m, const mt_pass_args *x);
void mt_embed_backward(mt_gpt *m, const mt_act *dres, const mt_pass_args *x);
/* The final norm, the logits and the cross-entropy: returns the sum of the
 * B*T position losses. Backward: into m->d.residual3 (the LM head's weight
 * gradient too unless x->input_only; then mt_head_backward_weight). */
double mt_head_forward(mt_gpt *m, const mt_pass_args *x);
void mt_head_backward(mt_gpt *m, const mt_pass_args *x);
void mt_head_backward_weight(mt_gpt *m, const mt_pass_args *x);

/* ------------------------------------------------------------------ */
/* a transformer block (block.c)                                       */

/* The model's norm over (N, C) rows: LayerNorm (mean, rstd and the bias
 * used) or RMSNorm (rstd only; mean, b and db unused). */
void mt_norm_forward(const mt_gpt *m, mt_act *out, float *mean, float *rstd, const mt_act *inp,
                     const mt_act *w, const mt_act *b, int N);
void mt_norm_backward(const mt_gpt *m, mt_act *dinp, float *dw, float *db, const mt_act *dout,
                      const mt_act *inp, const mt_act *w, const float *mean, const float *rstd,
                      int N);
/* grouped-query attention: the ops' first head index (the key/value head
 * of local query head h is (h0 + h) / group; block.c says why) */
int mt_gpt_kv_h0(const mt_gpt *m);
/* The same with dinp written (the first contribution: no zero pass before) */
void mt_norm_backward_first(const mt_gpt *m, mt_act *dinp, float *dw, float *db,
                            const mt_act *dout, const mt_act *inp, const mt_act *w,
                            const float *mean, const float *rstd, int N);

/* res = a + b, then out = the model's norm of res, in one fused op (the
 * same bits as the sum, then mt_norm_forward) */
void mt_residual_norm_forward(const mt_gpt *m, mt_act *res, mt_act *out, float *mean,
                              float *rstd, const mt_act *a, const mt_act *b, const mt_act *w,
                              const mt_act *bias, int N);

/* Whether block l of the forward pass x leaves its last residual sum (its
 * output x->res3 = res2 + fcproj) to the piece after it, the next block of
 * the range or the head, which does it in one pass with its first norm:
 * under m->fuse_norms, but for the ladder residual (two streams) and for a
 * range's last block without the head (its output leaves the stage). */
int mt_block_defers_output(const mt_gpt *m, const mt_pass_args *x, int l);

/* Forward of block l from its input x0 (BTs,C) into x. Ladder residual:
 * pend is the previous block's MLP output (BTs,C), not yet in x0 (NULL for
 * block 0 and under the standard residual). prev: the previous block's
 * activations where it deferred its output x0 (= prev->res3) to here
 * (mt_block_defers_output), NULL where x0 is whole; defer: leave this
 * block's output to the next piece. */
void mt_block_forward(mt_gpt *m, int l, const mt_block_tensors *w, const mt_act *x0,
                      const mt_act *pend, const mt_layer_acts *prev, int defer,
                      const mt_layer_acts *x, int B);
/* Recompute: layer l's activations into the workspace again, from its
 * input (and the ladder's pend) (bitwise the stored values; the ladder's
 * MLP output is kept in the set and written again with the same bits). */
void mt_block_recompute(mt_gpt *m, int l, const mt_act *x0, const mt_act *pend,
                        const mt_layer_acts *x, int B);
/* Backward of block l: dres (BTs,C) holds d(output) and becomes d(input).
 * input_only: no linear's weight or bias gradient; their output gradients
 * go to x->dy_* for mt_block_backward_weight (LayerNorm gradients stay
 * here). */
void mt_block_backward(mt_gpt *m, int l, const mt_act *x0, const mt_layer_acts *x, mt_act *dres,
                       int input_only, float dloss, int B);
/* The same under the ladder residual: dres holds d(x->res3), dpend
 * d(x->fcproj) (the last block: ignored, d(x->res3) is that too); they
 * become d(input) and d(the previous block's fcproj). */
void mt_block_backward_ladder(mt_gpt *m, int l, const mt_act *x0, const mt_layer_acts *x,
                              mt_act *dres, mt_act *dpend, int input_only, float dloss, int B);
/* The weight pass of block l: dW += dY^T X, db += sum dY for each linear,
 * from the output gradients the input pass kept (dense blocks only). */
void mt_block_backward_weight(mt_gpt *m, int l, const mt_layer_acts *x, int B);

/* the MLP's activation on N rows (block.c): GELU (N,F) -> (N,F), or SwiGLU
 * (N,2F) -> (N,F) (m->mlp_in); the backward writes dinp (its first contribution) */
void mt_mlp_act_forward(const mt_gpt *m, mt_act *out, const mt_act *inp, int N, int F);
void mt_mlp_act_backward(const mt_gpt *m, mt_act *dinp, const mt_act *inp, const mt_act *dout,
                         int N, int F);

/* ------------------------------------------------------------------ */
/* the MoE block (moe.c)                                               */

/* Sizes the block from its share of the experts (n_blocks, E_local,
 * Fe_local and the folded mesh set by the model) and the model's tokens,
 * before the activation sets are laid out; create then allocates its
 * scratch with act (activation memory; a count-only model gets NULL) and
 * the dispatcher. */
typedef float *(*mt_act_alloc_fn)(mt_gpt *m, size_t n);
void mt_moe_size(mt_moe *x, const mt_gpt *m);
void mt_moe_create(mt_moe *x, mt_gpt *m, const mt_gpt_parallel *par, mt_group *tp_g,
                   mt_act_alloc_fn act);
void mt_moe_destroy(mt_moe *x);
/* The MLP half of a MoE block: the shared experts (when the block has
 * them) have written their output into x->fcproj; the routed experts'
 * output on the local tokens is added to it (or is it). */
void mt_moe_block_forward(mt_gpt *m, int l, const mt_block_tensors *w, const mt_layer_acts *x,
                          int B);
/* Its backward from dres (the gradient of the block's MLP output, (BTs,C)):
 * the routed experts' input gradient, added to the shared experts' dln
 * (BTs,C) or, without shared experts, written into spare (BT,C). Returns the
 * gradient of the ln2 output. */
const mt_act *mt_moe_block_backward(mt_gpt *m, int l, const mt_layer_acts *x,
                                    const mt_act *dres, const mt_act *dln, mt_act *spare,
                                    float dloss, int input_only, int B);
/* A split backward (input_only above): the routed experts' weight
 * gradients, in the weight pass (x as the forward or its recompute left it,
 * with the input pass's kept gradients x->moe.dy, x->moe.dh). */
void mt_moe_block_backward_weight(mt_gpt *m, int l, const mt_layer_acts *x);

/* least-loaded expert parallelism (moe_llep.c) */
/* steps 4-6 of mt_ep_route under LLEP: from every source's kept slots per
 * expert, the plan, the send positions, the received rows' order and the
 * exchange record (meta); returns the rows the plan moves (whole group) */
int mt_ep_route_llep(mt_ep *x, const int *choice, int N, const int *kept, int *h_slot,
                     int *h_send, int *meta);
/* x->llep's regions: helped experts' weights, their gradients, lent pairs */
enum { MT_LLEP_HELP_W, MT_LLEP_HELP_G, MT_LLEP_LEND };
float *mt_moe_llep_region(const mt_moe *x, int r, int t);
/* block weights w out to the helpers of the routing record meta (collective
 * over ep where any pair exists): the weights' copy as it is stored, of
 * type dt (bf16: half the bytes, in the regions' first half). The
 * gradients stay fp32 either way. */
void mt_moe_llep_weights(mt_moe *x, mt_dtype dt, const mt_block_tensors *w, const int *meta);
/* the helped experts' gradients to 0; and back to their owners, added to g */
void mt_moe_llep_zero_grads(mt_moe *x, const int *meta);
void mt_moe_llep_grads(mt_moe *x, mt_block_tensors *g, const int *meta);

/* ------------------------------------------------------------------ */
/* attention (attention.c, attention_cp.c)                             */

/* A block pair of attention: queries of a (B, rows, 3C) q|k|v buffer from
 * row q_row, keys and values from a buffer of row stride kv_rs and rows_kv
 * rows per sequence, out (B, rows, C) and lse (B, NH, rows); with documents
 * the query rows' document starts from row q_row of doc_lo. */
mt_attn_block mt_attention_block(const mt_attention *a, int B, int rows, int q_row, int Tq,
                                 int Tk, int q_pos0, int k_pos0, size_t kv_rs, int rows_kv);
/* context parallelism: ring and Ulysses (attention_cp.c) */
void mt_attention_ring_forward(mt_attention *a, mt_act *out, const mt_act *qkv, float *lse,
                               int B);
void mt_attention_ring_backward(mt_attention *a, mt_act *dqkv, const mt_act *dout,
                                const mt_act *out, const mt_act *qkv, const float *lse, int B);
void mt_attention_ulysses_forward(mt_attention *a, mt_act *out, const mt_act *qkv,
                                  const mt_cp_saved *s, int B);
void mt_attention_ulysses_backward(mt_attention *a, mt_act *dqkv, const mt_act *dout,
                                   const mt_cp_saved *s, int B);

#endif
