/* meshreport's plots (report.h): the gnuplot script plots.gp and its data
 * (scaling.dat, predicted.dat, busbw.dat; steps.dat is steps.c's), always,
 * and where gnuplot runs the PNGs: loss.png tokens_per_s.png speedup.png
 * efficiency.png breakdown.png predicted.png busbw.png. */
#include "report/report.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* colours and markers that tell series apart (colour-blind-safe order) */
static const char *const g_color[] = {"0072B2", "D55E00", "009E73", "CC79A7",
                                      "E69F00", "56B4E9", "000000", "999933"};
static const int g_marker[] = {6, 4, 8, 10, 12, 14}; /* open circle, square, triangles, ... */
#define N_COLORS 8
#define N_MARKERS 6

/* whether point p is on the scaling plots: measured (meas) or predicted (pred) */
/* src as a gnuplot single-quoted string's text: a quote would end the
 * string, so each becomes a double quote */
static void gp_text(char *dst, size_t cap, const char *src) {
  copy_str(dst, cap, src);
  for (char *c = dst; *c; c++)
    if (*c == '\'') *c = '"';
}

static int plotted(const point_rec *p, int meas, int pred) {
  return (meas && p->n_ok) || (pred && p->n_pred);
}

/* x ticks at the plotted points' rank counts ("set xtics (...)") */
static void rank_tics(FILE *g, const point_rec *pts, int n_pts, int meas, int pred) {
  fprintf(g, "set xtics (");
  int last = -1, first = 1;
  for (int k = 0; k < n_pts; k++) {
    if (!plotted(&pts[k], meas, pred) || pts[k].ranks == last) continue;
    fprintf(g, "%s\"%d\" %d", first ? "" : ", ", pts[k].ranks, pts[k].ranks);
    last = pts[k].ranks, first = 0;
  }
  fprintf(g, ")\n");
}

/* val_by_source.png from val_sources.dat: a blend's validation loss per
 * source against step, a line per (series, source) */
static void plot_sources(FILE *g, const step_plots *sp) {
  fprintf(g, "set output 'val_by_source.png'\nset title name.': validation loss per source "
             "against step'\nset ylabel 'validation loss'\nunset xlabel\nset key below\n"
             "set offsets graph 0.02, graph 0.02, graph 0.06, graph 0.06\nplot ");
  for (int k = 0; k < sp->n_src; k++) {
    char t[sizeof sp->src_title[0]];
    gp_text(t, sizeof t, sp->src_title[k]);
    fprintf(g, "%s'val_sources.dat' index %d using 1:2 with linespoints lw 2 lc rgb '#%s' pt %d "
               "ps 1.3 title '%s'", k ? ", \\\n     " : "", k, g_color[k % N_COLORS],
            g_marker[k % N_MARKERS], t);
  }
  fprintf(g, "\nset yrange [*:*]\n");
}

/* loss.png and tokens_per_s.png from steps.dat */
static void plot_steps(FILE *g, const step_plots *sp) {
  /* the key below the plot never hides a line; the titles say "against step"
   * (an x label would sit on the key) */
  fprintf(g, "unset xlabel\nset key below\n");
  long long lo = LLONG_MAX, hi = 0;
  for (int k = 0; k < sp->n_series; k++) lo = sp->first[k] < lo ? sp->first[k] : lo,
                                          hi = sp->last[k] > hi ? sp->last[k] : hi;
  if (hi - lo < 20) fprintf(g, "set xtics 1\n"); /* whole steps on a short run */
  fprintf(g, "set autoscale xfix\n"); /* the steps' range, not the next round tick */
  for (int q = 0; q < sp->n_resumes; q++) /* labels above one another when there are several */
    fprintf(g, "set arrow from %lld, graph 0 to %lld, graph 1 nohead dt 3 lw 1.5 lc rgb '#505050' "
               "front\nset label 'resumed after step %lld' at %lld, graph %.2f left offset 0.6,0 "
               "front boxed font ',10' tc rgb '#303030'\n",
            sp->resumes[q], sp->resumes[q], sp->resumes[q], sp->resumes[q], 0.95 - 0.07 * (q % 8));
  for (int q = 0; q < sp->n_origins; q++) { /* where a run began: bottom left, one per line */
    char t[sizeof sp->origin[0]];
    gp_text(t, sizeof t, sp->origin[q]);
    fprintf(g, "set label '%s' at graph 0.01, graph %.2f left front boxed font ',9' "
               "tc rgb '#303030'\n", t, 0.04 + 0.06 * (q % 8));
  }
  for (int pass = 0; pass < 2; pass++) {
    /* points off the frame: a margin around the data (none under tokens/s' 0) */
    fprintf(g, "set offsets graph 0.02, graph 0.02, graph 0.06, %s\n", pass ? "0" : "graph 0.06");
    if (pass == 0)
      fprintf(g, "set output 'loss.png'\nset title name.': loss against step (validation: "
                 "filled circles, dashed)'\nset ylabel 'loss'\nplot ");
    else if (sp->window > 1)
      fprintf(g, "set output 'tokens_per_s.png'\nset title name.': tokens/s against step, mean "
                 "of the last %d steps (each step: faint)'\nset ylabel 'tokens/s'\n"
                 "set yrange [0:*]\nplot ", sp->window);
    else
      fprintf(g, "set output 'tokens_per_s.png'\nset title name.': tokens/s against step'\n"
                 "set ylabel 'tokens/s'\nset yrange [0:*]\nplot ");
    for (int k = 0; k < sp->n_series; k++) {
      char t[sizeof sp->title[0]];
      gp_text(t, sizeof t, sp->title[k]);
      const char *col = g_color[k % N_COLORS];
      long long span = sp->last[k] - sp->first[k] + 1;
      int every = span > 15 ? (int)(span / 12) : 1; /* about a dozen markers per line */
      if (k) fprintf(g, ", \\\n     ");
      if (pass == 0) {
        fprintf(g, "'steps.dat' index %d using 1:2 with linespoints lw 2 lc rgb '#%s' pt %d "
                   "ps 1.3 pi %d title '%s'",
                k * 2, col, g_marker[k % N_MARKERS], every, t);
        /* validation on top: a filled marker in a black ring, a dashed line, in a
         * colour no training line has while there are enough */
        const char *vcol = 2 * sp->n_series <= N_COLORS ? g_color[sp->n_series + k] : col;
        if (sp->has_val[k])
          fprintf(g, ", \\\n     'steps.dat' index %d using 1:2 with points pt 7 ps 2.1 "
                     "lc rgb 'black' notitle, \\\n     'steps.dat' index %d using 1:2 with "
                     "linespoints dt 2 lw 2 pt 7 ps 1.5 lc rgb '#%s' title 'validation, %s'",
                  k * 2 + 1, k * 2 + 1, vcol, t);
      } else if (sp->window > 1) {
        fprintf(g, "'steps.dat' index %d using 1:4 with lines lw 1 lc rgb '#A0%s' notitle, "
                   "\\\n     'steps.dat' index %d using 1:5 with lines lw 2.5 lc rgb '#%s' "
                   "title '%s'",
                k * 2, col, k * 2, col, t);
      } else {
        fprintf(g, "'steps.dat' index %d using 1:4 with linespoints lw 2 lc rgb '#%s' pt %d "
                   "ps 1.3 pi %d title '%s'",
                k * 2, col, g_marker[k % N_MARKERS], every, t);
      }
    }
    fprintf(g, "\nset yrange [*:*]\n");
  }
  fprintf(g, "unset arrow\nunset label\nset offsets 0, 0, 0, 0\nset key default\n"
             "set xtics autofreq\nset autoscale x\n");
}

/* the rank count the scaling plots' speedups are against: the measured
 * reference where two or more points were measured (meas), else the
 * predicted one */
static int scaling_ref(const point_rec *pts, int n_pts, int meas) {
  for (int k = 0; k < n_pts && meas; k++)
    if (pts[k].n_ok) return pts[k].ranks;
  const point_rec *p = mt_report_pred_ref(pts, n_pts);
  return p ? p->ranks : 1;
}

/* speedup.png and efficiency.png: the measured points from scaling.dat
 * (meas: two or more), the predicted from predicted.dat (pred: two or
 * more); the rank counts as ticks, a grid, each point's value written
 * beside it (with both series, the measured left, the predicted right),
 * the ideal inside the frame (with predictions, from predicted.dat: its
 * every plotted point) */
/* the measured curve of scaling.dat (mlab: its labels' placement; NULL:
 * none) and the predicted one of predicted.dat (pcol: its colour; NULL:
 * none), columns mcol and pcol_y (gnuplot "using" expressions) labelled
 * by the values mval and pval in the format lab */
static void measured_predicted(FILE *g, const char *mlab, const char *pcol, const char *mcol,
                               const char *mval, const char *pcol_y, const char *pval,
                               const char *lab) {
  if (mlab)
    fprintf(g, ", \\\n     'scaling.dat' using 1:%s with linespoints lw 2.5 pt 7 ps 1.6 lc rgb "
               "'#%s' title 'measured', \\\n     '' using 1:%s:(sprintf('%s', %s)) with labels "
               "%s font ',10' notitle", mcol, g_color[0], mcol, lab, mval, mlab);
  if (pcol)
    fprintf(g, ", \\\n     'predicted.dat' using 2:%s with linespoints lw 2.5 dt 4 pt 5 ps 1.4 "
               "lc rgb '#%s' title 'predicted (virtual device)', \\\n     '' using 2:%s:"
               "(sprintf('%s', %s)) with labels left offset 1,0 font ',10' tc rgb '#%s' "
               "notitle", pcol_y, pcol, pcol_y, lab, pval, pcol);
}

static void plot_scaling(FILE *g, const report *r, const point_rec *pts, int n_pts, int meas,
                         int pred) {
  double lo = INFINITY, hi = 0, top_s = 0, top_e = 0, ref = scaling_ref(pts, n_pts, meas);
  for (int k = 0; k < n_pts; k++) {
    const point_rec *p = &pts[k];
    if (!plotted(p, meas, pred)) continue;
    lo = fmin(lo, p->ranks), hi = fmax(hi, p->ranks);
    if (meas && !isnan(p->speedup)) top_s = fmax(top_s, p->speedup);
    if (meas && !isnan(p->efficiency)) top_e = fmax(top_e, p->efficiency);
    if (pred && !isnan(p->pred_speedup)) top_s = fmax(top_s, p->pred_speedup);
    if (pred && !isnan(p->pred_efficiency)) top_e = fmax(top_e, p->pred_efficiency);
  }
  const char *how = !strcmp(r->scaling, "weak") ? "weak scaling" : "strong scaling";
  const char *data = pred ? "'predicted.dat' using 2" : "'scaling.dat' using 1";
  const char *mlab = pred ? "right offset -1,0" : "offset 0,1.2", *pcol = g_color[1];
  fprintf(g, "set key top left box opaque\nset xlabel 'ranks'\nset logscale x 2\n"
             "set xrange [%g:%g]\n", lo / 1.4, hi * 1.4);
  rank_tics(g, pts, n_pts, meas, pred);
  double ymax = fmax(hi / ref, top_s) * 1.2;
  fprintf(g, "set output 'speedup.png'\nset title name.': speedup against %g rank%s (%s%s)'\n"
             "set ylabel 'speedup'\n", ref, ref == 1 ? "" : "s", how,
          meas ? "" : ", predicted");
  if (ymax <= 10) /* a short range reads best on a linear axis */
    fprintf(g, "set yrange [0:%g]\nset ytics autofreq\n", ymax);
  else
    fprintf(g, "set logscale y 2\nset yrange [0.7:%g]\nset ytics 2\n", ymax);
  fprintf(g, "plot %s:%d with lines dt 2 lw 2 lc rgb '#606060' title 'ideal (N/N0)'", data,
          pred ? 5 : 4);
  measured_predicted(g, meas ? mlab : NULL, pred ? pcol : NULL, "2", "$2", "6", "$6", "%.2f");
  fprintf(g, "\nunset logscale y\nset ytics autofreq\n");
  double emax = fmax(1.0, top_e) * 100 * 1.2;
  fprintf(g, "set output 'efficiency.png'\nset title name.': parallel efficiency (%s%s)'\n"
             "set ylabel 'efficiency'\nset format y '%%.0f%%%%'\nset yrange [0:%g]\n"
             "plot %s:(100) with lines dt 2 lw 2 lc rgb '#606060' title 'ideal (100%%)'",
          how, meas ? "" : ", predicted", emax, data);
  measured_predicted(g, meas ? mlab : NULL, pred ? pcol : NULL, "($3*100)", "$3*100", "($7*100)",
                     "$7*100", "%.0f%%");
  fprintf(g, "\nunset logscale\nset format y '%%g'\nset xtics autofreq\nset xrange [*:*]\n"
             "set yrange [*:*]\nset key default\n");
}

/* scaling.dat: per successful point its ranks, speedup, efficiency, the
 * ideal speedup, its label and the ms per step of each component */
static void write_scaling_dat(const char *out, const point_rec *pts, int n_pts) {
  char path[PATH_LEN];
  FILE *d = open_out(out, "scaling.dat", path);
  fprintf(d, "# ranks speedup efficiency ideal label");
  for (int c = 0; c < N_PARTS; c++) fprintf(d, " %s_ms", mt_report_parts[c]);
  fputc('\n', d);
  int ref_ranks = 0;
  for (int k = 0; k < n_pts; k++)
    if (pts[k].n_ok && !ref_ranks) ref_ranks = pts[k].ranks;
  for (int k = 0; k < n_pts; k++) {
    const point_rec *p = &pts[k];
    if (!p->n_ok) continue;
    fprintf(d, "%d %.9g %.9g %.9g \"%dn/%dr %s\"", p->ranks, p->speedup, p->efficiency,
            (double)p->ranks / ref_ranks, p->nodes, p->ranks, p->layout);
    for (int c = 0; c < N_PARTS; c++)
      fprintf(d, " %.9g", isnan(p->part_s[c]) ? 0.0 : p->part_s[c] * 1e3);
    fputc('\n', d);
  }
  close_out(d, path);
}

/* predicted.dat: per point its place on predicted.png's x axis, ranks,
 * measured and predicted tokens/s, the ideal speedup against the scaling
 * plots' reference (NaN where the point is not on them), the predicted
 * speedup and efficiency, its label */
static void write_predicted_dat(const char *out, const point_rec *pts, int n_pts, int meas) {
  int ref = scaling_ref(pts, n_pts, meas);
  char path[PATH_LEN];
  FILE *d = open_out(out, "predicted.dat", path);
  fprintf(d, "# x ranks measured_tokens_per_s predicted_tokens_per_s ideal predicted_speedup "
             "predicted_efficiency label\n");
  for (int k = 0; k < n_pts; k++) {
    const point_rec *p = &pts[k];
    fprintf(d, "%d %d %.9g %.9g %.9g %.9g %.9g \"%dn/%dr %s\"\n", k, p->ranks,
            p->n_ok ? p->tps_mean : NAN, p->n_pred ? p->pred_tps : NAN,
            plotted(p, meas, 1) ? (double)p->ranks / ref : NAN, p->pred_speedup,
            p->pred_efficiency, p->nodes, p->ranks, p->layout);
  }
  close_out(d, path);
}

/* busbw.dat: one gnuplot data block per (op, ranks, nodes), separated by
 * two blank lines, its first row its title (columnheader) */
static void write_busbw_dat(const char *out, const report *r) {
  char path[PATH_LEN];
  FILE *d = open_out(out, "busbw.dat", path);
  int *done = calloc((size_t)r->n_bench, sizeof(int));
  for (int i = 0; i < r->n_bench; i++) {
    if (done[i]) continue;
    fprintf(d, "\"%s %d ranks %d nodes\" busbw\n", r->bench[i].op, r->bench[i].ranks,
            r->bench[i].nodes);
    for (int j = i; j < r->n_bench; j++)
      if (!done[j] && !strcmp(r->bench[j].op, r->bench[i].op) &&
          r->bench[j].ranks == r->bench[i].ranks && r->bench[j].nodes == r->bench[i].nodes) {
        fprintf(d, "%.0f %.9g\n", r->bench[j].bytes, r->bench[j].busbw);
        done[j] = 1;
      }
    fprintf(d, "\n\n");
  }
  free(done);
  close_out(d, path);
}

/* breakdown.png from scaling.dat: the components stacked per point */
static void plot_breakdown(FILE *g) {
  fprintf(g, "set output 'breakdown.png'\nset title name.': step time by component'\n"
             "set style data histograms\nset style histogram rowstacked\n"
             "set style fill solid 0.8 border -1\nset boxwidth 0.7\nset key outside right\n"
             "set xlabel 'point (nodes/ranks layout)'\nset ylabel 'ms per step'\n"
             "set xtics rotate by -30\nset yrange [0:*]\n"
             "plot 'scaling.dat' using 6:xtic(5) title '%s'", mt_report_parts[0]);
  for (int c = 1; c < N_PARTS; c++)
    fprintf(g, ", '' using %d title '%s'", 6 + c, mt_report_parts[c]);
  fprintf(g, "\nset xtics norotate\nset yrange [*:*]\nset key default\nset style data lines\n");
}

/* point k's tick on predicted.png: nodes and ranks, then its layout
 * broken at '-' into lines of about width characters (a long planned
 * layout stays inside the picture) */
static int point_tic(FILE *g, const point_rec *p, int k, int width) {
  fprintf(g, "%s\"%d node%s, %d rank%s\\n", k ? ", " : "", p->nodes, p->nodes == 1 ? "" : "s",
          p->ranks, p->ranks == 1 ? "" : "s");
  int col = 0, lines = 2;
  for (const char *c = p->layout; *c; c++) {
    int part = (int)strcspn(c + 1, "-") + 1; /* this piece, to the next '-' */
    if (*c == '-' && col + part > width) {
      fprintf(g, "-\\n"), col = 0, lines++;
      continue;
    }
    fputc(*c == '"' || *c == '\\' ? '\'' : *c, g), col++;
  }
  fprintf(g, "\" %d", k);
  return lines;
}

/* predicted.png from predicted.dat: per point its predicted tokens/s, the
 * measured beside it where there is one, each bar's value above it, the
 * point's nodes, ranks and layout below it (no axis label under them); the
 * ranges hold every point and leave room above the tallest bar for the key */
static void plot_predicted(FILE *g, const point_rec *pts, int n_pts) {
  double top = 0;
  int meas = mt_report_n_ok_points(pts, n_pts) > 0;
  for (int k = 0; k < n_pts; k++) {
    if (pts[k].n_ok) top = fmax(top, pts[k].tps_mean);
    if (pts[k].n_pred) top = fmax(top, pts[k].pred_tps);
  }
  int width = n_pts > 0 ? 130 / n_pts : 40;
  width = width < 12 ? 12 : width > 40 ? 40 : width;
  fprintf(g, "set output 'predicted.png'\nset title name.': %s'\nset style fill solid 0.8 "
             "border -1\nset key inside top right box opaque\nunset xlabel\n"
             "set ylabel 'tokens/s'\nset xrange [-0.6:%g]\nset yrange [0:%.9g]\nset xtics (",
          meas ? "measured and predicted (virtual device) tokens/s"
               : "predicted (virtual device) tokens/s, nothing measured yet",
          n_pts - 0.4, top > 0 ? top * 1.3 : 1.0);
  int lines = 1;
  for (int k = 0; k < n_pts; k++) {
    int l = point_tic(g, &pts[k], k, width);
    lines = l > lines ? l : lines;
  }
  /* gnuplot leaves a margin for one line of ticks: room for all of them */
  fprintf(g, ")\nset bmargin %d\nset boxwidth %s\nplot ", lines + 2, meas ? "0.4" : "0.6");
  if (meas)
    fprintf(g, "'predicted.dat' using ($1-0.2):3 with boxes lc rgb '#%s' title 'measured', "
               "\\\n     '' using ($1-0.2):3:(sprintf('%%.4g', $3)) with labels offset 0,0.8 "
               "font ',9' notitle, \\\n     ", g_color[0]);
  fprintf(g, "'predicted.dat' using ($1%s):4 with boxes lc rgb '#%s' title 'predicted', "
             "\\\n     '' using ($1%s):4:(sprintf('%%.4g', $4)) with labels offset 0,0.8 "
             "font ',9' notitle\n", meas ? "+0.2" : "", g_color[1], meas ? "+0.2" : "");
  fprintf(g, "set xtics autofreq\nset xrange [*:*]\nset yrange [*:*]\nset key default\n"
             "set boxwidth\nset bmargin -1\n");
}

/* busbw.png from busbw.dat: a line per (op, ranks, nodes) against size */
static void plot_busbw(FILE *g) {
  fprintf(g,
          "set output 'busbw.png'\nset title name.': bus bandwidth'\nset style data linespoints\n"
          "set logscale x 2\nset format x '%%.0b%%BB'\nset xlabel 'message size'\n"
          "set ylabel 'busbw (GB/s)'\nset key inside top left box opaque\n"
          "set offsets graph 0.03, graph 0.03, graph 0.06, graph 0.06\n"
          "plot for [i=0:*] 'busbw.dat' index i using 1:2 with linespoints lw 2 pt 7 "
          "title columnheader(1)\n");
}

int mt_report_make_plots(const char *out, const report *r, const point_rec *pts, int n_pts,
                         const step_plots *sp, char *why, size_t why_cap) {
  int n_ok = mt_report_n_ok_points(pts, n_pts);
  /* points with a prediction (campaign --emulate, virtual runs): beside the measured */
  int n_pred = mt_report_n_pred_points(pts, n_pts);
  write_scaling_dat(out, pts, n_pts);
  if (n_pred) write_predicted_dat(out, pts, n_pts, n_ok > 1);
  if (r->n_bench) write_busbw_dat(out, r);
  char path[PATH_LEN];
  FILE *g = open_out(out, "plots.gp", path);
  fprintf(g, "# written by meshreport; draw the PNGs with: gnuplot plots.gp (in this directory)\n"
             "set terminal pngcairo size 1000,640 noenhanced font ',11'\n"
             "set grid lc rgb '#b4b4b4' dt 2\nset style textbox opaque noborder\n"
             "set datafile missing 'NaN'\n");
  char name[sizeof r->name];
  gp_text(name, sizeof name, r->name);
  fprintf(g, "name = '%s'\n", name);
  if (sp->n_series > 0) plot_steps(g, sp);
  if (sp->n_src > 0) plot_sources(g, sp);
  if (n_ok > 1 || n_pred > 1) /* scaling needs two points, measured or predicted */
    plot_scaling(g, r, pts, n_pts, n_ok > 1, n_pred > 1);
  if (n_ok > 0) plot_breakdown(g);
  if (n_pred) plot_predicted(g, pts, n_pts);
  if (r->n_bench) plot_busbw(g);
  close_out(g, path);
  return run_gnuplot(out, "plots.gp", why, why_cap);
}
