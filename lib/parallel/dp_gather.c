/* ZeRO-3's parameter gathers: a unit's weights (the compute copy, or the
 * fp32 master without one) all-gathered over its bucket's group before its
 * forward and again before its backward, the units of the pass's next
 * piece prefetched while this one computes, released after use. Below ZeRO-3 a
 * unit's weights are where they are held. */
#include "parallel/dp_internal.h"

/* the weights the model reads: the compute copy (wdt), or the master */
static void *weights(const mt_dp *d) { return d->copy ? d->copy : (void *)d->params; }

/* the gather buffers (dp.c make_gather_buffers): the units used at both
 * ends of a pass (the first and the last: the embeddings, which the tied LM
 * head uses again, and the final LayerNorm) have buffers of their own (0,
 * 1); the others share buffers by layer parity and place in the layer, so
 * the next layer's gathers never wait for the current one's */
static int gather_buf_of_unit(const mt_dp *d, int u) { return d->unit_buf[u]; }

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
  int k = mt_dp_bucket_of_unit(d, u);
  const mt_bucket_plan *p = dp_plan(d, k);
  pb->owner = u;
  ug->buf = i;
  ug->state = 1;
  /* the shards of the weights as the model reads them (a bf16 copy: half
   * the bytes of the master's) */
  DP_STATE_CALL(d, k, mt_iallgatherv(dp_group(d, k), dp_at(weights(d), d->wdt, p->shard_off),
                                     pb->mem, p->counts, p->displs, d->wdt, d->ops->loc,
                                     &ug->req));
}

/* can unit u's gather start now without taking a buffer in use? */
static int gather_buf_free(const mt_dp *d, int u) {
  const mt_pool_buf *pb = &d->pbufs[gather_buf_of_unit(d, u)];
  return pb->owner < 0 || pb->owner == u;
}

mt_act *mt_dp_params(mt_dp *d, int u, mt_pass pass) {
  const mt_unit *un = &d->reg->units[u];
  if (d->zero < 3) return dp_at(weights(d), d->wdt, un->begin);
  mt_unit_gather *ug = &d->gather[u];
  if (un->end == un->begin) return NULL;
  int fresh = ug->state != 2;
  gather_start(d, u);
  if (ug->state == 1) {
    mt_wait(&ug->req);
    ug->state = 2;
  }
  /* prefetch the units of the pass's next piece while this one computes
   * (not when the LM head takes the embeddings again, which it holds
   * already): the next unit, or with MoE blocks (a piece binds a block's
   * dense unit and its experts') the next d->ahead, so the next block's
   * gathers are issued before this block's gradient reductions (a group
   * runs its calls in issue order: a gather issued after a reduce-scatter
   * waits for it, and the pass for both) */
  for (int i = 1; i <= d->ahead && (fresh || pass == MT_PASS_BACKWARD); i++) {
    int next = pass == MT_PASS_FORWARD ? u + i : u - i;
    if (next < 0 || next >= d->reg->n_units) break;
    if (d->gather[next].state == 0 && d->reg->units[next].end > d->reg->units[next].begin &&
        gather_buf_free(d, next))
      gather_start(d, next);
  }
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
