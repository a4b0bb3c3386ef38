/* model: GPT-2 (learned positions, pre-LayerNorm, causal multi-head
 * attention, GELU MLP, tied input/output embedding, optionally
 * Mixture-of-Experts blocks) and Llama (RMSNorm, rotary positions, SwiGLU,
 * grouped-query attention, untied head: mt_model_shape's arch) over local
 * shards, as modules:
 *
 *   shape.c        shapes and presets, parameter counts
 *   register.c     the tensors in the registry, with their placements
 *   linear.c       column- and row-parallel linears and their tp
 *                  collectives (Megatron's f and g; sequence parallelism)
 *   attention.c    causal attention by blocks over this rank's heads; the
 *                  cp = 1 path, and (attention_cp.c) what context
 *                  parallelism adds: ring and Ulysses
 *   moe.c          the MoE block: router, dispatch to the experts' ranks
 *                  (moe_dispatch.c), grouped experts, combine; their
 *                  structs in moe.h
 *   acts.c         where a micro-batch's activations live
 *   block.c        a transformer block from the pieces above
 *   head.c         the embedding and the LM head with its cross-entropy
 *   gpt.c          the model: life cycle, views of the state, passes over
 *                  layer ranges
 *
 * Every tensor lives in flat buffers laid out by the registry; the structs
 * below only name the pieces. All compute goes through mt_ops, all
 * communication through comm (the model calls no MPI). The model does not
 * know who holds its state: a pass is a list of pieces (mt_gpt_pass), each
 * naming the registry units it reads, and whoever runs the pass (the
 * pipeline executor in lib/parallel, or mt_gpt_forward for a model that
 * owns its buffers) binds those units first (mt_gpt_bind_unit).
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
 * Context parallelism (cp) splits every sequence over the cp group; a rank
 * holds T/cp tokens of each sequence, its chunks one after the other, and
 * every layer but attention and the positional embedding works on them as
 * on any rows. Attention is computed by blocks (FlashAttention-2): per layer
 * only the output and the rows' log-sum-exp are kept, never a T x T matrix.
 *
 * Activation shapes below: T = m->T, the tokens of a sequence on this rank
 * (seq_len / cp); BT = B*T rows inside tensor-parallel blocks, BTs = B*T/tp
 * rows in the sequence-parallel region under sp (BTs = BT without); Cl =
 * C/tp, Fl = 4C/tp, NHl = NH/tp, Vl = Vp/tp (all = the full sizes at tp =
 * 1). */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include <stdint.h>
#include "comm/comm.h"
#include "core/core.h"
#include "kernels/kernels.h"
#include "registry/registry.h"

/* An element of the model's weights' compute copy or of its activations,
 * in the dtype of their role (mt_dtypes; bf16: mt_bf16, fp32: float): only
 * ever passed to the ops, or moved by mt_act_at (model_internal.h), never
 * indexed directly (the build warns on arithmetic with it). */
typedef void mt_act;


/* ------------------------------------------------------------------ */
/* shapes (shape.c)                                                    */

typedef struct {
  int n_layer, n_embd, n_head, seq_len;
  int vocab;        /* true vocabulary size */
  int vocab_padded; /* rows of the embedding as stored (multiple of 64*tp) */
  /* The block's family. gpt2: LayerNorm (eps 1e-5), learned positions,
   * GELU MLP. llama: RMSNorm (norm_eps), rotary positions (rope_theta;
   * rope_scaling llama3: Llama 3.1's frequency scaling with rope_factor,
   * rope_low_freq_factor, rope_high_freq_factor, rope_original_len), SwiGLU
   * MLP. Both: n_kv_head key/value heads (= n_head: multi-head; 1:
   * multi-query), ffn hidden units of the dense MLP, the LM head tied to
   * the token embedding or not, biases on the linears or not. */
  mt_arch arch; /* MT_ARCH_GPT2 or MT_ARCH_LLAMA (never auto here) */
  int n_kv_head, ffn;
  int tied, bias;
  float norm_eps;
  double rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor;
  int rope_original_len;
  mt_rope_scaling rope_scaling;
  /* Mixture-of-Experts (moe_experts = 0: a dense model): every moe_every-th
   * block (blocks l with (l+1) % moe_every == 0) replaces its MLP by a router
   * over moe_experts experts (MLPs of hidden size moe_ffn: GELU, or SwiGLU
   * under llama) of which each token uses moe_topk, plus moe_shared shared
   * experts every token uses (one MLP of hidden size moe_shared x moe_ffn);
   * moe_capacity: the capacity factor (0: dropless); moe_router: softmax or
   * sigmoid scores */
  int moe_experts, moe_topk, moe_every, moe_ffn, moe_shared;
  double moe_capacity;
  mt_moe_router moe_router;
  /* the residual stream: standard (each attention or MLP reads the whole
   * stream) or ladder (Ladder Residual: module k reads the stream without
   * module k-1's output, which joins it one module later) */
  mt_residual residual;
} mt_model_shape;

/* the architecture's pieces */
static inline int mt_model_llama(const mt_model_shape *s) { return s->arch == MT_ARCH_LLAMA; }
static inline int mt_model_ladder(const mt_model_shape *s) {
  return s->residual == MT_RESIDUAL_LADDER;
}
/* The cosine | sine table of rotary embedding for rows at positions pos[0..T)
 * with head size hs: cs (T, hs), row i = cos of its hs/2 angles, then their
 * sines (kernels.h's rope). Angle of pair d at position p: p x inv_freq[d],
 * inv_freq[d] = theta^(-2d/hs), rescaled as rope_scaling says (fp32, as
 * Hugging Face's Llama computes it). */
void mt_model_rope_table(const mt_model_shape *s, const int *pos, int T, float *cs);

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
/* The shape of a preset (model.preset's enum, core.h): tiny, small,
 * gpt2-124m (vocab padded for tp = 1), custom (no shape: the model.* keys
 * give it). Returns 0, or -1 for a value that is none of them. A name from
 * a command line: mt_config_enum_parse("model.preset", name). */
int mt_model_preset(mt_preset preset, mt_model_shape *s);
/* A shape as the model reads it: one built by hand with arch 0 (auto) is a
 * GPT-2 of its sizes (tied, with biases); n_kv_head 0 = n_head, ffn 0 = 4
 * n_embd. Every function here that takes a shape reads it through this. */
mt_model_shape mt_model_complete(const mt_model_shape *s);
/* What the architecture implies where the shape leaves it open (norm_eps,
 * rope_theta of 0), and its tying and biases (gpt2: tied, biased; llama:
 * neither). A preset's n_kv_head and ffn of 0 (GPT-2's) stay 0: multi-head
 * and 4 x n_embd, whatever width is set (mt_model_complete). */
void mt_model_arch_defaults(mt_model_shape *s);
/* Preset, then any non-zero model.* keys of cfg; vocab padded for
 * parallel.tp. Validates (heads divide width, positive sizes, tp divides the
 * width and the heads, and the sequence under parallel.sp; MoE: k <= E,
 * moe_every within the layers, parallel.ep dividing the experts and
 * parallel.etp the expert hidden size); the message names the keys. */
int mt_model_shape_from_config(const mt_config *cfg, mt_model_shape *s, mt_err *e);
/* What a stored configuration (a checkpoint's config.ini text) says of
 * the model beyond its shape, as the run that wrote it resolved it (its
 * preset's values included): the shape (rope_theta and rope_scaling with
 * its factors in it), the norm epsilon (in double: the value the run set,
 * else the shape's) and Hugging Face's token ids. Returns 0, or -1 with e
 * set (a text that does not parse, named `what`). */
typedef struct {
  mt_model_shape shape;
  double norm_eps;
  char bos_token_id[MT_CFG_STR_MAX], eos_token_id[MT_CFG_STR_MAX];
} mt_model_stored;
int mt_model_stored_of(const char *text, const char *what, mt_model_stored *out, mt_err *e);
/* parameter count (true, unpadded, tied embedding counted once) */
size_t mt_model_num_params(const mt_model_shape *s);

/* ------------------------------------------------------------------ */
/* registration (register.c)                                           */

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

/* Registers the model's tensors in r with their placements on every axis
 * for the rank lay describes (sp marks the LayerNorm tensors
 * tp_partial_grad; layers give units and pipeline stages; init rules and
 * weight decay as attributes) and finalizes it: the layout any rank of any
 * mesh would hold, without a model. Returns 0, or -1 with e set. */
int mt_gpt_register_layout(mt_registry *r, const mt_model_shape *shape, const mt_gpt_layout *lay,
                           mt_err *e);
/* The same without pipeline stages. */
int mt_gpt_register(mt_registry *r, const mt_model_shape *shape, int tp_size, int tp_rank,
                    int sp, mt_err *e);
/* Pipeline stages in a registry of mt_gpt_register, from each tensor's
 * layer attribute: layer l's tensors on stage_of_layer[l], the embeddings on
 * the first stage, the final LN on last_stage, and the tied LM head a copy
 * of wte on last_stage (pp_copy; its gradient is summed with the first
 * stage's, so the two stay equal); finalizes the layout of stage pp_rank,
 * which then holds only its own tensors. Returns 0, or -1 with e set. */
int mt_gpt_register_stages(mt_registry *r, const int *stage_of_layer, int last_stage,
                           int pp_rank, mt_err *e);

/* ------------------------------------------------------------------ */
/* tensor parallelism: the linears and their collectives (linear.c)    */

/* The tp group as the model's linears see it. Without tensor parallelism
 * (g NULL or of size 1) every collective below is a no-op or a copy.
 * Activations are (B,T,C) row-major; under sequence parallelism (sp) a
 * rank's slice of the sequence is (B,T/size,C), positions [rank*T/size,
 * (rank+1)*T/size). Buffers live where the backend (ops) keeps its
 * tensors. */
/* (its life cycle, collectives and linears: model_internal.h) */
typedef struct mt_tp {
  mt_group *g;
  const mt_ops *ops;
  /* the storage type of the activations and the weights' copy
   * (mt_gpt_parallel dt), and the bytes of an element (4 or 2); the
   * activations' collectives move that type (bf16: half the bytes, sums
   * rounded per addition) */
  mt_dtype dt;
  size_t es;
  int size, rank;
  int sp;
  mt_act *scratch;  /* the reduce-scatter's running sums, 2 slices (MT_MEM_COMM) */
  size_t scratch_n; /* elements */
  float *grad_buf;  /* packs the partial gradients of one layer (MT_MEM_COMM) */
  size_t grad_buf_n;
  /* the linears' shape and scratch (mt_tp_set_linear): T tokens of a
   * sequence and C channels of the (B,T,C) activations they gather and
   * reduce; under sp a gathered column-parallel input full_in, a
   * row-parallel output before its reduce-scatter (or a gathered output
   * gradient) full_out, (BT,C) each, and an input gradient after its
   * reduce-scatter dx_local (BTs,C) */
  int T, C;
  mt_act *full_in, *full_out, *dx_local;
  /* sums launched without blocking (the ladder residual's attention output
   * in forward, its MLP's input gradient in backward): a partial sum
   * (BT,C); under sp that packed rank by rank (BT,C), the reduce-scattered
   * input gradient (BTs,C), each rank's count (size) */
  mt_act *async_full, *async_pack, *async_local;
  int *async_counts;
} mt_tp;

/* Sum over the group, in one all-reduce, the gradients of every tensor in
 * the flat range [begin, end) that the registry marks tp_partial_grad. Once
 * per reduction of those gradients over dp, before it. buf holds flat
 * elements of type gt from buf_begin on (the whole flat buffer:
 * buf_begin = 0); bf16 gradients are widened, summed over the group in fp32
 * and each sum rounded once. */
void mt_tp_reduce_partial_grads_at(const mt_tp *tp, const mt_registry *reg, void *buf,
                                   mt_dtype gt, size_t buf_begin, size_t begin, size_t end);
void mt_tp_reduce_partial_grads(const mt_tp *tp, const mt_registry *reg, float *grads,
                                size_t begin, size_t end);

/* ------------------------------------------------------------------ */
/* attention (attention.c; context parallelism: attention_cp.c)        */

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
/* (mt_cp_mode and mt_cp_mode_name, parallel.cp_mode's enum: core.h) */

#define MT_CP_MAX_CHUNKS 64
typedef struct {
  int size, rank;
  mt_cp_mode mode;
  int T;               /* global sequence length */
  int T_local;         /* tokens of each sequence on this rank */
  int n_chunks;        /* 1 (cp = 1, ulysses), 2 (ring), k (ulysses with k token slices) */
  int chunk_len;
  int chunk_pos[MT_CP_MAX_CHUNKS]; /* global position of each chunk's first token */
} mt_cp_layout;

/* The layout of rank `rank` of `size` (the caller checked that T splits:
 * T % (2 size) == 0 for ring, T % size == 0 for ulysses). */
void mt_cp_layout_make(mt_cp_layout *l, int size, int rank, mt_cp_mode mode, int T);
/* Token slices (k <= MT_CP_MAX_CHUNKS) under Ulysses: each slice of T / k
 * positions cut into size contiguous chunks, this rank holding its chunk of
 * every slice (k chunks of T / (k size), slice after slice); cp = 1 or k = 1:
 * unchanged */
void mt_cp_layout_slice(mt_cp_layout *l, int k);
/* seq (T tokens of one sequence) -> this rank's local tokens (T_local) */
void mt_cp_take_tokens(const mt_cp_layout *l, const int *seq, int *local);
/* 1 when context parallelism splits the sequences (size > 1) and no
 * document of doc (B sequences of T positions, doc[p] the first position of
 * p's document, as mt_doc_starts) crosses a boundary of l's chunks (ring:
 * T / (2 size) tokens, Ulysses: T / size): doc[p] / chunk_len == p /
 * chunk_len everywhere. Then attention needs nothing of another rank. */
int mt_cp_documents_local(const mt_cp_layout *l, const int *doc, int B);

/* What attention keeps for backward, per layer and micro-batch (pieces of
 * the model's activation sets): lse (B, NH, T_local) floats, the rows' LSE
 * (under ulysses in the head layout (B, NH/N, T), as many floats); ulysses
 * only, the head layout's q|k|v (B, T, 3C/N) and output (B, T, C/N) in the
 * activations' dtype, as many elements as the local qkv and output. */
typedef struct {
  float *lse;
  mt_act *qkv_h, *out_h;
} mt_cp_saved;

/* Causal self-attention of one tensor-parallel rank's heads, computed by
 * blocks (the op table's attn_forward/merge/backward). At cp = 1 this rank
 * holds whole sequences and attends locally; under context parallelism it
 * holds lay's chunks and exchanges K/V (ring) or heads (Ulysses) over the
 * cp group. C = its attention channels, NH its heads (hs = C/NH). */
typedef struct {
  mt_cp_layout lay;
  mt_group *g;          /* NULL at cp = 1 */
  const mt_ops *ops;
  mt_dtype dt;           /* the activations' storage type */
  int max_B, C, NH, hs;
  /* grouped-query attention: query head h reads key/value head kv_of(h) =
   * (kv_h0 + h) / kv_group - kv_h0 / kv_group of the kv_heads this rank
   * uses (kv_group 1: every query head its own, kv_heads = NH) */
  int kv_group, kv_h0, kv_heads;
  /* ring: K|V (max_B, T_local, 2 Ckv) buffers with the key/value heads
   * compact (Ckv = kv_heads hs), two for K/V in flight and three for dK/dV
   * (this step's part, the one arriving, the one leaving); under gqa also
   * the received K|V spread over the query heads and its gradient's part
   * (max_B, T_local, 2C) each; MT_MEM_COMM */
  size_t kv_numel, kvs_numel; /* elements (of the activations' dtype) */
  mt_act *kv[2], *dkv[3], *kvs, *dkvs;
  /* the model's scratch (activations), set with mt_attention_set_scratch:
   * ring: part (max_B, T_local, C) and part_lse (max_B, NH, T_local), a
   * block's partial result before its merge; ulysses: dout_h (max_B,
   * T_local, C) and dqkv_h (max_B, T_local, 3C), gradients in the head
   * layout; all but part_lse in the activations' dtype */
  mt_act *part;
  float *part_lse;
  mt_act *dout_h, *dqkv_h;
  /* documents (mt_attention_set_documents; NULL: none): where the document
   * of each of this rank's rows begins (max_B, T_local), and under Ulysses
   * of each row of the whole sequence (max_B, T), in backend memory */
  const int *doc_lo, *doc_lo_seq;
  /* the share of the causal pairs of this rank's rows, and of whole
   * sequences (Ulysses), that the documents leave visible: what the
   * virtual device prices (mt_attn_block's density); 1 without */
  double density, density_seq;
  /* this pass's documents all stay inside the layout's chunks (no document
   * crosses a chunk boundary; mt_cp_documents_local): no query sees another
   * rank's keys, so attention exchanges nothing over the cp group (ring:
   * its diagonal step alone; Ulysses: this rank's rows with all its heads,
   * as at cp = 1). Set before every pass from its documents, the same on
   * every rank of the group; 0 without documents. */
  int local;
  /* token slices (parallel.pp_token_slices; slices 1: none; cp = 1): a pass
   * is slice `slice` of `slices` (lay.T_local / slices tokens each) of its
   * sequences. kv_cache (max_B, lay.T_local, 2C): the K|V of the
   * micro-batch's slices so far for the layer in progress, a forward writing
   * its own at its rows; dkv_cache likewise their gradients, which every
   * later slice's backward adds to (zeroed by the last slice's, the first to
   * run). Both in the activations' dtype; bound per layer (mt_gpt_set_slice). */
  int slices, slice;
  mt_act *kv_cache, *dkv_cache;
} mt_attention;
/* (its life cycle, forward and backward: model_internal.h) */


/* expert parallelism's dispatcher (mt_ep) and the MoE block (mt_moe) */
#include "model/moe.h"

/* ------------------------------------------------------------------ */
/* tensors and activations                                             */

/* per-layer tensors; weights are (out, in) row-major. In the parameter
 * views (m->p) the dense tensors are the weights' compute copy (mt_act); in
 * the gradient views (m->g) fp32; the MoE tensors likewise (the router's
 * compute copy is widened to fp32 for its matmul under bf16, moe.c). */
typedef struct {
  mt_act *ln1_w, *ln1_b;         /* (C); the biases NULL under RMSNorm or without biases */
  mt_act *qkv_w, *qkv_b;         /* (3C, C), (3C); llama: q|k|v (C + 2 Ckv, C) */
  mt_act *attn_proj_w, *attn_proj_b; /* (C, C), (C) */
  mt_act *ln2_w, *ln2_b;         /* (C) */
  mt_act *fc_w, *fc_b;           /* (F, C), (F); llama: gate|up (2F, C); a MoE block: its
                                    shared experts' */
  mt_act *fc_proj_w, *fc_proj_b; /* (C, 4C), (C); a MoE block: its shared experts' */
  /* a MoE block: the router and this rank's experts (E_l = E/ep of them,
   * F_l = moe_ffn/etp hidden units of each) */
  mt_act *router_w;              /* (E, C) */
  mt_act *e_fc_w, *e_fc_b;       /* (E_l, F_l, C), (E_l, F_l) */
  mt_act *e_proj_w, *e_proj_b;   /* (E_l, C, F_l), (E_l, C) */
} mt_block_tensors;

/* a tensor this pipeline stage does not hold is NULL */
typedef struct {
  mt_act *wte;  /* (Vp, C), also the LM head when tied */
  mt_act *wpe;  /* (T, C); NULL with rotary positions */
  mt_block_tensors *blocks; /* n_layer */
  mt_act *lnf_w, *lnf_b;     /* (C); lnf_b NULL under RMSNorm */
  mt_act *lm_head;           /* (Vp, C) untied; NULL when tied (wte is the head) */
} mt_gpt_tensors;

/* activations kept for backward, for one micro-batch of B x T (shapes in
 * rows x channels, see the top of this file); mt_act: the activations'
 * dtype (mt_dtypes acts), float: fp32 always (statistics, losses) */
typedef struct {
  mt_act *encoded;             /* (BTs,C) */
  mt_act *ln1;                 /* (L,BTs,C) */
  float *ln1_mean, *ln1_rstd;  /* (L,BTs) x2 */
  mt_act *qkv;                 /* (L,BT,3Cl): local q|k|v */
  mt_act *atty;                /* (L,BT,Cl) */
  float *lse;                  /* (L,B,NHl,T): attention rows' log-sum-exp */
  mt_act *att_qkv, *att_out;   /* Ulysses only: (L,BT,3Cl), (L,BT,Cl) in the head layout */
  mt_act *attproj;             /* (L,BTs,C) */
  mt_act *residual2;           /* (L,BTs,C) */
  mt_act *ln2;
  float *ln2_mean, *ln2_rstd;
  mt_act *fch, *fch_gelu;      /* (L,BT,Fl) */
  mt_act *fcproj;              /* (L,BTs,C) */
  mt_act *residual3;           /* (L,BTs,C) */
  mt_act *lnf;                 /* (BTs,C) */
  float *lnf_mean, *lnf_rstd;  /* (BTs) x2 */
  mt_act *logits;              /* (BT,Vl): probabilities after forward */
  float *losses;               /* (BT) */
  /* split backward only: the output gradients of each layer's four linears,
   * kept from the input-gradient pass for the weight-gradient pass */
  mt_act *dy_qkv;              /* (L,BT,3Cl) */
  mt_act *dy_attproj;          /* (L,BT,C) */
  mt_act *dy_fc;               /* (L,BT,Fl) */
  mt_act *dy_fcproj;           /* (L,BT,C) */
  /* MoE blocks, Lm of them in a set (slot m = the m-th MoE block of the
   * range), per local token (N = B x Ts, Ts = T/tp under tensor
   * parallelism, else T): router probabilities, log-sum-exp, choices and
   * their weights, send slots; the fraction of each sequence's slots per
   * expert; the routing record (mt_ep meta) and the outputs that came back
   * (Ss = N k). What grows with the routing's rows (the permutations, the
   * experts' inputs, hidden pre-activations and activations, and the split
   * backward's gradients) is held apart, per set and slot, in growable
   * buffers (acts.c: mt_moe_rows_at) */
  float *moe_probs;            /* (Lm,N,E) */
  float *moe_lse;              /* (Lm,N) */
  int *moe_top, *moe_slot;     /* (Lm,N,k) */
  float *moe_topw;             /* (Lm,N,k) */
  float *moe_frac;             /* (Lm,B,E) */
  int *moe_meta;               /* (Lm,mt_ep_meta_ints) */
  mt_act *moe_ys;              /* (Lm,Ss,C) */
} mt_gpt_acts;

#define MT_GPT_MAX_ACT_BUFFERS 48

/* ------------------------------------------------------------------ */
/* the model (gpt.c)                                                   */

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
   * who binds each unit before a pass uses it (mt_gpt_bind_unit); 0: the
   * model allocates flat buffers of its own (m->params, m->grads) */
  int external_state;
  /* context parallelism: the cp group (NULL or size 1: none; for a plan a
   * group with only size and rank set) and mt_cp_mode */
  mt_group *cp;
  int cp_mode;
  /* MoE blocks: the folded mesh's expert-parallel and expert-tensor groups
   * (NULL or size 1: absent; a plan model reads only size and rank), and
   * seq, the ranks holding pieces of the same sequences (tp x cp, rank
   * tp_rank + tp x cp_rank; NULL: tp), over which the router's
   * per-sequence counts go */
  mt_group *ep, *etp, *seq;
  /* least-loaded expert parallelism (parallel.ep_balance = least-loaded):
   * the load a rank keeps, x the ep group's mean (mt_ep_set_balance); 0: off */
  double ep_balance_alpha;
  int ep_balance_min_rows; /* a piece of fewer rows is not moved (0: any) */
  /* parallel.moe_buffer_factor: the rows a rank's MoE buffers start at, x a
   * balanced routing's (they grow where a routing brings more); 0: sized
   * for the worst routing */
  double moe_buffer_factor;
  /* the storage type of the weights' compute copy and the activations
   * (mt_dtypes weights = acts): MT_DT_F32 (0, the default) or MT_DT_BF16 */
  mt_dtype dt;
  /* documents: every pass's batch says where documents begin (mt_pass_args
   * doc); attention stays inside a document, positions restart at each */
  int documents;
  /* token slices (parallel.pp_token_slices; 0 or 1: none): a pass sees
   * T / slices tokens of each sequence, slice after slice (mt_gpt_set_slice) */
  int slices;
} mt_gpt_parallel;

typedef struct mt_gpt {
  mt_model_shape shape;
  const mt_ops *ops;
  /* the storage type of the weights' copy and the activations
   * (mt_gpt_parallel dt); es the bytes of an element of either (4 or 2) */
  mt_dtype dt;
  size_t es;
  mt_registry reg;
  /* this rank's share of the split dims, read from the registry */
  struct {
    int T;                          /* tokens of a sequence in a pass on this rank (seq_len /
                                       cp; with token slices seq_len / slices) */
    int T_sp;                       /* positions per sequence in the sp region (T/tp under sp) */
    int C_local, NH_local, F_local; /* attention channels and heads, the widest MLP here */
    /* key/value heads here (split over tp, or all of them when !kv_split);
     * the q|k|v projection's width here (Cl + 2 NKV_local hs); gqa: fewer
     * key/value heads than query heads, spread over them before attention;
     * mlp_in: the MLP's input projection's outputs per hidden unit (2:
     * SwiGLU's gate and up) */
    int NKV_local, kv_split, qkv_local, gqa, mlp_in;
    int V_local, v_start, v_real;   /* vocab rows held, first global row, rows < vocab */
    int *mlp_local; /* per block: its MLP's (or shared experts') hidden units here, 0: none */
  };
  /* the state: views named per tensor, bound unit by unit */
  mt_gpt_tensors p, g;
  mt_act ***pview, ***gview; /* per registry tensor: the view it binds (looked up by name) */
  int unit_embed, unit_final; /* registry units of the embeddings and the final LN */
  int *unit_block;       /* per block */
  int *unit_experts;     /* per block: the unit of its experts (MoE blocks), else -1 */
  float *params, *grads; /* a model on its own (not external_state): flat, reg.numel_local
                            each, the tensors this stage holds; else NULL */
  /* the modules */
  mt_tp tp;              /* the linears' tensor-parallel communication */
  mt_attention attn;     /* attention over this rank's heads (and the sequence's chunks) */
  mt_moe moe;            /* the MoE blocks' routed experts */
  /* activations */
  int max_B, cur_B;      /* largest micro-batch; the micro-batch of the last mt_gpt_forward */
  int recompute, split_backward; /* see mt_gpt_parallel */
  /* 1 (the default): in a forward, a block's last residual sum is done by
   * the next block of the range (or the head) in one pass with its first
   * norm (the same bits); 0: each block sums its own (tests compare) */
  int fuse_norms;
  /* the embeddings and the head in different chunks of this rank (zb-v's
   * V: rank 0 holds the first and the last virtual stage): the tied
   * embeddings' gradients complete in the embedding's pass only, and stay
   * in use between the two (set by the pipeline executor) */
  int embed_head_apart;
  mt_gpt_acts a;         /* the whole model's set (mt_gpt_create_parallel only) */
  mt_gpt_acts d;         /* scratch gradients of activations, one layer's */
  mt_gpt_acts ws;        /* recompute: one layer's activations (slot 0), rebuilt per layer */
  size_t ws_bytes;
  int *moe_window_of;    /* [n]: the most MoE blocks among any n consecutive blocks */
  /* the head's cross-entropy: row maxima (BT) and sums | target logits (BT,2) doubles */
  float *rowmax;
  double *xent_stats;
  /* llama: rotary embedding's cos | sin of each position of a sequence
   * (seq_len, hs), fp32; grouped-query attention's q|k|v before the spread
   * (BT, qkv_local) */
  float *rope_cs;
  mt_act *qkv_c;
  int *tok_in, *tok_tgt; /* the micro-batch's tokens in backend memory, (B,T) each */
  /* positions.c: the position of each of this rank's tokens (max_B, T) in
   * backend memory (its place in the sequence, or with documents in its
   * document); documents: where each token's document begins (max_B, T),
   * under Ulysses also for the whole sequence (max_B, seq_len) (else
   * NULL), and host scratch to stage them */
  int documents;
  int *tok_pos, *doc_lo, *doc_lo_seq;
  /* token slices: every slice's positions (slices, max_B, T), tok_pos the
   * pass's; the micro-batch's K|V cache of the stage's layers from slice_l0
   * (mt_gpt_set_slice) */
  int *tok_pos_all;
  void *slice_cache;
  int slice_l0;
  int *pos_host;
  int *inputs, *targets; /* mt_gpt_forward's tokens, kept for mt_gpt_backward (host) */
  int *doc_host;         /* documents: mt_gpt_forward_docs's doc, kept likewise */
  size_t act_bytes;      /* activation bytes allocated at creation */
  int n_act;             /* every activation buffer, for freeing */
  void *act_ptr[MT_GPT_MAX_ACT_BUFFERS];
  size_t act_size[MT_GPT_MAX_ACT_BUFFERS];
} mt_gpt;

/* Registers the parameters, allocates params, grads and activations for
 * micro-batches of up to max_B sequences of shape->seq_len tokens, split as
 * par says (NULL: not split). Under context parallelism the model sees this
 * rank's seq_len / cp tokens of each sequence (m->attn.lay says which: take
 * them with mt_cp_take_tokens). */
int mt_gpt_create_parallel(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops,
                           int max_B, const mt_gpt_parallel *par, mt_err *e);
int mt_gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                  mt_err *e);
/* mt_gpt_create_parallel without the whole-model activation set m->a (a
 * pipeline stage binds one set per micro-batch in flight; mt_gpt_forward and
 * mt_gpt_backward are then unusable, the passes are). */
int mt_gpt_create_stage(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                        const mt_gpt_parallel *par, mt_err *e);
void mt_gpt_destroy(mt_gpt *m);
/* Where a rank split as par says sits, for registration (par NULL: one
 * rank): what mt_gpt_register_layout needs to place its tensors. */
mt_gpt_layout mt_gpt_layout_of(const mt_model_shape *shape, const mt_gpt_parallel *par);
/* A model that owns its buffers: deterministic, layout-free initialisation
 * by the registry's init rules (each element a pure function of (seed,
 * tensor name, global index)). */
void mt_gpt_init_params(mt_gpt *m, uint64_t seed);
/* a model that owns its buffers: gradients to zero */
void mt_gpt_zero_grad(mt_gpt *m);
/* MoE: the coefficients of the load-balancing (Switch) and router z-losses
 * (train.moe_aux_coef, train.moe_z_coef; 0: off) */
void mt_gpt_set_moe_loss(mt_gpt *m, float aux_coef, float z_coef);
/* MoE load balancing (train.moe_balance): the Switch loss (its coefficient
 * from mt_gpt_set_moe_loss), aux-loss-free (a per-expert bias added to the
 * routing scores for the top-k choice only, DeepSeek-V3), or none */
/* (mt_moe_balance, its enum: core.h) */
/* bias_init: what expert 0's routing bias starts from in every MoE block (a
 * forced skew; a checkpoint's bias replaces it) */
void mt_gpt_set_moe_balance(mt_gpt *m, int balance, float bias_rate, float bias_init);
/* Aux-loss-free balancing, after an optimizer step: tokens (n_blocks, E),
 * the slots the step routed to each expert over the whole global batch
 * (every rank's statistics summed: the same on every rank and for every
 * layout of the same batch). Each bias moves by bias_rate towards equal
 * load: b[m][e] += rate * sign(mean_e' tokens[m][e'] - tokens[m][e]). Not
 * collective; nothing when the model balances otherwise. */
void mt_gpt_moe_bias_update(mt_gpt *m, const double *tokens);
/* the bias (n_blocks, E) on the host (NULL: a dense model), and set from a
 * checkpoint's */
const float *mt_gpt_moe_bias(const mt_gpt *m);
void mt_gpt_moe_set_bias(mt_gpt *m, const float *bias);
/* MoE: statistics on (training forwards) or off (evaluation), and zeroed */
void mt_gpt_moe_stats(mt_gpt *m, int on);
void mt_gpt_moe_stats_reset(mt_gpt *m);
/* first flat offset of layer l's unit (l = n_layer: the final LN; -1: embeddings) */
size_t mt_gpt_layer_offset(const mt_gpt *m, int layer);

/* ------------------------------------------------------------------ */
/* passes: a layer range's forward or backward as a list of pieces     */

/* A pass over the blocks [l0, l1) of one micro-batch: embed (the range
 * starts the model: the embedding first), head (it ends the model: the
 * final LN, LM head and loss last). The backward of a split-backward model
 * (split_backward) is an input pass (MT_PASS_BACKWARD with input_only) and
 * a later weight pass. */
typedef enum { MT_PASS_FORWARD = 0, MT_PASS_BACKWARD = 1, MT_PASS_WEIGHT = 2 } mt_pass;

typedef enum {
  MT_PIECE_EMBED, /* the embedding of the tokens into a->encoded, or its gradients */
  MT_PIECE_BLOCK, /* block `layer` */
  MT_PIECE_HEAD,  /* final LN, LM head and loss; backward: from the loss */
  MT_PIECE_DOUT,  /* backward without the head: the range's output gradient, from dout */
  MT_PIECE_END    /* nothing to compute: the last use of units (the tied LM head's copy) */
} mt_piece_kind;

/* One piece of a pass, and the registry units it touches (-1: none): use,
 * the units whose parameters it reads (and in a backward, whose gradients
 * it adds to), to be bound (mt_gpt_bind_params, mt_gpt_bind_grads) before
 * it runs; done, the units whose gradients of this micro-batch are complete
 * once it has run (a full backward only); release, the units the pass reads
 * no more (the embeddings stay in use from the forward to the backward). */
typedef struct {
  mt_piece_kind kind;
  int layer;
  int use[2], done[2], release[2];
} mt_piece;

/* The pieces of a pass, in order, into out (room for l1 - l0 + 3); returns
 * their number. */
int mt_gpt_pass(const mt_gpt *m, mt_pass pass, int l0, int l1, int embed, int head,
                mt_piece *out);

/* What a pass works on: the micro-batch's activation set a (holding blocks
 * [l0, l1)), its B sequences' tokens (B,T) on the host (inputs for the
 * embedding, targets for the head), with documents where each position's
 * document begins (doc, (B, seq_len): the whole sequences; else NULL; staged
 * by mt_gpt_stage_documents before the pass), and for a backward the gradient dout
 * (BTs,C) of the range's output (without the head) and dloss, the scale of
 * the summed position losses; input_only: the input pass of a split
 * backward. */
typedef struct {
  mt_gpt_acts *a;
  int l0, l1, B;
  const int *inputs, *targets;
  const int *doc;
  const mt_act *dout;
  float dloss;
  int input_only;
  /* the pass runs the head after the range's blocks (mt_gpt_pass's head):
   * a forward's last block leaves its output's residual sum to the final
   * norm (0: the blocks' output is whole when they end) */
  int head;
} mt_pass_args;

/* Documents (packed sequences whose documents do not see each other):
 * doc[p] = the first position of the document that holds position p of the
 * whole sequence of tokens seq (T): a document begins at each token equal
 * to eot (which is its first token) and at position 0. */
void mt_doc_starts(const int *seq, int T, int eot, int *doc);
/* Before a pass over a micro-batch of B sequences: this rank's positions
 * (restarting at each document) and the document starts attention reads,
 * into backend memory, from doc (mt_pass_args). A model made without
 * documents ignores it. */
void mt_gpt_stage_documents(mt_gpt *m, const int *doc, int B);

/* Token slices (m->attn.slices > 1): before a pass over slice `slice` of a
 * micro-batch, its positions and the micro-batch's K|V cache for the
 * stage's layers from l0 on (mt_gpt_slice_cache_bytes for n_layers of
 * them; kept from the micro-batch's first slice's forward to its backward,
 * in backend memory). */
void mt_gpt_set_slice(mt_gpt *m, int slice, void *cache, int l0);
size_t mt_gpt_slice_cache_bytes(const mt_gpt *m, int n_layers);

/* Point unit u's parameter (gradient) views at mem, the memory of the
 * unit's first element (NULL: unbound). */
void mt_gpt_bind_params(mt_gpt *m, int u, mt_act *mem);
void mt_gpt_bind_grads(mt_gpt *m, int u, float *mem);
/* Runs one piece of a pass (its units bound). A forward's HEAD returns the
 * sum of the B*T position losses; 0 otherwise. DOUT reads the stage's
 * message (mt_gpt_stage_msg_numel elements). After a backward the
 * gradient of the range's input is mt_gpt_input_grad's (BTs,C), in scratch
 * valid until the next backward; with the embedding it has gone into wte
 * and wpe. */
double mt_gpt_run_piece(mt_gpt *m, mt_pass pass, const mt_piece *p, const mt_pass_args *x);
const mt_act *mt_gpt_input_grad(const mt_gpt *m);

/* Called after the gradients of layer `layer` are final in this backward
 * pass (layers count down from n_layer-1; -1 means embeddings, the last). */
typedef void (*mt_grad_ready_fn)(void *ctx, int layer);

/* A model that owns its buffers, every unit bound: the passes run whole.
 * Forward of layers [l0, l1) for one micro-batch into a (see mt_pass_args);
 * returns the sum of the B*T position losses with the head (else 0; an
 * ignored target's, MT_TARGET_IGNORE, is 0). */
double mt_gpt_forward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed, int head,
                            const int *inputs, const int *targets, int B);
/* Backward of the same range, accumulating into m->grads: head: from the
 * loss (sum of position losses times dloss), else from dout (BTs,C), the
 * gradient of the range's output. Returns the gradient of the range's input
 * (BTs,C, in scratch valid until the next backward); with embed it has gone
 * into wte and wpe. */
const mt_act *mt_gpt_backward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed, int head,
                                    const int *inputs, const int *targets, const mt_act *dout,
                                    float dloss, int B);
/* Forward on inputs/targets (B,T) (T = m->T, this rank's tokens); returns
 * the mean loss over the B*T positions, those whose target is
 * MT_TARGET_IGNORE left out (0 when every one is); keeps activations for
 * backward.
 * Under tensor parallelism every rank of the tp group calls it with the
 * same batch (collective). */
float mt_gpt_forward(mt_gpt *m, const int *inputs, const int *targets, int B);
/* The same with documents: doc (B, seq_len) as mt_pass_args's (kept for
 * mt_gpt_backward) */
float mt_gpt_forward_docs(mt_gpt *m, const int *inputs, const int *targets, const int *doc,
                          int B);
/* Backward of (sum of position losses) * dloss into m->grads (accumulating).
 * hook may be NULL. Under sp the gradients of tp_partial_grad tensors are
 * this rank's part only: the hook (or the caller) sums them over tp with
 * mt_tp_reduce_partial_grads before the optimizer reads them. */
void mt_gpt_backward(mt_gpt *m, float dloss, mt_grad_ready_fn hook, void *ctx);

/* ------------------------------------------------------------------ */
/* activation sets (acts.c)                                            */

/* Floats (4-byte units: the set's bytes / 4) of one activation set for
 * n_layers layers of a micro-batch of B sequences (with_head: the final
 * LN, logits and losses too); bind carves the set out of mem (64-byte
 * aligned pieces). In a set, layer l0 + j of a
 * range [l0, l1) uses slot j; a->encoded is the range's input hidden state
 * (BTs,C) (the embedding's output, or what the previous stage sent) and
 * slot n_layers-1 of a->residual3 its output. */
size_t mt_gpt_acts_numel(const mt_gpt *m, int n_layers, int B, int with_head);
/* Bytes of one MoE block's activations held apart from a set, what grows
 * with its routing's rows (the permutations, the experts' inputs, hidden
 * units and activations), at the model's current row bound; 0: dense */
size_t mt_gpt_moe_rows_bytes(const mt_gpt *m);
void mt_gpt_acts_bind(const mt_gpt *m, mt_gpt_acts *a, void *mem, int n_layers, int B,
                      int with_head);
/* The head's part of a set alone (the final LN, logits and losses of B
 * sequences): its floats, and its pieces bound out of mem into a (a's
 * other pointers kept). A pipeline stage holds them apart from its sets,
 * for the micro-batches whose head pass is in flight only. */
size_t mt_gpt_head_acts_numel(const mt_gpt *m, int B);
void mt_gpt_head_acts_bind(const mt_gpt *m, mt_gpt_acts *a, void *mem, int B);
/* The range's output hidden state (BTs,C) in a. */
mt_act *mt_gpt_range_output(const mt_gpt *m, const mt_gpt_acts *a, int n_layers, int B);
/* What a pipeline stage passes on: elements of its message for B rows
 * (BTs,C; the ladder residual: twice that, the stream, then the last
 * block's pending MLP output, which the next range reads after its input
 * in a->encoded), and the messages written to dst (in the activations'
 * dtype): the forward's, of the range [l0, l1) in a, and the backward's
 * input gradient (the ladder: then the gradient of that pending output). */
size_t mt_gpt_stage_msg_numel(const mt_gpt *m, int B);
void mt_gpt_stage_pack_output(const mt_gpt *m, const mt_gpt_acts *a, int l0, int l1, int B,
                              mt_act *dst);
void mt_gpt_stage_pack_input_grad(const mt_gpt *m, int B, mt_act *dst);

#endif
