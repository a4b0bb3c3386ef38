/* dp's exposure in issue order: the plan's priced step records one rank's
 * collectives as the real code makes them (comm.h's recording: each call,
 * each non-blocking call's wait, the pipeline ops' bounds, on the step's op
 * clock), and this replays them on a timeline as the virtual device runs
 * them (comm/virtual.c):
 *
 *   - a group's collectives take its channel one after another, each from
 *     max(issue, the channel free) for its price (mt_price_coll_s on the
 *     group's ranks and nodes);
 *   - a non-blocking one runs at the profile's overlap share of its rate
 *     while the rank computes, at the full rate while it waits; the rank
 *     waits for it only in its wait;
 *   - a blocking one holds the rank until it ends.
 *
 * So ZeRO-3's gathers are priced unit by unit: the embedding's, with no
 * compute before it, exposed whole; each next unit's behind the compute
 * of the unit before; a reduction behind what follows its issue. Summing
 * them against the pass's compute in aggregate hid the embedding's gather,
 * whose unit has almost no compute beside it. */
#include "plan/cost_internal.h"

#include <stdlib.h>
#include <string.h>

/* dp's groups: the gradients' reductions and ZeRO's gathers */
static int is_dp(const char *name) {
  return !strcmp(name, "dp") || !strcmp(name, "dp_cp") || !strcmp(name, "edp");
}

/* ranks of the event's group in its first rank's node, as virtual.c counts them */
static int per_node(const mt_price *q, const mt_comm_event *ev) {
  const int dpn = q->devices_per_node;
  if (dpn <= 0) return ev->size;
  int k = 1;
  while (k < ev->size && (ev->world0 + k * ev->stride) / dpn == ev->world0 / dpn) k++;
  return k;
}

/* a group whose ranks are on every pipeline stage: its blocking call
 * waits for the latest of them */
static int spans_stages(const mt_comm_event *ev) {
  return !strcmp(ev->name, "pp") || !strcmp(ev->name, "world");
}

/* the group's channel: one per group of the recording (a handful) */
typedef struct {
  const char *name;
  int world0, stride, size;
  double free_at;
} channel;

static channel *channel_of(channel *ch, int *n, const mt_comm_event *ev) {
  for (int i = 0; i < *n; i++)
    if (ch[i].name == ev->name && ch[i].world0 == ev->world0 && ch[i].stride == ev->stride &&
        ch[i].size == ev->size)
      return &ch[i];
  if (*n == 32) return &ch[31]; /* (a mesh has 10 kinds of group) */
  ch[*n] = (channel){ev->name, ev->world0, ev->stride, ev->size, 0.0};
  return &ch[(*n)++];
}

typedef struct {
  double issue, busy0, d;
  channel *c;
  int dp;
} pending;

void mt_cost_replay_step(const mt_comm_rec *rec, const mt_price *q, const mt_cost_replay_opts *o,
                         mt_cost_replay *out) {
  memset(out, 0, sizeof *out);
  channel ch[32];
  int n_ch = 0;
  pending *pend = mt_calloc((size_t)rec->next_id + 1, sizeof *pend);
  const double ov = q->overlap;
  /* point-to-point calls up to the last op are the schedule's messages (and
   * cp's ring), priced there; after it, the tied embeddings' exchange */
  long last_op = -1;
  for (long i = 0; i < rec->n; i++)
    if (rec->ev[i].kind == MT_REC_OP_END) last_op = i;
  int skip = 0; /* inside calls priced apart */
  double T = 0.0, busy = 0.0, clock = rec->n ? rec->ev[0].t : 0.0, scale = 1.0;
  /* since the last op's end: the ops' seconds (the optimizer's) */
  double post_busy = 0.0;
  for (long i = 0; i < rec->n; i++) {
    const mt_comm_event *ev = &rec->ev[i];
    const double adv = (ev->t - clock) * scale; /* the ops since the last event */
    clock = ev->t;
    T += adv;
    busy += adv;
    post_busy += adv;
    const int timed = o->op_start && ev->id >= 0 && ev->id < o->n_ops;
    if (ev->kind == MT_REC_OP_BEGIN) {
      /* the schedule's op begins when the pipeline lets it (idle until
       * then), later if dp's waits held the rank */
      if (timed && T < o->op_start[ev->id]) T = o->op_start[ev->id];
      scale = o->op_scale[ev->op];
      continue;
    }
    if (ev->kind == MT_REC_SKIP_BEGIN || ev->kind == MT_REC_SKIP_END) {
      skip = ev->kind == MT_REC_SKIP_BEGIN;
      continue;
    }
    if (skip) continue;
    if (ev->kind == MT_REC_OP_END) {
      /* and takes at least its time in the schedule (the per-op stage
       * overhead, its tp share as the schedule prices them) */
      if (timed && T < o->op_end[ev->id]) {
        busy += o->op_end[ev->id] - T;
        T = o->op_end[ev->id];
      }
      scale = 1.0;
      post_busy = 0.0;
      continue;
    }
    if (ev->kind == MT_REC_WAIT) {
      pending *p = &pend[ev->id];
      if (!p->c) continue; /* (a call this recording did not see) */
      double start = p->issue > p->c->free_at ? p->issue : p->c->free_at, end = start + p->d;
      if (ov < 1 && T > start) { /* beside the rank's ops since: their share of the rate */
        double beside = T - start, ops = busy - p->busy0;
        if (ops > beside) ops = beside;
        double done = ov * ops + (beside - ops);
        end = done >= p->d ? start + beside * p->d / done : T + (p->d - done);
      }
      p->c->free_at = end;
      p->c = NULL;
      if (end > T) {
        if (p->dp) out->dp_exposed_s += end - T;
        else out->other_s += end - T;
        T = end;
      }
      continue;
    }
    if (ev->kind == MT_COLL_SEND || ev->kind == MT_COLL_RECV || ev->kind == MT_COLL_SENDRECV) {
      if (i < last_op || ev->kind != MT_COLL_SENDRECV) continue;
      /* both ways at once, each on its own link: done when both arrive */
      const int dpn = q->devices_per_node;
      const int a = ev->world0 + ev->rank * ev->stride, b = ev->world0 + ev->peer * ev->stride;
      const double d = mt_price_link_s(q, dpn <= 0 || a / dpn == b / dpn, ev->bytes * o->msg_scale);
      T += d;
      out->p2p_s += d;
      continue;
    }
    const int dp = is_dp(ev->name), grads = ev->kind == MT_COLL_REDUCE || ev->kind == MT_COLL_SCATTER;
    const double bytes = ev->host ? ev->bytes
                         : dp     ? ev->bytes * (grads ? o->reduce_scale : o->gather_scale)
                                  : ev->bytes * o->msg_scale;
    const double d = mt_price_coll_s(q, bytes, ev->size, per_node(q, ev), ev->kind == MT_COLL_ALLTOALL);
    channel *c = channel_of(ch, &n_ch, ev);
    if (dp) out->dp_total_s += d;
    if (ev->id > 0) { /* non-blocking: the rank goes on */
      if (ev->host) continue; /* (moves untimed on the virtual device) */
      pend[ev->id] = (pending){.issue = T, .busy0 = busy, .d = d, .c = c, .dp = dp};
      continue;
    }
    const double arrived = T;
    if (spans_stages(ev) && out->n_sync < MT_REPLAY_SYNCS) { /* every stage's rank takes part */
      if (out->n_sync < o->n_sync && T < o->sync_at[out->n_sync]) T = o->sync_at[out->n_sync];
      out->sync_arrival[out->n_sync++] = arrived;
    }
    double start = T > c->free_at ? T : c->free_at, end = start + d;
    c->free_at = end;
    if (dp) out->dp_exposed_s += end - T;
    else out->other_s += end - T;
    T = end;
  }
  out->span_s = T;
  out->ops_s = busy;
  out->post_s = post_busy;
  free(pend);
}
