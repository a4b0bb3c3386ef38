/* The cost model's lower bounds (plan.h): a layout's step time and memory
 * per device from the model's shape alone, without the plan, which the
 * search prunes with, and the per-layer times it balances the first and
 * last pipeline stages with. Each bound prices the same matmuls and
 * attention at the same shapes as the exact price (cost.c), less. */
#include "plan/cost_internal.h"

#include <math.h>

/* The highest rate the matmul curve gives a matmul of at most `flops`
 * FLOPs: the curve's points up to there and its value there (between two
 * points it moves monotonically from one to the other), so a matmul of f
 * <= flops FLOPs takes at least f / this. */
static double gemm_gflops_upto(const mt_price *q, double flops) {
  double best = mt_price_gemm_gflops(q, 0.0, flops); /* either width's curve (0) */
  for (int w = 0; w < 2; w++)
    for (int i = 0; i < q->gemm[w].n; i++)
      if (q->gemm[w].flops[i] <= flops && q->gemm[w].gflops[i] > best) best = q->gemm[w].gflops[i];
  return best;
}

/* A MoE block of one micro-batch, at least: *lin its matmuls' seconds in
 * the forward (the backward's are twice these): the attention's q|k|v
 * (its width: fewer than 3 C / tp under grouped-query attention) and
 * projection, the router and this rank's routed experts; *ef and *eb the
 * routed half's elementwise seconds forward and backward, as the virtual
 * op table prices the ops routed_forward and routed_backward run (moe.c;
 * act_bytes an activation element's bytes): the router's fp32 scores, the
 * N k slots gathered out, the expert rows gathered in and out again, the
 * experts' activation (SwiGLU or GELU) and the combine. The plan routes
 * balanced (the null backend's round robin: slot i of the N k a rank
 * routes goes to expert i mod E, every peer of the count-only ep group
 * sending what this rank sends), so a rank's experts get at least
 * R = E floor(N k / E) rows, each expert's at most ep N (a token's k
 * experts are distinct); their FLOPs at the curve's best rate up to that
 * size. Without the experts where routing is not that plain (capacity
 * dropping, least-loaded placement, etp), and without their elementwise
 * work under materialized attention (priced from the activation set). */
static void moe_block_lower(const mt_config *cfg, const mt_cost_profile *p,
                            const mt_model_shape *sh, const mt_cost_shape *d, double act_bytes,
                            double *lin, double *ef, double *eb) {
  mt_price q;
  mt_cost_price(p, &q);
  const double BT = d->B * d->T;
  const double E = sh->moe_experts, k = sh->moe_topk, C = sh->n_embd;
  const double N = d->B * (cfg->tp > 1 ? d->T / cfg->tp : d->T); /* the rank's routed tokens */
  /* es 0: either width's faster curve, no memory traffic (a bound for any dtype) */
  *lin = mt_price_gemm_s(&q, 0.0, BT, d->Wqkv, d->C, 1) +
         mt_price_gemm_s(&q, 0.0, BT, d->C, d->Cl, 1) + mt_price_gemm_s(&q, 0.0, N, E, C, 1);
  *ef = *eb = 0.0;
  if (sh->moe_capacity > 0.0 || cfg->ep_balance != MT_EP_BALANCE_NONE || cfg->etp != 1) return;
  const double F = sh->moe_ffn > 0 ? sh->moe_ffn : 4.0 * C;
  const int swiglu = mt_model_llama(sh);
  const double in = swiglu ? 2.0 : 1.0, R = E * floor(N * k / E), most = cfg->ep * N;
  *lin += 2.0 * R * in * F * C / (gemm_gflops_upto(&q, 2.0 * most * in * F * C) * 1e9) +
          2.0 * R * F * C / (gemm_gflops_upto(&q, 2.0 * most * F * C) * 1e9);
  if (p->attn_materialized) return;
  const double bw = p->elementwise_gbs * 1e9, router = 2.0 * 4.0 * N * E;
  *ef = (router + act_bytes * (2.0 * N * k * C + 4.0 * R * C + (swiglu ? 3.0 : 2.0) * R * F +
                               (k + 1.0) * N * C)) / bw;
  *eb = (router + act_bytes * ((2.0 * k + 1.0) * N * C + 4.0 * R * C +
                               (swiglu ? 7.0 : 4.0) * R * F + (k + 2.0) * N * C)) / bw;
}

void mt_cost_layer_times(const mt_config *cfg, const mt_cost_profile *p, const mt_model_shape *sh,
                         double *layer_s, double *embed_s, double *head_s) {
  mt_cost_shape d = mt_cost_shape_of(cfg, sh, cfg->micro_batch);
  double lin, att;
  mt_cost_dense_layer(p, &d, p->act_bytes, &lin, &att);
  const double refwd = cfg->recompute ? 1.0 : 0.0, BT = d.B * d.T;
  *layer_s = (1.0 + refwd) * (lin + att) + 2.0 * lin + 2.5 * att;
  *embed_s = 3.0 * 2.0 * BT * d.C / (p->elementwise_gbs * 1e9);
  *head_s = 3.0 * mt_cost_gemm_s(p, p->act_bytes, BT, d.Vl, d.C, 1) +
            3.0 * 2.0 * BT * d.Vl / (p->elementwise_gbs * 1e9);
}

/* A dense block's tp collectives of one micro-batch, at least (cost_comm.c
 * prices the chunk's counted bytes and calls): the block's calls as it
 * prices them, each a latency, and the bytes of the four sums (or, under
 * sp, four reduce-scatters and gathers) of the forward and their mirrors
 * in the backward, (tp - 1) / tp of a (B T, C) tensor each way of a ring,
 * 8 (tp - 1) / tp of it in all (sp's gathers for the weight gradients and
 * a recomputed forward's left out). 0 without tp, for MoE models and
 * under the ladder residual (which hides some of them). */
static double tp_block_lower(const mt_config *cfg, const mt_cost_profile *p,
                             const mt_model_shape *sh, const mt_cost_shape *d, double msg_bytes) {
  const int tp = cfg->tp;
  if (tp <= 1 || sh->moe_experts > 0 || mt_model_ladder(sh)) return 0.0;
  mt_price q;
  mt_cost_price(p, &q);
  const double refwd = cfg->recompute ? 1.0 : 0.0;
  const double calls = (cfg->sp ? 10.0 : 4.0) + refwd * (cfg->sp ? 4.0 : 2.0);
  const double bytes = 8.0 * (tp - 1) / tp * d->B * d->T * d->C * msg_bytes;
  const int kind = cfg->sp ? MT_PRICE_PASS : MT_PRICE_ALLREDUCE;
  return mt_cost_coll_xfer_s(&q, bytes, tp, 1, kind) + calls * mt_cost_coll_lat(&q, tp, 1, kind);
}

double mt_cost_step_lower_bound(const mt_config *cfg, const mt_cost_profile *p,
                                const mt_model_shape *sh, double act_bytes_lb, double msg_bytes,
                                int l_first, int l_mid, int l_last) {
  /* the exact price runs the same matmuls and attention at the same shapes
   * (plus MoE experts, elementwise work, communication, dp and AdamW), so
   * this never exceeds it: a stage runs its micro-batches' forwards and
   * backwards one after another (the last stage with the LM head), and
   * the last stage cannot start before the first micro-batch's forward has
   * passed the pp - 1 stages before it (the pipeline's fill) */
  mt_cost_shape d = mt_cost_shape_of(cfg, sh, cfg->micro_batch);
  double lin, att;
  mt_cost_dense_layer(p, &d, 0.0, &lin, &att); /* 0: no memory traffic, a bound for any dtype */
  const double refwd = cfg->recompute ? 1.0 : 0.0;
  const int accum = cfg->global_batch / (cfg->dp * cfg->micro_batch), pp = cfg->pp;
  /* elementwise: at least the block's two layernorms (on the rows of the
   * sequence shard under sp), as the virtual op table prices them (which
   * the exact price runs): ln is one forward (2 passes over N x C; again
   * when recomputed), a backward costs twice that */
  const double s = cfg->sp ? cfg->tp : 1.0;
  const double ln = 2.0 * act_bytes_lb * d.B * d.T / s * d.C / (p->elementwise_gbs * 1e9);
  /* a layer's forward and backward (fb) and its forward (f) */
  double fb = (1.0 + refwd) * (lin + att + 2.0 * ln) + 2.0 * lin + 2.5 * att + 4.0 * ln;
  double f = lin + att + 2.0 * ln;
  if (sh->moe_experts > 0) { /* a MoE block's; the lesser of the two where blocks are mixed */
    double ml, ef, eb;
    moe_block_lower(cfg, p, sh, &d, act_bytes_lb, &ml, &ef, &eb);
    const double f_moe = ml + att + 2.0 * ln + ef;
    const double fb_moe = (1.0 + refwd) * f_moe + 2.0 * ml + 2.5 * att + 4.0 * ln + eb;
    const int all_moe = mt_model_moe_before(sh, sh->n_layer) == sh->n_layer;
    fb = all_moe || fb_moe < fb ? fb_moe : fb;
    f = all_moe || f_moe < f ? f_moe : f;
  }
  /* the tp collectives ride on the ops (half on a forward, half on a
   * backward: cost.c's price_pipeline), so a stage's work holds them; not
   * the fill's forward */
  fb += tp_block_lower(cfg, p, sh, &d, msg_bytes);
  const double head = 3.0 * mt_cost_gemm_s(p, 0.0, d.B * d.T, d.Vl, d.C, 1);
  if (pp == 1) return accum * (l_mid * fb + head);
  double worst = l_first * fb, last = l_last * fb + head;
  if (last > worst) worst = last;
  if (pp > 2 && l_mid * fb > worst) worst = l_mid * fb;
  int l_min = l_first < l_last ? l_first : l_last;
  if (pp > 2 && l_mid < l_min) l_min = l_mid;
  /* token slices: the fill is a slice's forward (the first slice's: 1/k
   * of the linears, 1/k^2 of the causal pairs) */
  const double k = cfg->pp_token_slices > 1 ? cfg->pp_token_slices : 1.0;
  const double f_fill = (f - att) / k + att / (k * k);
  return accum * worst + (pp - 1) * f_fill * l_min / cfg->virtual_stages;
}

/* n elements of state: each element's weights, gradient, master and
 * moments as the ZeRO level shards them over n_shard ranks */
static double zero_state(int zero, const mt_cost_dtypes *dt, double n, double n_shard) {
  const double w = dt->weights, g = dt->grads, st = dt->master + 2.0 * dt->moments;
  switch (zero) {
  case 0: return n * (w + g + st);
  case 1: return n * (w + g + st / n_shard);
  case 2: return n * (w + (g + st) / n_shard);
  default: return n * (w + g + st) / n_shard;
  }
}

/* the state of the matrices of n_l blocks (no biases, norms, embeddings or
 * buffers): dense state sharded over dp x cp, the experts' over the folded
 * mesh's edp (their replicas) */
static double state_lower_bound(const mt_config *cfg, const mt_cost_dtypes *dt,
                                const mt_model_shape *shape, int n_l) {
  const mt_model_shape full = mt_model_complete(shape), *sh = &full;
  const double C = sh->n_embd, tp = cfg->tp, ndp = (double)cfg->dp * cfg->cp;
  /* q, proj; k, v (grouped-query: fewer); the MLP's two or three (SwiGLU) matrices */
  const double attn = 2.0 * C * C + 2.0 * C * (C / sh->n_head) * sh->n_kv_head;
  const double mlp = (mt_model_llama(sh) ? 3.0 : 2.0) * C * sh->ffn;
  double per_layer = zero_state(cfg->zero, dt, (attn + mlp) / tp, ndp);
  if (sh->moe_experts > 0) {
    double F = sh->moe_ffn > 0 ? sh->moe_ffn : 4.0 * C;
    double experts = (double)sh->moe_experts / cfg->ep * (mt_model_llama(sh) ? 3.0 : 2.0) * C *
                     F / cfg->etp;
    double edp = (double)cfg->tp * cfg->cp * cfg->dp / ((double)cfg->etp * cfg->ep);
    double moe =
        zero_state(cfg->zero, dt, attn / tp, ndp) + zero_state(cfg->zero, dt, experts, edp);
    /* which blocks are MoE depends on the stage, but at most the model's
     * dense blocks are not: the rest of the n_l are MoE blocks */
    const int n_dense = sh->n_layer - mt_model_moe_before(sh, sh->n_layer);
    const int n_moe = n_l > n_dense ? n_l - n_dense : 0;
    return n_moe * moe + (n_l - n_moe) * (moe < per_layer ? moe : per_layer);
  }
  return n_l * per_layer;
}

/* ZeRO-2/3's buffer pools (dp.c) beside the shards, at least: gradient
 * buffers at ZeRO >= 2 (make_grad_buffers: of the largest bucket but the
 * stage's first, two of them, or one per bucket where the backward is
 * split (zb-h1, zb-v) or runs chunk by chunk (breadth-first), the
 * "open fills"), gather buffers at ZeRO-3 (make_gather_buffers: the
 * first and the last unit's, two of the largest other unit, or one per
 * unit under breadth-first). A unit is a block's tensors of one reduction
 * group; counted where certain: a MoE model's expert units (each its own
 * bucket, never the first: the block's dense unit comes before it), n_l
 * blocks less the model's dense ones; a dense model's blocks at ZeRO-3
 * (one bucket a unit), all but the first. */
static double pools_lower_bound(const mt_config *cfg, const mt_cost_dtypes *dt,
                                const mt_model_shape *shape, int n_l) {
  if (cfg->zero < 2) return 0.0;
  const mt_model_shape full = mt_model_complete(shape), *sh = &full;
  const double C = sh->n_embd;
  const int piped = cfg->pp > 1, sched = cfg->pp_schedule;
  const int runs = piped && sched == MT_SCHED_BFS;
  const int open = runs || (piped && (sched == MT_SCHED_ZBH1 || sched == MT_SCHED_ZBV));
  double unit = 0.0;
  int n = 0;
  if (sh->moe_experts > 0) {
    const int n_dense = sh->n_layer - mt_model_moe_before(sh, sh->n_layer);
    const double F = sh->moe_ffn > 0 ? sh->moe_ffn : 4.0 * C;
    n = n_l > n_dense ? n_l - n_dense : 0;
    unit = (double)sh->moe_experts / cfg->ep * (mt_model_llama(sh) ? 3.0 : 2.0) * C * F /
           cfg->etp;
  } else if (cfg->zero == 3) {
    const double attn = 2.0 * C * C + 2.0 * C * (C / sh->n_head) * sh->n_kv_head;
    n = n_l - 1;
    unit = (attn + (mt_model_llama(sh) ? 3.0 : 2.0) * C * sh->ffn) / cfg->tp;
  }
  if (n <= 0) return 0.0;
  const int two = n < 2 ? n : 2;
  return unit * ((open ? n : two) * dt->grads + (cfg->zero == 3 ? (runs ? n : two) : 0) *
                                                    dt->weights);
}

/* The dispatcher's row bound per token of a micro-batch (dropless, mt_ep_bounds):
 * the worst case, each of the ep sources' N tokens sending min(k, E_l)
 * slots to this rank, or where less parallel.moe_buffer_factor x the
 * balanced routing's N k (the rank routes 1/tp of each sequence's tokens
 * under tp) */
static double moe_rows_per_token(const mt_config *cfg, const mt_model_shape *sh) {
  const double k = sh->moe_topk, E_l = (double)sh->moe_experts / cfg->ep;
  const double per_rank = cfg->tp > 1 ? 1.0 / cfg->tp : 1.0;
  const double worst = cfg->ep * per_rank * (k < E_l ? k : E_l);
  const double f = cfg->moe_buffer_factor * per_rank * k;
  return f > 0.0 && f < worst ? f : worst;
}

/* The routed experts' activations a MoE block keeps per token of a
 * micro-batch (elements): the dispatcher's buffers of its row bound
 * (moe_rows_per_token: the experts' inputs (C), hidden units (SwiGLU: 2 F
 * before, F after)) and the combine's k slots a token (C each). 0 under
 * capacity or etp. */
static double moe_block_kept(const mt_config *cfg, const mt_model_shape *sh) {
  if (sh->moe_experts <= 0 || sh->moe_capacity > 0.0 || cfg->etp != 1) return 0.0;
  const double C = sh->n_embd, F = sh->moe_ffn > 0 ? sh->moe_ffn : 4.0 * C;
  const double in = mt_model_llama(sh) ? 2.0 : 1.0, k = sh->moe_topk;
  const double per_rank = cfg->tp > 1 ? 1.0 / cfg->tp : 1.0;
  return moe_rows_per_token(cfg, sh) * (C + in * F + F) + per_rank * k * C;
}

/* ... of the first stage's l_first layers, the MoE blocks counted where
 * certain: every block, or the first l_first blocks of one chunk. 0 under
 * recompute (the kept sets hold a block's input alone). */
static double moe_kept_lower_bound(const mt_config *cfg, const mt_model_shape *sh, int l_first) {
  if (cfg->recompute) return 0.0;
  const int n_moe = sh->moe_every == 1 ? l_first
                    : cfg->virtual_stages == 1 ? mt_model_moe_before(sh, l_first)
                                               : 0;
  return n_moe * moe_block_kept(cfg, sh);
}

/* A kept activation set of l blocks per token (elements): per_layer each,
 * the routed experts' (moe_kept_lower_bound), and where the backward is
 * split (zb-h1, zb-v) what a set keeps from the input pass to the weight
 * pass, under recompute too (acts.c): the output gradients of the
 * attention's projection and of the MLP's (C each), of q|k|v (at least
 * C / tp), a dense MLP's hidden ones (SwiGLU 2 F / tp, GELU F / tp), and
 * a MoE block's expert rows' (C and the expert's hidden units each), the
 * MoE blocks counted where certain */
static double set_lower_bound(const mt_config *cfg, const mt_model_shape *sh, double per_layer,
                              int l) {
  double x = l * per_layer + moe_kept_lower_bound(cfg, sh, l);
  const int split = cfg->pp > 1 && (cfg->pp_schedule == MT_SCHED_ZBH1 ||
                                    cfg->pp_schedule == MT_SCHED_ZBV);
  if (!split) return x;
  const double C = sh->n_embd, tp = cfg->tp, in = mt_model_llama(sh) ? 2.0 : 1.0;
  const double F = sh->ffn > 0 ? sh->ffn : 4.0 * C;
  x += l * (2.0 * C + C / tp + (sh->moe_experts > 0 ? 0.0 : in * F / tp));
  if (sh->moe_experts > 0 && sh->moe_capacity <= 0.0 && cfg->etp == 1) {
    const int n_moe = sh->moe_every == 1 ? l
                      : cfg->virtual_stages == 1 ? mt_model_moe_before(sh, l)
                                                 : 0;
    const double Fe = sh->moe_ffn > 0 ? sh->moe_ffn : 4.0 * C;
    x += n_moe * moe_rows_per_token(cfg, sh) * (C + in * Fe);
  }
  return x;
}

double mt_cost_mem_lower_bound(const mt_config *cfg, const mt_cost_dtypes *dt,
                               const mt_model_shape *sh, int l_first, int l_most, int sets) {
  /* the largest stage's state, or the first stage's state and the
   * activation sets it holds: as many micro-batches (units) as stages in flight
   * (1F1B and ZB-H1; interleaved and GPipe hold more), each with every
   * layer's kept activations: under recompute the layer's input alone;
   * without, at least the buffers of model.h's mt_gpt_acts that every
   * block keeps (the norms', residuals' and projections' C channels a
   * position, sp cuts them over tp; q, k, v (spread: 3C), attention out and
   * the MLP's 2 x F (SwiGLU: 3 x F) over tp; MoE blocks without their MLP) */
  const double C = sh->n_embd, tp = cfg->tp, s = cfg->sp ? tp : 1.0;
  const double F = sh->ffn > 0 ? sh->ffn : 4.0 * C, mlp = (mt_model_llama(sh) ? 3.0 : 2.0) * F;
  /* token slices: the sets are a slice's (T / k tokens), at least pp of
   * them (the micro-batches' K|V caches beside them left out of the bound) */
  const int k = cfg->pp_token_slices > 1 ? cfg->pp_token_slices : 1;
  const double tokens = (double)cfg->micro_batch * sh->seq_len / cfg->cp / k;
  const int m = cfg->global_batch / (cfg->dp * cfg->micro_batch) * k;
  const int inflight = cfg->pp == 1 ? 1 : (m < cfg->pp ? m : cfg->pp);
  double per_layer = cfg->recompute ? C / s
                     : sh->moe_experts > 0 ? 4.0 * C / s + 4.0 * C / tp
                                           : 6.0 * C / s + (4.0 * C + mlp) / tp;
  double kept = inflight * tokens * set_lower_bound(cfg, sh, per_layer, l_first);
  /* the schedule's count: the executor gives each set held a slot of the
   * largest chunk's set (pp.c), so the first stage holds at least `sets`
   * of its first chunk's (v chunks of l_first / v layers: whole sequences,
   * the split's chunks even). Interleaved, breadth-first and zb-v hold
   * more than the pp above (breadth-first: every micro-batch). */
  const int v = cfg->virtual_stages > 1 ? cfg->virtual_stages : 1;
  if (sets > 0 && k == 1 && l_first % v == 0) {
    const double by_sched =
        (double)sets * tokens * set_lower_bound(cfg, sh, per_layer, l_first / v);
    if (by_sched > kept) kept = by_sched;
  }
  double act = kept * dt->acts;
  /* under recompute, beside the kept sets, the workspace a recomputed
   * block runs in (gpt.c: one block's whole set, with a MoE block's
   * buffers where the stage has MoE blocks: certain where it has more
   * blocks than the model has dense ones) */
  if (cfg->recompute) {
    const int n_dense = sh->n_layer - mt_model_moe_before(sh, sh->n_layer);
    const double inner = sh->moe_experts > 0 ? 4.0 * C / s + 4.0 * C / tp
                                             : 6.0 * C / s + (4.0 * C + mlp) / tp;
    act += tokens * (inner + (l_first > n_dense ? moe_block_kept(cfg, sh) : 0.0)) * dt->acts;
  }
  double a = state_lower_bound(cfg, dt, sh, l_most) + pools_lower_bound(cfg, dt, sh, l_most);
  double b = state_lower_bound(cfg, dt, sh, l_first) + pools_lower_bound(cfg, dt, sh, l_first);
  return a > b + act ? a : b + act;
}
