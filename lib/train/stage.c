/* This rank's pipeline stage as the executor sees it (pp = 1: one stage
 * holding the whole model), one training step's forward and backward
 * through the schedule, and evaluation through a forward-only schedule. */
#include "train/train.h"

#include <stdlib.h>
#include <string.h>

static size_t stage_msg_numel(void *ctx, int mb) {
  mt_train_stage *st = ctx;
  return (size_t)st->rows[mb] * st->model->T_sp * st->model->shape.n_embd;
}

static mt_gpt_acts *stage_bind(mt_train_stage *st, int slot, int chunk) {
  if (!st->slot_mem[slot])
    st->slot_mem[slot] = st->ops->alloc(MT_MEM_ACTIV, st->set_numel * sizeof(float));
  int vs = chunk * st->pp + st->rank;
  mt_gpt_acts_bind(st->model, &st->acts[slot], st->slot_mem[slot],
                   st->l1[chunk] - st->l0[chunk], st->B, vs == st->last_vs);
  return &st->acts[slot];
}

static float *stage_input(void *ctx, int slot, int chunk) {
  return stage_bind(ctx, slot, chunk)->encoded;
}

static float *stage_forward(void *ctx, int slot, int mb, int chunk) {
  mt_train_stage *st = ctx;
  int vs = chunk * st->pp + st->rank, first = vs == 0, last = vs == st->last_vs;
  mt_gpt_acts *a = first ? stage_bind(st, slot, chunk) : &st->acts[slot];
  size_t off = (size_t)mb * st->B * st->T;
  int rows = st->rows[mb];
  double sum = mt_gpt_forward_range(st->model, a, st->l0[chunk], st->l1[chunk], first, last,
                                    st->inp + off, st->tgt + off, rows);
  if (last && rows > 0) {
    /* the micro-batch's mean loss as the model reports it (fp32), weighted by
     * its tokens in training and by its sequences in evaluation */
    float mean = (float)(sum / ((double)rows * st->T));
    st->loss_sum += st->eval ? (double)mean * rows : (double)mean * rows * st->T;
  }
  return last ? NULL : mt_gpt_range_output(st->model, a, st->l1[chunk] - st->l0[chunk], rows);
}

static const float *stage_backward(void *ctx, int slot, int mb, int chunk, const float *dout,
                                   int input_only) {
  mt_train_stage *st = ctx;
  int vs = chunk * st->pp + st->rank, first = vs == 0, last = vs == st->last_vs;
  size_t off = (size_t)mb * st->B * st->T;
  /* one stage: the step's last backward reduces each layer's gradients over
   * dp as soon as they are complete, overlapped with the layers below */
  if (st->pp == 1) mt_dp_reduce_during_backward(st->dp, mb == st->n_mb - 1);
  const float *din =
      (input_only ? mt_gpt_backward_range_input : mt_gpt_backward_range)(
          st->model, &st->acts[slot], st->l0[chunk], st->l1[chunk], first, last, st->inp + off,
          st->tgt + off, dout, st->dloss, st->rows[mb]);
  return first ? NULL : din;
}

static void stage_backward_weight(void *ctx, int slot, int mb, int chunk) {
  mt_train_stage *st = ctx;
  int last = chunk * st->pp + st->rank == st->last_vs;
  mt_gpt_backward_range_weight(st->model, &st->acts[slot], st->l0[chunk], st->l1[chunk], last,
                               st->rows[mb]);
}

static mt_pp_stage_fns stage_fns(mt_train_stage *st) {
  mt_pp_stage_fns fns = {st, stage_msg_numel, stage_input, stage_forward, stage_backward,
                         st->model->split_backward ? stage_backward_weight : NULL};
  return fns;
}

void mt_train_stage_create(mt_trainer *t) {
  const mt_config *cfg = &t->cfg;
  mt_train_stage *st = &t->stage;
  memset(st, 0, sizeof *st);
  st->model = &t->model;
  st->dp = &t->dp;
  st->ops = t->ops;
  st->pp = cfg->pp;
  st->v = cfg->virtual_stages;
  st->rank = t->mesh.pp_rank;
  st->last_vs = cfg->pp * cfg->virtual_stages - 1;
  st->B = cfg->micro_batch;
  st->T = t->model.T; /* this rank's tokens of a sequence (seq_len / cp) */
  for (int vs = 0; vs <= st->last_vs; vs++) {
    int a, b;
    mt_layout_stage_layers(cfg, &t->lay, vs, &a, &b);
    if (vs % cfg->pp == st->rank) {
      st->l0[vs / cfg->pp] = a;
      st->l1[vs / cfg->pp] = b;
      size_t n = mt_gpt_acts_numel(&t->model, b - a, cfg->micro_batch, vs == st->last_vs);
      if (n > st->set_numel) st->set_numel = n;
    }
  }
  st->n_slots = t->sched.max_inflight[st->rank];
  st->slot_mem = mt_calloc((size_t)st->n_slots, sizeof(float *));
  st->acts = mt_calloc((size_t)st->n_slots, sizeof(mt_gpt_acts));
  size_t max_mb = (size_t)(t->lay.accum > 1 ? t->lay.accum : 1);
  st->inp = mt_calloc(max_mb * cfg->micro_batch * st->T, sizeof(int));
  st->tgt = mt_calloc(max_mb * cfg->micro_batch * st->T, sizeof(int));
  st->rows = mt_calloc(max_mb, sizeof(int));
  mt_pp_stage_fns fns = stage_fns(st);
  mt_pp_exec_create(&t->exec, &t->mesh.pp_g, t->ops, &t->sched, &fns, st->n_slots,
                    (size_t)cfg->micro_batch * t->model.T_sp * t->lay.shape.n_embd);
}

void mt_train_stage_destroy(mt_trainer *t) {
  mt_train_stage *st = &t->stage;
  if (!st->model) return;
  mt_pp_exec_destroy(&t->exec);
  for (int k = 0; k < st->n_slots; k++)
    if (st->slot_mem[k]) st->ops->free(MT_MEM_ACTIV, st->slot_mem[k], st->set_numel * sizeof(float));
  free(st->slot_mem);
  free(st->acts);
  free(st->inp);
  free(st->tgt);
  free(st->rows);
  memset(st, 0, sizeof *st);
}

double mt_train_stage_step(mt_trainer *t) {
  mt_train_stage *st = &t->stage;
  st->n_mb = t->lay.accum;
  st->loss_sum = 0.0;
  st->eval = 0;
  st->dloss = 1.0f / (float)t->tokens_per_step;
  mt_pp_exec_run(&t->exec, 0);
  mt_dp_reduce_during_backward(&t->dp, 0);
  if (t->cfg.pp > 1) {
    /* tied tensors: both ends add the other's gradient, so they stay equal */
    if (t->tied_numel)
      mt_pp_sum_tied_grads(&t->mesh.pp_g, &t->model.reg, t->ops, mt_dp_full_grads(&t->dp),
                           t->tied_scratch);
    mt_allreduce_sum_f64(&t->mesh.pp_g, &st->loss_sum, 1, MT_LOC_HOST); /* the last stage's */
  }
  return st->loss_sum;
}

double mt_train_evaluate(mt_trainer *t) {
  mt_train_stage *st = &t->stage;
  const mt_mesh *mesh = &t->mesh;
  const int T = st->T, micro_batch = t->cfg.micro_batch, n_seq = t->n_val_seq;
  double acc[2] = {0.0, 0.0}; /* sum of per-sequence mean losses, sequences */
  int per = (n_seq + mesh->dp - 1) / mesh->dp;
  int first = mesh->dp_rank * per, last = first + per < n_seq ? first + per : n_seq;
  int n_mb = last > first ? (last - first + micro_batch - 1) / micro_batch : 0;
  /* MoE blocks dispatch over ranks of several dp ranks: every rank runs as
   * many micro-batches as the first (the most), the extra ones empty */
  int n_real = n_mb;
  if (t->model.n_moe > 0) {
    int most = per < n_seq ? per : n_seq;
    n_mb = (most + micro_batch - 1) / micro_batch;
  }
  int *inp = st->inp, *tgt = st->tgt, *rows = st->rows;
  st->inp = mt_calloc((size_t)(n_mb + 1) * micro_batch * T, sizeof(int));
  st->tgt = mt_calloc((size_t)(n_mb + 1) * micro_batch * T, sizeof(int));
  st->rows = mt_calloc((size_t)n_mb + 1, sizeof(int));
  const int T_full = t->lay.shape.seq_len;
  int *seq = mt_calloc(2 * (size_t)T_full, sizeof(int));
  for (int k = 0; k < n_real; k++) {
    int s0 = first + k * micro_batch;
    st->rows[k] = last - s0 < micro_batch ? last - s0 : micro_batch;
    for (int b = 0; b < st->rows[k]; b++) {
      size_t off = ((size_t)k * micro_batch + b) * T;
      mt_sampler_get_window(&t->val_sampler, (uint64_t)(s0 + b), seq, seq + T_full);
      mt_cp_take_tokens(&t->model.cp.lay, seq, st->inp + off);
      mt_cp_take_tokens(&t->model.cp.lay, seq + T_full, st->tgt + off);
    }
    acc[1] += st->rows[k];
  }
  free(seq);
  st->loss_sum = 0.0;
  st->eval = 1;
  st->n_mb = n_mb;
  if (n_mb > 0) {
    mt_pp_schedule s;
    /* forward only: one activation set at a time (released after each forward) */
    mt_pp_schedule_build(&s, MT_SCHED_GPIPE, st->pp, n_mb, st->v);
    mt_pp_exec x;
    mt_pp_stage_fns fns = stage_fns(st);
    mt_pp_exec_create(&x, &t->mesh.pp_g, t->ops, &s, &fns, st->n_slots,
                      (size_t)micro_batch * t->model.T_sp * t->lay.shape.n_embd);
    mt_pp_exec_run(&x, 1);
    mt_pp_exec_destroy(&x);
    mt_pp_schedule_free(&s);
  }
  mt_dp_release_params(&t->dp);
  st->eval = 0;
  acc[0] = st->loss_sum;
  mt_allreduce_sum_f64(&t->mesh.pp_g, acc, 1, MT_LOC_HOST); /* the last stage's */
  free(st->inp);
  free(st->tgt);
  free(st->rows);
  st->inp = inp;
  st->tgt = tgt;
  st->rows = rows;
  /* every cp rank adds its tokens' mean for each of its sequences: equal
   * shares, so the mean over dp x cp is the mean over the sequences */
  mt_allreduce_sum_f64(&t->mesh.dpcp_g, acc, 2, MT_LOC_HOST);
  return acc[1] > 0 ? acc[0] / acc[1] : 0.0;
}
