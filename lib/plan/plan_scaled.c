/* The counted rank of a step of many micro-batches from three shorter
 * steps (mt_plan_rank_world_scaled).
 *
 * A priced rank runs every micro-batch of its step on the virtual device
 * (plan.c): with thousands of micro-batches a rank (a 1,024-GPU MoE search
 * prices hundreds) that is most of a search's time. Past the schedule's
 * warm-up every micro-batch adds the same: the bytes a group sends, the op
 * seconds and bytes of each chunk grow by one micro-batch's, and the peaks
 * of memory stop growing (the schedule holds at most its in-flight sets;
 * GPipe and breadth-first, which hold every micro-batch's, run whole). So
 * each figure is affine in the micro-batches m there. The step runs at
 * m1 < m2 < m3, equally spaced, in the same residue as m modulo the
 * schedule's period (pp: interleaved's groups of pp micro-batches), each
 * figure's second difference is checked to be nothing but rounding, and
 * the figures at m are the line through m2 and m3. Any figure that is not
 * affine, or an integer figure that differs, and the step runs whole (as
 * mt_plan_rank_world). */
#include "plan/plan.h"

#include <math.h>
#include <string.h>

/* the steps' sizes in periods: m1 = 3 (and the residue: past the warm-up
 * of interleaved's (v + 1) pp forwards, a whole period of its steady
 * state), spaced 1 apart; the whole step below 4 x m3 */
enum { SCALE_FIRST = 3, SCALE_STEP = 1, SCALE_MIN_TIMES = 4, SCALE_MAX_FIGS = 512 };

/* a figure's second difference over its size, at most: sums of a step's
 * op seconds round (they add clock differences), byte counts do not */
#define SCALE_TOL 1e-10

/* Every double of the rank and of its world's executor that grows with
 * the micro-batches (the executor's per chunk: the cost model divides
 * them by the micro-batches), into p. Returns how many. */
static int figure_ptrs(mt_plan_rank *r, mt_plan_world *w, double **p) {
  int n = 0;
  for (int c = 0; c < MT_MEM_NCAT; c++) p[n++] = &r->mem[c];
  double *one[] = {&r->dp_bytes,          &r->tp_bytes,          &r->pp_bytes,
                   &r->cp_bytes,          &r->ep_bytes,          &r->etp_bytes,
                   &r->edp_bytes,         &r->ep_llep_bytes,     &r->dp_state_bytes,
                   &r->dp_update_bytes,   &r->muon_owned_flops,  &r->muon_busiest_flops,
                   &r->muon_mean_flops,   &r->muon_dp_bytes,     &r->muon_tp_bytes,
                   &r->muon_edp_bytes,    &r->muon_etp_bytes,    &r->params_numel,
                   &r->moments_numel,     &w->update_state_bytes};
  for (size_t i = 0; i < sizeof one / sizeof *one; i++) p[n++] = one[i];
  const int v = w->step.exec.v;
  for (int c = 0; c < v && c < MT_PP_MAX_CHUNKS; c++) {
    for (int k = 0; k < 4; k++) p[n++] = &w->step.exec.chunk_bytes[c][k];
    for (int k = 0; k < 3; k++) p[n++] = &w->step.exec.chunk_s[c][k];
  }
  return n;
}

/* the integer figures, which the three steps must share */
static int same_ints(const mt_plan_rank *a, const mt_plan_rank *b) {
  return a->world_rank == b->world_rank && a->pp_rank == b->pp_rank &&
         a->dp_rank == b->dp_rank && a->cp_rank == b->cp_rank && a->tp_rank == b->tp_rank &&
         a->ep_rank == b->ep_rank && a->etp_rank == b->etp_rank && a->edp_rank == b->edp_rank &&
         a->comm_exact == b->comm_exact && a->muon_matrices == b->muon_matrices &&
         a->muon_owned == b->muon_owned && a->n_buckets == b->n_buckets &&
         a->layers == b->layers;
}

/* the rank's figures at m micro-batches per step (cfg and lay as given but
 * for the batch) */
static int run_at(const mt_config *cfg, const mt_layout *lay, int m, int pp_rank,
                  const mt_price *price, mt_plan_rank *out, mt_plan_world *w, mt_err *e) {
  mt_config c = *cfg;
  mt_layout l = *lay; /* (shallow: never freed here) */
  c.global_batch = m * cfg->micro_batch * cfg->dp;
  l.per_rank = m * cfg->micro_batch;
  l.accum = m;
  return mt_plan_rank_world(&c, &l, pp_rank, 0, 0, 0, price, out, w, e);
}

int mt_plan_rank_world_scaled(const mt_config *cfg, const mt_layout *lay, int pp_rank,
                              const mt_price *price, mt_plan_rank *out, mt_plan_world *keep,
                              mt_err *e) {
  /* the period: interleaved's groups of pp micro-batches (the others
   * repeat every micro-batch past their warm-up) */
  const int m = lay->accum, q = cfg->pp;
  const int m1 = SCALE_FIRST * q + m % q, d = SCALE_STEP * q, m3 = m1 + 2 * d;
  /* documents: their pricing draws the global batch's windows; GPipe and
   * breadth-first hold every micro-batch's activations (a peak that grows
   * with m, and may pass another peak only beyond m3) */
  const int docs = cfg->documents && cfg->plan_doc_lengths[0];
  const int all_held = cfg->pp > 1 && (lay->sched == MT_SCHED_GPIPE || lay->sched == MT_SCHED_BFS);
  if (docs || all_held || m < SCALE_MIN_TIMES * m3 ||
      lay->accum != lay->per_rank / cfg->micro_batch)
    return mt_plan_rank_world(cfg, lay, pp_rank, 0, 0, 0, price, out, keep, e);
  /* each world is built where it stays (its step points into its own
   * mesh): the last one in keep */
  mt_plan_rank r[3];
  mt_plan_world local[3], *w[3] = {&local[0], &local[1], keep ? keep : &local[2]};
  double *p[3][SCALE_MAX_FIGS];
  int n[3], ran = 0, ok = 1;
  for (; ran < 3; ran++) {
    if (run_at(cfg, lay, m1 + ran * d, pp_rank, price, &r[ran], w[ran], e) != 0) break;
    n[ran] = figure_ptrs(&r[ran], w[ran], p[ran]);
  }
  if (ran < 3) {
    for (int i = 0; i < ran; i++) mt_plan_world_destroy(w[i]);
    return mt_err_pass(e);
  }
  ok = n[0] == n[1] && n[1] == n[2] && same_ints(&r[0], &r[1]) && same_ints(&r[1], &r[2]);
  for (int i = 0; ok && i < n[0]; i++) {
    const double f1 = *p[0][i], f2 = *p[1][i], f3 = *p[2][i];
    const double size = fmax(fabs(f1), fmax(fabs(f2), fabs(f3)));
    ok = fabs(f3 - 2.0 * f2 + f1) <= SCALE_TOL * size; /* (NaN: not affine) */
  }
  if (ok) /* the line through m2 and m3, into the last step's figures */
    for (int i = 0; i < n[0]; i++) {
      const double f2 = *p[1][i], f3 = *p[2][i];
      *p[2][i] = f3 + (f3 - f2) * ((double)(m - m3) / d);
    }
  /* the two longer steps' recordings of their collectives: the cost
   * model's replay takes dp's exposure on their line too */
  if (ok) {
    w[2]->rec_prev = w[1]->rec;
    w[1]->rec = (mt_comm_rec){0};
    w[2]->rec_m[0] = m1 + d, w[2]->rec_m[1] = m3;
  }
  mt_plan_world_destroy(w[0]);
  mt_plan_world_destroy(w[1]);
  if (!ok) {
    mt_plan_world_destroy(w[2]);
    return mt_plan_rank_world(cfg, lay, pp_rank, 0, 0, 0, price, out, keep, e);
  }
  *out = r[2];
  if (!keep) mt_plan_world_destroy(w[2]);
  return 0;
}
