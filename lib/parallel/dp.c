/* Data parallelism and ZeRO 0-3: the training state as the registry places
 * it on dp, bucketed gradient reduction overlapped with backward, ZeRO-3's
 * per-unit parameter gathers with prefetch, clipping and AdamW. */
#include "parallel/parallel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double sqrt_safe(double x) { return x > 0.0 ? sqrt(x) : 0.0; }

static const mt_bucket_plan *plan_of(const mt_dp *d, int k) { return &d->reg->buckets[k]; }

/* the group bucket k is reduced (and sharded) over, and this rank's place in it */
static mt_group *group_of(const mt_dp *d, int k) {
  mt_group *g = d->groups[plan_of(d, k)->group];
  if (!g) mt_die("dp: bucket %d's reduction group was never given (mt_dp_create)", k);
  return g;
}
/* A collective of the state (gradients, parameters) of bucket k: the bytes
 * comm counts for it on the bucket's group also go to d->state_bytes */
#define STATE_CALL(d, k, call)                                                \
  do {                                                                        \
    mt_group *sg_ = group_of((d), (k));                                       \
    double sb_ = sg_->bytes;                                                  \
    call;                                                                     \
    (d)->state_bytes[plan_of((d), (k))->group] += sg_->bytes - sb_;           \
  } while (0)

/* A reduction of gradients: also counted as launched during backward
 * (grad_bytes_early) unless mt_dp_finish_sync launches it */
#define GRAD_CALL(d, k, call)                                                 \
  do {                                                                        \
    double gb_ = group_of((d), (k))->bytes;                                   \
    STATE_CALL(d, k, call);                                                   \
    gb_ = group_of((d), (k))->bytes - gb_;                                    \
    (d)->grad_bytes += gb_;                                                   \
    if (!(d)->in_finish) (d)->grad_bytes_early += gb_;                        \
  } while (0)

static int rank_in(const mt_dp *d, int k) { return d->reg->group_rank[plan_of(d, k)->group]; }

/* this rank's part of bucket k: flat begin and length */
static size_t part_begin(const mt_dp *d, int k) {
  return plan_of(d, k)->begin + (size_t)plan_of(d, k)->displs[rank_in(d, k)];
}
static size_t part_len(const mt_dp *d, int k) {
  return (size_t)plan_of(d, k)->counts[rank_in(d, k)];
}

/* ------------------------------------------------------------------ */
/* buffer pools (ZeRO-2/3)                                             */

/* a buffer of numel elements of es bytes (and part_numel floats unless
 * the gradients are bf16: their parts are reduced in bf16 and added to the
 * bf16 shard, so the fp32 part is never used) */
static void pool_add(const mt_ops *ops, mt_pool_buf **pool, int *n, mt_mem_cat cat, size_t numel,
                     size_t part_numel, size_t es, int no_part) {
  *pool = realloc(*pool, (size_t)(*n + 1) * sizeof **pool);
  if (!*pool) mt_die("out of memory (buffer pool)");
  mt_pool_buf *b = &(*pool)[(*n)++];
  b->numel = numel;
  b->part_numel = part_numel;
  b->es = es;
  b->mem = ops->alloc(cat, numel * es);
  b->part = part_numel && !no_part ? ops->alloc(cat, part_numel * sizeof(float)) : NULL;
  b->owner = -1;
}

static void pool_free(const mt_ops *ops, mt_pool_buf *pool, int n, mt_mem_cat cat) {
  for (int i = 0; i < n; i++) {
    ops->free(cat, pool[i].mem, pool[i].numel * pool[i].es);
    if (pool[i].part) ops->free(cat, pool[i].part, pool[i].part_numel * sizeof(float));
  }
  free(pool);
}

/* Gradient buffers (zero >= 2): buffer 0 for the last bucket (it holds the
 * embeddings, whose gradients the LM head starts and the embedding's
 * backward ends; under pipeline parallelism the tied embeddings, held to
 * the end of the step), then up to two shared by the other buckets in
 * turn: a backward pass completes the buckets it opens, in order. A split
 * backward (zb-h1) is the exception: its input pass writes the LayerNorm
 * gradients of every layer of a chunk and its weight pass, ops later,
 * completes them, so every bucket of the stage may be open at once and has
 * a buffer of its own (the stage's gradients in full, as ZeRO-1 holds). */
static int grad_buf_of_bucket(const mt_dp *d, int k) {
  if (k == d->reg->n_buckets - 1) return 0;
  if (d->open_fills) return k + 1;
  return 1 + k % (d->n_gbufs - 1);
}

/* ZeRO-3 gather buffers: the units used at both ends of a pass (the first
 * and the last: the embeddings, which the tied LM head uses again, and the
 * final LayerNorm) have buffers of their own (0, 1); the others share two
 * by parity, so the next unit's gather never waits for the current one. */
static int gather_buf_of_unit(const mt_dp *d, int u) {
  if (u == 0) return 0;
  if (u == d->reg->n_units - 1) return 1;
  if (d->unit_bufs) return d->unit_buf[u];
  return 2 + u % (d->n_pbufs - 2);
}

/* the bucket of unit u (zero >= 2: buckets hold whole units) */
static int bucket_of_unit(const mt_dp *d, int u) {
  for (int k = 0; k < d->reg->n_buckets; k++)
    if (u >= plan_of(d, k)->u0 && u < plan_of(d, k)->u1) return k;
  return -1;
}

/* the storage type of the weights' compute copy (fp32: none, the master) */
static mt_dtype copy_type(const mt_dp *d) { return d->bf ? MT_DT_BF16 : MT_DT_F32; }

/* an axis the norm sums over: NULL where absent (size 1) */
static mt_group *axis(mt_group *g) { return g && g->size > 1 ? g : NULL; }

void mt_dp_create(mt_dp *d, const mt_dp_groups *groups, const mt_registry *reg, const mt_ops *ops,
                  mt_dtype weights, const mt_tp *tp, float beta1, float beta2, float eps,
                  float weight_decay, int flags) {
  memset(d, 0, sizeof *d);
  const int bf = weights == MT_DT_BF16; /* a bf16 compute copy of the weights */
  d->open_fills = (flags & (MT_DP_OPEN_FILLS | MT_DP_RUNS)) != 0;
  d->unit_bufs = (flags & MT_DP_RUNS) != 0;
  d->zero = reg->zero;
  d->bf = bf;
  if ((flags & MT_DP_GRADS_BF16) && !bf) mt_die("dp: bf16 gradients need bf16 weights");
  d->grads16_acc = (flags & MT_DP_GRADS_BF16) != 0;
  if (d->grads16_acc) flags |= MT_DP_REDUCE_BF16; /* bf16 gradients reduce in bf16 */
  d->master_sharded = d->zero == 3 || (bf && d->zero >= 1);
  d->reg = reg;
  d->ops = ops;
  d->tp = tp;
  /* each reduction group is the registry's, rank for rank */
  for (int g = 0; g < MT_NGROUPS; g++) {
    mt_group *mg = groups->reduce[g];
    if (reg->n_group_tensors[g] == 0 && g != MT_GROUP_DP) continue;
    if (!mg || reg->group_size[g] != mg->size || reg->group_rank[g] != mg->rank)
      mt_die("the registry's %s placement (%d ranks, rank %d) is not this %s group's (%d, %d)",
             mt_grad_group_name((mt_grad_group)g), reg->group_size[g], reg->group_rank[g],
             mt_grad_group_name((mt_grad_group)g), mg ? mg->size : 0, mg ? mg->rank : -1);
    d->groups[g] = mg;
  }
  d->tp_g = axis(groups->tp);
  d->ep_g = axis(groups->ep);
  d->etp_g = axis(groups->etp);
  /* pipeline stages: each stage's buffers hold only its own tensors; the
   * global norm sums the stages' parts over pp, leaving out a copy this
   * stage holds of a tensor another stage owns (the tied LM head: counted
   * there) */
  d->pp_g = axis(groups->pp);
  for (int i = 0; d->pp_g && i < reg->n; i++) {
    const mt_tensor *t = &reg->t[i];
    if (t->pp_copy == reg->pp_rank && t->pp_stage != reg->pp_rank && t->numel_local) {
      d->norm_skip_begin = t->offset;
      d->norm_skip_end = t->offset + t->numel_local;
    }
  }
  size_t n = reg->numel_local, shard = reg->shard_numel;
  d->params = ops->alloc(MT_MEM_PARAMS, (d->master_sharded ? shard : n) * sizeof(float));
  if (bf) d->params_bf16 = ops->alloc(MT_MEM_PARAMS, (d->zero == 3 ? shard : n) * sizeof(mt_bf16));
  /* the gradients: fp32, or bf16 (grads16, shard16 below) */
  const int acc = d->grads16_acc;
  if (d->zero <= 1 && !acc) d->grads = ops->alloc(MT_MEM_GRADS, n * sizeof(float));
  if (d->zero >= 1 && !acc) d->grad_shard = ops->alloc(MT_MEM_GRADS, shard * sizeof(float));
  if (acc) {
    d->unit_slot = mt_calloc((size_t)reg->n_units + 1, sizeof(int));
    for (int u = 0; u < reg->n_units; u++) d->unit_slot[u] = -1;
  }
  mt_adamw_create(&d->opt, ops, shard, beta1, beta2, eps, weight_decay);
  d->buckets = mt_calloc((size_t)reg->n_buckets + 1, sizeof(mt_bucket));
  for (int k = 0; k < reg->n_buckets; k++) {
    d->buckets[k].buf = -1;
    /* pipeline parallelism: a bucket with a tied tensor (the embeddings and
     * the last stage's copy) accumulates the whole step; the stages sum it
     * (mt_pp_sum_tied_grads) before dp reduces it (mt_dp_finish_sync) */
    const mt_bucket_plan *p = plan_of(d, k);
    for (int u = p->u0; d->pp_g && u < p->u1; u++)
      if (mt_registry_unit_tied(reg, u)) d->buckets[k].hold = 1;
    if (d->buckets[k].hold && reg->zero >= 2 && k != reg->n_buckets - 1)
      mt_die("ZeRO-%d: the tied bucket %d is not the last (%d)", reg->zero, k, reg->n_buckets - 1);
  }
  d->unit_done = mt_calloc((size_t)reg->n_units + 1, sizeof(int));
  int nb = reg->n_buckets;
  if (d->zero >= 2 && nb > 0) {
    /* the last bucket's buffer, then the largest of the others, twice */
    const mt_bucket_plan *lastb = plan_of(d, nb - 1);
    /* bf16 gradients: the buffers are bf16 (a piece's slots are fp32) */
    const size_t ges = acc ? sizeof(mt_bf16) : sizeof(float);
    pool_add(ops, &d->gbufs, &d->n_gbufs, MT_MEM_GRADS, lastb->end - lastb->begin,
             part_len(d, nb - 1), ges, acc);
    size_t most = 0, most_part = 0;
    for (int k = 0; k < nb - 1; k++) {
      size_t len = plan_of(d, k)->end - plan_of(d, k)->begin;
      if (len > most) most = len;
      if (part_len(d, k) > most_part) most_part = part_len(d, k);
    }
    if (d->open_fills) /* a buffer per bucket, each its own size */
      for (int k = 0; k < nb - 1; k++)
        pool_add(ops, &d->gbufs, &d->n_gbufs, MT_MEM_GRADS,
                 plan_of(d, k)->end - plan_of(d, k)->begin, part_len(d, k), ges, acc);
    else
      for (int i = 0; i < (nb - 1 < 2 ? nb - 1 : 2); i++)
        pool_add(ops, &d->gbufs, &d->n_gbufs, MT_MEM_GRADS, most, most_part, ges, acc);
  }
  d->reduce16 = (flags & MT_DP_REDUCE_BF16) && bf;
  if (d->reduce16) {
    /* the narrowed copies for the reduction (comm buffers), or, with bf16
     * gradients, the gradients themselves */
    const mt_mem_cat c16 = acc ? MT_MEM_GRADS : MT_MEM_COMM;
    if (d->zero <= 1) d->grads16 = ops->alloc(c16, n * sizeof(mt_bf16));
    if (d->zero == 1 || (acc && d->zero >= 2))
      d->shard16 = ops->alloc(c16, shard * sizeof(mt_bf16));
    for (int i = 0; i < d->n_gbufs; i++) {
      mt_pool_buf *pb = &d->gbufs[i];
      pb->mem16 = acc ? pb->mem : ops->alloc(MT_MEM_COMM, pb->numel * sizeof(mt_bf16));
      pb->part16 = ops->alloc(MT_MEM_COMM, pb->part_numel * sizeof(mt_bf16));
    }
  }
  if (d->zero == 3) {
    int U = reg->n_units;
    d->gather = mt_calloc((size_t)U, sizeof(mt_unit_gather));
    for (int u = 0; u < U; u++) d->gather[u].buf = -1;
    size_t first = reg->units[0].end - reg->units[0].begin;
    size_t last = U > 1 ? reg->units[U - 1].end - reg->units[U - 1].begin : 0;
    /* the gathered units are the copy's (bf16) or the master's */
    const size_t es = bf ? sizeof(mt_bf16) : sizeof(float);
    pool_add(ops, &d->pbufs, &d->n_pbufs, MT_MEM_GATHER, first, 0, es, 0);
    pool_add(ops, &d->pbufs, &d->n_pbufs, MT_MEM_GATHER, last, 0, es, 0);
    size_t most = 0;
    for (int u = 1; u < U - 1; u++)
      if (reg->units[u].end - reg->units[u].begin > most)
        most = reg->units[u].end - reg->units[u].begin;
    if (d->unit_bufs) { /* a buffer per unit this stage holds, its own size */
      d->unit_buf = mt_calloc((size_t)U, sizeof(int));
      for (int u = 1; u < U - 1; u++) {
        d->unit_buf[u] = -1;
        if (reg->units[u].end == reg->units[u].begin) continue;
        d->unit_buf[u] = d->n_pbufs;
        pool_add(ops, &d->pbufs, &d->n_pbufs, MT_MEM_GATHER,
                 reg->units[u].end - reg->units[u].begin, 0, es, 0);
      }
    } else {
      for (int i = 0; i < (U - 2 < 2 ? U - 2 : 2); i++)
        pool_add(ops, &d->pbufs, &d->n_pbufs, MT_MEM_GATHER, most, 0, es, 0);
    }
  }
}

void mt_dp_destroy(mt_dp *d) {
  const mt_ops *o = d->ops;
  if (d->params_bf16)
    o->free(MT_MEM_PARAMS, d->params_bf16,
            (d->zero == 3 ? d->reg->shard_numel : d->reg->numel_local) * sizeof(mt_bf16));
  for (int k = 0; k < d->reg->n_buckets; k++) mt_wait(&d->buckets[k].req);
  const mt_mem_cat c16 = d->grads16_acc ? MT_MEM_GRADS : MT_MEM_COMM;
  if (d->grads16) o->free(c16, d->grads16, d->reg->numel_local * sizeof(mt_bf16));
  if (d->shard16) o->free(c16, d->shard16, d->reg->shard_numel * sizeof(mt_bf16));
  for (int i = 0; i < d->n_slots; i++)
    o->free(MT_MEM_GRADS, d->slots[i].mem, d->slots[i].cap * sizeof(float));
  free(d->slots);
  free(d->unit_slot);
  for (int i = 0; d->reduce16 && i < d->n_gbufs; i++) {
    if (!d->grads16_acc)
      o->free(MT_MEM_COMM, d->gbufs[i].mem16, d->gbufs[i].numel * sizeof(mt_bf16));
    o->free(MT_MEM_COMM, d->gbufs[i].part16, d->gbufs[i].part_numel * sizeof(mt_bf16));
  }
  if (d->gather)
    for (int u = 0; u < d->reg->n_units; u++) mt_wait(&d->gather[u].req);
  size_t n = d->reg->numel_local, shard = d->reg->shard_numel;
  o->free(MT_MEM_PARAMS, d->params, (d->master_sharded ? shard : n) * sizeof(float));
  if (d->grads) o->free(MT_MEM_GRADS, d->grads, n * sizeof(float));
  if (d->grad_shard) o->free(MT_MEM_GRADS, d->grad_shard, shard * sizeof(float));
  mt_adamw_destroy(&d->opt);
  pool_free(o, d->gbufs, d->n_gbufs, MT_MEM_GRADS);
  pool_free(o, d->pbufs, d->n_pbufs, MT_MEM_GATHER);
  free(d->gather);
  free(d->unit_buf);
  free(d->buckets);
  free(d->unit_done);
  memset(d, 0, sizeof *d);
}

float *mt_dp_full_grads(mt_dp *d) { return d->grads; }

/* ------------------------------------------------------------------ */
/* initial values                                                      */

/* flat elements [a, b) (inside one tensor i) start at mem */
static void init_piece(mt_dp *d, int i, uint64_t seed, size_t a, size_t b, float *mem,
                       float *host) {
  const mt_tensor *t = &d->reg->t[i];
  mt_registry_init_values(d->reg, i, seed, a - t->offset, b - t->offset, host);
  d->ops->upload(mem, host, (b - a) * sizeof(float));
}

void mt_dp_init_params(mt_dp *d, uint64_t seed) {
  const mt_registry *r = d->reg;
  size_t most = 0;
  for (int i = 0; i < r->n; i++)
    if (r->t[i].numel_local > most) most = r->t[i].numel_local;
  float *host = mt_malloc((most ? most : 1) * sizeof(float));
  if (!d->master_sharded) {
    for (int i = 0; i < r->n; i++) {
      const mt_tensor *t = &r->t[i];
      if (t->numel_local)
        init_piece(d, i, seed, t->offset, t->offset + t->numel_local, d->params + t->offset, host);
    }
  } else {
    /* the shard: this rank's part of each bucket, tensor by tensor */
    for (int k = 0; k < r->n_buckets; k++) {
      size_t pb = part_begin(d, k), pe = pb + part_len(d, k);
      for (int i = 0; i < r->n; i++) {
        const mt_tensor *t = &r->t[i];
        size_t a = t->offset > pb ? t->offset : pb;
        size_t b = t->offset + t->numel_local < pe ? t->offset + t->numel_local : pe;
        if (a < b)
          init_piece(d, i, seed, a, b, d->params + plan_of(d, k)->shard_off + (a - pb), host);
      }
    }
  }
  free(host);
  mt_dp_master_changed(d);
}

/* The bf16 copy from the master: zero 0 and 3 convert what they hold (the
 * whole, the shard); zero 1 and 2 convert this rank's part of each bucket
 * and all-gather the copy in bf16. */
void mt_dp_master_changed(mt_dp *d) {
  const mt_registry *r = d->reg;
  if (!d->bf) return;
  if (!d->master_sharded || d->zero == 3) {
    d->ops->convert(d->params_bf16, MT_DT_BF16, d->params, MT_DT_F32,
                    d->zero == 3 ? r->shard_numel : r->numel_local);
    return;
  }
  for (int k = 0; k < r->n_buckets; k++) {
    const mt_bucket_plan *p = plan_of(d, k);
    d->ops->convert(d->params_bf16 + part_begin(d, k), MT_DT_BF16, d->params + p->shard_off,
                    MT_DT_F32, part_len(d, k));
    mt_allgatherv_inplace_u16(group_of(d, k), d->params_bf16 + p->begin, p->counts, p->displs,
                              d->ops->loc);
  }
}

/* ------------------------------------------------------------------ */
/* gradient reduction                                                  */

void mt_dp_begin_step(mt_dp *d) {
  if (d->grads) d->ops->zero(MT_DT_F32, d->grads, d->reg->numel_local);
  if (d->grad_shard) d->ops->zero(MT_DT_F32, d->grad_shard, d->reg->shard_numel);
  if (d->grads16_acc && d->grads16) d->ops->zero(MT_DT_BF16, d->grads16, d->reg->numel_local);
  if (d->grads16_acc && d->shard16) d->ops->zero(MT_DT_BF16, d->shard16, d->reg->shard_numel);
  d->next_bucket = 0;
  d->reduce_now = 0;
  for (int g = 0; g < MT_NGROUPS; g++) d->state_bytes[g] = 0.0;
  d->partial_done = 0;
  d->grad_bytes = d->grad_bytes_early = 0.0;
  d->in_finish = 0;
  for (int k = 0; k < d->reg->n_buckets; k++) d->buckets[k].launched = 0;
  for (int u = 0; u < d->reg->n_units; u++) d->unit_done[u] = 0;
}

void mt_dp_reduce_during_backward(mt_dp *d, int on) { d->reduce_now = on; }

/* zero <= 1: the reduction of bucket k over the whole gradient buffer */
static void launch(mt_dp *d, int k) {
  const mt_bucket_plan *p = plan_of(d, k);
  mt_bucket *b = &d->buckets[k];
  float *g = d->grads ? d->grads + p->begin : NULL;
  if (d->reduce16) { /* narrowed, reduced in bf16; widened in bucket_wait
                      * (bf16 gradients: reduced where they are) */
    mt_bf16 *h = d->grads16 + p->begin;
    if (!d->grads16_acc) d->ops->convert(h, MT_DT_BF16, g, MT_DT_F32, p->end - p->begin);
    if (d->zero)
      GRAD_CALL(d, k, mt_ireduce_scatter_sum_bf16(group_of(d, k), h, d->shard16 + p->shard_off,
                                                  p->counts, d->ops->loc, &b->req));
    else
      GRAD_CALL(d, k, mt_iallreduce_sum_bf16(group_of(d, k), h, p->end - p->begin, d->ops->loc,
                                             &b->req));
    b->pending16 = !d->grads16_acc;
  } else if (d->zero)
    GRAD_CALL(d, k, mt_ireduce_scatter_sum_f32(group_of(d, k), g, d->grad_shard + p->shard_off,
                                               p->counts, d->ops->loc, &b->req));
  else
    GRAD_CALL(d, k, mt_iallreduce_sum_f32(group_of(d, k), g, p->end - p->begin, d->ops->loc,
                                          &b->req));
  b->launched = 1;
}

/* zero <= 1: bucket k's reduction done; one in bf16 widened into the fp32
 * gradients (zero 0) or this rank's shard of them (zero 1) */
static void bucket_wait(mt_dp *d, int k) {
  mt_bucket *b = &d->buckets[k];
  const mt_bucket_plan *p = plan_of(d, k);
  mt_wait(&b->req);
  if (!b->pending16) return;
  b->pending16 = 0;
  if (d->zero)
    d->ops->convert(d->grad_shard + p->shard_off, MT_DT_F32, d->shard16 + p->shard_off, MT_DT_BF16, part_len(d, k));
  else
    d->ops->convert(d->grads + p->begin, MT_DT_F32, d->grads16 + p->begin, MT_DT_BF16, p->end - p->begin);
}

/* zero <= 1: every gradient at flat offset >= ready_from is final: launch
 * the complete buckets (non-blocking), in order */
static void grads_ready(mt_dp *d, size_t ready_from) {
  while (d->next_bucket < d->reg->n_buckets && plan_of(d, d->next_bucket)->begin >= ready_from)
    launch(d, d->next_bucket++);
  /* let MPI move the buckets already in flight while backward goes on */
  for (int k = 0; k < d->next_bucket; k++) mt_progress(&d->buckets[k].req);
}

/* zero >= 2: bucket k's reduce-scatter is done: add this rank's part to the
 * shard and free its buffer */
static void retire_bucket(mt_dp *d, int k) {
  mt_bucket *b = &d->buckets[k];
  if (b->buf < 0) return;
  mt_pool_buf *pb = &d->gbufs[b->buf];
  if (b->launched) {
    mt_wait(&b->req);
    if (d->grads16_acc) { /* the bf16 shard += this part, one rounding */
      d->ops->axpy(MT_DT_BF16, d->shard16 + plan_of(d, k)->shard_off, 1.0f, pb->part16, part_len(d, k));
    } else {
      if (d->reduce16) d->ops->convert(pb->part, MT_DT_F32, pb->part16, MT_DT_BF16, part_len(d, k));
      d->ops->axpy(MT_DT_F32, d->grad_shard + plan_of(d, k)->shard_off, 1.0f, pb->part, part_len(d, k));
    }
    b->launched = 0;
  }
  pb->owner = -1;
  b->buf = -1;
}

/* the units of bucket k this stage holds */
static int units_of_bucket(const mt_dp *d, int k) {
  int n = 0;
  for (int u = plan_of(d, k)->u0; u < plan_of(d, k)->u1; u++)
    n += d->reg->units[u].end > d->reg->units[u].begin;
  return n;
}

/* zero >= 2: bucket k's gradient buffer for this micro-batch (fp32, or
 * bf16 gradients' bf16): the one it holds while its units' backward goes
 * on, else a zeroed one (after the previous micro-batch's reduce-scatter
 * from it has been added to the shard) */
static void *bucket_buffer(mt_dp *d, int k) {
  mt_bucket *b = &d->buckets[k];
  if (b->buf >= 0 && !b->launched) return d->gbufs[b->buf].mem;
  retire_bucket(d, k);
  int i = grad_buf_of_bucket(d, k);
  mt_pool_buf *pb = &d->gbufs[i];
  if (pb->owner >= 0 && !d->buckets[pb->owner].launched)
    mt_die("ZeRO-%d: bucket %d needs the gradient buffer of bucket %d, whose gradients are "
           "incomplete", d->zero, k, pb->owner);
  if (pb->owner >= 0) retire_bucket(d, pb->owner);
  const mt_bucket_plan *p = plan_of(d, k);
  pb->owner = k;
  b->buf = i;
  b->launched = 0;
  b->units_left = units_of_bucket(d, k);
  (void)p;
  if (d->grads16_acc) d->ops->zero(MT_DT_BF16, pb->mem16, p->end - p->begin);
  else d->ops->zero(MT_DT_F32, pb->mem, p->end - p->begin);
  return pb->mem;
}

/* tensors whose tp ranks hold partial gradients (sequence parallelism's
 * norms, a MoE router): summed over tp before the reduction over dp */
static void sum_partials(mt_dp *d, float *buf, size_t buf_begin, size_t begin, size_t end) {
  if (d->tp && d->tp->grad_buf)
    mt_tp_reduce_partial_grads_at(d->tp, d->reg, buf, buf_begin, begin, end);
}

/* zero <= 1: the same on the held gradients, fp32 or bf16 */
static void sum_held_partials(mt_dp *d, size_t begin, size_t end) {
  if (!d->grads16_acc) {
    sum_partials(d, d->grads, 0, begin, end);
    return;
  }
  if (d->tp && d->tp->grad_buf)
    mt_tp_reduce_partial_grads16_at(d->tp, d->reg, d->grads16, 0, begin, end);
}

/* zero >= 2: reduce-scatter bucket k's buffer (its gradients of this
 * micro-batch, or of the step for a held bucket) */
static void launch_fill(mt_dp *d, int k) {
  mt_bucket *b = &d->buckets[k];
  const mt_bucket_plan *p = plan_of(d, k);
  mt_pool_buf *pb = &d->gbufs[b->buf];
  if (d->grads16_acc) {
    if (d->tp && d->tp->grad_buf)
      mt_tp_reduce_partial_grads16_at(d->tp, d->reg, pb->mem16, p->begin, p->begin,
                                      p->end);
  } else {
    sum_partials(d, pb->mem, p->begin, p->begin, p->end);
  }
  if (d->reduce16) { /* narrowed, reduced in bf16; widened in retire_bucket
                      * (bf16 gradients: reduced where they are) */
    if (!d->grads16_acc) d->ops->convert(pb->mem16, MT_DT_BF16, pb->mem, MT_DT_F32, p->end - p->begin);
    GRAD_CALL(d, k, mt_ireduce_scatter_sum_bf16(group_of(d, k), pb->mem16, pb->part16, p->counts,
                                                d->ops->loc, &b->req));
  } else {
    GRAD_CALL(d, k, mt_ireduce_scatter_sum_f32(group_of(d, k), pb->mem, pb->part, p->counts,
                                               d->ops->loc, &b->req));
  }
  b->launched = 1;
  for (int j = 0; j < d->reg->n_buckets; j++) mt_progress(&d->buckets[j].req);
}

/* zero <= 1: the lowest offset from which every unit this stage holds up
 * to the top of the buffer has completed its gradients (the tied unit,
 * which waits for the stages' sum, never counts as complete here) */
static size_t complete_from(const mt_dp *d) {
  size_t from = d->reg->numel_local;
  for (int v = d->reg->n_units - 1; v >= 0; v--) {
    const mt_unit *x = &d->reg->units[v];
    if (x->end == x->begin) continue;
    if (!d->unit_done[v] || (d->pp_g && mt_registry_unit_tied(d->reg, v))) break;
    from = x->begin;
  }
  return from;
}

static void unit_grads_done(mt_dp *d, int u) {
  const mt_unit *un = &d->reg->units[u];
  if (d->zero <= 1) {
    if (!d->reduce_now) return;
    d->unit_done[u] = 1; /* in its chunk's last op: complete for the step */
    /* sequence parallelism: sum the unit's partial gradients over tp (once
     * per step, accumulation included) before dp reduces them */
    sum_held_partials(d, un->begin, un->end);
    d->partial_done = 1;
    /* a tied unit (pipeline parallelism: the embeddings, the first unit of
     * the flat buffer) waits for the sum across stages; above it, what is
     * complete from the top of the buffer down goes now (in a V the chunk
     * of the lower layers may finish first) */
    if (!(d->pp_g && mt_registry_unit_tied(d->reg, u))) grads_ready(d, complete_from(d));
    return;
  }
  int k = bucket_of_unit(d, u);
  mt_bucket *b = &d->buckets[k];
  if (b->buf < 0) mt_die("ZeRO-%d: unit %d's gradients were never acquired", d->zero, u);
  if (b->hold || --b->units_left > 0) return;
  if (d->defer) { /* the run's next micro-batch adds to it */
    b->units_left = units_of_bucket(d, k);
    return;
  }
  launch_fill(d, k);
}

void mt_dp_defer_reduce(mt_dp *d, int on) { d->defer = on; }

void mt_dp_finish_sync(mt_dp *d) {
  d->in_finish = 1;
  for (int u = 0; d->unit_slot && u < d->reg->n_units; u++)
    if (d->unit_slot[u] >= 0)
      mt_die("dp: unit %d's bf16 gradients are incomplete at the end of the step", u);
  if (d->zero <= 1) {
    if (!d->partial_done) sum_held_partials(d, 0, d->reg->numel_local);
    d->partial_done = 1;
    grads_ready(d, 0);
    for (int k = 0; k < d->reg->n_buckets; k++) bucket_wait(d, k);
    return;
  }
  for (int k = 0; k < d->reg->n_buckets; k++) {
    if (d->buckets[k].buf >= 0 && !d->buckets[k].launched) {
      if (!d->buckets[k].hold)
        mt_die("ZeRO-%d: bucket %d's gradients are incomplete at the end of the step", d->zero, k);
      launch_fill(d, k);
    }
  }
  for (int k = 0; k < d->reg->n_buckets; k++) retire_bucket(d, k);
}

/* zero >= 2: the held bucket's buffer at flat offset off */
static void *held_at(mt_dp *d, size_t off, size_t es) {
  int k = mt_registry_bucket_of(d->reg, off);
  if (k < 0 || !d->buckets[k].hold)
    mt_die("ZeRO-%d: flat offset %zu is in no held bucket", d->zero, off);
  return (char *)bucket_buffer(d, k) + (off - plan_of(d, k)->begin) * es;
}

float *mt_dp_grads_at(mt_dp *d, size_t off) {
  if (d->grads16_acc) mt_die("dp: the gradients are bf16 (mt_dp_grads16_at), flat offset %zu", off);
  if (d->zero <= 1) return d->grads + off;
  return held_at(d, off, sizeof(float));
}

mt_bf16 *mt_dp_grads16_at(mt_dp *d, size_t off) {
  if (!d->grads16_acc) return NULL;
  if (d->zero <= 1) return d->grads16 + off;
  return held_at(d, off, sizeof(mt_bf16));
}

/* ------------------------------------------------------------------ */
/* ZeRO-3 gathers                                                      */

static void gather_start(mt_dp *d, int u) {
  mt_unit_gather *ug = &d->gather[u];
  if (ug->state != 0) return;
  int i = gather_buf_of_unit(d, u);
  mt_pool_buf *pb = &d->pbufs[i];
  if (pb->owner >= 0 && pb->owner != u) {
    mt_unit_gather *other = &d->gather[pb->owner];
    if (other->state == 2)
      mt_die("ZeRO-3: unit %d's gather buffer is still held by unit %d", u, pb->owner);
    mt_wait(&other->req); /* a prefetch nobody used */
    other->state = 0;
    other->buf = -1;
  }
  int k = bucket_of_unit(d, u);
  const mt_bucket_plan *p = plan_of(d, k);
  pb->owner = u;
  ug->buf = i;
  ug->state = 1;
  if (d->bf) /* the copy's shards, half the bytes of the master's */
    STATE_CALL(d, k, mt_iallgatherv_u16(group_of(d, k), d->params_bf16 + p->shard_off, pb->mem,
                                        p->counts, p->displs, d->ops->loc, &ug->req));
  else
    STATE_CALL(d, k, mt_iallgatherv_f32(group_of(d, k), d->params + p->shard_off, pb->mem,
                                        p->counts, p->displs, d->ops->loc, &ug->req));
}

/* can unit u's gather start now without taking a buffer in use? */
static int gather_buf_free(const mt_dp *d, int u) {
  const mt_pool_buf *pb = &d->pbufs[gather_buf_of_unit(d, u)];
  return pb->owner < 0 || pb->owner == u;
}

mt_act *mt_dp_params(mt_dp *d, int u, mt_pass pass) {
  const mt_unit *un = &d->reg->units[u];
  if (d->zero < 3) return d->bf ? (mt_act *)(d->params_bf16 + un->begin) : d->params + un->begin;
  mt_unit_gather *ug = &d->gather[u];
  if (un->end == un->begin) return NULL;
  int fresh = ug->state != 2;
  gather_start(d, u);
  if (ug->state == 1) {
    mt_wait(&ug->req);
    ug->state = 2;
  }
  /* prefetch the next unit of the pass while this one computes (not when
   * the LM head takes the embeddings again, which it holds already) */
  int next = pass == MT_PASS_FORWARD ? u + 1 : u - 1;
  if ((fresh || pass == MT_PASS_BACKWARD) && next >= 0 && next < d->reg->n_units && d->gather[next].state == 0 &&
      d->reg->units[next].end > d->reg->units[next].begin && gather_buf_free(d, next))
    gather_start(d, next);
  return d->pbufs[ug->buf].mem;
}

static void release_unit(mt_dp *d, int u) {
  mt_unit_gather *ug = &d->gather[u];
  if (ug->state == 0) return;
  if (ug->state == 1) mt_wait(&ug->req);
  d->pbufs[ug->buf].owner = -1;
  ug->buf = -1;
  ug->state = 0;
}

void mt_dp_params_done(mt_dp *d, int u, mt_pass pass) {
  (void)pass;
  if (d->zero == 3) release_unit(d, u);
}

void mt_dp_release_params(mt_dp *d) {
  if (d->zero == 3)
    for (int u = 0; u < d->reg->n_units; u++) release_unit(d, u);
}

/* bf16 gradients: unit u's fp32 slot for this piece, its bf16 gradients
 * (len elements at home: in the whole buffer, or in its bucket's) widened
 * (the smallest free slot that holds it, else a new one its size) */
static float *slot_open(mt_dp *d, int u, mt_bf16 *home, size_t len) {
  if (d->unit_slot[u] >= 0) return d->slots[d->unit_slot[u]].mem;
  int best = -1;
  for (int i = 0; i < d->n_slots; i++)
    if (d->slots[i].owner < 0 && d->slots[i].cap >= len &&
        (best < 0 || d->slots[i].cap < d->slots[best].cap))
      best = i;
  if (best < 0) {
    d->slots = realloc(d->slots, (size_t)(d->n_slots + 1) * sizeof *d->slots);
    if (!d->slots) mt_die("out of memory (gradient slots)");
    best = d->n_slots++;
    d->slots[best] = (mt_grad_slot){.mem = d->ops->alloc(MT_MEM_GRADS, len * sizeof(float)),
                                    .cap = len, .owner = -1};
  }
  mt_grad_slot *sl = &d->slots[best];
  sl->owner = u;
  sl->home = home;
  sl->len = len;
  d->unit_slot[u] = best;
  d->ops->convert(sl->mem, MT_DT_F32, home, MT_DT_BF16, len);
  return sl->mem;
}

/* ... rounded back into the bf16 gradients, the slot freed */
static void slot_fold(mt_dp *d, int u) {
  if (!d->grads16_acc) return;
  int i = d->unit_slot[u];
  if (i < 0) return;
  d->ops->convert(d->slots[i].home, MT_DT_BF16, d->slots[i].mem, MT_DT_F32, d->slots[i].len);
  d->slots[i].owner = -1;
  d->unit_slot[u] = -1;
}

float *mt_dp_grads(mt_dp *d, int u) {
  const mt_unit *un = &d->reg->units[u];
  const size_t len = un->end - un->begin;
  if (d->zero <= 1 && d->grads16_acc)
    return len ? slot_open(d, u, d->grads16 + un->begin, len) : NULL;
  if (d->zero <= 1) return d->grads + un->begin;
  if (un->end == un->begin) return NULL;
  int k = bucket_of_unit(d, u);
  size_t at = un->begin - plan_of(d, k)->begin;
  if (d->grads16_acc) return slot_open(d, u, (mt_bf16 *)bucket_buffer(d, k) + at, len);
  return (float *)bucket_buffer(d, k) + at;
}

void mt_dp_grads_pause(mt_dp *d, int u) { slot_fold(d, u); }

void mt_dp_grads_done(mt_dp *d, int u) {
  if (d->reg->units[u].end == d->reg->units[u].begin) return;
  slot_fold(d, u);
  unit_grads_done(d, u);
}

/* ------------------------------------------------------------------ */
/* norm, clip, AdamW                                                   */

/* The reduced gradients: this rank's shard (zero >= 1) or the whole
 * buffer, fp32 or bf16 (MT_DP_GRADS_BF16); elements [i, i+n) of them. */
static const void *reduced_grads(const mt_dp *d) {
  if (d->grads16_acc) return d->zero ? (const void *)d->shard16 : (const void *)d->grads16;
  return d->zero ? (const void *)d->grad_shard : (const void *)d->grads;
}
static double grads_sumsq(const mt_dp *d, const void *g, size_t i, size_t n) {
  if (d->grads16_acc) return d->ops->sumsq(MT_DT_BF16, (const mt_bf16 *)g + i, n);
  return d->ops->sumsq(MT_DT_F32, (const float *)g + i, n);
}

/* Sums of squares of grad (reduced_grads' kind), whose element 0 is flat
 * element begin, over [begin, begin+len), split by the tensors' placement:
 * [0] tp-sharded, [1] replicated over tp; experts (MoE) [2] etp-sharded,
 * [3] replicated over etp. */
static void sumsq_by_placement(const mt_dp *d, const void *grad, size_t begin, size_t len,
                               double acc[4]) {
  size_t end = begin + len;
  for (int i = 0; i < d->reg->n; i++) {
    const mt_tensor *t = &d->reg->t[i];
    size_t tb = t->offset, te = t->offset + t->numel_local;
    if (te <= begin || tb >= end) continue;
    size_t a = tb > begin ? tb : begin, b = te < end ? te : end;
    if (d->pp_g && a >= d->norm_skip_begin && b <= d->norm_skip_end) continue;
    int slot = t->group == MT_GROUP_EDP ? (t->etp.kind == MT_PLACE_SHARDED ? 2 : 3)
                                        : (t->tp.kind == MT_PLACE_SHARDED ? 0 : 1);
    acc[slot] += grads_sumsq(d, grad, a - begin, b - a);
  }
}

/* The squared norm summed by placement (tensor or pipeline parallelism, or
 * a MoE model): the ranks of a tp group hold different shards of the
 * sharded tensors and identical copies of the replicated ones, so [0] (tp-
 * sharded) is summed over tp and [1] (replicated) counted once; with
 * experts, their tensors are split over ep and etp (one expert-tensor shard
 * per (ep, etp) rank, its ZeRO parts over edp): [2] etp-sharded, [3]
 * replicated over etp, counted once. Under ZeRO each part is first summed
 * over its reduction group; pipeline stages add their tensors over pp. */
static double placed_sumsq(mt_dp *d, int experts) {
  const mt_registry *r = d->reg;
  double acc[4] = {0.0, 0.0, 0.0, 0.0};
  const size_t es = d->grads16_acc ? sizeof(mt_bf16) : sizeof(float);
  const char *g = reduced_grads(d);
  if (d->zero) {
    for (int k = 0; k < r->n_buckets; k++)
      sumsq_by_placement(d, g + plan_of(d, k)->shard_off * es, part_begin(d, k), part_len(d, k),
                         acc);
    mt_allreduce_sum_f64(d->groups[MT_GROUP_DP], acc, 2, MT_LOC_HOST);
    if (experts) mt_allreduce_sum_f64(d->groups[MT_GROUP_EDP], acc + 2, 2, MT_LOC_HOST);
  } else {
    sumsq_by_placement(d, g, 0, r->numel_local, acc);
  }
  if (d->tp_g) mt_allreduce_sum_f64(d->tp_g, acc, 1, MT_LOC_HOST);
  if (experts && d->ep_g) mt_allreduce_sum_f64(d->ep_g, acc + 2, 2, MT_LOC_HOST);
  if (experts && d->etp_g) mt_allreduce_sum_f64(d->etp_g, acc + 2, 1, MT_LOC_HOST);
  if (d->pp_g) mt_allreduce_sum_f64(d->pp_g, acc, experts ? 4 : 2, MT_LOC_HOST);
  return experts ? acc[0] + acc[1] + acc[2] + acc[3] : acc[0] + acc[1];
}

/* Squared global gradient norm. Without tp or pp: one sum over this rank's
 * buffer (summed over dp x cp under ZeRO); otherwise by placement. */
static double global_sumsq(mt_dp *d) {
  const mt_registry *r = d->reg;
  if (r->n_group_tensors[MT_GROUP_EDP] > 0) return placed_sumsq(d, 1);
  if (d->tp_g || d->pp_g) return placed_sumsq(d, 0);
  double sumsq = 0.0;
  if (d->zero) {
    sumsq = grads_sumsq(d, reduced_grads(d), 0, r->shard_numel);
    mt_allreduce_sum_f64(d->groups[MT_GROUP_DP], &sumsq, 1, MT_LOC_HOST);
  } else {
    sumsq = grads_sumsq(d, reduced_grads(d), 0, r->numel_local);
  }
  return sumsq;
}

/* bf16 gradients: the largest fp32 slot, free between steps (AdamW reads
 * the gradients widened through it); its elements in *cap. */
static float *free_f32_buffer(const mt_dp *d, size_t *cap) {
  float *best = NULL;
  *cap = 0;
  for (int i = 0; i < d->n_slots; i++)
    if (d->slots[i].cap > *cap) *cap = d->slots[i].cap, best = d->slots[i].mem;
  return best;
}

/* AdamW over flat elements [begin, begin+len) whose master starts at param,
 * copy (or NULL) at copy, moments at moff, from the bf16 gradients g16,
 * widened and scaled piece by piece in buf (cap elements) */
static void update_from_bf16(mt_dp *d, float *param, mt_bf16 *copy, const mt_bf16 *g16,
                             size_t begin, size_t len, size_t moff, float scale, float *buf,
                             size_t cap) {
  for (size_t i = 0; i < len; i += cap) {
    size_t n = len - i < cap ? len - i : cap;
    d->ops->convert(buf, MT_DT_F32, g16 + i, MT_DT_BF16, n);
    if (scale != 1.0f) d->ops->scale(MT_DT_F32, buf, scale, n);
    mt_adamw_update_range(&d->opt, d->reg, param + i, copy ? copy + i : NULL, MT_DT_BF16, buf,
                               begin + i, n, moff + i);
  }
}

double mt_dp_optimizer_step(mt_dp *d, float lr, float grad_clip) {
  const mt_registry *r = d->reg;
  double norm = sqrt_safe(global_sumsq(d));
  d->last_grad_norm = norm;
  float scale = mt_clip_scale(norm, grad_clip);
  float *g = d->zero ? d->grad_shard : d->grads;
  if (scale != 1.0f && !d->grads16_acc) d->ops->scale(MT_DT_F32, g, scale, r->shard_numel);
  size_t cap = 0;
  float *buf = d->grads16_acc ? free_f32_buffer(d, &cap) : NULL;
  if (d->grads16_acc && !buf && r->shard_numel)
    mt_die("dp: no gradient buffer to widen the bf16 gradients in (no backward this step?)");
  mt_adamw_step_begin(&d->opt, lr);
  for (int k = 0; k < r->n_buckets; k++) {
    const mt_bucket_plan *p = plan_of(d, k);
    /* the bf16 copy (if any) refreshed in the same pass as the master */
    if (d->zero) {
      size_t pb = part_begin(d, k);
      float *param = d->master_sharded ? d->params + p->shard_off : d->params + pb;
      mt_bf16 *copy = !d->bf ? NULL : d->zero == 3 ? d->params_bf16 + p->shard_off
                                                   : d->params_bf16 + pb;
      if (d->grads16_acc)
        update_from_bf16(d, param, copy, d->shard16 + p->shard_off, pb, part_len(d, k),
                         p->shard_off, scale, buf, cap);
      else
        mt_adamw_update_range(&d->opt, r, param, copy, copy_type(d), g + p->shard_off, pb,
                              part_len(d, k), p->shard_off);
    } else if (d->grads16_acc) {
      update_from_bf16(d, d->params + p->begin, d->params_bf16 + p->begin,
                       d->grads16 + p->begin, p->begin, p->end - p->begin, p->shard_off, scale,
                       buf, cap);
    } else {
      mt_adamw_update_range(&d->opt, r, d->params + p->begin,
                            d->bf ? d->params_bf16 + p->begin : NULL, copy_type(d), g + p->begin,
                            p->begin, p->end - p->begin, p->shard_off);
    }
  }
  /* zero 1, 2: every rank's updated part to every rank: the bf16 copy's
   * (half the bytes; the master stays sharded), else the parameters */
  if (d->zero == 1 || d->zero == 2)
    for (int k = 0; k < r->n_buckets; k++) {
      const mt_bucket_plan *p = plan_of(d, k);
      if (d->bf)
        STATE_CALL(d, k, mt_allgatherv_inplace_u16(group_of(d, k), d->params_bf16 + p->begin,
                                                   p->counts, p->displs, d->ops->loc));
      else
        STATE_CALL(d, k, mt_allgatherv_inplace_f32(group_of(d, k), d->params + p->begin,
                                                   p->counts, p->displs, d->ops->loc));
    }
  return norm;
}

/* ------------------------------------------------------------------ */
/* checkpoints                                                         */

int mt_dp_state_ranges(const mt_dp *d, int which, int for_save, mt_flat_range **out) {
  const mt_registry *r = d->reg;
  mt_flat_range *ranges = mt_calloc((size_t)r->n_buckets + 1, sizeof *ranges);
  int n = 0;
  for (int k = 0; k < r->n_buckets; k++) {
    const mt_bucket_plan *p = plan_of(d, k);
    size_t pb = part_begin(d, k), pl = part_len(d, k);
    /* this rank's part, or the whole bucket where it holds the whole */
    int part = for_save || (which == 0 ? d->master_sharded : d->zero > 0);
    size_t begin = part ? pb : p->begin, len = part ? pl : p->end - p->begin;
    float *mem;
    if (which == 0) {
      mem = d->master_sharded ? d->params + p->shard_off : d->params + begin;
    } else {
      float *moments = which == 1 ? d->opt.m : d->opt.v;
      /* ZeRO: the shard holds only this rank's parts; otherwise whole buckets */
      mem = moments + p->shard_off + (d->zero ? 0 : begin - p->begin);
    }
    if (len == 0) continue;
    ranges[n++] = (mt_flat_range){.begin = begin, .len = len, .mem = mem};
  }
  *out = ranges;
  return n;
}
