/* GPT-2 forward and backward over the registry's flat buffers. */
#include "model/model.h"

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
  s->vocab_padded = mt_model_pad_vocab(s->vocab, 1);
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

/* a LayerNorm weight or bias: replicated over tp */
static void reg_norm(mt_registry *r, const char *name, int64_t C, int partial_grad) {
  int i = mt_registry_add(r, name, 1, &C, NULL, mt_replicated(), 0);
  r->t[i].tp_partial_grad = partial_grad;
}

/* Registration order is forward order, one layer's tensors together, so the
 * gradients of a layer form one contiguous range that is final as soon as the
 * layer's backward is done (bucketed data-parallel reduction relies on it).
 * Placements on tp (Megatron): column-parallel weights and their biases split
 * dim 0 (QKV as 3 fused blocks, so each rank holds its heads of q, k and v),
 * row-parallel weights dim 1 with replicated biases, the embedding dim 0
 * (vocabulary), LayerNorms and positions replicated. */
int mt_gpt_register(mt_registry *r, const mt_model_shape *s, int tp_size, int tp_rank, int sp,
                    char *msg, size_t msg_len) {
  int64_t C = s->n_embd;
  /* Under sp the LayerNorms see T/tp positions on each rank: partial
   * gradients. The row-parallel biases and wpe take theirs from a gathered
   * (whole) output gradient, complete on every rank. */
  int partial = sp && tp_size > 1;
  mt_registry_init(r, tp_size, tp_rank);
  int64_t wte_shape[2] = {s->vocab, C}, wte_pad[2] = {s->vocab_padded, C};
  int i = mt_registry_add(r, "wte.weight", 2, wte_shape, wte_pad, mt_sharded(0, 1), 1);
  snprintf(r->t[i].tied_to, sizeof r->t[i].tied_to, "lm_head.weight");
  reg2(r, "wpe.weight", s->seq_len, C, mt_replicated(), 1);
  char n[MT_NAME_MAX];
  for (int l = 0; l < s->n_layer; l++) {
#define NAME(suffix) (snprintf(n, sizeof n, "blocks.%d.%s", l, suffix), n)
    reg_norm(r, NAME("ln1.weight"), C, partial);
    reg_norm(r, NAME("ln1.bias"), C, partial);
    reg2(r, NAME("attn.qkv.weight"), 3 * C, C, mt_sharded(0, 3), 1);
    reg1(r, NAME("attn.qkv.bias"), 3 * C, mt_sharded(0, 3));
    reg2(r, NAME("attn.proj.weight"), C, C, mt_sharded(1, 1), 1);
    reg1(r, NAME("attn.proj.bias"), C, mt_replicated());
    reg_norm(r, NAME("ln2.weight"), C, partial);
    reg_norm(r, NAME("ln2.bias"), C, partial);
    reg2(r, NAME("mlp.fc.weight"), 4 * C, C, mt_sharded(0, 1), 1);
    reg1(r, NAME("mlp.fc.bias"), 4 * C, mt_sharded(0, 1));
    reg2(r, NAME("mlp.proj.weight"), C, 4 * C, mt_sharded(1, 1), 1);
    reg1(r, NAME("mlp.proj.bias"), C, mt_replicated());
#undef NAME
  }
  reg_norm(r, "lnf.weight", C, partial);
  reg_norm(r, "lnf.bias", C, partial);
  return mt_registry_finalize(r, msg, msg_len);
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

/* whole_acts: allocate m->a for every layer (0: a pipeline stage binds its own sets) */
static int gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                      const mt_gpt_parallel *par, int whole_acts, mt_err *e);

int mt_gpt_create_parallel(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops,
                           int max_B, const mt_gpt_parallel *par, mt_err *e) {
  return gpt_create(m, shape, ops, max_B, par, 1, e);
}

int mt_gpt_create_stage(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                        const mt_gpt_parallel *par, mt_err *e) {
  return gpt_create(m, shape, ops, max_B, par, 0, e);
}

static int gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                      const mt_gpt_parallel *par, int whole_acts, mt_err *e) {
  memset(m, 0, sizeof *m);
  m->shape = *shape;
  m->ops = ops;
  m->max_B = max_B;
  m->T = shape->seq_len;
  mt_group *tp_g = par && par->tp && par->tp->size > 1 ? par->tp : NULL;
  int tp_size = tp_g ? tp_g->size : 1, tp_rank = tp_g ? tp_g->rank : 0;
  int sp = par && par->sp;
  if (sp && (!tp_g || shape->seq_len % tp_size != 0)) {
    mt_err_set(e, "sequence parallelism needs tp > 1 dividing seq_len = %d (tp = %d)",
               shape->seq_len, tp_size);
    return -1;
  }
  if (shape->n_head % tp_size != 0) {
    mt_err_set(e, "tp = %d does not divide n_head = %d", tp_size, shape->n_head);
    return -1;
  }
  char msg[256];
  if (mt_gpt_register(&m->reg, shape, tp_size, tp_rank, sp, msg, sizeof msg) != 0) {
    mt_err_set(e, "%s", msg);
    mt_registry_free(&m->reg);
    return -1;
  }
  /* this rank's share of every split dim, as the registry placed it */
  const mt_registry *r = &m->reg;
  const mt_tensor *wte = &r->t[mt_registry_find(r, "wte.weight")];
  const mt_tensor *qkv = &r->t[mt_registry_find(r, "blocks.0.attn.qkv.weight")];
  const mt_tensor *fc = &r->t[mt_registry_find(r, "blocks.0.mlp.fc.weight")];
  m->C_local = (int)(qkv->local_shape[0] / qkv->tp.fused_blocks);
  m->NH_local = m->C_local / (shape->n_embd / shape->n_head);
  m->F_local = (int)fc->local_shape[0];
  m->V_local = (int)wte->local_shape[0];
  m->v_start = (int)wte->local_start[0];
  int real = shape->vocab - m->v_start;
  m->v_real = real < 0 ? 0 : real > m->V_local ? m->V_local : real;
  m->T_sp = sp ? m->T / tp_size : m->T;

  size_t n = m->reg.numel_local;
  m->params = mt_mem_alloc(MT_MEM_PARAMS, n * sizeof(float));
  m->grads = mt_mem_alloc(MT_MEM_GRADS, n * sizeof(float));
  m->p.blocks = mt_calloc((size_t)shape->n_layer, sizeof(mt_block_tensors));
  m->g.blocks = mt_calloc((size_t)shape->n_layer, sizeof(mt_block_tensors));
  bind_views(m, m->params, &m->p);
  bind_views(m, m->grads, &m->g);

  size_t B = (size_t)max_B, T = (size_t)m->T, C = (size_t)shape->n_embd, L = (size_t)shape->n_layer;
  size_t BT = B * T, BTs = B * (size_t)m->T_sp;
  size_t Cl = (size_t)m->C_local, Fl = (size_t)m->F_local, NHl = (size_t)m->NH_local;
  size_t Vl = (size_t)m->V_local;
  mt_gpt_acts *a = &m->a;
  if (whole_acts) { /* pipeline stages bind their own sets */
  a->encoded = act(m, BTs * C);
  a->ln1 = act(m, L * BTs * C);
  a->ln1_mean = act(m, L * BTs);
  a->ln1_rstd = act(m, L * BTs);
  a->qkv = act(m, L * BT * 3 * Cl);
  a->atty = act(m, L * BT * Cl);
  a->att = act(m, L * B * NHl * T * T);
  a->attproj = act(m, L * BTs * C);
  a->residual2 = act(m, L * BTs * C);
  a->ln2 = act(m, L * BTs * C);
  a->ln2_mean = act(m, L * BTs);
  a->ln2_rstd = act(m, L * BTs);
  a->fch = act(m, L * BT * Fl);
  a->fch_gelu = act(m, L * BT * Fl);
  a->fcproj = act(m, L * BTs * C);
  a->residual3 = act(m, L * BTs * C);
  a->lnf = act(m, BTs * C);
  a->lnf_mean = act(m, BTs);
  a->lnf_rstd = act(m, BTs);
  a->logits = act(m, BT * Vl);
  a->losses = act(m, BT);
  }
  /* backward scratch: one layer's worth, reused layer after layer */
  mt_gpt_acts *d = &m->d;
  d->residual3 = act(m, BTs * C); /* the gradient of the residual stream */
  d->ln1 = act(m, BT * C);        /* d of a column-parallel input (ln1, ln2, lnf), partial over tp */
  d->qkv = act(m, BT * 3 * Cl);
  d->atty = act(m, BT * Cl);
  d->fch = act(m, BT * Fl);
  d->fch_gelu = act(m, BT * Fl);
  m->datt = act(m, B * NHl * T * T);
  if (sp) {
    m->full_in = act(m, BT * C);
    m->full_out = act(m, BT * C);
    m->dln_local = act(m, BTs * C);
  }
  m->rowmax = act(m, BT);
  m->xent_stats = (double *)act(m, 2 * BT * sizeof(double) / sizeof(float));
  m->inputs = mt_calloc(BT, sizeof(int));
  m->targets = mt_calloc(BT, sizeof(int));
  size_t partial = 0; /* every tp_partial_grad element: any range fits */
  for (int i = 0; i < r->n; i++) partial += r->t[i].tp_partial_grad ? r->t[i].numel_local : 0;
  mt_tp_create(&m->tp, tp_g, sp, BT * C, partial);
  return 0;
}

int mt_gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                  mt_err *e) {
  return mt_gpt_create_parallel(m, shape, ops, max_B, NULL, e);
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
  mt_tp_destroy(&m->tp);
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

double mt_gpt_tp_bytes(const mt_gpt *m, int B, int per_step) {
  int n = m->tp.size;
  if (n == 1) return 0.0;
  double C = m->shape.n_embd, L = m->shape.n_layer, BT = (double)B * m->T;
  size_t act = (size_t)(BT * C) * sizeof(float); /* one (B,T,C) activation */
  if (per_step) {
    size_t partial = 0;
    for (int i = 0; i < m->reg.n; i++)
      partial += m->reg.t[i].tp_partial_grad ? m->reg.t[i].numel_local : 0;
    /* one all-reduce per layer range (and the final LN) */
    return m->tp.sp ? mt_bytes_allreduce(partial * sizeof(float), n) : 0.0;
  }
  /* cross-entropy: row maxima (floats) and row sums | target logits (doubles) */
  double xent = mt_bytes_allreduce((size_t)BT * sizeof(float), n) +
                mt_bytes_allreduce((size_t)(2 * BT) * sizeof(double), n);
  if (!m->tp.sp) /* all-reduces: embedding, 2 per block forward, 2 per block backward, LM head */
    return (4 * L + 2) * mt_bytes_allreduce(act, n) + xent;
  /* per block: forward 2 gathers + 2 reduce-scatters; backward 2 gathers of
   * output gradients, 2 re-gathers of inputs, 2 reduce-scatters of input
   * gradients; embedding: reduce-scatter + gather; LM head: gather,
   * re-gather, reduce-scatter */
  return (10 * L + 5) * mt_bytes_allgather(act, n) + xent;
}

/* ------------------------------------------------------------------ */
/* forward and backward                                                */

float mt_gpt_forward(mt_gpt *m, const int *inputs, const int *targets, int B) {
  const mt_ops *o = m->ops;
  const int T = m->T, C = m->shape.n_embd, L = m->shape.n_layer, BT = B * T;
  const int BTs = B * m->T_sp, Cl = m->C_local, Fl = m->F_local, NHl = m->NH_local;
  const int Vl = m->V_local, v0 = m->v_start, nreal = m->v_real;
  const size_t btc = (size_t)BTs * C; /* one layer's slot of an sp-region activation */
  const size_t bt = (size_t)BT;
  /* a row-parallel bias is added once, by tp rank 0, before the sum over tp */
  const int bias_rank = m->tp.rank == 0;
  mt_gpt_acts *a = &m->a;
  memcpy(m->inputs, inputs, (size_t)BT * sizeof(int));
  memcpy(m->targets, targets, (size_t)BT * sizeof(int));

  /* vocabulary-parallel embedding: rows held here, zeros for the rest, and
   * the positions once (rank 0); summed over tp */
  o->encoder_vp_forward(row_partial(m, a->encoded), inputs, m->p.wte, v0, Vl,
                        bias_rank ? m->p.wpe : NULL, B, T, C);
  row_output(m, a->encoded, B);
  for (int l = 0; l < L; l++) {
    const mt_block_tensors *w = &m->p.blocks[l];
    const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * btc;
    float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + 3 * l * bt * Cl, *atty = a->atty + l * bt * Cl;
    float *att = a->att + (size_t)l * B * NHl * T * T, *attproj = a->attproj + l * btc;
    float *res2 = a->residual2 + l * btc, *ln2 = a->ln2 + l * btc;
    float *fch = a->fch + l * bt * Fl, *fchg = a->fch_gelu + l * bt * Fl;
    float *fcproj = a->fcproj + l * btc, *res3 = a->residual3 + l * btc;
    /* attention: LN, column-parallel QKV (local heads), row-parallel proj */
    o->layernorm_forward(ln1, a->ln1_mean + l * BTs, a->ln1_rstd + l * BTs, residual, w->ln1_w,
                         w->ln1_b, BTs, C);
    o->matmul_forward(qkv, column_input(m, ln1, B), w->qkv_w, w->qkv_b, BT, C, 3 * Cl);
    o->attention_forward(atty, att, qkv, B, T, Cl, NHl);
    o->matmul_forward(row_partial(m, attproj), atty, w->attn_proj_w,
                      bias_rank ? w->attn_proj_b : NULL, BT, Cl, C);
    row_output(m, attproj, B);
    o->residual_forward(res2, residual, attproj, btc);
    /* MLP: LN, column-parallel fc + GELU, row-parallel proj */
    o->layernorm_forward(ln2, a->ln2_mean + l * BTs, a->ln2_rstd + l * BTs, res2, w->ln2_w,
                         w->ln2_b, BTs, C);
    o->matmul_forward(fch, column_input(m, ln2, B), w->fc_w, w->fc_b, BT, C, Fl);
    o->gelu_forward(fchg, fch, bt * Fl);
    o->matmul_forward(row_partial(m, fcproj), fchg, w->fc_proj_w,
                      bias_rank ? w->fc_proj_b : NULL, BT, Fl, C);
    row_output(m, fcproj, B);
    o->residual_forward(res3, res2, fcproj, btc);
  }
  const float *last = a->residual3 + (size_t)(L - 1) * btc;
  o->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, m->p.lnf_w, m->p.lnf_b, BTs, C);
  /* vocabulary-parallel LM head and cross-entropy: this rank's logit columns,
   * then row statistics summed over tp (the logits never move) */
  o->matmul_forward(a->logits, column_input(m, a->lnf, B), m->p.wte, NULL, BT, C, Vl);
  o->xent_vp_max(m->rowmax, a->logits, BT, Vl, nreal);
  mt_tp_allreduce_max(&m->tp, m->rowmax, bt);
  o->xent_vp_exp(m->xent_stats, a->logits, a->logits, m->rowmax, targets, v0, BT, Vl, nreal);
  mt_tp_allreduce_f64(&m->tp, m->xent_stats, 2 * bt);
  o->xent_vp_finish(a->losses, a->logits, m->xent_stats, m->rowmax, BT, Vl, nreal);
  double sum = 0.0;
  for (int i = 0; i < BT; i++) sum += a->losses[i];
  m->cur_B = B;
  return (float)(sum / BT);
}

void mt_gpt_backward(mt_gpt *m, float dloss, mt_grad_ready_fn hook, void *ctx) {
  const mt_ops *o = m->ops;
  const int B = m->cur_B, T = m->T, C = m->shape.n_embd, L = m->shape.n_layer, BT = B * T;
  const int BTs = B * m->T_sp, Cl = m->C_local, Fl = m->F_local, NHl = m->NH_local;
  const int Vl = m->V_local, v0 = m->v_start;
  const size_t btc = (size_t)BTs * C, bt = (size_t)BT;
  mt_gpt_acts *a = &m->a, *d = &m->d;
  float *dres = d->residual3, *dpart = d->ln1;

  /* loss -> logits (in place over the probabilities) -> lnf -> residual stream */
  o->xent_vp_backward(a->logits, a->logits, m->targets, v0, dloss, BT, Vl, m->v_real);
  memset(dpart, 0, bt * C * sizeof(float));
  o->matmul_backward(dpart, m->g.wte, NULL, a->logits, column_input(m, a->lnf, B), m->p.wte, BT,
                     C, Vl);
  const float *dln = column_dinput(m, dpart, B);
  memset(dres, 0, btc * sizeof(float));
  const float *last = a->residual3 + (size_t)(L - 1) * btc;
  o->layernorm_backward(dres, m->g.lnf_w, m->g.lnf_b, dln, last, m->p.lnf_w, a->lnf_mean,
                        a->lnf_rstd, BTs, C);
  if (hook) hook(ctx, L);

  for (int l = L - 1; l >= 0; l--) {
    const mt_block_tensors *w = &m->p.blocks[l];
    mt_block_tensors *g = &m->g.blocks[l];
    const float *residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * btc;
    const float *ln1 = a->ln1 + l * btc, *qkv = a->qkv + 3 * l * bt * Cl;
    const float *atty = a->atty + l * bt * Cl, *att = a->att + (size_t)l * B * NHl * T * T;
    const float *res2 = a->residual2 + l * btc, *ln2 = a->ln2 + l * btc;
    const float *fch = a->fch + l * bt * Fl, *fchg = a->fch_gelu + l * bt * Fl;
    /* MLP: dres is d(residual3) = d(fcproj) and flows on to d(residual2) */
    memset(d->fch_gelu, 0, bt * Fl * sizeof(float));
    o->matmul_backward(d->fch_gelu, g->fc_proj_w, g->fc_proj_b, row_dout(m, dres, B), fchg,
                       w->fc_proj_w, BT, Fl, C);
    memset(d->fch, 0, bt * Fl * sizeof(float));
    o->gelu_backward(d->fch, fch, d->fch_gelu, bt * Fl);
    memset(dpart, 0, bt * C * sizeof(float));
    o->matmul_backward(dpart, g->fc_w, g->fc_b, d->fch, column_input(m, ln2, B), w->fc_w, BT, C,
                       Fl);
    dln = column_dinput(m, dpart, B);
    o->layernorm_backward(dres, g->ln2_w, g->ln2_b, dln, res2, w->ln2_w, a->ln2_mean + l * BTs,
                          a->ln2_rstd + l * BTs, BTs, C);
    /* attention: dres is now d(residual2) = d(attproj) and flows on to d(residual) */
    memset(d->atty, 0, bt * Cl * sizeof(float));
    o->matmul_backward(d->atty, g->attn_proj_w, g->attn_proj_b, row_dout(m, dres, B), atty,
                       w->attn_proj_w, BT, Cl, C);
    memset(d->qkv, 0, 3 * bt * Cl * sizeof(float));
    o->attention_backward(d->qkv, m->datt, d->atty, qkv, att, B, T, Cl, NHl);
    memset(dpart, 0, bt * C * sizeof(float));
    o->matmul_backward(dpart, g->qkv_w, g->qkv_b, d->qkv, column_input(m, ln1, B), w->qkv_w, BT,
                       C, 3 * Cl);
    dln = column_dinput(m, dpart, B);
    o->layernorm_backward(dres, g->ln1_w, g->ln1_b, dln, residual, w->ln1_w,
                          a->ln1_mean + l * BTs, a->ln1_rstd + l * BTs, BTs, C);
    if (hook) hook(ctx, l);
  }
  /* every rank sees the whole gradient of the embedding output: its wte rows
   * and all of wpe get their full gradients, no sum over tp needed */
  o->encoder_vp_backward(m->g.wte, m->g.wpe, row_dout(m, dres, B), m->inputs, v0, Vl, B, T, C);
  if (hook) hook(ctx, -1);
}

/* ------------------------------------------------------------------ */
/* pipeline stages: layer ranges over caller-owned activation sets      */
/* The same layers as mt_gpt_forward/backward, with the activations of
 * layer l0 + j in slot j of a set the caller owns (one per micro-batch in
 * flight), the range's input in a->encoded and the tokens passed in. */

typedef struct {
  size_t n;
  float **dst;
} act_piece;

/* the pieces of a set, in one order for numel and bind */
static int act_pieces(const mt_gpt *m, mt_gpt_acts *a, int n_layers, int B, int with_head,
                      act_piece *p) {
  size_t T = (size_t)m->T, C = (size_t)m->shape.n_embd, L = (size_t)n_layers;
  size_t BT = (size_t)B * T, BTs = (size_t)B * (size_t)m->T_sp;
  size_t Cl = (size_t)m->C_local, Fl = (size_t)m->F_local, NHl = (size_t)m->NH_local;
  int k = 0;
#define PIECE(field, count) p[k++] = (act_piece){(count), &a->field}
  PIECE(encoded, BTs * C);
  PIECE(ln1, L * BTs * C);
  PIECE(ln1_mean, L * BTs);
  PIECE(ln1_rstd, L * BTs);
  PIECE(qkv, L * BT * 3 * Cl);
  PIECE(atty, L * BT * Cl);
  PIECE(att, L * (size_t)B * NHl * T * T);
  PIECE(attproj, L * BTs * C);
  PIECE(residual2, L * BTs * C);
  PIECE(ln2, L * BTs * C);
  PIECE(ln2_mean, L * BTs);
  PIECE(ln2_rstd, L * BTs);
  PIECE(fch, L * BT * Fl);
  PIECE(fch_gelu, L * BT * Fl);
  PIECE(fcproj, L * BTs * C);
  PIECE(residual3, L * BTs * C);
  if (with_head) {
    PIECE(lnf, BTs * C);
    PIECE(lnf_mean, BTs);
    PIECE(lnf_rstd, BTs);
    PIECE(logits, BT * (size_t)m->V_local);
    PIECE(losses, BT);
  }
#undef PIECE
  return k;
}

static size_t round16(size_t n) { return (n + 15) / 16 * 16; }

size_t mt_gpt_acts_numel(const mt_gpt *m, int n_layers, int B, int with_head) {
  mt_gpt_acts a;
  act_piece p[32];
  int k = act_pieces(m, &a, n_layers, B, with_head, p);
  size_t n = 0;
  for (int i = 0; i < k; i++) n += round16(p[i].n);
  return n;
}

void mt_gpt_acts_bind(const mt_gpt *m, mt_gpt_acts *a, float *mem, int n_layers, int B,
                      int with_head) {
  memset(a, 0, sizeof *a);
  act_piece p[32];
  int k = act_pieces(m, a, n_layers, B, with_head, p);
  for (int i = 0; i < k; i++) {
    *p[i].dst = mem;
    mem += round16(p[i].n);
  }
}

float *mt_gpt_range_output(const mt_gpt *m, const mt_gpt_acts *a, int n_layers, int B) {
  return a->residual3 + (size_t)(n_layers - 1) * B * m->T_sp * m->shape.n_embd;
}

double mt_gpt_forward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed, int head,
                            const int *inputs, const int *targets, int B) {
  const mt_ops *o = m->ops;
  const int T = m->T, C = m->shape.n_embd, BT = B * T;
  const int BTs = B * m->T_sp, Cl = m->C_local, Fl = m->F_local, NHl = m->NH_local;
  const int Vl = m->V_local, v0 = m->v_start, nreal = m->v_real;
  const size_t btc = (size_t)BTs * C, bt = (size_t)BT;
  const int bias_rank = m->tp.rank == 0;
  if (embed) {
    o->encoder_vp_forward(row_partial(m, a->encoded), inputs, m->p.wte, v0, Vl,
                          bias_rank ? m->p.wpe : NULL, B, T, C);
    row_output(m, a->encoded, B);
  }
  for (int l = l0; l < l1; l++) {
    const size_t j = (size_t)(l - l0);
    const mt_block_tensors *w = &m->p.blocks[l];
    const float *residual = j == 0 ? a->encoded : a->residual3 + (j - 1) * btc;
    float *ln1 = a->ln1 + j * btc, *qkv = a->qkv + 3 * j * bt * Cl, *atty = a->atty + j * bt * Cl;
    float *att = a->att + j * B * NHl * T * T, *attproj = a->attproj + j * btc;
    float *res2 = a->residual2 + j * btc, *ln2 = a->ln2 + j * btc;
    float *fch = a->fch + j * bt * Fl, *fchg = a->fch_gelu + j * bt * Fl;
    float *fcproj = a->fcproj + j * btc, *res3 = a->residual3 + j * btc;
    o->layernorm_forward(ln1, a->ln1_mean + j * BTs, a->ln1_rstd + j * BTs, residual, w->ln1_w,
                         w->ln1_b, BTs, C);
    o->matmul_forward(qkv, column_input(m, ln1, B), w->qkv_w, w->qkv_b, BT, C, 3 * Cl);
    o->attention_forward(atty, att, qkv, B, T, Cl, NHl);
    o->matmul_forward(row_partial(m, attproj), atty, w->attn_proj_w,
                      bias_rank ? w->attn_proj_b : NULL, BT, Cl, C);
    row_output(m, attproj, B);
    o->residual_forward(res2, residual, attproj, btc);
    o->layernorm_forward(ln2, a->ln2_mean + j * BTs, a->ln2_rstd + j * BTs, res2, w->ln2_w,
                         w->ln2_b, BTs, C);
    o->matmul_forward(fch, column_input(m, ln2, B), w->fc_w, w->fc_b, BT, C, Fl);
    o->gelu_forward(fchg, fch, bt * Fl);
    o->matmul_forward(row_partial(m, fcproj), fchg, w->fc_proj_w,
                      bias_rank ? w->fc_proj_b : NULL, BT, Fl, C);
    row_output(m, fcproj, B);
    o->residual_forward(res3, res2, fcproj, btc);
  }
  if (!head) return 0.0;
  const float *last = mt_gpt_range_output(m, a, l1 - l0, B);
  o->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, last, m->p.lnf_w, m->p.lnf_b, BTs, C);
  o->matmul_forward(a->logits, column_input(m, a->lnf, B), m->p.wte, NULL, BT, C, Vl);
  o->xent_vp_max(m->rowmax, a->logits, BT, Vl, nreal);
  mt_tp_allreduce_max(&m->tp, m->rowmax, bt);
  o->xent_vp_exp(m->xent_stats, a->logits, a->logits, m->rowmax, targets, v0, BT, Vl, nreal);
  mt_tp_allreduce_f64(&m->tp, m->xent_stats, 2 * bt);
  o->xent_vp_finish(a->losses, a->logits, m->xent_stats, m->rowmax, BT, Vl, nreal);
  double sum = 0.0;
  for (int i = 0; i < BT; i++) sum += a->losses[i];
  return sum;
}

const float *mt_gpt_backward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed, int head,
                                   const int *inputs, const int *targets, const float *dout,
                                   float dloss, int B) {
  const mt_ops *o = m->ops;
  const int T = m->T, C = m->shape.n_embd, BT = B * T;
  const int BTs = B * m->T_sp, Cl = m->C_local, Fl = m->F_local, NHl = m->NH_local;
  const int Vl = m->V_local, v0 = m->v_start;
  const size_t btc = (size_t)BTs * C, bt = (size_t)BT;
  mt_gpt_acts *d = &m->d;
  float *dres = d->residual3, *dpart = d->ln1;
  const float *dln;
  if (head) {
    o->xent_vp_backward(a->logits, a->logits, targets, v0, dloss, BT, Vl, m->v_real);
    memset(dpart, 0, bt * C * sizeof(float));
    o->matmul_backward(dpart, m->g.wte, NULL, a->logits, column_input(m, a->lnf, B), m->p.wte,
                       BT, C, Vl);
    dln = column_dinput(m, dpart, B);
    memset(dres, 0, btc * sizeof(float));
    o->layernorm_backward(dres, m->g.lnf_w, m->g.lnf_b, dln, mt_gpt_range_output(m, a, l1 - l0, B),
                          m->p.lnf_w, a->lnf_mean, a->lnf_rstd, BTs, C);
  } else {
    memcpy(dres, dout, btc * sizeof(float));
  }
  for (int l = l1 - 1; l >= l0; l--) {
    const size_t j = (size_t)(l - l0);
    const mt_block_tensors *w = &m->p.blocks[l];
    mt_block_tensors *g = &m->g.blocks[l];
    const float *residual = j == 0 ? a->encoded : a->residual3 + (j - 1) * btc;
    const float *ln1 = a->ln1 + j * btc, *qkv = a->qkv + 3 * j * bt * Cl;
    const float *atty = a->atty + j * bt * Cl, *att = a->att + j * B * NHl * T * T;
    const float *res2 = a->residual2 + j * btc, *ln2 = a->ln2 + j * btc;
    const float *fch = a->fch + j * bt * Fl, *fchg = a->fch_gelu + j * bt * Fl;
    memset(d->fch_gelu, 0, bt * Fl * sizeof(float));
    o->matmul_backward(d->fch_gelu, g->fc_proj_w, g->fc_proj_b, row_dout(m, dres, B), fchg,
                       w->fc_proj_w, BT, Fl, C);
    memset(d->fch, 0, bt * Fl * sizeof(float));
    o->gelu_backward(d->fch, fch, d->fch_gelu, bt * Fl);
    memset(dpart, 0, bt * C * sizeof(float));
    o->matmul_backward(dpart, g->fc_w, g->fc_b, d->fch, column_input(m, ln2, B), w->fc_w, BT, C,
                       Fl);
    dln = column_dinput(m, dpart, B);
    o->layernorm_backward(dres, g->ln2_w, g->ln2_b, dln, res2, w->ln2_w, a->ln2_mean + j * BTs,
                          a->ln2_rstd + j * BTs, BTs, C);
    memset(d->atty, 0, bt * Cl * sizeof(float));
    o->matmul_backward(d->atty, g->attn_proj_w, g->attn_proj_b, row_dout(m, dres, B), atty,
                       w->attn_proj_w, BT, Cl, C);
    memset(d->qkv, 0, 3 * bt * Cl * sizeof(float));
    o->attention_backward(d->qkv, m->datt, d->atty, qkv, att, B, T, Cl, NHl);
    memset(dpart, 0, bt * C * sizeof(float));
    o->matmul_backward(dpart, g->qkv_w, g->qkv_b, d->qkv, column_input(m, ln1, B), w->qkv_w, BT,
                       C, 3 * Cl);
    dln = column_dinput(m, dpart, B);
    o->layernorm_backward(dres, g->ln1_w, g->ln1_b, dln, residual, w->ln1_w,
                          a->ln1_mean + j * BTs, a->ln1_rstd + j * BTs, BTs, C);
  }
  if (embed)
    o->encoder_vp_backward(m->g.wte, m->g.wpe, row_dout(m, dres, B), inputs, v0, Vl, B, T, C);
  return dres;
}

void mt_gpt_assign_stages(mt_gpt *m, const int *stage_of_layer, int last_stage) {
  for (int i = 0; i < m->reg.n; i++) {
    mt_tensor *t = &m->reg.t[i];
    int layer = -1;
    if (sscanf(t->name, "blocks.%d.", &layer) == 1)
      t->pp_stage = stage_of_layer[layer];
    else
      t->pp_stage = strncmp(t->name, "lnf.", 4) == 0 ? last_stage : 0;
  }
}
