/* model: GPT-2 (learned positions, pre-LayerNorm, causal multi-head
 * attention, GELU MLP, tied input/output embedding) over local shards.
 * Every tensor lives in one flat allocation laid out by the registry; the
 * structs below only name the pieces. All compute goes through mt_ops.
 * Never calls MPI: tensor-parallel communication goes through parallel's
 * mt_tp, and gradient hooks let the parallel module overlap dp.
 *
 * Tensor parallelism (Megatron-style) over a tp group of size tp: the fused
 * QKV and mlp.fc are column-parallel (each rank computes NH/tp heads and 4C/tp
 * hidden channels), attn.proj and mlp.proj row-parallel, the embedding and
 * the LM head vocabulary-parallel (Vp/tp rows each; the cross-entropy combines
 * per-row statistics, never the logits). Each rank's shard comes from the
 * registry; the layers only read local shapes and starts from it. With
 * sequence parallelism (sp) the LayerNorm and residual regions hold T/tp
 * positions of every sequence.
 *
 * Context parallelism (cp) splits every sequence over the cp group
 * (mt_cp: ring or Ulysses attention); a rank holds T/cp tokens of each
 * sequence, its chunks one after the other, and every layer but attention
 * and the positional embedding works on them as on any rows. Attention is
 * computed by blocks (FlashAttention-2): per layer only the output and the
 * rows' log-sum-exp are kept, never a T x T matrix.
 *
 * Activation shapes below: T = m->T, the tokens of a sequence on this rank
 * (seq_len / cp); BT = B*T rows inside tensor-parallel blocks, BTs = B*T/tp
 * rows in the sequence-parallel region under sp (BTs = BT without); Cl =
 * C/tp, Fl = 4C/tp, NHl = NH/tp, Vl = Vp/tp (all = the full sizes at tp =
 * 1). */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include <stdint.h>
#include "core/core.h"
#include "kernels/kernels.h"
#include "parallel/parallel.h"
#include "registry/registry.h"

typedef struct {
  int n_layer, n_embd, n_head, seq_len;
  int vocab;        /* true vocabulary size */
  int vocab_padded; /* rows of the embedding as stored (multiple of 64*tp) */
  /* Mixture-of-Experts (moe_experts = 0: a dense model): every moe_every-th
   * block (blocks l with (l+1) % moe_every == 0) replaces its MLP by a router
   * over moe_experts experts (GELU MLPs of hidden size moe_ffn) of which each
   * token uses moe_topk, plus moe_shared shared experts every token uses (one
   * MLP of hidden size moe_shared x moe_ffn); moe_capacity: the capacity
   * factor (0: dropless) */
  int moe_experts, moe_topk, moe_every, moe_ffn, moe_shared;
  double moe_capacity;
} mt_model_shape;

/* Is block l a MoE block? */
int mt_model_is_moe(const mt_model_shape *s, int l);
/* MoE blocks among blocks [0, l) */
int mt_model_moe_before(const mt_model_shape *s, int l);
/* Parameters a token uses (the router, its k experts and the shared ones,
 * not the other experts; tied embedding once): what MFU counts. */
size_t mt_model_active_params(const mt_model_shape *s);
/* The matmul weights a token uses (attention, its MLP or router, k experts
 * and shared experts, the LM head): the N of MFU's 6 N FLOPs per token. */
double mt_model_active_matmul_weights(const mt_model_shape *s);

/* rows of the embedding as stored: vocab rounded up to a multiple of 64*tp */
int mt_model_pad_vocab(int vocab, int tp);
/* Known presets: tiny, small, gpt2-124m (vocab padded for tp = 1). Returns 0,
 * or -1 for an unknown name. */
int mt_model_preset(const char *name, mt_model_shape *s);
/* Preset, then any non-zero model.* keys of cfg; vocab padded for
 * parallel.tp. Validates (heads divide width, positive sizes, tp divides the
 * width and the heads, and the sequence under parallel.sp; MoE: k <= E,
 * moe_every within the layers, parallel.ep dividing the experts and
 * parallel.etp the expert hidden size); the message names the keys. */
int mt_model_shape_from_config(const mt_config *cfg, mt_model_shape *s, mt_err *e);
/* parameter count (true, unpadded, tied embedding counted once) */
size_t mt_model_num_params(const mt_model_shape *s);

/* per-layer tensors; weights are (out, in) row-major */
typedef struct {
  float *ln1_w, *ln1_b;         /* (C) */
  float *qkv_w, *qkv_b;         /* (3C, C), (3C) */
  float *attn_proj_w, *attn_proj_b; /* (C, C), (C) */
  float *ln2_w, *ln2_b;         /* (C) */
  float *fc_w, *fc_b;           /* (4C, C), (4C); a MoE block: its shared experts' */
  float *fc_proj_w, *fc_proj_b; /* (C, 4C), (C); a MoE block: its shared experts' */
  /* a MoE block: the router and this rank's experts (E_l = E/ep of them,
   * F_l = moe_ffn/etp hidden units of each) */
  float *router_w;              /* (E, C) */
  float *e_fc_w, *e_fc_b;       /* (E_l, F_l, C), (E_l, F_l) */
  float *e_proj_w, *e_proj_b;   /* (E_l, C, F_l), (E_l, C) */
} mt_block_tensors;

/* a tensor this pipeline stage does not hold is NULL */
typedef struct {
  float *wte;  /* (Vp, C), also the LM head */
  float *wpe;  /* (T, C) */
  mt_block_tensors *blocks; /* n_layer */
  float *lnf_w, *lnf_b;     /* (C) */
} mt_gpt_tensors;

/* activations kept for backward, for one micro-batch of B x T (shapes in
 * rows x channels, see the top of this file) */
typedef struct {
  float *encoded;              /* (BTs,C) */
  float *ln1, *ln1_mean, *ln1_rstd; /* (L,BTs,C), (L,BTs) x2 */
  float *qkv;                  /* (L,BT,3Cl): local q|k|v */
  float *atty;                 /* (L,BT,Cl) */
  float *lse;                  /* (L,B,NHl,T): attention rows' log-sum-exp */
  float *att_qkv, *att_out;    /* Ulysses only: (L,BT,3Cl), (L,BT,Cl) in the head layout */
  float *attproj;              /* (L,BTs,C) */
  float *residual2;            /* (L,BTs,C) */
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch, *fch_gelu;       /* (L,BT,Fl) */
  float *fcproj;               /* (L,BTs,C) */
  float *residual3;            /* (L,BTs,C) */
  float *lnf, *lnf_mean, *lnf_rstd; /* (BTs,C), (BTs) x2 */
  float *logits;               /* (BT,Vl): probabilities after forward */
  float *losses;               /* (BT) */
  /* split backward only: the output gradients of each layer's four linears,
   * kept from the input-gradient pass for the weight-gradient pass */
  float *dy_qkv;               /* (L,BT,3Cl) */
  float *dy_attproj;           /* (L,BT,C) */
  float *dy_fc;                /* (L,BT,Fl) */
  float *dy_fcproj;            /* (L,BT,C) */
  /* MoE blocks, Lm of them in a set (slot m = the m-th MoE block of the
   * range), per local token (N = B x Ts, Ts = T/tp under tensor
   * parallelism, else T): router probabilities, log-sum-exp, choices and
   * their weights, send slots; the fraction of each sequence's slots per
   * expert; the routing record (mt_ep meta); the experts' inputs, hidden
   * pre-activations and activations (R = the dispatch's row bound, Fe =
   * moe_ffn/etp) and the outputs that came back (Ss = N k) */
  float *moe_probs;            /* (Lm,N,E) */
  float *moe_lse;              /* (Lm,N) */
  int *moe_top, *moe_slot;     /* (Lm,N,k) */
  float *moe_topw;             /* (Lm,N,k) */
  float *moe_frac;             /* (Lm,B,E) */
  int *moe_meta;               /* (Lm,mt_ep_meta_ints) */
  int *moe_perm, *moe_inv;     /* (Lm,R) */
  float *moe_xe;               /* (Lm,R,C) */
  float *moe_h, *moe_g;        /* (Lm,R,Fe) */
  float *moe_ys;               /* (Lm,Ss,C) */
} mt_gpt_acts;

#define MT_GPT_MAX_ACT_BUFFERS 48

/* How the model is split: the tensor-parallel group (NULL or of size 1: no
 * tensor parallelism) and sequence parallelism over it; and how activations
 * are kept: recompute (an activation set holds only each layer's input and
 * the range's output; backward recomputes a layer's activations in a
 * one-layer workspace just before its gradients, bitwise as stored ones),
 * split_backward (sets also hold the linears' output gradients, so a
 * backward can run as an input-gradient pass and a later weight-gradient
 * pass, as zero-bubble schedules do). */
typedef struct {
  mt_group *tp;
  int sp;
  int recompute, split_backward;
  /* pipeline stage (stage_of_layer NULL: none, every tensor held): this
   * rank's stage pp_rank of 0..pp_last holds only its tensors (see
   * mt_gpt_register_layout); the views of the others are NULL */
  const int *stage_of_layer;
  int pp_rank, pp_last;
  /* the parameters and gradients live with the caller (the dp/ZeRO engine),
   * who hands them over with mt_gpt_set_state_source before the first pass;
   * 0: the model allocates flat buffers of its own (m->params, m->grads) */
  int external_state;
  /* context parallelism: the cp group (NULL or size 1: none; for a plan a
   * group with only size and rank set) and mt_cp_mode */
  mt_group *cp;
  int cp_mode;
  /* MoE blocks: the folded mesh's expert-parallel and expert-tensor groups
   * (NULL or size 1: absent; a plan model reads only size and rank) */
  mt_group *ep, *etp;
} mt_gpt_parallel;

/* Where a rank sits, for registration: its tp rank of tp_size (sp:
 * sequence parallelism), and its pipeline stage pp_rank of 0..pp_last with
 * the stage of each of the n_layer blocks (stage_of_layer NULL: no pipeline,
 * every stage holds every tensor). */
typedef struct {
  int tp_size, tp_rank, sp;
  int n_layer;
  const int *stage_of_layer;
  int pp_last, pp_rank;
  int ep_size, ep_rank, etp_size, etp_rank; /* the folded mesh (0: 1 and 0) */
} mt_gpt_layout;

typedef struct mt_gpt {
  mt_model_shape shape;
  const mt_ops *ops;
  mt_registry reg;
  mt_state_source src;   /* where the parameters and gradients are, unit by unit */
  float *params, *grads; /* a model on its own (not external_state): flat, reg.numel_local
                            each, the tensors this stage holds; else NULL */
  mt_gpt_tensors p, g;   /* views, bound unit by unit as the source hands units over */
  float ***pview, ***gview; /* per registry tensor: the view it binds (looked up by name) */
  int unit_embed, unit_final; /* registry units of the embeddings and the final LN */
  int *unit_block;       /* per block */
  int *unit_experts;     /* per block: the unit of its experts (MoE blocks), else -1 */
  int *tok_in, *tok_tgt; /* the micro-batch's tokens in backend memory, (B,T) each */
  int max_B, T;          /* T: tokens of a sequence on this rank (seq_len / cp) */
  int cur_B; /* micro-batch of the last forward */
  mt_gpt_acts a, d;      /* d: scratch gradients of activations */
  int recompute, split_backward; /* see mt_gpt_parallel */
  mt_gpt_acts ws;        /* recompute: one layer's activations (slot 0), rebuilt per layer */
  size_t ws_bytes;
  mt_tp tp;              /* tensor-parallel communication */
  mt_cp cp;              /* attention over the sequence's chunks (cp = 1: all of it here) */
  /* this rank's share of the split dims, read from the registry */
  int C_local, NH_local, F_local; /* attention channels and heads, MLP hidden */
  int V_local, v_start, v_real;   /* vocab rows held, first global row, rows < vocab */
  int T_sp;              /* positions per sequence in the sp region (T/tp under sp, else T) */
  /* tp scratch: a gathered column-parallel input; a row-parallel output
   * before its reduce-scatter, or a gathered output gradient (BT,C) each
   * (sp only); an input gradient after its reduce-scatter (BTs,C) (sp only);
   * cross-entropy row maxima (BT) and sums | target logits (BT,2) doubles */
  float *full_in, *full_out, *dln_local, *rowmax;
  double *xent_stats;
  size_t act_bytes;      /* activation bytes allocated (or counted) at creation */
  size_t comm_bytes;     /* comm-buffer bytes of its tensor parallelism */
  int count_only;        /* mt_gpt_create_plan: nothing allocated */
  int n_act; /* every activation buffer, for freeing and accounting */
  void *act_ptr[MT_GPT_MAX_ACT_BUFFERS];
  size_t act_size[MT_GPT_MAX_ACT_BUFFERS];
  int *inputs, *targets;
  /* MoE (shape.moe_experts > 0) */
  int n_moe;             /* MoE blocks */
  int *mlp_local;        /* per block: its MLP's (or shared experts') hidden units here, 0: none */
  int F_slot;            /* the largest of mlp_local: the stride of MLP activations */
  int moe_window;        /* the most MoE blocks in a set of any n consecutive blocks (per n) */
  int *moe_window_of;    /* [n] for n = 0..n_layer */
  int ep_size, ep_rank, etp_size, etp_rank;
  int E_local, Fe_local; /* experts here, hidden units of each here */
  int Ts;                /* local tokens per sequence in a MoE block */
  int moe_slice;         /* tokens split over tp without sp: a MoE block slices its input */
  size_t moe_send, moe_recv, moe_rows; /* row bounds of the dispatch (micro-batch max_B) */
  int moe_meta_n;        /* ints of a routing record */
  mt_ep ep;              /* the dispatcher (not in a plan model) */
  float moe_aux_coef, moe_z_coef;
  /* one MoE block's scratch, reused block after block (see moe.c) */
  float *moe_logits, *moe_dtw, *moe_xloc, *moe_out, *moe_send_buf, *moe_recv_buf;
  float *moe_rows_buf, *moe_rows2_buf, *moe_hid_buf, *moe_hid2_buf, *moe_full, *moe_dxl;
  float *moe_seq_buf;    /* (B,E): per-sequence probability sums, or the load-balancing gradient */
  int *moe_send_tok, *moe_meta_host;
  /* routing statistics of training forwards since mt_gpt_moe_stats_reset
   * (per MoE block m: moe_tokens[m*E + e] slots routed to expert e,
   * moe_dropped[m], moe_aux[m] this rank's share of the load-balancing
   * loss x tokens, moe_z[m] of the z-loss x tokens) */
  int moe_stats_on;
  double *moe_tokens, *moe_dropped, *moe_aux, *moe_z;
} mt_gpt;

/* Called after the gradients of layer `layer` are final in this backward
 * pass (layers count down from n_layer-1; -1 means embeddings, the last). */
typedef void (*mt_grad_ready_fn)(void *ctx, int layer);

/* Registers the model's tensors in r with their placements on every axis
 * for the rank lay describes (sp marks the LayerNorm tensors
 * tp_partial_grad; layers give units and pipeline stages; init rules and
 * weight decay as attributes) and finalizes it: the layout any rank of any
 * mesh would hold, without a model. Returns 0, or -1 with msg filled. */
int mt_gpt_register_layout(mt_registry *r, const mt_model_shape *shape, const mt_gpt_layout *lay,
                           char *msg, size_t msg_len);
/* The same without pipeline stages. */
int mt_gpt_register(mt_registry *r, const mt_model_shape *shape, int tp_size, int tp_rank,
                    int sp, char *msg, size_t msg_len);
/* Registers the parameters, allocates params, grads and activations for
 * micro-batches of up to max_B sequences of shape->seq_len tokens, split as
 * par says (NULL: not split). Under context parallelism the model sees this
 * rank's seq_len / cp tokens of each sequence (m->cp.lay says which: take
 * them with mt_cp_take_tokens). */
int mt_gpt_create_parallel(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops,
                           int max_B, const mt_gpt_parallel *par, mt_err *e);
int mt_gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                  mt_err *e);
void mt_gpt_destroy(mt_gpt *m);
/* Hand the model its state (external_state models, before the first pass). */
void mt_gpt_set_state_source(mt_gpt *m, const mt_state_source *src);
/* A model that owns its buffers: deterministic, layout-free initialisation
 * by the registry's init rules (each element a pure function of (seed,
 * tensor name, global index)). */
void mt_gpt_init_params(mt_gpt *m, uint64_t seed);
/* Forward on inputs/targets (B,T) (T = m->T, this rank's tokens); returns
 * the mean loss over the B*T positions; keeps activations for backward. Under tensor parallelism every
 * rank of the tp group calls it with the same batch (collective). */
float mt_gpt_forward(mt_gpt *m, const int *inputs, const int *targets, int B);
/* Backward of (sum of position losses) * dloss into m->grads (accumulating).
 * hook may be NULL. Under sp the gradients of tp_partial_grad tensors are
 * this rank's part only: the hook (or the caller) sums them over tp with
 * mt_tp_reduce_partial_grads before the optimizer reads them. */
void mt_gpt_backward(mt_gpt *m, float dloss, mt_grad_ready_fn hook, void *ctx);
/* a model that owns its buffers: gradients to zero */
void mt_gpt_zero_grad(mt_gpt *m);
/* MoE: the coefficients of the load-balancing (Switch) and router z-losses
 * (train.moe_aux_coef, train.moe_z_coef; 0: off) */
void mt_gpt_set_moe_loss(mt_gpt *m, float aux_coef, float z_coef);
/* MoE: statistics on (training forwards) or off (evaluation), and zeroed */
void mt_gpt_moe_stats(mt_gpt *m, int on);
void mt_gpt_moe_stats_reset(mt_gpt *m);
/* first flat offset of layer l's unit (l = n_layer: the final LN; -1: embeddings) */
size_t mt_gpt_layer_offset(const mt_gpt *m, int layer);
/* Bytes this rank sends over the tp group for one forward + backward of a
 * micro-batch of B sequences (per_step = 0), or once per optimizer step
 * outside the micro-batches (per_step = 1: the sp partial-gradient sums), as
 * the layout implies; 0 without tensor parallelism. */
double mt_gpt_tp_bytes(const mt_gpt *m, int B, int per_step);

/* ------------------------------------------------------------------ */
/* pipeline stages: layer ranges over caller-owned activation sets      */

/* Floats of one activation set for n_layers layers of a micro-batch of B
 * sequences (with_head: the final LN, logits and losses too); bind carves
 * the set out of mem (64-byte aligned pieces). In a set, layer l0 + j of a
 * range [l0, l1) uses slot j; a->encoded is the range's input hidden state
 * (BTs,C) (the embedding's output, or what the previous stage sent) and
 * slot n_layers-1 of a->residual3 its output. */
size_t mt_gpt_acts_numel(const mt_gpt *m, int n_layers, int B, int with_head);
/* mt_gpt_create_parallel without the whole-model activation set m->a (a
 * pipeline stage binds one set per micro-batch in flight; mt_gpt_forward and
 * mt_gpt_backward are then unusable, the range functions below are). */
int mt_gpt_create_stage(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                        const mt_gpt_parallel *par, mt_err *e);
void mt_gpt_acts_bind(const mt_gpt *m, mt_gpt_acts *a, float *mem, int n_layers, int B,
                      int with_head);
/* mt_gpt_create_stage that allocates nothing (no MPI either: par->tp may be
 * a group with only size and rank set): m->act_bytes and m->comm_bytes say
 * what it would allocate, mt_gpt_acts_numel and mt_gpt_tp_bytes_range work;
 * nothing else does. Free with mt_gpt_destroy. For plans and memory checks. */
int mt_gpt_create_plan(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                       const mt_gpt_parallel *par, mt_err *e);
/* Bytes this rank sends over tp for one forward + backward of a micro-batch
 * of B sequences through n_layers blocks (embed, head: the range holds the
 * embedding, the head), as the layout implies; 0 without tensor
 * parallelism. */
double mt_gpt_tp_bytes_range(const mt_gpt *m, int B, int n_layers, int embed, int head);
/* Bytes this rank sends over cp for one forward + backward of a micro-batch
 * of B sequences through n_layers blocks (recompute: the forwards again);
 * 0 without context parallelism. */
double mt_gpt_cp_bytes_range(const mt_gpt *m, int B, int n_layers);
/* The same for the blocks [l0, l1) (MoE blocks move other bytes than dense
 * ones), and the bytes over the expert groups: [0] ep, [1] etp, as a
 * balanced routing implies (exact when every expert gets the same share of
 * the slots, e.g. k = E). */
double mt_gpt_tp_bytes_layers(const mt_gpt *m, int B, int l0, int l1, int embed, int head);
void mt_gpt_expert_bytes_layers(const mt_gpt *m, int B, int l0, int l1, double out[2]);
/* The range's output hidden state (BTs,C) in a. */
float *mt_gpt_range_output(const mt_gpt *m, const mt_gpt_acts *a, int n_layers, int B);
/* Forward of layers [l0, l1) for one micro-batch: embed (the range starts
 * the model) reads inputs (B,T) into a->encoded, otherwise a->encoded holds
 * the input; head (the range ends the model) adds the final LN, LM head and
 * loss and returns the sum of the B*T position losses (else 0). */
double mt_gpt_forward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed, int head,
                            const int *inputs, const int *targets, int B);
/* Backward of the same range, accumulating into m->grads: head: from the
 * loss (sum of position losses times dloss), else from dout (BTs,C), the
 * gradient of the range's output. Returns the gradient of the range's input
 * (BTs,C, in scratch valid until the next backward); with embed it has gone
 * into wte and wpe. */
const float *mt_gpt_backward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed, int head,
                                   const int *inputs, const int *targets, const float *dout,
                                   float dloss, int B);
/* The backward split in two (needs split_backward): the input pass as
 * mt_gpt_backward_range, with every LayerNorm and the embedding's gradients
 * but no linear's weight or bias gradient (their output gradients go into
 * a); the weight pass, any time later while a is held, adds dW = dY^T X and
 * db = sum dY of each linear (and the LM head's). Together they give the
 * gradients of mt_gpt_backward_range, bitwise. */
const float *mt_gpt_backward_range_input(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed,
                                         int head, const int *inputs, const int *targets,
                                         const float *dout, float dloss, int B);
void mt_gpt_backward_range_weight(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int head, int B);
/* Pipeline stages in a registry of mt_gpt_register, from each tensor's
 * layer attribute: layer l's tensors on stage_of_layer[l], the embeddings on
 * the first stage, the final LN on last_stage, and the tied LM head a copy
 * of wte on last_stage (pp_copy; its gradient is summed with the first
 * stage's, so the two stay equal); finalizes the layout of stage pp_rank,
 * which then holds only its own tensors. Returns 0, or -1 with msg filled. */
int mt_gpt_register_stages(mt_registry *r, const int *stage_of_layer, int last_stage,
                           int pp_rank, char *msg, size_t msg_len);

#endif
