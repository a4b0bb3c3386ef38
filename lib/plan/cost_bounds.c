/* The cost model's lower bounds (plan.h): a layout's step time and memory
 * per device from the model's shape alone, without the plan, which the
 * search prunes with, and the per-layer times it balances the first and
 * last pipeline stages with. Each bound prices the same matmuls and
 * attention at the same shapes as the exact price (cost.c), less. */
#include "plan/cost_internal.h"

void mt_cost_layer_times(const mt_config *cfg, const mt_cost_profile *p, const mt_model_shape *sh,
                         double *layer_s, double *embed_s, double *head_s) {
  mt_cost_shape d = mt_cost_shape_of(cfg, sh, cfg->micro_batch);
  double lin, att;
  mt_cost_dense_layer(p, &d, p->act_bytes, &lin, &att);
  const double refwd = cfg->recompute ? 1.0 : 0.0, BT = d.B * d.T;
  *layer_s = (1.0 + refwd) * (lin + att) + 2.0 * lin + 2.5 * att;
  *embed_s = 3.0 * 2.0 * BT * d.C / (p->elementwise_gbs * 1e9);
  *head_s = 3.0 * mt_cost_gemm_s(p, BT, d.Vl, d.C, 1) +
            3.0 * 2.0 * BT * d.Vl / (p->elementwise_gbs * 1e9);
}

double mt_cost_step_lower_bound(const mt_config *cfg, const mt_cost_profile *p,
                                const mt_model_shape *sh, double act_bytes_lb, int l_first,
                                int l_mid, int l_last) {
  /* the exact price runs the same matmuls and attention at the same shapes
   * (plus MoE experts, elementwise work, communication, dp and AdamW), so
   * this never exceeds it: a stage runs its micro-batches' forwards and
   * backwards one after another (the last stage with the LM head), and
   * the last stage cannot start before the first micro-batch's forward has
   * passed the pp - 1 stages before it (the pipeline's fill) */
  mt_cost_shape d = mt_cost_shape_of(cfg, sh, cfg->micro_batch);
  double lin, att;
  mt_cost_dense_layer(p, &d, 0.0, &lin, &att); /* 0: no memory traffic, a bound for any dtype */
  if (sh->moe_experts > 0) /* the attention's matmuls only: experts vary with routing (q|k|v:
                              its width, fewer than 3 C / tp under grouped-query attention) */
    lin = mt_cost_gemm_s(p, d.B * d.T, d.Wqkv, d.C, 1) +
          mt_cost_gemm_s(p, d.B * d.T, d.C, d.Cl, 1);
  const double refwd = cfg->recompute ? 1.0 : 0.0;
  const int accum = cfg->global_batch / (cfg->dp * cfg->micro_batch), pp = cfg->pp;
  /* elementwise: at least the block's two layernorms (on the rows of the
   * sequence shard under sp), as the virtual op table prices them (which
   * the exact price runs): ln is one forward (2 passes over N x C; again
   * when recomputed), a backward costs twice that */
  const double s = cfg->sp ? cfg->tp : 1.0;
  const double ln = 2.0 * act_bytes_lb * d.B * d.T / s * d.C / (p->elementwise_gbs * 1e9);
  const double fb = (1.0 + refwd) * (lin + att + 2.0 * ln) + 2.0 * lin + 2.5 * att + 4.0 * ln;
  const double f = lin + att + 2.0 * ln;
  const double head = 3.0 * mt_cost_gemm_s(p, d.B * d.T, d.Vl, d.C, 1);
  if (pp == 1) return accum * (l_mid * fb + head);
  double worst = l_first * fb, last = l_last * fb + head;
  if (last > worst) worst = last;
  if (pp > 2 && l_mid * fb > worst) worst = l_mid * fb;
  int l_min = l_first < l_last ? l_first : l_last;
  if (pp > 2 && l_mid < l_min) l_min = l_mid;
  return accum * worst + (pp - 1) * f * l_min / cfg->virtual_stages;
}

/* the state of the matrices of n_l blocks (no biases, norms, embeddings or
 * buffers): each element's weights, gradient, master and moments as the
 * ZeRO level shards them */
static double state_lower_bound(const mt_config *cfg, const mt_cost_dtypes *dt,
                                const mt_model_shape *shape, int n_l) {
  const mt_model_shape full = mt_model_complete(shape), *sh = &full;
  const double C = sh->n_embd, tp = cfg->tp, ndp = (double)cfg->dp * cfg->cp;
  /* q, proj; k, v (grouped-query: fewer); the MLP's two or three (SwiGLU) matrices */
  const double attn = 2.0 * C * C + 2.0 * C * (C / sh->n_head) * sh->n_kv_head;
  const double mlp = (mt_model_llama(sh) ? 3.0 : 2.0) * C * sh->ffn;
  double per_layer = (attn + mlp) / tp;
  if (sh->moe_experts > 0) {
    double F = sh->moe_ffn > 0 ? sh->moe_ffn : 4.0 * C;
    double experts = (double)sh->moe_experts / cfg->ep * (mt_model_llama(sh) ? 3.0 : 2.0) * C *
                     F / cfg->etp;
    double moe = attn / tp + experts, dense = per_layer;
    per_layer = moe < dense ? moe : dense; /* which blocks are MoE depends on the stage */
  }
  const double n = n_l * per_layer;
  const double w = dt->weights, g = dt->grads, st = dt->master + 2.0 * dt->moments;
  switch (cfg->zero) {
  case 0: return n * (w + g + st);
  case 1: return n * (w + g + st / ndp);
  case 2: return n * (w + (g + st) / ndp);
  default: return n * (w + g + st) / ndp;
  }
}

double mt_cost_mem_lower_bound(const mt_config *cfg, const mt_cost_dtypes *dt,
                               const mt_model_shape *sh, int l_first, int l_most) {
  /* the largest stage's state, or the first stage's state and the
   * activation sets it holds: as many micro-batches as stages in flight
   * (1F1B and ZB-H1; interleaved and GPipe hold more), each with every
   * layer's kept activations: under recompute the layer's input alone;
   * without, at least the buffers of model.h's mt_gpt_acts that every
   * block keeps (the norms', residuals' and projections' C channels a
   * position, sp cuts them over tp; q, k, v (spread: 3C), attention out and
   * the MLP's 2 x F (SwiGLU: 3 x F) over tp; MoE blocks without their MLP) */
  const double C = sh->n_embd, tp = cfg->tp, s = cfg->sp ? tp : 1.0;
  const double F = sh->ffn > 0 ? sh->ffn : 4.0 * C, mlp = (mt_model_llama(sh) ? 3.0 : 2.0) * F;
  const double tokens = (double)cfg->micro_batch * sh->seq_len / cfg->cp;
  const int m = cfg->global_batch / (cfg->dp * cfg->micro_batch);
  const int inflight = cfg->pp == 1 ? 1 : (m < cfg->pp ? m : cfg->pp);
  double per_layer = cfg->recompute ? C / s
                     : sh->moe_experts > 0 ? 4.0 * C / s + 4.0 * C / tp
                                           : 6.0 * C / s + (4.0 * C + mlp) / tp;
  double act = inflight * l_first * tokens * per_layer * dt->acts;
  double a = state_lower_bound(cfg, dt, sh, l_most), b = state_lower_bound(cfg, dt, sh, l_first);
  return a > b + act ? a : b + act;
}
