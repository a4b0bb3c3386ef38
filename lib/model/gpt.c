/* The GPT model composed of its modules: life cycle, the views of its state
 * (bound unit by unit), and the passes over layer ranges as lists of
 * pieces (the embedding and the LM head: head.c). */
#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* views: named pointers into a unit's memory                          */

/* tensor b of block l starts where a ends in this rank's flat state */
static void follows(const mt_registry *r, int l, const char *a, const char *b) {
  const mt_tensor *ta = &r->t[mt_registry_findf(r, "blocks.%d.%s", l, a)];
  const mt_tensor *tb = &r->t[mt_registry_findf(r, "blocks.%d.%s", l, b)];
  if (ta->numel_local && tb->offset != ta->offset + ta->numel_local)
    mt_die("model: blocks.%d.%s does not follow %s in memory", l, b, a);
}

/* Looked up by name once: which view each registry tensor binds (NULL: the
 * model does not read it). */
static void find_views(mt_gpt *m) {
  const mt_registry *r = &m->reg;
  m->pview = mt_calloc((size_t)r->n, sizeof(mt_act **));
  m->gview = mt_calloc((size_t)r->n, sizeof(mt_act **));
#define VIEW(field, idx)                                                      \
  do {                                                                        \
    int i_ = (idx);                                                           \
    if (i_ < 0) mt_die("model: tensor for view " #field " not registered");   \
    m->pview[i_] = &m->p.field;                                               \
    m->gview[i_] = &m->g.field;                                               \
  } while (0)
  const mt_model_shape *s = &m->shape;
  const int llama = mt_model_llama(s);
  VIEW(wte, mt_registry_find(r, "wte.weight"));
  if (!llama) VIEW(wpe, mt_registry_find(r, "wpe.weight"));
  /* llama's q, k, v (and gate, up) sit one after another: the first one's
   * view is the fused matrix's */
  const char *qkv = llama ? "attn.q" : "attn.qkv", *fc = llama ? "gate" : "fc";
  for (int l = 0; l < s->n_layer; l++) {
    VIEW(blocks[l].ln1_w, mt_registry_findf(r, "blocks.%d.ln1.weight", l));
    VIEW(blocks[l].qkv_w, mt_registry_findf(r, "blocks.%d.%s.weight", l, qkv));
    VIEW(blocks[l].attn_proj_w, mt_registry_findf(r, "blocks.%d.attn.proj.weight", l));
    VIEW(blocks[l].ln2_w, mt_registry_findf(r, "blocks.%d.ln2.weight", l));
    if (!llama) {
      VIEW(blocks[l].ln1_b, mt_registry_findf(r, "blocks.%d.ln1.bias", l));
      VIEW(blocks[l].ln2_b, mt_registry_findf(r, "blocks.%d.ln2.bias", l));
    }
    if (s->bias) {
      VIEW(blocks[l].qkv_b, mt_registry_findf(r, "blocks.%d.%s.bias", l, qkv));
      VIEW(blocks[l].attn_proj_b, mt_registry_findf(r, "blocks.%d.attn.proj.bias", l));
    }
    /* the MLP, or a MoE block's shared experts through the MLP's views */
    const int moe = mt_model_is_moe(s, l);
    const char *mlp = moe ? "moe.shared" : "mlp";
    if (!moe || s->moe_shared > 0) {
      VIEW(blocks[l].fc_w, mt_registry_findf(r, "blocks.%d.%s.%s.weight", l, mlp, fc));
      VIEW(blocks[l].fc_proj_w, mt_registry_findf(r, "blocks.%d.%s.proj.weight", l, mlp));
      if (s->bias) {
        VIEW(blocks[l].fc_b, mt_registry_findf(r, "blocks.%d.%s.%s.bias", l, mlp, fc));
        VIEW(blocks[l].fc_proj_b, mt_registry_findf(r, "blocks.%d.%s.proj.bias", l, mlp));
      }
    }
    if (!moe) continue;
    VIEW(blocks[l].router_w, mt_registry_findf(r, "blocks.%d.moe.router.weight", l));
    VIEW(blocks[l].e_fc_w, mt_registry_findf(r, "blocks.%d.moe.experts.fc.weight", l));
    VIEW(blocks[l].e_proj_w, mt_registry_findf(r, "blocks.%d.moe.experts.proj.weight", l));
    if (!llama || s->bias) {
      VIEW(blocks[l].e_fc_b, mt_registry_findf(r, "blocks.%d.moe.experts.fc.bias", l));
      VIEW(blocks[l].e_proj_b, mt_registry_findf(r, "blocks.%d.moe.experts.proj.bias", l));
    }
  }
  VIEW(lnf_w, mt_registry_find(r, "lnf.weight"));
  if (!llama) VIEW(lnf_b, mt_registry_find(r, "lnf.bias"));
  if (!s->tied) VIEW(lm_head, mt_registry_find(r, "lm_head.weight"));
  if (llama) { /* the fused views' pieces must follow each other */
    for (int l = 0; l < s->n_layer; l++) {
      follows(r, l, "attn.q.weight", "attn.k.weight");
      follows(r, l, "attn.k.weight", "attn.v.weight");
      const int mlp = !mt_model_is_moe(s, l), shared = !mlp && s->moe_shared > 0;
      if (mlp) follows(r, l, "mlp.gate.weight", "mlp.up.weight");
      if (shared) follows(r, l, "moe.shared.gate.weight", "moe.shared.up.weight");
      if (!s->bias) continue;
      follows(r, l, "attn.q.bias", "attn.k.bias");
      follows(r, l, "attn.k.bias", "attn.v.bias");
      if (mlp) follows(r, l, "mlp.gate.bias", "mlp.up.bias");
      if (shared) follows(r, l, "moe.shared.gate.bias", "moe.shared.up.bias");
    }
  }
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
 * first element, es bytes an element (NULL base or a tensor this stage does
 * not hold: NULL). */
static void bind_unit(mt_gpt *m, int u, mt_act ***views, mt_act *base, size_t es) {
  const mt_unit *un = &m->reg.units[u];
  for (int i = un->t0; i < un->t1; i++) {
    const mt_tensor *t = &m->reg.t[i];
    if (!views[i]) continue;
    *views[i] = base && t->numel_local ? mt_act_at(es, base, t->offset - un->begin) : NULL;
  }
}

/* the parameters in the weights' dtype (the compute copy), the gradients fp32 */
void mt_gpt_bind_params(mt_gpt *m, int u, mt_act *mem) { bind_unit(m, u, m->pview, mem, m->es); }
void mt_gpt_bind_grads(mt_gpt *m, int u, float *mem) {
  bind_unit(m, u, m->gview, mem, sizeof(float));
}

size_t mt_gpt_layer_offset(const mt_gpt *m, int layer) {
  if (layer < MT_LAYER_EMBED) layer = MT_LAYER_EMBED;
  if (layer > m->shape.n_layer) return m->reg.numel_local;
  int u = mt_registry_unit_of_layer(&m->reg, layer);
  return u < 0 ? m->reg.numel_local : m->reg.units[u].begin;
}

/* ------------------------------------------------------------------ */
/* life cycle                                                          */

/* an activation buffer of n floats (fp32 always) */
static float *act(mt_gpt *m, size_t n) {
  m->act_bytes += n * sizeof(float);
  if (m->n_act == MT_GPT_MAX_ACT_BUFFERS) mt_die("too many activation buffers");
  float *p = m->ops->alloc(MT_MEM_ACTIV, n * sizeof(float));
  m->act_ptr[m->n_act] = p;
  m->act_size[m->n_act++] = n * sizeof(float);
  return p;
}

/* an activation buffer of n elements of the activations' dtype */
static mt_act *act_elems(mt_gpt *m, size_t n) {
  return act(m, (n * m->es + sizeof(float) - 1) / sizeof(float));
}

mt_gpt_layout mt_gpt_layout_of(const mt_model_shape *shape, const mt_gpt_parallel *par) {
  mt_group *tp_g = par && par->tp && par->tp->size > 1 ? par->tp : NULL;
  mt_group *ep_g = par && par->ep && par->ep->size > 1 ? par->ep : NULL;
  mt_group *etp_g = par && par->etp && par->etp->size > 1 ? par->etp : NULL;
  mt_gpt_layout lay = {.tp_size = tp_g ? tp_g->size : 1, .tp_rank = tp_g ? tp_g->rank : 0,
                       .sp = par && par->sp, .n_layer = shape->n_layer, .stage_of_layer = NULL,
                       .pp_last = 0, .pp_rank = 0, .ep_size = ep_g ? ep_g->size : 1,
                       .ep_rank = ep_g ? ep_g->rank : 0, .etp_size = etp_g ? etp_g->size : 1,
                       .etp_rank = etp_g ? etp_g->rank : 0};
  if (par && par->stage_of_layer) {
    lay.stage_of_layer = par->stage_of_layer;
    lay.pp_last = par->pp_last;
    lay.pp_rank = par->pp_rank;
  }
  return lay;
}

/* The splits a layout asks of the shape that validation has not seen (a
 * model built directly, e.g. by a test). Returns 0, or -1 with e set. */
static int check_split(const mt_model_shape *shape, const mt_gpt_parallel *par, int tp_size,
                       mt_err *e) {
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
  if (shape->n_head % tp_size != 0) {
    mt_err_set(e, "tp = %d does not divide n_head = %d", tp_size, shape->n_head);
    return -1;
  }
  if (par && par->dt != MT_DT_F32 && !par->external_state) {
    mt_err_set(e, "bf16 activations are implemented for models whose state the dp engine holds");
    return -1;
  }
  return 0;
}

/* This rank's share of every split dim, as the registry placed it. */
static void local_dims(mt_gpt *m, const mt_gpt_layout *lay) {
  const mt_model_shape *shape = &m->shape;
  const mt_registry *r = &m->reg;
  const mt_tensor *wte = &r->t[mt_registry_find(r, "wte.weight")];
  const int hs = shape->n_embd / shape->n_head, llama = mt_model_llama(shape);
  const mt_tensor *qkv = &r->t[mt_registry_find(r, llama ? "blocks.0.attn.q.weight"
                                                         : "blocks.0.attn.qkv.weight")];
  m->C_local = (int)(qkv->local_shape[0] / qkv->tp.fused_blocks);
  m->NH_local = m->C_local / hs;
  /* key/value heads: gpt2's are the query heads; llama's split over tp
   * where tp divides them, else all on every rank */
  const mt_tensor *k = llama ? &r->t[mt_registry_find(r, "blocks.0.attn.k.weight")] : NULL;
  m->NKV_local = k ? (int)k->local_shape[0] / hs : m->NH_local;
  m->kv_split = !k || k->tp.kind == MT_PLACE_SHARDED;
  m->qkv_local = m->C_local + 2 * m->NKV_local * hs;
  m->gqa = shape->n_kv_head != shape->n_head;
  m->mlp_in = llama ? 2 : 1;
  /* per block: the hidden units of its MLP (a MoE block: of its shared
   * experts, or none); activations are laid out for the largest */
  m->mlp_local = mt_calloc((size_t)shape->n_layer + 1, sizeof(int));
  m->moe_window_of = mt_calloc((size_t)shape->n_layer + 1, sizeof(int));
  mt_moe *moe = &m->moe;
  for (int l = 0; l < shape->n_layer; l++) {
    int is_moe = mt_model_is_moe(shape, l);
    int i = mt_registry_findf(r, "blocks.%d.%s.%s.weight", l, is_moe ? "moe.shared" : "mlp",
                              llama ? "gate" : "fc");
    m->mlp_local[l] = i >= 0 ? (int)r->t[i].local_shape[0] : 0;
    if (m->mlp_local[l] > m->F_local) m->F_local = m->mlp_local[l];
    if (is_moe && moe->n_blocks++ == 0) {
      const mt_tensor *efc = &r->t[mt_registry_findf(r, "blocks.%d.moe.experts.fc.weight", l)];
      moe->E_local = (int)efc->local_shape[0];
      moe->Fe_local = (int)efc->local_shape[1] / m->mlp_in; /* SwiGLU's gate|up: 2 Fe_l */
      moe->fin = m->mlp_in;
      moe->has_bias = mt_registry_findf(r, "blocks.%d.moe.experts.fc.bias", l) >= 0;
    }
  }
  for (int n = 0; n <= shape->n_layer; n++) /* MoE blocks a set of n blocks may hold */
    for (int l0 = 0; l0 + n <= shape->n_layer; l0++) {
      int c = mt_model_moe_before(shape, l0 + n) - mt_model_moe_before(shape, l0);
      if (c > m->moe_window_of[n]) m->moe_window_of[n] = c;
    }
  moe->ep_size = lay->ep_size;
  moe->ep_rank = lay->ep_rank;
  moe->etp_size = lay->etp_size;
  moe->etp_rank = lay->etp_rank;
  m->V_local = (int)wte->local_shape[0];
  m->v_start = (int)wte->local_start[0];
  int real = shape->vocab - m->v_start;
  m->v_real = real < 0 ? 0 : real > m->V_local ? m->V_local : real;
}

/* whole_acts: allocate m->a for every layer (0: a pipeline stage binds its
 * own sets) */
static int gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                      const mt_gpt_parallel *par, int whole_acts, mt_err *e) {
  memset(m, 0, sizeof *m);
  m->shape = mt_model_complete(shape);
  shape = &m->shape;
  m->ops = ops;
  m->dt = par ? par->dt : MT_DT_F32;
  m->es = mt_dtype_bytes(m->dt);
  m->max_B = max_B;
  mt_gpt_layout lay = mt_gpt_layout_of(shape, par);
  mt_group *tp_g = lay.tp_size > 1 ? par->tp : NULL;
  int tp_size = lay.tp_size, sp = lay.sp;
  MT_TRY(e, check_split(shape, par, tp_size, e));
  /* context parallelism: this rank's chunks of every sequence */
  mt_group *cp_g = par && par->cp && par->cp->size > 1 ? par->cp : NULL;
  mt_cp_layout cpl;
  mt_cp_layout_make(&cpl, cp_g ? cp_g->size : 1, cp_g ? cp_g->rank : 0,
                    par ? (mt_cp_mode)par->cp_mode : MT_CP_RING, shape->seq_len);
  /* token slices: a pass sees T_local / slices tokens of each sequence */
  const int slices = par && par->slices > 1 ? par->slices : 1;
  if (slices > 1 && ((cpl.size > 1 && (cpl.mode != MT_CP_ULYSSES || (par && par->documents))) ||
                     cpl.T_local % slices != 0 || slices > MT_CP_MAX_CHUNKS)) {
    mt_err_set(e, "parallel.pp_token_slices = %d needs parallel.cp = 1 or Ulysses (without "
               "documents), and to divide the %d tokens of a sequence on a rank", slices,
               cpl.T_local);
    return -1;
  }
  mt_cp_layout_slice(&cpl, slices); /* Ulysses: this rank's chunk of every slice */
  m->T = cpl.T_local / slices;
  if (sp && (!tp_g || m->T % tp_size != 0)) {
    mt_err_set(e, "sequence parallelism needs tp > 1 dividing the %d tokens of a sequence on "
               "each rank (tp = %d)", m->T, tp_size);
    return -1;
  }
  if (mt_gpt_register_layout(&m->reg, shape, &lay, e) != 0) {
    mt_registry_free(&m->reg);
    return -1;
  }
  local_dims(m, &lay);
  m->T_sp = sp ? m->T / tp_size : m->T;
  /* the modules as a real model would see them (a plan model: sizes and
   * ranks only) */
  m->tp.size = tp_size;
  m->tp.rank = lay.tp_rank;
  m->tp.sp = sp;
  m->attn.lay = cpl;
  m->attn.C = m->C_local;
  m->attn.NH = m->NH_local;
  m->recompute = par && par->recompute;
  m->split_backward = par && par->split_backward;
  m->fuse_norms = 1;
  m->moe.llep_alpha = par ? par->ep_balance_alpha : 0.0;
  m->moe.llep_min_rows = par ? par->ep_balance_min_rows : 0;
  m->moe.buffer_factor = par ? par->moe_buffer_factor : 0.0;
  mt_moe_size(&m->moe, m);

  m->p.blocks = mt_calloc((size_t)shape->n_layer, sizeof(mt_block_tensors));
  m->g.blocks = mt_calloc((size_t)shape->n_layer, sizeof(mt_block_tensors));
  find_views(m);
  if (!(par && par->external_state)) {
    /* a model on its own: it owns flat buffers of parameters and gradients,
     * every unit bound for good */
    size_t n = m->reg.numel_local;
    m->params = ops->alloc(MT_MEM_PARAMS, n * sizeof(float));
    m->grads = ops->alloc(MT_MEM_GRADS, n * sizeof(float));
    for (int u = 0; u < m->reg.n_units; u++) {
      mt_gpt_bind_params(m, u, m->params + m->reg.units[u].begin);
      mt_gpt_bind_grads(m, u, m->grads + m->reg.units[u].begin);
    }
  }

  size_t B = (size_t)max_B, T = (size_t)m->T, C = (size_t)shape->n_embd, L = (size_t)shape->n_layer;
  size_t BT = B * T, BTs = B * (size_t)m->T_sp;
  size_t Cl = (size_t)m->C_local, Fl = (size_t)m->F_local, NHl = (size_t)m->NH_local;
  if (whole_acts) /* pipeline stages bind their own sets */
    mt_gpt_acts_bind(m, &m->a, act(m, mt_gpt_acts_numel(m, (int)L, max_B, 1)), (int)L, max_B, 1);
  if (m->recompute) {
    size_t before = m->act_bytes;
    float *ws = act(m, mt_act_set_numel(m, 1, max_B, 0, MT_SET_WORKSPACE));
    if (ws) mt_act_set_bind(m, &m->ws, ws, 1, max_B, 0, MT_SET_WORKSPACE);
    m->ws_bytes = m->act_bytes - before;
  }
  /* backward scratch: one layer's worth, reused layer after layer */
  mt_gpt_acts *d = &m->d;
  d->residual3 = act_elems(m, BTs * C); /* the gradient of the residual stream */
  /* ladder: the gradient of the pending MLP output (the previous block's) */
  if (mt_model_ladder(shape)) d->fcproj = act_elems(m, BTs * C);
  d->ln1 = act_elems(m, BT * C); /* d of a column-parallel input (ln1, ln2, lnf), partial over tp */
  d->qkv = act_elems(m, BT * 3 * Cl);
  /* grouped-query attention: the projection's q|k|v (BT, Cl + 2 Ckv_l),
   * before the key/value heads are spread over the query heads */
  if (m->gqa) m->qkv_c = act_elems(m, BT * (size_t)m->qkv_local);
  d->atty = act_elems(m, BT * Cl);
  d->fch = act_elems(m, BT * Fl * (size_t)m->mlp_in);
  d->fch_gelu = act_elems(m, BT * Fl);
  /* where the tokens sit (positions.c): positions, rotary angles per
   * position, documents' starts */
  const size_t S = (size_t)shape->seq_len;
  if (mt_model_llama(shape)) m->rope_cs = act(m, S * (size_t)(shape->n_embd / shape->n_head));
  m->tok_pos_all = (int *)act(m, slices * BT * sizeof(int) / sizeof(float));
  m->documents = par && par->documents;
  if (m->documents) {
    m->doc_lo = (int *)act(m, BT * sizeof(int) / sizeof(float));
    if (cpl.size > 1 && cpl.mode == MT_CP_ULYSSES)
      m->doc_lo_seq = (int *)act(m, (size_t)max_B * S * sizeof(int) / sizeof(float));
    m->pos_host = mt_malloc(2 * BT * sizeof(int));
    m->doc_host = mt_malloc((size_t)max_B * S * sizeof(int));
  }
  /* attention's scratch under context parallelism (ring: a block's partial
   * result before its merge; Ulysses: gradients in the head layout) */
  void *cp_scratch[4];
  for (int w = 0; w < 4; w++) { /* part_lse fp32, the rest in the activations' dtype */
    size_t n = mt_cp_scratch_numel(&cpl, max_B, (int)Cl, (int)NHl, w) / slices; /* a pass's */
    cp_scratch[w] = !n ? NULL : w != 1 ? act_elems(m, n) : (void *)act(m, n);
  }
  /* the linears' tp scratch under sp: a gathered input, a partial output,
   * an input gradient after its reduce-scatter */
  mt_act *full_in = NULL, *full_out = NULL, *dx_local = NULL;
  if (sp) {
    full_in = act_elems(m, BT * C);
    full_out = act_elems(m, BT * C);
    dx_local = act_elems(m, BTs * C);
  }
  /* the ladder: the sums over tp launched without blocking (mt_tp) */
  mt_act *async_full = NULL, *async_pack = NULL, *async_local = NULL;
  if (mt_model_ladder(shape)) async_full = act_elems(m, BT * C);
  if (sp && mt_model_ladder(shape)) {
    async_pack = act_elems(m, BT * C);
    async_local = act_elems(m, BTs * C);
  }
  m->rowmax = act(m, BT);
  m->xent_stats = (double *)act(m, 2 * BT * sizeof(double) / sizeof(float));
  /* the micro-batch's tokens, in backend memory (B,T) each */
  m->tok_in = (int *)act(m, BT * sizeof(int) / sizeof(float));
  m->tok_tgt = (int *)act(m, BT * sizeof(int) / sizeof(float));
  mt_moe_create(&m->moe, m, par, tp_g, act);
  /* the workspace's MoE rows, held apart (acts.c), at the row bound */
  if (m->recompute) m->ws_bytes += mt_gpt_moe_rows_bytes(m);
  const mt_registry *r = &m->reg;
  size_t partial = mt_tp_partial_numel(r, 0, r->numel_local);
  mt_attention_create(&m->attn, cp_g, &cpl, max_B, (int)Cl, (int)NHl,
                      shape->n_head / shape->n_kv_head, mt_gpt_kv_h0(m), ops, m->dt);
  m->attn.slices = slices;
  mt_attention_set_scratch(&m->attn, cp_scratch[0], cp_scratch[1], cp_scratch[2], cp_scratch[3]);
  m->inputs = mt_calloc(BT, sizeof(int));
  m->targets = mt_calloc(BT, sizeof(int));
  mt_tp_create(&m->tp, tp_g, sp, BT * C, partial, ops, m->dt);
  mt_tp_set_linear(&m->tp, m->T, (int)C, full_in, full_out, dx_local);
  if (mt_model_ladder(shape)) mt_tp_set_async(&m->tp, async_full, async_pack, async_local);
  mt_gpt_positions_init(m);
  return 0;
}

int mt_gpt_create_parallel(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops,
                           int max_B, const mt_gpt_parallel *par, mt_err *e) {
  return gpt_create(m, shape, ops, max_B, par, 1, e);
}

int mt_gpt_create_stage(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                        const mt_gpt_parallel *par, mt_err *e) {
  return gpt_create(m, shape, ops, max_B, par, 0, e);
}

int mt_gpt_create(mt_gpt *m, const mt_model_shape *shape, const mt_ops *ops, int max_B,
                  mt_err *e) {
  return mt_gpt_create_parallel(m, shape, ops, max_B, NULL, e);
}

void mt_gpt_destroy(mt_gpt *m) {
  size_t n = m->reg.numel_local;
  if (m->params) m->ops->free(MT_MEM_PARAMS, m->params, n * sizeof(float));
  if (m->grads) m->ops->free(MT_MEM_GRADS, m->grads, n * sizeof(float));
  for (int i = 0; i < m->n_act; i++) m->ops->free(MT_MEM_ACTIV, m->act_ptr[i], m->act_size[i]);
  mt_tp_destroy(&m->tp);
  mt_attention_destroy(&m->attn);
  mt_moe_rows_free(m);
  mt_moe_destroy(&m->moe);
  free(m->p.blocks);
  free(m->g.blocks);
  free(m->pview);
  free(m->gview);
  free(m->unit_block);
  free(m->unit_experts);
  free(m->mlp_local);
  free(m->moe_window_of);
  free(m->inputs);
  free(m->targets);
  free(m->pos_host);
  free(m->doc_host);
  mt_registry_free(&m->reg);
  memset(m, 0, sizeof *m);
}

void mt_gpt_set_moe_loss(mt_gpt *m, float aux_coef, float z_coef) {
  m->moe.aux_coef = aux_coef;
  m->moe.z_coef = z_coef;
}

void mt_gpt_set_moe_balance(mt_gpt *m, int balance, float bias_rate, float bias_init) {
  mt_moe *x = &m->moe;
  x->balance = balance;
  x->bias_rate = bias_rate;
  if (x->n_blocks == 0 || bias_init == 0.0f) return;
  for (int b = 0; b < x->n_blocks; b++) x->bias_host[(size_t)b * x->E] = bias_init;
  m->ops->upload(x->bias, x->bias_host, (size_t)x->n_blocks * x->E * sizeof(float));
}

void mt_gpt_moe_bias_update(mt_gpt *m, const double *tokens) {
  mt_moe *x = &m->moe;
  if (x->n_blocks == 0 || x->balance != MT_MOE_BALANCE_BIAS) return;
  const int E = x->E;
  for (int b = 0; b < x->n_blocks; b++) {
    const double *c = tokens + (size_t)b * E;
    double mean = 0.0;
    for (int e = 0; e < E; e++) mean += c[e];
    mean /= E;
    /* the sign of the error, as DeepSeek-V3: a step of the same size for
     * every unbalanced expert; counts are integers, so the comparison is
     * exact and every rank moves alike */
    for (int e = 0; e < E; e++) {
      float *bias = &x->bias_host[(size_t)b * E + e];
      if (c[e] > mean) *bias -= x->bias_rate;
      else if (c[e] < mean) *bias += x->bias_rate;
    }
  }
  m->ops->upload(x->bias, x->bias_host, (size_t)x->n_blocks * E * sizeof(float));
}

const float *mt_gpt_moe_bias(const mt_gpt *m) { return m->moe.n_blocks ? m->moe.bias_host : NULL; }

void mt_gpt_moe_set_bias(mt_gpt *m, const float *bias) {
  mt_moe *x = &m->moe;
  if (x->n_blocks == 0) return;
  memcpy(x->bias_host, bias, (size_t)x->n_blocks * x->E * sizeof(float));
  m->ops->upload(x->bias, x->bias_host, (size_t)x->n_blocks * x->E * sizeof(float));
}

void mt_gpt_moe_stats(mt_gpt *m, int on) { m->moe.stats_on = on && m->moe.n_blocks > 0; }

void mt_gpt_moe_stats_reset(mt_gpt *m) {
  mt_moe *x = &m->moe;
  if (x->n_blocks == 0 || !x->tokens) return;
  size_t E = (size_t)x->E, n = (size_t)x->n_blocks;
  memset(x->tokens, 0, n * E * sizeof(double));
  memset(x->dropped, 0, n * sizeof(double));
  memset(x->aux, 0, n * sizeof(double));
  memset(x->z, 0, n * sizeof(double));
  memset(x->rows_done, 0, 2 * n * sizeof(double));
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
  if (m->grads) m->ops->zero(MT_DT_F32, m->grads, m->reg.numel_local);
}

/* ------------------------------------------------------------------ */
/* passes                                                              */

static mt_piece piece(mt_piece_kind kind, int layer) {
  mt_piece p = {.kind = kind, .layer = layer, .use = {-1, -1}, .done = {-1, -1},
                .release = {-1, -1}};
  return p;
}

int mt_gpt_pass(const mt_gpt *m, mt_pass pass, int l0, int l1, int embed, int head,
                mt_piece *out) {
  int n = 0;
  const int ue = m->unit_embed, uf = m->unit_final, tied = m->shape.tied;
  /* the head reads the embeddings' unit where it is tied to wte */
  const int uh = tied ? ue : -1;
  if (pass == MT_PASS_FORWARD) {
    /* the embeddings stay in use until their backward (the LM head reads
     * wte again); so does the final LN */
    if (embed) {
      out[n] = piece(MT_PIECE_EMBED, -1);
      out[n++].use[0] = ue;
    }
    for (int l = l0; l < l1; l++) {
      mt_piece *p = &out[n++];
      *p = piece(MT_PIECE_BLOCK, l);
      p->use[0] = p->release[1] = m->unit_block[l];
      p->use[1] = p->release[0] = m->unit_experts[l];
    }
    if (head) {
      out[n] = piece(MT_PIECE_HEAD, -1);
      out[n].use[0] = uf;
      out[n++].use[1] = uh;
    }
    return n;
  }
  /* a split backward completes the gradients only in its weight pass: the
   * input pass reports nothing, the weight pass reports every unit the
   * input pass wrote (the LayerNorms, the embeddings) or it writes (the
   * linears); the weight pass reads no parameters and releases nothing */
  const int report = pass == MT_PASS_BACKWARD && !m->split_backward;
  /* the embeddings complete here: not in the head's pass where the
   * embedding's own pass follows on this rank */
  const int ue_done = m->embed_head_apart && !embed ? -1 : ue;
  if (pass == MT_PASS_WEIGHT) {
    if (head) {
      out[n] = piece(MT_PIECE_HEAD, -1);
      out[n].use[0] = out[n].done[0] = uf;
      out[n].use[1] = uh;
      out[n].done[1] = tied ? ue_done : -1;
      n++;
    }
    for (int l = l1 - 1; l >= l0; l--) {
      out[n] = piece(MT_PIECE_BLOCK, l);
      out[n].use[0] = out[n].done[0] = m->unit_experts[l]; /* -1: dense */
      out[n].use[1] = out[n].done[1] = m->unit_block[l];
      n++;
    }
    if (embed && (!head || !tied)) {
      out[n] = piece(MT_PIECE_END, -1);
      out[n++].done[0] = ue;
    }
    return n;
  }
  if (head) {
    mt_piece *p = &out[n++];
    *p = piece(MT_PIECE_HEAD, -1);
    p->use[0] = p->release[0] = uf;
    p->use[1] = uh;
    if (report) p->done[0] = uf;
  } else {
    out[n++] = piece(MT_PIECE_DOUT, -1);
  }
  for (int l = l1 - 1; l >= l0; l--) {
    /* a MoE block's experts first: backward goes down the flat order */
    mt_piece *p = &out[n++];
    *p = piece(MT_PIECE_BLOCK, l);
    p->use[0] = p->release[0] = m->unit_experts[l];
    p->use[1] = p->release[1] = m->unit_block[l];
    if (report) {
      p->done[0] = m->unit_experts[l];
      p->done[1] = m->unit_block[l];
    }
  }
  /* the embeddings' last use in this backward (a stage with the head but
   * not the embedding holds the tied LM head's copy) */
  if (embed || (head && tied)) {
    mt_piece *p = &out[n++];
    *p = piece(embed ? MT_PIECE_EMBED : MT_PIECE_END, -1);
    if (embed) p->use[0] = ue;
    p->release[0] = ue_done;
    if (report) p->done[0] = ue_done;
  }
  return n;
}

double mt_gpt_run_piece(mt_gpt *m, mt_pass pass, const mt_piece *p, const mt_pass_args *x) {
  mt_gpt_acts *a = x->a;
  const int B = x->B;
  mt_act *dres = m->d.residual3;
  if (p->kind == MT_PIECE_BLOCK) {
    const int l = p->layer;
    const size_t j = (size_t)(l - x->l0);
    mt_layer_acts la = mt_layer_at(m, a, l, x->l0, B);
    const mt_act *x0 = mt_layer_input(m, a, j, B);
    /* ladder: the previous block's MLP output, not yet in x0 (kept in the
     * set under recompute too; a range that starts after block 0: what the
     * stage before sent after the range's input) */
    const mt_act *pend = NULL;
    if (mt_model_ladder(&m->shape) && l > 0)
      pend = j > 0 ? mt_layer_at(m, a, l - 1, x->l0, B).fcproj
                   : mt_act_at(m->es, a->encoded, (size_t)B * m->T_sp * m->shape.n_embd);
    if (pass == MT_PASS_FORWARD) {
      /* the previous block of the range left its last residual sum (this
       * block's input) to this block's first norm */
      mt_layer_acts prev;
      const int joined = l > x->l0 && mt_block_defers_output(m, x, l - 1);
      if (joined) prev = mt_layer_at(m, a, l - 1, x->l0, B);
      mt_block_forward(m, l, &m->p.blocks[l], x0, pend, joined ? &prev : NULL,
                       mt_block_defers_output(m, x, l), &la, B);
      return 0.0;
    }
    if (m->recompute) mt_block_recompute(m, l, x0, pend, &la, B);
    if (pass == MT_PASS_WEIGHT) mt_block_backward_weight(m, l, &la, B);
    else if (m->d.fcproj)
      mt_block_backward_ladder(m, l, x0, &la, dres, m->d.fcproj, x->input_only, x->dloss, B);
    else mt_block_backward(m, l, x0, &la, dres, x->input_only, x->dloss, B);
    return 0.0;
  }
  switch (p->kind) {
  case MT_PIECE_EMBED:
    if (pass == MT_PASS_FORWARD) mt_embed_forward(m, x);
    else mt_embed_backward(m, dres, x);
    return 0.0;
  case MT_PIECE_HEAD:
    if (pass == MT_PASS_FORWARD) return mt_head_forward(m, x);
    if (pass == MT_PASS_BACKWARD) mt_head_backward(m, x);
    else mt_head_backward_weight(m, x);
    return 0.0;
  case MT_PIECE_DOUT: {
    const size_t n = (size_t)B * m->T_sp * m->shape.n_embd;
    m->ops->copy(m->dt, dres, x->dout, n);
    if (m->d.fcproj) m->ops->copy(m->dt, m->d.fcproj, mt_act_at(m->es, x->dout, n), n);
    return 0.0;
  }
  default:
    return 0.0;
  }
}

const mt_act *mt_gpt_input_grad(const mt_gpt *m) { return m->d.residual3; }

/* ------------------------------------------------------------------ */
/* a model that owns its buffers: whole passes                         */

/* Every piece of a pass in turn (the units are bound for good); hook as
 * mt_gpt_backward's (l1 after the head, each block, -1 after the
 * embedding). Returns the forward's loss sum. */
static double run_pass(mt_gpt *m, mt_pass pass, const mt_pass_args *x, int embed, int head,
                       mt_grad_ready_fn hook, void *ctx) {
  mt_piece *pieces = mt_malloc((size_t)(x->l1 - x->l0 + 3) * sizeof(mt_piece));
  int n = mt_gpt_pass(m, pass, x->l0, x->l1, embed, head, pieces);
  mt_pass_args y = *x;
  y.head = head;
  mt_gpt_stage_documents(m, x->doc, x->B);
  double loss = 0.0;
  for (int i = 0; i < n; i++) {
    loss += mt_gpt_run_piece(m, pass, &pieces[i], &y);
    if (!hook) continue;
    if (pieces[i].kind == MT_PIECE_HEAD) hook(ctx, x->l1);
    else if (pieces[i].kind == MT_PIECE_BLOCK) hook(ctx, pieces[i].layer);
    else if (pieces[i].kind == MT_PIECE_EMBED) hook(ctx, -1);
  }
  free(pieces);
  return loss;
}

double mt_gpt_forward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed, int head,
                            const int *inputs, const int *targets, int B) {
  mt_pass_args x = {.a = a, .l0 = l0, .l1 = l1, .B = B, .inputs = inputs, .targets = targets};
  return run_pass(m, MT_PASS_FORWARD, &x, embed, head, NULL, NULL);
}

const mt_act *mt_gpt_backward_range(mt_gpt *m, mt_gpt_acts *a, int l0, int l1, int embed,
                                    int head, const int *inputs, const int *targets,
                                    const mt_act *dout, float dloss, int B) {
  mt_pass_args x = {.a = a, .l0 = l0, .l1 = l1, .B = B, .inputs = inputs, .targets = targets,
                    .dout = dout, .dloss = dloss};
  run_pass(m, MT_PASS_BACKWARD, &x, embed, head, NULL, NULL);
  return mt_gpt_input_grad(m);
}

/* The whole model: the range [0, n_layer) over m->a, with the embedding and
 * the head; the tokens are kept for backward. */
float mt_gpt_forward_docs(mt_gpt *m, const int *inputs, const int *targets, const int *doc,
                          int B) {
  const size_t bt = (size_t)B * m->T;
  memcpy(m->inputs, inputs, bt * sizeof(int));
  memcpy(m->targets, targets, bt * sizeof(int));
  if (m->documents && doc) memcpy(m->doc_host, doc, (size_t)B * m->shape.seq_len * sizeof(int));
  mt_pass_args x = {.a = &m->a, .l0 = 0, .l1 = m->shape.n_layer, .B = B, .inputs = inputs,
                    .targets = targets, .doc = doc};
  double sum = run_pass(m, MT_PASS_FORWARD, &x, 1, 1, NULL, NULL);
  m->cur_B = B;
  /* the mean over the positions with a target (an ignored one's loss is 0) */
  size_t real = 0;
  for (size_t i = 0; i < bt; i++) real += targets[i] != MT_TARGET_IGNORE;
  return real ? (float)(sum / (double)real) : 0.0f;
}

float mt_gpt_forward(mt_gpt *m, const int *inputs, const int *targets, int B) {
  return mt_gpt_forward_docs(m, inputs, targets, NULL, B);
}

void mt_gpt_backward(mt_gpt *m, float dloss, mt_grad_ready_fn hook, void *ctx) {
  mt_pass_args x = {.a = &m->a, .l0 = 0, .l1 = m->shape.n_layer, .B = m->cur_B,
                    .inputs = m->inputs, .targets = m->targets,
                    .doc = m->documents ? m->doc_host : NULL, .dloss = dloss};
  run_pass(m, MT_PASS_BACKWARD, &x, 1, 1, hook, ctx);
}
