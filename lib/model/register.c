/* The model's tensors in the registry: names, global shapes, placements on
 * every axis, units and pipeline stages, init rules and weight decay. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>

/* What every tensor of the model shares at registration: the layer (its
 * unit) and the pipeline stages that hold it. */
typedef struct {
  mt_registry *r;
  const mt_gpt_layout *lay;
  int layer;
} reg_ctx;

/* a block on a stage other than 0 */
static int has_later_stage(const mt_gpt_layout *lay) {
  for (int l = 0; l < lay->n_layer; l++)
    if (lay->stage_of_layer[l] != 0) return 1;
  return 0;
}

static int stage_of(const reg_ctx *c, int layer) {
  const mt_gpt_layout *lay = c->lay;
  if (!lay || !lay->stage_of_layer) return -1; /* every stage */
  if (layer == MT_LAYER_EMBED) return 0;
  if (layer >= lay->n_layer) return lay->pp_last;
  return lay->stage_of_layer[layer];
}

/* a dense tensor: placed on tp, replicated over ep, reduced over dp */
static int reg_tensor(const reg_ctx *c, const char *name, int ndim, const int64_t *shape,
                      mt_placement tp, mt_init_rule init, float std, int decay, int partial_grad) {
  mt_tensor_spec s = {.name = name, .ndim = ndim, .shape = shape, .padded = NULL, .tp = tp,
                      .ep = mt_replicated(), .layer = c->layer, .pp_stage = stage_of(c, c->layer),
                      .pp_copy = -1, .init = init, .init_std = std, .weight_decay = decay,
                      .tied_to = NULL, .tp_partial_grad = partial_grad, .etp = mt_replicated(),
                      .group = MT_GROUP_DP};
  return mt_registry_add_spec(c->r, &s);
}

static int reg2(const reg_ctx *c, const char *name, int64_t a, int64_t b, mt_placement p,
                float std) {
  int64_t shape[2] = {a, b};
  return reg_tensor(c, name, 2, shape, p, MT_INIT_NORMAL, std, 1, 0);
}

static void reg_bias(const reg_ctx *c, const char *name, int64_t a, mt_placement p) {
  reg_tensor(c, name, 1, &a, p, MT_INIT_ZEROS, 0.0f, 0, 0);
}

/* an expert tensor of shape (E, a[, b]): its experts split over ep (dim 0),
 * etp_dim split over etp (-1: replicated over etp), reduced over edp */
static void reg_expert(const reg_ctx *c, const char *name, int ndim, const int64_t *shape,
                       int etp_dim, int fused, mt_init_rule init, float std, int decay) {
  mt_tensor_spec s = {.name = name, .ndim = ndim, .shape = shape, .padded = NULL,
                      .tp = mt_replicated(), .ep = mt_sharded(0, 1), .layer = c->layer,
                      .pp_stage = stage_of(c, c->layer), .pp_copy = -1, .init = init,
                      .init_std = std, .weight_decay = decay, .tied_to = NULL,
                      .tp_partial_grad = 0,
                      .etp = etp_dim < 0 ? mt_replicated() : mt_sharded(etp_dim, fused),
                      .group = MT_GROUP_EDP};
  mt_registry_add_spec(c->r, &s);
}

/* a LayerNorm weight (ones) or bias (zeros): replicated over tp */
static void reg_norm(const reg_ctx *c, const char *name, int64_t C, mt_init_rule init,
                     int partial_grad) {
  reg_tensor(c, name, 1, &C, mt_replicated(), init, 0.0f, 0, partial_grad);
}

/* a tensor-parallel MLP of F hidden units under prefix (blocks.l.mlp or
 * blocks.l.moe.shared): gpt2's fc, or llama's gate and up (one after the
 * other: a rank's (2 F_l, C) matrix), then proj; biases where bias */
static void reg_mlp(const reg_ctx *c, int l, const char *prefix, int64_t F, int64_t C, int llama,
                    int bias, float std, float proj_std) {
  char n[MT_NAME_MAX];
  static const char *const in_gpt2[] = {"fc"}, *const in_llama[] = {"gate", "up"};
  const char *const *in = llama ? in_llama : in_gpt2;
  for (int i = 0; i < (llama ? 2 : 1); i++) {
    snprintf(n, sizeof n, "blocks.%d.%s.%s.weight", l, prefix, in[i]);
    reg2(c, n, F, C, mt_sharded(0, 1), std);
  }
  for (int i = 0; bias && i < (llama ? 2 : 1); i++) {
    snprintf(n, sizeof n, "blocks.%d.%s.%s.bias", l, prefix, in[i]);
    reg_bias(c, n, F, mt_sharded(0, 1));
  }
  snprintf(n, sizeof n, "blocks.%d.%s.proj.weight", l, prefix);
  reg2(c, n, C, F, mt_sharded(1, 1), proj_std);
  snprintf(n, sizeof n, "blocks.%d.%s.proj.bias", l, prefix);
  if (bias) reg_bias(c, n, C, mt_replicated());
}

/* Registration order is forward order, one layer's tensors together, so the
 * gradients of a layer form one contiguous range (a unit) that is final as
 * soon as the layer's backward is done (bucketed data-parallel reduction and
 * ZeRO rely on it). Placements on tp (Megatron): column-parallel weights and
 * their biases split dim 0 (gpt2's QKV as 3 fused blocks, so each rank holds
 * its heads of q, k and v; llama's q, k and v each, k and v replicated where
 * tp does not divide the key/value heads), row-parallel weights dim 1 with
 * replicated biases, the embedding and an untied LM head dim 0 (vocabulary),
 * norms and positions replicated.
 * Init (GPT-2): weights N(0, 0.02), the residual projections N(0,
 * 0.02/sqrt(2L)), LayerNorm weights 1, biases 0. The pipeline: layer l's
 * tensors on stage_of_layer[l], the embeddings on the first stage, the
 * final LN on the last, and the tied LM head a copy of wte on the last. */
int mt_gpt_register_layout(mt_registry *r, const mt_model_shape *shape,
                           const mt_gpt_layout *lay, mt_err *e) {
  const mt_model_shape full = mt_model_complete(shape), *s = &full;
  int64_t C = s->n_embd, F = s->ffn, Ckv = (int64_t)s->n_kv_head * (s->n_embd / s->n_head);
  const int llama = mt_model_llama(s), tp = lay->tp_size;
  /* Under sp the norms see T/tp positions on each rank: partial gradients.
   * The row-parallel biases and wpe take theirs from a gathered (whole)
   * output gradient, complete on every rank. */
  int partial = lay->sp && tp > 1;
  /* key/value heads split over tp where tp divides them, else every rank
   * holds them all and uses those of its query heads: partial gradients */
  const int kv_split = s->n_kv_head % tp == 0, kv_partial = !kv_split && tp > 1;
  const mt_placement kv_place = kv_split ? mt_sharded(0, 1) : mt_replicated();
  const float std = 0.02f, proj_std = std / sqrtf(2.0f * (float)s->n_layer);
  mt_registry_init(r, tp, lay->tp_rank);
  mt_registry_set_ep(r, lay->ep_size > 0 ? lay->ep_size : 1, lay->ep_rank);
  mt_registry_set_etp(r, lay->etp_size > 0 ? lay->etp_size : 1, lay->etp_rank);
  r->pp_rank = lay->stage_of_layer ? lay->pp_rank : 0;
  reg_ctx c = {.r = r, .lay = lay, .layer = MT_LAYER_EMBED};
  int64_t wte_shape[2] = {s->vocab, C}, wte_pad[2] = {s->vocab_padded, C};
  mt_tensor_spec wte = {.name = "wte.weight", .ndim = 2, .shape = wte_shape, .padded = wte_pad,
                        .tp = mt_sharded(0, 1), .ep = mt_replicated(), .layer = MT_LAYER_EMBED,
                        .pp_stage = stage_of(&c, MT_LAYER_EMBED), .pp_copy = -1,
                        .init = MT_INIT_NORMAL, .init_std = std, .weight_decay = 1,
                        .tied_to = s->tied ? "lm_head.weight" : NULL, .tp_partial_grad = 0,
                        .etp = mt_replicated(), .group = MT_GROUP_DP};
  /* a tied LM head reads wte on the last stage: a copy kept equal there */
  if (s->tied && lay->stage_of_layer && lay->pp_last != 0) wte.pp_copy = lay->pp_last;
  /* ... or, in a V (the head on stage 0 too), no copy: one tensor that two
   * chunks of stage 0 use, held for the whole step */
  r->tied_here = s->tied && lay->stage_of_layer && lay->pp_last == 0 && lay->pp_rank == 0 &&
                 has_later_stage(lay);
  mt_registry_set_axes(r, mt_registry_add_spec(r, &wte), "vocab,embd");
  /* learned positions (gpt2): a run at a shorter context reads the first rows */
  if (!llama)
    mt_registry_set_axes(r, reg2(&c, "wpe.weight", s->seq_len, C, mt_replicated(), std),
                         "position,embd");
  char n[MT_NAME_MAX];
  for (int l = 0; l < s->n_layer; l++) {
    c.layer = l;
#define NAME(suffix) (snprintf(n, sizeof n, "blocks.%d.%s", l, suffix), n)
    /* the norms: LayerNorm (weight, bias) or RMSNorm (weight) */
#define NORM(ln)                                                                      \
  do {                                                                                \
    reg_norm(&c, NAME(ln ".weight"), C, MT_INIT_ONES, partial);                       \
    if (!llama) reg_norm(&c, NAME(ln ".bias"), C, MT_INIT_ZEROS, partial);            \
  } while (0)
    NORM("ln1");
    /* the input projections: gpt2's fused q|k|v, or q, k, v registered one
     * after another (a rank's three shards are then one (Cl + 2 Ckv_l, C)
     * matrix in memory, and their biases one vector) */
    if (!llama) {
      reg2(&c, NAME("attn.qkv.weight"), 3 * C, C, mt_sharded(0, 3), std);
      if (s->bias) reg_bias(&c, NAME("attn.qkv.bias"), 3 * C, mt_sharded(0, 3));
    } else {
      int64_t kv[2] = {Ckv, C};
      reg2(&c, NAME("attn.q.weight"), C, C, mt_sharded(0, 1), std);
      reg_tensor(&c, NAME("attn.k.weight"), 2, kv, kv_place, MT_INIT_NORMAL, std, 1,
                 kv_partial);
      reg_tensor(&c, NAME("attn.v.weight"), 2, kv, kv_place, MT_INIT_NORMAL, std, 1,
                 kv_partial);
      if (s->bias) {
        reg_bias(&c, NAME("attn.q.bias"), C, mt_sharded(0, 1));
        reg_tensor(&c, NAME("attn.k.bias"), 1, &Ckv, kv_place, MT_INIT_ZEROS, 0.0f, 0,
                   kv_partial);
        reg_tensor(&c, NAME("attn.v.bias"), 1, &Ckv, kv_place, MT_INIT_ZEROS, 0.0f, 0,
                   kv_partial);
      }
    }
    reg2(&c, NAME("attn.proj.weight"), C, C, mt_sharded(1, 1), proj_std);
    if (s->bias) reg_bias(&c, NAME("attn.proj.bias"), C, mt_replicated());
    NORM("ln2");
    if (!mt_model_is_moe(s, l)) {
      reg_mlp(&c, l, "mlp", F, C, llama, s->bias, std, proj_std);
      continue;
    }
    /* a MoE block: the router (replicated; under tensor parallelism each tp
     * rank routes its own slice of the tokens, so its gradient is partial),
     * the shared experts (a tensor-parallel MLP), then the experts (their own
     * unit, reduced over edp) */
    int64_t E = s->moe_experts, Fe = s->moe_ffn, Fs = (int64_t)s->moe_shared * Fe;
    int64_t router[2] = {E, C};
    reg_tensor(&c, NAME("moe.router.weight"), 2, router, mt_replicated(), MT_INIT_NORMAL, std, 1,
               tp > 1);
    if (Fs > 0) reg_mlp(&c, l, "moe.shared", Fs, C, llama, s->bias, std, proj_std);
    /* the experts' input projection: gpt2's fc (E, Fe, C), or llama's gate
     * and up of each expert fused (E, 2 Fe, C), gate rows then up rows,
     * split over etp as two blocks (a rank's (2 Fe_l, C) per expert) */
    const int fin = llama ? 2 : 1, eb = !llama || s->bias;
    int64_t fc[3] = {E, fin * Fe, C}, fc_b[2] = {E, fin * Fe}, proj[3] = {E, C, Fe};
    int64_t proj_b[2] = {E, C};
    reg_expert(&c, NAME("moe.experts.fc.weight"), 3, fc, 1, fin, MT_INIT_NORMAL, std, 1);
    if (eb) reg_expert(&c, NAME("moe.experts.fc.bias"), 2, fc_b, 1, fin, MT_INIT_ZEROS, 0.0f, 0);
    reg_expert(&c, NAME("moe.experts.proj.weight"), 3, proj, 2, 1, MT_INIT_NORMAL, proj_std, 1);
    if (eb) reg_expert(&c, NAME("moe.experts.proj.bias"), 2, proj_b, -1, 1, MT_INIT_ZEROS, 0.0f, 0);
  }
  c.layer = s->n_layer;
  reg_norm(&c, "lnf.weight", C, MT_INIT_ONES, partial);
  if (!llama) reg_norm(&c, "lnf.bias", C, MT_INIT_ZEROS, partial);
#undef NORM
#undef NAME
  if (!s->tied) { /* the LM head of its own, vocabulary-parallel like wte, on the last stage */
    mt_tensor_spec head = wte;
    head.name = "lm_head.weight";
    head.layer = s->n_layer;
    head.pp_stage = stage_of(&c, s->n_layer);
    head.pp_copy = -1;
    head.tied_to = NULL;
    mt_registry_set_axes(r, mt_registry_add_spec(r, &head), "vocab,embd");
  }
  return mt_registry_finalize(r, e);
}

int mt_gpt_register(mt_registry *r, const mt_model_shape *s, int tp_size, int tp_rank, int sp,
                    mt_err *e) {
  mt_gpt_layout lay = {.tp_size = tp_size, .tp_rank = tp_rank, .sp = sp, .n_layer = s->n_layer,
                       .stage_of_layer = NULL, .pp_last = 0, .pp_rank = 0, .ep_size = 1,
                       .ep_rank = 0, .etp_size = 1, .etp_rank = 0};
  return mt_gpt_register_layout(r, s, &lay, e);
}

int mt_gpt_register_stages(mt_registry *r, const int *stage_of_layer, int last_stage,
                           int pp_rank, mt_err *e) {
  int n_layer = 0;
  for (int i = 0; i < r->n; i++)
    if (r->t[i].layer + 1 > n_layer) n_layer = r->t[i].layer + 1;
  n_layer--; /* the final LN's layer is n_layer */
  mt_gpt_layout lay = {.tp_size = r->tp_size, .tp_rank = r->tp_rank, .sp = 0,
                       .n_layer = n_layer, .stage_of_layer = stage_of_layer,
                       .pp_last = last_stage, .pp_rank = pp_rank, .ep_size = r->ep_size,
                       .ep_rank = r->ep_rank, .etp_size = r->etp_size, .etp_rank = r->etp_rank};
  reg_ctx c = {.r = r, .lay = &lay, .layer = 0};
  for (int i = 0; i < r->n; i++) {
    mt_tensor *t = &r->t[i];
    t->pp_stage = stage_of(&c, t->layer);
    t->pp_copy = t->tied_to[0] && last_stage != 0 ? last_stage : -1;
  }
  r->pp_rank = pp_rank;
  return mt_registry_finalize(r, e);
}
