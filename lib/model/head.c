/* The model's two ends: the vocabulary-parallel embedding of the tokens
 * (learned positions added under gpt2) and the final norm with the LM head
 * (wte when tied, lm_head otherwise) and its vocabulary-parallel
 * cross-entropy, forward and backward. */
#include "model/model_internal.h"

/* The vocabulary-parallel embedding of the micro-batch's tokens at their
 * positions (positions.c: their places in the sequence's chunks, or in
 * their documents): out (BT,C) = wte[token] (rows held here) +
 * wpe[position] (wpe NULL: none). */
static void embed_forward(mt_gpt *m, mt_act *out, const mt_act *wpe, int B) {
  m->ops->encoder_vp_forward(m->dt, out, m->tok_in, m->p.wte, m->v_start, m->V_local, wpe,
                             m->tok_pos, B, m->T, m->shape.n_embd);
}

/* Its backward: dwte[token] += dout (rows held here), dwpe[position] += dout. */
static void embed_backward(mt_gpt *m, const mt_act *dout, int B) {
  m->ops->encoder_vp_backward(m->dt, m->g.wte, m->g.wpe, dout, m->tok_in, m->tok_pos,
                              m->v_start, m->V_local, B, m->T, m->shape.n_embd);
}

/* The micro-batch's tokens into backend memory (the kernels read them
 * there); called before each use, since pipeline stages interleave
 * micro-batches. */
static void stage_tokens(mt_gpt *m, const int *inputs, const int *targets, int B) {
  size_t bytes = (size_t)B * m->T * sizeof(int);
  if (inputs) m->ops->upload(m->tok_in, inputs, bytes);
  if (targets) m->ops->upload(m->tok_tgt, targets, bytes);
}

/* Vocabulary-parallel embedding: rows held here, zeros for the rest, and
 * the positions once (tp rank 0); summed over tp like a row-parallel
 * output. */
void mt_embed_forward(mt_gpt *m, const mt_pass_args *x) {
  stage_tokens(m, x->inputs, NULL, x->B);
  embed_forward(m, mt_linear_row_partial(&m->tp, x->a->encoded), m->tp.rank == 0 ? m->p.wpe : NULL,
                x->B);
  mt_linear_row_reduce(&m->tp, x->a->encoded, x->B);
}

/* the LM head's weight (or gradient) in t: wte when tied */
static mt_act *head_w(const mt_gpt *m, const mt_gpt_tensors *t) {
  return m->shape.tied ? t->wte : t->lm_head;
}

/* The final norm and the LM head: vocabulary-parallel logits, then
 * the cross-entropy from row statistics summed over tp (the logits never
 * move). Returns the sum of the B*T position losses. */
double mt_head_forward(mt_gpt *m, const mt_pass_args *x) {
  const mt_ops *o = m->ops;
  mt_gpt_acts *a = x->a;
  const int B = x->B, BT = B * m->T, BTs = B * m->T_sp;
  const int Vl = m->V_local, v0 = m->v_start, nreal = m->v_real;
  const size_t bt = (size_t)BT;
  stage_tokens(m, NULL, x->targets, B);
  mt_act *last = mt_gpt_range_output(m, a, x->l1 - x->l0, B);
  /* the last block left its output's residual sum to the final norm */
  if (x->l1 > x->l0 && mt_block_defers_output(m, x, x->l1 - 1)) {
    const mt_layer_acts prev = mt_layer_at(m, a, x->l1 - 1, x->l0, B);
    mt_residual_norm_forward(m, last, a->lnf, a->lnf_mean, a->lnf_rstd, prev.res2, prev.fcproj,
                             m->p.lnf_w, m->p.lnf_b, BTs);
  } else {
    mt_norm_forward(m, a->lnf, a->lnf_mean, a->lnf_rstd, last, m->p.lnf_w, m->p.lnf_b, BTs);
  }
  mt_linear_col_forward(&m->tp, a->logits, a->lnf, head_w(m, &m->p), NULL, B, Vl);
  if (m->tp.size == 1) {
    /* the whole vocabulary here: the three pieces' bits in one pass over
     * the logits (a row's maximum, exps and probabilities while it is in
     * cache), where the pieces read the logits three times and form the
     * exps twice */
    o->softmax_xent_forward(m->dt, a->losses, a->logits, a->logits, m->tok_tgt, BT, nreal, Vl);
    return o->sum(MT_DT_F32, a->losses, bt);
  }
  o->xent_vp_max(m->dt, m->rowmax, a->logits, BT, Vl, nreal);
  mt_tp_allreduce_max(&m->tp, m->rowmax, bt);
  /* the exps are only summed here, and the probabilities formed from the
   * logits in finish, in place */
  o->xent_vp_exp(m->dt, m->xent_stats, a->logits, m->rowmax, m->tok_tgt, v0, BT, Vl, nreal);
  mt_tp_allreduce_f64(&m->tp, m->xent_stats, 2 * bt);
  o->xent_vp_finish(m->dt, a->losses, a->logits, a->logits, m->xent_stats, m->rowmax, m->tok_tgt,
                    BT, Vl, nreal);
  return o->sum(MT_DT_F32, a->losses, bt);
}

/* loss -> logits (in place over the probabilities, kept there for the
 * weight pass) -> lnf -> the residual stream's gradient m->d.residual3 */
void mt_head_backward(mt_gpt *m, const mt_pass_args *x) {
  const mt_ops *o = m->ops;
  mt_gpt_acts *a = x->a;
  const int B = x->B, BT = B * m->T, BTs = B * m->T_sp;
  const int Vl = m->V_local;
  stage_tokens(m, NULL, x->targets, B);
  o->xent_vp_backward(m->dt, a->logits, a->logits, m->tok_tgt, m->v_start, x->dloss,
            BT, Vl, m->v_real);
  const mt_act *dln = mt_linear_col_backward(&m->tp, m->d.ln1, head_w(m, &m->g), NULL,
                                             a->logits, x->input_only ? NULL : a->lnf,
                                             head_w(m, &m->p), B, Vl);
  mt_norm_backward_first(m, m->d.residual3, m->g.lnf_w, m->g.lnf_b, dln,
                         mt_gpt_range_output(m, a, x->l1 - x->l0, B), m->p.lnf_w, a->lnf_mean,
                         a->lnf_rstd, BTs);
}

void mt_embed_backward(mt_gpt *m, const mt_act *dres, const mt_pass_args *x) {
  /* every rank sees the whole gradient of the embedding output: its wte
   * rows and all of wpe get their full gradients, no sum over tp needed */
  stage_tokens(m, x->inputs, NULL, x->B);
  embed_backward(m, mt_linear_row_dout(&m->tp, dres, x->B), x->B);
}

/* the LM head's weight gradient: a->logits holds d(logits) since the input pass */
void mt_head_backward_weight(mt_gpt *m, const mt_pass_args *x) {
  mt_linear_col_backward_weight(&m->tp, head_w(m, &m->g), NULL, x->a->logits, x->a->lnf, x->B,
                                m->V_local);
}
