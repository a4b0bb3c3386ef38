/* Model shapes: presets, the model.* keys, what they need of the mesh, and
 * parameter counts. */
#include "model/model.h"

#include <string.h>

int mt_model_pad_vocab(int vocab, int tp) {
  int m = 64 * (tp > 1 ? tp : 1);
  return (vocab + m - 1) / m * m;
}

int mt_model_preset(mt_preset preset, mt_model_shape *s) {
  memset(s, 0, sizeof *s);
  switch (preset) {
  case MT_PRESET_TINY:
    *s = (mt_model_shape){.n_layer = 2, .n_embd = 32, .n_head = 4, .seq_len = 32, .vocab = 256};
    break;
  case MT_PRESET_SMALL:
    *s = (mt_model_shape){.n_layer = 6, .n_embd = 384, .n_head = 6, .seq_len = 256, .vocab = 256};
    break;
  case MT_PRESET_GPT2_124M:
    *s = (mt_model_shape){.n_layer = 12, .n_embd = 768, .n_head = 12, .seq_len = 1024,
                          .vocab = 50257};
    break;
  case MT_PRESET_CUSTOM:
    *s = (mt_model_shape){.vocab = 256}; /* the shape comes from the model.* keys */
    break;
  default: return -1;
  }
  s->vocab_padded = mt_model_pad_vocab(s->vocab, 1);
  return 0;
}

int mt_model_is_moe(const mt_model_shape *s, int l) {
  return s->moe_experts > 0 && s->moe_every > 0 && l >= 0 && l < s->n_layer &&
         (l + 1) % s->moe_every == 0;
}

int mt_model_moe_before(const mt_model_shape *s, int l) {
  int n = 0;
  for (int i = 0; i < l && i < s->n_layer; i++) n += mt_model_is_moe(s, i);
  return n;
}

/* the MoE keys of cfg into s, and what they need of the mesh */
static int moe_shape_from_config(const mt_config *cfg, mt_model_shape *s, mt_err *e) {
  s->moe_experts = cfg->moe_experts;
  if (cfg->moe_experts == 0) {
    s->moe_topk = s->moe_every = s->moe_ffn = s->moe_shared = 0;
    s->moe_capacity = 0.0;
    if (cfg->ep > 1 || cfg->etp > 1) {
      mt_err_set(e, "parallel.ep = %d, parallel.etp = %d: expert parallelism needs a MoE model "
                    "(model.moe_experts > 0)", cfg->ep, cfg->etp);
      return -1;
    }
    return 0;
  }
  s->moe_topk = cfg->moe_topk;
  s->moe_every = cfg->moe_every;
  s->moe_ffn = cfg->moe_ffn > 0 ? cfg->moe_ffn : 4 * s->n_embd;
  s->moe_shared = cfg->moe_shared;
  s->moe_capacity = cfg->moe_capacity;
  if (s->moe_topk > s->moe_experts)
    mt_err_set(e, "model.moe_topk = %d is more than the model.moe_experts = %d experts",
               s->moe_topk, s->moe_experts);
  else if (s->moe_every > s->n_layer)
    mt_err_set(e, "model.moe_every = %d is beyond the model.n_layer = %d blocks (no block would "
                  "be a MoE block)", s->moe_every, s->n_layer);
  else if (s->moe_experts % cfg->ep != 0)
    mt_err_set(e, "parallel.ep = %d does not divide model.moe_experts = %d", cfg->ep,
               s->moe_experts);
  else if (s->moe_ffn % cfg->etp != 0)
    mt_err_set(e, "parallel.etp = %d does not divide the expert hidden size model.moe_ffn = %d",
               cfg->etp, s->moe_ffn);
  else if (cfg->tp > 1 && (s->moe_shared * s->moe_ffn) % cfg->tp != 0)
    mt_err_set(e, "parallel.tp = %d does not divide the shared experts' hidden size "
                  "model.moe_shared x model.moe_ffn = %d", cfg->tp, s->moe_shared * s->moe_ffn);
  else if (cfg->tp > 1 && s->seq_len % cfg->tp != 0)
    mt_err_set(e, "MoE blocks route each tp rank's 1/tp of a sequence: parallel.tp = %d does not "
                  "divide model.seq_len = %d", cfg->tp, s->seq_len);
  return e->failed ? -1 : 0;
}

int mt_model_shape_from_config(const mt_config *cfg, mt_model_shape *s, mt_err *e) {
  if (mt_model_preset(cfg->model_preset, s) != 0) {
    mt_err_set(e, "model.preset: unknown preset '%s' (tiny|small|gpt2-124m|custom)",
               mt_preset_name(cfg->model_preset));
    return -1;
  }
  if (cfg->n_layer > 0) s->n_layer = cfg->n_layer;
  if (cfg->n_embd > 0) s->n_embd = cfg->n_embd;
  if (cfg->n_head > 0) s->n_head = cfg->n_head;
  if (cfg->seq_len > 0) s->seq_len = cfg->seq_len;
  if (cfg->vocab_size > 0) s->vocab = cfg->vocab_size;
  s->vocab_padded = mt_model_pad_vocab(s->vocab, cfg->tp);
  const char *missing = s->n_layer <= 0 ? "model.n_layer" : s->n_embd <= 0 ? "model.n_embd"
                        : s->n_head <= 0 ? "model.n_head" : s->seq_len <= 0 ? "model.seq_len"
                        : NULL;
  if (missing) {
    mt_err_set(e, "%s must be set (> 0) for model.preset = %s", missing,
               mt_preset_name(cfg->model_preset));
    return -1;
  }
  if (s->n_embd % s->n_head != 0) {
    mt_err_set(e, "model.n_head = %d does not divide model.n_embd = %d", s->n_head, s->n_embd);
    return -1;
  }
  /* tensor parallelism splits the width and whole heads; sp also the sequence */
  if (cfg->tp > 1 && s->n_embd % cfg->tp != 0) {
    mt_err_set(e, "parallel.tp = %d does not divide the hidden size model.n_embd = %d", cfg->tp,
               s->n_embd);
    return -1;
  }
  if (cfg->tp > 1 && s->n_head % cfg->tp != 0) {
    mt_err_set(e, "parallel.tp = %d does not divide the attention heads model.n_head = %d",
               cfg->tp, s->n_head);
    return -1;
  }
  if (cfg->tp > 1 && cfg->sp && s->seq_len % cfg->tp != 0) {
    mt_err_set(e, "parallel.sp = true: parallel.tp = %d does not divide model.seq_len = %d",
               cfg->tp, s->seq_len);
    return -1;
  }
  /* no vocabulary limit here: the token file's format decides which ids it
   * can hold (mt_dataset_validate refuses uint16 files for vocab > 65536) */
  return moe_shape_from_config(cfg, s, e);
}

/* parameters of a block: every expert (active = 0), or those a token uses */
static size_t block_params(const mt_model_shape *s, int l, int active) {
  size_t C = (size_t)s->n_embd;
  size_t attn = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C; /* ln1, attention, ln2 */
  if (!mt_model_is_moe(s, l)) return attn + 4 * C * C + 4 * C + 4 * C * C + C;
  size_t F = (size_t)s->moe_ffn, Fs = (size_t)s->moe_shared * F;
  size_t expert = F * C + F + C * F + C;
  size_t used = active ? (size_t)s->moe_topk : (size_t)s->moe_experts;
  return attn + (size_t)s->moe_experts * C + used * expert +
         (Fs ? Fs * C + Fs + C * Fs + C : 0);
}

size_t mt_model_num_params(const mt_model_shape *s) {
  size_t C = (size_t)s->n_embd, n = (size_t)s->vocab * C + (size_t)s->seq_len * C + 2 * C;
  for (int l = 0; l < s->n_layer; l++) n += block_params(s, l, 0);
  return n;
}

double mt_model_active_matmul_weights(const mt_model_shape *s) {
  double C = s->n_embd, n = (double)s->vocab * C;
  for (int l = 0; l < s->n_layer; l++) {
    n += 4.0 * C * C; /* qkv, proj */
    if (!mt_model_is_moe(s, l)) n += 8.0 * C * C;
    else
      n += (double)s->moe_experts * C +
           2.0 * C * (double)s->moe_ffn * ((double)s->moe_topk + (double)s->moe_shared);
  }
  return n;
}

size_t mt_model_active_params(const mt_model_shape *s) {
  size_t C = (size_t)s->n_embd, n = (size_t)s->vocab * C + (size_t)s->seq_len * C + 2 * C;
  for (int l = 0; l < s->n_layer; l++) n += block_params(s, l, 1);
  return n;
}
