/* test_pp_slices: pipeline schedules of token slices (TeraPipe), checked by
 * simulation (no MPI).
 *
 * For gpipe, 1f1b and interleaved (v = 2), pp = 1..8, m = 1..4 micro-batches,
 * k = 2, 4, 8 slices (where the kind's own rules hold for m x k units):
 *   - the validator accepts the op lists, slice causality included, and the
 *     sets held stay within the promise;
 *   - with slices of 1/k of a micro-batch's work (F = 1/k, B = 2/k per
 *     stage) the bubble is the theory of m x k equal units, (p-1)/(mk+p-1)
 *     for gpipe and 1f1b (the warm-up's k - 1 more forwards cost nothing)
 *     and (p-1)/(v mk + p-1) for interleaved; it falls as k grows;
 *   - an order that breaks slice causality is refused for that reason: a
 *     slice forwarded before the one before it (the keys and values it
 *     attends), a slice backed before the one after it (which adds to its
 *     keys' and values' gradients);
 *   - the checks name the keys (a schedule without slices, T not divisible);
 *   - the printed schedule names the slices.
 * Exits 1 naming every failing check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "parallel/parallel.h"

static int ok_units(mt_pp_sched kind, int pp, int m, int k, int v) {
  mt_err e = {0};
  return mt_pp_sched_check(kind, pp, m * k, v, 64, &e) == 0 &&
         mt_pp_slices_check(kind, k, 64 * k, &e) == 0;
}

/* builds, validates (a slice's ops 1/k of a micro-batch's, a chunk's 1/v)
 * and returns the bubble; -1 where refused */
static double bubble(mt_pp_sched kind, int pp, int m, int k, int v) {
  mt_pp_schedule s;
  mt_pp_schedule_build_sliced(&s, kind, pp, m, v, 0, k);
  mt_pp_sim sim;
  mt_err err = {0};
  const double f = 1.0 / (k * v);
  int rc = mt_pp_schedule_validate(&s, f, 2 * f, f, f, &sim, &err);
  MT_CHECK(rc == 0, "%s pp=%d m=%d k=%d v=%d: %s", mt_pp_sched_name(kind), pp, m, k, v, err.msg);
  MT_CHECK(s.m == m * k && s.k == k, "%s: %d units of %d slices", mt_pp_sched_name(kind), s.m,
           s.k);
  for (int r = 0; rc == 0 && r < pp && r < 64; r++)
    MT_CHECK(sim.peak_inflight[r] <= s.max_inflight[r],
             "%s pp=%d m=%d k=%d rank %d: peak %d > promise %d", mt_pp_sched_name(kind), pp, m, k,
             r, sim.peak_inflight[r], s.max_inflight[r]);
  mt_pp_schedule_free(&s);
  return rc == 0 ? sim.bubble : -1.0;
}

/* the index of the nth op of kind on rank r whose unit is u (-1: none) */
static int find_unit(const mt_pp_schedule *s, int r, mt_pp_op_kind kind, int u) {
  for (int i = 0; i < s->n_ops[r]; i++)
    if (s->ops[r][i].kind == kind && s->ops[r][i].mb == u) return i;
  return -1;
}

/* relabels units a and b in every op of kind `compute` and `msg` on rank r:
 * the rank then runs them in the other order */
static void swap_units(mt_pp_schedule *s, int r, mt_pp_op_kind compute, mt_pp_op_kind msg, int a,
                       int b) {
  for (int i = 0; i < s->n_ops[r]; i++) {
    mt_pp_op *o = &s->ops[r][i];
    if (o->kind != compute && o->kind != msg) continue;
    if (o->mb == a) o->mb = b;
    else if (o->mb == b) o->mb = a;
  }
}

static void expect_refused(const char *what, mt_pp_schedule *s, const char *needle) {
  mt_err err = {0};
  int rc = mt_pp_schedule_validate(s, 1, 2, 1, 1, NULL, &err);
  MT_CHECK(rc != 0 && strstr(err.msg, needle), "%s: expected a refusal with '%s', got rc=%d '%s'",
           what, needle, rc, err.msg);
}

int main(void) {
  const mt_pp_sched kinds[3] = {MT_SCHED_GPIPE, MT_SCHED_1F1B, MT_SCHED_INTERLEAVED};
  int built = 0;
  for (int ki = 0; ki < 3; ki++)
    for (int pp = 1; pp <= 8; pp++)
      for (int m = 1; m <= 4; m++)
        for (int k = 2; k <= 8; k *= 2) {
          const mt_pp_sched kind = kinds[ki];
          const int v = kind == MT_SCHED_INTERLEAVED ? 2 : 1;
          if (!ok_units(kind, pp, m, k, v)) continue;
          double b = bubble(kind, pp, m, k, v);
          double th = (pp - 1.0) / (v * m * k + pp - 1.0);
          built++;
          if (kind != MT_SCHED_INTERLEAVED)
            MT_CHECK(fabs(b - th) < 1e-9, "%s pp=%d m=%d k=%d: bubble %.6f, theory %.6f",
                     mt_pp_sched_name(kind), pp, m, k, b, th);
          else
            MT_CHECK(b >= 0 && b <= th + 1e-9, "interleaved pp=%d m=%d k=%d: bubble %.6f above "
                     "theory %.6f", pp, m, k, b, th);
        }
  MT_CHECK(built > 100, "only %d sliced schedules built", built);
  /* the bubble falls with k: 1f1b at pp 4 with one and two micro-batches
   * per pp stage (gpipe where m < pp) */
  for (int m = 1; m <= 2; m++) {
    double prev = 1.0;
    for (int k = 1; k <= 8; k *= 2) {
      mt_pp_sched kind = m * k >= 4 ? MT_SCHED_1F1B : MT_SCHED_GPIPE;
      double b = k == 1 ? (3.0 / (m + 3.0)) : bubble(kind, 4, m, k, 1);
      printf("pp 4, m %d, k %d (%s): bubble %.4f, theory %.4f\n", m, k, mt_pp_sched_name(kind), b,
             3.0 / (m * k + 3.0));
      MT_CHECK(b < prev, "pp 4 m %d: bubble %.4f at k = %d not below %.4f", m, b, k, prev);
      prev = b;
    }
  }
  /* causality: slice 1 forwarded before slice 0 on rank 0; the last rank
   * backs slice 0 before slice 1 */
  {
    mt_pp_schedule s;
    mt_pp_schedule_build_sliced(&s, MT_SCHED_1F1B, 2, 2, 1, 0, 2);
    mt_err err = {0};
    MT_CHECK(mt_pp_schedule_validate(&s, 1, 2, 1, 1, NULL, &err) == 0, "1f1b pp 2: %s", err.msg);
    MT_CHECK(find_unit(&s, 1, MT_PP_BWD, 1) < find_unit(&s, 1, MT_PP_BWD, 0) &&
                 find_unit(&s, 1, MT_PP_FWD, 1) < find_unit(&s, 1, MT_PP_BWD, 1),
             "the last rank backs slice 1 after its forward and before slice 0");
    swap_units(&s, 0, MT_PP_FWD, MT_PP_SEND_ACT, 0, 1);
    expect_refused("forward of slice 1 first", &s, "before slice 0 (the keys and values");
    mt_pp_schedule_free(&s);
    mt_pp_schedule_build_sliced(&s, MT_SCHED_1F1B, 2, 2, 1, 0, 2);
    swap_units(&s, 1, MT_PP_BWD, MT_PP_SEND_GRAD, 0, 1);
    expect_refused("backward of slice 0 first", &s, "slice 0 chunk 0 before slice 1's");
    mt_pp_schedule_free(&s);
  }
  /* the checks */
  {
    mt_err e = {0};
    MT_CHECK(mt_pp_slices_check(MT_SCHED_ZBH1, 2, 64, &e) != 0 &&
                 strstr(e.msg, "parallel.pp_token_slices = 2 needs parallel.schedule = gpipe, "
                               "1f1b or interleaved (got zb-h1)"),
             "zb-h1: %s", e.msg);
    mt_err e2 = {0};
    MT_CHECK(mt_pp_slices_check(MT_SCHED_1F1B, 3, 64, &e2) != 0 &&
                 strstr(e2.msg, "parallel.pp_token_slices = 3 does not divide the 64 tokens"),
             "T %% k: %s", e2.msg);
    mt_err e3 = {0};
    MT_CHECK(mt_pp_slices_check(MT_SCHED_BFS, 1, 64, &e3) == 0, "k = 1 takes any schedule");
  }
  /* printed */
  {
    mt_pp_schedule s;
    mt_pp_schedule_build_sliced(&s, MT_SCHED_1F1B, 2, 1, 1, 0, 4);
    char buf[8192] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    mt_pp_schedule_print(&s, 1, f);
    fclose(f);
    MT_CHECK(strstr(buf, "micro_batches = 1, virtual_stages = 1, token slices = 4") &&
                 strstr(buf, "F mb=0 slice=3 chunk=0\nB mb=0 slice=3 chunk=0"),
             "print: %s", buf);
    mt_pp_schedule_free(&s);
  }
  return mt_check_summary("test_pp_slices");
}
