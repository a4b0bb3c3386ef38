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

/* x ticks at the given rank counts ("set xtics (...)") */
static void rank_tics(FILE *g, const point_rec *pts, int n_pts) {
  fprintf(g, "set xtics (");
  int last = -1, first = 1;
  for (int k = 0; k < n_pts; k++) {
    if (!pts[k].n_ok || pts[k].ranks == last) continue;
    fprintf(g, "%s\"%d\" %d", first ? "" : ", ", pts[k].ranks, pts[k].ranks);
    last = pts[k].ranks, first = 0;
  }
  fprintf(g, ")\n");
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
    copy_str(t, sizeof t, sp->origin[q]);
    for (char *c = t; *c; c++)
      if (*c == '\'') *c = '"';
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
      copy_str(t, sizeof t, sp->title[k]);
      for (char *c = t; *c; c++)
        if (*c == '\'') *c = '"';
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

/* speedup.png and efficiency.png from scaling.dat: the rank counts as
 * ticks, a grid, each point's value written beside it, the ideal inside the
 * frame */
static void plot_scaling(FILE *g, const report *r, const point_rec *pts, int n_pts) {
  double lo = INFINITY, hi = 0, top_s = 0, top_e = 0;
  for (int k = 0; k < n_pts; k++) {
    if (!pts[k].n_ok) continue;
    lo = fmin(lo, pts[k].ranks), hi = fmax(hi, pts[k].ranks);
    if (!isnan(pts[k].speedup)) top_s = fmax(top_s, pts[k].speedup);
    if (!isnan(pts[k].efficiency)) top_e = fmax(top_e, pts[k].efficiency);
  }
  const char *how = !strcmp(r->scaling, "weak") ? "weak scaling" : "strong scaling";
  double ideal_top = hi / lo;
  fprintf(g, "set key top left box opaque\nset xlabel 'ranks'\nset logscale x 2\n"
             "set xrange [%g:%g]\n", lo / 1.4, hi * 1.4);
  rank_tics(g, pts, n_pts);
  double ymax = fmax(ideal_top, top_s) * 1.2;
  fprintf(g, "set output 'speedup.png'\nset title name.': speedup against %g rank%s (%s)'\n"
             "set ylabel 'speedup'\n", lo, lo == 1 ? "" : "s", how);
  if (ymax <= 10) /* a short range reads best on a linear axis */
    fprintf(g, "set yrange [0:%g]\nset ytics autofreq\n", ymax);
  else
    fprintf(g, "set logscale y 2\nset yrange [0.7:%g]\nset ytics 2\n", ymax);
  fprintf(g, "plot 'scaling.dat' using 1:4 with lines dt 2 lw 2 lc rgb '#606060' title "
             "'ideal (N/N0)', \\\n     '' using 1:2 with linespoints lw 2.5 pt 7 ps 1.6 lc rgb "
             "'#%s' title 'measured', \\\n     '' using 1:2:(sprintf('%%.2f', $2)) with labels "
             "offset 0,1.2 font ',10' notitle\n"
             "unset logscale y\nset ytics autofreq\n",
             g_color[0]);
  double emax = fmax(1.0, top_e) * 100 * 1.2;
  fprintf(g, "set output 'efficiency.png'\nset title name.': parallel efficiency (%s)'\n"
             "set ylabel 'efficiency'\nset format y '%%.0f%%%%'\nset yrange [0:%g]\n"
             "plot 'scaling.dat' using 1:(100) with lines dt 2 lw 2 lc rgb '#606060' title "
             "'ideal (100%%)', \\\n     '' using 1:($3*100) with linespoints lw 2.5 pt 7 ps 1.6 "
             "lc rgb '#%s' title 'measured', \\\n     '' using 1:($3*100):(sprintf('%%.0f%%%%', "
             "$3*100)) with labels offset 0,1.2 font ',10' notitle\n",
             how, emax, g_color[0]);
  fprintf(g, "unset logscale\nset format y '%%g'\nset xtics autofreq\nset xrange [*:*]\n"
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

/* predicted.dat: per point its measured and predicted tokens/s */
static void write_predicted_dat(const char *out, const point_rec *pts, int n_pts) {
  char path[PATH_LEN];
  FILE *d = open_out(out, "predicted.dat", path);
  fprintf(d, "# label measured_tokens_per_s predicted_tokens_per_s\n");
  for (int k = 0; k < n_pts; k++) {
    const point_rec *p = &pts[k];
    fprintf(d, "\"%dn/%dr %s\" %.9g %.9g\n", p->nodes, p->ranks, p->layout,
            p->n_ok ? p->tps_mean : NAN, p->n_pred ? p->pred_tps : NAN);
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

/* predicted.png from predicted.dat: measured and predicted side by side */
static void plot_predicted(FILE *g) {
  fprintf(g, "set output 'predicted.png'\nset title name.': measured and predicted (virtual "
             "device) tokens/s'\nset style data histograms\nset style histogram clustered gap 1\n"
             "set style fill solid 0.8 border -1\nset boxwidth 0.9\nset key inside top right\n"
             "set xlabel 'point (nodes/ranks layout)'\nset ylabel 'tokens/s'\n"
             "set xtics rotate by -30\nset yrange [0:*]\n"
             "plot 'predicted.dat' using 2:xtic(1) title 'measured' lc rgb '#0072B2', "
             "'' using 3 title 'predicted' lc rgb '#D55E00'\n"
             "set xtics norotate\nset yrange [*:*]\nset key default\nset style data lines\n");
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
  int n_pred = 0; /* points with a prediction (campaign --emulate): tokens/s beside the measured */
  for (int k = 0; k < n_pts; k++) n_pred += pts[k].n_pred > 0;
  write_scaling_dat(out, pts, n_pts);
  if (n_pred) write_predicted_dat(out, pts, n_pts);
  if (r->n_bench) write_busbw_dat(out, r);
  char path[PATH_LEN];
  FILE *g = open_out(out, "plots.gp", path);
  fprintf(g, "# written by meshreport; draw the PNGs with: gnuplot plots.gp (in this directory)\n"
             "set terminal pngcairo size 1000,640 noenhanced font ',11'\n"
             "set grid lc rgb '#b4b4b4' dt 2\nset style textbox opaque noborder\n"
             "set datafile missing 'NaN'\n");
  char name[sizeof r->name];
  copy_str(name, sizeof name, r->name);
  for (char *c = name; *c; c++) /* a quote would end gnuplot's string */
    if (*c == '\'') *c = '"';
  fprintf(g, "name = '%s'\n", name);
  if (sp->n_series > 0) plot_steps(g, sp);
  if (n_ok > 1) plot_scaling(g, r, pts, n_pts); /* scaling needs two points */
  if (n_ok > 0) plot_breakdown(g);
  if (n_pred) plot_predicted(g);
  if (r->n_bench) plot_busbw(g);
  close_out(g, path);
  return run_gnuplot(out, "plots.gp", why, why_cap);
}
