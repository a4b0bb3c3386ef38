/* The cost model's compute (cost_internal.h): each matmul's FLOPs over the
 * throughput the profile gives for its size (FLOPs per call), block
 * attention as the backends run it, and the elementwise work (the
 * activation buffers the model allocates, written forward, read and
 * written backward) over the memory bandwidth. */
#include "plan/cost_internal.h"

/* seconds of one matmul of m x n x k on es-byte operands, `calls` times */
double mt_cost_gemm_s(const mt_cost_profile *p, double es, double m, double n, double k,
                      double calls) {
  mt_price q;
  mt_cost_price(p, &q);
  return mt_price_gemm_s(&q, es, m, n, k, calls);
}

/* Block attention's forward over one micro-batch of B sequences, one
 * layer, as the backends run it: each of the B x NHl heads cuts the
 * queries into blocks of BR rows; a block sees the keys up to its last row
 * (causal), in tiles of BC keys, each tile two products (S = Q K^T and
 * P V, 2 x 2 BR BC hs FLOPs). Fused kernels (attn_gflops) compute whole
 * tiles, the masked part of the diagonal ones included; the CPU backend
 * calls a matmul per product on the visible keys. Under context
 * parallelism a rank holds 1/cp of every sequence's queries (two chunks,
 * which balance the causal work) against the whole sequence's keys. The
 * backward recomputes S and forms dP, dS, dQ, dK, dV: 5 products for 2,
 * 2.5 times the forward. */
static double attn_fwd_s(const mt_cost_profile *p, double B, double NHl, int T_full, int cp,
                         double hs, double act_bytes) {
  if (p->attn_materialized) {
    /* the whole square of each of this rank's heads: QK^T and PV as one
     * strided batched GEMM each (the batch's FLOPs set the efficiency),
     * and the scores through memory: the fused scale-mask-softmax reads
     * them and writes the probabilities, dropout reads those and writes
     * the kept ones and a byte of mask (forward, 4.5 elements of traffic);
     * backward the same twice over (dropout's and softmax's gradients).
     * Returns the forward; the caller's 2.5 x covers the backward's three
     * GEMMs and 2 x the traffic. */
    double sq = B * NHl / cp * (double)T_full * T_full, flops = 4.0 * sq * hs;
    return flops / (mt_cost_gemm_gflops(p, act_bytes, flops / 2) * 1e9) +
           4.5 * act_bytes * sq / (p->elementwise_gbs * 1e9);
  }
  mt_price q; /* core's: the virtual device prices each block pair with it */
  mt_cost_price(p, &q);
  return mt_price_attn_fwd_s(&q, act_bytes, B * NHl / cp, 0, T_full, 0, T_full, 1, hs);
}

void mt_cost_dense_layer(const mt_cost_profile *p, const mt_cost_shape *d, double act_bytes,
                         double *lin, double *att) {
  const double BT = d->B * d->T;
  const double es = act_bytes;
  *lin = mt_cost_gemm_s(p, es, BT, d->Wqkv, d->C, 1) + mt_cost_gemm_s(p, es, BT, d->C, d->Cl, 1) +
         mt_cost_gemm_s(p, es, BT, d->Fin, d->C, 1) + mt_cost_gemm_s(p, es, BT, d->C, d->Fl, 1);
  *att = attn_fwd_s(p, d->B, d->NHl, d->T_full, d->cp, d->hs, act_bytes);
}

mt_cost_shape mt_cost_shape_of(const mt_config *cfg, const mt_model_shape *shape, int B) {
  const mt_model_shape full = mt_model_complete(shape), *sh = &full;
  const int tp = cfg->tp;
  const double hs = (double)sh->n_embd / sh->n_head, Ckv = sh->n_kv_head * hs;
  /* key/value heads split over tp where it divides them, else all on every rank */
  const double Ckv_l = sh->n_kv_head % tp == 0 ? Ckv / tp : Ckv;
  const double Fl = (double)sh->ffn / tp;
  mt_cost_shape d = {.B = B, .T = (double)sh->seq_len / cfg->cp, .C = sh->n_embd,
                     .Cl = (double)sh->n_embd / tp, .Fl = Fl, .NHl = (double)sh->n_head / tp,
                     .hs = hs, .Vl = (double)mt_model_pad_vocab(sh->vocab, tp) / tp,
                     .Wqkv = (double)sh->n_embd / tp + 2.0 * Ckv_l,
                     .Fin = (mt_model_llama(sh) ? 2.0 : 1.0) * Fl, .T_full = sh->seq_len,
                     .cp = cfg->cp};
  return d;
}


mt_chunk_cost mt_cost_chunk_compute(const mt_cost_profile *p, const mt_config *cfg,
                                    const mt_cost_dtypes *dt, const mt_chunk_desc *k,
                                    const double *ops_s, double *att_out) {
  const mt_gpt *m = k->m;
  const int n_l = k->l1 - k->l0, n_moe = k->n_moe, B = k->B;
  const double C = m->shape.n_embd, BT = (double)B * m->T;
  const mt_cost_shape ds = {.B = B, .T = m->T, .C = C, .Cl = m->C_local, .Fl = m->F_local,
                            .NHl = m->NH_local, .hs = C / m->shape.n_head, .Vl = m->V_local,
                            .Wqkv = m->qkv_local, .Fin = (double)m->F_local * m->mlp_in,
                            .T_full = m->shape.seq_len, .cp = cfg->cp};
  mt_chunk_cost c = {0, 0, 0, 0, 0, 0};
  double lin, att;
  mt_cost_dense_layer(p, &ds, dt->acts, &lin, &att);
  /* token slices: a slice attends the keys of the slices up to it, a 1/k
   * share of the sequence's causal pairs on the mean */
  if (m->attn.slices > 1) att /= m->attn.slices;
  *att_out = att;
  const double att_b = 2.5 * att;
  const double refwd = cfg->recompute ? 1.0 : 0.0;
  if (ops_s) {
    c.fwd = ops_s[0];
    c.bwd = ops_s[1] + ops_s[2];
    c.bwd_input = ops_s[1];
    return c;
  }
  /* MoE blocks: the router, and the routed experts' matmuls over this rank's
   * share of the slots (balanced routing: N k slots per ep rank, its E/ep
   * experts each N k / E_l rows) in place of the dense MLP (the shared
   * experts stay in mlp_local) */
  double moe_lin = 0.0;
  if (n_moe > 0) {
    const double E = m->shape.moe_experts, topk = m->shape.moe_topk, El = m->moe.E_local;
    const double Fe = m->moe.Fe_local, Fs = m->mlp_local[k->l0] > 0 ? m->mlp_local[k->l0] : 0.0;
    const double N = (double)B * m->moe.Ts;
    const double rows = N * topk * (m->moe.etp_size > 1 ? m->moe.etp_size : 1) / El;
    const double Cl = m->C_local, in = m->mlp_in; /* SwiGLU: gate|up, 2 outputs per unit */
    const double es = dt->acts;
    moe_lin = mt_cost_gemm_s(p, es, BT, m->qkv_local, C, 1) +
              mt_cost_gemm_s(p, es, BT, C, Cl, 1) + mt_cost_gemm_s(p, es, N, E, C, 1) +
              mt_cost_gemm_s(p, es, rows, in * Fe, C, El) + mt_cost_gemm_s(p, es, rows, C, Fe, El) +
              (Fs > 0 ? mt_cost_gemm_s(p, es, BT, in * Fs, C, 1) +
                            mt_cost_gemm_s(p, es, BT, C, Fs, 1)
                      : 0.0);
  }
  /* elementwise: the layer's activations (the buffers the model allocates:
   * under recompute its one-layer workspace), in the activations' dtype,
   * as the kernels move them: forward, each kernel reads its input and
   * writes its output (2 passes over the set); backward, each reads the
   * kept activation and the incoming gradient and writes its gradient (3) */
  double set_bytes = cfg->recompute ? (double)m->ws_bytes
                                    : 4.0 * (double)mt_gpt_acts_numel(m, 1, B, 0) +
                                          (double)mt_gpt_moe_rows_bytes(m);
  double elem = set_bytes * (dt->acts / 4.0) / (p->elementwise_gbs * 1e9);
  double f_dense = lin + att + 2.0 * elem, f_moe = moe_lin + att + 2.0 * elem;
  c.fwd = (n_l - n_moe) * f_dense + n_moe * f_moe;
  c.bwd = (n_l - n_moe) * (2.0 * lin + att_b + 3.0 * elem + refwd * f_dense) +
          n_moe * (2.0 * moe_lin + att_b + 3.0 * elem + refwd * f_moe);
  /* the split backward's first pass: input gradients (the linears' half,
   * all of attention, the elementwise work); the second the weights' */
  c.bwd_input = (n_l - n_moe) * (lin + att_b + 3.0 * elem + refwd * f_dense) +
                n_moe * (moe_lin + att_b + 3.0 * elem + refwd * f_moe);
  if (k->head) {
    double h = mt_cost_gemm_s(p, dt->acts, BT, ds.Vl, C, 1);
    double logits = dt->acts * BT * ds.Vl * 2.0 / (p->elementwise_gbs * 1e9);
    c.fwd += h + logits;
    c.bwd += 2.0 * h + logits;
    c.bwd_input += h + logits;
  }
  if (k->embed) c.fwd += dt->acts * BT * C / (p->elementwise_gbs * 1e9);
  return c;
}
