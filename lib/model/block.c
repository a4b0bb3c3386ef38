/* A transformer block: LayerNorm, attention (column-parallel QKV, the
 * attention module, row-parallel projection), residual; LayerNorm, MLP
 * (column-parallel fc, GELU, row-parallel projection) or, in a MoE block,
 * its shared experts as that MLP plus the routed experts (moe.c); residual.
 * Forward, backward (whole, or split into an input pass and a weight pass)
 * and recompute. */
#include "model/model_internal.h"

void mt_block_forward(mt_gpt *m, int l, const mt_block_tensors *w, const mt_act *x0,
                      const mt_layer_acts *x, int B) {
  const mt_ops *o = m->ops;
  const mt_tp *tp = &m->tp;
  const int C = m->shape.n_embd, BTs = B * m->T_sp, Cl = m->C_local, Fl = m->mlp_local[l];
  const size_t btc = (size_t)BTs * C;
  /* attention: LN, column-parallel QKV (local heads), row-parallel proj */
  o->layernorm_forward(m->dt, x->ln1, x->ln1_mean, x->ln1_rstd, x0, w->ln1_w,
            w->ln1_b, BTs, C);
  mt_linear_col_forward(tp, x->qkv, x->ln1, w->qkv_w, w->qkv_b, B, 3 * Cl);
  mt_attention_forward(&m->attn, x->atty, x->qkv, &x->att, B);
  mt_linear_row_forward(tp, x->attproj, x->atty, w->attn_proj_w, w->attn_proj_b, B, Cl);
  o->residual_forward(m->dt, x->res2, x0, x->attproj, btc);
  /* MLP (a MoE block: its shared experts, if any): LN, column-parallel fc +
   * GELU, row-parallel proj; then a MoE block's routed experts */
  o->layernorm_forward(m->dt, x->ln2, x->ln2_mean, x->ln2_rstd, x->res2, w->ln2_w,
            w->ln2_b, BTs, C);
  if (Fl > 0) {
    mt_linear_col_forward(tp, x->fch, x->ln2, w->fc_w, w->fc_b, B, Fl);
    o->gelu_forward(m->dt, x->fchg, x->fch, (size_t)B * m->T * Fl);
    mt_linear_row_forward(tp, x->fcproj, x->fchg, w->fc_proj_w, w->fc_proj_b, B, Fl);
  }
  if (x->is_moe) mt_moe_block_forward(m, l, w, x, B);
  o->residual_forward(m->dt, x->res3, x->res2, x->fcproj, btc);
}

/* The same kernels on the same input give the stored values bit for bit
 * (the output goes to the workspace, the set's copy stays). */
void mt_block_recompute(mt_gpt *m, int l, const mt_act *x0, const mt_layer_acts *x, int B) {
  mt_layer_acts r = *x;
  r.res3 = m->ws.residual3;
  /* a MoE block routes again as it did (same input, same bias: the same
   * choices and dispatch); its routing was counted by the forward */
  int stats = m->moe.stats_on;
  m->moe.stats_on = 0;
  mt_block_forward(m, l, &m->p.blocks[l], x0, &r, B);
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

void mt_block_backward(mt_gpt *m, int l, const mt_act *x0, const mt_layer_acts *x, mt_act *dres,
                       int input_only, float dloss, int B) {
  const mt_ops *o = m->ops;
  const mt_tp *tp = &m->tp;
  const int C = m->shape.n_embd, BTs = B * m->T_sp, Cl = m->C_local, Fl = m->mlp_local[l];
  const size_t bt = (size_t)B * m->T;
  const mt_block_tensors *w = &m->p.blocks[l];
  mt_block_tensors *g = &m->g.blocks[l];
  mt_gpt_acts *d = &m->d;
  mt_act *dpart = d->ln1;
  const mt_act *dln = NULL;
  /* MLP: dres is d(residual3) = d(fcproj) and flows on to d(residual2) */
  if (Fl > 0) {
    row_backward(m, dres, x->dy_fcproj, d->fch_gelu, g->fc_proj_w, g->fc_proj_b, x->fchg,
                 w->fc_proj_w, Fl, input_only, B);
    mt_act *dfch = input_only ? x->dy_fc : d->fch;
    o->zero(m->dt, dfch, bt * Fl);
    o->gelu_backward(m->dt, dfch, x->fch, d->fch_gelu, bt * Fl);
    dln = mt_linear_col_backward(tp, dpart, g->fc_w, g->fc_b, dfch, input_only ? NULL : x->ln2,
                                 w->fc_w, B, Fl);
  }
  if (x->is_moe) dln = mt_moe_block_backward(m, l, x, dres, dln, dpart, dloss, input_only, B);
  o->layernorm_backward(m->dt, dres, g->ln2_w, g->ln2_b, dln, x->res2, w->ln2_w,
            x->ln2_mean, x->ln2_rstd, BTs, C);
  /* attention: dres is now d(residual2) = d(attproj) and flows on to d(input) */
  row_backward(m, dres, x->dy_attproj, d->atty, g->attn_proj_w, g->attn_proj_b, x->atty,
               w->attn_proj_w, Cl, input_only, B);
  mt_act *dqkv = input_only ? x->dy_qkv : d->qkv;
  mt_attention_backward(&m->attn, dqkv, d->atty, x->atty, x->qkv, &x->att, B);
  dln = mt_linear_col_backward(tp, dpart, g->qkv_w, g->qkv_b, dqkv, input_only ? NULL : x->ln1,
                               w->qkv_w, B, 3 * Cl);
  o->layernorm_backward(m->dt, dres, g->ln1_w, g->ln1_b, dln, x0, w->ln1_w,
            x->ln1_mean, x->ln1_rstd, BTs, C);
}

void mt_block_backward_weight(mt_gpt *m, int l, const mt_layer_acts *x, int B) {
  const mt_tp *tp = &m->tp;
  const int Cl = m->C_local, Fl = m->mlp_local[l];
  mt_block_tensors *g = &m->g.blocks[l];
  if (x->is_moe) mt_moe_block_backward_weight(m, l, x);
  if (Fl > 0) { /* a MoE block without shared experts has no MLP */
    mt_linear_row_backward_weight(tp, g->fc_proj_w, g->fc_proj_b, x->dy_fcproj, x->fchg, B, Fl);
    mt_linear_col_backward_weight(tp, g->fc_w, g->fc_b, x->dy_fc, x->ln2, B, Fl);
  }
  mt_linear_row_backward_weight(tp, g->attn_proj_w, g->attn_proj_b, x->dy_attproj, x->atty, B,
                                Cl);
  mt_linear_col_backward_weight(tp, g->qkv_w, g->qkv_b, x->dy_qkv, x->ln1, B, 3 * Cl);
}
