/* test_pp_schedule: pipeline schedules as data, checked by simulation (no MPI).
 *
 * For every schedule (gpipe, 1f1b, interleaved, zb-h1, breadth-first),
 * pp = 1..8, m = pp..4pp (interleaved: multiples of pp, v = 2..4;
 * breadth-first: v = 1..4, any m; gpipe and breadth-first also m < pp):
 *   - the validator accepts the op lists: each (micro-batch, chunk) forwarded
 *     once and backed once, F before B before W, data dependencies across
 *     stages, every send received in the same order on the peer, no wait
 *     cycle, in-flight activation sets within the schedule's promise (1F1B
 *     min(m, pp - rank); zb-h1: min(m, pp), the same peak over stages;
 *     gpipe: m), and the promise is reached on rank 0;
 *   - the simulated bubble (F = 1, B = 2 per stage; a chunk's ops 1/v of
 *     that) equals theory within 1e-9: (p-1)/(m+p-1) for gpipe and 1f1b,
 *     (p-1)/(v*m+p-1) for interleaved, and for breadth-first when m >= p
 *     (its forwards of a chunk never wait for the previous chunk then:
 *     makespan 3m + 3(p-1)/v);
 *   - zb-h1 (F = B = W = 1) has a smaller bubble than 1f1b for pp > 1, and
 *     equals its theory (p-1)(F+B-W) = p-1 idle units per stage;
 *   - a broken list is refused, and for the reason expected: a dropped
 *     receive (a backward before its gradient arrived), swapped receives
 *     (order), a backward before its forward, two lists that wait for each
 *     other (deadlock: a receive moved before the send it answers, sends
 *     held back to the end);
 *   - the config checks name the keys (m < pp, v without interleaved,
 *     interleaved m % pp, pp*v > layers);
 *   - balanced stage layers cover the model in order.
 * Exits 1 naming every failing check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "parallel/parallel.h"

static double simulate(mt_pp_sched kind, int pp, int m, int v, mt_pp_sim *sim) {
  mt_pp_schedule s;
  mt_pp_schedule_build(&s, kind, pp, m, v);
  mt_err err = {0};
  const char *msg = err.msg;
  int rc = kind == MT_SCHED_ZBH1 ? mt_pp_schedule_validate(&s, 1.0, 2.0, 1.0, 1.0, sim, &err)
           : kind == MT_SCHED_ZBV /* F = B = W per stage, a chunk half a stage */
               ? mt_pp_schedule_validate(&s, 0.5, 1.0, 0.5, 0.5, sim, &err)
               : mt_pp_schedule_validate(&s, 1.0 / v, 2.0 / v, 1.0 / v, 1.0 / v, sim, &err);
  MT_CHECK(rc == 0, "%s pp=%d m=%d v=%d: %s", mt_pp_sched_name(kind), pp, m, v, msg);
  if (rc == 0)
    for (int r = 0; r < pp && r < 64; r++)
      MT_CHECK(sim->peak_inflight[r] <= s.max_inflight[r],
            "%s pp=%d m=%d v=%d rank %d: peak %d > promise %d", mt_pp_sched_name(kind), pp, m,
            v, r, sim->peak_inflight[r], s.max_inflight[r]);
  if (rc == 0 && kind != MT_SCHED_INTERLEAVED && kind != MT_SCHED_ZBV)
    MT_CHECK(sim->peak_inflight[0] == s.max_inflight[0], "%s pp=%d m=%d: rank 0 peak %d, promise %d",
          mt_pp_sched_name(kind), pp, m, sim->peak_inflight[0], s.max_inflight[0]);
  for (int r = 0; r < pp; r++) {
    int lim = kind == MT_SCHED_1F1B ? pp - r : kind == MT_SCHED_ZBH1 ? pp : m * v;
    if (kind == MT_SCHED_ZBV) /* at most 1F1B's peak: pp whole-stage sets, 2pp chunk sets */
      MT_CHECK(s.max_inflight[r] <= 2 * pp, "zb-v pp=%d m=%d: promise of rank %d is %d", pp, m, r,
            s.max_inflight[r]);
    else if (kind != MT_SCHED_INTERLEAVED)
      MT_CHECK(s.max_inflight[r] == (m * v < lim ? m * v : lim), "%s: promise of rank %d is %d",
            mt_pp_sched_name(kind), r, s.max_inflight[r]);
  }
  mt_pp_schedule_free(&s);
  return rc == 0 ? sim->bubble : -1.0;
}

/* The bubble of a schedule of v chunks a rank (breadth-first, interleaved)
 * equals its theory, (pp - 1) / (v m + pp - 1); a row of the table printed
 * for v = 2 at the usual sizes. */
static void check_v_bubble(mt_pp_sched kind, int pp, int m, int v, mt_pp_sim *sim) {
  const char *name = mt_pp_sched_name(kind);
  double theory = (double)(pp - 1) / (v * m + pp - 1);
  double bubble = simulate(kind, pp, m, v, sim);
  MT_CHECK(fabs(bubble - theory) < 1e-9, "%s pp=%d m=%d v=%d: bubble %.6f, theory %.6f", name, pp,
           m, v, bubble, theory);
  if ((pp == 2 || pp == 4) && (m == 4 || m == 8 || m == 16) && v == 2)
    printf("%-12s %3d %3d %2d %10.4f %10.4f\n", name, pp, m, v, bubble, theory);
}

/* Mutate rank r's list with f and expect the validator to refuse it. */
static void expect_refused(const char *what, mt_pp_sched kind, int pp, int m, int v, int r,
                           void (*f)(mt_pp_schedule *, int), const char *needle) {
  mt_pp_schedule s;
  mt_pp_schedule_build(&s, kind, pp, m, v);
  f(&s, r);
  mt_err err = {0};
  const char *msg = err.msg;
  int rc = mt_pp_schedule_validate(&s, 1, 2, 1, 1, NULL, &err);
  MT_CHECK(rc != 0 && strstr(msg, needle), "%s: expected a refusal with '%s', got rc=%d '%s'", what,
        needle, rc, msg);
  mt_pp_schedule_free(&s);
}

/* mt_pp_sched_check(kind, pp, m, v, n_layer): accepted where needle is
 * NULL, else refused with a message containing needle */
static void expect_config(const char *what, mt_pp_sched kind, int pp, int m, int v, int n_layer,
                          const char *needle) {
  mt_err e = {0};
  int rc = mt_pp_sched_check(kind, pp, m, v, n_layer, &e);
  if (needle)
    MT_CHECK(rc != 0 && strstr(e.msg, needle), "%s: %s", what, e.msg);
  else
    MT_CHECK(rc == 0, "%s: %s", what, e.msg);
}

static int find(const mt_pp_schedule *s, int r, mt_pp_op_kind k, int nth) {
  for (int i = 0; i < s->n_ops[r]; i++)
    if (s->ops[r][i].kind == k && nth-- == 0) return i;
  return -1;
}
static void drop_first_recv_grad(mt_pp_schedule *s, int r) {
  int i = find(s, r, MT_PP_RECV_GRAD, 0);
  memmove(&s->ops[r][i], &s->ops[r][i + 1], (size_t)(s->n_ops[r] - i - 1) * sizeof(mt_pp_op));
  s->n_ops[r]--;
  /* the backward that needed it now waits for nothing: put a receive of a
   * later micro-batch first instead, which never comes before the earlier */
  int j = find(s, r, MT_PP_RECV_GRAD, 0);
  s->ops[r][j].mb = s->m; /* out of range */
}
static void swap_recvs(mt_pp_schedule *s, int r) {
  /* the first two activation receives name each other's micro-batch */
  int a = find(s, r, MT_PP_RECV_ACT, 0), b = find(s, r, MT_PP_RECV_ACT, 1);
  int t = s->ops[r][a].mb;
  s->ops[r][a].mb = s->ops[r][b].mb;
  s->ops[r][b].mb = t;
}
static void backward_first(mt_pp_schedule *s, int r) {
  /* last rank: F0 B0 ... -> B0 F0 ... */
  int f = find(s, r, MT_PP_FWD, 0), b = find(s, r, MT_PP_BWD, 0);
  mt_pp_op t = s->ops[r][f];
  s->ops[r][f] = s->ops[r][b];
  s->ops[r][b] = t;
}
static void sends_last(mt_pp_schedule *s, int r) {
  /* rank r holds back all its activation sends (in their order) until after
   * its backwards: the next stage waits for the first of them, while rank r
   * waits for that stage's gradients, which need them */
  int n = s->n_ops[r], k = 0, j = 0;
  mt_pp_op *held = malloc((size_t)n * sizeof *held);
  for (int i = 0; i < n; i++) {
    if (s->ops[r][i].kind == MT_PP_SEND_ACT)
      held[j++] = s->ops[r][i];
    else
      s->ops[r][k++] = s->ops[r][i];
  }
  memcpy(&s->ops[r][k], held, (size_t)j * sizeof *held);
  free(held);
}
static void zbv_turn_reversed(mt_pp_schedule *s, int r) {
  /* the first forward of chunk 1 swapped with the first forward of chunk 0 */
  int a = -1, b = -1;
  for (int i = 0; i < s->n_ops[r]; i++) {
    const mt_pp_op *o = &s->ops[r][i];
    if (o->kind != MT_PP_FWD || o->mb != 0) continue;
    if (o->chunk == 0 && a < 0) a = i;
    if (o->chunk == 1 && b < 0) b = i;
  }
  mt_pp_op t = s->ops[r][a];
  s->ops[r][a] = s->ops[r][b];
  s->ops[r][b] = t;
}
static void w_first(mt_pp_schedule *s, int r) {
  /* the first W moved right before its B */
  int w = find(s, r, MT_PP_BWD_WEIGHT, 0);
  int b = -1;
  for (int i = 0; i < w; i++)
    if (s->ops[r][i].kind == MT_PP_BWD_INPUT && s->ops[r][i].mb == s->ops[r][w].mb &&
        s->ops[r][i].chunk == s->ops[r][w].chunk)
      b = i;
  mt_pp_op t = s->ops[r][w];
  memmove(&s->ops[r][b + 1], &s->ops[r][b], (size_t)(w - b) * sizeof(mt_pp_op));
  s->ops[r][b] = t;
}
static void circular_wait(mt_pp_schedule *s, int r) {
  /* rank 0 receives mb 0's gradient before it sends mb 0 on */
  int send = find(s, r, MT_PP_SEND_ACT, 0), recv = find(s, r, MT_PP_RECV_GRAD, 0);
  mt_pp_op t = s->ops[r][recv];
  memmove(&s->ops[r][send + 1], &s->ops[r][send], (size_t)(recv - send) * sizeof(mt_pp_op));
  s->ops[r][send] = t;
}

int main(void) {
  mt_pp_sim sim;
  int cases = 0;
  printf("%-12s %3s %3s %2s %10s %10s\n", "schedule", "pp", "m", "v", "simulated", "theory");
  for (int pp = 1; pp <= 8; pp++) {
    for (int m = 1; m <= 4 * pp; m++) {
      double th = (double)(pp - 1) / (m + pp - 1);
      double g = simulate(MT_SCHED_GPIPE, pp, m, 1, &sim);
      MT_CHECK(fabs(g - th) < 1e-9, "gpipe pp=%d m=%d: bubble %.6f, theory %.6f", pp, m, g, th);
      cases++;
      for (int v = 1; m < pp && v <= 2; v++) { /* breadth-first below pp micro-batches: valid */
        simulate(MT_SCHED_BFS, pp, m, v, &sim);
        cases++;
      }
      if (m < pp) continue;
      double f = simulate(MT_SCHED_1F1B, pp, m, 1, &sim);
      MT_CHECK(fabs(f - th) < 1e-9, "1f1b pp=%d m=%d: bubble %.6f, theory %.6f", pp, m, f, th);
      double z = simulate(MT_SCHED_ZBH1, pp, m, 1, &sim);
      if (pp > 1)
        MT_CHECK(z < f - 1e-9, "zb-h1 pp=%d m=%d: bubble %.6f not below 1f1b %.6f", pp, m, z, f);
      /* ZB-H1's bubble in theory: (p-1)(F+B-W) = p-1 units of 3m+p-1 */
      double zth = (double)(pp - 1) / (3 * m + pp - 1);
      MT_CHECK(fabs(z - zth) < 1e-9, "zb-h1 pp=%d m=%d: bubble %.6f, theory %.6f", pp, m, z, zth);
      if ((pp == 2 || pp == 4) && (m == 4 || m == 8 || m == 16))
        printf("%-12s %3d %3d %2d %10.4f %10.4f\n%-12s %3d %3d %2d %10.4f %10.4f (zb-h1 ideal)\n",
               "1f1b", pp, m, 1, f, th, "zb-h1", pp, m, 1, z, zth);
      cases += 2;
      /* ZB-V with F = B = W = 1 per stage: below ZB-H1's bubble (the same
       * op times) once every rank has work beyond the warm-up */
      double zh = (double)(pp - 1) / (3 * m + pp - 1);
      double zv = simulate(MT_SCHED_ZBV, pp, m, 2, &sim);
      if (pp > 1 && m >= 2 * pp)
        MT_CHECK(zv < zh - 1e-9, "zb-v pp=%d m=%d: bubble %.6f not below zb-h1's %.6f", pp, m, zv, zh);
      if ((pp == 2 || pp == 4) && (m == 4 || m == 8 || m == 16))
        printf("%-12s %3d %3d %2d %10.4f %10.4f (zb-h1 at F=B=W)\n", "zb-v", pp, m, 2, zv, zh);
      cases++;
      for (int v = 1; v <= 4; v++) {
        if (pp * v > 32) continue;
        check_v_bubble(MT_SCHED_BFS, pp, m, v, &sim);
        cases++;
      }
      for (int v = 2; v <= 4; v++) {
        if (m % pp != 0) continue;
        check_v_bubble(MT_SCHED_INTERLEAVED, pp, m, v, &sim);
        cases++;
      }
    }
  }
  /* messages that take time (mt_pp_schedule_simulate): sent without
   * blocking the sender, each on its link */
  {
    mt_pp_schedule s;
    mt_pp_sim a, b;
    mt_err err = {0};
    mt_pp_link zero[4] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}}, l[4];
    for (int i = 0; i < 4; i++) l[i] = (mt_pp_link){.xfer = 0.3, .lat = 0.1};
    /* GPipe, 2 stages, one micro-batch: F, message, F, B, message, B */
    mt_pp_schedule_build(&s, MT_SCHED_GPIPE, 2, 1, 1);
    MT_CHECK(mt_pp_schedule_simulate(&s, 1, 2, 1, 1, l, &a, &err) == 0, "%s", err.msg);
    MT_CHECK(fabs(a.makespan - (1 + 0.4 + 1 + 2 + 0.4 + 2)) < 1e-12, "gpipe pp 2 m 1: %.6f",
             a.makespan);
    mt_pp_schedule_free(&s);
    /* free links change nothing; a link is held while it carries: two
     * messages sent at once on one link arrive xfer apart (GPipe's warm-up
     * on rank 0: F0 F1 back to back with F = 0.1 < xfer) */
    mt_pp_schedule_build(&s, MT_SCHED_GPIPE, 2, 2, 1);
    mt_pp_schedule_simulate(&s, 1, 2, 1, 1, zero, &a, &err);
    mt_pp_schedule_validate(&s, 1, 2, 1, 1, &b, &err);
    MT_CHECK(a.makespan == b.makespan, "free links: %.6f, none %.6f", a.makespan, b.makespan);
    mt_pp_schedule_simulate(&s, 0.1, 0.1, 0.05, 0.05, l, &a, &err);
    /* rank 0 sends at 0.1 and 0.2; the second leaves when the link is free
     * at 0.4 and arrives at 0.8 (not 0.6): rank 1 runs F1 0.8-0.9 and its
     * two backwards until 1.1 (0.9 with no queue on the link) */
    MT_CHECK(fabs(a.rank_grads_end[1] - 1.1) < 1e-12, "the link's queue: rank 1 done at %.6f",
             a.rank_grads_end[1]);
    mt_pp_schedule_free(&s);
    /* messages hidden by the schedule: at pp 4, 1F1B and interleaved with
     * 16 micro-batches, the messages add less than pricing each one into
     * its op (meshplan's old model: every op longer by a message) */
    mt_pp_sched ks[2] = {MT_SCHED_1F1B, MT_SCHED_INTERLEAVED};
    for (int i = 0; i < 2; i++) {
      int v = ks[i] == MT_SCHED_INTERLEAVED ? 2 : 1;
      mt_pp_link m[8];
      for (int j = 0; j < 8; j++) m[j] = (mt_pp_link){.xfer = 0.05, .lat = 0.05};
      mt_pp_schedule_build(&s, ks[i], 4, 16, v);
      mt_pp_schedule_simulate(&s, 1.0 / v, 2.0 / v, 1.0 / v, 1.0 / v, m, &a, &err);
      mt_pp_schedule_validate(&s, 1.0 / v + 0.1, 2.0 / v + 0.1, 1.0 / v, 1.0 / v, &b, &err);
      mt_pp_sim c;
      mt_pp_schedule_validate(&s, 1.0 / v, 2.0 / v, 1.0 / v, 1.0 / v, &c, &err);
      MT_CHECK(a.makespan > c.makespan && a.makespan < b.makespan - 0.5,
               "%s: with messages %.4f, none %.4f, messages in the ops %.4f",
               mt_pp_sched_name(ks[i]), a.makespan, c.makespan, b.makespan);
      printf("%-12s pp 4 m 16 v %d, messages of 0.1: %.4f (in the ops: %.4f, none: %.4f)\n",
             mt_pp_sched_name(ks[i]), v, a.makespan, b.makespan, c.makespan);
      mt_pp_schedule_free(&s);
    }
    cases += 4;
  }
  /* broken lists are refused */
  expect_refused("dropped receive", MT_SCHED_1F1B, 4, 8, 1, 2, drop_first_recv_grad,
                 "B mb 0 chunk 0 before its output gradient arrived");
  expect_refused("swapped receives", MT_SCHED_1F1B, 4, 8, 1, 1, swap_recvs, "order differs");
  expect_refused("backward first", MT_SCHED_1F1B, 2, 4, 1, 1, backward_first, "before its forward");
  expect_refused("circular wait", MT_SCHED_1F1B, 2, 4, 1, 0, circular_wait,
                 "deadlock: rank 0 waits forever at op");
  expect_refused("sends held back", MT_SCHED_GPIPE, 4, 4, 1, 1, sends_last,
                 "deadlock: rank 0 waits forever at op");
  /* a corrupted ZB-V list: the bottom of the V (rank pp-1) forwards chunk 1
   * (virtual stage pp) of mb 0 before chunk 0 made its input; a W moved
   * before its B */
  expect_refused("zb-v turn reversed", MT_SCHED_ZBV, 4, 8, 2, 3, zbv_turn_reversed,
                 "F mb 0 chunk 1 before its input activation arrived");
  expect_refused("zb-v W before B", MT_SCHED_ZBV, 4, 8, 2, 1, w_first, "without its B first");
  {
    mt_pp_schedule s;
    mt_pp_schedule_build(&s, MT_SCHED_ZBV, 4, 8, 2);
    MT_CHECK(mt_pp_vs_of(&s, 0, 0) == 0 && mt_pp_vs_of(&s, 0, 1) == 7 && mt_pp_vs_of(&s, 3, 1) == 4 &&
              mt_pp_vs_rank(&s, 4) == 3 && mt_pp_vs_rank(&s, 7) == 0,
          "zb-v placement: a V (rank r holds r and 2pp-1-r)");
    /* the turn needs no message: rank 3 never sends an activation of chunk 0 */
    int turn_msgs = 0;
    for (int i = 0; i < s.n_ops[3]; i++)
      turn_msgs += s.ops[3][i].kind == MT_PP_SEND_ACT && s.ops[3][i].chunk == 0;
    MT_CHECK(turn_msgs == 0, "zb-v: %d activation messages at the turn of the V", turn_msgs);
    mt_pp_schedule_free(&s);
  }

  /* config checks name the keys */
  expect_config("m < pp", MT_SCHED_1F1B, 4, 2, 1, 8,
                "train.micro_batches = 2 is smaller than parallel.pp = 4");
  expect_config("v without interleaved", MT_SCHED_1F1B, 2, 4, 2, 8,
                "parallel.virtual_stages = 2 needs parallel.schedule = interleaved");
  expect_config("interleaved m % pp", MT_SCHED_INTERLEAVED, 2, 5, 2, 8,
                "multiple of parallel.pp = 2");
  expect_config("pp*v > L", MT_SCHED_INTERLEAVED, 4, 4, 2, 4, "exceeds model.n_layer = 4");
  expect_config("gpipe m < pp refused", MT_SCHED_GPIPE, 4, 2, 1, 4, NULL);
  /* parallel.schedule's names (the configuration parses them: test_config) */
  MT_CHECK(!strcmp(mt_pp_sched_name(MT_SCHED_ZBH1), "zb-h1") &&
               !strcmp(mt_pp_sched_name(MT_SCHED_BFS), "breadth-first") &&
               !strcmp(mt_pp_sched_name(MT_SCHED_ZBV), "zb-v"),
           "schedule names");
  expect_config("zb-v v = 1", MT_SCHED_ZBV, 2, 4, 1, 8,
                "parallel.schedule = zb-v needs parallel.virtual_stages = 2");
  expect_config("breadth-first v=3 m<pp", MT_SCHED_BFS, 4, 2, 3, 12, NULL);

  /* balanced layers: contiguous, in order, sizes differ by at most one */
  for (int L = 1; L <= 13; L++)
    for (int n = 1; n <= L; n++) {
      int prev = 0, lo = L, hi = 0;
      for (int s = 0; s < n; s++) {
        int a, b;
        mt_registry_stage_layers(L, n, 1, NULL, 0, s, &a, &b);
        MT_CHECK(a == prev && b > a, "layers L=%d n=%d stage %d: [%d,%d)", L, n, s, a, b);
        prev = b;
        lo = b - a < lo ? b - a : lo;
        hi = b - a > hi ? b - a : hi;
      }
      MT_CHECK(prev == L && hi - lo <= 1, "layers L=%d n=%d: end %d, sizes %d..%d", L, n, prev, lo,
               hi);
    }
  int split[3] = {1, 3, 2}, a, b;
  mt_registry_stage_layers(6, 3, 1, split, 0, 1, &a, &b);
  MT_CHECK(a == 1 && b == 4, "explicit split: [%d,%d)", a, b);
  /* an explicit split under interleaving: stage s's chunks get split[s] / v
   * layers, virtual stages vs = chunk * pp + s in model order (2 + 4 over 2
   * stages of 2 chunks: [0,1) [1,3) [3,4) [4,6)) */
  int split2[2] = {2, 4}, want[5] = {0, 1, 3, 4, 6};
  for (int vs = 0; vs < 4; vs++) {
    mt_registry_stage_layers(6, 2, 2, split2, 0, vs, &a, &b);
    MT_CHECK(a == want[vs] && b == want[vs + 1], "split 2,4 v=2, virtual stage %d: [%d,%d)", vs, a, b);
  }

  /* ZB-V's V: virtual stage vs on rank vs, then 2pp - 1 - vs (pp 4, 8
   * layers: rank 0 holds blocks 0 and 7, rank 3 blocks 3 and 4, the turn);
   * with a split, each virtual stage takes its rank's share / v */
  int map[8], want_v[8] = {0, 1, 2, 3, 3, 2, 1, 0};
  mt_registry_stage_map(8, 4, 2, NULL, 1, map);
  for (int l = 0; l < 8; l++)
    MT_CHECK(map[l] == want_v[l], "V map: block %d on rank %d, want %d", l, map[l], want_v[l]);
  int split_v[2] = {2, 6}, want_sv[5] = {0, 1, 4, 7, 8};
  for (int vs = 0; vs < 4; vs++) {
    mt_registry_stage_layers(8, 2, 2, split_v, 1, vs, &a, &b);
    MT_CHECK(a == want_sv[vs] && b == want_sv[vs + 1], "V split 2,6, virtual stage %d: [%d,%d)", vs,
             a, b);
    MT_CHECK(mt_registry_vs_rank(2, 1, vs) == (vs < 2 ? vs : 3 - vs), "V rank of stage %d", vs);
  }

  printf("%d schedules simulated, %d checks, %d failures\n", cases, *mt_check_count(),
         *mt_check_failures());
  return *mt_check_failures() ? 1 : 0;
}
