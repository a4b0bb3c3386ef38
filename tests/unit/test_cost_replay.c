/* test_cost_replay: the recording of a count-only rank's collectives
 * (comm's record.c) and the cost model's replay of it (plan's
 * cost_replay.c), which prices dp's exposure in issue order as the virtual
 * device runs it. No MPI.
 *
 *   - the recording: a count-only mesh's calls in order, each with its
 *     group, kind and bytes; a non-blocking call's wait names its call;
 *     groups of one rank are not recorded; marks keep their place;
 *   - a gather waited at once (ZeRO-3's first unit: nothing before it to
 *     hide behind) is exposed whole;
 *   - one issued before compute runs at the overlap share of its rate
 *     beside it, at the full rate once the rank waits: exposed d - ov c
 *     where c < d / ov, nothing beyond the wait where c >= d / ov;
 *   - two calls on one group take its channel one after another, in issue
 *     order whatever the order of their waits (and a blocking call after
 *     the non-blocking ones issued before it); calls on two groups run
 *     side by side;
 *   - a blocking call holds the rank; a call on another group than dp's is
 *     not dp's exposure;
 *   - under a pipeline an op begins no earlier than the schedule's start,
 *     and a call over every stage waits for the latest stage's arrival;
 *   - calls between skip marks (priced apart) are left out; the tied
 *     embeddings' exchange after the last op is priced on its link.
 * Exits 1 naming every failing check. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../check.h"
#include "plan/cost_internal.h"

static const double TOL = 1e-12;

static mt_price price(void) {
  mt_price q = {0};
  q.gemm[1].n = 1;
  q.gemm[1].flops[0] = 1e9;
  q.gemm[1].gflops[0] = 1000.0;
  q.elementwise_gbs = 1000.0;
  q.act_bytes = 4;
  q.devices_per_node = 8;
  q.intra_gbs = 100.0, q.intra_us = 5.0;
  q.inter_gbs = 10.0, q.inter_us = 10.0;
  q.overlap = 0.5;
  return q;
}

static mt_cost_replay_opts opts(void) {
  mt_cost_replay_opts o = {.reduce_scale = 1.0, .gather_scale = 1.0, .msg_scale = 1.0};
  for (int k = 0; k < MT_PP_NKINDS; k++) o.op_scale[k] = 1.0;
  return o;
}

/* a hand-made recording */
typedef struct {
  mt_comm_event ev[64];
  int n, next_id;
} script;

static int call(script *s, double t, const char *group, int size, int kind, double bytes,
                int nonblocking) {
  mt_comm_event *e = &s->ev[s->n++];
  *e = (mt_comm_event){.t = t, .bytes = bytes, .name = group, .size = size, .stride = 1,
                       .kind = kind, .id = nonblocking ? ++s->next_id : 0};
  return e->id;
}
static void mark(script *s, double t, int what, int id, int op) {
  s->ev[s->n++] = (mt_comm_event){.t = t, .kind = what, .id = id, .op = op};
}

static mt_cost_replay replay(const script *s, const mt_price *q, const mt_cost_replay_opts *o) {
  mt_comm_rec rec = {.ev = (mt_comm_event *)s->ev, .n = s->n, .cap = s->n,
                     .next_id = s->next_id};
  mt_cost_replay_prep prep;
  mt_cost_replay_prepare(&rec, q, o, &prep);
  mt_cost_replay r;
  mt_cost_replay_step(&prep, o, &r);
  mt_cost_replay_prep_free(&prep);
  return r;
}

static void check(const char *what, double got, double want) {
  mt_check_err(what, fabs(got - want) / (fabs(want) > 0 ? fabs(want) : 1.0), TOL);
}

static void recording(void) {
  mt_mesh m;
  mt_err e = {0};
  MT_CHECK(mt_mesh_count(&m, 2, 1, 4, 2, 3, 1, 1, &e) == 0, "count mesh: %s", e.msg);
  mt_comm_rec rec = {0};
  mt_comm_rec *prev = mt_comm_rec_use(&rec);
  float buf[64] = {0};
  mt_request r;
  mt_iallreduce(&m.dp_g, buf, 64, MT_DT_F32, MT_RED_SUM, MT_LOC_HOST, &r);
  mt_comm_rec_mark(MT_REC_OP_BEGIN, 7, MT_PP_FWD);
  mt_allreduce(&m.tp_g, buf, 16, MT_DT_F32, MT_RED_SUM, MT_LOC_HOST);
  mt_comm_rec_mark(MT_REC_OP_END, 7, MT_PP_FWD);
  mt_wait(&r);
  mt_wait(&r); /* a second wait records nothing */
  mt_allreduce(&m.node, buf, 16, MT_DT_F32, MT_RED_SUM, MT_LOC_HOST); /* one rank: nothing */
  mt_comm_rec_use(prev);
  mt_allreduce(&m.tp_g, buf, 16, MT_DT_F32, MT_RED_SUM, MT_LOC_HOST); /* not recording */
  MT_CHECK(rec.n == 5, "recorded %ld events, want 5", rec.n);
  if (rec.n == 5) {
    const mt_comm_event *v = rec.ev;
    MT_CHECK(v[0].kind == MT_COLL_REDUCE && !strcmp(v[0].name, "dp") && v[0].size == 4 &&
                 v[0].id == 1 && v[0].bytes == mt_bytes_allreduce(256, 4) && v[0].host,
             "event 0: kind %d group %s size %d id %d bytes %g", v[0].kind, v[0].name,
             v[0].size, v[0].id, v[0].bytes);
    MT_CHECK(v[1].kind == MT_REC_OP_BEGIN && v[1].id == 7 && v[1].op == MT_PP_FWD,
             "event 1: kind %d id %d op %d", v[1].kind, v[1].id, v[1].op);
    MT_CHECK(v[2].kind == MT_COLL_REDUCE && !strcmp(v[2].name, "tp") && v[2].id == 0 &&
                 v[2].stride == 1 && v[2].world0 == 2,
             "event 2: kind %d group %s id %d stride %d world0 %d", v[2].kind, v[2].name,
             v[2].id, v[2].stride, v[2].world0);
    MT_CHECK(v[3].kind == MT_REC_OP_END, "event 3: kind %d", v[3].kind);
    MT_CHECK(v[4].kind == MT_REC_WAIT && v[4].id == 1, "event 4: kind %d id %d", v[4].kind,
             v[4].id);
  }
  mt_check_true("recording: calls, marks and waits in order", rec.n == 5);
  mt_comm_rec_free(&rec);
  mt_mesh_destroy(&m);
}

int main(void) {
  recording();
  const mt_price q = price();
  const mt_cost_replay_opts o0 = opts();
  const double B = 4e6; /* bytes of a gather over 4 ranks of a node */
  const double d = mt_price_coll_s(&q, B, 4, 4, 0), ov = q.overlap;
  MT_CHECK(d > 0, "a collective's price %g", d);

  { /* the first unit: gathered and waited at once, then the next one
     * prefetched beside c of compute */
    for (int i = 0; i < 2; i++) {
      const double c = i == 0 ? 0.5 * d / ov : 2.0 * d / ov; /* half hidden; all hidden */
      script s = {0};
      int a = call(&s, 0.0, "dp_cp", 4, MT_COLL_GATHER, B, 1);
      mark(&s, 0.0, MT_REC_WAIT, a, 0);
      int b = call(&s, 0.0, "dp_cp", 4, MT_COLL_GATHER, B, 1);
      mark(&s, c, MT_REC_WAIT, b, 0);
      mt_cost_replay r = replay(&s, &q, &o0);
      const double want = d + (i == 0 ? d - ov * c : 0.0);
      check(i == 0 ? "gathers: the first exposed, the next half hidden"
                   : "gathers: the first exposed, the next hidden",
            r.dp_exposed_s, want);
      check("gathers: the span", r.span_s, c + want);
      check("gathers: dp's whole seconds", r.dp_total_s, 2 * d);
    }
  }
  { /* two calls on one group, waited together: one after another; on two
     * groups: side by side */
    script s = {0};
    int a = call(&s, 0.0, "dp_cp", 4, MT_COLL_SCATTER, B, 1);
    int b = call(&s, 0.0, "dp_cp", 4, MT_COLL_SCATTER, B, 1);
    mark(&s, 0.0, MT_REC_WAIT, a, 0);
    mark(&s, 0.0, MT_REC_WAIT, b, 0);
    check("one channel: one after another", replay(&s, &q, &o0).dp_exposed_s, 2 * d);
    script t = {0};
    a = call(&t, 0.0, "dp", 4, MT_COLL_SCATTER, B, 1);
    b = call(&t, 0.0, "edp", 4, MT_COLL_SCATTER, B, 1);
    mark(&t, 0.0, MT_REC_WAIT, a, 0);
    mark(&t, 0.0, MT_REC_WAIT, b, 0);
    check("two channels: side by side", replay(&t, &q, &o0).dp_exposed_s, d);
    /* waited in the reverse order: the channel still goes in issue order
     * (the later call ends after the earlier one), as the virtual device's */
    script u = {0};
    const double dB = mt_price_coll_s(&q, B / 8, 4, 4, 0);
    a = call(&u, 0.0, "dp_cp", 4, MT_COLL_SCATTER, B, 1);
    b = call(&u, 0.0, "dp_cp", 4, MT_COLL_SCATTER, B / 8, 1);
    mark(&u, 0.0, MT_REC_WAIT, b, 0);
    mark(&u, 10 * d, MT_REC_WAIT, a, 0); /* (in wait order a would hide behind this compute) */
    check("waits in reverse: issue order", replay(&u, &q, &o0).dp_exposed_s, d + dB);
    /* a blocking call after a non-blocking one not yet waited: after it */
    script v = {0};
    a = call(&v, 0.0, "dp_cp", 4, MT_COLL_SCATTER, B, 1);
    call(&v, 0.0, "dp_cp", 4, MT_COLL_SCATTER, B / 8, 0);
    mark(&v, 10 * d, MT_REC_WAIT, a, 0);
    check("blocking behind an earlier call", replay(&v, &q, &o0).dp_exposed_s, d + dB);
  }
  { /* blocking: held; another group's call is not dp's; the priced dtype */
    script s = {0};
    call(&s, 0.0, "dp_cp", 4, MT_COLL_REDUCE, B, 0);
    call(&s, 1e-3, "tp", 4, MT_COLL_REDUCE, B, 0);
    mt_cost_replay_opts o = o0;
    o.reduce_scale = 0.5;
    mt_cost_replay r = replay(&s, &q, &o);
    const double d_half = mt_price_coll_s(&q, B / 2, 4, 4, 0);
    check("blocking: dp's reduction in the priced dtype", r.dp_exposed_s, d_half);
    check("blocking: tp's call apart", r.other_s, d);
    check("blocking: the span", r.span_s, d_half + 1e-3 + d);
  }
  { /* a pipeline rank: ops at the schedule's times, a call over every
     * stage waiting for the latest, the tied exchange, skip marks */
    const double B2 = 4e8, d2 = mt_price_coll_s(&q, B2, 4, 4, 0);
    script s = {0};
    mark(&s, 0.0, MT_REC_OP_BEGIN, 0, MT_PP_FWD);
    mark(&s, 1e-3, MT_REC_OP_END, 0, MT_PP_FWD);
    mark(&s, 1e-3, MT_REC_OP_BEGIN, 1, MT_PP_BWD);
    int a = call(&s, 1.5e-3, "dp_cp", 4, MT_COLL_SCATTER, B2, 1);
    mark(&s, 3e-3, MT_REC_OP_END, 1, MT_PP_BWD);
    s.ev[s.n++] = (mt_comm_event){.t = 3e-3, .bytes = B, .name = "pp", .size = 2, .stride = 8,
                                  .rank = 0, .peer = 1, .kind = MT_COLL_SENDRECV};
    mark(&s, 3e-3, MT_REC_WAIT, a, 0);
    call(&s, 3e-3, "pp", 2, MT_COLL_REDUCE, 8, 0);
    mark(&s, 3e-3, MT_REC_SKIP_BEGIN, 0, 0);
    call(&s, 3e-3, "dp_cp", 4, MT_COLL_ALLTOALL, B2, 0);
    mark(&s, 3e-3, MT_REC_SKIP_END, 0, 0);
    const double start[2] = {2e-3, 3.2e-3}, end[2] = {3e-3, 5.5e-3};
    mt_cost_replay_opts o = o0;
    o.op_start = start, o.op_end = end, o.n_ops = 2;
    mt_cost_replay r = replay(&s, &q, &o);
    /* the forward waits for the schedule (2 ms), the backward too (3.2 ms);
     * the scatter issued 0.5 ms into it runs beside its compute until the
     * schedule's end of the op (5.5 ms) at the overlap share, then the tied
     * exchange (ranks 0 and 8: two nodes) at the full rate, then the wait */
    const double tied = mt_price_link_s(&q, 0, B);
    const double t_wait = 5.5e-3 + tied, done = ov * (5.5e-3 - 3.7e-3) + tied;
    MT_CHECK(done < d2, "the case needs a scatter longer than what hides it (%g, %g)", done, d2);
    check("pipeline: dp's wait after the schedule", r.dp_exposed_s, d2 - done);
    check("pipeline: the tied exchange", r.p2p_s, tied);
    MT_CHECK(r.n_sync == 1, "pipeline: %d calls over every stage, want 1", r.n_sync);
    const double arrival = t_wait + (d2 - done);
    check("pipeline: arrival at the stages' call", r.sync_arrival[0], arrival);
    const double pp_d = mt_price_coll_s(&q, 8, 2, 2, 0);
    check("pipeline: the span (skipped calls left out)", r.span_s, arrival + pp_d);
    check("pipeline: the ops' seconds", r.ops_s, 1e-3 + 2.3e-3);
    /* the latest stage arrives 1 ms later: this one waits */
    const double sync_at = arrival + 1e-3;
    o.sync_at = &sync_at, o.n_sync = 1;
    r = replay(&s, &q, &o);
    check("pipeline: the call waits for the latest stage", r.span_s, sync_at + pp_d);
    check("pipeline: nothing after the last op but waits", r.post_s, 0.0);
  }
  { /* ranks together: each call over every stage starts at the latest
     * arrival (rank 1 computes 2 ms more before it), the rank that waited
     * then runs its dp after it */
    script s[2];
    memset(s, 0, sizeof s);
    for (int r = 0; r < 2; r++) {
      call(&s[r], 0.0, "pp", 2, MT_COLL_REDUCE, 8, 0);
      call(&s[r], 1e-3 + 2e-3 * r, "pp", 2, MT_COLL_REDUCE, 8, 0);
      call(&s[r], 1e-3 + 2e-3 * r, "dp", 4, MT_COLL_GATHER, B, 0);
    }
    mt_cost_replay_prep prep[2];
    const mt_cost_replay_prep *pp[2] = {&prep[0], &prep[1]};
    mt_cost_replay_opts o[2] = {o0, o0};
    for (int r = 0; r < 2; r++) {
      mt_comm_rec rec = {.ev = s[r].ev, .n = s[r].n, .cap = s[r].n, .next_id = s[r].next_id};
      mt_cost_replay_prepare(&rec, &q, &o[r], &prep[r]);
    }
    mt_cost_replay out[2];
    mt_cost_replay_stages(pp, o, 2, out);
    const double pp_d = mt_price_coll_s(&q, 8, 2, 2, 0);
    for (int r = 0; r < 2; r++) {
      char what[64];
      snprintf(what, sizeof what, "stages: rank %d's span", r);
      check(what, out[r].span_s, 2 * pp_d + 3e-3 + d);
      MT_CHECK(out[r].n_sync == 2, "stages: rank %d met %d calls over every stage", r,
               out[r].n_sync);
      mt_cost_replay_prep_free(&prep[r]);
    }
    check("stages: rank 0 arrived first", out[0].sync_arrival[1], pp_d + 1e-3);
    check("stages: rank 1 later", out[1].sync_arrival[1], pp_d + 3e-3);
  }
  return mt_check_summary("test_cost_replay");
}
