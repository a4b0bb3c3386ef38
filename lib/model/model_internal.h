/* Shared by lib/model's files (not part of the API): where one layer's
 * activations are, the block's forward and backward, the MoE block's and
 * attention's internals. */
#ifndef MT_MODEL_INTERNAL_H
#define MT_MODEL_INTERNAL_H

#include "model/model.h"

/* ------------------------------------------------------------------ */
/* activations (acts.c)                                                */

/* One MoE block's slot of an activation set (shapes in mt_gpt_acts). */
typedef struct {
  float *probs, *lse, *topw, *frac;   /* the router's: fp32 always */
  mt_act *xe, *h, *g, *ys;            /* rows: the activations' dtype */
  int *top, *slot, *meta, *perm, *inv;
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
/* a transformer block (block.c)                                       */

/* Forward of block l from its input x0 (BTs,C) into x. */
void mt_block_forward(mt_gpt *m, int l, const mt_block_tensors *w, const mt_act *x0,
                      const mt_layer_acts *x, int B);
/* Recompute: layer l's activations into the workspace again, from its
 * input (bitwise the stored values). */
void mt_block_recompute(mt_gpt *m, int l, const mt_act *x0, const mt_layer_acts *x, int B);
/* Backward of block l: dres (BTs,C) holds d(output) and becomes d(input).
 * input_only: no linear's weight or bias gradient; their output gradients
 * go to x->dy_* for mt_block_backward_weight (LayerNorm gradients stay
 * here). */
void mt_block_backward(mt_gpt *m, int l, const mt_act *x0, const mt_layer_acts *x, mt_act *dres,
                       int input_only, float dloss, int B);
/* The weight pass of block l: dW += dY^T X, db += sum dY for each linear,
 * from the output gradients the input pass kept (dense blocks only). */
void mt_block_backward_weight(mt_gpt *m, int l, const mt_layer_acts *x, int B);

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
                     int *h_send, int *h_perm, int *h_inv, int *meta);
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
 * rows per sequence, out (B, rows, C) and lse (B, NH, rows). */
mt_attn_block mt_attention_block(const mt_attention *a, int B, int rows, int Tq, int Tk,
                                 int q_pos0, int k_pos0, size_t kv_rs, int rows_kv);
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
