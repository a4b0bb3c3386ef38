/* One training step of this rank, as the trainer and the plan run it: the
 * model, the dp engine, the schedule and the executor made together, then
 * per step the schedule's forward and backward, the gradient sync, the tied
 * tensors across stages, the optimizer and the loss. */
#include "parallel/parallel.h"

#include <string.h>

int mt_step_create(mt_step *s, const mt_step_opts *o, const mt_step_groups *g, const mt_ops *ops,
                   mt_err *e) {
  memset(s, 0, sizeof *s);
  s->groups = *g;
  mt_gpt_parallel par = o->par;
  par.external_state = 1; /* the dp engine holds the state */
  /* the activations' and the weights' copy's storage, as the roles say */
  par.dt = o->dtypes.acts;
  if (mt_gpt_create_stage(&s->model, o->shape, ops, o->micro_batch, &par, e) != 0) {
    memset(s, 0, sizeof *s); /* mt_step_destroy must not take a half-made model for a step */
    return mt_err_pass(e);
  }
  /* cp ranks hold the same parameters (each sees other tokens): gradients
   * and ZeRO shards go over dp x cp (at cp = 1, the dp group, rank for
   * rank); experts' over edp of the folded mesh */
  mt_registry *reg = &s->model.reg;
  mt_registry_set_dp(reg, g->dp->size, g->dp->rank, g->cp->size, g->cp->rank);
  mt_registry_set_edp(reg, g->edp->size, g->edp->rank);
  mt_pp_schedule_build_sliced(&s->sched, o->sched, g->pp->size, o->accum, o->virtual_stages,
                              o->sched == MT_SCHED_ZBV, o->par.slices);
  /* this rank's chunks: virtual stages rank, rank + pp, ... (in a V: rank,
   * 2pp - 1 - rank); buckets are cut between them */
  int l0[MT_PP_MAX_CHUNKS], l1[MT_PP_MAX_CHUNKS];
  for (int c = 0; c < o->virtual_stages; c++) {
    l0[c] = o->stage_l0[mt_pp_vs_of(&s->sched, g->pp->rank, c)];
    l1[c] = o->stage_l1[mt_pp_vs_of(&s->sched, g->pp->rank, c)];
  }
  if (g->pp->size > 1) mt_registry_set_chunks(reg, o->virtual_stages, l0, l1);
  mt_registry_shard(reg, o->zero, o->bucket_bytes);
  /* the registry's reduction groups, as the mesh has them */
  mt_dp_groups dg = {.reduce = {[MT_GROUP_DP] = g->dpcp, [MT_GROUP_EDP] = g->edp},
                     .tp = g->tp, .pp = g->pp, .ep = g->ep, .etp = g->etp};
  const int pp = g->pp->size;
  mt_dp_create(&s->dp, &dg, reg, ops, o->dtypes.weights, &s->model.tp, o->beta1, o->beta2,
               o->eps, o->weight_decay,
               (s->model.split_backward ? MT_DP_OPEN_FILLS : 0) |
                   (pp > 1 && o->sched == MT_SCHED_BFS ? MT_DP_RUNS : 0) |
                   (o->dtypes.grad_reduce == MT_DT_BF16 ? MT_DP_REDUCE_BF16 : 0) |
                   (o->dtypes.grads == MT_DT_BF16 ? MT_DP_GRADS_BF16 : 0));
  if (o->muon.on) mt_dp_muon_create(&s->dp, &o->muon);
  if (pp > 1) {
    /* the other stage's gradient of a tied tensor (bf16 gradients: and
     * this stage's, widened) */
    s->tied_numel = mt_pp_tied_numel(reg) * (s->dp.gdt != MT_DT_F32 ? 2 : 1);
    if (s->tied_numel) s->tied_scratch = ops->alloc(MT_MEM_COMM, s->tied_numel * sizeof(float));
  }
  mt_pp_exec_create(&s->exec, g->pp, &s->sched, &s->model, &s->dp, l0, l1);
  s->exec.overlap_dp = o->overlap_dp;
  return 0;
}

void mt_step_destroy(mt_step *s) {
  if (!s->model.ops) return;
  mt_pp_exec_destroy(&s->exec);
  if (s->tied_scratch)
    s->model.ops->free(MT_MEM_COMM, s->tied_scratch, s->tied_numel * sizeof(float));
  mt_pp_schedule_free(&s->sched);
  mt_dp_destroy(&s->dp);
  mt_gpt_destroy(&s->model);
  memset(s, 0, sizeof *s);
}

double mt_step_gradients(mt_step *s, const mt_pp_batch *b) {
  mt_dp_begin_step(&s->dp);
  /* a step of another count of micro-batches (data.seq_policy = varlen,
   * one stage): its own schedule of them */
  mt_pp_schedule own;
  const int other = b->n_mb != s->sched.m / s->sched.k;
  if (other) {
    if (s->sched.pp > 1 || s->sched.k > 1)
      mt_die("a step of %d micro-batches on a pipeline built for %d", b->n_mb,
             s->sched.m / s->sched.k);
    mt_pp_schedule_build(&own, s->sched.kind, 1, b->n_mb, 1);
  }
  double loss = mt_pp_exec_run(&s->exec, other ? &own : &s->sched, b, 0);
  if (other) mt_pp_schedule_free(&own);
  mt_dp_reduce_during_backward(&s->dp, 0);
  if (s->sched.pp > 1) {
    /* tied tensors: both ends add the other's gradient, so they stay equal */
    if (s->tied_numel)
      mt_pp_sum_tied_grads(s->groups.pp, &s->model.reg, s->model.ops, &s->dp, s->tied_scratch);
    mt_allreduce(s->groups.pp, &loss, 1, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST); /* the last stage's */
  }
  mt_dp_finish_sync(&s->dp);
  return loss;
}

double mt_step_update(mt_step *s, float lr, float grad_clip, double *loss_sum) {
  double norm = mt_dp_optimizer_step(&s->dp, lr, grad_clip);
  /* the global loss: sum over dp x cp of each rank's token losses */
  mt_allreduce(s->groups.dpcp, loss_sum, 1, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  return norm;
}

double mt_step_evaluate(mt_step *s, const mt_pp_batch *b) {
  double loss = 0.0;
  if (b->n_mb > 0) {
    /* forward only: one activation set at a time (released after each forward) */
    mt_pp_schedule sched;
    mt_pp_schedule_build_sliced(&sched, MT_SCHED_GPIPE, s->sched.pp, b->n_mb, s->sched.v,
                                s->sched.vshape, s->sched.k);
    loss = mt_pp_exec_run(&s->exec, &sched, b, 1);
    mt_pp_schedule_free(&sched);
  }
  mt_dp_release_params(&s->dp);
  mt_allreduce(s->groups.pp, &loss, 1, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST); /* the last stage's */
  return loss;
}
