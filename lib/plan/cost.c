/* The cost model: the step time of a layout on a machine, from the plan
 * (memory and bytes per group come from mt_plan_rank_build, the same code as
 * meshtrain --plan) and a hardware profile's [cost] section:
 *
 *   compute   each matmul's FLOPs over the throughput the profile gives for
 *             its size (FLOPs per call), plus the elementwise work (the
 *             activation buffers the model allocates, written forward, read
 *             and written backward) over the memory bandwidth;
 *   tp        the tp group's bytes per micro-batch over its link (a group
 *             inside a node: the intra-node bandwidth, else the network) plus
 *             a latency per collective;
 *   pipeline  the schedule simulator run with these per-op costs (the
 *             bubble) plus the point-to-point messages;
 *   dp        the dp group's bytes over its link, minus what the schedule
 *             lets overlap with backward (the profile's overlap share);
 *   optimizer AdamW's traffic over the memory bandwidth; under Muon also its
 *             step (cost_muon.c: the busiest owner's Newton-Schulz matmuls,
 *             the exchange's all-to-alls, the momentum), after the backward.
 *
 * All seconds, bytes and FLOPs are per rank; the slowest stage sets the pace.
 *
 * The pieces: cost_internal.h lists them (the profile, dtypes, compute,
 * communication, bounds); this file assembles a step from them. */
#include "plan/cost_internal.h"

#include <stdlib.h>
#include <string.h>

/* the plan's bytes per category (counted in the run's dtypes cnt) in the
 * priced dtypes dt, each by its factor: the weights' copy of the
 * parameters held and the master of the elements this rank updates (its
 * moments' length); gradients, moments (Muon's fp32 buffers beside them
 * as counted), gathered weights, activations and comm buffers */
static void scale_mem(const mt_plan_rank *pr, const mt_cost_dtypes *dt, const mt_cost_dtypes *cnt,
                      double *mem) {
  const double updated = pr->moments_numel;
  const double held = (pr->mem[MT_MEM_PARAMS] - updated * cnt->master) / cnt->weights;
  const double moments = 2.0 * updated * cnt->moments;
  for (int c = 0; c < MT_MEM_NCAT; c++) mem[c] = pr->mem[c];
  mem[MT_MEM_PARAMS] = held * dt->weights + updated * dt->master;
  mem[MT_MEM_GRADS] = pr->mem[MT_MEM_GRADS] * dt->grads / cnt->grads;
  mem[MT_MEM_OPTIM] = pr->mem[MT_MEM_OPTIM] - moments + 2.0 * updated * dt->moments;
  mem[MT_MEM_GATHER] = pr->mem[MT_MEM_GATHER] * dt->weights / cnt->weights;
  mem[MT_MEM_ACTIV] = pr->mem[MT_MEM_ACTIV] * dt->acts / cnt->acts;
  mem[MT_MEM_COMM] = pr->mem[MT_MEM_COMM] * dt->msg / cnt->msg;
}

/* A stage's chunks, as a key: stages with the same chunks (layer counts,
 * MoE blocks, embedding, head) cost the same and hold the same state; the
 * first of them holds the most activation sets (every schedule's in-flight
 * count falls along the pipeline), so it stands for the others. */
static void stage_key(const mt_config *cfg, const mt_layout *lay, int st, int *key) {
  const int pp = cfg->pp, v = lay->chunks;
  for (int k = 0; k < v; k++) {
    int vs = st + k * pp, a, b;
    mt_layout_stage_layers(cfg, lay, vs, &a, &b);
    key[2 * k] = (b - a) * 4 + (vs == 0) * 2 + (vs == pp * v - 1);
    key[2 * k + 1] = mt_model_moe_before(&lay->shape, b) - mt_model_moe_before(&lay->shape, a);
  }
}

/* the first 64 stages have figures of their own (mt_cost's stage arrays) */
#define STAGES_KEPT 64

/* what the phases of a step's price share */
typedef struct {
  const mt_config *cfg;
  const mt_cost_profile *p;
  mt_cost_dtypes dt;  /* priced */
  mt_cost_dtypes cnt; /* counted: the run's (lay.dtypes), what the plan holds and sends */
  mt_layout lay;
  /* the ops' prices: the virtual device's, in the run's activation dtype;
   * the pipeline's per-op overhead is added to the schedule's ops (the
   * collectives are priced from them too) */
  mt_price ops_price;
  int pp, v, accum, B, ndp; /* ndp: the dp x cp group, ranks tp apart */
  int k;                    /* token slices: accum counts micro-batches x k units */
  double dp_s_per_byte;     /* that group's seconds a byte */
  /* the stages' (price_stages): the slowest stage's mean chunk sets the
   * per-op times of the schedule's simulation (a stage runs each of its
   * chunks once per micro-batch: with interleaving, pricing every chunk as
   * the slowest one, the LM head's, overstated a 1.3B's pp 4 x 2 step by
   * 17% against the emulation) */
  mt_chunk_cost worst;
  double reduce_b, gather_b; /* dp bytes per step of the stage that sends most */
  int n_buckets;             /* and its buckets */
  int stage_buckets[STAGES_KEPT];
  double stage_gather_s[STAGES_KEPT]; /* of stage_dp_s: the parameter gathers */
  mt_chunk_cost stage_chunk[STAGES_KEPT]; /* each stage's mean chunk (the schedule's op
                                             times of its rank) */
  /* dp's exposure from each stage's recorded step, replayed (cost_replay.c):
   * one stage's at once; a pipeline's stages kept (a stage of the same kind
   * as an earlier one has its recording, rec_of) and replayed on the
   * schedule's op times of their rank (op_start, op_end) */
  int replayed;
  mt_cost_replay replay;
  mt_cost_replay_prep stage_rec[STAGES_KEPT][2]; /* [1] the step's, or the longer of two
                                                    shorter ones (rec_m), [0] the other */
  mt_cost_replay_opts stage_ropt[STAGES_KEPT];
  int rec_of[STAGES_KEPT];
  int rec_m[STAGES_KEPT][2]; /* the two shorter steps' micro-batches (0: the step's own) */
  /* price_pipeline's replay: the slowest stage's exposed dp after the
   * schedule and its tied embeddings' exchange, each stage's exposed dp */
  int piped;
  double pipe_dp_s, pipe_tied_s, pipe_stage_s[STAGES_KEPT];
  /* the step's ops outside the schedule's and the optimizer's (the
   * gradients' norm, their buffers zeroed, ...): one stage's, a pipeline's
   * slowest stage's; each stage's optimizer seconds */
  double other_ops_s;
  double stage_optim[STAGES_KEPT];
} step_ctx;

/* one chunk of a stage (layers [l0, l1), the embedding and head where it
 * holds them) of a micro-batch: its compute and communication; cb, ops_s:
 * mt_cost_chunk_compute's and mt_cost_chunk_comm's */
static mt_chunk_cost chunk(const step_ctx *s, const mt_gpt *m, int l0, int l1, int embed,
                           int head, const double cb[4], const double *ops_s) {
  mt_chunk_desc k = {.m = m, .l0 = l0, .l1 = l1, .n_moe = 0, .embed = embed, .head = head,
                     .B = s->B};
  for (int l = l0; l < l1; l++) k.n_moe += mt_model_is_moe(&m->shape, l);
  double att;
  mt_chunk_cost c = mt_cost_chunk_compute(s->p, s->cfg, &s->dt, &k, ops_s, &att);
  mt_cost_chunk_comm(s->p, &s->ops_price, s->cfg, s->dt.msg / s->cnt.msg, &k, att, cb, &c);
  return c;
}

/* the mean of stage st's chunks, per micro-batch, from its plan (w) */
static mt_chunk_cost stage_mean_chunk(const step_ctx *s, const mt_plan_world *w, int st) {
  const mt_config *cfg = s->cfg;
  const int pp = s->pp, v = s->v, accum = s->accum;
  const int materialized = s->p->attn_materialized;
  mt_chunk_cost mean = {0, 0, 0, 0, 0, 0};
  for (int vs = st; vs < pp * v; vs += pp) {
    int a, b;
    mt_layout_stage_layers(cfg, &s->lay, vs, &a, &b);
    double cb[4], ops_s[3]; /* the chunk's bytes and op seconds per micro-batch */
    for (int k = 0; k < 4; k++) cb[k] = w->step.exec.chunk_bytes[vs / pp][k] / accum;
    for (int k = 0; k < 3; k++) ops_s[k] = w->step.exec.chunk_s[vs / pp][k] / accum;
    mt_chunk_cost c = chunk(s, &w->step.model, a, b, vs == 0, vs == pp * v - 1, cb,
                            materialized ? NULL : ops_s);
    /* the collectives of cp and ep ride on the ops like tp's */
    c.tp += c.cp + c.ep;
    mean.fwd += c.fwd / v;
    mean.bwd += c.bwd / v;
    mean.bwd_input += c.bwd_input / v;
    mean.tp += c.tp / v;
    mean.cp += c.cp / v;
    mean.ep += c.ep / v;
  }
  return mean;
}

/* dp's exposure at m micro-batches from the line through two shorter
 * steps' (x[0] at m_at[0], x[1] at m_at[1]); of the step itself (m_at 0): x[1] */
static double on_line(const double *x, const int *m_at, int m) {
  if (m_at[1] <= m_at[0]) return x[1];
  return x[1] + (x[1] - x[0]) * (double)(m - m_at[1]) / (m_at[1] - m_at[0]);
}

/* Stage st's recorded step (or the two shorter steps' it was priced from,
 * plan_scaled.c), for dp's exposure (cost_replay.c), its ops at the
 * chunk's priced seconds and its bytes in the priced dtypes: one stage
 * replayed now; a pipeline's stage kept for the schedule's op times */
static void replay_stage(step_ctx *s, mt_plan_world *w, int st, const mt_chunk_cost *mean,
                         double optim) {
  const mt_pp_exec *x = &w->step.exec;
  double f = 0.0, b = 0.0;
  for (int c = 0; c < s->v; c++) {
    f += x->chunk_s[c][0] / s->accum;
    b += (x->chunk_s[c][1] + x->chunk_s[c][2]) / s->accum;
  }
  mt_cost_replay_opts o = {.reduce_scale = s->dt.grad_reduce / s->cnt.grad_reduce,
                           .gather_scale = s->dt.weights / s->cnt.weights,
                           .msg_scale = s->dt.msg / s->cnt.msg};
  for (int k = 0; k < MT_PP_NKINDS; k++) o.op_scale[k] = 1.0;
  if (f > 0) o.op_scale[MT_PP_FWD] = s->v * mean->fwd / f;
  if (b > 0)
    o.op_scale[MT_PP_BWD] = o.op_scale[MT_PP_BWD_INPUT] = o.op_scale[MT_PP_BWD_WEIGHT] =
        s->v * mean->bwd / b;
  const int scaled = w->rec_m[1] > 0;
  const mt_comm_rec *rec[2] = {&w->rec_prev, &w->rec};
  if (s->pp == 1) {
    /* dp's waits, and the ops outside the schedule's ops beyond the
     * optimizer's priced seconds */
    double exposed[2] = {0.0, 0.0}, other[2] = {0.0, 0.0};
    for (int i = scaled ? 0 : 1; i < 2; i++) {
      mt_cost_replay_prep prep;
      mt_cost_replay_prepare(rec[i], &s->ops_price, &o, &prep);
      mt_cost_replay_step(&prep, &o, &s->replay);
      mt_cost_replay_prep_free(&prep);
      exposed[i] = s->replay.dp_exposed_s;
      other[i] = s->replay.ops_s - s->replay.ops_in_s - optim;
    }
    s->replay.dp_exposed_s = on_line(exposed, w->rec_m, s->lay.accum);
    if (s->replay.dp_exposed_s < 0) s->replay.dp_exposed_s = 0.0;
    s->other_ops_s = on_line(other, w->rec_m, s->lay.accum);
    if (s->other_ops_s < 0) s->other_ops_s = 0.0;
    s->replayed = 1;
  } else if (st < STAGES_KEPT && s->pp <= STAGES_KEPT) {
    s->stage_optim[st] = optim;
    for (int i = scaled ? 0 : 1; i < 2; i++)
      mt_cost_replay_prepare(rec[i], &s->ops_price, &o, &s->stage_rec[st][i]);
    s->stage_ropt[st] = o;
    s->rec_of[st] = st;
    s->rec_m[st][0] = w->rec_m[0], s->rec_m[st][1] = w->rec_m[1];
  }
}

/* dp: the stage's gradient and parameter bytes per step (r reduced, g
 * gathered) in the priced dtypes, split as the ZeRO level sends them: per
 * element of the state, ZeRO-0 reduces it; ZeRO-1 reduce-scatters and
 * gathers it once a step; ZeRO-2 reduce-scatters it per micro-batch and
 * gathers it once a step; ZeRO-3 per micro-batch gathers it for forward,
 * again for backward and reduce-scatters it (a reduce-scatter and an
 * all-gather of a tensor count the same bytes). The plan's state bytes
 * hold a reductions (in the counted grad_reduce dtype) for b gathers (in
 * the counted weights' dtype) */
static void stage_dp_bytes(const step_ctx *s, const mt_plan_rank *pr, double *reduce,
                           double *gather) {
  const int accum = s->accum;
  const mt_cost_dtypes *dt = &s->dt, *cnt = &s->cnt;
  double sb = s->ndp > 1 ? pr->dp_state_bytes : 0.0, a, b;
  switch (s->cfg->zero) {
  case 0: a = 1.0, b = 0.0; break;
  case 1: a = b = 1.0; break;
  case 2: a = accum, b = 1.0; break;
  default: a = 1.0, b = 2.0;
  }
  const double x = sb / (a * cnt->grad_reduce + b * cnt->weights); /* elements */
  *reduce = a * x * dt->grad_reduce + pr->edp_bytes * dt->grad_reduce / cnt->grad_reduce;
  *gather = b * x * dt->weights;
  if (s->cfg->zero == 0 && s->ndp > 1 && pr->dp_update_bytes > 0) {
    /* Muon at ZeRO 0: its matrices' buckets gathered after the update
     * (fp32 master and the weights' copy, as counted), the rest reduced */
    *reduce = (sb - pr->dp_update_bytes) * dt->grad_reduce / cnt->grad_reduce +
              pr->edp_bytes * dt->grad_reduce / cnt->grad_reduce;
    *gather = pr->dp_update_bytes;
  }
}

/* Materialized attention (another stack's: Megatron-LM before FlashAttention)
 * keeps each layer's T x T scores for its backward, which the run's counts
 * (block attention) hold none of: the softmax's output, the dropout's mask
 * and its output, 2 + 1 + 2 bytes an element in 16-bit activations (the
 * 5 a s^2 b of Korthikanti et al. 2022; 4 + 1 + 4 in fp32), a micro-batch's
 * B x (n_head / tp) x T_local x T per layer; per layer of every activation
 * set the stage holds at once, or under recompute for the one layer being
 * recomputed. */
static double materialized_scores(const step_ctx *s, const mt_plan_rank *pr, int sets) {
  const mt_config *cfg = s->cfg;
  const mt_model_shape *sh = &s->lay.shape;
  const double T = sh->seq_len, elems = (double)cfg->micro_batch * sh->n_head / cfg->tp *
                                        (T / cfg->cp) * T;
  const double layers = cfg->recompute ? 1.0 : (double)sets * ((pr->layers + s->v - 1) / s->v);
  return layers * elems * (2.0 * s->dt.acts + 1.0);
}

/* Stage st, the first of its kind: its plan (memory, bytes per group), its
 * mean chunk, its dp bytes and AdamW, into s and out. */
static int price_stage(step_ctx *s, int st, mt_cost *out, mt_err *e) {
  const mt_cost_dtypes *dt = &s->dt;
  mt_plan_rank pr;
  mt_plan_world w;
  /* counted in the run's dtypes in every attention mode (materialized
   * attention only leaves the op seconds unused); turned into the priced
   * dtypes once, below */
  if (mt_plan_rank_world_scaled(s->cfg, &s->lay, st, &s->ops_price, &pr, &w, e) != 0)
    return mt_err_pass(e);
  double mem[MT_MEM_NCAT], total = 0.0;
  scale_mem(&pr, dt, &s->cnt, mem);
  if (s->p->attn_materialized)
    mem[MT_MEM_ACTIV] += materialized_scores(s, &pr, w.step.exec.peak_slots);
  for (int c = 0; c < MT_MEM_NCAT; c++) {
    total += mem[c];
    if (mem[c] > out->mem[c]) out->mem[c] = mem[c];
  }
  if (total > out->mem_bytes) out->mem_bytes = total;
  mt_chunk_cost mean = stage_mean_chunk(s, &w, st);
  if (mean.fwd + mean.bwd + mean.tp > s->worst.fwd + s->worst.bwd + s->worst.tp) s->worst = mean;
  if (st < STAGES_KEPT) s->stage_chunk[st] = mean;
  double r, g;
  stage_dp_bytes(s, &pr, &r, &g);
  /* the bytes per group in the run's dtypes: dp's state as stage_dp_bytes
   * splits it (its scalar sums stay fp32), tp's and pp's messages */
  const mt_cost_dtypes *cnt = &s->cnt;
  double dp_b = pr.dp_bytes - pr.dp_state_bytes + r + g -
                pr.edp_bytes * dt->grad_reduce / cnt->grad_reduce - pr.muon_dp_bytes;
  double tp_b = (pr.tp_bytes - pr.muon_tp_bytes) * dt->msg / cnt->msg;
  double pp_b = pr.pp_bytes * dt->msg / cnt->msg;
  if (dp_b > out->dp_bytes) out->dp_bytes = dp_b;
  if (tp_b > out->tp_bytes) out->tp_bytes = tp_b;
  if (pp_b > out->pp_bytes) out->pp_bytes = pp_b;
  if (r + g >= s->reduce_b + s->gather_b) {
    s->reduce_b = r, s->gather_b = g;
    s->n_buckets = pr.n_buckets > 0 ? pr.n_buckets : 1;
  }
  /* this stage's dp bytes over its link (latencies added for the step) */
  if (st < STAGES_KEPT) {
    out->stage_dp_s[st] = (r + g) * s->dp_s_per_byte;
    s->stage_gather_s[st] = g * s->dp_s_per_byte;
    s->stage_buckets[st] = pr.n_buckets > 0 ? pr.n_buckets : 1;
  }
  /* AdamW on the elements this rank updates: the gradient read, both
   * moments and the master read and written, the weights' copy written.
   * Under Muon, AdamW's are the rest (the moments' elements less Muon's
   * matrices': their parts, or at ZeRO 0 all the rank holds), and Muon's
   * step (cost_muon.c) follows it */
  mt_cost_muon mu;
  mt_cost_muon_price(&s->ops_price, s->cfg, &w.step.model.reg, dt, &mu);
  double updated = pr.moments_numel - (s->cfg->zero ? mu.parts : mu.held);
  double bytes = dt->grads + 4.0 * dt->moments +
                 (dt->master > 0 ? 2.0 * dt->master + dt->weights : 2.0 * dt->weights);
  double optim = updated * bytes / (s->p->elementwise_gbs * 1e9) + mu.total_s;
  if (optim > out->optim_s) {
    out->optim_s = optim;
    out->optim_ns_s = mu.ns_s;
    out->optim_exchange_s = mu.exchange_s;
    out->optim_momentum_s = mu.momentum_s;
  }
  if (mu.flops_busiest > out->optim_flops) out->optim_flops = mu.flops_busiest;
  replay_stage(s, &w, st, &mean, optim);
  /* the exchange's bytes as the plan counts them (its pricing takes the
   * busiest rank's, cost_muon.c) */
  const double muon_dp = pr.muon_dp_bytes + pr.muon_edp_bytes;
  const double muon_tp = pr.muon_tp_bytes + pr.muon_etp_bytes;
  if (muon_dp > out->muon_dp_bytes) out->muon_dp_bytes = muon_dp;
  if (muon_tp > out->muon_tp_bytes) out->muon_tp_bytes = muon_tp;
  mt_plan_world_destroy(&w);
  return 0;
}

/* every pipeline stage: each kind of stage priced once (stage_key), the
 * others take its figures */
static int price_stages(step_ctx *s, mt_cost *out, mt_err *e) {
  const int pp = s->pp, v = s->v;
  int rc = 0;
  int *keys = mt_calloc((size_t)pp * 2 * v, sizeof(int));
  for (int st = 0; st < pp && rc == 0; st++) {
    stage_key(s->cfg, &s->lay, st, keys + (size_t)st * 2 * v);
    int seen = -1; /* an earlier stage of the same kind: its figures are this one's */
    for (int o = 0; o < st && seen < 0; o++)
      if (!memcmp(keys + (size_t)o * 2 * v, keys + (size_t)st * 2 * v, 2 * v * sizeof(int)))
        seen = o;
    if (seen < 0) {
      rc = price_stage(s, st, out, e);
    } else if (st < STAGES_KEPT) {
      out->stage_dp_s[st] = out->stage_dp_s[seen];
      s->stage_buckets[st] = s->stage_buckets[seen];
      s->stage_gather_s[st] = s->stage_gather_s[seen];
      s->stage_chunk[st] = s->stage_chunk[seen];
      s->rec_of[st] = s->rec_of[seen];
      s->stage_optim[st] = s->stage_optim[seen];
    }
  }
  free(keys);
  return rc;
}

/* A pipeline of m micro-batches replayed: each stage's recording (prep[st],
 * the step's of m) on its rank's ops in the schedule simulated with the
 * ranks' op times t and the links (dp's waits hold the rank's later ops,
 * the schedule's gaps absorb them), the calls over every stage (the loss's
 * and the norm's sums) starting at the latest stage's arrival. Per stage
 * what it adds after the schedule's end (the ops after its last one, the
 * optimizer's, aside) into x, of it the tied embeddings' exchange into
 * tied; those ops beyond the stage's priced optimizer into other. */
static void replay_pipeline_at(const step_ctx *s, int m, const mt_pp_times *t,
                               const mt_pp_link *links, int which, double *x, double *tied,
                               double *other, mt_pp_sim *sim_out) {
  const int pp = s->pp;
  mt_pp_schedule sched;
  mt_pp_schedule_build_sliced(&sched, s->lay.sched, pp, m, s->v, s->lay.sched == MT_SCHED_ZBV,
                              s->k);
  double **start = mt_calloc((size_t)pp, sizeof *start), **end = mt_calloc((size_t)pp, sizeof *end);
  mt_cost_replay_opts *o = mt_calloc((size_t)pp, sizeof *o);
  const mt_cost_replay_prep **p = mt_calloc((size_t)pp, sizeof *p);
  mt_cost_replay *r = mt_calloc((size_t)pp, sizeof *r);
  for (int st = 0; st < pp; st++) {
    start[st] = mt_calloc((size_t)sched.n_ops[st] + 1, sizeof(double));
    end[st] = mt_calloc((size_t)sched.n_ops[st] + 1, sizeof(double));
    o[st] = s->stage_ropt[s->rec_of[st]];
    o[st].op_start = start[st], o[st].op_end = end[st], o[st].n_ops = sched.n_ops[st];
    p[st] = &s->stage_rec[s->rec_of[st]][which];
  }
  mt_pp_sim sim;
  mt_err why = {0}; /* validation already accepted the schedule */
  mt_pp_schedule_simulate_trace(&sched, t, links, start, end, &sim, &why);
  if (sim_out) *sim_out = sim;
  mt_cost_replay_stages(p, o, pp, r);
  for (int st = 0; st < pp; st++) {
    x[st] = r[st].span_s - r[st].post_s - sim.makespan;
    if (x[st] < 0) x[st] = 0.0;
    tied[st] = r[st].p2p_s < x[st] ? r[st].p2p_s : x[st];
    other[st] = r[st].post_s - s->stage_optim[st];
    free(start[st]);
    free(end[st]);
  }
  mt_pp_schedule_free(&sched);
  free(start), free(end), free(o), free(p), free(r);
}

/* A pipeline's dp exposure from its stages' recordings replayed (the
 * step's own, or the line through the two shorter steps' it was priced
 * from: every stage priced so, at the same sizes); the step waits for the
 * slowest stage. Into s->pipe_*; without recordings (more stages than are
 * kept), or stages priced apart differently, nothing (the formula).
 * Returns 1 where it simulated the step's own schedule with the links into
 * sim, else 0. */
static int replay_pipeline(step_ctx *s, const mt_pp_times *t, const mt_pp_link *links,
                           mt_pp_sim *sim) {
  const int pp = s->pp;
  if (pp <= 1 || pp > STAGES_KEPT) return 0;
  const int *m_at = s->rec_m[s->rec_of[0]];
  for (int st = 0; st < pp; st++) {
    const int *mm = s->rec_m[s->rec_of[st]];
    if (mm[0] != m_at[0] || mm[1] != m_at[1]) return 0;
  }
  double *x = mt_calloc((size_t)6 * pp, sizeof(double)), *tied = x + 2 * pp,
         *other = x + 4 * pp;
  if (m_at[1] > 0) {
    for (int i = 0; i < 2; i++)
      replay_pipeline_at(s, m_at[i], t, links, i, x + i * pp, tied + i * pp, other + i * pp,
                         NULL);
  } else { /* the step's own schedule: its simulation is the step's */
    replay_pipeline_at(s, s->lay.accum, t, links, 1, x + pp, tied + pp, other + pp, sim);
  }
  double most = -1.0;
  s->pipe_dp_s = s->pipe_tied_s = s->other_ops_s = 0.0;
  for (int st = 0; st < pp; st++) {
    const double xs[2] = {x[st], x[pp + st]}, ts[2] = {tied[st], tied[pp + st]};
    const double os[2] = {other[st], other[pp + st]};
    double xx = on_line(xs, m_at, s->lay.accum), tt = on_line(ts, m_at, s->lay.accum);
    double oo = on_line(os, m_at, s->lay.accum);
    if (xx < 0) xx = 0.0;
    if (tt > xx) tt = xx;
    if (tt < 0) tt = 0.0;
    if (oo < 0) oo = 0.0;
    s->pipe_stage_s[st] = xx - tt;
    if (xx + oo > most) {
      most = xx + oo;
      s->pipe_dp_s = xx - tt;
      s->pipe_tied_s = tt;
      s->other_ops_s = oo;
    }
  }
  s->piped = 1;
  free(x);
  return m_at[1] <= 0;
}

/* The pipeline: the simulator with the slowest chunk's per-op costs (the
 * per-op stage overhead riding on each op) and the point-to-point
 * messages as the executor sends them: non-blocking, each on its link (a
 * stage boundary inside a node or across nodes), so that only what the
 * schedule cannot hide of them is exposed (summing every message into the
 * ops overstated a pp 8 interleaved step by 23% against the emulation).
 * The schedule into sim, a backward op's seconds into tb; compute, tp,
 * cp, ep, the messages and the bubble into out. */
static void price_pipeline(step_ctx *s, mt_pp_sim *sim, double *tb, mt_cost *out) {
  const mt_config *cfg = s->cfg;
  const mt_cost_profile *p = s->p;
  const mt_layout *lay = &s->lay;
  const mt_chunk_cost worst = s->worst;
  const int pp = s->pp, v = s->v, accum = s->accum, dpn = p->devices_per_node;
  double msg = s->dt.msg * (double)s->B * (lay->shape.seq_len / cfg->cp / s->k) *
               lay->shape.n_embd / (cfg->sp ? cfg->tp : 1);
  const int stage_ranks = lay->world / pp;
  mt_pp_link *links = mt_calloc((size_t)2 * pp, sizeof(mt_pp_link));
  for (int r = 0; r < 2 * pp && pp > 1; r++) {
    int src = r / 2, dst = (src + (r % 2 ? pp - 1 : 1)) % pp;
    int inside = dpn <= 0 || src * stage_ranks / dpn == dst * stage_ranks / dpn;
    links[r].lat = mt_cost_link_lat(p, inside);
    links[r].xfer = msg / mt_cost_link_bw(p, inside);
  }
  double so = pp > 1 ? p->stage_us * 1e-6 : 0.0;
  *tb = worst.bwd + 0.5 * worst.tp + so;
  /* each rank's ops at its own stage's mean chunk (the first stage's
   * embedding and the last's LM head make them differ: timing every stage
   * as the slowest overstated a pp 4 step of one micro-batch by 28%) */
  mt_pp_times *t = mt_malloc((size_t)pp * sizeof *t);
  for (int r = 0; r < pp; r++) {
    const mt_chunk_cost c = r < STAGES_KEPT ? s->stage_chunk[r] : worst;
    t[r] = (mt_pp_times){.f = c.fwd + 0.5 * c.tp + so, .b = c.bwd + 0.5 * c.tp + so,
                         .bi = c.bwd_input + 0.5 * c.tp + so, .bw = c.bwd - c.bwd_input};
  }
  mt_pp_schedule sched;
  mt_pp_schedule_build_sliced(&sched, lay->sched, pp, accum / s->k, v,
                              lay->sched == MT_SCHED_ZBV, s->k);
  mt_pp_sim sim0;
  mt_err why = {0}; /* validation already accepted the schedule */
  mt_pp_schedule_simulate_ranks(&sched, t, NULL, &sim0, &why);
  /* the replay simulates the step's schedule with the links itself where
   * it replays the step's own recording (sim then its), else once here */
  if (!replay_pipeline(s, t, links, sim))
    mt_pp_schedule_simulate_ranks(&sched, t, links, sim, &why);
  mt_pp_schedule_free(&sched);
  free(links);
  free(t);
  out->compute_s = accum * v * (worst.fwd + worst.bwd);
  out->cp_s = accum * v * worst.cp;
  out->ep_s = accum * v * worst.ep;
  out->tp_s = accum * v * worst.tp - out->cp_s - out->ep_s;
  /* the messages' exposed part (what they add to the schedule) and the
   * ops' stage overhead */
  out->pp_p2p_s = sim->makespan - sim0.makespan + accum * v * 2.0 * so;
  out->pp_bubble_s = sim->makespan - out->compute_s - out->tp_s - out->cp_s - out->ep_s -
                     out->pp_p2p_s;
  if (out->pp_bubble_s < 0) out->pp_bubble_s = 0.0;
}

/* When a stage's dp reduction ends (ZeRO-0/1, overlapped with the
 * schedule): R seconds of it at the link's full rate, an equal share a
 * chunk, each issued during its chunk's last backward op (t_op long, ending
 * at chunk_end[c]) and run one after another on the link, beside the
 * rank's ops until its last backward ends (t_end) at the overlap share ov
 * of the rate, then at the full rate (as the virtual device runs them:
 * with interleaving a later chunk's gradients are complete several ops
 * before the first chunk's). */
static double chunked_reduce_end(const double *chunk_end, int v, double t_op, double t_end,
                                 double R, double ov) {
  double at[8] = {0};
  for (int c = 0; c < v; c++) at[c] = chunk_end[c] - t_op;
  for (int i = 1; i < v; i++) /* in the order the chunks complete */
    for (int j = i; j > 0 && at[j - 1] > at[j]; j--) {
      double t = at[j];
      at[j] = at[j - 1];
      at[j - 1] = t;
    }
  double cur = at[0];
  for (int c = 0; c < v; c++) {
    double left = R / v;
    if (cur < at[c]) cur = at[c];
    if (cur < t_end) {
      double can = (t_end - cur) * ov;
      if (ov > 0 && can >= left) {
        cur += left / ov;
        continue;
      }
      left -= can;
      cur = t_end;
    }
    cur += left;
  }
  return cur;
}

/* of t seconds of dp, what hiding `hide` of them leaves, never less than
 * one of the n_buckets buckets' (or units') worth */
static double exposed_part(double t, double hide, int n_buckets) {
  return t - hide > t / n_buckets ? t - hide : t / n_buckets;
}

/* With pipeline stages, dp hides behind backward where the schedule
 * overlaps it: a stage's reductions start during its last backward of each
 * chunk (under ZeRO-2/3 during every micro-batch's) and go on through the
 * cool-down of the stages below it, until the schedule ends; never the last
 * bucket. Without overlap (parallel.overlap_dp = false, ZeRO 0-1) they all
 * run after the schedule. The step waits for the slowest stage. t_r, t_g:
 * the seconds of the reductions and gathers of the stage that sends most;
 * each stage's exposed seconds into out. */
static double dp_exposed_pipeline(const step_ctx *s, const mt_pp_sim *sim, double tb, double t_r,
                                  double t_g, mt_cost *out) {
  const mt_config *cfg = s->cfg;
  const int pp = s->pp, v = s->v, accum = s->accum;
  const double ov = s->p->overlap, b_mb = v * s->worst.bwd;
  const int overlaps = cfg->zero >= 2 || cfg->overlap_dp;
  double hide = overlaps ? ov * (cfg->zero >= 2 ? accum : 1) * b_mb : 0.0;
  /* breadth-first at ZeRO-3 gathers a chunk's layers when its run of
   * micro-batches begins, after the run's first input arrived: nothing
   * of the stage hides it, and the next stage's run waits for this
   * one's first output, so the stages' gathers add up along the
   * pipeline (forward and backward runs alike) */
  const int run_gathers = cfg->zero == 3 && s->lay.sched == MT_SCHED_BFS;
  double serial = 0.0, exposed = 0.0;
  for (int st = 0; st < pp && st < STAGES_KEPT; st++) {
    double cool = overlaps ? sim->makespan - sim->rank_grads_end[st] : 0.0;
    double g_st = run_gathers ? s->stage_gather_s[st] : 0.0;
    double last_bucket = (out->stage_dp_s[st] - g_st) / s->stage_buckets[st];
    double x = out->stage_dp_s[st] - g_st - hide - cool, after = 0.0;
    if (overlaps && cfg->zero <= 1 && v <= 8) {
      /* the reduction chunk by chunk in the schedule's order; ZeRO-1's
       * gather of the updated shards follows the optimizer step, with
       * nothing beside it */
      after = s->stage_gather_s[st];
      x = chunked_reduce_end(sim->chunk_grads_end[st], v, tb, sim->rank_grads_end[st],
                             out->stage_dp_s[st] - after, ov) - sim->makespan;
      last_bucket = (out->stage_dp_s[st] - after) / s->stage_buckets[st];
    }
    if (x < last_bucket) x = last_bucket;
    x += after;
    out->stage_dp_exposed_s[st] = x + g_st;
    serial += g_st;
    if (x > exposed) exposed = x;
  }
  exposed += serial;
  if (pp > STAGES_KEPT) { /* beyond the per-stage figures: the largest stage's, no cool-down */
    double x = exposed_part(t_r + t_g, hide, s->n_buckets);
    if (x > exposed) exposed = x;
  }
  return exposed;
}

/* dp: its whole seconds, and what of them the step exposes: each stage's
 * recorded step replayed in issue order (cost_replay.c: ZeRO-0/1's
 * reductions behind the last micro-batch's backward and the schedule's
 * cool-down, ZeRO-2's behind every backward, ZeRO-3's gathers unit by unit
 * behind the unit before, the gathers after the optimizer step exposed);
 * a pipeline of more stages than are kept by the bytes' formulas
 * (dp_exposed_pipeline). A pipeline's slowest stage's exchange of the
 * tied embeddings' gradients, which follows its schedule, into tied_s. */
static void price_dp(const step_ctx *s, const mt_pp_sim *sim, double tb, mt_cost *out,
                     double *tied_s) {
  const mt_config *cfg = s->cfg;
  const int ndp = s->ndp, accum = s->accum, n_buckets = s->n_buckets;
  /* (an all-reduce counted as its two passes) */
  const double lat = ndp > 1 ? mt_cost_coll_lat(&s->ops_price, ndp, cfg->tp, MT_PRICE_PASS) : 0.0;
  double t_r = s->reduce_b * s->dp_s_per_byte, t_g = s->gather_b * s->dp_s_per_byte;
  double calls = 2.0 * n_buckets * (cfg->zero >= 2 ? accum : 1);
  out->dp_total_s = t_r + t_g + (ndp > 1 ? calls * lat : 0.0);
  if (s->replayed) {
    out->dp_exposed_s = out->stage_dp_exposed_s[0] = s->replay.dp_exposed_s;
  } else if (s->piped) {
    out->dp_exposed_s = s->pipe_dp_s;
    for (int st = 0; st < s->pp; st++) out->stage_dp_exposed_s[st] = s->pipe_stage_s[st];
    *tied_s = s->pipe_tied_s;
    out->pp_p2p_s += *tied_s;
  } else if (ndp > 1 || t_r > 0.0) {
    out->dp_exposed_s = dp_exposed_pipeline(s, sim, tb, t_r, t_g, out) +
                        (ndp > 1 ? calls * lat : 0.0);
  }
}

int mt_cost_estimate(const mt_config *cfg, const mt_cost_profile *p, mt_cost *out, mt_err *e) {
  MT_TRY(e, mt_cost_estimate_dt(cfg, p, NULL, out, e));
  return 0;
}

int mt_cost_estimate_dt(const mt_config *cfg, const mt_cost_profile *p, const mt_cost_dtypes *dt_in,
                        mt_cost *out, mt_err *e) {
  memset(out, 0, sizeof *out);
  step_ctx s = {.cfg = cfg, .p = p, .n_buckets = 1};
  if (dt_in) s.dt = *dt_in;
  else mt_cost_dtypes_default(cfg, p, &s.dt);
  if (mt_layout_validate(cfg, 0, &s.lay, e) != 0) {
    mt_layout_free(&s.lay);
    return mt_err_pass(e);
  }
  mt_cost_dtypes_counted(&s.lay.dtypes, &s.cnt);
  /* token slices: the schedule's units (a micro-batch's slices) are what
   * the ops, the messages and ZeRO-2/3's per-pass collectives count */
  s.k = cfg->pp_token_slices > 1 ? cfg->pp_token_slices : 1;
  s.pp = cfg->pp, s.v = s.lay.chunks, s.accum = s.lay.accum * s.k, s.B = cfg->micro_batch;
  s.ndp = cfg->dp * cfg->cp;
  mt_cost_price(p, &s.ops_price);
  s.ops_price.act_bytes = s.dt.acts;
  s.ops_price.stage_us = 0.0;
  s.dp_s_per_byte =
      s.ndp > 1 ? mt_cost_coll_xfer_s(&s.ops_price, 1.0, s.ndp, cfg->tp, MT_PRICE_PASS) : 0.0;
  int rc = price_stages(&s, out, e);
  if (rc == 0) {
    mt_pp_sim sim;
    double tb;
    price_pipeline(&s, &sim, &tb, out);
    double tied = 0.0; /* after the schedule: the tied embeddings' exchange */
    price_dp(&s, &sim, tb, out, &tied);
    /* the step's other ops (outside the schedule's and the optimizer's)
     * with the optimizer's */
    out->optim_s += s.other_ops_s;
    /* documents: the slowest dp rank's work sets the schedule */
    if (mt_plan_docs_price(cfg, &s.lay.shape, &out->docs, e) != 0) rc = mt_err_pass(e);
    /* varlen: the micro-batches that need no cp exchange send nothing, the
     * padding adds rows */
    const mt_plan_docs *d = &out->docs;
    const double span = d->varlen ? (sim.makespan - out->cp_s * (1.0 - d->exchange_share)) *
                                        d->pad_factor
                                  : sim.makespan;
    out->step_s = span * d->imbalance + tied + out->dp_exposed_s + out->optim_s;
    const mt_model_shape *sh = &s.lay.shape; /* MoE: the weights a token uses, as the run counts */
    double tokens = (double)cfg->global_batch * sh->seq_len;
    out->tokens_per_s = tokens / out->step_s;
    out->model_flops = mt_train_flops_per_token_mm(mt_model_active_matmul_weights(sh),
                                                   sh->n_layer, sh->n_embd, sh->seq_len) *
                       tokens;
    out->mfu = out->model_flops / (out->step_s * s.lay.world * p->peak_gflops * 1e9);
    out->headroom = mt_cost_headroom(cfg, p);
    out->fits = out->mem_bytes + out->headroom <= p->mem_bytes;
    out->world = s.lay.world;
  }
  for (int st = 0; st < STAGES_KEPT; st++) {
    mt_cost_replay_prep_free(&s.stage_rec[st][0]);
    mt_cost_replay_prep_free(&s.stage_rec[st][1]);
  }
  mt_layout_free(&s.lay);
  return rc;
}
