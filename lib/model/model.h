/* model: GPT-2 (learned positions, pre-LayerNorm, causal multi-head
 * attention, GELU MLP, tied input/output embedding) over local shards.
 * Every tensor lives in one flat allocation laid out by the registry; the
 * structs below only name the pieces. All compute goes through mt_ops.
 * Never calls MPI (gradient hooks let the parallel module overlap). */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include <stdint.h>
#include "core/core.h"
#include "kernels/kernels.h"
#include "registry/registry.h"

typedef struct {
  int n_layer, n_embd, n_head, seq_len;
  int vocab;        /* true vocabulary size */
  int vocab_padded; /* rows of the embedding as stored (multiple of 64*tp) */
} mt_model_shape;

/* Known presets: tiny, small, gpt2-124m. Returns 0, or -1 for an unknown name. */
int mt_model_preset(const char *name, mt_model_shape *s);
/* Preset, then any non-zero model.* keys of cfg. Validates (heads divide
 * width, positive sizes); message names the key. */
int mt_model_shape_from_config(const mt_config *cfg, mt_model_shape *s, mt_err *e);
/* parameter count (true, unpadded, tied embedding counted once) */
size_t mt_model_num_params(const mt_model_shape *s);

/* per-layer tensors; weights are (out, in) row-major */
typedef struct {
  float *ln1_w, *ln1_b;         /* (C) */
  float *qkv_w, *qkv_b;         /* (3C, C), (3C) */
  float *attn_proj_w, *attn_proj_b; /* (C, C), (C) */
  float *ln2_w, *ln2_b;         /* (C) */
  float *fc_w, *fc_b;           /* (4C, C), (4C) */
  float *fc_proj_w, *fc_proj_b; /* (C, 4C), (C) */
} mt_block_tensors;

typedef struct {
  float *wte;  /* (Vp, C), also the LM head */
  float *wpe;  /* (T, C) */
  mt_block_tensors *blocks; /* n_layer */
  float *lnf_w, *lnf_b;     /* (C) */
} mt_gpt_tensors;

/* activations kept for backward, for one micro-batch of B x T */
typedef struct {
  float *encoded;              /* (B,T,C) */
  float *ln1, *ln1_mean, *ln1_rstd; /* (L,B,T,C), (L,B,T) x2 */
  float *qkv;                  /* (L,B,T,3C) */
  float *atty;                 /* (L,B,T,C) */
  float *att;                  /* (L,B,NH,T,T) */
  float *attproj;              /* (L,B,T,C) */
  float *residual2;            /* (L,B,T,C) */
  float *ln2, *ln2_mean, *ln2_rstd;
  float *fch, *fch_gelu;       /* (L,B,T,4C) */
  float *fcproj;               /* (L,B,T,C) */
  float *residual3;            /* (L,B,T,C) */
  float *lnf, *lnf_mean, *lnf_rstd; /* (B,T,C), (B,T) x2 */
  float *logits;               /* (B,T,Vp): probabilities after forward */
  float *losses;               /* (B,T) */
} mt_gpt_acts;

#define MT_GPT_MAX_ACT_BUFFERS 40

typedef struct mt_gpt {
  mt_model_shape shape;
  const mt_ops *ops;
  mt_registry reg;
  float *params, *grads; /* flat, reg.numel_local each */
  mt_gpt_tensors p, g;
  int max_B, T;
  int cur_B; /* micro-batch of the last forward */
  mt_gpt_acts a, d;      /* d: scratch gradients of activations */
  float *datt;           /* scratch (B,NH,T,T) */
  size_t act_bytes;
  int n_act; /* every activation buffer, for freeing and accounting */
  void *act_ptr[MT_GPT_MAX_ACT_BUFFERS];
  size_t act_size[MT_GPT_MAX_ACT_BUFFERS];
  int *inputs, *targets;
} mt_gpt;

/* Called after the gradients of layer `layer` are final in this backward
 * pass (layers count down from n_layer-1; -1 means embeddings, the last). */
typedef void (*mt_grad_ready_fn)(void *ctx, int layer);

/* Registers the parameters, allocates params, grads and activations for
 * micro-batches of up to max_B sequences of shape->seq_len tokens. */
int mt_gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                  mt_err *e);
void mt_gpt_destroy(mt_gpt *m);
/* Deterministic, layout-free initialisation: each element is a pure function
 * of (seed, tensor name, global index); N(0, 0.02), residual projections
 * scaled by 1/sqrt(2L), LayerNorm weight 1, biases 0. */
void mt_gpt_init_params(mt_gpt *m, uint64_t seed);
/* Forward on inputs/targets (B,T); returns the mean loss over the B*T
 * positions; keeps activations for backward. */
float mt_gpt_forward(mt_gpt *m, const int *inputs, const int *targets, int B);
/* Backward of (sum of position losses) * dloss into m->grads (accumulating).
 * hook may be NULL. */
void mt_gpt_backward(mt_gpt *m, float dloss, mt_grad_ready_fn hook, void *ctx);
void mt_gpt_zero_grad(mt_gpt *m);
/* first flat offset of layer l's tensors (l = n_layer: the final LN; -1: embeddings) */
size_t mt_gpt_layer_offset(const mt_gpt *m, int layer);

#endif
