/* GPT-2 forward and backward over the registry's flat buffers. */
#include "model/model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* shapes and presets                                                  */

int mt_model_pad_vocab(int vocab, int tp) {
  int m = 64 * (tp > 1 ? tp : 1);
  return (vocab + m - 1) / m * m;
}

int mt_model_preset(const char *name, mt_model_shape *s) {
  memset(s, 0, sizeof *s);
  if (strcmp(name, "tiny") == 0) {
    *s = (mt_model_shape){2, 32, 4, 32, 256, 0, 0, 0, 0, 0, 0, 0.0};
  } else if (strcmp(name, "small") == 0) {
    *s = (mt_model_shape){6, 384, 6, 256, 256, 0, 0, 0, 0, 0, 0, 0.0};
  } else if (strcmp(name, "gpt2-124m") == 0) {
    *s = (mt_model_shape){12, 768, 12, 1024, 50257, 0, 0, 0, 0, 0, 0, 0.0};
  } else if (strcmp(name, "custom") == 0) {
    *s = (mt_model_shape){0, 0, 0, 0, 256, 0, 0, 0, 0, 0, 0, 0.0};
  } else {
    return -1;
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
               cfg->model_preset);
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
    mt_err_set(e, "%s must be set (> 0) for model.preset = %s", missing, cfg->model_preset);
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

/* ------------------------------------------------------------------ */
/* registration                                                        */

/* What every tensor of the model shares at registration: the layer (its
 * unit) and the pipeline stages that hold it. */
typedef struct {
  mt_registry *r;
  const mt_gpt_layout *lay;
  int layer;
} reg_ctx;

static int stage_of(const reg_ctx *c, int layer) {
  const mt_gpt_layout *lay = c->lay;
  if (!lay || !lay->stage_of_layer) return -1; /* every stage */
  if (layer == MT_LAYER_EMBED) return 0;
  if (layer >= lay->n_layer) return lay->pp_last;
  return lay->stage_of_layer[layer];
}

static int reg_tensor(const reg_ctx *c, const char *name, int ndim, const int64_t *shape,
                      const int64_t *padded, mt_placement tp, mt_init_rule init, float std,
                      int decay, int partial_grad) {
  mt_tensor_spec s = {name, ndim, shape, padded, tp, mt_replicated(), c->layer,
                      stage_of(c, c->layer), -1, init, std, decay, NULL, partial_grad,
                      mt_replicated(), MT_GROUP_DP};
  return mt_registry_add_spec(c->r, &s);
}

static int reg2(const reg_ctx *c, const char *name, int64_t a, int64_t b, mt_placement p,
                float std) {
  int64_t shape[2] = {a, b};
  return reg_tensor(c, name, 2, shape, NULL, p, MT_INIT_NORMAL, std, 1, 0);
}

static void reg_bias(const reg_ctx *c, const char *name, int64_t a, mt_placement p) {
  reg_tensor(c, name, 1, &a, NULL, p, MT_INIT_ZEROS, 0.0f, 0, 0);
}

/* an expert tensor of shape (E, a[, b]): its experts split over ep (dim 0),
 * etp_dim split over etp (-1: replicated over etp), reduced over edp */
static void reg_expert(const reg_ctx *c, const char *name, int ndim, const int64_t *shape,
                       int etp_dim, mt_init_rule init, float std, int decay) {
  mt_tensor_spec s = {name, ndim, shape, NULL, mt_replicated(), mt_sharded(0, 1), c->layer,
                      stage_of(c, c->layer), -1, init, std, decay, NULL, 0,
                      etp_dim < 0 ? mt_replicated() : mt_sharded(etp_dim, 1), MT_GROUP_EDP};
  mt_registry_add_spec(c->r, &s);
}

/* a LayerNorm weight (ones) or bias (zeros): replicated over tp */
static void reg_norm(const reg_ctx *c, const char *name, int64_t C, mt_init_rule init,
                     int partial_grad) {
  reg_tensor(c, name, 1, &C, NULL, mt_replicated(), init, 0.0f, 0, partial_grad);
}

/* Registration order is forward order, one layer's tensors together, so the
 * gradients of a layer form one contiguous range (a unit) that is final as
 * soon as the layer's backward is done (bucketed data-parallel reduction and
 * ZeRO rely on it). Placements on tp (Megatron): column-parallel weights and
 * their biases split dim 0 (QKV as 3 fused blocks, so each rank holds its
 * heads of q, k and v), row-parallel weights dim 1 with replicated biases,
 * the embedding dim 0 (vocabulary), LayerNorms and positions replicated.
 * Init (GPT-2): weights N(0, 0.02), the residual projections N(0,
 * 0.02/sqrt(2L)), LayerNorm weights 1, biases 0. The pipeline: layer l's
 * tensors on stage_of_layer[l], the embeddings on the first stage, the
 * final LN on the last, and the tied LM head a copy of wte on the last. */
int mt_gpt_register_layout(mt_registry *r, const mt_model_shape *s, const mt_gpt_layout *lay,
                           char *msg, size_t msg_len) {
  int64_t C = s->n_embd;
  /* Under sp the LayerNorms see T/tp positions on each rank: partial
   * gradients. The row-parallel biases and wpe take theirs from a gathered
   * (whole) output gradient, complete on every rank. */
  int partial = lay->sp && lay->tp_size > 1;
  const float std = 0.02f, proj_std = std / sqrtf(2.0f * (float)s->n_layer);
  mt_registry_init(r, lay->tp_size, lay->tp_rank);
  mt_registry_set_ep(r, lay->ep_size > 0 ? lay->ep_size : 1, lay->ep_rank);
  mt_registry_set_etp(r, lay->etp_size > 0 ? lay->etp_size : 1, lay->etp_rank);
  r->pp_rank = lay->stage_of_layer ? lay->pp_rank : 0;
  reg_ctx c = {r, lay, MT_LAYER_EMBED};
  int64_t wte_shape[2] = {s->vocab, C}, wte_pad[2] = {s->vocab_padded, C};
  mt_tensor_spec wte = {"wte.weight", 2, wte_shape, wte_pad, mt_sharded(0, 1), mt_replicated(),
                        MT_LAYER_EMBED, stage_of(&c, MT_LAYER_EMBED), -1, MT_INIT_NORMAL, std,
                        1, "lm_head.weight", 0, mt_replicated(), MT_GROUP_DP};
  /* the LM head reads wte on the last stage: a copy kept equal there */
  if (lay->stage_of_layer && lay->pp_last != 0) wte.pp_copy = lay->pp_last;
  mt_registry_set_axes(r, mt_registry_add_spec(r, &wte), "vocab,embd");
  /* the position table: a run at a shorter context reads its first rows */
  mt_registry_set_axes(r, reg2(&c, "wpe.weight", s->seq_len, C, mt_replicated(), std),
                       "position,embd");
  char n[MT_NAME_MAX];
  for (int l = 0; l < s->n_layer; l++) {
    c.layer = l;
#define NAME(suffix) (snprintf(n, sizeof n, "blocks.%d.%s", l, suffix), n)
    reg_norm(&c, NAME("ln1.weight"), C, MT_INIT_ONES, partial);
    reg_norm(&c, NAME("ln1.bias"), C, MT_INIT_ZEROS, partial);
    reg2(&c, NAME("attn.qkv.weight"), 3 * C, C, mt_sharded(0, 3), std);
    reg_bias(&c, NAME("attn.qkv.bias"), 3 * C, mt_sharded(0, 3));
    reg2(&c, NAME("attn.proj.weight"), C, C, mt_sharded(1, 1), proj_std);
    reg_bias(&c, NAME("attn.proj.bias"), C, mt_replicated());
    reg_norm(&c, NAME("ln2.weight"), C, MT_INIT_ONES, partial);
    reg_norm(&c, NAME("ln2.bias"), C, MT_INIT_ZEROS, partial);
    if (!mt_model_is_moe(s, l)) {
      reg2(&c, NAME("mlp.fc.weight"), 4 * C, C, mt_sharded(0, 1), std);
      reg_bias(&c, NAME("mlp.fc.bias"), 4 * C, mt_sharded(0, 1));
      reg2(&c, NAME("mlp.proj.weight"), C, 4 * C, mt_sharded(1, 1), proj_std);
      reg_bias(&c, NAME("mlp.proj.bias"), C, mt_replicated());
      continue;
    }
    /* a MoE block: the router (replicated; under tensor parallelism each tp
     * rank routes its own slice of the tokens, so its gradient is partial),
     * the shared experts (a tensor-parallel MLP), then the experts (their own
     * unit, reduced over edp) */
    int64_t E = s->moe_experts, F = s->moe_ffn, Fs = (int64_t)s->moe_shared * F;
    int64_t router[2] = {E, C};
    reg_tensor(&c, NAME("moe.router.weight"), 2, router, NULL, mt_replicated(), MT_INIT_NORMAL,
               std, 1, lay->tp_size > 1);
    if (Fs > 0) {
      reg2(&c, NAME("moe.shared.fc.weight"), Fs, C, mt_sharded(0, 1), std);
      reg_bias(&c, NAME("moe.shared.fc.bias"), Fs, mt_sharded(0, 1));
      reg2(&c, NAME("moe.shared.proj.weight"), C, Fs, mt_sharded(1, 1), proj_std);
      reg_bias(&c, NAME("moe.shared.proj.bias"), C, mt_replicated());
    }
    int64_t fc[3] = {E, F, C}, fc_b[2] = {E, F}, proj[3] = {E, C, F}, proj_b[2] = {E, C};
    reg_expert(&c, NAME("moe.experts.fc.weight"), 3, fc, 1, MT_INIT_NORMAL, std, 1);
    reg_expert(&c, NAME("moe.experts.fc.bias"), 2, fc_b, 1, MT_INIT_ZEROS, 0.0f, 0);
    reg_expert(&c, NAME("moe.experts.proj.weight"), 3, proj, 2, MT_INIT_NORMAL, proj_std, 1);
    reg_expert(&c, NAME("moe.experts.proj.bias"), 2, proj_b, -1, MT_INIT_ZEROS, 0.0f, 0);
#undef NAME
  }
  c.layer = s->n_layer;
  reg_norm(&c, "lnf.weight", C, MT_INIT_ONES, partial);
  reg_norm(&c, "lnf.bias", C, MT_INIT_ZEROS, partial);
  return mt_registry_finalize(r, msg, msg_len);
}

int mt_gpt_register(mt_registry *r, const mt_model_shape *s, int tp_size, int tp_rank, int sp,
                    char *msg, size_t msg_len) {
  mt_gpt_layout lay = {tp_size, tp_rank, sp, s->n_layer, NULL, 0, 0, 1, 0, 1, 0};
  return mt_gpt_register_layout(r, s, &lay, msg, msg_len);
}

int mt_gpt_register_stages(mt_registry *r, const int *stage_of_layer, int last_stage,
                           int pp_rank, char *msg, size_t msg_len) {
  int n_layer = 0;
  for (int i = 0; i < r->n; i++)
    if (r->t[i].layer + 1 > n_layer) n_layer = r->t[i].layer + 1;
  n_layer--; /* the final LN's layer is n_layer */
  mt_gpt_layout lay = {r->tp_size, r->tp_rank, 0, n_layer, stage_of_layer, last_stage, pp_rank,
                       r->ep_size, r->ep_rank, r->etp_size, r->etp_rank};
  reg_ctx c = {r, &lay, 0};
  for (int i = 0; i < r->n; i++) {
    mt_tensor *t = &r->t[i];
    t->pp_stage = stage_of(&c, t->layer);
    t->pp_copy = t->tied_to[0] && last_stage != 0 ? last_stage : -1;
  }
  r->pp_rank = pp_rank;
  return mt_registry_finalize(r, msg, msg_len);
}

/* ------------------------------------------------------------------ */
/* views: named pointers into a unit's memory                          */

/* Looked up by name once: which view each registry tensor binds (NULL: the
 * model does not read it). */
static void find_views(mt_gpt *m) {
  const mt_registry *r = &m->reg;
  m->pview = mt_calloc((size_t)r->n, sizeof(float **));
  m->gview = mt_calloc((size_t)r->n, sizeof(float **));
#define VIEW(field, idx)                                                      \
  do {                                                                        \
    int i_ = (idx);                                                           \
    if (i_ < 0) mt_die("model: tensor for view " #field " not registered");   \
    m->pview[i_] = &m->p.field;                                               \
    m->gview[i_] = &m->g.field;                                               \
  } while (0)
  VIEW(wte, mt_registry_find(r, "wte.weight"));
  VIEW(wpe, mt_registry_find(r, "wpe.weight"));
  for (int l = 0; l < m->shape.n_layer; l++) {
    VIEW(blocks[l].ln1_w, mt_registry_findf(r, "blocks.%d.ln1.weight", l));
    VIEW(blocks[l].ln1_b, mt_registry_findf(r, "blocks.%d.ln1.bias", l));
    VIEW(blocks[l].qkv_w, mt_registry_findf(r, "blocks.%d.attn.qkv.weight", l));
    VIEW(blocks[l].qkv_b, mt_registry_findf(r, "blocks.%d.attn.qkv.bias", l));
    VIEW(blocks[l].attn_proj_w, mt_registry_findf(r, "blocks.%d.attn.proj.weight", l));
    VIEW(blocks[l].attn_proj_b, mt_registry_findf(r, "blocks.%d.attn.proj.bias", l));
    VIEW(blocks[l].ln2_w, mt_registry_findf(r, "blocks.%d.ln2.weight", l));
    VIEW(blocks[l].ln2_b, mt_registry_findf(r, "blocks.%d.ln2.bias", l));
    if (!mt_model_is_moe(&m->shape, l)) {
      VIEW(blocks[l].fc_w, mt_registry_findf(r, "blocks.%d.mlp.fc.weight", l));
      VIEW(blocks[l].fc_b, mt_registry_findf(r, "blocks.%d.mlp.fc.bias", l));
      VIEW(blocks[l].fc_proj_w, mt_registry_findf(r, "blocks.%d.mlp.proj.weight", l));
      VIEW(blocks[l].fc_proj_b, mt_registry_findf(r, "blocks.%d.mlp.proj.bias", l));
      continue;
    }
    /* a MoE block: the shared experts run through the MLP's views */
    VIEW(blocks[l].router_w, mt_registry_findf(r, "blocks.%d.moe.router.weight", l));
    if (m->shape.moe_shared > 0) {
      VIEW(blocks[l].fc_w, mt_registry_findf(r, "blocks.%d.moe.shared.fc.weight", l));
      VIEW(blocks[l].fc_b, mt_registry_findf(r, "blocks.%d.moe.shared.fc.bias", l));
      VIEW(blocks[l].fc_proj_w, mt_registry_findf(r, "blocks.%d.moe.shared.proj.weight", l));
      VIEW(blocks[l].fc_proj_b, mt_registry_findf(r, "blocks.%d.moe.shared.proj.bias", l));
    }
    VIEW(blocks[l].e_fc_w, mt_registry_findf(r, "blocks.%d.moe.experts.fc.weight", l));
    VIEW(blocks[l].e_fc_b, mt_registry_findf(r, "blocks.%d.moe.experts.fc.bias", l));
    VIEW(blocks[l].e_proj_w, mt_registry_findf(r, "blocks.%d.moe.experts.proj.weight", l));
    VIEW(blocks[l].e_proj_b, mt_registry_findf(r, "blocks.%d.moe.experts.proj.bias", l));
  }
  VIEW(lnf_w, mt_registry_find(r, "lnf.weight"));
  VIEW(lnf_b, mt_registry_find(r, "lnf.bias"));
#undef VIEW
  m->unit_embed = mt_registry_unit_of_layer(r, MT_LAYER_EMBED);
  m->unit_final = mt_registry_unit_of_layer(r, m->shape.n_layer);
  m->unit_block = mt_calloc((size_t)m->shape.n_layer + 1, sizeof(int));
  m->unit_experts = mt_calloc((size_t)m->shape.n_layer + 1, sizeof(int));
  for (int l = 0; l < m->shape.n_layer; l++) {
    m->unit_block[l] = mt_registry_unit_of(r, l, MT_GROUP_DP);
    m->unit_experts[l] = mt_registry_unit_of(r, l, MT_GROUP_EDP);
  }
}

/* Point the views of unit u's tensors at base, the memory of the unit's
 * first element (NULL base or a tensor this stage does not hold: NULL). */
static void bind_unit(mt_gpt *m, int u, float ***views, float *base) {
  const mt_unit *un = &m->reg.units[u];
  for (int i = un->t0; i < un->t1; i++) {
    const mt_tensor *t = &m->reg.t[i];
    if (!views[i]) continue;
    *views[i] = base && t->numel_local ? base + (t->offset - un->begin) : NULL;
  }
}

/* acquire unit u's parameters (and with grads, its gradient buffer) */
static void use_unit(mt_gpt *m, int u, mt_pass pass, int grads) {
  if (u < 0) return;
  bind_unit(m, u, m->pview, m->src.params(m->src.ctx, u, pass));
  if (grads) bind_unit(m, u, m->gview, m->src.grads(m->src.ctx, u));
}

static void params_done(mt_gpt *m, int u, mt_pass pass) {
  if (u >= 0) m->src.params_done(m->src.ctx, u, pass);
}

static void grads_done(mt_gpt *m, int u) {
  if (u >= 0) m->src.grads_done(m->src.ctx, u);
}

/* The state source of a model that owns its buffers: one flat buffer of
 * parameters and one of gradients, every unit always there. */
static float *own_params(void *ctx, int u, mt_pass pass) {
  mt_gpt *m = ctx;
  (void)pass;
  return m->params + m->reg.units[u].begin;
}
static void own_params_done(void *ctx, int u, mt_pass pass) {
  (void)ctx, (void)u, (void)pass;
}
static float *own_grads(void *ctx, int u) {
  mt_gpt *m = ctx;
  return m->grads + m->reg.units[u].begin;
}
static void own_grads_done(void *ctx, int u) { (void)ctx, (void)u; }

void mt_gpt_set_state_source(mt_gpt *m, const mt_state_source *src) {
  m->src = *src;
  /* views that stay put (every source but ZeRO-3's) are bound once here;
   * use_unit binds them again before each use */
  for (int u = 0; u < m->reg.n_units; u++) {
    bind_unit(m, u, m->pview, NULL);
    bind_unit(m, u, m->gview, NULL);
  }
}

size_t mt_gpt_layer_offset(const mt_gpt *m, int layer) {
  if (layer < MT_LAYER_EMBED) layer = MT_LAYER_EMBED;
  if (layer > m->shape.n_layer) return m->reg.numel_local;
  int u = mt_registry_unit_of_layer(&m->reg, layer);
  return u < 0 ? m->reg.numel_local : m->reg.units[u].begin;
}

/* ------------------------------------------------------------------ */
/* life cycle                                                          */

/* an activation buffer of n floats (a model that only counts: NULL) */
static float *act(mt_gpt *m, size_t n) {
  m->act_bytes += n * sizeof(float);
  if (m->count_only) return NULL;
  if (m->n_act == MT_GPT_MAX_ACT_BUFFERS) mt_die("too many activation buffers");
  float *p = m->ops->alloc(MT_MEM_ACTIV, n * sizeof(float));
  m->act_ptr[m->n_act] = p;
  m->act_size[m->n_act++] = n * sizeof(float);
  return p;
}

/* Activation sets (defined with the range functions): SET_KEPT is a set as
 * this model keeps it for backward (see mt_gpt_parallel), SET_WORKSPACE every
 * per-layer activation (recompute's one-layer workspace). */
typedef enum { SET_KEPT, SET_WORKSPACE } act_set_kind;
static size_t act_set_numel(const mt_gpt *m, int n_layers, int B, int with_head, act_set_kind k);
static void act_set_bind(const mt_gpt *m, mt_gpt_acts *a, float *mem, int n_layers, int B,
                         int with_head, act_set_kind k);

/* whole_acts: allocate m->a for every layer (0: a pipeline stage binds its
 * own sets); count_only: allocate nothing, count the bytes */
static int gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                      const mt_gpt_parallel *par, int whole_acts, int count_only, mt_err *e);

int mt_gpt_create_parallel(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops,
                           int max_B, const mt_gpt_parallel *par, mt_err *e) {
  return gpt_create(m, shape, ops, max_B, par, 1, 0, e);
}

int mt_gpt_create_stage(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                        const mt_gpt_parallel *par, mt_err *e) {
  return gpt_create(m, shape, ops, max_B, par, 0, 0, e);
}

int mt_gpt_create_plan(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                       const mt_gpt_parallel *par, mt_err *e) {
  return gpt_create(m, shape, ops, max_B, par, 0, 1, e);
}

/* The layout of par (NULL: one rank) for registration. */
static mt_gpt_layout layout_of(const mt_model_shape *shape, const mt_gpt_parallel *par) {
  mt_group *tp_g = par && par->tp && par->tp->size > 1 ? par->tp : NULL;
  mt_group *ep_g = par && par->ep && par->ep->size > 1 ? par->ep : NULL;
  mt_group *etp_g = par && par->etp && par->etp->size > 1 ? par->etp : NULL;
  mt_gpt_layout lay = {tp_g ? tp_g->size : 1, tp_g ? tp_g->rank : 0, par && par->sp,
                       shape->n_layer, NULL, 0, 0, ep_g ? ep_g->size : 1, ep_g ? ep_g->rank : 0,
                       etp_g ? etp_g->size : 1, etp_g ? etp_g->rank : 0};
  if (par && par->stage_of_layer) {
    lay.stage_of_layer = par->stage_of_layer;
    lay.pp_last = par->pp_last;
    lay.pp_rank = par->pp_rank;
  }
  return lay;
}

static int gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                      const mt_gpt_parallel *par, int whole_acts, int count_only, mt_err *e) {
  memset(m, 0, sizeof *m);
  m->count_only = count_only;
  m->shape = *shape;
  m->ops = ops;
  m->max_B = max_B;
  mt_gpt_layout lay = layout_of(shape, par);
  mt_group *tp_g = lay.tp_size > 1 ? par->tp : NULL;
  int tp_size = lay.tp_size, sp = lay.sp;
  /* context parallelism: this rank's chunks of every sequence */
  mt_group *cp_g = par && par->cp && par->cp->size > 1 ? par->cp : NULL;
  const int cp_size = cp_g ? cp_g->size : 1;
  const mt_cp_mode cp_mode = par ? (mt_cp_mode)par->cp_mode : MT_CP_RING;
  if (cp_size > 1 && cp_mode == MT_CP_RING && shape->seq_len % (2 * cp_size) != 0) {
    mt_err_set(e, "ring context parallelism cuts seq_len = %d into 2 x cp = %d chunks",
               shape->seq_len, 2 * cp_size);
    return -1;
  }
  if (cp_size > 1 && cp_mode == MT_CP_ULYSSES &&
      (shape->seq_len % cp_size != 0 || shape->n_head % (tp_size * cp_size) != 0)) {
    mt_err_set(e, "Ulysses context parallelism needs cp = %d to divide seq_len = %d and the "
               "%d heads of each tp rank", cp_size, shape->seq_len, shape->n_head / tp_size);
    return -1;
  }
  mt_cp_layout cpl;
  mt_cp_layout_make(&cpl, cp_size, cp_g ? cp_g->rank : 0, cp_mode, shape->seq_len);
  m->T = cpl.T_local;
  if (sp && (!tp_g || m->T % tp_size != 0)) {
    mt_err_set(e, "sequence parallelism needs tp > 1 dividing the %d tokens of a sequence on "
               "each rank (tp = %d)", m->T, tp_size);
    return -1;
  }
  if (shape->n_head % tp_size != 0) {
    mt_err_set(e, "tp = %d does not divide n_head = %d", tp_size, shape->n_head);
    return -1;
  }
  if (shape->moe_experts > 0 && par && (par->recompute || par->split_backward)) {
    mt_err_set(e, "train.recompute and the zb-h1 schedule are not supported with MoE blocks "
                  "(model.moe_experts > 0) yet");
    return -1;
  }
  char msg[256];
  if (mt_gpt_register_layout(&m->reg, shape, &lay, msg, sizeof msg) != 0) {
    mt_err_set(e, "%s", msg);
    mt_registry_free(&m->reg);
    return -1;
  }
  /* this rank's share of every split dim, as the registry placed it */
  const mt_registry *r = &m->reg;
  const mt_tensor *wte = &r->t[mt_registry_find(r, "wte.weight")];
  const mt_tensor *qkv = &r->t[mt_registry_find(r, "blocks.0.attn.qkv.weight")];
  m->C_local = (int)(qkv->local_shape[0] / qkv->tp.fused_blocks);
  m->NH_local = m->C_local / (shape->n_embd / shape->n_head);
  /* per block: the hidden units of its MLP (a MoE block: of its shared
   * experts, or none); activations are laid out for the largest */
  m->mlp_local = mt_calloc((size_t)shape->n_layer + 1, sizeof(int));
  m->moe_window_of = mt_calloc((size_t)shape->n_layer + 1, sizeof(int));
  for (int l = 0; l < shape->n_layer; l++) {
    int moe = mt_model_is_moe(shape, l);
    int i = moe ? mt_registry_findf(r, "blocks.%d.moe.shared.fc.weight", l)
                : mt_registry_findf(r, "blocks.%d.mlp.fc.weight", l);
    m->mlp_local[l] = i >= 0 ? (int)r->t[i].local_shape[0] : 0;
    if (m->mlp_local[l] > m->F_slot) m->F_slot = m->mlp_local[l];
    if (moe && m->n_moe++ == 0) {
      const mt_tensor *efc = &r->t[mt_registry_findf(r, "blocks.%d.moe.experts.fc.weight", l)];
      m->E_local = (int)efc->local_shape[0];
      m->Fe_local = (int)efc->local_shape[1];
    }
  }
  m->F_local = m->F_slot;
  for (int n = 0; n <= shape->n_layer; n++) /* MoE blocks a set of n blocks may hold */
    for (int l0 = 0; l0 + n <= shape->n_layer; l0++) {
      int c = mt_model_moe_before(shape, l0 + n) - mt_model_moe_before(shape, l0);
      if (c > m->moe_window_of[n]) m->moe_window_of[n] = c;
    }
  m->ep_size = lay.ep_size;
  m->ep_rank = lay.ep_rank;
  m->etp_size = lay.etp_size;
  m->etp_rank = lay.etp_rank;
  m->Ts = tp_size > 1 ? m->T / tp_size : m->T;
  m->moe_slice = m->n_moe > 0 && tp_size > 1 && !sp;
  if (m->n_moe > 0) {
    mt_ep_bounds(shape->moe_experts, shape->moe_topk, lay.ep_size, lay.etp_size, m->T,
                 shape->moe_capacity, max_B, m->Ts, &m->moe_send, &m->moe_recv, &m->moe_rows);
    m->moe_meta_n = mt_ep_meta_ints(lay.ep_size, lay.etp_size, m->E_local);
  }
  m->V_local = (int)wte->local_shape[0];
  m->v_start = (int)wte->local_start[0];
  int real = shape->vocab - m->v_start;
  m->v_real = real < 0 ? 0 : real > m->V_local ? m->V_local : real;
  m->T_sp = sp ? m->T / tp_size : m->T;
  /* the activation sets' attention pieces depend on the layout: known now */
  m->cp.lay = cpl;
  m->cp.C = m->C_local;
  m->cp.NH = m->NH_local;
  m->recompute = par && par->recompute;
  m->split_backward = par && par->split_backward;

  m->p.blocks = mt_calloc((size_t)shape->n_layer, sizeof(mt_block_tensors));
  m->g.blocks = mt_calloc((size_t)shape->n_layer, sizeof(mt_block_tensors));
  find_views(m);
  if (!(par && par->external_state) && !count_only) {
    /* a model on its own: it owns flat buffers of parameters and gradients */
    size_t n = m->reg.numel_local;
    m->params = ops->alloc(MT_MEM_PARAMS, n * sizeof(float));
    m->grads = ops->alloc(MT_MEM_GRADS, n * sizeof(float));
    mt_state_source own = {m, own_params, own_params_done, own_grads, own_grads_done};
    mt_gpt_set_state_source(m, &own);
    for (int u = 0; u < m->reg.n_units; u++) use_unit(m, u, MT_PASS_FORWARD, 1);
  }

  size_t B = (size_t)max_B, T = (size_t)m->T, C = (size_t)shape->n_embd, L = (size_t)shape->n_layer;
  size_t BT = B * T, BTs = B * (size_t)m->T_sp;
  size_t Cl = (size_t)m->C_local, Fl = (size_t)m->F_local, NHl = (size_t)m->NH_local;
  if (whole_acts) /* pipeline stages bind their own sets */
    mt_gpt_acts_bind(m, &m->a, act(m, mt_gpt_acts_numel(m, (int)L, max_B, 1)), (int)L, max_B, 1);
  if (m->recompute) {
    size_t before = m->act_bytes;
    float *ws = act(m, act_set_numel(m, 1, max_B, 0, SET_WORKSPACE));
    if (ws) act_set_bind(m, &m->ws, ws, 1, max_B, 0, SET_WORKSPACE);
    m->ws_bytes = m->act_bytes - before;
  }
  /* backward scratch: one layer's worth, reused layer after layer */
  mt_gpt_acts *d = &m->d;
  d->residual3 = act(m, BTs * C); /* the gradient of the residual stream */
  d->ln1 = act(m, BT * C);        /* d of a column-parallel input (ln1, ln2, lnf), partial over tp */
  d->qkv = act(m, BT * 3 * Cl);
  d->atty = act(m, BT * Cl);
  d->fch = act(m, BT * Fl);
  d->fch_gelu = act(m, BT * Fl);
  /* attention's scratch under context parallelism (ring: a block's partial
   * result before its merge; Ulysses: gradients in the head layout) */
  float *cp_scratch[4];
  for (int w = 0; w < 4; w++) {
    size_t n = mt_cp_scratch_numel(&cpl, max_B, (int)Cl, (int)NHl, w);
    cp_scratch[w] = n ? act(m, n) : NULL;
  }
  if (sp) {
    m->full_in = act(m, BT * C);
    m->full_out = act(m, BT * C);
    m->dln_local = act(m, BTs * C);
  }
  m->rowmax = act(m, BT);
  m->xent_stats = (double *)act(m, 2 * BT * sizeof(double) / sizeof(float));
  /* the micro-batch's tokens, in backend memory (B,T) each */
  m->tok_in = (int *)act(m, BT * sizeof(int) / sizeof(float));
  m->tok_tgt = (int *)act(m, BT * sizeof(int) / sizeof(float));
  if (m->n_moe > 0) {
    /* one MoE block's scratch: N local tokens, the dispatch's row bounds */
    const size_t N = B * (size_t)m->Ts, E = (size_t)shape->moe_experts;
    const size_t k = (size_t)shape->moe_topk, Fe = (size_t)m->Fe_local;
    m->moe_logits = act(m, N * E);
    m->moe_dtw = act(m, N * k);
    m->moe_out = act(m, N * C);
    m->moe_seq_buf = act(m, B * E);
    m->moe_send_buf = act(m, m->moe_send * C);
    m->moe_send_tok = (int *)act(m, m->moe_send);
    m->moe_recv_buf = act(m, m->moe_recv * C);
    if (lay.etp_size > 1) m->moe_rows_buf = act(m, m->moe_rows * C);
    m->moe_rows2_buf = act(m, m->moe_rows * C);
    m->moe_hid_buf = act(m, m->moe_rows * Fe);
    m->moe_hid2_buf = act(m, m->moe_rows * Fe);
    if (m->moe_slice) { /* the rank's slice of each sequence, and back */
      m->moe_xloc = act(m, N * C);
      m->moe_dxl = act(m, N * C);
      m->moe_full = act(m, BT * C);
    }
  }
  size_t partial = mt_tp_partial_numel(r, 0, r->numel_local);
  m->comm_bytes = mt_tp_comm_bytes(tp_size, sp, BT * C, partial) +
                  mt_cp_comm_bytes(&cpl, max_B, (int)Cl);
  if (count_only) { /* the tp ranks and sp as a real model would see them */
    m->tp.size = tp_size;
    m->tp.rank = lay.tp_rank;
    m->tp.sp = sp;
    return 0;
  }
  mt_cp_create(&m->cp, cp_g, &cpl, max_B, (int)Cl, (int)NHl, ops);
  mt_cp_set_scratch(&m->cp, cp_scratch[0], cp_scratch[1], cp_scratch[2], cp_scratch[3]);
  m->inputs = mt_calloc(BT, sizeof(int));
  m->targets = mt_calloc(BT, sizeof(int));
  mt_tp_create(&m->tp, tp_g, sp, BT * C, partial, ops);
  if (m->n_moe > 0) {
    mt_ep_create(&m->ep, par ? par->ep : NULL, par ? par->etp : NULL, tp_g, ops,
                 shape->moe_experts, shape->moe_topk, m->T, shape->moe_capacity, max_B, m->Ts);
    m->moe_meta_host = mt_calloc((size_t)m->moe_meta_n, sizeof(int));
    size_t E = (size_t)shape->moe_experts;
    m->moe_tokens = mt_calloc((size_t)m->n_moe * E + 1, sizeof(double));
    m->moe_dropped = mt_calloc((size_t)m->n_moe + 1, sizeof(double));
    m->moe_aux = mt_calloc((size_t)m->n_moe + 1, sizeof(double));
    m->moe_z = mt_calloc((size_t)m->n_moe + 1, sizeof(double));
  }
  return 0;
}

void mt_gpt_set_moe_loss(mt_gpt *m, float aux_coef, float z_coef) {
  m->moe_aux_coef = aux_coef;
  m->moe_z_coef = z_coef;
}

void mt_gpt_moe_stats(mt_gpt *m, int on) { m->moe_stats_on = on && m->n_moe > 0; }

void mt_gpt_moe_stats_reset(mt_gpt *m) {
  if (m->n_moe == 0 || !m->moe_tokens) return;
  size_t E = (size_t)m->shape.moe_experts, n = (size_t)m->n_moe;
  memset(m->moe_tokens, 0, n * E * sizeof(double));
  memset(m->moe_dropped, 0, n * sizeof(double));
  memset(m->moe_aux, 0, n * sizeof(double));
  memset(m->moe_z, 0, n * sizeof(double));
}

int mt_gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                  mt_err *e) {
  return mt_gpt_create_parallel(m, shape, ops, max_B, NULL, e);
}

/* what every model holds on the host: views, units, per-block figures */
static void free_host_parts(mt_gpt *m) {
  free(m->p.blocks);
  free(m->g.blocks);
  free(m->pview);
  free(m->gview);
  free(m->unit_block);
  free(m->unit_experts);
  free(m->mlp_local);
  free(m->moe_window_of);
}

void mt_gpt_destroy(mt_gpt *m) {
  size_t n = m->reg.numel_local;
  if (m->count_only) { /* nothing was allocated but the views and the registry */
    free_host_parts(m);
    mt_registry_free(&m->reg);
    memset(m, 0, sizeof *m);
    return;
  }
  if (m->params) m->ops->free(MT_MEM_PARAMS, m->params, n * sizeof(float));
  if (m->grads) m->ops->free(MT_MEM_GRADS, m->grads, n * sizeof(float));
  for (int i = 0; i < m->n_act; i++) m->ops->free(MT_MEM_ACTIV, m->act_ptr[i], m->act_size[i]);
  free_host_parts(m);
  if (m->n_moe > 0) {
    mt_ep_destroy(&m->ep);
    free(m->moe_meta_host);
    free(m->moe_tokens);
    free(m->moe_dropped);
    free(m->moe_aux);
    free(m->moe_z);
  }
  free(m->inputs);
  free(m->targets);
  mt_tp_destroy(&m->tp);
  mt_cp_destroy(&m->cp);
  mt_registry_free(&m->reg);
  memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ */
/* a model that owns its buffers: initialisation and zeroing           */

void mt_gpt_init_params(mt_gpt *m, uint64_t seed) {
  if (!m->params) mt_die("mt_gpt_init_params: the model's state lives elsewhere");
  size_t most = 0;
  for (int i = 0; i < m->reg.n; i++)
    if (m->reg.t[i].numel_local > most) most = m->reg.t[i].numel_local;
  float *host = mt_malloc((most ? most : 1) * sizeof(float));
  for (int i = 0; i < m->reg.n; i++) {
    const mt_tensor *t = &m->reg.t[i];
    if (t->numel_local == 0) continue; /* held by another pipeline stage */
    mt_registry_init_values(&m->reg, i, seed, 0, t->numel_local, host);
    m->ops->upload(m->params + t->offset, host, t->numel_local * sizeof(float));
  }
  free(host);
}

void mt_gpt_zero_grad(mt_gpt *m) {
  if (m->grads) m->ops->zero(m->grads, m->reg.numel_local);
}

/* ------------------------------------------------------------------ */
/* tensor-parallel plumbing                                            */

/* The full (BT,C) input of a column-parallel layer (qkv, mlp.fc, LM head).
 * Without sp, x is already full and identical on every tp rank ("f" is the
 * identity forward); under sp x is this rank's (BTs,C) slice, gathered along
 * T. Backward calls it again for the weight gradient (Megatron re-gathers
 * rather than keep the full input). */
static const float *column_input(mt_gpt *m, const float *x, int B) {
  if (!m->tp.sp) return x;
  mt_tp_gather_seq(&m->tp, x, m->full_in, B, m->T, m->shape.n_embd);
  return m->full_in;
}

/* Where a row-parallel layer (attn.proj, mlp.proj, the embedding) writes its
 * partial (BT,C) output: in place in out, or under sp a scratch that
 * row_output then reduce-scatters into out (BTs,C). */
static float *row_partial(mt_gpt *m, float *out) { return m->tp.sp ? m->full_out : out; }

/* Sum the partial outputs over tp ("g"): all-reduce, or reduce-scatter along T. */
static void row_output(mt_gpt *m, float *out, int B) {
  const int C = m->shape.n_embd;
  if (m->tp.sp) mt_tp_reduce_scatter_seq(&m->tp, m->full_out, out, B, m->T, C);
  else mt_tp_allreduce(&m->tp, out, (size_t)B * m->T * C);
}

/* Backward of row_output: the full (BT,C) gradient of a row-parallel output
 * from this rank's part of the residual-stream gradient (identity without
 * sp, all-gather along T with). */
static const float *row_dout(mt_gpt *m, const float *dlocal, int B) {
  if (!m->tp.sp) return dlocal;
  mt_tp_gather_seq(&m->tp, dlocal, m->full_out, B, m->T, m->shape.n_embd);
  return m->full_out;
}

/* Backward of column_input: dpartial (BT,C) holds this rank's share of the
 * input gradient; returns the sum over tp for this rank's rows (all-reduce in
 * place, or reduce-scatter along T into m->dln_local). */
static const float *column_dinput(mt_gpt *m, float *dpartial, int B) {
  const int C = m->shape.n_embd;
  if (!m->tp.sp) {
    mt_tp_allreduce(&m->tp, dpartial, (size_t)B * m->T * C);
    return dpartial;
  }
  mt_tp_reduce_scatter_seq(&m->tp, dpartial, m->dln_local, B, m->T, C);
  return m->dln_local;
}

double mt_gpt_tp_bytes_range(const mt_gpt *m, int B, int n_layers, int embed, int head) {
  int n = m->tp.size;
  if (n == 1) return 0.0;
  double C = m->shape.n_embd, L = n_layers, BT = (double)B * m->T;
  size_t act = (size_t)(BT * C) * sizeof(float); /* one (B,T,C) activation */
  /* cross-entropy: row maxima (floats) and row sums | target logits (doubles) */
  double xent = head ? mt_bytes_allreduce((size_t)BT * sizeof(float), n) +
                           mt_bytes_allreduce((size_t)(2 * BT) * sizeof(double), n)
                     : 0.0;
  /* recompute runs each block's forward again in backward (twice with a split
   * backward: once per pass) */
  double refwd = m->recompute ? (m->split_backward ? 2 : 1) * L : 0;
  if (!m->tp.sp) /* all-reduces: embedding, 2 per block forward, 2 per block backward, LM head */
    return (4 * L + embed + head + 2 * refwd) * mt_bytes_allreduce(act, n) + xent;
  /* per block: forward 2 gathers + 2 reduce-scatters; backward 2 gathers of
   * output gradients, 2 re-gathers of inputs, 2 reduce-scatters of input
   * gradients; embedding: reduce-scatter + gather; LM head: gather,
   * re-gather, reduce-scatter */
  return (10 * L + 2 * embed + 3 * head + 4 * refwd) * mt_bytes_allgather(act, n) + xent;
}

double mt_gpt_cp_bytes_range(const mt_gpt *m, int B, int n_layers) {
  if (m->cp.lay.size == 1) return 0.0;
  /* recompute runs each block's forward again in backward (twice with a split backward) */
  double refwd = m->recompute ? (m->split_backward ? 2 : 1) : 0;
  return n_layers * ((1 + refwd) * mt_cp_bytes(&m->cp.lay, B, m->C_local, 0) +
                     mt_cp_bytes(&m->cp.lay, B, m->C_local, 1));
}

double mt_gpt_tp_bytes_layers(const mt_gpt *m, int B, int l0, int l1, int embed, int head) {
  int n = m->tp.size;
  if (n == 1) return 0.0;
  int dense = 0, moe = 0, shared = 0;
  for (int l = l0; l < l1; l++) {
    if (!mt_model_is_moe(&m->shape, l)) dense++;
    else {
      moe++;
      shared += m->mlp_local[l] > 0;
    }
  }
  if (moe == 0) return mt_gpt_tp_bytes_range(m, B, dense, embed, head);
  double C = m->shape.n_embd, BT = (double)B * m->T;
  size_t act = (size_t)(BT * C) * sizeof(float);
  double xent = head ? mt_bytes_allreduce((size_t)BT * sizeof(float), n) +
                           mt_bytes_allreduce((size_t)(2 * BT) * sizeof(double), n)
                     : 0.0;
  /* a MoE block: the attention half as a dense block's, the shared experts
   * as a dense MLP; the routed experts exchange each sequence's counts over
   * tp, and without sp gather their slices' outputs (forward) and input
   * gradients (backward) */
  double ex[3];
  mt_ep_bytes_balanced(m->shape.moe_experts, m->shape.moe_topk, m->ep_size, m->etp_size, n, B,
                       m->Ts, m->shape.n_embd, ex);
  double routed = moe * ex[2];
  if (!m->tp.sp)
    return (4.0 * dense + 2.0 * moe + 2.0 * shared + embed + head) * mt_bytes_allreduce(act, n) +
           xent + routed + 2.0 * moe * mt_bytes_allgather(act, n);
  return (10.0 * dense + 5.0 * moe + 5.0 * shared + 2 * embed + 3 * head) *
             mt_bytes_allgather(act, n) +
         xent + routed;
}

void mt_gpt_expert_bytes_layers(const mt_gpt *m, int B, int l0, int l1, double out[2]) {
  out[0] = out[1] = 0.0;
  for (int l = l0; l < l1; l++) {
    if (!mt_model_is_moe(&m->shape, l)) continue;
    double ex[3];
    mt_ep_bytes_balanced(m->shape.moe_experts, m->shape.moe_topk, m->ep_size, m->etp_size,
                         m->tp.size, B, m->Ts, m->shape.n_embd, ex);
    out[0] += ex[0];
    out[1] += ex[1];
  }
}

double mt_gpt_tp_bytes(const mt_gpt *m, int B, int per_step) {
  int n = m->tp.size;
  if (n == 1) return 0.0;
  if (per_step) /* the sp partial gradients, summed once (in pieces, same bytes) */
    return m->tp.sp ? mt_bytes_allreduce(
                          mt_tp_partial_numel(&m->reg, 0, m->reg.numel_local) * sizeof(float), n)
                    : 0.0;
  return mt_gpt_tp_bytes_layers(m, B, 0, m->shape.n_layer, 1, 1);
}

/* ------------------------------------------------------------------ */
/* activation sets                                                     */
/* A set holds one micro-batch's activations of a layer range [l0, l1): the
 * activations of layer l0 + j in slot j, the range's input in a->encoded.
 * The whole model's m->a is the set of [0, n_layer) with the head. */

typedef struct {
  size_t n;
  float **dst;
  int **idst; /* an int piece (4 bytes an element, like a float) */
} act_piece;

/* the pieces of a set, in one order for numel and bind */
static int act_pieces(const mt_gpt *m, mt_gpt_acts *a, int n_layers, int B, int with_head,
                      act_set_kind kind, act_piece *p) {
  size_t T = (size_t)m->T, C = (size_t)m->shape.n_embd, L = (size_t)n_layers;
  size_t BT = (size_t)B * T, BTs = (size_t)B * (size_t)m->T_sp;
  size_t Cl = (size_t)m->C_local, Fl = (size_t)m->F_local, NHl = (size_t)m->NH_local;
  /* under recompute a kept set holds each layer's output (the next one's input) only */
  int inner = kind == SET_WORKSPACE || !m->recompute;
  int k = 0;
#define PIECE(field, count) p[k++] = (act_piece){(count), &a->field, NULL}
#define IPIECE(field, count) p[k++] = (act_piece){(count), NULL, &a->field}
  PIECE(encoded, BTs * C);
  if (inner) {
    PIECE(ln1, L * BTs * C);
    PIECE(ln1_mean, L * BTs);
    PIECE(ln1_rstd, L * BTs);
    PIECE(qkv, L * BT * 3 * Cl);
    PIECE(atty, L * BT * Cl);
    PIECE(lse, L * mt_cp_saved_numel(&m->cp.lay, B, (int)Cl, (int)NHl, 0));
    if (mt_cp_saved_numel(&m->cp.lay, B, (int)Cl, (int)NHl, 1)) { /* Ulysses */
      PIECE(att_qkv, L * mt_cp_saved_numel(&m->cp.lay, B, (int)Cl, (int)NHl, 1));
      PIECE(att_out, L * mt_cp_saved_numel(&m->cp.lay, B, (int)Cl, (int)NHl, 2));
    }
    PIECE(attproj, L * BTs * C);
    PIECE(residual2, L * BTs * C);
    PIECE(ln2, L * BTs * C);
    PIECE(ln2_mean, L * BTs);
    PIECE(ln2_rstd, L * BTs);
    PIECE(fch, L * BT * Fl);
    PIECE(fch_gelu, L * BT * Fl);
    PIECE(fcproj, L * BTs * C);
  }
  PIECE(residual3, L * BTs * C);
  if (with_head) {
    PIECE(lnf, BTs * C);
    PIECE(lnf_mean, BTs);
    PIECE(lnf_rstd, BTs);
    PIECE(logits, BT * (size_t)m->V_local);
    PIECE(losses, BT);
  }
  if (kind == SET_KEPT && m->split_backward) {
    PIECE(dy_qkv, L * BT * 3 * Cl);
    PIECE(dy_attproj, L * BT * C);
    PIECE(dy_fc, L * BT * Fl);
    PIECE(dy_fcproj, L * BT * C);
  }
  /* MoE blocks: slot m of the set for its m-th MoE block (a set of n blocks
   * holds the most any n consecutive blocks have) */
  size_t Lm = inner ? (size_t)(kind == SET_WORKSPACE ? (m->n_moe > 0) : m->moe_window_of[n_layers])
                    : 0;
  if (Lm > 0) {
    const size_t N = (size_t)B * (size_t)m->Ts, E = (size_t)m->shape.moe_experts;
    const size_t kk = (size_t)m->shape.moe_topk, Fe = (size_t)m->Fe_local;
    size_t send, recv, rows;
    mt_ep_bounds(m->shape.moe_experts, m->shape.moe_topk, m->ep_size, m->etp_size, m->T,
                 m->shape.moe_capacity, B, m->Ts, &send, &recv, &rows);
    PIECE(moe_probs, Lm * N * E);
    PIECE(moe_lse, Lm * N);
    IPIECE(moe_top, Lm * N * kk);
    IPIECE(moe_slot, Lm * N * kk);
    PIECE(moe_topw, Lm * N * kk);
    PIECE(moe_frac, Lm * (size_t)B * E);
    IPIECE(moe_meta, Lm * (size_t)m->moe_meta_n);
    IPIECE(moe_perm, Lm * rows);
    IPIECE(moe_inv, Lm * rows);
    PIECE(moe_xe, Lm * rows * C);
    PIECE(moe_h, Lm * rows * Fe);
    PIECE(moe_g, Lm * rows * Fe);
    PIECE(moe_ys, Lm * send * C);
  }
#undef PIECE
#undef IPIECE
  return k;
}

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

static size_t act_set_numel(const mt_gpt *m, int n_layers, int B, int with_head, act_set_kind k) {
  mt_gpt_acts a;
  act_piece p[48];
  int n_p = act_pieces(m, &a, n_layers, B, with_head, k, p);
  size_t n = 0;
  for (int i = 0; i < n_p; i++) n += round16(p[i].n);
  return n;
}

static void act_set_bind(const mt_gpt *m, mt_gpt_acts *a, float *mem, int n_layers, int B,
                         int with_head, act_set_kind k) {
  memset(a, 0, sizeof *a);
  act_piece p[48];
  int n_p = act_pieces(m, a, n_layers, B, with_head, k, p);
  for (int i = 0; i < n_p; i++) {
    if (p[i].dst) *p[i].dst = mem;
    else *p[i].idst = (int *)mem;
    mem += round16(p[i].n);
  }
}

size_t mt_gpt_acts_numel(const mt_gpt *m, int n_layers, int B, int with_head) {
  return act_set_numel(m, n_layers, B, with_head, SET_KEPT);
}

void mt_gpt_acts_bind(const mt_gpt *m, mt_gpt_acts *a, float *mem, int n_layers, int B,
                      int with_head) {
  act_set_bind(m, a, mem, n_layers, B, with_head, SET_KEPT);
}

float *mt_gpt_range_output(const mt_gpt *m, const mt_gpt_acts *a, int n_layers, int B) {
  return a->residual3 + (size_t)(n_layers - 1) * B * m->T_sp * m->shape.n_embd;
}

/* ------------------------------------------------------------------ */
/* one layer, forward and backward                                     */

/* Where one layer's activations are (shapes as in mt_gpt_acts, one layer):
 * slot j of a set, or under recompute the workspace m->ws for all but the
 * output res3 (always slot j of the set: the next layer's input). A MoE
 * block also has its slot among the set's MoE blocks (moe). */
typedef struct {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *attproj, *res2;
  float *ln2, *ln2_mean, *ln2_rstd, *fch, *fchg, *fcproj, *res3;
  float *dy_qkv, *dy_attproj, *dy_fc, *dy_fcproj; /* split backward only */
  mt_cp_saved att;  /* what attention keeps: the rows' LSE (Ulysses: head-layout q|k|v, out) */
  int is_moe;
  mt_moe_acts moe;
} layer_acts;

/* layer l of a set holding the range that starts at l0 */
static layer_acts layer_at(const mt_gpt *m, const mt_gpt_acts *a, int l, int l0, int B) {
  const size_t j = (size_t)(l - l0);
  const size_t T = (size_t)m->T, C = (size_t)m->shape.n_embd, BT = (size_t)B * T;
  const size_t BTs = (size_t)B * (size_t)m->T_sp, btc = BTs * C;
  const size_t Cl = (size_t)m->C_local, Fl = (size_t)m->F_local, NHl = (size_t)m->NH_local;
  const mt_gpt_acts *w = m->recompute ? &m->ws : a;
  const size_t i = m->recompute ? 0 : j;
  layer_acts x = {w->ln1 + i * btc, w->ln1_mean + i * BTs, w->ln1_rstd + i * BTs,
                  w->qkv + 3 * i * BT * Cl, w->atty + i * BT * Cl, w->attproj + i * btc,
                  w->residual2 + i * btc, w->ln2 + i * btc, w->ln2_mean + i * BTs,
                  w->ln2_rstd + i * BTs, w->fch + i * BT * Fl, w->fch_gelu + i * BT * Fl,
                  w->fcproj + i * btc, a->residual3 + j * btc,
                  NULL, NULL, NULL, NULL, {w->lse + i * (size_t)B * NHl * T, NULL, NULL}, 0, {0}};
  if (w->att_qkv) { /* Ulysses */
    x.att.qkv_h = w->att_qkv + 3 * i * BT * Cl;
    x.att.out_h = w->att_out + i * BT * Cl;
  }
  if (m->split_backward && a->dy_qkv) {
    x.dy_qkv = a->dy_qkv + 3 * j * BT * Cl;
    x.dy_attproj = a->dy_attproj + j * BT * C;
    x.dy_fc = a->dy_fc + j * BT * Fl;
    x.dy_fcproj = a->dy_fcproj + j * BT * C;
  }
  if (mt_model_is_moe(&m->shape, l)) {
    const size_t mi = m->recompute ? 0
                                   : (size_t)(mt_model_moe_before(&m->shape, l) -
                                              mt_model_moe_before(&m->shape, l0));
    const size_t N = (size_t)B * (size_t)m->Ts, E = (size_t)m->shape.moe_experts;
    const size_t k = (size_t)m->shape.moe_topk, Fe = (size_t)m->Fe_local;
    size_t send, recv, rows;
    mt_ep_bounds(m->shape.moe_experts, m->shape.moe_topk, m->ep_size, m->etp_size, m->T,
                 m->shape.moe_capacity, B, m->Ts, &send, &recv, &rows);
    mt_moe_acts *o = &x.moe;
    x.is_moe = 1;
    o->probs = w->moe_probs + mi * N * E;
    o->lse = w->moe_lse + mi * N;
    o->top = w->moe_top + mi * N * k;
    o->slot = w->moe_slot + mi * N * k;
    o->topw = w->moe_topw + mi * N * k;
    o->frac = w->moe_frac + mi * (size_t)B * E;
    o->meta = w->moe_meta + mi * (size_t)m->moe_meta_n;
    o->perm = w->moe_perm + mi * rows;
    o->inv = w->moe_inv + mi * rows;
    o->xe = w->moe_xe + mi * rows * C;
    o->h = w->moe_h + mi * rows * Fe;
    o->g = w->moe_g + mi * rows * Fe;
    o->ys = w->moe_ys + mi * send * C;
  }
  return x;
}

/* the input hidden state (BTs,C) of slot j: the range's input or slot j-1's output */
static const float *layer_input(const mt_gpt *m, const mt_gpt_acts *a, size_t j, int B) {
  return j == 0 ? a->encoded : a->residual3 + (j - 1) * (size_t)B * m->T_sp * m->shape.n_embd;
}

/* A MoE block's local tokens: the ln2 output (BTs,C) as it is (whole
 * sequences, or this rank's sp slice), or without sp under tensor
 * parallelism this rank's 1/tp slice of each sequence of the (BT,C) copy
 * every tp rank holds. */
static const float *moe_local_tokens(mt_gpt *m, const float *full, float *slice, int B) {
  if (!m->moe_slice) return full;
  const size_t C = (size_t)m->shape.n_embd, Ts = (size_t)m->Ts;
  for (int b = 0; b < B; b++)
    m->ops->copy(slice + (size_t)b * Ts * C,
                 full + ((size_t)b * m->T + (size_t)m->tp.rank * Ts) * C, Ts * C);
  return slice;
}

/* The MLP half of a MoE block: the shared experts (the MLP code, when the
 * block has them) have written their output into x->fcproj; the routed
 * experts' output on the local tokens is added to it (or is it). */
static void moe_block_forward(mt_gpt *m, int l, const mt_block_tensors *w, const layer_acts *x,
                              int B) {
  const mt_ops *o = m->ops;
  const int C = m->shape.n_embd;
  const size_t BT = (size_t)B * m->T, N = (size_t)B * m->Ts;
  const int shared = m->mlp_local[l] > 0;
  const float *xl = moe_local_tokens(m, x->ln2, m->moe_xloc, B);
  mt_moe_forward(m, l, w, &x->moe, xl, m->moe_out, B, m->Ts);
  if (m->moe_slice) { /* every tp rank's slices back into the whole (BT,C) */
    float *full = shared ? m->moe_full : x->fcproj;
    mt_tp_gather_seq(&m->tp, m->moe_out, full, B, m->T, C);
    if (shared) o->axpy(x->fcproj, 1.0f, full, BT * C);
  } else if (shared) {
    o->axpy(x->fcproj, 1.0f, m->moe_out, N * C);
  } else {
    o->copy(x->fcproj, m->moe_out, N * C);
  }
}

/* Forward of one block from its input x0 (BTs,C) into x. */
static void layer_forward(mt_gpt *m, int l, const mt_block_tensors *w, const float *x0,
                          const layer_acts *x, int B) {
  const mt_ops *o = m->ops;
  const int T = m->T, C = m->shape.n_embd, BT = B * T;
  const int BTs = B * m->T_sp, Cl = m->C_local, Fl = m->mlp_local[l];
  const size_t btc = (size_t)BTs * C;
  /* a row-parallel bias is added once, by tp rank 0, before the sum over tp */
  const int bias_rank = m->tp.rank == 0;
  /* attention: LN, column-parallel QKV (local heads), row-parallel proj */
  o->layernorm_forward(x->ln1, x->ln1_mean, x->ln1_rstd, x0, w->ln1_w, w->ln1_b, BTs, C);
  o->matmul_forward(x->qkv, column_input(m, x->ln1, B), w->qkv_w, w->qkv_b, BT, C, 3 * Cl);
  mt_cp_attention_forward(&m->cp, x->atty, x->qkv, &x->att, B);
  o->matmul_forward(row_partial(m, x->attproj), x->atty, w->attn_proj_w,
                    bias_rank ? w->attn_proj_b : NULL, BT, Cl, C);
  row_output(m, x->attproj, B);
  o->residual_forward(x->res2, x0, x->attproj, btc);
  /* MLP (a MoE block: its shared experts, if any): LN, column-parallel fc +
   * GELU, row-parallel proj; then a MoE block's routed experts */
  o->layernorm_forward(x->ln2, x->ln2_mean, x->ln2_rstd, x->res2, w->ln2_w, w->ln2_b, BTs, C);
  if (Fl > 0) {
    o->matmul_forward(x->fch, column_input(m, x->ln2, B), w->fc_w, w->fc_b, BT, C, Fl);
    o->gelu_forward(x->fchg, x->fch, (size_t)BT * Fl);
    o->matmul_forward(row_partial(m, x->fcproj), x->fchg, w->fc_proj_w,
                      bias_rank ? w->fc_proj_b : NULL, BT, Fl, C);
    row_output(m, x->fcproj, B);
  }
  if (x->is_moe) moe_block_forward(m, l, w, x, B);
  o->residual_forward(x->res3, x->res2, x->fcproj, btc);
}

/* Recompute: layer l's activations into the workspace again, from its
 * input; the same kernels on the same input give the stored values bit for
 * bit (the output goes to the workspace, the set's copy stays). */
static void layer_recompute(mt_gpt *m, int l, const float *x0, const layer_acts *x, int B) {
  layer_acts r = *x;
  r.res3 = m->ws.residual3;
  layer_forward(m, l, &m->p.blocks[l], x0, &r, B);
}

/* The backward of a MoE block's routed experts from dres (the gradient of
 * the block's MLP output, (BTs,C)): their input gradient, added to the
 * shared experts' dln (BTs,C) or, without shared experts, written into
 * spare (BT,C). Returns the gradient of the ln2 output. */
static const float *moe_block_backward(mt_gpt *m, int l, const layer_acts *x, const float *dres,
                                       const float *dln, float *spare, float dloss, int B) {
  const mt_ops *o = m->ops;
  const int C = m->shape.n_embd;
  const size_t BT = (size_t)B * m->T, N = (size_t)B * m->Ts;
  const int shared = dln != NULL;
  const float *xl = moe_local_tokens(m, x->ln2, m->moe_xloc, B);
  const float *dl = moe_local_tokens(m, dres, m->moe_out, B);
  /* where the local tokens' input gradient accumulates */
  float *dx = m->moe_slice ? m->moe_dxl : shared ? (float *)dln : spare;
  if (m->moe_slice || !shared) o->zero(dx, N * C);
  mt_moe_backward(m, l, &m->p.blocks[l], &m->g.blocks[l], &x->moe, xl, dl, dx, B, m->Ts, dloss);
  if (!m->moe_slice) return shared ? dln : spare;
  /* each tp rank's tokens' gradients, gathered into the whole (BT,C) */
  float *full = shared ? m->moe_full : spare;
  mt_tp_gather_seq(&m->tp, dx, full, B, m->T, C);
  if (!shared) return full;
  o->axpy((float *)dln, 1.0f, full, BT * C);
  return dln;
}

/* Backward of block l: dres (BTs,C) holds d(output) and becomes d(input).
 * input_only: no linear's weight or bias gradient; their output gradients
 * go to x->dy_* for layer_backward_weight (LayerNorm gradients stay here). */
static void layer_backward(mt_gpt *m, int l, const float *x0, const layer_acts *x, float *dres,
                           int input_only, float dloss, int B) {
  const mt_ops *o = m->ops;
  const int T = m->T, C = m->shape.n_embd, BT = B * T;
  const int BTs = B * m->T_sp, Cl = m->C_local, Fl = m->mlp_local[l];
  const size_t bt = (size_t)BT;
  const mt_block_tensors *w = &m->p.blocks[l];
  mt_block_tensors *g = &m->g.blocks[l];
  mt_gpt_acts *d = &m->d;
  float *dpart = d->ln1;
  const float *dln = NULL, *dy;
  /* the weight and bias gradients of a full backward; NULL in the input pass */
#define WG(p) (input_only ? NULL : (p))
  /* MLP: dres is d(residual3) = d(fcproj) and flows on to d(residual2) */
  if (Fl > 0) {
    dy = row_dout(m, dres, B);
    if (input_only) {
      o->copy(x->dy_fcproj, dy, bt * C);
      dy = x->dy_fcproj;
    }
    o->zero(d->fch_gelu, bt * Fl);
    o->matmul_backward(d->fch_gelu, WG(g->fc_proj_w), WG(g->fc_proj_b), dy, x->fchg,
                       w->fc_proj_w, BT, Fl, C);
    float *dfch = input_only ? x->dy_fc : d->fch;
    o->zero(dfch, bt * Fl);
    o->gelu_backward(dfch, x->fch, d->fch_gelu, bt * Fl);
    o->zero(dpart, bt * C);
    o->matmul_backward(dpart, WG(g->fc_w), WG(g->fc_b), dfch,
                       input_only ? NULL : column_input(m, x->ln2, B), w->fc_w, BT, C, Fl);
    dln = column_dinput(m, dpart, B);
  }
  if (x->is_moe) dln = moe_block_backward(m, l, x, dres, dln, dpart, dloss, B);
  o->layernorm_backward(dres, g->ln2_w, g->ln2_b, dln, x->res2, w->ln2_w, x->ln2_mean,
                        x->ln2_rstd, BTs, C);
  /* attention: dres is now d(residual2) = d(attproj) and flows on to d(input) */
  dy = row_dout(m, dres, B);
  if (input_only) {
    o->copy(x->dy_attproj, dy, bt * C);
    dy = x->dy_attproj;
  }
  o->zero(d->atty, bt * Cl);
  o->matmul_backward(d->atty, WG(g->attn_proj_w), WG(g->attn_proj_b), dy, x->atty,
                     w->attn_proj_w, BT, Cl, C);
  float *dqkv = input_only ? x->dy_qkv : d->qkv;
  mt_cp_attention_backward(&m->cp, dqkv, d->atty, x->atty, x->qkv, &x->att, B);
  o->zero(dpart, bt * C);
  o->matmul_backward(dpart, WG(g->qkv_w), WG(g->qkv_b), dqkv,
                     input_only ? NULL : column_input(m, x->ln1, B), w->qkv_w, BT, C, 3 * Cl);
  dln = column_dinput(m, dpart, B);
  o->layernorm_backward(dres, g->ln1_w, g->ln1_b, dln, x0, w->ln1_w, x->ln1_mean, x->ln1_rstd,
                        BTs, C);
#undef WG
}

/* The weight pass of block l: dW += dY^T X, db += sum dY for each linear,
 * from the output gradients the input pass kept (dense blocks only: MoE
 * models keep no split backward). */
static void layer_backward_weight(mt_gpt *m, int l, const layer_acts *x, int B) {
  const mt_ops *o = m->ops;
  const int BT = B * m->T, C = m->shape.n_embd, Cl = m->C_local, Fl = m->mlp_local[l];
  mt_block_tensors *g = &m->g.blocks[l];
  o->matmul_backward(NULL, g->fc_proj_w, g->fc_proj_b, x->dy_fcproj, x->fchg, NULL, BT, Fl, C);
  o->matmul_backward(NULL, g->fc_w, g->fc_b, x->dy_fc, column_input(m, x->ln2, B), NULL, BT, C,
                     Fl);
  o->matmul_backward(NULL, g->attn_proj_w, g->attn_proj_b, x->dy_attproj, x->atty, NULL, BT, Cl,
                     C);
  o->matmul_backward(NULL, g->qkv_w, g->qkv_b, x->dy_qkv, column_input(m, x->ln1, B), NULL, BT,
                     C, 3 * Cl);
}

/* ------------------------------------------------------------------ */
/* layer ranges: the pipeline stages' units, and the whole model        */

/* The vocabulary-parallel embedding of the micro-batch's tokens with the
 * positions of this rank's chunks: out (BT,C) = wte[token] (rows held here)
 * + wpe[position] (wpe NULL: none). One call for one chunk (cp = 1: the
 * whole sequence from position 0), else one per sequence and chunk. */
static void embed_forward(mt_gpt *m, float *out, const float *wpe, int B) {
  const mt_cp_layout *l = &m->cp.lay;
  const int C = m->shape.n_embd, T = m->T, len = l->chunk_len;
  for (int b = 0; b < (l->n_chunks == 1 ? 1 : B); b++)
    for (int c = 0; c < l->n_chunks; c++) {
      size_t r0 = (size_t)b * T + (size_t)c * len;
      m->ops->encoder_vp_forward(out + r0 * C, m->tok_in + r0, m->p.wte, m->v_start, m->V_local,
                                 wpe ? wpe + (size_t)l->chunk_pos[c] * C : NULL,
                                 l->n_chunks == 1 ? B : 1, len, C);
    }
}

/* Its backward: dwte[token] += dout (rows held here), dwpe[position] += dout. */
static void embed_backward(mt_gpt *m, const float *dout, int B) {
  const mt_cp_layout *l = &m->cp.lay;
  const int C = m->shape.n_embd, T = m->T, len = l->chunk_len;
  for (int b = 0; b < (l->n_chunks == 1 ? 1 : B); b++)
    for (int c = 0; c < l->n_chunks; c++) {
      size_t r0 = (size_t)b * T + (size_t)c * len;
      m->ops->encoder_vp_backward(m->g.wte, m->g.wpe + (size_t)l->chunk_pos[c] * C,
                                  dout + r0 * C, m->tok_in + r0, m->v_start, m->V_local,
                                  l->n_chunks == 1 ? B : 1, len, C);
    }
}

/* The micro-batch's tokens into backend memory (the kernels read them
 * there); called before each use, since pipeline stages interleave
 * micro-batches. */
static void stage_tokens(mt_gpt *m, const int *inputs, const int *targets, int B) {
  size_t bytes = (size_t)B * m->T * sizeof(int);
  if (inputs) m->ops->upload(m->tok_in, inputs, bytes);
  if (targets) m->ops->upload(m->tok_tgt, targets, bytes);
}

double mt_gpt_forward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed, int head,
                            const int *inputs, const int *targets, int B) {
  const mt_ops *o = m->ops;
  const int T = m->T, C = m->shape.n_embd, BT = B * T, BTs = B * m->T_sp;
  const int Vl = m->V_local, v0 = m->v_start, nreal = m->v_real;
  const size_t bt = (size_t)BT;
  if (embed) {
    /* vocabulary-parallel embedding: rows held here, zeros for the rest, and
     * the positions once (tp rank 0); summed over tp. The embeddings stay
     * acquired until their backward (the LM head reads wte again). */
    stage_tokens(m, inputs, NULL, B);
    use_unit(m, m->unit_embed, MT_PASS_FORWARD, 0);
    embed_forward(m, row_partial(m, a->encoded), m->tp.rank == 0 ? m->p.wpe : NULL, B);
    row_output(m, a->encoded, B);
  }
  for (int l = l0; l < l1; l++) {
    const size_t j = (size_t)(l - l0);
    layer_acts x = layer_at(m, a, l, l0, B);
    use_unit(m, m->unit_block[l], MT_PASS_FORWARD, 0);
    use_unit(m, m->unit_experts[l], MT_PASS_FORWARD, 0);
    layer_forward(m, l, &m->p.blocks[l], layer_input(m, a, j, B), &x, B);
    params_done(m, m->unit_experts[l], MT_PASS_FORWARD);
    params_done(m, m->unit_block[l], MT_PASS_FORWARD);
  }
  if (!head) return 0.0;
  /* the head: the final LN and the tied LM head (wte), kept until backward */
  stage_tokens(m, NULL, targets, B);
  use_unit(m, m->unit_final, MT_PASS_FORWARD, 0);
  use_unit(m, m->unit_embed, MT_PASS_FORWARD, 0);
  const float *last = mt_gpt_range_output(m, a, l1 - l0, B);
  o->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, m->p.lnf_w, m->p.lnf_b, BTs, C);
  /* vocabulary-parallel LM head and cross-entropy: this rank's logit columns,
   * then row statistics summed over tp (the logits never move) */
  o->matmul_forward(a->logits, column_input(m, a->lnf, B), m->p.wte, NULL, BT, C, Vl);
  o->xent_vp_max(m->rowmax, a->logits, BT, Vl, nreal);
  mt_tp_allreduce_max(&m->tp, m->rowmax, bt);
  o->xent_vp_exp(m->xent_stats, a->logits, a->logits, m->rowmax, m->tok_tgt, v0, BT, Vl, nreal);
  mt_tp_allreduce_f64(&m->tp, m->xent_stats, 2 * bt);
  o->xent_vp_finish(a->losses, a->logits, m->xent_stats, m->rowmax, BT, Vl, nreal);
  return o->sum(a->losses, bt);
}

/* The backward of a range (input_only: the input pass of a split one); hook
 * as mt_gpt_backward's (l1 after the head, each layer, -1 after embed). Each
 * unit's gradients are reported complete to the state source as soon as
 * they are (a full backward only: a split one completes them in the weight
 * pass, and reports nothing). */
static const float *backward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed,
                                   int head, const int *inputs, const int *targets,
                                   const float *dout, float dloss, int B, int input_only,
                                   mt_grad_ready_fn hook, void *ctx) {
  const mt_ops *o = m->ops;
  const int T = m->T, C = m->shape.n_embd, BT = B * T, BTs = B * m->T_sp;
  const int Vl = m->V_local, v0 = m->v_start;
  const size_t btc = (size_t)BTs * C, bt = (size_t)BT;
  const int report = !m->split_backward;
  float *dres = m->d.residual3, *dpart = m->d.ln1;
  if (head) {
    /* loss -> logits (in place over the probabilities, kept there for the
     * weight pass) -> lnf -> residual stream */
    stage_tokens(m, NULL, targets, B);
    use_unit(m, m->unit_final, MT_PASS_BACKWARD, 1);
    use_unit(m, m->unit_embed, MT_PASS_BACKWARD, 1);
    o->xent_vp_backward(a->logits, a->logits, m->tok_tgt, v0, dloss, BT, Vl, m->v_real);
    o->zero(dpart, bt * C);
    o->matmul_backward(dpart, input_only ? NULL : m->g.wte, NULL, a->logits,
                       input_only ? NULL : column_input(m, a->lnf, B), m->p.wte, BT, C, Vl);
    const float *dln = column_dinput(m, dpart, B);
    o->zero(dres, btc);
    o->layernorm_backward(dres, m->g.lnf_w, m->g.lnf_b, dln, mt_gpt_range_output(m, a, l1 - l0, B),
                          m->p.lnf_w, a->lnf_mean, a->lnf_rstd, BTs, C);
    if (report) grads_done(m, m->unit_final);
    params_done(m, m->unit_final, MT_PASS_BACKWARD);
    if (hook) hook(ctx, l1);
  } else {
    o->copy(dres, dout, btc);
  }
  for (int l = l1 - 1; l >= l0; l--) {
    const size_t j = (size_t)(l - l0);
    layer_acts x = layer_at(m, a, l, l0, B);
    const float *x0 = layer_input(m, a, j, B);
    /* a MoE block's experts first: backward goes down the flat order */
    use_unit(m, m->unit_experts[l], MT_PASS_BACKWARD, 1);
    use_unit(m, m->unit_block[l], MT_PASS_BACKWARD, 1);
    if (m->recompute) layer_recompute(m, l, x0, &x, B);
    layer_backward(m, l, x0, &x, dres, input_only, dloss, B);
    if (report) grads_done(m, m->unit_experts[l]);
    if (report) grads_done(m, m->unit_block[l]);
    params_done(m, m->unit_experts[l], MT_PASS_BACKWARD);
    params_done(m, m->unit_block[l], MT_PASS_BACKWARD);
    if (hook) hook(ctx, l);
  }
  /* every rank sees the whole gradient of the embedding output: its wte rows
   * and all of wpe get their full gradients, no sum over tp needed */
  if (embed) {
    stage_tokens(m, inputs, NULL, B);
    use_unit(m, m->unit_embed, MT_PASS_BACKWARD, 1);
    embed_backward(m, row_dout(m, dres, B), B);
  }
  if (embed || head) {
    /* the embeddings' last use in this backward (a stage with the head but
     * not the embedding holds the tied LM head's copy) */
    if (report) grads_done(m, m->unit_embed);
    params_done(m, m->unit_embed, MT_PASS_BACKWARD);
    if (embed && hook) hook(ctx, -1);
  }
  return dres;
}

const float *mt_gpt_backward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed, int head,
                                   const int *inputs, const int *targets, const float *dout,
                                   float dloss, int B) {
  return backward_range(m, a, l0, l1, embed, head, inputs, targets, dout, dloss, B, 0, NULL,
                        NULL);
}

const float *mt_gpt_backward_range_input(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed,
                                         int head, const int *inputs, const int *targets,
                                         const float *dout, float dloss, int B) {
  if (!m->split_backward) mt_die("mt_gpt_backward_range_input: the model keeps no split backward");
  return backward_range(m, a, l0, l1, embed, head, inputs, targets, dout, dloss, B, 1, NULL,
                        NULL);
}

void mt_gpt_backward_range_weight(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int head, int B) {
  const int BT = B * m->T, C = m->shape.n_embd;
  if (head) { /* the LM head: a->logits holds d(logits) since the input pass */
    use_unit(m, m->unit_final, MT_PASS_BACKWARD, 1);
    use_unit(m, m->unit_embed, MT_PASS_BACKWARD, 1);
    m->ops->matmul_backward(NULL, m->g.wte, NULL, a->logits, column_input(m, a->lnf, B), NULL,
                            BT, C, m->V_local);
  }
  for (int l = l1 - 1; l >= l0; l--) {
    const size_t j = (size_t)(l - l0);
    layer_acts x = layer_at(m, a, l, l0, B);
    use_unit(m, m->unit_block[l], MT_PASS_BACKWARD, 1);
    if (m->recompute) layer_recompute(m, l, layer_input(m, a, j, B), &x, B);
    layer_backward_weight(m, l, &x, B);
  }
}

/* The whole model: the range [0, n_layer) over m->a, with the embedding and
 * the head; the tokens are kept for backward. */
float mt_gpt_forward(mt_gpt *m, const int *inputs, const int *targets, int B) {
  const size_t bt = (size_t)B * m->T;
  memcpy(m->inputs, inputs, bt * sizeof(int));
  memcpy(m->targets, targets, bt * sizeof(int));
  double sum = mt_gpt_forward_range(m, &m->a, 0, m->shape.n_layer, 1, 1, inputs, targets, B);
  m->cur_B = B;
  return (float)(sum / (double)bt);
}

void mt_gpt_backward(mt_gpt *m, float dloss, mt_grad_ready_fn hook, void *ctx) {
  backward_range(m, &m->a, 0, m->shape.n_layer, 1, 1, m->inputs, m->targets, NULL, dloss,
                 m->cur_B, 0, hook, ctx);
}
