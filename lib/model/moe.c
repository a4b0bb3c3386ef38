/* The MoE block: its MLP half is a router (linear -> softmax or sigmoid
 * scores -> top-k, weights renormalised over the k), the dispatch of each token's k slots to
 * its experts' ranks (moe_dispatch.c), the experts as one grouped GEMM
 * per direction (fc, GELU or SwiGLU, proj), the way back, and the combine weighted by
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
 * Under tensor parallelism without sp every tp rank holds the block's whole
 * (BT,C) input; each routes its 1/tp slice of every sequence and the slices'
 * outputs are gathered back (with sp the slices are the rank's own rows).
 *
 * Buffers: the micro-batch's activations in its set (see mt_gpt_acts; the
 * rows that grow with the routing held apart, acts.c), one block's scratch
 * in the mt_moe (sized here from the dispatch's row bounds, reused block
 * after block). The row bounds start at parallel.moe_buffer_factor x a
 * balanced routing's and grow when a routing brings a rank more (moe_grow).
 *
 * Under train.precision = bf16 (m->dt) the rows (the block's input and
 * output, the dispatched and combined rows, the experts' inputs, hidden
 * units and their gradients) are bf16 and move over ep and etp as 16-bit
 * bits; the experts run on bf16 rows with fp32 weight gradients.
 * The router stays fp32: its bf16 input and weight copy are widened (exact)
 * for an fp32 matmul, so the logits, softmax, top-k choices, combine
 * weights and the two losses are those fp32 gives on the same bf16 values
 * (bf16 logits would round scores 2^-8 apart into ties); its input gradient
 * is computed in fp32 and added to the block's bf16 one with one rounding.
 * Least-loaded placement is refused under bf16 (the layout). */
#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

/* an activation buffer of n elements of the activations' dtype */
static mt_act *act_rows(mt_gpt *m, mt_act_alloc_fn act, size_t n) {
  return act(m, (n * m->es + sizeof(float) - 1) / sizeof(float));
}

/* ------------------------------------------------------------------ */
/* life cycle                                                          */

void mt_moe_size(mt_moe *x, const mt_gpt *m) {
  const mt_model_shape *s = &m->shape;
  const int tp_size = m->tp.size, sp = m->tp.sp;
  x->E = s->moe_experts;
  x->k = s->moe_topk;
  x->C = s->n_embd;
  x->Ts = tp_size > 1 ? m->T / tp_size : m->T;
  x->slice = x->n_blocks > 0 && tp_size > 1 && !sp;
  if (x->n_blocks == 0) return;
  mt_ep_bounds(x->E, x->k, x->ep_size, x->etp_size, m->T, s->moe_capacity, x->buffer_factor,
               m->max_B, x->Ts, &x->send, &x->recv, &x->rows);
  x->meta_n = mt_ep_meta_ints(x->ep_size, x->etp_size, x->E_local, x->llep_alpha > 0.0);
}

/* One block's row scratch for the bounds x->recv, x->rows (its contents
 * are not kept: a block's scratch is written after its routing): received
 * rows, the etp-gathered ones, the experts' outputs and their hidden
 * units' gradients (dgelu, then dh: (rows, Fin)) */
static void scratch_fit(mt_moe *x, const mt_gpt *m) {
  const size_t C = (size_t)x->C, Fe = (size_t)x->Fe_local, es = m->es;
  size_t b[5] = {x->recv * C * es, x->etp_size > 1 ? x->rows * C * es : 0, x->rows * C * es,
                 x->rows * Fe * es, x->rows * Fe * (size_t)m->mlp_in * es};
  size_t bytes = 0;
  for (int i = 0; i < 5; i++) bytes += b[i] = (b[i] + 63) / 64 * 64;
  if (x->scratch) x->ops->free(MT_MEM_ACTIV, x->scratch, x->scratch_bytes);
  x->scratch_bytes = bytes;
  char *at = x->scratch = x->ops->alloc(MT_MEM_ACTIV, bytes);
  mt_act **dst[5] = {&x->recv_buf, &x->rows_buf, &x->rows2_buf, &x->hid_buf, &x->hid2_buf};
  for (int i = 0; i < 5; i++) *dst[i] = b[i] ? at : NULL, at += b[i];
}

/* A routing brought more rows than the buffers hold (mt_ep_fit grew the
 * dispatcher's bounds): the block's scratch to the new bounds, once, with
 * a line from this rank (the sets' rows follow slot by slot: mt_moe_rows_fit) */
static void moe_grow(mt_gpt *m) {
  mt_moe *x = &m->moe;
  if (x->ep.max_recv == x->recv && x->ep.max_rows == x->rows) return;
  x->recv = x->ep.max_recv;
  x->rows = x->ep.max_rows;
  scratch_fit(x, m);
  /* (a plan's count-only model counts what grew, without a line) */
  if (x->ep.ep_g && x->ep.ep_g->backend == MT_COMM_COUNT) return;
  mt_info("MoE buffers grown to %zu received and %zu expert rows per block (%.2f MiB of "
          "scratch; parallel.moe_buffer_factor = %g): a routing brought more than they held",
          x->recv, x->rows, (double)x->scratch_bytes / 1048576.0, x->buffer_factor);
}

void mt_moe_create(mt_moe *x, mt_gpt *m, const mt_gpt_parallel *par, mt_group *tp_g,
                   mt_act_alloc_fn act) {
  const mt_model_shape *s = &m->shape;
  if (x->n_blocks == 0) return;
  /* one MoE block's scratch: N local tokens, the dispatch's row bounds */
  const size_t B = (size_t)m->max_B, N = B * (size_t)x->Ts, E = (size_t)x->E;
  const size_t k = (size_t)x->k, C = (size_t)x->C;
  const size_t BT = B * (size_t)m->T;
  x->logits = act(m, N * E);
  x->dtw = act(m, N * k);
  x->out = act_rows(m, act, N * C);
  x->seq_buf = act(m, B * E);
  x->send_buf = act_rows(m, act, x->send * C);
  x->send_tok = (int *)act(m, x->send);
  /* what grows with the routing's rows: its own allocation (moe_grow) */
  x->ops = m->ops;
  scratch_fit(x, m);
  x->store = mt_calloc(1, sizeof *x->store);
  if (x->slice) { /* the rank's slice of each sequence, and back */
    x->xloc = act_rows(m, act, N * C);
    x->dxl = act_rows(m, act, N * C);
    x->full = act_rows(m, act, BT * C);
  }
  if (m->dt != MT_DT_F32) { /* the fp32 router's widened input, weight and input gradient */
    x->router_x = act(m, N * C);
    x->router_w = act(m, E * C);
    x->router_dx = act(m, N * C);
  }
  /* which ep rank holds each expert: the registry's placement */
  int *owner = mt_calloc((size_t)x->E, sizeof(int));
  for (int e = 0; e < x->E; e++) owner[e] = mt_registry_ep_owner(&m->reg, x->E, e);
  /* the router's per-sequence counts go over every rank holding a piece of
   * the sequences: tp (each routes a 1/tp slice) x cp (each holds 1/cp of
   * the tokens) */
  mt_group *seq_g = par && par->seq && par->seq->size > 1 ? par->seq : tp_g;
  mt_ep_create(&x->ep, par ? par->ep : NULL, par ? par->etp : NULL, seq_g, m->ops, x->E, x->k,
               m->T, s->moe_capacity, x->buffer_factor, m->max_B, x->Ts, owner);
  x->ep.dt = m->dt;
  free(owner);
  if (x->llep_alpha > 0.0) { /* least-loaded: the lent and helped experts' buffers */
    mt_ep_set_balance(&x->ep, x->llep_alpha, x->llep_min_rows);
    x->llep = act(m, mt_moe_llep_floats(x));
  }
  x->meta_host = mt_calloc((size_t)x->meta_n, sizeof(int));
  x->tokens = mt_calloc((size_t)x->n_blocks * E + 1, sizeof(double));
  x->dropped = mt_calloc((size_t)x->n_blocks + 1, sizeof(double));
  x->aux = mt_calloc((size_t)x->n_blocks + 1, sizeof(double));
  x->z = mt_calloc((size_t)x->n_blocks + 1, sizeof(double));
  x->rows_done = mt_calloc(2 * (size_t)x->n_blocks + 1, sizeof(double));
  x->moved = x->rows_done + x->n_blocks;
  /* the balancing bias: zeros until a step or a checkpoint sets it */
  x->bias_host = mt_calloc((size_t)x->n_blocks * E + 1, sizeof(float));
  x->bias = act(m, (size_t)x->n_blocks * E);
  m->ops->upload(x->bias, x->bias_host, (size_t)x->n_blocks * E * sizeof(float));
}

void mt_moe_destroy(mt_moe *x) {
  if (x->scratch) x->ops->free(MT_MEM_ACTIV, x->scratch, x->scratch_bytes);
  if (x->n_blocks > 0) {
    mt_ep_destroy(&x->ep);
    free(x->meta_host);
    free(x->tokens);
    free(x->dropped);
    free(x->aux);
    free(x->z);
    free(x->rows_done);
    free(x->bias_host);
  }
  memset(x, 0, sizeof *x);
}

/* ------------------------------------------------------------------ */
/* the routed experts on this rank's local tokens                      */

/* least-loaded: experts this rank helps with in the block of routing record
 * meta (0 without LLEP), and their weights (HW) and gradients (HG), tensor t
 * of fc weight, fc bias, proj weight, proj bias */
static int helped(const mt_moe *moe, const int *meta) {
  return moe->ep.H > 0 ? mt_ep_llep(&moe->ep, meta)[MT_LLEP_N_HELP] : 0;
}
#define HW(moe, t) /* weights' dtype; the biases (t odd) NULL where the experts have none */ \
  ((t) % 2 && !(moe)->has_bias ? NULL : (mt_act *)mt_moe_llep_region(moe, MT_LLEP_HELP_W, t))
#define HG(moe, t) ((t) % 2 && !(moe)->has_bias ? NULL : mt_moe_llep_region(moe, MT_LLEP_HELP_G, t))

/* The router's input (N, C) and weight (E, C) as fp32: themselves under
 * fp32, widened into the mt_moe's buffers under bf16 (exact) */
static const float *router_input(mt_gpt *m, const mt_act *x, int N) {
  if (m->dt == MT_DT_F32) return x;
  m->ops->convert(m->moe.router_x, MT_DT_F32, x, m->dt, (size_t)N * m->moe.C);
  return m->moe.router_x;
}
static const float *router_weight(mt_gpt *m, const mt_block_tensors *w) {
  if (m->dt == MT_DT_F32) return w->router_w;
  m->ops->convert(m->moe.router_w, MT_DT_F32, w->router_w, m->dt, (size_t)m->moe.E * m->moe.C);
  return m->moe.router_w;
}

/* The routed experts of block l on this rank's local tokens x (N = S x Ts
 * rows, S sequences' slices of Ts tokens): router, routing, dispatch,
 * experts, combine into out (N, C). Collective over the ep, etp and (tokens
 * split over tp) tp groups. */
static void routed_forward(mt_gpt *m, int l, const mt_block_tensors *w, const mt_moe_acts *slot,
                           const mt_act *x, mt_act *out, int S, int Ts) {
  mt_moe_acts rows_of = *slot, *a = &rows_of; /* (its rows' pointers set after the routing) */
  mt_moe *moe = &m->moe;
  const mt_ops *o = m->ops;
  const mt_dtype dt = m->dt;
  const int C = moe->C, E = moe->E, k = moe->k;
  const int N = S * Ts, El = moe->E_local, Fe = moe->Fe_local, Fin = Fe * m->mlp_in;
  const int mi = mt_model_moe_before(&m->shape, l);
  mt_ep *ep = &moe->ep;
  /* router (fp32: under bf16 on its widened input and weight) */
  o->matmul_forward(MT_DT_F32, moe->logits, router_input(m, x, N), router_weight(m, w), NULL,
                    N, C, E);
  const float *bias = moe->balance == MT_MOE_BALANCE_BIAS ? moe->bias + (size_t)mi * E : NULL;
  const int sigmoid = m->shape.moe_router == MT_ROUTER_SIGMOID;
  o->moe_router_forward(a->probs, a->lse, a->top, a->topw, moe->logits, bias, N, E, k, sigmoid);
  /* routing decisions, then the rows out to the experts */
  int *meta = moe->meta_host;
  mt_ep_stats st = {.tokens = moe->tokens + (size_t)mi * E};
  mt_ep_route(ep, a->top, S, Ts, a->slot, moe->send_tok, a->frac, meta,
              moe->stats_on ? &st : NULL);
  o->upload(a->meta, meta, (size_t)moe->meta_n * sizeof(int));
  const int n_send = meta[MT_EP_N_SEND], n_rows = meta[MT_EP_N_ROWS];
  moe_grow(m);
  mt_moe_rows_fit(m, a, 0);
  mt_ep_upload_perm(ep, a->perm, a->inv);
  mt_act *recv = moe->recv_buf, *rows = ep->etp > 1 ? moe->rows_buf : recv;
  o->gather_rows(dt, moe->send_buf, x, moe->send_tok, n_send, C);
  mt_ep_dispatch(ep, meta, moe->send_buf, recv, rows, C);
  /* the experts on expert-major rows: fc, GELU, proj (the proj bias once,
   * by etp rank 0: the etp ranks' outputs are summed on the way back) */
  const int *off = mt_ep_expert_off(ep, meta);
  const int nh = helped(moe, meta); /* least-loaded: other ranks' experts, rows after ours */
  if (ep->H > 0) mt_moe_llep_weights(moe, dt, w, meta);
  o->gather_rows(dt, a->xe, rows, a->perm, n_rows, C);
  o->grouped_matmul_forward(dt, a->h, a->xe, w->e_fc_w, w->e_fc_b, off, El, C, Fin);
  if (nh > 0)
    o->grouped_matmul_forward(dt, a->h, a->xe, HW(moe, 0), HW(moe, 1), off + El, nh,
              C, Fin);
  mt_mlp_act_forward(m, a->g, a->h, n_rows, Fe);
  o->grouped_matmul_forward(dt, moe->rows2_buf, a->g, w->e_proj_w,
            ep->etp_rank == 0 ? w->e_proj_b : NULL, off, El, Fe, C);
  if (nh > 0)
    o->grouped_matmul_forward(dt, moe->rows2_buf, a->g, HW(moe, 2), HW(moe, 3),
              off + El, nh, Fe, C);
  o->gather_rows(dt, rows, moe->rows2_buf, a->inv, n_rows, C);
  mt_ep_combine(ep, meta, rows, recv, a->ys, C);
  o->moe_combine(dt, out, a->ys, a->slot, a->topw, N, C, k);
  if (!moe->stats_on) return;
  /* this rank's shares of the two losses (x the step's tokens) */
  moe->dropped[mi] += st.dropped;
  moe->rows_done[mi] += st.rows;
  moe->moved[mi] += st.moved;
  if (moe->z_coef > 0.0f) moe->z[mi] += moe->z_coef * o->sumsq(MT_DT_F32, a->lse, (size_t)N);
  if (moe->aux_coef > 0.0f && N > 0) {
    o->moe_prob_sums(moe->seq_buf, a->probs, N, E, Ts);
    /* the sums and fractions to the host, for a figure (no tensor math) */
    float *host = mt_malloc(2 * (size_t)S * E * sizeof(float) + 64);
    const float *psum = host, *frac = host + (size_t)S * E;
    o->download(host, moe->seq_buf, (size_t)S * E * sizeof(float));
    o->download(host + (size_t)S * E, a->frac, (size_t)S * E * sizeof(float));
    double sum = 0.0;
    for (size_t i = 0; i < (size_t)S * E; i++) sum += (double)frac[i] * (double)psum[i];
    moe->aux[mi] += (double)moe->aux_coef * E * sum;
    free(host);
  }
}

/* Its backward from dout (N, C): the experts' and router's weight
 * gradients into g, the input gradient added to dx (N, C); dloss scales
 * the load-balancing and z-loss terms as it scales each token's loss.
 * input_only (a split backward's input pass): the experts' weight
 * gradients wait for routed_backward_weight, their output and hidden
 * gradients kept in a->dy, a->dh (the router's weight gradient, one small
 * GEMM, is taken here). */
static void routed_backward(mt_gpt *m, const mt_block_tensors *w, mt_block_tensors *g,
                            const mt_moe_acts *a, const mt_act *x, const mt_act *dout,
                            mt_act *dx, int S, int Ts, float dloss, int input_only) {
  mt_moe *moe = &m->moe;
  const mt_ops *o = m->ops;
  const mt_dtype dt = m->dt;
  const int C = moe->C, E = moe->E, k = moe->k;
  const int N = S * Ts, El = moe->E_local, Fe = moe->Fe_local, Fin = Fe * m->mlp_in;
  mt_ep *ep = &moe->ep;
  int *meta = moe->meta_host;
  o->download(meta, a->meta, (size_t)moe->meta_n * sizeof(int));
  const int n_rows = meta[MT_EP_N_ROWS];
  const int *off = mt_ep_expert_off(ep, meta);
  mt_act *recv = moe->recv_buf, *rows = ep->etp > 1 ? moe->rows_buf : recv;
  /* dy the experts' output gradients, dxe their input gradients (one
   * buffer unless dy is kept for the weight pass) */
  mt_moe_acts kept = *a; /* the split backward's gradients, made room for */
  if (input_only) mt_moe_rows_fit(m, &kept, 1);
  mt_act *dy = input_only ? kept.dy : moe->rows2_buf, *dxe = moe->rows2_buf;
  mt_act *dgelu = moe->hid_buf, *dh = input_only ? kept.dh : moe->hid2_buf;
  float *dw_proj = input_only ? NULL : g->e_proj_w, *db_proj = input_only ? NULL : g->e_proj_b;
  float *dw_fc = input_only ? NULL : g->e_fc_w, *db_fc = input_only ? NULL : g->e_fc_b;
  /* least-loaded: the helped experts' weights again, their gradients here */
  const int nh = helped(moe, meta);
  if (ep->H > 0) mt_moe_llep_weights(moe, dt, w, meta);
  if (ep->H > 0 && !input_only) mt_moe_llep_zero_grads(moe, meta);
  float *hg[4] = {NULL, NULL, NULL, NULL};
  if (!input_only)
    for (int t = 0; t < 4 && nh > 0; t++) hg[t] = HG(moe, t);
  /* the combine: each slot's output gradient, and the router weights' */
  o->moe_combine_backward(dt, moe->send_buf, moe->dtw, dout, a->ys, a->slot, a->topw,
            N, C, k);
  /* the slots' gradients out to the experts, as the rows went */
  mt_ep_dispatch(ep, meta, moe->send_buf, recv, rows, C);
  o->gather_rows(dt, dy, rows, a->perm, n_rows, C);
  o->zero(dt, dgelu, (size_t)n_rows * Fe);
  o->grouped_matmul_backward(dt, dgelu, dw_proj, db_proj, dy, a->g, w->e_proj_w, off,
            El, Fe, C);
  if (nh > 0)
    o->grouped_matmul_backward(dt, dgelu, hg[2], hg[3], dy, a->g, HW(moe, 2),
              off + El, nh, Fe, C);
  mt_mlp_act_backward(m, dh, a->h, dgelu, n_rows, Fe);
  /* the experts' input gradients, partial over etp */
  o->zero(dt, dxe, (size_t)n_rows * C);
  o->grouped_matmul_backward(dt, dxe, dw_fc, db_fc, dh, a->xe, w->e_fc_w, off, El, C,
            Fin);
  if (nh > 0)
    o->grouped_matmul_backward(dt, dxe, hg[0], hg[1], dh, a->xe, HW(moe, 0),
              off + El, nh, C, Fin);
  if (ep->H > 0 && !input_only) mt_moe_llep_grads(moe, g, meta);
  o->gather_rows(dt, rows, dxe, a->inv, n_rows, C);
  mt_ep_combine(ep, meta, rows, recv, moe->send_buf, C);
  o->moe_gather_sum(dt, dx, moe->send_buf, a->slot, N, C, k);
  /* the router: the combine weights' gradient, the load-balancing term
   * (aux_coef * E * f[s][e] * dloss for each token of sequence s) and the
   * z-loss's (2 z_coef dloss lse p) */
  const float *aux = NULL;
  if (moe->aux_coef > 0.0f && S > 0) {
    o->copy(MT_DT_F32, moe->seq_buf, a->frac, (size_t)S * E);
    o->scale(MT_DT_F32, moe->seq_buf, moe->aux_coef * (float)E * dloss, (size_t)S * E);
    aux = moe->seq_buf;
  }
  o->moe_router_backward(moe->logits, a->probs, a->lse, a->top, a->topw, moe->dtw, aux, Ts,
                         2.0f * moe->z_coef * dloss, N, E, k,
                         m->shape.moe_router == MT_ROUTER_SIGMOID);
  if (dt == MT_DT_F32) {
    o->matmul_backward(MT_DT_F32, dx, g->router_w, NULL, moe->logits, x, w->router_w, N, C, E);
    return;
  }
  /* bf16: the fp32 matmul on the widened input and weight (the same bits
   * as the forward's), its input gradient narrowed (send_buf is free now)
   * and added to dx with one rounding */
  const size_t nc = (size_t)N * C;
  o->matmul_backward_first(MT_DT_F32, moe->router_dx, g->router_w, NULL, moe->logits,
                           router_input(m, x, N), router_weight(m, w), N, C, E);
  o->convert(moe->send_buf, dt, moe->router_dx, MT_DT_F32, nc);
  o->axpy(dt, dx, 1.0f, moe->send_buf, nc);
}

/* The weight pass of a split backward: the experts' weight gradients from
 * the output and hidden gradients the input pass kept, on the rows (and
 * routing record) the forward or its recompute left in a. */
static void routed_backward_weight(mt_gpt *m, const mt_block_tensors *w, mt_block_tensors *g,
                                   const mt_moe_acts *a) {
  mt_moe *moe = &m->moe;
  const mt_ops *o = m->ops;
  const int C = moe->C, El = moe->E_local, Fe = moe->Fe_local;
  int *meta = moe->meta_host;
  o->download(meta, a->meta, (size_t)moe->meta_n * sizeof(int));
  const int *off = mt_ep_expert_off(&moe->ep, meta);
  o->grouped_matmul_backward(m->dt, NULL, g->e_proj_w, g->e_proj_b, a->dy, a->g,
            w->e_proj_w, off, El, Fe, C);
  o->grouped_matmul_backward(m->dt, NULL, g->e_fc_w, g->e_fc_b, a->dh, a->xe,
            w->e_fc_w, off, El, C, Fe * m->mlp_in);
  if (moe->ep.H == 0) return;
  /* least-loaded: the helped experts' gradients (no weights needed), back */
  const int nh = helped(moe, meta);
  mt_moe_llep_zero_grads(moe, meta);
  if (nh > 0) {
    o->grouped_matmul_backward(m->dt, NULL, HG(moe, 2), HG(moe, 3), a->dy, a->g, NULL,
              off + El, nh, Fe, C);
    o->grouped_matmul_backward(m->dt, NULL, HG(moe, 0), HG(moe, 1), a->dh, a->xe, NULL,
              off + El, nh, C, Fe * m->mlp_in);
  }
  mt_moe_llep_grads(moe, g, meta);
}

/* ------------------------------------------------------------------ */
/* the block's MLP half                                                */

/* A MoE block's local tokens: the ln2 output (BTs,C) as it is (whole
 * sequences, or this rank's sp slice), or without sp under tensor
 * parallelism this rank's 1/tp slice of each sequence of the (BT,C) copy
 * every tp rank holds. */
static const mt_act *local_tokens(mt_gpt *m, const mt_act *full, mt_act *slice, int B) {
  if (!m->moe.slice) return full;
  const size_t C = (size_t)m->moe.C, Ts = (size_t)m->moe.Ts, es = m->es;
  for (int b = 0; b < B; b++)
    m->ops->copy(m->dt, mt_act_at(es, slice, (size_t)b * Ts * C),
              mt_act_at(es, full, ((size_t)b * m->T + (size_t)m->tp.rank * Ts) * C), Ts * C);
  return slice;
}

void mt_moe_block_forward(mt_gpt *m, int l, const mt_block_tensors *w, const mt_layer_acts *x,
                          int B) {
  mt_moe *moe = &m->moe;
  const mt_ops *o = m->ops;
  const int C = moe->C;
  const size_t BT = (size_t)B * m->T, N = (size_t)B * moe->Ts;
  const int shared = m->mlp_local[l] > 0;
  const mt_act *xl = local_tokens(m, x->ln2, moe->xloc, B);
  routed_forward(m, l, w, &x->moe, xl, moe->out, B, moe->Ts);
  if (moe->slice) { /* every tp rank's slices back into the whole (BT,C) */
    mt_act *full = shared ? moe->full : x->fcproj;
    mt_tp_gather_seq(&m->tp, moe->out, full, B, m->T, C);
    if (shared) o->axpy(m->dt, x->fcproj, 1.0f, full, BT * C);
  } else if (shared) {
    o->axpy(m->dt, x->fcproj, 1.0f, moe->out, N * C);
  } else {
    o->copy(m->dt, x->fcproj, moe->out, N * C);
  }
}

const mt_act *mt_moe_block_backward(mt_gpt *m, int l, const mt_layer_acts *x,
                                    const mt_act *dres, const mt_act *dln, mt_act *spare,
                                    float dloss, int input_only, int B) {
  mt_moe *moe = &m->moe;
  const mt_ops *o = m->ops;
  const int C = moe->C;
  const size_t BT = (size_t)B * m->T, N = (size_t)B * moe->Ts;
  const int shared = dln != NULL;
  const mt_act *xl = local_tokens(m, x->ln2, moe->xloc, B);
  const mt_act *dl = local_tokens(m, dres, moe->out, B);
  /* where the local tokens' input gradient accumulates */
  mt_act *dx = moe->slice ? moe->dxl : shared ? (mt_act *)dln : spare;
  if (moe->slice || !shared) o->zero(m->dt, dx, N * C);
  routed_backward(m, &m->p.blocks[l], &m->g.blocks[l], &x->moe, xl, dl, dx, B, moe->Ts, dloss,
                  input_only);
  if (!moe->slice) return shared ? dln : spare;
  /* each tp rank's tokens' gradients, gathered into the whole (BT,C) */
  mt_act *full = shared ? moe->full : spare;
  mt_tp_gather_seq(&m->tp, dx, full, B, m->T, C);
  if (!shared) return full;
  o->axpy(m->dt, (mt_act *)dln, 1.0f, full, BT * C);
  return dln;
}

void mt_moe_block_backward_weight(mt_gpt *m, int l, const mt_layer_acts *x) {
  routed_backward_weight(m, &m->p.blocks[l], &m->g.blocks[l], &x->moe);
}
