/* Tensor parallelism: column- and row-parallel linears and the collectives
 * of Megatron-style tensor and sequence parallelism over the tp group, each
 * one call into comm (bytes and seconds counted on the group).
 *
 * Without sequence parallelism the model uses two conjugate operators around
 * each tensor-parallel block: "f" (identity forward, all-reduce of the input
 * gradient backward) before the column-parallel layer and "g" (all-reduce of
 * the partial outputs forward, identity backward) after the row-parallel one.
 * With sequence parallelism the all-reduces become an all-gather along T of
 * the block's input and a reduce-scatter along T of its output (and their
 * transposes in backward); the replicated tensors used inside the
 * sequence-sliced region then hold partial gradients, summed here once per
 * step. */
#include "model/model_internal.h"

#include <stdlib.h>
#include <string.h>

void mt_tp_create(mt_tp *tp, mt_group *g, int sp, size_t max_act, size_t max_partial_grads,
                  const mt_ops *ops, mt_dtype dt) {
  memset(tp, 0, sizeof *tp);
  tp->ops = ops;
  tp->dt = dt;
  tp->es = mt_dtype_bytes(dt);
  tp->g = g && g->size > 1 ? g : NULL;
  tp->size = tp->g ? g->size : 1;
  tp->rank = tp->g ? g->rank : 0;
  tp->sp = tp->g ? sp : 0;
  if (tp->sp) { /* two of a rank's slices of the largest activation */
    tp->scratch_n = 2 * (max_act / (size_t)tp->size);
    tp->scratch = ops->alloc(MT_MEM_COMM, tp->scratch_n * tp->es);
  }
  if (tp->g && max_partial_grads > 0) { /* sp's norms, a MoE router */
    tp->grad_buf_n = max_partial_grads;
    tp->grad_buf = ops->alloc(MT_MEM_COMM, max_partial_grads * sizeof(float));
  }
}

void mt_tp_destroy(mt_tp *tp) {
  free(tp->async_counts);
  if (tp->scratch) tp->ops->free(MT_MEM_COMM, tp->scratch, tp->scratch_n * tp->es);
  if (tp->grad_buf) tp->ops->free(MT_MEM_COMM, tp->grad_buf, tp->grad_buf_n * sizeof(float));
  memset(tp, 0, sizeof *tp);
}

void mt_tp_allreduce(const mt_tp *tp, mt_act *x, size_t n) {
  if (!tp->g) return;
  mt_allreduce(tp->g, x, n, tp->dt, MT_RED_SUM, tp->ops->loc);
}

void mt_tp_allreduce_max(const mt_tp *tp, float *x, size_t n) {
  if (tp->g) mt_allreduce(tp->g, x, n, MT_DT_F32, MT_RED_MAX, tp->ops->loc);
}

void mt_tp_allreduce_f64(const mt_tp *tp, double *x, size_t n) {
  if (tp->g) mt_allreduce(tp->g, x, n, MT_DT_F64, MT_RED_SUM, tp->ops->loc);
}

void mt_tp_gather_seq(const mt_tp *tp, const mt_act *local, mt_act *full, int B, int T, int C) {
  size_t inner = (size_t)(T / tp->size) * (size_t)C;
  if (!tp->g) {
    if (full != local) tp->ops->copy(tp->dt, full, local, (size_t)B * inner);
    return;
  }
  mt_allgather_dim(tp->g, local, full, (size_t)B, inner, tp->dt, tp->ops->loc);
}

void mt_tp_reduce_scatter_seq(const mt_tp *tp, const mt_act *full, mt_act *local, int B, int T,
                              int C) {
  size_t inner = (size_t)(T / tp->size) * (size_t)C;
  if (!tp->g) {
    if (full != local) tp->ops->copy(tp->dt, local, full, (size_t)B * inner);
    return;
  }
  if (2 * (size_t)B * inner > tp->scratch_n)
    mt_die("tp reduce-scatter of %d x %d x %d exceeds the %zu-element scratch", B, T, C,
           tp->scratch_n);
  mt_reduce_scatter_dim(tp->g, full, local, (size_t)B, inner, tp->scratch, tp->dt, tp->ops->loc);
}

/* the first tensor at or after flat offset begin (the registry's offsets
 * never decrease: mt_registry_finalize lays the tensors out in order), so
 * a range's tensors are found without a pass over every tensor (the
 * planner counts thousands of buckets of models with thousands of tensors) */
static int first_at(const mt_registry *reg, size_t begin) {
  int lo = 0, hi = reg->n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    if (reg->t[mid].offset < begin) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

size_t mt_tp_partial_numel(const mt_registry *reg, size_t begin, size_t end) {
  size_t n = 0;
  for (int i = first_at(reg, begin); i < reg->n && reg->t[i].offset < end; i++) {
    const mt_tensor *t = &reg->t[i];
    if (t->tp_partial_grad && t->offset >= begin && t->offset + t->numel_local <= end)
      n += t->numel_local;
  }
  return n;
}

/* buf holds gradients of type gt: fp32, or bf16 (packed widened, summed
 * in fp32, each sum rounded once on the way back) */
void mt_tp_reduce_partial_grads_at(const mt_tp *tp, const mt_registry *reg, void *buf,
                                   mt_dtype gt, size_t buf_begin, size_t begin, size_t end) {
  if (!tp->g) return;
  size_t n = 0;
  for (int pass = 0; pass < 2; pass++) { /* 0: pack, 1: unpack the sums */
    n = 0;
    for (int i = first_at(reg, begin); i < reg->n && reg->t[i].offset < end; i++) {
      const mt_tensor *t = &reg->t[i];
      if (!t->tp_partial_grad || t->offset < begin || t->offset + t->numel_local > end) continue;
      if (t->numel_local == 0) continue;
      if (n + t->numel_local > tp->grad_buf_n)
        mt_die("tp partial gradients in [%zu, %zu) exceed the %zu-element buffer", begin, end,
               tp->grad_buf_n);
      size_t at = t->offset - buf_begin;
      float *packed = tp->grad_buf + n;
      void *g = (char *)buf + at * mt_dtype_bytes(gt);
      if (pass == 0) tp->ops->convert(packed, MT_DT_F32, g, gt, t->numel_local);
      else tp->ops->convert(g, gt, packed, MT_DT_F32, t->numel_local);
      n += t->numel_local;
    }
    if (pass == 0 && n == 0) return;
    if (pass == 0) mt_allreduce(tp->g, tp->grad_buf, n, MT_DT_F32, MT_RED_SUM, tp->ops->loc);
  }
}

void mt_tp_reduce_partial_grads(const mt_tp *tp, const mt_registry *reg, float *grads,
                                size_t begin, size_t end) {
  mt_tp_reduce_partial_grads_at(tp, reg, grads, MT_DT_F32, 0, begin, end);
}

void mt_tp_set_linear(mt_tp *tp, int T, int C, mt_act *full_in, mt_act *full_out,
                      mt_act *dx_local) {
  tp->T = T;
  tp->C = C;
  tp->full_in = full_in;
  tp->full_out = full_out;
  tp->dx_local = dx_local;
}

/* ------------------------------------------------------------------ */
/* column-parallel: f before, the weight's rows split                  */

/* Without sp, x is already full and identical on every tp rank ("f" is the
 * identity forward); under sp x is this rank's (BTs,C) slice, gathered
 * along T. Backward calls it again for the weight gradient (Megatron
 * re-gathers rather than keep the full input). */
const mt_act *mt_linear_col_input(const mt_tp *tp, const mt_act *x, int B) {
  if (!tp->sp) return x;
  mt_tp_gather_seq(tp, x, tp->full_in, B, tp->T, tp->C);
  return tp->full_in;
}

void mt_linear_col_forward(const mt_tp *tp, mt_act *y, const mt_act *x, const mt_act *w,
                           const mt_act *b, int B, int OC) {
  tp->ops->matmul_forward(tp->dt, y, mt_linear_col_input(tp, x, B), w, b, B * tp->T,
            tp->C, OC);
}

/* f's backward: dpart (BT,C) holds this rank's share of the input gradient;
 * returns the sum over tp for this rank's rows (all-reduce in place, or
 * reduce-scatter along T into dx_local) */
static const mt_act *col_dinput(const mt_tp *tp, mt_act *dpart, int B) {
  if (!tp->sp) {
    mt_tp_allreduce(tp, dpart, (size_t)B * tp->T * tp->C);
    return dpart;
  }
  mt_tp_reduce_scatter_seq(tp, dpart, tp->dx_local, B, tp->T, tp->C);
  return tp->dx_local;
}

/* the column-parallel backward's matmul: this rank's share of the input
 * gradient written into dpart, the weight gradients (x NULL: none) */
static void col_matmul_backward(const mt_tp *tp, mt_act *dpart, float *dw, float *db,
                                const mt_act *dy, const mt_act *x, const mt_act *w, int B,
                                int OC) {
  const int BT = B * tp->T, C = tp->C;
  tp->ops->matmul_backward_first(tp->dt, dpart, x ? dw : NULL, x ? db : NULL, dy,
                                 x ? mt_linear_col_input(tp, x, B) : NULL, w, BT, C, OC);
}

const mt_act *mt_linear_col_backward(const mt_tp *tp, mt_act *dpart, float *dw, float *db,
                                     const mt_act *dy, const mt_act *x, const mt_act *w, int B,
                                     int OC) {
  col_matmul_backward(tp, dpart, dw, db, dy, x, w, B, OC);
  return col_dinput(tp, dpart, B);
}

void mt_linear_col_backward_weight(const mt_tp *tp, float *dw, float *db, const mt_act *dy,
                                   const mt_act *x, int B, int OC) {
  tp->ops->matmul_backward(tp->dt, NULL, dw, db, dy, mt_linear_col_input(tp, x, B),
            NULL, B * tp->T, tp->C, OC);
}

/* ------------------------------------------------------------------ */
/* row-parallel: the weight's columns split, g after                   */

mt_act *mt_linear_row_partial(const mt_tp *tp, mt_act *y) { return tp->sp ? tp->full_out : y; }

/* Sum the partial outputs over tp ("g"): all-reduce, or reduce-scatter along T. */
void mt_linear_row_reduce(const mt_tp *tp, mt_act *y, int B) {
  if (tp->sp) mt_tp_reduce_scatter_seq(tp, tp->full_out, y, B, tp->T, tp->C);
  else mt_tp_allreduce(tp, y, (size_t)B * tp->T * tp->C);
}

void mt_linear_row_forward(const mt_tp *tp, mt_act *y, const mt_act *x, const mt_act *w,
                           const mt_act *b, int B, int IC) {
  /* the bias once, by tp rank 0, before the sum over tp */
  tp->ops->matmul_forward(tp->dt, mt_linear_row_partial(tp, y), x, w,
            tp->rank == 0 ? b : NULL, B * tp->T, IC, tp->C);
  mt_linear_row_reduce(tp, y, B);
}

void mt_tp_set_async(mt_tp *tp, mt_act *full, mt_act *pack, mt_act *local) {
  tp->async_full = full;
  tp->async_pack = pack;
  tp->async_local = local;
  free(tp->async_counts);
  tp->async_counts = mt_calloc((size_t)tp->size, sizeof(int));
}

/* Launch the sum over tp of the partial (BT,C) full: in place, or under sp
 * reduce-scattered along T into local (BTs,C), the slices packed rank by
 * rank first: (B, size, inner) -> (size, B, inner), as the reduce-scatter's
 * parts lie (one sequence: already so). */
static void isum(const mt_tp *tp, mt_act *full, mt_act *local, int B, mt_request *r) {
  if (!tp->sp) {
    mt_iallreduce(tp->g, full, (size_t)B * tp->T * tp->C, tp->dt, MT_RED_SUM, tp->ops->loc, r);
    return;
  }
  if (!tp->async_pack || !tp->async_counts) mt_die("tp: no scratch for a non-blocking reduction");
  const size_t inner = (size_t)(tp->T / tp->size) * tp->C, part = (size_t)B * inner;
  if (part > (size_t)INT32_MAX) mt_die("tp: a reduce-scatter part of %zu elements", part);
  mt_act *send = B == 1 ? full : tp->async_pack;
  for (int q = 0; q < tp->size; q++) {
    tp->async_counts[q] = (int)part;
    if (B > 1)
      tp->ops->copy_2d(tp->dt, mt_act_at(tp->es, send, q * part), inner,
                       mt_act_at(tp->es, full, q * inner), tp->size * inner, (size_t)B, inner);
  }
  mt_ireduce_scatter(tp->g, send, local, tp->async_counts, tp->dt, tp->ops->loc, r);
}

void mt_linear_row_forward_async(const mt_tp *tp, mt_act *y, const mt_act *x, const mt_act *w,
                                 const mt_act *b, int B, int IC, mt_request *r) {
  r->active = 0;
  if (!tp->g) {
    mt_linear_row_forward(tp, y, x, w, b, B, IC);
    return;
  }
  if (tp->sp && !tp->async_full) mt_die("tp: no scratch for a non-blocking reduction");
  mt_act *partial = tp->sp ? tp->async_full : y;
  tp->ops->matmul_forward(tp->dt, partial, x, w, tp->rank == 0 ? b : NULL, B * tp->T, IC, tp->C);
  isum(tp, partial, y, B, r);
}

const mt_act *mt_linear_col_backward_async(const mt_tp *tp, float *dw, float *db,
                                           const mt_act *dy, const mt_act *x, const mt_act *w,
                                           int B, int OC, mt_request *r) {
  r->active = 0;
  if (!tp->async_full || (tp->sp && !tp->async_local))
    mt_die("tp: no scratch for a non-blocking reduction");
  col_matmul_backward(tp, tp->async_full, dw, db, dy, x, w, B, OC);
  if (!tp->g) return tp->async_full;
  isum(tp, tp->async_full, tp->async_local, B, r);
  return tp->sp ? tp->async_local : tp->async_full;
}

const mt_act *mt_linear_col_backward_after(const mt_tp *tp, mt_act *dpart, float *dw, float *db,
                                           const mt_act *dy, const mt_act *x, const mt_act *w,
                                           int B, int OC, mt_request *before) {
  col_matmul_backward(tp, dpart, dw, db, dy, x, w, B, OC);
  mt_linear_row_wait(tp, before);
  return col_dinput(tp, dpart, B);
}

void mt_linear_row_wait(const mt_tp *tp, mt_request *r) {
  if (tp->g) mt_wait(r);
}

void mt_linear_row_forward_after(const mt_tp *tp, mt_act *y, const mt_act *x, const mt_act *w,
                                 const mt_act *b, int B, int IC, mt_request *before) {
  tp->ops->matmul_forward(tp->dt, mt_linear_row_partial(tp, y), x, w, tp->rank == 0 ? b : NULL,
                          B * tp->T, IC, tp->C);
  mt_linear_row_wait(tp, before);
  mt_linear_row_reduce(tp, y, B);
}

const mt_act *mt_linear_row_dout(const mt_tp *tp, const mt_act *dy, int B) {
  if (!tp->sp) return dy;
  mt_tp_gather_seq(tp, dy, tp->full_out, B, tp->T, tp->C);
  return tp->full_out;
}

void mt_linear_row_backward(const mt_tp *tp, mt_act *dx, float *dw, float *db,
                            const mt_act *dy, const mt_act *x, const mt_act *w, int B, int IC) {
  tp->ops->matmul_backward_first(tp->dt, dx, dw, db, dy, x, w, B * tp->T, IC, tp->C);
}

void mt_linear_row_backward_weight(const mt_tp *tp, float *dw, float *db, const mt_act *dy,
                                   const mt_act *x, int B, int IC) {
  tp->ops->matmul_backward(tp->dt, NULL, dw, db, dy, x, NULL, B * tp->T, IC, tp->C);
}
