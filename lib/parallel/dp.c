/* Data parallelism and ZeRO 0-3: the training state as the registry places
 * it on dp, its buffers (each role of one element type: the weights' copy,
 * the gradients as they accumulate, their reduction), its initial values
 * and its ranges for checkpoints. The gradient reduction is dp_reduce.c,
 * ZeRO-3's gathers dp_gather.c, the norm and AdamW dp_update.c. */
#include "parallel/dp_internal.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* buffer pools (ZeRO-2/3)                                             */

/* where a buffer's memory is counted: the gradients and their fp32 sums
 * are gradients; copies made only for a bf16 reduction are comm buffers */
static mt_mem_cat part_cat(const mt_dp *d) {
  return d->rdt == MT_DT_F32 ? MT_MEM_GRADS : MT_MEM_COMM;
}

/* a buffer of numel elements of type t; grad: a gradient buffer, with its
 * part of the reduce-scatter (part_numel elements) in the reduction's type,
 * mem narrowed into it where the types differ, and that part widened back
 * for an fp32 shard */
static void pool_add(const mt_dp *d, mt_pool_buf **pool, int *n, mt_mem_cat cat, size_t numel,
                     size_t part_numel, mt_dtype t, int grad) {
  *pool = realloc(*pool, (size_t)(*n + 1) * sizeof **pool);
  if (!*pool) mt_die("out of memory (buffer pool)");
  mt_pool_buf *b = &(*pool)[(*n)++];
  memset(b, 0, sizeof *b);
  b->numel = numel;
  b->part_numel = part_numel;
  b->owner = -1;
  b->mem = d->ops->alloc(cat, numel * mt_dtype_bytes(t));
  if (!grad) return;
  /* the fp32 sum of a part before it is added to an fp32 shard */
  if (d->gdt == MT_DT_F32 && part_numel)
    b->wide = d->ops->alloc(MT_MEM_GRADS, part_numel * sizeof(float));
  if (d->rdt == d->gdt) { /* reduced where it is */
    b->red = b->mem;
    b->part = b->wide;
    if (d->gdt != MT_DT_F32)
      b->part = d->ops->alloc(part_cat(d), part_numel * mt_dtype_bytes(d->rdt));
  } else {
    b->red = d->ops->alloc(MT_MEM_COMM, numel * mt_dtype_bytes(d->rdt));
    b->part = d->ops->alloc(MT_MEM_COMM, part_numel * mt_dtype_bytes(d->rdt));
  }
}

static void pool_free(const mt_dp *d, mt_pool_buf *pool, int n, mt_mem_cat cat, mt_dtype t,
                      int grad) {
  const mt_ops *o = d->ops;
  for (int i = 0; i < n; i++) {
    mt_pool_buf *b = &pool[i];
    o->free(cat, b->mem, b->numel * mt_dtype_bytes(t));
    if (!grad) continue;
    if (b->wide) o->free(MT_MEM_GRADS, b->wide, b->part_numel * sizeof(float));
    if (b->red != b->mem) o->free(MT_MEM_COMM, b->red, b->numel * mt_dtype_bytes(d->rdt));
    if (b->part != (void *)b->wide)
      o->free(b->red == b->mem ? part_cat(d) : MT_MEM_COMM, b->part,
              b->part_numel * mt_dtype_bytes(d->rdt));
  }
  free(pool);
}

/* an axis the norm sums over: NULL where absent (size 1) */
static mt_group *axis(mt_group *g) { return g && g->size > 1 ? g : NULL; }

/* each unit's place among the units of its layer (a MoE block's dense
 * unit, then its experts'), d->ahead the most a layer has, and its class:
 * the parity of the layer's place among the layers this rank holds, and
 * the place, 2 x d->ahead classes. Units and buckets of a class share
 * gather and gradient buffers the size of their largest: the layer in use
 * and the next one this rank holds (prefetched, or whose gradients
 * accumulate while this one's are reduced) never share one. (By the
 * layer's own index, an interleaved stage whose chunks are one layer each
 * at an even pp, layers r, r + pp, ..., had all its layers in one class.) */
static void unit_classes(mt_dp *d) {
  const mt_registry *reg = d->reg;
  const int U = reg->n_units;
  d->unit_class = mt_calloc((size_t)U, sizeof(int));
  int *held = mt_calloc((size_t)U, sizeof(int)); /* the layer's place among this rank's */
  d->ahead = 1;
  int pos = 0, n_held = 0, last = MT_LAYER_EMBED;
  for (int u = 1; u < U; u++) {
    pos = u > 1 && reg->units[u].layer == reg->units[u - 1].layer ? pos + 1 : 0;
    if (pos + 1 > d->ahead) d->ahead = pos + 1;
    d->unit_class[u] = pos;
    if (reg->units[u].end > reg->units[u].begin && reg->units[u].layer != last) {
      last = reg->units[u].layer;
      n_held++;
    }
    held[u] = n_held;
  }
  for (int u = 1; u < U; u++) d->unit_class[u] += (held[u] & 1) * d->ahead;
  free(held);
}

/* the gradient buffers (zero >= 2): buffer 0 for the last bucket (it holds
 * the embeddings, whose gradients the LM head starts and the embedding's
 * backward ends; under pipeline parallelism the tied embeddings, held to
 * the end of the step), then up to two shared by the other buckets in
 * turn, or with open fills one per bucket, each its own size, or with MoE
 * blocks (d->ahead > 1) one per class of the buckets' first units, so that
 * a block's experts do not wait for the reduction of the next block's
 * (their gradients would share a buffer in turn) */
static void make_grad_buffers(mt_dp *d) {
  const int nb = d->reg->n_buckets;
  const mt_bucket_plan *lastb = dp_plan(d, nb - 1);
  pool_add(d, &d->gbufs, &d->n_gbufs, MT_MEM_GRADS, lastb->end - lastb->begin,
           dp_part_len(d, nb - 1), d->gdt, 1);
  size_t most = 0, most_part = 0;
  for (int k = 0; k < nb - 1; k++) {
    size_t len = dp_plan(d, k)->end - dp_plan(d, k)->begin;
    if (len > most) most = len;
    if (dp_part_len(d, k) > most_part) most_part = dp_part_len(d, k);
  }
  if (d->open_fills) {
    for (int k = 0; k < nb - 1; k++)
      pool_add(d, &d->gbufs, &d->n_gbufs, MT_MEM_GRADS, dp_plan(d, k)->end - dp_plan(d, k)->begin,
               dp_part_len(d, k), d->gdt, 1);
  } else if (d->ahead > 1) {
    const int nc = 2 * d->ahead;
    int *cbuf = mt_calloc((size_t)nc, sizeof(int));
    size_t *len = mt_calloc((size_t)nc, sizeof(size_t));
    size_t *part = mt_calloc((size_t)nc, sizeof(size_t));
    d->bucket_gbuf = mt_calloc((size_t)nb, sizeof(int));
    for (int c = 0; c < nc; c++) cbuf[c] = -1;
    for (int k = 0; k < nb - 1; k++) {
      int c = d->unit_class[dp_plan(d, k)->u0];
      size_t n = dp_plan(d, k)->end - dp_plan(d, k)->begin;
      cbuf[c] = 0;
      if (n > len[c]) len[c] = n;
      if (dp_part_len(d, k) > part[c]) part[c] = dp_part_len(d, k);
    }
    for (int c = 0; c < nc; c++)
      if (cbuf[c] == 0) {
        cbuf[c] = d->n_gbufs;
        pool_add(d, &d->gbufs, &d->n_gbufs, MT_MEM_GRADS, len[c], part[c], d->gdt, 1);
      }
    for (int k = 0; k < nb - 1; k++) d->bucket_gbuf[k] = cbuf[d->unit_class[dp_plan(d, k)->u0]];
    free(cbuf);
    free(len);
    free(part);
  } else {
    for (int i = 0; i < (nb - 1 < 2 ? nb - 1 : 2); i++)
      pool_add(d, &d->gbufs, &d->n_gbufs, MT_MEM_GRADS, most, most_part, d->gdt, 1);
  }
}

/* ZeRO-3's gather buffers of the weights' copy (or of the master): the
 * units used at both ends of a pass (the first and the last) have their
 * own (0, 1); the others one per class (unit_classes: two by parity
 * without MoE), or with MT_DP_RUNS each unit of the stage one its size */
static void make_gather_buffers(mt_dp *d) {
  const mt_registry *reg = d->reg;
  int U = reg->n_units;
  d->gather = mt_calloc((size_t)U, sizeof(mt_unit_gather));
  for (int u = 0; u < U; u++) d->gather[u].buf = -1;
  d->unit_buf = mt_calloc((size_t)U, sizeof(int));
  size_t first = reg->units[0].end - reg->units[0].begin;
  size_t last = U > 1 ? reg->units[U - 1].end - reg->units[U - 1].begin : 0;
  pool_add(d, &d->pbufs, &d->n_pbufs, MT_MEM_GATHER, first, 0, d->wdt, 0);
  pool_add(d, &d->pbufs, &d->n_pbufs, MT_MEM_GATHER, last, 0, d->wdt, 0);
  if (U > 1) d->unit_buf[U - 1] = 1;
  const int nc = 2 * d->ahead;
  int *cbuf = mt_calloc((size_t)nc, sizeof(int));
  size_t *most = mt_calloc((size_t)nc, sizeof(size_t));
  for (int c = 0; c < nc; c++) cbuf[c] = -1;
  for (int u = 1; u < U - 1; u++) {
    size_t numel = reg->units[u].end - reg->units[u].begin;
    d->unit_buf[u] = -1;
    if (numel == 0) continue; /* another stage's */
    if (d->unit_bufs) {
      d->unit_buf[u] = d->n_pbufs;
      pool_add(d, &d->pbufs, &d->n_pbufs, MT_MEM_GATHER, numel, 0, d->wdt, 0);
      continue;
    }
    cbuf[d->unit_class[u]] = 0;
    if (numel > most[d->unit_class[u]]) most[d->unit_class[u]] = numel;
  }
  for (int c = 0; c < nc; c++)
    if (cbuf[c] == 0) {
      cbuf[c] = d->n_pbufs;
      pool_add(d, &d->pbufs, &d->n_pbufs, MT_MEM_GATHER, most[c], 0, d->wdt, 0);
    }
  for (int u = 1; u < U - 1 && !d->unit_bufs; u++)
    if (reg->units[u].end > reg->units[u].begin) d->unit_buf[u] = cbuf[d->unit_class[u]];
  free(most);
  free(cbuf);
}

/* ------------------------------------------------------------------ */
/* the engine                                                          */

void mt_dp_create(mt_dp *d, const mt_dp_groups *groups, const mt_registry *reg, const mt_ops *ops,
                  mt_dtype weights, const mt_tp *tp, float beta1, float beta2, float eps,
                  float weight_decay, int flags) {
  memset(d, 0, sizeof *d);
  d->open_fills = (flags & (MT_DP_OPEN_FILLS | MT_DP_RUNS)) != 0;
  d->unit_bufs = (flags & MT_DP_RUNS) != 0;
  d->zero = reg->zero;
  d->wdt = weights;
  d->gdt = (flags & MT_DP_GRADS_BF16) ? MT_DT_BF16 : MT_DT_F32;
  if (d->gdt == MT_DT_BF16 && weights != MT_DT_BF16) mt_die("dp: bf16 gradients need bf16 weights");
  /* bf16 gradients are reduced where they are, in bf16 */
  d->rdt = (flags & (MT_DP_REDUCE_BF16 | MT_DP_GRADS_BF16)) && weights == MT_DT_BF16 ? MT_DT_BF16
                                                                                    : MT_DT_F32;
  d->master_sharded = d->zero == 3 || (weights != MT_DT_F32 && d->zero >= 1);
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
  const size_t n = reg->numel_local, shard = reg->shard_numel;
  const size_t ges = mt_dtype_bytes(d->gdt), res = mt_dtype_bytes(d->rdt);
  d->params = ops->alloc(MT_MEM_PARAMS, (d->master_sharded ? shard : n) * sizeof(float));
  if (weights != MT_DT_F32)
    d->copy = ops->alloc(MT_MEM_PARAMS, (d->zero == 3 ? shard : n) * mt_dtype_bytes(weights));
  if (d->zero <= 1) d->grads = ops->alloc(MT_MEM_GRADS, n * ges);
  if (d->zero >= 1) d->shard = ops->alloc(MT_MEM_GRADS, shard * ges);
  if (d->gdt != MT_DT_F32) { /* fp32 slots of accumulation, per unit */
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
    const mt_bucket_plan *p = dp_plan(d, k);
    for (int u = p->u0; d->pp_g && u < p->u1; u++)
      if (mt_registry_unit_tied(reg, u)) d->buckets[k].hold = 1;
    if (d->buckets[k].hold && reg->zero >= 2 && k != reg->n_buckets - 1)
      mt_die("ZeRO-%d: the tied bucket %d is not the last (%d)", reg->zero, k, reg->n_buckets - 1);
  }
  d->unit_done = mt_calloc((size_t)reg->n_units + 1, sizeof(int));
  unit_classes(d);
  if (d->zero >= 2 && reg->n_buckets > 0) make_grad_buffers(d);
  /* fp32 gradients reduced in bf16 (zero <= 1): narrowed for the
   * reduction, and the shard it reduces into (zero 1) */
  if (d->rdt != d->gdt && d->zero <= 1) d->red = ops->alloc(MT_MEM_COMM, n * res);
  if (d->rdt != d->gdt && d->zero == 1) d->red_shard = ops->alloc(MT_MEM_COMM, shard * res);
  if (d->zero == 3) make_gather_buffers(d);
}

void mt_dp_destroy(mt_dp *d) {
  const mt_ops *o = d->ops;
  const size_t n = d->reg->numel_local, shard = d->reg->shard_numel;
  const size_t ges = mt_dtype_bytes(d->gdt), res = mt_dtype_bytes(d->rdt);
  if (d->copy) o->free(MT_MEM_PARAMS, d->copy, (d->zero == 3 ? shard : n) * mt_dtype_bytes(d->wdt));
  for (int k = 0; k < d->reg->n_buckets; k++) mt_wait(&d->buckets[k].req);
  if (d->red) o->free(MT_MEM_COMM, d->red, n * res);
  if (d->red_shard) o->free(MT_MEM_COMM, d->red_shard, shard * res);
  for (int i = 0; i < d->n_slots; i++)
    o->free(MT_MEM_GRADS, d->slots[i].mem, d->slots[i].cap * sizeof(float));
  free(d->slots);
  free(d->unit_slot);
  if (d->gather)
    for (int u = 0; u < d->reg->n_units; u++) mt_wait(&d->gather[u].req);
  o->free(MT_MEM_PARAMS, d->params, (d->master_sharded ? shard : n) * sizeof(float));
  if (d->grads) o->free(MT_MEM_GRADS, d->grads, n * ges);
  if (d->shard) o->free(MT_MEM_GRADS, d->shard, shard * ges);
  mt_dp_muon_destroy(d);
  mt_adamw_destroy(&d->opt);
  pool_free(d, d->gbufs, d->n_gbufs, MT_MEM_GRADS, d->gdt, 1);
  pool_free(d, d->pbufs, d->n_pbufs, MT_MEM_GATHER, d->wdt, 0);
  free(d->gather);
  free(d->unit_buf);
  free(d->unit_class);
  free(d->bucket_gbuf);
  free(d->buckets);
  free(d->unit_done);
  memset(d, 0, sizeof *d);
}

void *mt_dp_full_grads(mt_dp *d) { return d->grads; }

int mt_dp_bucket_of_unit(const mt_dp *d, int u) {
  for (int k = 0; k < d->reg->n_buckets; k++)
    if (u >= dp_plan(d, k)->u0 && u < dp_plan(d, k)->u1) return k;
  return -1;
}

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
      size_t pb = dp_part_begin(d, k), pe = pb + dp_part_len(d, k);
      for (int i = 0; i < r->n; i++) {
        const mt_tensor *t = &r->t[i];
        size_t a = t->offset > pb ? t->offset : pb;
        size_t b = t->offset + t->numel_local < pe ? t->offset + t->numel_local : pe;
        if (a < b)
          init_piece(d, i, seed, a, b, d->params + dp_plan(d, k)->shard_off + (a - pb), host);
      }
    }
  }
  free(host);
  mt_dp_master_changed(d);
}

/* The compute copy from the master: zero 0 and 3 convert what they hold
 * (the whole, the shard); zero 1 and 2 convert this rank's part of each
 * bucket and all-gather the copy. */
void mt_dp_master_changed(mt_dp *d) {
  const mt_registry *r = d->reg;
  if (!d->copy) return;
  if (!d->master_sharded || d->zero == 3) {
    d->ops->convert(d->copy, d->wdt, d->params, MT_DT_F32,
                    d->zero == 3 ? r->shard_numel : r->numel_local);
    return;
  }
  for (int k = 0; k < r->n_buckets; k++) {
    const mt_bucket_plan *p = dp_plan(d, k);
    d->ops->convert(dp_at(d->copy, d->wdt, dp_part_begin(d, k)), d->wdt,
                    d->params + p->shard_off, MT_DT_F32, dp_part_len(d, k));
    mt_allgatherv(dp_group(d, k), NULL, dp_at(d->copy, d->wdt, p->begin), p->counts, p->displs,
                  d->wdt, d->ops->loc);
  }
}

/* ------------------------------------------------------------------ */
/* checkpoints                                                         */

int mt_dp_state_ranges(const mt_dp *d, int which, int for_save, mt_flat_range **out) {
  const mt_registry *r = d->reg;
  mt_flat_range *ranges = mt_calloc((size_t)r->n_buckets + 1, sizeof *ranges);
  int n = 0;
  for (int k = 0; k < r->n_buckets; k++) {
    const mt_bucket_plan *p = dp_plan(d, k);
    size_t pb = dp_part_begin(d, k), pl = dp_part_len(d, k);
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
