/* GPT-2 forward and backward over the registry's flat buffers. */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* shapes and presets                                                  */

static int pad_vocab(int v) { return (v + 63) / 64 * 64; }

int mt_model_preset(const char *name, mt_model_shape *s) {
  memset(s, 0, sizeof *s);
  if (strcmp(name, "tiny") == 0) {
    *s = (mt_model_shape){2, 32, 4, 32, 256, 0};
  } else if (strcmp(name, "small") == 0) {
    *s = (mt_model_shape){6, 384, 6, 256, 256, 0};
  } else if (strcmp(name, "gpt2-124m") == 0) {
    *s = (mt_model_shape){12, 768, 12, 1024, 50257, 0};
  } else if (strcmp(name, "custom") == 0) {
    *s = (mt_model_shape){0, 0, 0, 0, 256, 0};
  } else {
    return -1;
  }
  s->vocab_padded = pad_vocab(s->vocab);
  return 0;
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
  s->vocab_padded = pad_vocab(s->vocab);
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
  if (s->vocab > 65536) {
    mt_err_set(e, "model.vocab_size = %d exceeds 65536 (token files hold uint16 ids)", s->vocab);
    return -1;
  }
  return 0;
}

size_t mt_model_num_params(const mt_model_shape *s) {
  size_t C = (size_t)s->n_embd, L = (size_t)s->n_layer;
  size_t per_layer = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C +
                     4 * C * C + C;
  return (size_t)s->vocab * C + (size_t)s->seq_len * C + L * per_layer + 2 * C;
}

/* ------------------------------------------------------------------ */
/* registration                                                        */

static void reg2(mt_registry *r, const char *name, int64_t a, int64_t b, mt_placement p,
                 int decay) {
  int64_t shape[2] = {a, b};
  mt_registry_add(r, name, 2, shape, NULL, p, decay);
}
static void reg1(mt_registry *r, const char *name, int64_t a, mt_placement p) {
  int64_t shape[1] = {a};
  mt_registry_add(r, name, 1, shape, NULL, p, 0);
}

/* Registration order is forward order, one layer's tensors together, so the
 * gradients of a layer form one contiguous range that is final as soon as the
 * layer's backward is done (bucketed data-parallel reduction relies on it). */
static void register_params(mt_gpt *m) {
  const mt_model_shape *s = &m->shape;
  int64_t C = s->n_embd;
  mt_registry *r = &m->reg;
  int64_t wte_shape[2] = {s->vocab, C}, wte_pad[2] = {s->vocab_padded, C};
  int i = mt_registry_add(r, "wte.weight", 2, wte_shape, wte_pad, mt_sharded(0, 1), 1);
  snprintf(r->t[i].tied_to, sizeof r->t[i].tied_to, "lm_head.weight");
  reg2(r, "wpe.weight", s->seq_len, C, mt_replicated(), 1);
  char n[MT_NAME_MAX];
  for (int l = 0; l < s->n_layer; l++) {
#define NAME(suffix) (snprintf(n, sizeof n, "blocks.%d.%s", l, suffix), n)
    reg1(r, NAME("ln1.weight"), C, mt_replicated());
    reg1(r, NAME("ln1.bias"), C, mt_replicated());
    reg2(r, NAME("attn.qkv.weight"), 3 * C, C, mt_sharded(0, 3), 1);
    reg1(r, NAME("attn.qkv.bias"), 3 * C, mt_sharded(0, 3));
    reg2(r, NAME("attn.proj.weight"), C, C, mt_sharded(1, 1), 1);
    reg1(r, NAME("attn.proj.bias"), C, mt_replicated());
    reg1(r, NAME("ln2.weight"), C, mt_replicated());
    reg1(r, NAME("ln2.bias"), C, mt_replicated());
    reg2(r, NAME("mlp.fc.weight"), 4 * C, C, mt_sharded(0, 1), 1);
    reg1(r, NAME("mlp.fc.bias"), 4 * C, mt_sharded(0, 1));
    reg2(r, NAME("mlp.proj.weight"), C, 4 * C, mt_sharded(1, 1), 1);
    reg1(r, NAME("mlp.proj.bias"), C, mt_replicated());
#undef NAME
  }
  reg1(r, "lnf.weight", C, mt_replicated());
  reg1(r, "lnf.bias", C, mt_replicated());
}

/* Point the named views at the flat buffer base. */
static void bind_views(mt_gpt *m, float *base, mt_gpt_tensors *v) {
  const mt_registry *r = &m->reg;
  int k = 0;
  v->wte = base + r->t[k++].offset;
  v->wpe = base + r->t[k++].offset;
  for (int l = 0; l < m->shape.n_layer; l++) {
    mt_block_tensors *b = &v->blocks[l];
    float **slots[] = {&b->ln1_w, &b->ln1_b, &b->qkv_w, &b->qkv_b, &b->attn_proj_w,
                       &b->attn_proj_b, &b->ln2_w, &b->ln2_b, &b->fc_w, &b->fc_b,
                       &b->fc_proj_w, &b->fc_proj_b};
    for (size_t j = 0; j < sizeof slots / sizeof slots[0]; j++) *slots[j] = base + r->t[k++].offset;
  }
  v->lnf_w = base + r->t[k++].offset;
  v->lnf_b = base + r->t[k++].offset;
}

size_t mt_gpt_layer_offset(const mt_gpt *m, int layer) {
  if (layer < 0) return 0;
  if (layer > m->shape.n_layer) return m->reg.numel_local;
  return m->reg.t[2 + 12 * layer].offset; /* 2 embedding tensors, 12 per block */
}

/* ------------------------------------------------------------------ */
/* life cycle                                                          */

static float *act(mt_gpt *m, size_t n) {
  if (m->n_act == MT_GPT_MAX_ACT_BUFFERS) mt_die("too many activation buffers");
  float *p = mt_mem_alloc(MT_MEM_ACTIV, n * sizeof(float));
  m->act_ptr[m->n_act] = p;
  m->act_size[m->n_act++] = n * sizeof(float);
  m->act_bytes += n * sizeof(float);
  return p;
}

int mt_gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                  mt_err *e) {
  memset(m, 0, sizeof *m);
  m->shape = *shape;
  m->ops = ops;
  m->max_B = max_B;
  m->T = shape->seq_len;
  mt_registry_init(&m->reg, 1, 0);
  register_params(m);
  char msg[256];
  if (mt_registry_finalize(&m->reg, msg, sizeof msg) != 0) {
    mt_err_set(e, "%s", msg);
    return -1;
  }
  size_t n = m->reg.numel_local;
  m->params = mt_mem_alloc(MT_MEM_PARAMS, n * sizeof(float));
  m->grads = mt_mem_alloc(MT_MEM_GRADS, n * sizeof(float));
  m->p.blocks = mt_calloc((size_t)shape->n_layer, sizeof(mt_block_tensors));
  m->g.blocks = mt_calloc((size_t)shape->n_layer, sizeof(mt_block_tensors));
  bind_views(m, m->params, &m->p);
  bind_views(m, m->grads, &m->g);

  size_t B = (size_t)max_B, T = (size_t)m->T, C = (size_t)shape->n_embd, L = (size_t)shape->n_layer;
  size_t NH = (size_t)shape->n_head, Vp = (size_t)shape->vocab_padded, BT = B * T;
  mt_gpt_acts *a = &m->a;
  a->encoded = act(m, BT * C);
  a->ln1 = act(m, L * BT * C);
  a->ln1_mean = act(m, L * BT);
  a->ln1_rstd = act(m, L * BT);
  a->qkv = act(m, L * BT * 3 * C);
  a->atty = act(m, L * BT * C);
  a->att = act(m, L * B * NH * T * T);
  a->attproj = act(m, L * BT * C);
  a->residual2 = act(m, L * BT * C);
  a->ln2 = act(m, L * BT * C);
  a->ln2_mean = act(m, L * BT);
  a->ln2_rstd = act(m, L * BT);
  a->fch = act(m, L * BT * 4 * C);
  a->fch_gelu = act(m, L * BT * 4 * C);
  a->fcproj = act(m, L * BT * C);
  a->residual3 = act(m, L * BT * C);
  a->lnf = act(m, BT * C);
  a->lnf_mean = act(m, BT);
  a->lnf_rstd = act(m, BT);
  a->logits = act(m, BT * Vp);
  a->losses = act(m, BT);
  /* backward scratch: one layer's worth, reused layer after layer */
  mt_gpt_acts *d = &m->d;
  d->residual3 = act(m, BT * C); /* the gradient of the residual stream */
  d->ln1 = act(m, BT * C);       /* d of a LayerNorm output (ln1, ln2, lnf) */
  d->qkv = act(m, BT * 3 * C);
  d->atty = act(m, BT * C);
  d->fch = act(m, BT * 4 * C);
  d->fch_gelu = act(m, BT * 4 * C);
  m->datt = act(m, B * NH * T * T);
  m->inputs = mt_calloc(BT, sizeof(int));
  m->targets = mt_calloc(BT, sizeof(int));
  return 0;
}

void mt_gpt_destroy(mt_gpt *m) {
  size_t n = m->reg.numel_local;
  mt_mem_free(MT_MEM_PARAMS, m->params, n * sizeof(float));
  mt_mem_free(MT_MEM_GRADS, m->grads, n * sizeof(float));
  for (int i = 0; i < m->n_act; i++) mt_mem_free(MT_MEM_ACTIV, m->act_ptr[i], m->act_size[i]);
  free(m->p.blocks);
  free(m->g.blocks);
  free(m->inputs);
  free(m->targets);
  mt_registry_free(&m->reg);
  memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------ */
/* initialisation: counter-based, layout-free                          */

static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
  return h;
}

/* standard normal for element idx of a tensor keyed by key (Box-Muller) */
static double normal_at(uint64_t key, uint64_t idx) {
  uint64_t a = splitmix64(key ^ splitmix64(2 * idx)), b = splitmix64(key ^ splitmix64(2 * idx + 1));
  double u1 = ((double)(a >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

void mt_gpt_init_params(mt_gpt *m, uint64_t seed) {
  const float std = 0.02f;
  const float proj_std = std / sqrtf(2.0f * (float)m->shape.n_layer);
  for (int i = 0; i < m->reg.n; i++) {
    const mt_tensor *t = &m->reg.t[i];
    float *p = m->params + t->offset;
    if (ends_with(t->name, ".bias")) {
      memset(p, 0, t->numel_local * sizeof(float));
      continue;
    }
    if (strstr(t->name, "ln") == t->name || strstr(t->name, ".ln")) {
      for (size_t j = 0; j < t->numel_local; j++) p[j] = 1.0f;
      continue;
    }
    float sd = (ends_with(t->name, "attn.proj.weight") || ends_with(t->name, "mlp.proj.weight"))
                   ? proj_std : std;
    uint64_t key = splitmix64(seed ^ hash_name(t->name));
    size_t row_len = (size_t)t->padded[t->ndim - 1];
    for (size_t j = 0; j < t->numel_local; j++) {
      size_t g = mt_tensor_global_index(t, j, m->reg.tp_size);
      /* padding rows (beyond the true extent of dim 0) stay zero */
      if (t->ndim == 2 && (int64_t)(g / row_len) >= t->shape[0]) {
        p[j] = 0.0f;
        continue;
      }
      p[j] = (float)(sd * normal_at(key, g));
    }
  }
}

void mt_gpt_zero_grad(mt_gpt *m) { memset(m->grads, 0, m->reg.numel_local * sizeof(float)); }

/* ------------------------------------------------------------------ */
/* forward and backward                                                */

float mt_gpt_forward(mt_gpt *m, const int *inputs, const int *targets, int B) {
  const mt_ops *o = m->ops;
  const int T = m->T, C = m->shape.n_embd, NH = m->shape.n_head, L = m->shape.n_layer;
  const int V = m->shape.vocab, Vp = m->shape.vocab_padded, BT = B * T;
  const size_t btc = (size_t)BT * C;
  mt_gpt_acts *a = &m->a;
  memcpy(m->inputs, inputs, (size_t)BT * sizeof(int));
  memcpy(m->targets, targets, (size_t)BT * sizeof(int));

  o->encoder_forward(a->encoded, inputs, m->p.wte, m->p.wpe, B, T, C);
  for (int l = 0; l < L; l++) {
    const mt_block_tensors *w = &m->p.blocks[l];
    const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * btc;
    float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + 3 * l * btc, *atty = a->atty + l * btc;
    float *att = a->att + (size_t)l * B * NH * T * T, *attproj = a->attproj + l * btc;
    float *res2 = a->residual2 + l * btc, *ln2 = a->ln2 + l * btc;
    float *fch = a->fch + 4 * l * btc, *fchg = a->fch_gelu + 4 * l * btc;
    float *fcproj = a->fcproj + l * btc, *res3 = a->residual3 + l * btc;
    o->layernorm_forward(ln1, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, residual, w->ln1_w,
                         w->ln1_b, BT, C);
    o->matmul_forward(qkv, ln1, w->qkv_w, w->qkv_b, BT, C, 3 * C);
    o->attention_forward(atty, att, qkv, B, T, C, NH);
    o->matmul_forward(attproj, atty, w->attn_proj_w, w->attn_proj_b, BT, C, C);
    o->residual_forward(res2, residual, attproj, btc);
    o->layernorm_forward(ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, res2, w->ln2_w,
                         w->ln2_b, BT, C);
    o->matmul_forward(fch, ln2, w->fc_w, w->fc_b, BT, C, 4 * C);
    o->gelu_forward(fchg, fch, 4 * btc);
    o->matmul_forward(fcproj, fchg, w->fc_proj_w, w->fc_proj_b, BT, 4 * C, C);
    o->residual_forward(res3, res2, fcproj, btc);
  }
  const float *last = a->residual3 + (size_t)(L - 1) * btc;
  o->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, m->p.lnf_w, m->p.lnf_b, BT, C);
  o->matmul_forward(a->logits, a->lnf, m->p.wte, NULL, BT, C, Vp);
  o->softmax_xent_forward(a->losses, a->logits, a->logits, targets, BT, V, Vp);
  double sum = 0.0;
  for (int i = 0; i < BT; i++) sum += a->losses[i];
  m->cur_B = B;
  return (float)(sum / BT);
}

void mt_gpt_backward(mt_gpt *m, float dloss, mt_grad_ready_fn hook, void *ctx) {
  const mt_ops *o = m->ops;
  const int B = m->cur_B, T = m->T, C = m->shape.n_embd, NH = m->shape.n_head;
  const int L = m->shape.n_layer, V = m->shape.vocab, Vp = m->shape.vocab_padded, BT = B * T;
  const size_t btc = (size_t)BT * C;
  mt_gpt_acts *a = &m->a, *d = &m->d;
  float *dres = d->residual3, *dln = d->ln1;

  /* loss -> logits (in place over the probabilities) -> lnf -> residual stream */
  o->softmax_xent_backward(a->logits, a->logits, m->targets, dloss, BT, V, Vp);
  memset(dln, 0, btc * sizeof(float));
  o->matmul_backward(dln, m->g.wte, NULL, a->logits, a->lnf, m->p.wte, BT, C, Vp);
  memset(dres, 0, btc * sizeof(float));
  const float *last = a->residual3 + (size_t)(L - 1) * btc;
  o->layernorm_backward(dres, m->g.lnf_w, m->g.lnf_b, dln, last, m->p.lnf_w, a->lnf_mean,
                        a->lnf_rstd, BT, C);
  if (hook) hook(ctx, L);

  for (int l = L - 1; l >= 0; l--) {
    const mt_block_tensors *w = &m->p.blocks[l];
    mt_block_tensors *g = &m->g.blocks[l];
    const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * btc;
    const float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + 3 * l * btc;
    const float *atty = a->atty + l * btc, *att = a->att + (size_t)l * B * NH * T * T;
    const float *res2 = a->residual2 + l * btc, *ln2 = a->ln2 + l * btc;
    const float *fch = a->fch + 4 * l * btc, *fchg = a->fch_gelu + 4 * l * btc;
    /* MLP: dres is d(residual3) = d(fcproj) and flows on to d(residual2) */
    memset(d->fch_gelu, 0, 4 * btc * sizeof(float));
    o->matmul_backward(d->fch_gelu, g->fc_proj_w, g->fc_proj_b, dres, fchg, w->fc_proj_w, BT,
                       4 * C, C);
    memset(d->fch, 0, 4 * btc * sizeof(float));
    o->gelu_backward(d->fch, fch, d->fch_gelu, 4 * btc);
    memset(dln, 0, btc * sizeof(float));
    o->matmul_backward(dln, g->fc_w, g->fc_b, d->fch, ln2, w->fc_w, BT, C, 4 * C);
    o->layernorm_backward(dres, g->ln2_w, g->ln2_b, dln, res2, w->ln2_w, a->ln2_mean + l * BT,
                          a->ln2_rstd + l * BT, BT, C);
    /* attention: dres is now d(residual2) = d(attproj) and flows on to d(residual) */
    memset(d->atty, 0, btc * sizeof(float));
    o->matmul_backward(d->atty, g->attn_proj_w, g->attn_proj_b, dres, atty, w->attn_proj_w, BT,
                       C, C);
    memset(d->qkv, 0, 3 * btc * sizeof(float));
    o->attention_backward(d->qkv, m->datt, d->atty, qkv, att, B, T, C, NH);
    memset(dln, 0, btc * sizeof(float));
    o->matmul_backward(dln, g->qkv_w, g->qkv_b, d->qkv, ln1, w->qkv_w, BT, C, 3 * C);
    o->layernorm_backward(dres, g->ln1_w, g->ln1_b, dln, residual, w->ln1_w,
                          a->ln1_mean + l * BT, a->ln1_rstd + l * BT, BT, C);
    if (hook) hook(ctx, l);
  }
  o->encoder_backward(m->g.wte, m->g.wpe, dres, m->inputs, B, T, C);
  if (hook) hook(ctx, -1);
}
