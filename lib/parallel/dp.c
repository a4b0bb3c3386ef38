/* Data parallelism: bucketed, overlapped gradient reduction and ZeRO-1. */
#include "parallel/parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double sqrt_safe(double x) { return x > 0.0 ? sqrt(x) : 0.0; }

static void bucket_split(mt_bucket *b, int n) {
  size_t len = b->end - b->begin;
  b->counts = mt_calloc((size_t)n, sizeof(int));
  b->displs = mt_calloc((size_t)n, sizeof(int));
  size_t base = len / (size_t)n, extra = len % (size_t)n, off = 0;
  for (int r = 0; r < n; r++) {
    b->counts[r] = (int)(base + ((size_t)r < extra ? 1 : 0));
    b->displs[r] = (int)off;
    off += (size_t)b->counts[r];
  }
}

void mt_dp_create(mt_dp *d, mt_group *dp_group, int zero, const mt_registry *reg,
                  const mt_ops *ops, float *params, float *grads, size_t bucket_bytes,
                  float beta1, float beta2, float eps, float weight_decay) {
  memset(d, 0, sizeof *d);
  d->g = dp_group;
  d->zero = zero;
  d->reg = reg;
  d->ops = ops;
  d->params = params;
  d->grads = grads;
  size_t max_elems = bucket_bytes / sizeof(float);
  if (max_elems < 1) max_elems = 1;
  /* an MPI count is an int: keep every bucket below 2^31 elements */
  if (max_elems > (size_t)1 << 30) max_elems = (size_t)1 << 30;
  d->buckets = mt_calloc((size_t)reg->n + 1, sizeof(mt_bucket));
  size_t end = reg->numel_local, cur_begin = end;
  for (int i = reg->n - 1; i >= 0; i--) {
    cur_begin = reg->t[i].offset;
    /* tensors another pipeline stage holds take no room: no empty buckets */
    if ((end - cur_begin >= max_elems || i == 0) && end > cur_begin) {
      mt_bucket *b = &d->buckets[d->n_buckets++];
      b->begin = cur_begin;
      b->end = end;
      end = cur_begin;
    }
  }
  size_t shard = 0;
  for (int k = 0; k < d->n_buckets; k++) {
    mt_bucket *b = &d->buckets[k];
    bucket_split(b, d->g->size);
    b->shard_off = shard;
    shard += zero ? (size_t)b->counts[d->g->rank] : b->end - b->begin;
  }
  d->shard_numel = shard;
  if (zero) d->grad_shard = mt_mem_alloc(MT_MEM_GRADS, shard * sizeof(float));
  mt_adamw_create(&d->opt, shard, beta1, beta2, eps, weight_decay);
}

void mt_dp_destroy(mt_dp *d) {
  for (int k = 0; k < d->n_buckets; k++) {
    free(d->buckets[k].counts);
    free(d->buckets[k].displs);
  }
  free(d->buckets);
  if (d->grad_shard) mt_mem_free(MT_MEM_GRADS, d->grad_shard, d->shard_numel * sizeof(float));
  mt_adamw_destroy(&d->opt);
  memset(d, 0, sizeof *d);
}

void mt_dp_set_tp(mt_dp *d, mt_group *tp_group) {
  d->tp_g = tp_group && tp_group->size > 1 ? tp_group : NULL;
}

void mt_dp_set_pp(mt_dp *d, mt_group *pp_group, size_t skip_begin, size_t skip_end) {
  d->pp_g = pp_group && pp_group->size > 1 ? pp_group : NULL;
  d->norm_skip_begin = skip_begin;
  d->norm_skip_end = skip_end;
}

void mt_dp_begin_sync(mt_dp *d) {
  d->next_bucket = 0;
  for (int k = 0; k < d->n_buckets; k++) d->buckets[k].launched = 0;
}

static void launch(mt_dp *d, mt_bucket *b) {
  float *g = d->grads + b->begin;
  if (d->zero)
    mt_ireduce_scatter_sum_f32(d->g, g, d->grad_shard + b->shard_off, b->counts, &b->req);
  else
    mt_iallreduce_sum_f32(d->g, g, b->end - b->begin, &b->req);
  b->launched = 1;
}

void mt_dp_grads_ready(mt_dp *d, size_t ready_from) {
  while (d->next_bucket < d->n_buckets && d->buckets[d->next_bucket].begin >= ready_from)
    launch(d, &d->buckets[d->next_bucket++]);
  /* let MPI move the buckets already in flight while backward goes on */
  for (int k = 0; k < d->next_bucket; k++) mt_progress(&d->buckets[k].req);
}

void mt_dp_finish_sync(mt_dp *d) {
  mt_dp_grads_ready(d, 0);
  for (int k = 0; k < d->n_buckets; k++) mt_wait(&d->buckets[k].req);
}

/* Sums of squares of grad, which holds the flat range [begin, begin+len), split
 * by the tensors' tp placement: [0] tp-sharded, [1] replicated over tp. */
static void sumsq_by_placement(const mt_dp *d, const float *grad, size_t begin, size_t len,
                               double acc[2]) {
  size_t end = begin + len;
  for (int i = 0; i < d->reg->n; i++) {
    const mt_tensor *t = &d->reg->t[i];
    size_t tb = t->offset, te = t->offset + t->numel_local;
    if (te <= begin || tb >= end) continue;
    size_t a = tb > begin ? tb : begin, b = te < end ? te : end;
    if (d->pp_g && a >= d->norm_skip_begin && b <= d->norm_skip_end) continue;
    acc[t->tp.kind == MT_PLACE_SHARDED ? 0 : 1] += d->ops->sumsq(grad + (a - begin), b - a);
  }
}

/* Squared global gradient norm. Without tp: one sum over this rank's buffer
 * (summed over dp under ZeRO). With tp: the ranks of a tp group hold different
 * shards of the sharded tensors and identical copies of the replicated ones,
 * so the sharded part is summed over tp and the replicated part counted once. */
static double global_sumsq(mt_dp *d) {
  if (!d->tp_g && !d->pp_g) {
    double sumsq = 0.0;
    if (d->zero) {
      sumsq = d->ops->sumsq(d->grad_shard, d->shard_numel);
      mt_allreduce_sum_f64(d->g, &sumsq, 1);
    } else {
      sumsq = d->ops->sumsq(d->grads, d->reg->numel_local);
    }
    return sumsq;
  }
  double acc[2] = {0.0, 0.0};
  if (d->zero) {
    int r = d->g->rank;
    for (int k = 0; k < d->n_buckets; k++) {
      const mt_bucket *b = &d->buckets[k];
      sumsq_by_placement(d, d->grad_shard + b->shard_off, b->begin + (size_t)b->displs[r],
                         (size_t)b->counts[r], acc);
    }
    mt_allreduce_sum_f64(d->g, acc, 2);
  } else {
    sumsq_by_placement(d, d->grads, 0, d->reg->numel_local, acc);
  }
  if (d->tp_g) mt_allreduce_sum_f64(d->tp_g, acc, 1);
  if (d->pp_g) mt_allreduce_sum_f64(d->pp_g, acc, 2); /* the stages' tensors */
  return acc[0] + acc[1];
}

double mt_dp_optimizer_step(mt_dp *d, float lr, float grad_clip) {
  double norm = sqrt_safe(global_sumsq(d));
  d->last_grad_norm = norm;
  float scale = mt_clip_scale(norm, grad_clip);
  float *g = d->zero ? d->grad_shard : d->grads;
  if (scale != 1.0f) d->ops->scale(g, scale, d->shard_numel);
  mt_adamw_step_begin(&d->opt, lr);
  int r = d->g->rank;
  for (int k = 0; k < d->n_buckets; k++) {
    const mt_bucket *b = &d->buckets[k];
    if (d->zero)
      mt_adamw_update_range(&d->opt, d->ops, d->reg, d->params, g + b->shard_off,
                            b->begin + (size_t)b->displs[r], (size_t)b->counts[r], b->shard_off);
    else
      mt_adamw_update_range(&d->opt, d->ops, d->reg, d->params, g + b->begin, b->begin,
                            b->end - b->begin, b->shard_off);
  }
  if (d->zero)
    for (int k = 0; k < d->n_buckets; k++) {
      const mt_bucket *b = &d->buckets[k];
      mt_allgatherv_inplace_f32(d->g, d->params + b->begin, b->counts, b->displs);
    }
  return norm;
}

double mt_dp_bytes_per_step(const mt_dp *d) {
  double bytes = 0.0;
  for (int k = 0; k < d->n_buckets; k++) {
    size_t s = (d->buckets[k].end - d->buckets[k].begin) * sizeof(float);
    bytes += d->zero ? mt_bytes_reduce_scatter(s, d->g->size) + mt_bytes_allgather(s, d->g->size)
                     : mt_bytes_allreduce(s, d->g->size);
  }
  return bytes;
}

int mt_dp_state_ranges(const mt_dp *d, int which, int for_save, mt_flat_range **out) {
  mt_flat_range *r = mt_calloc((size_t)d->n_buckets, sizeof *r);
  int me = d->g->rank, n = 0;
  for (int k = 0; k < d->n_buckets; k++) {
    const mt_bucket *b = &d->buckets[k];
    size_t part_begin = b->begin + (size_t)b->displs[me], part_len = (size_t)b->counts[me];
    size_t begin = for_save || (which > 0 && d->zero) ? part_begin : b->begin;
    size_t len = for_save || (which > 0 && d->zero) ? part_len : b->end - b->begin;
    float *mem;
    if (which == 0) {
      mem = d->params + begin;
    } else {
      float *moments = which == 1 ? d->opt.m : d->opt.v;
      /* ZeRO: the shard holds only this rank's parts; otherwise whole buckets */
      mem = moments + b->shard_off + (d->zero ? 0 : begin - b->begin);
    }
    if (len == 0) continue;
    r[n++] = (mt_flat_range){begin, len, mem};
  }
  *out = r;
  return n;
}
