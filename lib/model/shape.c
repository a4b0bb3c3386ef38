/* Model shapes: presets, the model.* keys, what they need of the mesh, and
 * parameter counts. */
#include "model/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int mt_model_pad_vocab(int vocab, int tp) {
  int m = 64 * (tp > 1 ? tp : 1);
  return (vocab + m - 1) / m * m;
}

/* a Llama 3 shape (rope_theta 500000, the 128256-token vocabulary, 8 key/value heads) */
static mt_model_shape llama3(int n_layer, int n_embd, int n_head, int ffn) {
  return (mt_model_shape){.n_layer = n_layer, .n_embd = n_embd, .n_head = n_head,
                          .seq_len = 8192, .vocab = 128256, .arch = MT_ARCH_LLAMA,
                          .n_kv_head = 8, .ffn = ffn, .rope_theta = 500000.0};
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
  case MT_PRESET_TINY_LLAMA:
    *s = (mt_model_shape){.n_layer = 2, .n_embd = 32, .n_head = 4, .seq_len = 32, .vocab = 256,
                          .arch = MT_ARCH_LLAMA, .n_kv_head = 2, .ffn = 96};
    break;
  case MT_PRESET_LLAMA_124M: /* GPT-2 124M's width, depth and vocabulary, Llama blocks */
    *s = (mt_model_shape){.n_layer = 12, .n_embd = 768, .n_head = 12, .seq_len = 1024,
                          .vocab = 50257, .arch = MT_ARCH_LLAMA, .n_kv_head = 4, .ffn = 2048};
    break;
  case MT_PRESET_LLAMA3_8B: *s = llama3(32, 4096, 32, 14336); break;
  case MT_PRESET_LLAMA3_70B: *s = llama3(80, 8192, 64, 28672); break;
  case MT_PRESET_LLAMA3_405B: *s = llama3(126, 16384, 128, 53248); break;
  case MT_PRESET_MIXTRAL_8X7B: /* its experts: config.c's MoE presets */
    *s = (mt_model_shape){.n_layer = 32, .n_embd = 4096, .n_head = 32, .seq_len = 32768,
                          .vocab = 32000, .arch = MT_ARCH_LLAMA, .n_kv_head = 8, .ffn = 14336,
                          .rope_theta = 1e6};
    break;
  case MT_PRESET_DEEPSEEK_V3_LIKE:
    /* DeepSeek-V3's width, depth, heads, vocabulary and experts, with
     * multi-head attention standing in for its latent attention (MLA) and
     * every block a MoE block (V3's first three are dense) */
    *s = (mt_model_shape){.n_layer = 61, .n_embd = 7168, .n_head = 128, .seq_len = 4096,
                          .vocab = 129280, .arch = MT_ARCH_LLAMA, .n_kv_head = 128,
                          .ffn = 18432, .norm_eps = 1e-6};
    break;
  default: return -1;
  }
  if (s->arch == MT_ARCH_AUTO) s->arch = MT_ARCH_GPT2;
  mt_model_arch_defaults(s);
  s->vocab_padded = mt_model_pad_vocab(s->vocab, 1);
  return 0;
}

mt_model_shape mt_model_complete(const mt_model_shape *in) {
  mt_model_shape s = *in;
  if (s.arch == MT_ARCH_AUTO) {
    s.arch = MT_ARCH_GPT2;
    mt_model_arch_defaults(&s);
  }
  /* 0: multi-head, and GPT-2's 4 x the width */
  if (s.n_kv_head <= 0) s.n_kv_head = s.n_head;
  if (s.ffn <= 0) s.ffn = 4 * s.n_embd;
  return s;
}

void mt_model_arch_defaults(mt_model_shape *s) {
  const int llama = mt_model_llama(s);
  if (llama && s->norm_eps <= 0.0f) s->norm_eps = 1e-5f;
  if (llama && s->rope_theta <= 0.0) s->rope_theta = 10000.0;
  s->tied = !llama;
  s->bias = !llama;
}

void mt_model_rope_table(const mt_model_shape *s, const int *pos, int T, float *cs) {
  const int hs = s->n_embd / s->n_head, half = hs / 2;
  float *inv = mt_malloc((size_t)(half > 0 ? half : 1) * sizeof(float));
  for (int d = 0; d < half; d++) {
    inv[d] = 1.0f / powf((float)s->rope_theta, (float)(2 * d) / (float)hs);
    if (s->rope_scaling != MT_ROPE_SCALING_LLAMA3) continue;
    /* Llama 3.1: long wavelengths turn rope_factor times slower, short ones
     * as they were, those between blend smoothly */
    const float orig = (float)s->rope_original_len, factor = (float)s->rope_factor;
    const float lo = (float)s->rope_low_freq_factor, hi = (float)s->rope_high_freq_factor;
    const float wavelen = 6.283185307179586f / inv[d];
    if (wavelen > orig / lo) {
      inv[d] /= factor;
    } else if (!(wavelen < orig / hi)) {
      float smooth = (orig / wavelen - lo) / (hi - lo);
      inv[d] = (1.0f - smooth) * inv[d] / factor + smooth * inv[d];
    }
  }
  for (int i = 0; i < T; i++)
    for (int d = 0; d < half; d++) {
      float angle = (float)pos[i] * inv[d];
      cs[(size_t)i * hs + d] = cosf(angle);
      cs[(size_t)i * hs + half + d] = sinf(angle);
    }
  free(inv);
}

int mt_model_is_moe(const mt_model_shape *s, int l) {
  return s->moe_experts > 0 && s->moe_every > 0 && l >= 0 && l < s->n_layer &&
         (l + 1) % s->moe_every == 0;
}

int mt_model_moe_before(const mt_model_shape *s, int l) {
  /* the blocks i < l with (i + 1) % moe_every == 0 (mt_model_is_moe) */
  if (s->moe_experts <= 0 || s->moe_every <= 0 || l <= 0) return 0;
  return (l < s->n_layer ? l : s->n_layer) / s->moe_every;
}

/* the MoE keys of cfg into s, and what they need of the mesh */
static int moe_shape_from_config(const mt_config *cfg, mt_model_shape *s, mt_err *e) {
  s->moe_experts = cfg->moe_experts;
  if (cfg->moe_experts == 0) {
    s->moe_topk = s->moe_every = s->moe_ffn = s->moe_shared = 0;
    s->moe_capacity = 0.0;
    s->moe_router = MT_ROUTER_SOFTMAX;
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
  s->moe_router = cfg->moe_router;
  if (s->moe_router == MT_ROUTER_SIGMOID && cfg->moe_z_coef > 0.0)
    mt_err_set(e, "train.moe_z_coef = %g with model.moe_router = sigmoid: the router z-loss is "
                  "a softmax router's (set it to 0)", cfg->moe_z_coef);
  else if (s->moe_topk > s->moe_experts)
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

/* The architecture keys of cfg over the preset's, and what they need of
 * each other (the width's checks follow in the caller). A preset that
 * leaves n_kv_head or ffn at 0 (GPT-2's) follows the heads and the width
 * set: multi-head, 4 x n_embd. */
static int arch_from_config(const mt_config *cfg, mt_model_shape *s, mt_err *e) {
  if (cfg->arch != MT_ARCH_AUTO && cfg->arch != s->arch) {
    /* another family on the preset's size: that family's defaults */
    s->arch = cfg->arch;
    s->n_kv_head = s->ffn = 0;
    s->norm_eps = 0.0f;
    s->rope_theta = 0.0;
  }
  if (cfg->n_kv_head > 0) s->n_kv_head = cfg->n_kv_head;
  if (cfg->ffn_size > 0) s->ffn = cfg->ffn_size;
  if (cfg->norm_eps > 0.0) s->norm_eps = (float)cfg->norm_eps;
  if (cfg->rope_theta > 0.0) s->rope_theta = cfg->rope_theta;
  mt_model_arch_defaults(s);
  /* left open (GPT-2's presets, another family): multi-head, 4 x the width */
  if (s->n_kv_head <= 0) s->n_kv_head = s->n_head;
  if (s->ffn <= 0) s->ffn = 4 * s->n_embd;
  if (cfg->tie_embeddings != MT_TRI_AUTO) s->tied = cfg->tie_embeddings == MT_TRI_TRUE;
  if (cfg->bias != MT_TRI_AUTO) s->bias = cfg->bias == MT_TRI_TRUE;
  s->rope_scaling = cfg->rope_scaling;
  s->rope_factor = cfg->rope_factor;
  s->rope_low_freq_factor = cfg->rope_low_freq_factor;
  s->rope_high_freq_factor = cfg->rope_high_freq_factor;
  s->rope_original_len = cfg->rope_original_len;
  const char *arch = mt_arch_name(s->arch);
  if (!mt_model_llama(s)) {
    /* GPT-2's positions are learned, its LayerNorm's epsilon 1e-5, its qkv one fused tensor */
    const char *rotary = cfg->rope_theta > 0.0 ? "model.rope_theta"
                         : cfg->rope_scaling != MT_ROPE_SCALING_NONE ? "model.rope_scaling"
                         : cfg->norm_eps > 0.0 ? "model.norm_eps" : NULL;
    if (rotary) {
      mt_err_set(e, "%s is set, but model.arch = %s has learned positions and LayerNorm "
                    "(rotary positions and RMSNorm are model.arch = llama's)", rotary, arch);
      return -1;
    }
    if (s->n_kv_head != s->n_head) {
      mt_err_set(e, "model.n_kv_head = %d with model.arch = %s: grouped-query attention is "
                    "model.arch = llama's (gpt2 has n_head = %d key/value heads)",
                 s->n_kv_head, arch, s->n_head);
      return -1;
    }
  }
  if (s->n_head > 0 && s->n_head % s->n_kv_head != 0) {
    mt_err_set(e, "model.n_kv_head = %d does not divide model.n_head = %d (each key/value head "
                  "serves n_head / n_kv_head query heads)", s->n_kv_head, s->n_head);
    return -1;
  }
  if (mt_model_llama(s) && s->n_head > 0 && (s->n_embd / s->n_head) % 2 != 0) {
    mt_err_set(e, "rotary positions turn channel pairs: the head size model.n_embd / "
                  "model.n_head = %d must be even", s->n_embd / s->n_head);
    return -1;
  }
  if (s->rope_scaling == MT_ROPE_SCALING_LLAMA3 &&
      !(s->rope_low_freq_factor < s->rope_high_freq_factor)) {
    mt_err_set(e, "model.rope_low_freq_factor = %g must be below model.rope_high_freq_factor "
                  "= %g", s->rope_low_freq_factor, s->rope_high_freq_factor);
    return -1;
  }
  return 0;
}

int mt_model_shape_from_config(const mt_config *cfg, mt_model_shape *s, mt_err *e) {
  if (mt_model_preset(cfg->model_preset, s) != 0) {
    mt_err_set(e, "model.preset: unknown preset '%s' (see meshtrain --help)",
               mt_preset_name(cfg->model_preset));
    return -1;
  }
  if (cfg->n_layer > 0) s->n_layer = cfg->n_layer;
  if (cfg->n_embd > 0) s->n_embd = cfg->n_embd;
  if (cfg->n_head > 0) s->n_head = cfg->n_head;
  if (cfg->seq_len > 0) s->seq_len = cfg->seq_len;
  if (cfg->vocab_size > 0) s->vocab = cfg->vocab_size;
  s->vocab_padded = mt_model_pad_vocab(s->vocab, cfg->tp);
  MT_TRY(e, arch_from_config(cfg, s, e));
  s->residual = cfg->residual;
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

/* the width of the key and value projections (each) */
static size_t kv_width(const mt_model_shape *s) {
  return (size_t)s->n_kv_head * (size_t)(s->n_embd / s->n_head);
}

/* a norm's parameters (LayerNorm: weight and bias; RMSNorm: weight) */
static size_t norm_params(const mt_model_shape *s) {
  return (size_t)s->n_embd * (mt_model_llama(s) ? 1 : 2);
}

/* an MLP of F hidden units: GELU (fc, proj) or SwiGLU (gate, up, proj) */
static size_t mlp_params(const mt_model_shape *s, size_t F) {
  size_t C = (size_t)s->n_embd, in = mt_model_llama(s) ? 2 : 1;
  return in * F * C + C * F + (s->bias ? in * F + C : 0);
}

/* parameters of a block: every expert (active = 0), or those a token uses */
static size_t block_params(const mt_model_shape *s, int l, int active) {
  size_t C = (size_t)s->n_embd, Ckv = kv_width(s);
  size_t attn = 2 * norm_params(s) + (C + 2 * Ckv) * C + C * C + (s->bias ? C + 2 * Ckv + C : 0);
  if (!mt_model_is_moe(s, l)) return attn + mlp_params(s, (size_t)s->ffn);
  size_t F = (size_t)s->moe_ffn, Fs = (size_t)s->moe_shared * F;
  /* an expert: GELU (fc, proj, biases) or SwiGLU (gate|up, proj, biases if bias) */
  size_t in = mt_model_llama(s) ? 2 : 1, eb = !mt_model_llama(s) || s->bias;
  size_t expert = in * F * C + C * F + (eb ? in * F + C : 0);
  size_t used = active ? (size_t)s->moe_topk : (size_t)s->moe_experts;
  return attn + (size_t)s->moe_experts * C + used * expert + (Fs ? mlp_params(s, Fs) : 0);
}

/* the embeddings (the head once more when untied), positions, final norm */
static size_t outer_params(const mt_model_shape *s) {
  size_t C = (size_t)s->n_embd, n = (size_t)s->vocab * C * (s->tied ? 1 : 2);
  return n + (mt_model_llama(s) ? 0 : (size_t)s->seq_len * C) + norm_params(s);
}

size_t mt_model_num_params(const mt_model_shape *in) {
  const mt_model_shape full = mt_model_complete(in), *s = &full;
  size_t n = outer_params(s);
  for (int l = 0; l < s->n_layer; l++) n += block_params(s, l, 0);
  return n;
}

double mt_model_active_matmul_weights(const mt_model_shape *in) {
  const mt_model_shape full = mt_model_complete(in), *s = &full;
  double C = s->n_embd, n = (double)s->vocab * C, mlp_in = mt_model_llama(s) ? 2.0 : 1.0;
  for (int l = 0; l < s->n_layer; l++) {
    n += 2.0 * C * C + 2.0 * (double)kv_width(s) * C; /* q, k, v, proj */
    if (!mt_model_is_moe(s, l)) n += (mlp_in + 1.0) * C * s->ffn;
    else
      n += (double)s->moe_experts * C +
           (mlp_in + 1.0) * C * (double)s->moe_ffn * ((double)s->moe_topk + (double)s->moe_shared);
  }
  return n;
}

size_t mt_model_active_params(const mt_model_shape *in) {
  const mt_model_shape full = mt_model_complete(in), *s = &full;
  size_t n = outer_params(s);
  for (int l = 0; l < s->n_layer; l++) n += block_params(s, l, 1);
  return n;
}

int mt_model_stored_of(const char *text, const char *what, mt_model_stored *out, mt_err *e) {
  mt_config cfg;
  memset(out, 0, sizeof *out);
  MT_TRY(e, mt_config_load_text(&cfg, text, what, e));
  MT_TRY(e, mt_model_shape_from_config(&cfg, &out->shape, e));
  /* the value the run set, not its float in the shape; else the preset's
   * or the architecture's default */
  out->norm_eps = cfg.norm_eps > 0.0 ? cfg.norm_eps : (double)out->shape.norm_eps;
  snprintf(out->bos_token_id, sizeof out->bos_token_id, "%s", cfg.bos_token_id);
  snprintf(out->eos_token_id, sizeof out->eos_token_id, "%s", cfg.eos_token_id);
  return 0;
}
