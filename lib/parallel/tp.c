/* Tensor parallelism: the collectives of Megatron-style tensor and sequence
 * parallelism over the tp group, each one call into comm (bytes and seconds
 * counted on the group).
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
#include "parallel/parallel.h"

#include <string.h>

void mt_tp_create(mt_tp *tp, mt_group *g, int sp, size_t max_act, size_t max_partial_grads,
                  const mt_ops *ops) {
  memset(tp, 0, sizeof *tp);
  tp->ops = ops;
  tp->g = g && g->size > 1 ? g : NULL;
  tp->size = tp->g ? g->size : 1;
  tp->rank = tp->g ? g->rank : 0;
  tp->sp = tp->g ? sp : 0;
  if (tp->sp) { /* two of a rank's slices of the largest activation */
    tp->scratch_n = 2 * (max_act / (size_t)tp->size);
    tp->scratch = ops->alloc(MT_MEM_COMM, tp->scratch_n * sizeof(float));
  }
  if (tp->g && max_partial_grads > 0) { /* sp's norms, a MoE router */
    tp->grad_buf_n = max_partial_grads;
    tp->grad_buf = ops->alloc(MT_MEM_COMM, max_partial_grads * sizeof(float));
  }
}

size_t mt_tp_comm_bytes(int tp_size, int sp, size_t max_act, size_t max_partial_grads) {
  if (tp_size <= 1) return 0;
  return ((sp ? 2 * (max_act / (size_t)tp_size) : 0) + max_partial_grads) * sizeof(float);
}

void mt_tp_destroy(mt_tp *tp) {
  if (tp->scratch) tp->ops->free(MT_MEM_COMM, tp->scratch, tp->scratch_n * sizeof(float));
  if (tp->grad_buf) tp->ops->free(MT_MEM_COMM, tp->grad_buf, tp->grad_buf_n * sizeof(float));
  memset(tp, 0, sizeof *tp);
}

void mt_tp_allreduce(const mt_tp *tp, float *x, size_t n) {
  if (tp->g) mt_allreduce_sum_f32(tp->g, x, n, tp->ops->loc);
}

void mt_tp_allreduce_max(const mt_tp *tp, float *x, size_t n) {
  if (tp->g) mt_allreduce_max_f32(tp->g, x, n, tp->ops->loc);
}

void mt_tp_allreduce_f64(const mt_tp *tp, double *x, size_t n) {
  if (tp->g) mt_allreduce_sum_f64(tp->g, x, n, tp->ops->loc);
}

void mt_tp_gather_seq(const mt_tp *tp, const float *local, float *full, int B, int T, int C) {
  size_t inner = (size_t)(T / tp->size) * (size_t)C;
  if (!tp->g) {
    if (full != local) tp->ops->copy(full, local, (size_t)B * inner);
    return;
  }
  mt_allgather_dim_f32(tp->g, local, full, (size_t)B, inner, tp->ops->loc);
}

void mt_tp_reduce_scatter_seq(const mt_tp *tp, const float *full, float *local, int B, int T,
                              int C) {
  size_t inner = (size_t)(T / tp->size) * (size_t)C;
  if (!tp->g) {
    if (full != local) tp->ops->copy(local, full, (size_t)B * inner);
    return;
  }
  if (2 * (size_t)B * inner > tp->scratch_n)
    mt_die("tp reduce-scatter of %d x %d x %d exceeds the %zu-element scratch", B, T, C,
           tp->scratch_n);
  mt_reduce_scatter_dim_f32(tp->g, full, local, (size_t)B, inner, tp->scratch, tp->ops->loc);
}

size_t mt_tp_partial_numel(const mt_registry *reg, size_t begin, size_t end) {
  size_t n = 0;
  for (int i = 0; i < reg->n; i++) {
    const mt_tensor *t = &reg->t[i];
    if (t->tp_partial_grad && t->offset >= begin && t->offset + t->numel_local <= end)
      n += t->numel_local;
  }
  return n;
}

void mt_tp_reduce_partial_grads_at(const mt_tp *tp, const mt_registry *reg, float *buf,
                                   size_t buf_begin, size_t begin, size_t end) {
  if (!tp->g) return;
  size_t n = 0;
  for (int pass = 0; pass < 2; pass++) { /* 0: pack, 1: unpack the sums */
    n = 0;
    for (int i = 0; i < reg->n; i++) {
      const mt_tensor *t = &reg->t[i];
      if (!t->tp_partial_grad || t->offset < begin || t->offset + t->numel_local > end) continue;
      if (t->numel_local == 0) continue;
      if (n + t->numel_local > tp->grad_buf_n)
        mt_die("tp partial gradients in [%zu, %zu) exceed the %zu-element buffer", begin, end,
               tp->grad_buf_n);
      float *g = buf + (t->offset - buf_begin), *packed = tp->grad_buf + n;
      if (pass == 0) tp->ops->copy(packed, g, t->numel_local);
      else tp->ops->copy(g, packed, t->numel_local);
      n += t->numel_local;
    }
    if (pass == 0 && n == 0) return;
    if (pass == 0) mt_allreduce_sum_f32(tp->g, tp->grad_buf, n, tp->ops->loc);
  }
}

void mt_tp_reduce_partial_grads(const mt_tp *tp, const mt_registry *reg, float *grads,
                                size_t begin, size_t end) {
  mt_tp_reduce_partial_grads_at(tp, reg, grads, 0, begin, end);
}
