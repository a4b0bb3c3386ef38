/* The dp engine's gradient reduction, bucket by bucket and overlapped with
 * backward: ZeRO 0/1 reduce the held gradients once a step (all-reduce,
 * reduce-scatter into the shard), ZeRO 2/3 reduce-scatter each
 * micro-batch's buffer and add this rank's part to the shard. Each buffer
 * holds one element type: the gradients' as they accumulate (d->gdt), the
 * reduction's (d->rdt); where they differ (fp32 gradients reduced in bf16)
 * the gradients are narrowed for the reduction and widened after it. bf16
 * gradients accumulate each piece of a pass in an fp32 slot (see mt_dp). */
#include "parallel/dp_internal.h"

#include <stdlib.h>
#include <string.h>

void mt_dp_begin_step(mt_dp *d) {
  if (d->grads) d->ops->zero(d->gdt, d->grads, d->reg->numel_local);
  if (d->shard) d->ops->zero(d->gdt, d->shard, d->reg->shard_numel);
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

/* ------------------------------------------------------------------ */
/* zero <= 1: the held gradients                                       */

/* the reduction of bucket k over the whole gradient buffer: in place, or
 * narrowed first (widened in bucket_wait) */
static void launch(mt_dp *d, int k) {
  const mt_bucket_plan *p = dp_plan(d, k);
  mt_bucket *b = &d->buckets[k];
  const size_t len = p->end - p->begin;
  void *g = dp_at(d->grads, d->gdt, p->begin), *src = g,
       *dst = dp_at(d->shard, d->gdt, p->shard_off);
  b->narrowed = d->rdt != d->gdt;
  if (b->narrowed) {
    src = dp_at(d->red, d->rdt, p->begin);
    dst = dp_at(d->red_shard, d->rdt, p->shard_off);
    d->ops->convert(src, d->rdt, g, d->gdt, len);
  }
  if (d->zero)
    DP_GRAD_CALL(d, k, mt_ireduce_scatter(dp_group(d, k), src, dst, p->counts, d->rdt, d->ops->loc,
                                          &b->req));
  else
    DP_GRAD_CALL(d, k, mt_iallreduce(dp_group(d, k), src, len, d->rdt, MT_RED_SUM, d->ops->loc,
                                     &b->req));
  b->launched = 1;
}

/* bucket k's reduction done; one that was narrowed widened back into the
 * gradients (zero 0) or this rank's shard of them (zero 1) */
static void bucket_wait(mt_dp *d, int k) {
  mt_bucket *b = &d->buckets[k];
  const mt_bucket_plan *p = dp_plan(d, k);
  mt_wait(&b->req);
  if (!b->narrowed) return;
  b->narrowed = 0;
  if (d->zero)
    d->ops->convert(dp_at(d->shard, d->gdt, p->shard_off), d->gdt,
                    dp_at(d->red_shard, d->rdt, p->shard_off), d->rdt, dp_part_len(d, k));
  else
    d->ops->convert(dp_at(d->grads, d->gdt, p->begin), d->gdt, dp_at(d->red, d->rdt, p->begin),
                    d->rdt, p->end - p->begin);
}

/* every gradient at flat offset >= ready_from is final: launch the
 * complete buckets (non-blocking), in order */
static void grads_ready(mt_dp *d, size_t ready_from) {
  while (d->next_bucket < d->reg->n_buckets && dp_plan(d, d->next_bucket)->begin >= ready_from)
    launch(d, d->next_bucket++);
  /* let MPI move the buckets already in flight while backward goes on */
  for (int k = 0; k < d->next_bucket; k++) mt_progress(&d->buckets[k].req);
}

/* tensors whose tp ranks hold partial gradients (sequence parallelism's
 * norms, a MoE router): summed over tp before the reduction over dp; buf
 * (gradients of type gdt) starts at flat element buf_begin */
static void sum_partials(mt_dp *d, void *buf, size_t buf_begin, size_t begin, size_t end) {
  if (!d->tp || !d->tp->grad_buf) return;
  mt_tp_reduce_partial_grads_at(d->tp, d->reg, buf, d->gdt, buf_begin, begin, end);
}

/* the lowest offset from which every unit this stage holds up to the top
 * of the buffer has completed its gradients (the tied unit, which waits
 * for the stages' sum, never counts as complete here) */
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

/* ------------------------------------------------------------------ */
/* zero >= 2: a buffer per micro-batch                                 */

/* bucket k's reduce-scatter is done: add this rank's part to the shard
 * (widened first where it was reduced narrower than the shard) and free
 * the buffer */
static void retire_bucket(mt_dp *d, int k) {
  mt_bucket *b = &d->buckets[k];
  if (b->buf < 0) return;
  mt_pool_buf *pb = &d->gbufs[b->buf];
  if (b->launched) {
    mt_wait(&b->req);
    const size_t n = dp_part_len(d, k);
    void *part = pb->part;
    if (d->rdt != d->gdt) {
      d->ops->convert(pb->wide, d->gdt, pb->part, d->rdt, n);
      part = pb->wide;
    }
    d->ops->axpy(d->gdt, dp_at(d->shard, d->gdt, dp_plan(d, k)->shard_off), 1.0f, part, n);
    b->launched = 0;
  }
  pb->owner = -1;
  b->buf = -1;
}

/* the units of bucket k this stage holds */
static int units_of_bucket(const mt_dp *d, int k) {
  int n = 0;
  for (int u = dp_plan(d, k)->u0; u < dp_plan(d, k)->u1; u++)
    n += d->reg->units[u].end > d->reg->units[u].begin;
  return n;
}

/* the gradient buffer of bucket k: 0 for the last bucket, one per bucket
 * with open fills (a split backward: its input pass writes the LayerNorm
 * gradients of every layer of a chunk and its weight pass, ops later,
 * completes them, so every bucket of the stage may be open at once), else
 * the two shared ones in turn (a backward pass completes the buckets it
 * opens, in order), or with MoE blocks that of its class (dp.c) */
static int grad_buf_of_bucket(const mt_dp *d, int k) {
  if (k == d->reg->n_buckets - 1) return 0;
  if (d->open_fills) return k + 1;
  if (d->bucket_gbuf) return d->bucket_gbuf[k];
  return 1 + k % (d->n_gbufs - 1);
}

void *mt_dp_bucket_buffer(mt_dp *d, int k) {
  mt_bucket *b = &d->buckets[k];
  if (b->buf >= 0 && !b->launched) return d->gbufs[b->buf].mem;
  retire_bucket(d, k);
  int i = grad_buf_of_bucket(d, k);
  mt_pool_buf *pb = &d->gbufs[i];
  if (pb->owner >= 0 && !d->buckets[pb->owner].launched)
    mt_die("ZeRO-%d: bucket %d needs the gradient buffer of bucket %d, whose gradients are "
           "incomplete", d->zero, k, pb->owner);
  if (pb->owner >= 0) retire_bucket(d, pb->owner);
  pb->owner = k;
  b->buf = i;
  b->launched = 0;
  b->units_left = units_of_bucket(d, k);
  d->ops->zero(d->gdt, pb->mem, dp_plan(d, k)->end - dp_plan(d, k)->begin);
  return pb->mem;
}

/* reduce-scatter bucket k's buffer (its gradients of this micro-batch, or
 * of the step for a held bucket), narrowed first where the reduction's
 * type is narrower */
static void launch_fill(mt_dp *d, int k) {
  mt_bucket *b = &d->buckets[k];
  const mt_bucket_plan *p = dp_plan(d, k);
  mt_pool_buf *pb = &d->gbufs[b->buf];
  sum_partials(d, pb->mem, p->begin, p->begin, p->end);
  if (pb->red != pb->mem) d->ops->convert(pb->red, d->rdt, pb->mem, d->gdt, p->end - p->begin);
  DP_GRAD_CALL(d, k, mt_ireduce_scatter(dp_group(d, k), pb->red, pb->part, p->counts, d->rdt,
                                        d->ops->loc, &b->req));
  b->launched = 1;
  for (int j = 0; j < d->reg->n_buckets; j++) mt_progress(&d->buckets[j].req);
}

/* ------------------------------------------------------------------ */
/* units complete                                                      */

static void unit_grads_done(mt_dp *d, int u) {
  const mt_unit *un = &d->reg->units[u];
  if (d->zero <= 1) {
    if (!d->reduce_now) return;
    d->unit_done[u] = 1; /* in its chunk's last op: complete for the step */
    /* sequence parallelism: sum the unit's partial gradients over tp (once
     * per step, accumulation included) before dp reduces them */
    sum_partials(d, d->grads, 0, un->begin, un->end);
    d->partial_done = 1;
    /* a tied unit (pipeline parallelism: the embeddings, the first unit of
     * the flat buffer) waits for the sum across stages; above it, what is
     * complete from the top of the buffer down goes now (in a V the chunk
     * of the lower layers may finish first) */
    if (!(d->pp_g && mt_registry_unit_tied(d->reg, u))) grads_ready(d, complete_from(d));
    return;
  }
  int k = mt_dp_bucket_of_unit(d, u);
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
    if (!d->partial_done) sum_partials(d, d->grads, 0, 0, d->reg->numel_local);
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

void *mt_dp_grads_at(mt_dp *d, size_t off) {
  if (d->zero <= 1) return dp_at(d->grads, d->gdt, off);
  int k = mt_registry_bucket_of(d->reg, off);
  if (k < 0 || !d->buckets[k].hold)
    mt_die("ZeRO-%d: flat offset %zu is in no held bucket", d->zero, off);
  return dp_at(mt_dp_bucket_buffer(d, k), d->gdt, off - dp_plan(d, k)->begin);
}

/* ------------------------------------------------------------------ */
/* where backward writes                                               */

/* bf16 gradients: unit u's fp32 slot for this piece, its bf16 gradients
 * (len elements at home: in the whole buffer, or in its bucket's) widened
 * (the smallest free slot that holds it, else a new one its size) */
static float *slot_open(mt_dp *d, int u, void *home, size_t len) {
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
  d->ops->convert(sl->mem, MT_DT_F32, home, d->gdt, len);
  return sl->mem;
}

/* ... rounded back into the bf16 gradients, the slot freed */
static void slot_fold(mt_dp *d, int u) {
  if (!d->unit_slot) return;
  int i = d->unit_slot[u];
  if (i < 0) return;
  d->ops->convert(d->slots[i].home, d->gdt, d->slots[i].mem, MT_DT_F32, d->slots[i].len);
  d->slots[i].owner = -1;
  d->unit_slot[u] = -1;
}

float *mt_dp_grads(mt_dp *d, int u) {
  const mt_unit *un = &d->reg->units[u];
  const size_t len = un->end - un->begin;
  void *home;
  if (d->zero <= 1) {
    home = dp_at(d->grads, d->gdt, un->begin);
  } else {
    if (len == 0) return NULL;
    int k = mt_dp_bucket_of_unit(d, u);
    home = dp_at(mt_dp_bucket_buffer(d, k), d->gdt, un->begin - dp_plan(d, k)->begin);
  }
  if (d->gdt == MT_DT_F32) return home;
  return len ? slot_open(d, u, home, len) : NULL;
}

void mt_dp_grads_pause(mt_dp *d, int u) { slot_fold(d, u); }

void mt_dp_grads_done(mt_dp *d, int u) {
  if (d->reg->units[u].end == d->reg->units[u].begin) return;
  slot_fold(d, u);
  unit_grads_done(d, u);
}
