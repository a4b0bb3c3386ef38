/* dp's exposure in issue order: the plan's priced step records one rank's
 * collectives as the real code makes them (comm.h's recording: each call,
 * each non-blocking call's wait, the pipeline ops' bounds, on the step's op
 * clock), and this replays them on a timeline as the virtual device runs
 * them (comm/virtual.c):
 *
 *   - a group's collectives take its channel one after another in the
 *     order they were issued (a wait, or a blocking call, first prices
 *     the group's calls issued before it), each from max(issue, the
 *     channel free) for its price (mt_price_coll_s on the group's ranks
 *     and nodes);
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

/* a group whose ranks are on every pipeline stage: its blocking call
 * waits for the latest of them */
static int spans_stages(const char *name) { return !strcmp(name, "pp") || !strcmp(name, "world"); }

/* the recording's groups, one channel each */
static int channel_of(const mt_comm_event **ch, int *n, const mt_comm_event *ev) {
  for (int i = 0; i < *n; i++)
    if (ch[i]->name == ev->name && ch[i]->world0 == ev->world0 && ch[i]->stride == ev->stride &&
        ch[i]->size == ev->size)
      return i;
  if (*n == MT_REPLAY_CHANNELS) return MT_REPLAY_CHANNELS - 1; /* (a mesh has 10 kinds) */
  ch[*n] = ev;
  return (*n)++;
}

void mt_cost_replay_prepare(const mt_comm_rec *rec, const mt_price *q,
                            const mt_cost_replay_opts *o, mt_cost_replay_prep *out) {
  memset(out, 0, sizeof *out);
  out->ev = mt_calloc((size_t)rec->n + 1, sizeof *out->ev);
  out->n_ids = rec->next_id + 1;
  out->overlap = q->overlap;
  for (int k = 0; k < MT_PP_NKINDS; k++) out->op_scale[k] = o->op_scale[k];
  const mt_comm_event *ch[MT_REPLAY_CHANNELS];
  int n_ch = 0;
  /* point-to-point calls up to the last op are the schedule's messages (and
   * cp's ring), priced there; after it, the tied embeddings' exchange */
  long last_op = -1;
  for (long i = 0; i < rec->n; i++)
    if (rec->ev[i].kind == MT_REC_OP_END) last_op = i;
  /* the ids this recording issued: a wait for any other is dropped here,
   * so the replay's table of calls in flight needs no zeroing */
  char *issued = mt_calloc((size_t)out->n_ids, 1);
  for (long i = 0; i < rec->n; i++) {
    const mt_comm_event *ev = &rec->ev[i];
    const int p2p = ev->kind == MT_COLL_SEND || ev->kind == MT_COLL_RECV ||
                    ev->kind == MT_COLL_SENDRECV;
    if (ev->kind < MT_REC_WAIT && !p2p && ev->id > 0 && ev->id < out->n_ids && !ev->host)
      issued[ev->id] = 1; /* (the calls the switch below makes MT_RP_ISSUE) */
  }
  for (long i = 0; i < rec->n; i++) {
    const mt_comm_event *ev = &rec->ev[i];
    mt_cost_replay_ev *x = &out->ev[out->n];
    *x = (mt_cost_replay_ev){.t = ev->t, .id = ev->id, .op = ev->op};
    switch (ev->kind) {
    case MT_REC_OP_BEGIN: x->what = MT_RP_OP_BEGIN; break;
    case MT_REC_OP_END: x->what = MT_RP_OP_END; break;
    case MT_REC_SKIP_BEGIN: x->what = MT_RP_SKIP_BEGIN; break;
    case MT_REC_SKIP_END: x->what = MT_RP_SKIP_END; break;
    case MT_REC_WAIT:
      if (ev->id <= 0 || ev->id >= out->n_ids || !issued[ev->id]) continue;
      x->what = MT_RP_WAIT;
      break;
    case MT_COLL_SEND:
    case MT_COLL_RECV:
    case MT_COLL_SENDRECV: {
      if (i < last_op || ev->kind != MT_COLL_SENDRECV) continue;
      /* both ways at once, each on its own link: done when both arrive */
      const int a = ev->world0 + ev->rank * ev->stride, b = ev->world0 + ev->peer * ev->stride;
      x->what = MT_RP_EXCHANGE;
      x->d = mt_price_link_s(q, mt_price_same_node(q, a, b), ev->bytes * o->msg_scale);
      break;
    }
    default: {
      if (ev->id > 0 && ev->host) continue; /* (moves untimed on the virtual device) */
      const int grads = ev->kind == MT_COLL_REDUCE || ev->kind == MT_COLL_SCATTER;
      x->dp = (char)is_dp(ev->name);
      x->spans = (char)spans_stages(ev->name);
      const double bytes = ev->host ? ev->bytes
                           : x->dp  ? ev->bytes * (grads ? o->reduce_scale : o->gather_scale)
                                    : ev->bytes * o->msg_scale;
      const int k = mt_price_group_per_node(q, ev->world0, ev->stride, ev->size);
      x->d = mt_price_coll_s(q, bytes, ev->size, k, mt_comm_price_kind(ev->kind));
      x->chan = channel_of(ch, &n_ch, ev);
      x->what = ev->id > 0 ? MT_RP_ISSUE : MT_RP_CALL;
    }
    }
    out->n++;
  }
  free(issued);
}

void mt_cost_replay_prep_free(mt_cost_replay_prep *p) {
  free(p->ev);
  memset(p, 0, sizeof *p);
}

/* a non-blocking call in flight: queued on its channel in issue order
 * (next: the call issued after it there, -1 none) until priced, then its
 * end */
typedef struct {
  double issue, busy0, d, end;
  int chan; /* -1: none (not seen, or waited) */
  int next, priced;
  char dp;
} pending;

/* a rank's replay, resumable at a call over every stage */
typedef struct {
  const mt_cost_replay_prep *p;
  const mt_cost_replay_opts *o;
  long i;
  int skip; /* inside calls priced apart */
  double T, busy, clock, scale;
  double post_busy; /* the ops' seconds since the last op's end (the optimizer's) */
  double busy_in;   /* the ops' seconds inside the schedule's ops */
  int in_op;
  double free_at[MT_REPLAY_CHANNELS];
  int qhead[MT_REPLAY_CHANNELS], qtail[MT_REPLAY_CHANNELS]; /* the calls not priced */
  pending *pend;
  mt_cost_replay out;
} state;

static void state_init(state *s, const mt_cost_replay_prep *p, const mt_cost_replay_opts *o) {
  memset(s, 0, sizeof *s);
  s->p = p, s->o = o;
  s->clock = p->n ? p->ev[0].t : 0.0;
  s->scale = 1.0;
  /* (every wait left in the events follows its call's issue, which fills
   * its entry: no zeroing, which had been a tenth of a large search) */
  s->pend = mt_malloc((size_t)p->n_ids * sizeof *s->pend);
  for (int c = 0; c < MT_REPLAY_CHANNELS; c++) s->qhead[c] = s->qtail[c] = -1;
}

/* prices channel c's oldest call not yet priced, now (s->T): it runs from
 * max(issue, the channel free) beside the rank's ops since its issue at
 * the overlap share of its rate, at the full rate from now on */
static void price_oldest(state *s, int c) {
  const int id = s->qhead[c];
  pending *w = &s->pend[id];
  const double ov = s->p->overlap, fa = s->free_at[c];
  double start = w->issue > fa ? w->issue : fa, end = start + w->d;
  if (ov < 1 && s->T > start) { /* beside the rank's ops since: their share of the rate */
    double beside = s->T - start, ops = s->busy - w->busy0;
    if (ops > beside) ops = beside;
    double done = ov * ops + (beside - ops);
    end = done >= w->d ? start + beside * w->d / done : s->T + (w->d - done);
  }
  s->free_at[c] = end;
  w->end = end;
  w->priced = 1;
  s->qhead[c] = w->next;
  if (s->qhead[c] < 0) s->qtail[c] = -1;
}

/* Runs on; returns 1 paused at a call over every stage whose start is not
 * known yet (pause: o->n_sync of them are; its arrival is recorded), 0 at
 * the end. */
static int state_run(state *s, int pause) {
  const mt_cost_replay_prep *p = s->p;
  const mt_cost_replay_opts *o = s->o;
  mt_cost_replay *out = &s->out;
  for (; s->i < p->n; s->i++) {
    const mt_cost_replay_ev *ev = &p->ev[s->i];
    const double adv = (ev->t - s->clock) * s->scale; /* the ops since the last event */
    s->clock = ev->t;
    s->T += adv;
    s->busy += adv;
    s->post_busy += adv;
    if (s->in_op) s->busy_in += adv;
    const int timed = o->op_start && ev->id >= 0 && ev->id < o->n_ops;
    switch (ev->what) {
    case MT_RP_OP_BEGIN:
      /* the schedule's op begins when the pipeline lets it (idle until
       * then), later if dp's waits held the rank */
      if (timed && s->T < o->op_start[ev->id]) s->T = o->op_start[ev->id];
      s->scale = p->op_scale[ev->op];
      s->in_op = 1;
      continue;
    case MT_RP_OP_END:
      /* and takes at least its time in the schedule (the per-op stage
       * overhead, its tp share as the schedule prices them) */
      if (timed && s->T < o->op_end[ev->id]) {
        s->busy += o->op_end[ev->id] - s->T;
        s->busy_in += o->op_end[ev->id] - s->T;
        s->T = o->op_end[ev->id];
      }
      s->scale = 1.0;
      s->in_op = 0;
      s->post_busy = 0.0;
      continue;
    case MT_RP_SKIP_BEGIN:
    case MT_RP_SKIP_END:
      s->skip = ev->what == MT_RP_SKIP_BEGIN;
      continue;
    default: break;
    }
    if (s->skip) { /* priced apart: its wait, if outside, finds nothing in flight */
      if (ev->what == MT_RP_ISSUE) s->pend[ev->id].chan = -1;
      continue;
    }
    if (ev->what == MT_RP_WAIT) {
      pending *w = &s->pend[ev->id];
      if (w->chan < 0) continue; /* (a call this recording did not see) */
      while (!w->priced) price_oldest(s, w->chan);
      const double end = w->end;
      w->chan = -1;
      if (end > s->T) {
        if (w->dp) out->dp_exposed_s += end - s->T;
        else out->other_s += end - s->T;
        s->T = end;
      }
      continue;
    }
    if (ev->what == MT_RP_EXCHANGE) {
      s->T += ev->d;
      out->p2p_s += ev->d;
      continue;
    }
    if (ev->dp) out->dp_total_s += ev->d;
    if (ev->what == MT_RP_ISSUE) { /* non-blocking: the rank goes on */
      s->pend[ev->id] = (pending){.issue = s->T, .busy0 = s->busy, .d = ev->d, .chan = ev->chan,
                                  .next = -1, .dp = ev->dp};
      const int c = ev->chan;
      if (s->qtail[c] >= 0) s->pend[s->qtail[c]].next = ev->id;
      else s->qhead[c] = ev->id;
      s->qtail[c] = ev->id;
      continue;
    }
    /* blocking: on the channel after the calls issued before it */
    while (s->qhead[ev->chan] >= 0) price_oldest(s, ev->chan);
    if (ev->spans && out->n_sync < MT_REPLAY_SYNCS) { /* every stage's rank takes part */
      const int k = out->n_sync;
      if (k >= o->n_sync && pause) {
        out->sync_arrival[k] = s->T;
        return 1; /* (the event again on resuming: no time passes) */
      }
      if (k < o->n_sync && s->T < o->sync_at[k]) s->T = o->sync_at[k];
      if (k >= o->n_sync) out->sync_arrival[k] = s->T;
      out->n_sync++;
    }
    const double fa = s->free_at[ev->chan];
    double start = s->T > fa ? s->T : fa, end = start + ev->d;
    s->free_at[ev->chan] = end;
    if (ev->dp) out->dp_exposed_s += end - s->T;
    else out->other_s += end - s->T;
    s->T = end;
  }
  out->span_s = s->T;
  out->ops_s = s->busy;
  out->post_s = s->post_busy;
  out->ops_in_s = s->busy_in;
  return 0;
}

void mt_cost_replay_step(const mt_cost_replay_prep *p, const mt_cost_replay_opts *o,
                         mt_cost_replay *out) {
  state s;
  state_init(&s, p, o);
  state_run(&s, 0);
  *out = s.out;
  free(s.pend);
}

void mt_cost_replay_stages(const mt_cost_replay_prep *const *p, const mt_cost_replay_opts *o,
                           int n, mt_cost_replay *out) {
  state *s = mt_calloc((size_t)n, sizeof *s);
  mt_cost_replay_opts *so = mt_calloc((size_t)n, sizeof *so);
  double sync_at[MT_REPLAY_SYNCS];
  for (int r = 0; r < n; r++) {
    so[r] = o[r];
    so[r].sync_at = sync_at, so[r].n_sync = 0;
    state_init(&s[r], p[r], &so[r]);
  }
  /* every rank to its next call over every stage; the call starts at the
   * latest arrival */
  for (int k = 0;; k++) {
    int paused = 0;
    double latest = 0.0;
    for (int r = 0; r < n; r++)
      if (state_run(&s[r], k < MT_REPLAY_SYNCS)) {
        paused = 1;
        if (s[r].out.sync_arrival[k] > latest) latest = s[r].out.sync_arrival[k];
      }
    if (!paused) break;
    sync_at[k] = latest;
    for (int r = 0; r < n; r++) so[r].n_sync = k + 1;
  }
  for (int r = 0; r < n; r++) {
    out[r] = s[r].out;
    free(s[r].pend);
  }
  free(s);
  free(so);
}
