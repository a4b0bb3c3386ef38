/* Pipeline executor: runs one rank's op list (schedule.c) with non-blocking
 * point-to-point over the pp group. Sends are MPI_Isend from copies in a
 * pool of buffers, never waited for before the end of the run (a wait on a
 * send larger than the eager limit blocks until the peer receives, and the
 * peer may be waiting for us); receives are posted and waited for in program
 * order. The validator's simulation is this executor with fixed op times,
 * so a list it accepts cannot deadlock here. Activations live in caller-owned
 * slots; a slot is taken at a micro-batch's first op on a chunk and released
 * after its last backward op, so the slots held at once are the schedule's
 * in-flight activation sets. */
#include "parallel/parallel.h"

#include <stdlib.h>
#include <string.h>

/* comm's point-to-point tags (NCCL gives each its own channel) */
enum { TAG_ACT = MT_TAG_PP_ACT, TAG_GRAD = MT_TAG_PP_GRAD };

size_t mt_pp_exec_comm_bytes(int pp, int n_slots, size_t max_msg) {
  return pp > 1 ? (size_t)n_slots * max_msg * sizeof(float) : 0;
}

void mt_pp_exec_create(mt_pp_exec *x, mt_group *pp_group, const mt_ops *ops,
                       const mt_pp_schedule *s, const mt_pp_stage_fns *fn, int n_slots,
                       size_t max_msg) {
  memset(x, 0, sizeof *x);
  x->g = pp_group;
  x->ops = ops;
  x->s = s;
  x->fn = *fn;
  x->rank = pp_group->rank;
  x->n_slots = n_slots;
  x->max_msg = max_msg;
  x->slot_of = mt_calloc((size_t)(s->m * s->v), sizeof(int));
  x->slot_busy = mt_calloc((size_t)n_slots, sizeof(int));
  x->dout = mt_calloc((size_t)n_slots, sizeof(float *));
  if (pp_group->size > 1)
    for (int i = 0; i < n_slots; i++)
      x->dout[i] = ops->alloc(MT_MEM_COMM, max_msg * sizeof(float));
  x->out = mt_calloc((size_t)n_slots, sizeof(float *));
}

/* send n floats of data to peer from a pool buffer */
static void send_copy(mt_pp_exec *x, const float *data, size_t n, int peer, int tag) {
  int k = 0;
  for (; k < x->n_send; k++) {
    mt_progress(&x->send_req[k]);
    if (!x->send_req[k].active) break;
  }
  if (k == x->n_send) {
    if (x->n_send == x->cap_send) {
      x->cap_send = x->cap_send ? 2 * x->cap_send : 8;
      x->send_buf = realloc(x->send_buf, (size_t)x->cap_send * sizeof(float *));
      x->send_req = realloc(x->send_req, (size_t)x->cap_send * sizeof(mt_request));
      if (!x->send_buf || !x->send_req) mt_die("out of memory (pipeline send buffers)");
    }
    x->send_buf[k] = x->ops->alloc(MT_MEM_COMM, x->max_msg * sizeof(float));
    memset(&x->send_req[k], 0, sizeof(mt_request));
    x->n_send++;
  }
  x->ops->copy(x->send_buf[k], data, n);
  mt_isend_f32(x->g, x->send_buf[k], n, peer, tag, x->ops->loc, &x->send_req[k]);
}

void mt_pp_exec_destroy(mt_pp_exec *x) {
  for (int i = 0; i < x->n_slots; i++)
    if (x->dout[i]) x->ops->free(MT_MEM_COMM, x->dout[i], x->max_msg * sizeof(float));
  for (int i = 0; i < x->n_send; i++) {
    mt_wait(&x->send_req[i]);
    x->ops->free(MT_MEM_COMM, x->send_buf[i], x->max_msg * sizeof(float));
  }
  free(x->dout); free(x->send_buf); free(x->send_req);
  free(x->slot_of); free(x->slot_busy); free(x->out);
  memset(x, 0, sizeof *x);
}

/* wait for a request, counting the time as pipeline wait */
static void wait_req(mt_pp_exec *x, mt_request *r) {
  if (!r->active) return;
  double t0 = mt_now();
  mt_wait(r);
  x->wait_s += mt_now() - t0;
}

static int take_slot(mt_pp_exec *x, int cell) {
  if (x->slot_of[cell] >= 0) return x->slot_of[cell];
  for (int k = 0; k < x->n_slots; k++) {
    int i = (x->next_free_hint + k) % x->n_slots;
    if (x->slot_busy[i]) continue;
    x->slot_busy[i] = 1;
    x->slot_of[cell] = i;
    x->next_free_hint = (i + 1) % x->n_slots;
    int held = 0;
    for (int j = 0; j < x->n_slots; j++) held += x->slot_busy[j];
    if (held > x->peak_slots) x->peak_slots = held;
    return i;
  }
  mt_die("pipeline rank %d: more than %d micro-batches in flight (schedule and slots disagree)",
         x->rank, x->n_slots);
}

/* slot_of keeps naming the slot for the micro-batch's send that follows */
static void release_slot(mt_pp_exec *x, int cell) { x->slot_busy[x->slot_of[cell]] = 0; }

void mt_pp_exec_run(mt_pp_exec *x, int forward_only) {
  const mt_pp_schedule *s = x->s;
  const int pp = s->pp, v = s->v, r = x->rank;
  const int next = (r + 1) % pp, prev = (r + pp - 1) % pp;
  const double t_run = mt_now();
  x->wait_s = x->compute_s = 0.0;
  x->peak_slots = 0;
  for (int i = 0; i < s->m * v; i++) x->slot_of[i] = -1;
  for (int i = 0; i < x->n_slots; i++) x->slot_busy[i] = 0;
  for (int i = 0; i < s->n_ops[r]; i++) {
    const mt_pp_op *o = &s->ops[r][i];
    const int cell = o->mb * v + o->chunk;
    const size_t n = x->fn.msg_numel(x->fn.ctx, o->mb);
    double t0;
    int k;
    switch (o->kind) {
    case MT_PP_RECV_ACT:
      k = take_slot(x, cell);
      mt_irecv_f32(x->g, x->fn.input(x->fn.ctx, k, o->chunk), n, prev, TAG_ACT, x->ops->loc,
                   &x->recv);
      wait_req(x, &x->recv);
      break;
    case MT_PP_FWD:
      k = take_slot(x, cell);
      t0 = mt_now();
      x->out[k] = x->fn.forward(x->fn.ctx, k, o->mb, o->chunk);
      x->compute_s += mt_now() - t0;
      if (forward_only) release_slot(x, cell);
      break;
    case MT_PP_SEND_ACT:
      k = x->slot_of[cell];
      t0 = mt_now();
      send_copy(x, x->out[k], n, next, TAG_ACT);
      x->wait_s += mt_now() - t0;
      break;
    case MT_PP_RECV_GRAD:
      if (forward_only) break;
      k = x->slot_of[cell];
      mt_irecv_f32(x->g, x->dout[k], n, next, TAG_GRAD, x->ops->loc, &x->recv);
      wait_req(x, &x->recv);
      break;
    case MT_PP_BWD:
    case MT_PP_BWD_INPUT: {
      if (forward_only) break;
      k = x->slot_of[cell];
      int last_vs = o->chunk * pp + r == pp * v - 1;
      t0 = mt_now();
      int input_only = o->kind == MT_PP_BWD_INPUT && x->fn.backward_weight;
      x->din = x->fn.backward(x->fn.ctx, k, o->mb, o->chunk, last_vs ? NULL : x->dout[k],
                              input_only);
      x->compute_s += mt_now() - t0;
      if (o->kind == MT_PP_BWD) release_slot(x, cell);
      break;
    }
    case MT_PP_BWD_WEIGHT:
      if (forward_only) break;
      /* the weight gradients, from what the slot kept since BWD_INPUT */
      if (x->fn.backward_weight) {
        k = x->slot_of[cell];
        t0 = mt_now();
        x->fn.backward_weight(x->fn.ctx, k, o->mb, o->chunk);
        x->compute_s += mt_now() - t0;
      }
      release_slot(x, cell);
      break;
    case MT_PP_SEND_GRAD:
      if (forward_only) break;
      /* right after its backward: the input gradient is still in the model's scratch */
      t0 = mt_now();
      send_copy(x, x->din, n, prev, TAG_GRAD);
      x->wait_s += mt_now() - t0;
      break;
    case MT_PP_NKINDS:
      break;
    }
  }
  for (int i = 0; i < x->n_send; i++) wait_req(x, &x->send_req[i]);
  x->wall_s = mt_now() - t_run;
}

/* ------------------------------------------------------------------ */
/* tied tensors across stages                                          */

enum { TAG_TIED = MT_TAG_PP_TIED };

size_t mt_pp_tied_numel(const mt_registry *reg) {
  size_t most = 0;
  for (int i = 0; i < reg->n; i++) {
    const mt_tensor *t = &reg->t[i];
    if (t->pp_copy >= 0 && t->pp_copy != t->pp_stage && t->numel_local > most)
      most = t->numel_local;
  }
  return most;
}

void mt_pp_sum_tied_grads(mt_group *pp_group, const mt_registry *reg, const mt_ops *ops,
                          float *grads, float *scratch) {
  for (int i = 0; i < reg->n; i++) {
    const mt_tensor *t = &reg->t[i];
    if (t->pp_copy < 0 || t->pp_copy == t->pp_stage || t->numel_local == 0) continue;
    int peer = reg->pp_rank == t->pp_stage ? t->pp_copy : t->pp_stage;
    float *g = grads + t->offset;
    mt_sendrecv_f32(pp_group, g, scratch, t->numel_local, peer, TAG_TIED, ops->loc);
    ops->axpy(g, 1.0f, scratch, t->numel_local);
  }
}
