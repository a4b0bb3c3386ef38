/* meshreport: runs grouped into points (report.h). A point is a size and a
 * layout (nodes, ranks, layout); its repeats give the mean and spread of
 * throughput, and against the successful point with the fewest ranks (N0,
 * throughput T0) its speedup and efficiency, and the same of its predictions
 * against the predicted point with the fewest ranks:
 *   strong scaling  S = T/T0 (throughputs; = t0/t for step times), E = S*N0/N
 *   weak scaling    E = t0/t (step times), S = E*N/N0 */
#include "report/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const mt_report_parts[N_PARTS] = {"compute", "dp_comm", "optimizer",
                                              "data",    "eval",    "other"};

int mt_report_point_holds(const point_rec *p, const run_rec *x) {
  return p->nodes == x->nodes && p->ranks == x->ranks && !strcmp(p->layout, x->layout);
}

static int find_point(const point_rec *pts, int n, const run_rec *x) {
  for (int i = 0; i < n; i++)
    if (mt_report_point_holds(&pts[i], x)) return i;
  return -1;
}

static int cmp_points(const void *a, const void *b) {
  const point_rec *p = a, *q = b;
  if (p->ranks != q->ranks) return p->ranks - q->ranks;
  if (p->nodes != q->nodes) return p->nodes - q->nodes;
  return strcmp(p->layout, q->layout);
}

/* speedup s and efficiency e of a point of ratio N/N0 ranks, whose
 * throughput is tps_ratio T/T0 and step-time ratio t0/t */
static void scale(int weak, double ratio, double tps_ratio, double step_ratio, double *s,
                  double *e) {
  if (weak) *e = step_ratio, *s = *e * ratio;
  else *s = tps_ratio, *e = *s / ratio;
}

/* the training points, sorted by ranks; returns how many */
int mt_report_make_points(const report *r, point_rec **out) {
  point_rec *pts = calloc((size_t)r->n_runs + 1, sizeof(point_rec));
  int n = 0;
  for (int i = 0; i < r->n_runs; i++) {
    const run_rec *x = &r->runs[i];
    if (x->is_bench || x->ranks <= 0) continue;
    int k = find_point(pts, n, x);
    if (k < 0) {
      k = n++;
      pts[k].nodes = x->nodes, pts[k].ranks = x->ranks;
      copy_str(pts[k].layout, sizeof pts[k].layout, x->layout);
    }
    pts[k].n_total += !x->is_virtual; /* a virtual run is a prediction, not a run */
    if (x->has_pred) {
      if (!pts[k].n_pred) copy_str(pts[k].pred_hw, sizeof pts[k].pred_hw, x->pred_hw);
      pts[k].n_pred++;
      pts[k].pred_tps += x->pred_tps;
      pts[k].pred_step_s += x->pred_step_s;
      pts[k].pred_mfu += x->pred_mfu;
    }
    if (!x->ok) continue;
    point_rec *p = &pts[k];
    p->restarts += x->restarts;
    p->oversubscribed += x->oversubscribed;
    if (p->n_ok == 0) p->tps_min = p->tps_max = x->tokens_per_s;
    p->n_ok++;
    p->tps_mean += x->tokens_per_s;
    p->tps_min = fmin(p->tps_min, x->tokens_per_s);
    p->tps_max = fmax(p->tps_max, x->tokens_per_s);
    p->step_s += x->mean_step_s;
    p->mfu += x->mfu;
    p->tps_per_rank += x->tokens_per_s_per_rank;
    for (int c = 0; c < N_PARTS; c++) p->part_s[c] += x->part_s[c];
  }
  for (int k = 0; k < n; k++) {
    point_rec *p = &pts[k];
    if (p->n_pred) p->pred_tps /= p->n_pred, p->pred_step_s /= p->n_pred, p->pred_mfu /= p->n_pred;
    if (!p->n_ok) continue;
    double m = p->n_ok;
    p->tps_mean /= m, p->step_s /= m, p->mfu /= m, p->tps_per_rank /= m;
    for (int c = 0; c < N_PARTS; c++) p->part_s[c] /= m;
    double ss = 0.0; /* sample standard deviation over repeats */
    for (int i = 0; i < r->n_runs; i++) {
      const run_rec *x = &r->runs[i];
      if (x->ok && !x->is_bench && mt_report_point_holds(p, x))
        ss += (x->tokens_per_s - p->tps_mean) * (x->tokens_per_s - p->tps_mean);
    }
    p->tps_std = p->n_ok > 1 ? sqrt(ss / (p->n_ok - 1)) : 0.0;
  }
  qsort(pts, (size_t)n, sizeof(point_rec), cmp_points);
  /* reference: the successful point with the fewest ranks (then nodes) */
  const point_rec *ref = NULL;
  for (int k = 0; k < n && !ref; k++)
    if (pts[k].n_ok) ref = &pts[k];
  const point_rec *pref = mt_report_pred_ref(pts, n);
  int weak = !strcmp(r->scaling, "weak");
  for (int k = 0; k < n; k++) {
    point_rec *p = &pts[k];
    p->speedup = p->efficiency = p->pred_speedup = p->pred_efficiency = NAN;
    if (ref && p->n_ok)
      scale(weak, (double)p->ranks / ref->ranks, p->tps_mean / ref->tps_mean,
            ref->step_s / p->step_s, &p->speedup, &p->efficiency);
    if (pref && p->n_pred)
      scale(weak, (double)p->ranks / pref->ranks, p->pred_tps / pref->pred_tps,
            pref->pred_step_s / p->pred_step_s, &p->pred_speedup, &p->pred_efficiency);
  }
  *out = pts;
  return n;
}

int mt_report_n_ok_points(const point_rec *pts, int n_pts) {
  int n = 0;
  for (int k = 0; k < n_pts; k++) n += pts[k].n_ok > 0;
  return n;
}

int mt_report_n_pred_points(const point_rec *pts, int n_pts) {
  int n = 0;
  for (int k = 0; k < n_pts; k++) n += pts[k].n_pred > 0;
  return n;
}

/* points are sorted by ranks, then nodes: the first with a prediction */
const point_rec *mt_report_pred_ref(const point_rec *pts, int n_pts) {
  for (int k = 0; k < n_pts; k++)
    if (pts[k].n_pred) return &pts[k];
  return NULL;
}

int mt_report_n_failed(const report *r) {
  int n = 0;
  for (int i = 0; i < r->n_runs; i++)
    n += !r->runs[i].ok && !r->runs[i].is_virtual && !r->runs[i].not_run;
  return n;
}

int mt_report_n_not_run(const report *r) {
  int n = 0;
  for (int i = 0; i < r->n_runs; i++) n += r->runs[i].not_run;
  return n;
}
