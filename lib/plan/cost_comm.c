/* The cost model's communication (cost_internal.h): the links a group's
 * messages take (inside a node: the intra-node bandwidth, else the
 * network), collectives priced as the virtual device prices them, and a
 * chunk's tp, cp and ep seconds per micro-batch: its bytes over the link
 * plus a latency per call. */
#include "plan/cost_internal.h"

double mt_cost_link_bw(const mt_cost_profile *p, int inside) {
  return (inside ? p->intra_gbs : p->inter_gbs) * 1e9;
}
double mt_cost_link_lat(const mt_cost_profile *p, int inside) {
  return (inside ? p->intra_us : p->inter_us) * 1e-6;
}

double mt_cost_coll_xfer_s(const mt_price *q, double bytes, int n, int stride, int kind) {
  int k = mt_price_per_node(q, stride, n);
  return mt_price_coll_s(q, bytes, n, k, kind) - mt_price_coll_lat_s(q, n, k, kind);
}
double mt_cost_coll_lat(const mt_price *q, int n, int stride, int kind) {
  return mt_price_coll_lat_s(q, n, mt_price_per_node(q, stride, n), kind);
}

/* The ladder residual: in each forward (and its recompute) a dense block's
 * attention sum over tp (all-reduce, or under sp reduce-scatter) runs
 * while its MLP computes, until the MLP's own sum; in backward its MLP's
 * input-gradient sum runs while the attention's backward computes, until
 * the attention's own sum; each at the profile's overlap share of its rate
 * (as the virtual device runs them). A MoE block sums as the standard
 * residual does. The seconds hidden per micro-batch (att: a block's
 * attention forward). */
static double ladder_hidden(const mt_cost_profile *p, const mt_price *q, const mt_config *cfg,
                            double msg_scale, const mt_chunk_desc *k, double att) {
  const mt_gpt *m = k->m;
  const double BT = (double)k->B * m->T, C = m->shape.n_embd, ov = p->overlap;
  const double refwd = cfg->recompute ? 1.0 : 0.0;
  const size_t whole = (size_t)(BT * C * (double)m->es * msg_scale);
  const double ring = cfg->sp ? mt_bytes_reduce_scatter(whole, cfg->tp)
                              : mt_bytes_allreduce(whole, cfg->tp);
  const int kind = cfg->sp ? MT_PRICE_PASS : MT_PRICE_ALLREDUCE;
  const double d = mt_cost_coll_xfer_s(q, ring, cfg->tp, 1, kind) +
                   mt_cost_coll_lat(q, cfg->tp, 1, kind);
  /* the attention's backward: its linears' input and weight gradients, 2.5
   * times its forward */
  const double es = (double)m->es * msg_scale; /* the activations' width, as sent */
  const double attn_b = 2.0 * (mt_cost_gemm_s(p, es, BT, m->qkv_local, C, 1) +
                               mt_cost_gemm_s(p, es, BT, C, m->C_local, 1)) + 2.5 * att;
  const double hid_b = d < ov * attn_b ? d : ov * attn_b;
  double hidden = 0.0;
  for (int l = k->l0; l < k->l1; l++) {
    const double F = m->mlp_local[l];
    if (F <= 0 || mt_model_is_moe(&m->shape, l)) continue;
    double mlp =
        mt_cost_gemm_s(p, es, BT, F * m->mlp_in, C, 1) + mt_cost_gemm_s(p, es, BT, C, F, 1);
    hidden += (1.0 + refwd) * (d < ov * mlp ? d : ov * mlp) + hid_b;
  }
  return hidden;
}

/* The share of a flat all-to-all's network bytes a per-node dispatch
 * sends (ep_dispatch = per-node): a token routed to topk of E experts
 * spread evenly over N nodes crosses to each remote node that holds one of
 * them once, not once per expert there. A node holds none of the token's
 * experts with probability P0 = prod_i (E - E/N - i) / (E - i); the token
 * then crosses to (N - 1)(1 - P0) remote nodes on the mean, where a flat
 * dispatch sends topk (N - 1) / N copies: N (1 - P0) / topk. */
double mt_cost_ep_node_share(double E, double topk, int nodes) {
  if (nodes <= 1 || topk <= 1 || E < nodes) return 1.0;
  double p0 = 1.0, per = E / nodes;
  for (int i = 0; i < (int)topk; i++) p0 *= (E - per - i) > 0 ? (E - per - i) / (E - i) : 0.0;
  double share = nodes * (1.0 - p0) / topk;
  return share < 1.0 ? share : 1.0;
}

void mt_cost_chunk_comm(const mt_cost_profile *p, const mt_price *q, const mt_config *cfg,
                        double msg_scale, const mt_chunk_desc *k, double att,
                        const double cb[4], mt_chunk_cost *c) {
  const mt_gpt *m = k->m;
  const int n_l = k->l1 - k->l0, n_moe = k->n_moe;
  const double att_b = 2.5 * att, refwd = cfg->recompute ? 1.0 : 0.0;
  /* context parallelism: the ring passes K/V while the blocks compute (the
   * part beyond the attention's compute is exposed); Ulysses' all-to-alls
   * are not hidden */
  if (cfg->cp > 1) {
    int inside = cfg->tp * cfg->cp <= p->devices_per_node;
    double bytes = cb[1] * msg_scale;
    double calls = n_l * (1.0 + refwd) * 2.0 * (cfg->cp - 1);
    double hidden = n_l * ((1.0 + refwd) * att + att_b);
    if (cfg->cp_mode == MT_CP_RING) { /* the ring's slowest pair sets its pace */
      double t = bytes / mt_cost_link_bw(p, inside) + calls * mt_cost_link_lat(p, inside);
      c->cp = t > hidden ? t - hidden : 0.0;
    } else {
      c->cp = mt_cost_coll_xfer_s(q, bytes, cfg->cp, cfg->tp, MT_PRICE_ALLTOALL) +
              calls * mt_cost_coll_lat(q, cfg->cp, cfg->tp, MT_PRICE_ALLTOALL);
    }
  }
  /* expert parallelism: the dispatch and combine all-to-alls (and the etp
   * gathers), as a balanced routing implies, never hidden */
  if (n_moe > 0 && (m->moe.ep_size > 1 || m->moe.etp_size > 1)) {
    /* (the folded mesh of a stage: etp innermost, then ep) */
    const int ep = m->moe.ep_size, etp = m->moe.etp_size;
    /* per-node dispatch: the network's share (the copies forwarded inside
     * the destination node ride NVLink beside it) */
    const int per_node = mt_price_per_node(q, etp, ep), nodes = (ep + per_node - 1) / per_node;
    const double a2a = cb[2] * msg_scale *
                       (p->ep_per_node ? mt_cost_ep_node_share(m->shape.moe_experts,
                                                                m->shape.moe_topk, nodes)
                                       : 1.0);
    c->ep = mt_cost_coll_xfer_s(q, a2a, ep, etp, MT_PRICE_ALLTOALL) +
            mt_cost_coll_xfer_s(q, cb[3] * msg_scale, etp, 1, MT_PRICE_PASS) +
            n_moe * 4.0 *
                mt_cost_coll_lat(q, ep > 1 ? ep : etp, ep > 1 ? etp : 1,
                                 ep > 1 ? MT_PRICE_ALLTOALL : MT_PRICE_PASS);
  }
  /* tensor parallelism: this chunk's bytes (as comm counts them) and calls */
  if (cfg->tp > 1) {
    double bytes = cb[0] * msg_scale;
    double calls = n_l * ((cfg->sp ? 10.0 : 4.0) + refwd * (cfg->sp ? 4.0 : 2.0)) +
                   k->embed * (cfg->sp ? 2.0 : 1.0) + k->head * ((cfg->sp ? 3.0 : 1.0) + 2.0);
    const int kind = cfg->sp ? MT_PRICE_PASS : MT_PRICE_ALLREDUCE;
    c->tp = mt_cost_coll_xfer_s(q, bytes, cfg->tp, 1, kind) +
            calls * mt_cost_coll_lat(q, cfg->tp, 1, kind);
    if (mt_model_ladder(&m->shape)) c->tp -= ladder_hidden(p, q, cfg, msg_scale, k, att);
  }
}
