/* A transformer block: a norm, attention (column-parallel QKV, rotary
 * positions on q and k under llama, the attention module, row-parallel
 * projection), residual; a norm, MLP (column-parallel fc, GELU or SwiGLU,
 * row-parallel projection) or, in a MoE block, its shared experts as that
 * MLP plus the routed experts (moe.c); residual. The norm is LayerNorm
 * (gpt2) or RMSNorm (llama). Forward, backward (whole, or split into an
 * input pass and a weight pass) and recompute. */
#include "model/model_internal.h"

void mt_norm_forward(const mt_gpt *m, mt_act *out, float *mean, float *rstd, const mt_act *inp,
                     const mt_act *w, const mt_act *b, int N) {
  const int C = m->shape.n_embd;
  if (mt_model_llama(&m->shape))
    m->ops->rmsnorm_forward(m->dt, out, rstd, inp, w, N, C, m->shape.norm_eps);
  else m->ops->layernorm_forward(m->dt, out, mean, rstd, inp, w, b, N, C);
}

void mt_residual_norm_forward(const mt_gpt *m, mt_act *res, mt_act *out, float *mean,
                              float *rstd, const mt_act *a, const mt_act *b, const mt_act *w,
                              const mt_act *bias, int N) {
  const int C = m->shape.n_embd;
  if (mt_model_llama(&m->shape))
    m->ops->residual_rmsnorm_forward(m->dt, res, out, rstd, a, b, w, N, C, m->shape.norm_eps);
  else m->ops->residual_layernorm_forward(m->dt, res, out, mean, rstd, a, b, w, bias, N, C);
}

static void norm_backward(const mt_gpt *m, mt_act *dinp, float *dw, float *db, const mt_act *dout,
                          const mt_act *inp, const mt_act *w, const float *mean,
                          const float *rstd, int N, int first) {
  const mt_ops *o = m->ops;
  const int C = m->shape.n_embd;
  if (mt_model_llama(&m->shape))
    (first ? o->rmsnorm_backward_first : o->rmsnorm_backward)(m->dt, dinp, dw, dout, inp, w, rstd,
                                                              N, C);
  else
    (first ? o->layernorm_backward_first : o->layernorm_backward)(m->dt, dinp, dw, db, dout, inp,
                                                                  w, mean, rstd, N, C);
}

void mt_norm_backward(const mt_gpt *m, mt_act *dinp, float *dw, float *db, const mt_act *dout,
                      const mt_act *inp, const mt_act *w, const float *mean, const float *rstd,
                      int N) {
  norm_backward(m, dinp, dw, db, dout, inp, w, mean, rstd, N, 0);
}

void mt_norm_backward_first(const mt_gpt *m, mt_act *dinp, float *dw, float *db,
                            const mt_act *dout, const mt_act *inp, const mt_act *w,
                            const float *mean, const float *rstd, int N) {
  norm_backward(m, dinp, dw, db, dout, inp, w, mean, rstd, N, 1);
}

/* ------------------------------------------------------------------ */
/* grouped-query attention: key/value heads spread over query heads    */

/* The ops' key/value head of local query head h is (h0 + h) / group, group
 * = the query heads per key/value head. Split over tp (each rank holds the
 * key/value heads of its query heads, whole groups), local head h reads
 * local head h / group: h0 = 0. Not split (every rank holds them all), it
 * reads the key/value head of its global index: h0 = the rank's first. */
int mt_gpt_kv_h0(const mt_gpt *m) { return m->kv_split ? 0 : m->tp.rank * m->NH_local; }

/* qkv (BT, 3Cl) from the projection's c (BT, Cl + 2 Ckv_l): q as it is, each
 * query head's key and value head beside it; backward: dc (BT, Cl + 2 Ckv_l)
 * written from dqkv (BT, 3Cl), each key/value head the sum of its query
 * heads' (one pass over the rows each way). Under llama q and the key heads
 * turn by their positions (forward) or back (backward) in the same pass. */
static void kv_spread(const mt_gpt *m, mt_act *qkv, mt_act *c, int B, int backward) {
  const int hs = m->shape.n_embd / m->shape.n_head;
  const int group = m->shape.n_head / m->shape.n_kv_head;
  const size_t rows = (size_t)B * m->T;
  const float *cs = mt_model_llama(&m->shape) ? m->rope_cs : NULL;
  if (backward)
    m->ops->kv_spread_backward(m->dt, c, qkv, rows, m->NH_local, m->NKV_local, hs,
                               mt_gpt_kv_h0(m), group, 1, cs, m->tok_pos, m->T);
  else
    m->ops->kv_spread(m->dt, qkv, c, rows, m->NH_local, m->NKV_local, hs, mt_gpt_kv_h0(m), group,
                      1, cs, m->tok_pos, m->T);
}

/* rotary positions on q and k in place (without gqa; with it the spread
 * turns them), forward or back */
static void rope(mt_gpt *m, mt_act *x, int B, int inverse) {
  if (mt_model_llama(&m->shape) && !m->gqa)
    m->ops->rope(m->dt, x, (size_t)m->qkv_local, B, m->T, m->NH_local + m->NKV_local,
                 m->shape.n_embd / m->shape.n_head, m->rope_cs, m->tok_pos, inverse);
}

/* the attention's input: the column-parallel projection, rotary positions
 * on q and k, the key/value heads spread (x->qkv: (BT, 3Cl)) */
static void qkv_forward(mt_gpt *m, const mt_block_tensors *w, const mt_layer_acts *x, int B) {
  mt_act *c = m->gqa ? m->qkv_c : x->qkv;
  mt_linear_col_forward(&m->tp, c, x->ln1, w->qkv_w, w->qkv_b, B, m->qkv_local);
  if (m->gqa) kv_spread(m, x->qkv, c, B, 0);
  else rope(m, c, B, 0);
}

/* its backward to the projection's output gradient dc (BT, qkv_local) from
 * attention's dqkv (BT, 3Cl) (the same buffer without gqa) */
static void qkv_dout(mt_gpt *m, mt_act *dc, mt_act *dqkv, int B) {
  if (m->gqa) kv_spread(m, dqkv, dc, B, 1);
  else rope(m, dc, B, 1);
}

/* the MLP's activation on N rows: GELU on (N, F), or SwiGLU on (N, 2 F)
 * -> (N, F) (a dense MLP's, the shared experts' and the routed experts') */
void mt_mlp_act_forward(const mt_gpt *m, mt_act *out, const mt_act *inp, int N, int F) {
  if (m->mlp_in == 2) m->ops->swiglu_forward(m->dt, out, inp, N, F);
  else m->ops->gelu_forward(m->dt, out, inp, (size_t)N * F);
}

void mt_mlp_act_backward(const mt_gpt *m, mt_act *dinp, const mt_act *inp, const mt_act *dout,
                         int N, int F) {
  if (m->mlp_in == 2) m->ops->swiglu_backward_first(m->dt, dinp, inp, dout, N, F);
  else m->ops->gelu_backward_first(m->dt, dinp, inp, dout, (size_t)N * F);
}

/* ------------------------------------------------------------------ */
/* the block                                                          */

int mt_block_defers_output(const mt_gpt *m, const mt_pass_args *x, int l) {
  return m->fuse_norms && !mt_model_ladder(&m->shape) && (l + 1 < x->l1 || x->head);
}

void mt_block_forward(mt_gpt *m, int l, const mt_block_tensors *w, const mt_act *x0,
                      const mt_act *pend, const mt_layer_acts *prev, int defer,
                      const mt_layer_acts *x, int B) {
  const mt_ops *o = m->ops;
  const mt_tp *tp = &m->tp;
  const int C = m->shape.n_embd, BTs = B * m->T_sp, Cl = m->C_local, Fl = m->mlp_local[l];
  const int ladder = mt_model_ladder(&m->shape);
  const size_t btc = (size_t)BTs * C;
  /* attention: norm (with the previous block's last residual sum where it
   * left it here: one pass over the stream instead of two), column-parallel
   * QKV (local heads), row-parallel proj */
  if (prev)
    mt_residual_norm_forward(m, prev->res3, x->ln1, x->ln1_mean, x->ln1_rstd, prev->res2,
                             prev->fcproj, w->ln1_w, w->ln1_b, BTs);
  else mt_norm_forward(m, x->ln1, x->ln1_mean, x->ln1_rstd, x0, w->ln1_w, w->ln1_b, BTs);
  qkv_forward(m, w, x, B);
  mt_gpt_slice_layer(m, l);
  mt_attention_forward(&m->attn, x->atty, x->qkv, &x->att, B);
  /* ladder: the projection's sum over tp is read only at res3, after the
   * MLP: it runs while the MLP computes, until the MLP's own sum (a MoE
   * block without shared experts: until res3) */
  mt_request att_sum;
  if (ladder)
    mt_linear_row_forward_async(tp, x->attproj, x->atty, w->attn_proj_w, w->attn_proj_b, B, Cl,
                                &att_sum);
  else mt_linear_row_forward(tp, x->attproj, x->atty, w->attn_proj_w, w->attn_proj_b, B, Cl);
  /* the residual and the MLP's norm in one pass (a MoE block: its shared
   * experts, if any): column-parallel fc + GELU or SwiGLU, row-parallel
   * proj; then a MoE block's routed experts. Ladder: the MLP reads the
   * input and the previous block's pending MLP output, not this block's
   * attention (block 0: the input alone) */
  if (!ladder)
    mt_residual_norm_forward(m, x->res2, x->ln2, x->ln2_mean, x->ln2_rstd, x0, x->attproj,
                             w->ln2_w, w->ln2_b, BTs);
  else if (pend)
    mt_residual_norm_forward(m, x->res2, x->ln2, x->ln2_mean, x->ln2_rstd, x0, pend, w->ln2_w,
                             w->ln2_b, BTs);
  else {
    o->copy(m->dt, x->res2, x0, btc);
    mt_norm_forward(m, x->ln2, x->ln2_mean, x->ln2_rstd, x->res2, w->ln2_w, w->ln2_b, BTs);
  }
  if (Fl > 0) {
    mt_linear_col_forward(tp, x->fch, x->ln2, w->fc_w, w->fc_b, B, Fl * m->mlp_in);
    if (ladder) mt_progress(&att_sum); /* MPI moves a host reduction only inside its calls */
    mt_mlp_act_forward(m, x->fchg, x->fch, B * m->T, Fl);
    if (ladder) mt_progress(&att_sum);
    if (ladder)
      mt_linear_row_forward_after(tp, x->fcproj, x->fchg, w->fc_proj_w, w->fc_proj_b, B, Fl,
                                  &att_sum);
    else mt_linear_row_forward(tp, x->fcproj, x->fchg, w->fc_proj_w, w->fc_proj_b, B, Fl);
  }
  if (x->is_moe) mt_moe_block_forward(m, l, w, x, B);
  if (ladder) mt_linear_row_wait(tp, &att_sum);
  if (!ladder) {
    if (!defer) o->residual_forward(m->dt, x->res3, x->res2, x->fcproj, btc);
    return;
  }
  /* ladder: the attention joins the stream now, the MLP's output waits for
   * the next block (the last block's joins the final stream: the head is
   * the standard one) */
  o->residual_forward(m->dt, x->res3, x->res2, x->attproj, btc);
  if (l == m->shape.n_layer - 1) o->residual_forward(m->dt, x->res3, x->res3, x->fcproj, btc);
}

/* The same kernels on the same input give the stored values bit for bit
 * (the output goes to the workspace, the set's copy stays). */
void mt_block_recompute(mt_gpt *m, int l, const mt_act *x0, const mt_act *pend,
                        const mt_layer_acts *x, int B) {
  mt_layer_acts r = *x;
  r.res3 = m->ws.residual3;
  /* a MoE block routes again as it did (same input, same bias: the same
   * choices and dispatch); its routing was counted by the forward */
  int stats = m->moe.stats_on;
  m->moe.stats_on = 0;
  mt_block_forward(m, l, &m->p.blocks[l], x0, pend, NULL, 0, &r, B);
  m->moe.stats_on = stats;
}

/* A row-parallel linear's backward from the block's residual-stream
 * gradient dres: g's backward (the full output gradient), kept in keep for
 * the weight pass when input_only, then the input gradient into dx and,
 * unless input_only, the weight gradients into dw, db. */
static void row_backward(mt_gpt *m, const mt_act *dres, mt_act *keep, mt_act *dx, float *dw,
                         float *db, const mt_act *x, const mt_act *w, int IC, int input_only,
                         int B) {
  const mt_tp *tp = &m->tp;
  const mt_act *dy = mt_linear_row_dout(tp, dres, B);
  if (input_only) {
    m->ops->copy(m->dt, keep, dy, (size_t)B * m->T * tp->C);
    dy = keep;
  }
  mt_linear_row_backward(tp, dx, input_only ? NULL : dw, input_only ? NULL : db, dy, x, w, B, IC);
}

/* The MLP's (or MoE block's) backward from dout = d(fcproj): its input
 * gradient d(ln2), summed over tp (in m->d.ln1 or the tp scratch), or NULL
 * for a block without one. sum (a dense block only): the sum launched
 * without blocking, into the tp scratch (mt_linear_col_backward_async). */
static const mt_act *mlp_backward(mt_gpt *m, int l, const mt_layer_acts *x, const mt_act *dout,
                                  int input_only, float dloss, int B, mt_request *sum) {
  const mt_tp *tp = &m->tp;
  const int Fl = m->mlp_local[l];
  const mt_block_tensors *w = &m->p.blocks[l];
  mt_block_tensors *g = &m->g.blocks[l];
  mt_gpt_acts *d = &m->d;
  mt_act *dpart = d->ln1;
  const mt_act *dln = NULL;
  if (Fl > 0) {
    row_backward(m, dout, x->dy_fcproj, d->fch_gelu, g->fc_proj_w, g->fc_proj_b, x->fchg,
                 w->fc_proj_w, Fl, input_only, B);
    mt_act *dfch = input_only ? x->dy_fc : d->fch;
    mt_mlp_act_backward(m, dfch, x->fch, d->fch_gelu, B * m->T, Fl);
    if (sum)
      return mt_linear_col_backward_async(tp, g->fc_w, g->fc_b, dfch, input_only ? NULL : x->ln2,
                                          w->fc_w, B, Fl * m->mlp_in, sum);
    dln = mt_linear_col_backward(tp, dpart, g->fc_w, g->fc_b, dfch, input_only ? NULL : x->ln2,
                                 w->fc_w, B, Fl * m->mlp_in);
  }
  if (x->is_moe) dln = mt_moe_block_backward(m, l, x, dout, dln, dpart, dloss, input_only, B);
  return dln;
}

/* The attention's backward from dout = d(attproj): d(ln1), summed over tp;
 * its sum after the non-blocking one before, if any (one channel) */
static const mt_act *attn_backward(mt_gpt *m, int l, const mt_layer_acts *x, const mt_act *dout,
                                   int input_only, int B, mt_request *before) {
  const mt_tp *tp = &m->tp;
  const mt_block_tensors *w = &m->p.blocks[l];
  mt_block_tensors *g = &m->g.blocks[l];
  mt_gpt_acts *d = &m->d;
  row_backward(m, dout, x->dy_attproj, d->atty, g->attn_proj_w, g->attn_proj_b, x->atty,
               w->attn_proj_w, m->C_local, input_only, B);
  /* the projection's output gradient (kept for the weight pass when
   * input_only); attention's own in d->qkv where the heads were spread */
  mt_act *dc = input_only ? x->dy_qkv : m->gqa ? m->qkv_c : d->qkv;
  mt_act *dqkv = m->gqa ? d->qkv : dc;
  mt_gpt_slice_layer(m, l);
  mt_attention_backward(&m->attn, dqkv, d->atty, x->atty, x->qkv, &x->att, B);
  qkv_dout(m, dc, dqkv, B);
  if (before)
    return mt_linear_col_backward_after(tp, d->ln1, g->qkv_w, g->qkv_b, dc,
                                        input_only ? NULL : x->ln1, w->qkv_w, B, m->qkv_local,
                                        before);
  return mt_linear_col_backward(tp, d->ln1, g->qkv_w, g->qkv_b, dc, input_only ? NULL : x->ln1,
                                w->qkv_w, B, m->qkv_local);
}

void mt_block_backward(mt_gpt *m, int l, const mt_act *x0, const mt_layer_acts *x, mt_act *dres,
                       int input_only, float dloss, int B) {
  const int BTs = B * m->T_sp;
  const mt_block_tensors *w = &m->p.blocks[l];
  mt_block_tensors *g = &m->g.blocks[l];
  /* MLP: dres is d(residual3) = d(fcproj) and flows on to d(residual2) */
  const mt_act *dln = mlp_backward(m, l, x, dres, input_only, dloss, B, NULL);
  mt_norm_backward(m, dres, g->ln2_w, g->ln2_b, dln, x->res2, w->ln2_w, x->ln2_mean, x->ln2_rstd,
                   BTs);
  /* attention: dres is now d(residual2) = d(attproj) and flows on to d(input) */
  dln = attn_backward(m, l, x, dres, input_only, B, NULL);
  mt_norm_backward(m, dres, g->ln1_w, g->ln1_b, dln, x0, w->ln1_w, x->ln1_mean, x->ln1_rstd, BTs);
}

/* res2 = x0 + pend, ln2 = norm2(res2), fcproj = MLP(ln2), res3 = res2 +
 * attproj (+ fcproj in the last block) */
void mt_block_backward_ladder(mt_gpt *m, int l, const mt_act *x0, const mt_layer_acts *x,
                              mt_act *dres, mt_act *dpend, int input_only, float dloss, int B) {
  const int BTs = B * m->T_sp;
  const size_t btc = (size_t)BTs * m->shape.n_embd;
  const mt_block_tensors *w = &m->p.blocks[l];
  mt_block_tensors *g = &m->g.blocks[l];
  /* the last block's MLP output is in res3: its gradient is d(res3) */
  if (l == m->shape.n_layer - 1) m->ops->copy(m->dt, dpend, dres, btc);
  /* a dense block: the MLP's input gradient is summed over tp while the
   * attention's backward computes (that reads d(res3) alone); a MoE block
   * sums it first */
  mt_request sum;
  const int later = !x->is_moe && m->mlp_local[l] > 0;
  const mt_act *dln2 = mlp_backward(m, l, x, dpend, input_only, dloss, B, later ? &sum : NULL);
  /* d(res2) = d(res3) + the MLP's norm's: also d(pend), the previous
   * block's fcproj, and the part of d(x0) that does not pass norm1 */
  if (!later) {
    m->ops->copy(m->dt, dpend, dres, btc);
    mt_norm_backward(m, dpend, g->ln2_w, g->ln2_b, dln2, x->res2, w->ln2_w, x->ln2_mean,
                     x->ln2_rstd, BTs);
  }
  /* attention: d(attproj) = d(res3) */
  const mt_act *dln1 = attn_backward(m, l, x, dres, input_only, B, later ? &sum : NULL);
  if (later) {
    mt_linear_row_wait(&m->tp, &sum);
    m->ops->copy(m->dt, dpend, dres, btc);
    mt_norm_backward(m, dpend, g->ln2_w, g->ln2_b, dln2, x->res2, w->ln2_w, x->ln2_mean,
                     x->ln2_rstd, BTs);
  }
  m->ops->copy(m->dt, dres, dpend, btc);
  mt_norm_backward(m, dres, g->ln1_w, g->ln1_b, dln1, x0, w->ln1_w, x->ln1_mean, x->ln1_rstd, BTs);
}

void mt_block_backward_weight(mt_gpt *m, int l, const mt_layer_acts *x, int B) {
  const mt_tp *tp = &m->tp;
  const int Cl = m->C_local, Fl = m->mlp_local[l];
  mt_block_tensors *g = &m->g.blocks[l];
  if (x->is_moe) mt_moe_block_backward_weight(m, l, x);
  if (Fl > 0) { /* a MoE block without shared experts has no MLP */
    mt_linear_row_backward_weight(tp, g->fc_proj_w, g->fc_proj_b, x->dy_fcproj, x->fchg, B, Fl);
    mt_linear_col_backward_weight(tp, g->fc_w, g->fc_b, x->dy_fc, x->ln2, B, Fl * m->mlp_in);
  }
  mt_linear_row_backward_weight(tp, g->attn_proj_w, g->attn_proj_b, x->dy_attproj, x->atty, B,
                                Cl);
  mt_linear_col_backward_weight(tp, g->qkv_w, g->qkv_b, x->dy_qkv, x->ln1, B, m->qkv_local);
}
