/* The routed half of a MoE block: router (linear -> softmax -> top-k,
 * weights renormalised over the k), the dispatch of each token's k slots to
 * its experts' ranks (lib/parallel's mt_ep), the experts as one grouped GEMM
 * per direction (fc, GELU, proj), the way back, and the combine weighted by
 * the router; and their backward, with the Switch load-balancing loss and
 * the router z-loss.
 *
 * Losses, per MoE block, with dloss = 1 / (tokens of the step):
 *   load balancing  aux_coef * E * sum_e f[s][e] * P[s][e] per sequence s,
 *                   averaged over the step's sequences, where f is the
 *                   fraction of the sequence's k T slots routed to e (before
 *                   any dropping) and P the mean router probability of e
 *                   over its T tokens (Switch Transformer; per sequence, so
 *                   it is the same for any layout and micro-batch size);
 *   z-loss          z_coef * mean over tokens of logsumexp(logits)^2 (ST-MoE).
 * The model's reported loss stays the language-model loss; the statistics
 * (mt_gpt_moe_stats) carry these two.
 *
 * Buffers: the micro-batch's activations in a (see mt_gpt_acts), one block's
 * scratch in m->moe_* (gpt.c allocates both from the dispatch's row bounds). */
#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

void mt_moe_forward(mt_gpt *m, int l, const mt_block_tensors *w, const mt_moe_acts *a,
                    const float *x, float *out, int S, int Ts) {
  const mt_ops *o = m->ops;
  const int C = m->shape.n_embd, E = m->shape.moe_experts, k = m->shape.moe_topk;
  const int N = S * Ts, El = m->E_local, Fe = m->Fe_local;
  const int mi = mt_model_moe_before(&m->shape, l);
  mt_ep *ep = &m->ep;
  /* router */
  o->matmul_forward(m->moe_logits, x, w->router_w, NULL, N, C, E);
  o->moe_router_forward(a->probs, a->lse, a->top, a->topw, m->moe_logits, N, E, k);
  /* routing decisions, then the rows out to the experts */
  int *meta = m->moe_meta_host;
  mt_ep_stats st = {m->moe_tokens + (size_t)mi * E, 0.0};
  mt_ep_route(ep, a->top, S, Ts, a->slot, m->moe_send_tok, a->perm, a->inv, a->frac, meta,
              m->moe_stats_on ? &st : NULL);
  o->upload(a->meta, meta, (size_t)m->moe_meta_n * sizeof(int));
  const int n_send = meta[MT_EP_N_SEND], n_rows = meta[MT_EP_N_ROWS];
  float *recv = m->moe_recv_buf, *rows = ep->etp > 1 ? m->moe_rows_buf : recv;
  o->gather_rows(m->moe_send_buf, x, m->moe_send_tok, n_send, C);
  mt_ep_dispatch(ep, meta, m->moe_send_buf, recv, rows, C);
  /* the experts on expert-major rows: fc, GELU, proj (the proj bias once,
   * by etp rank 0: the etp ranks' outputs are summed on the way back) */
  const int *off = mt_ep_expert_off(ep, meta);
  o->gather_rows(a->xe, rows, a->perm, n_rows, C);
  o->grouped_matmul_forward(a->h, a->xe, w->e_fc_w, w->e_fc_b, off, El, C, Fe);
  o->gelu_forward(a->g, a->h, (size_t)n_rows * Fe);
  o->grouped_matmul_forward(m->moe_rows2_buf, a->g, w->e_proj_w,
                            ep->etp_rank == 0 ? w->e_proj_b : NULL, off, El, Fe, C);
  o->gather_rows(rows, m->moe_rows2_buf, a->inv, n_rows, C);
  mt_ep_combine(ep, meta, rows, recv, a->ys, C);
  o->moe_combine(out, a->ys, a->slot, a->topw, N, C, k);
  if (!m->moe_stats_on) return;
  /* this rank's shares of the two losses (x the step's tokens) */
  m->moe_dropped[mi] += st.dropped;
  if (m->moe_z_coef > 0.0f) m->moe_z[mi] += m->moe_z_coef * o->sumsq(a->lse, (size_t)N);
  if (m->moe_aux_coef > 0.0f && N > 0) {
    o->moe_prob_sums(m->moe_seq_buf, a->probs, N, E, Ts);
    /* the sums and fractions to the host, for a figure (no tensor math) */
    float *host = mt_malloc(2 * (size_t)S * E * sizeof(float) + 64);
    const float *psum = host, *frac = host + (size_t)S * E;
    o->download(host, m->moe_seq_buf, (size_t)S * E * sizeof(float));
    o->download(host + (size_t)S * E, a->frac, (size_t)S * E * sizeof(float));
    double sum = 0.0;
    for (size_t i = 0; i < (size_t)S * E; i++) sum += (double)frac[i] * (double)psum[i];
    m->moe_aux[mi] += (double)m->moe_aux_coef * E * sum;
    free(host);
  }
}

void mt_moe_backward(mt_gpt *m, int l, const mt_block_tensors *w, mt_block_tensors *g,
                     const mt_moe_acts *a, const float *x, const float *dout, float *dx, int S,
                     int Ts, float dloss) {
  (void)l;
  const mt_ops *o = m->ops;
  const int C = m->shape.n_embd, E = m->shape.moe_experts, k = m->shape.moe_topk;
  const int N = S * Ts, El = m->E_local, Fe = m->Fe_local;
  mt_ep *ep = &m->ep;
  int *meta = m->moe_meta_host;
  o->download(meta, a->meta, (size_t)m->moe_meta_n * sizeof(int));
  const int n_rows = meta[MT_EP_N_ROWS];
  const int *off = mt_ep_expert_off(ep, meta);
  float *recv = m->moe_recv_buf, *rows = ep->etp > 1 ? m->moe_rows_buf : recv;
  float *dy = m->moe_rows2_buf, *dgelu = m->moe_hid_buf, *dh = m->moe_hid2_buf;
  /* the combine: each slot's output gradient, and the router weights' */
  o->moe_combine_backward(m->moe_send_buf, m->moe_dtw, dout, a->ys, a->slot, a->topw, N, C, k);
  /* the slots' gradients out to the experts, as the rows went */
  mt_ep_dispatch(ep, meta, m->moe_send_buf, recv, rows, C);
  o->gather_rows(dy, rows, a->perm, n_rows, C);
  o->zero(dgelu, (size_t)n_rows * Fe);
  o->grouped_matmul_backward(dgelu, g->e_proj_w, g->e_proj_b, dy, a->g, w->e_proj_w, off, El,
                             Fe, C);
  o->zero(dh, (size_t)n_rows * Fe);
  o->gelu_backward(dh, a->h, dgelu, (size_t)n_rows * Fe);
  o->zero(dy, (size_t)n_rows * C); /* now the experts' input gradients, partial over etp */
  o->grouped_matmul_backward(dy, g->e_fc_w, g->e_fc_b, dh, a->xe, w->e_fc_w, off, El, C, Fe);
  o->gather_rows(rows, dy, a->inv, n_rows, C);
  mt_ep_combine(ep, meta, rows, recv, m->moe_send_buf, C);
  o->moe_gather_sum(dx, m->moe_send_buf, a->slot, N, C, k);
  /* the router: the combine weights' gradient, the load-balancing term
   * (aux_coef * E * f[s][e] * dloss for each token of sequence s) and the
   * z-loss's (2 z_coef dloss lse p) */
  const float *aux = NULL;
  if (m->moe_aux_coef > 0.0f && S > 0) {
    o->copy(m->moe_seq_buf, a->frac, (size_t)S * E);
    o->scale(m->moe_seq_buf, m->moe_aux_coef * (float)E * dloss, (size_t)S * E);
    aux = m->moe_seq_buf;
  }
  o->moe_router_backward(m->moe_logits, a->probs, a->lse, a->top, a->topw, m->moe_dtw, aux, Ts,
                         2.0f * m->moe_z_coef * dloss, N, E, k);
  o->matmul_backward(dx, g->router_w, NULL, m->moe_logits, x, w->router_w, N, C, E);
}
