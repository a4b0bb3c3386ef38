/* meshreport's Markdown (report.h): the table of points, printed on stdout
 * too, and report.md: the scaling (none for a single point), the step-time
 * breakdown, the collectives, runs in several attempts, runs resumed from
 * other runs, runs whose ranks outnumbered their cores, failed or missing
 * runs, and the plots. */
#include "report/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void mt_report_markdown_table(FILE *f, const point_rec *pts, int n_pts) {
  int scaling = mt_report_n_ok_points(pts, n_pts) > 1, pred = 0;
  for (int k = 0; k < n_pts; k++) pred |= pts[k].n_pred > 0;
  fprintf(f, "| nodes | ranks | layout | runs | tokens/s | ± (std) | tokens/s/rank | step (s) | "
             "%sMFU | %snotes |\n", scaling ? "speedup | efficiency | " : "",
          pred ? "predicted tokens/s | measured/predicted | " : "");
  fprintf(f, "|---:|---:|---|---:|---:|---:|---:|---:|%s---:|%s---|\n", scaling ? "---:|---:|" : "",
          pred ? "---:|---:|" : "");
  for (int k = 0; k < n_pts; k++) {
    const point_rec *p = &pts[k];
    char tps[32], sd[32], tpr[32], st[32], sp[32], ef[32], mfu[32];
    double mean = p->n_ok ? p->tps_mean : NAN;
    fmt_num(tps, sizeof tps, mean, "%.1f");
    fmt_num(sd, sizeof sd, p->n_ok > 1 ? p->tps_std : NAN, "%.1f");
    fmt_num(tpr, sizeof tpr, p->n_ok ? p->tps_per_rank : NAN, "%.1f");
    fmt_num(st, sizeof st, p->n_ok ? p->step_s : NAN, "%.4f");
    fmt_num(sp, sizeof sp, p->speedup, "%.2f");
    fmt_num(ef, sizeof ef, p->efficiency * 100.0, "%.1f%%");
    fmt_num(mfu, sizeof mfu, p->n_ok ? p->mfu * 100.0 : NAN, "%.2f%%");
    char notes[96] = "";
    if (p->restarts)
      fmt_into(notes, sizeof notes, "%d restart%s", p->restarts, p->restarts == 1 ? "" : "s");
    if (p->oversubscribed)
      fmt_into(notes + strlen(notes), sizeof notes - strlen(notes), "%sranks > cores",
               notes[0] ? "; " : "");
    char scale[80] = "", predicted[80] = "", ptps[32], ratio[32];
    if (scaling) fmt_into(scale, sizeof scale, "%s | %s | ", sp, ef);
    fmt_num(ptps, sizeof ptps, p->n_pred ? p->pred_tps : NAN, "%.1f");
    fmt_num(ratio, sizeof ratio, p->n_pred && p->n_ok ? mean / p->pred_tps : NAN, "%.3f");
    if (pred) fmt_into(predicted, sizeof predicted, "%s | %s | ", ptps, ratio);
    fprintf(f, "| %d | %d | %s | %d/%d | %s | %s | %s | %s | %s%s | %s%s |\n", p->nodes, p->ranks,
            p->layout, p->n_ok, p->n_total, tps, sd, tpr, st, scale, mfu, predicted, notes);
  }
}

/* the opening: one point's figures, or the scaling and its reference */
static void md_intro(FILE *f, const report *r, const point_rec *pts, int n_pts) {
  int n_train = 0;
  for (int i = 0; i < r->n_runs; i++) n_train += !r->runs[i].is_bench;
  const point_rec *ref = NULL;
  for (int k = 0; k < n_pts && !ref; k++)
    if (pts[k].n_ok) ref = &pts[k];
  int weak = !strcmp(r->scaling, "weak");
  if (n_pts == 1 && ref) { /* one point: its figures, nothing to compare */
    char runs[32], ranks[32], nodes[32];
    plural(runs, sizeof runs, ref->n_total, "run");
    plural(ranks, sizeof ranks, ref->ranks, "rank");
    plural(nodes, sizeof nodes, ref->nodes, "node");
    fprintf(f, "%s on %s (%s), %s. Throughput counts every step of a run, and every attempt of "
               "a run that was requeued or resumed (summary.json `run`).\n\n",
            ranks, nodes, ref->layout, runs);
  } else if (n_pts) {
    char runs[32], points[32];
    plural(runs, sizeof runs, n_train, "run");
    plural(points, sizeof points, n_pts, "point");
    fprintf(f, "%s scaling, %s in %s. ", weak ? "Weak" : "Strong", runs, points);
    if (ref) {
      char ranks[32], nodes[32];
      plural(ranks, sizeof ranks, ref->ranks, "rank");
      plural(nodes, sizeof nodes, ref->nodes, "node");
      fprintf(f, "Reference: %s on %s (%s), %.1f tokens/s.\n", ranks, nodes, ref->layout,
              ref->tps_mean);
    }
    else {
      int pred = 0;
      for (int k = 0; k < n_pts; k++) pred |= pts[k].n_pred > 0;
      fprintf(f, "No run succeeded%s.\n",
              pred ? " yet: the virtual device's predictions are below (Predicted)" : "");
    }
    fprintf(f, "%s Throughput counts every step of a run, and every attempt of a run that "
               "was requeued or resumed (summary.json `run`).\n\n",
            weak ? "Work per rank fixed: efficiency E = t0/t from mean step times, "
                   "speedup S = E·N/N0."
                 : "Total work fixed: speedup S = T/T0 from throughputs "
                   "(= t0/t), efficiency E = S·N0/N.");
  }
}

/* The virtual device's predictions (campaign --emulate), per point that
 * has one, measured or not: step, tokens/s, and the speedup and efficiency
 * they predict against the predicted point with the fewest ranks (strong:
 * S = T/T0, E = S N0/N; weak: E = t0/t, S = E N/N0), MFU; the measured
 * tokens/s beside them where runs exist. */
static void md_predicted(FILE *f, const report *r, const point_rec *pts, int n_pts) {
  const point_rec *ref = NULL;
  for (int k = 0; k < n_pts; k++)
    if (pts[k].n_pred && (!ref || pts[k].ranks < ref->ranks)) ref = &pts[k];
  if (!ref) return;
  const int weak = !strcmp(r->scaling, "weak");
  fprintf(f, "\n## Predicted (virtual device)\n\nWhat `campaign --emulate` predicted for each "
             "point (meshtrain's virtual device at the system's hardware profile), against the "
             "predicted point with the fewest ranks (%d on %d node%s):\n\n| nodes | ranks | "
             "layout | predicted step (s) | predicted tokens/s | predicted speedup | predicted "
             "efficiency | predicted MFU | measured tokens/s |\n"
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|\n",
          ref->ranks, ref->nodes, ref->nodes == 1 ? "" : "s");
  for (int k = 0; k < n_pts; k++) {
    const point_rec *p = &pts[k];
    if (!p->n_pred) continue;
    double n = (double)p->ranks / ref->ranks, s, e;
    if (weak) e = ref->pred_step_s / p->pred_step_s, s = e * n;
    else s = p->pred_tps / ref->pred_tps, e = s / n;
    char st[32], tps[32], sp[32], ef[32], mfu[32], meas[32];
    fmt_num(st, sizeof st, p->pred_step_s, "%.4f");
    fmt_num(tps, sizeof tps, p->pred_tps, "%.1f");
    fmt_num(sp, sizeof sp, s, "%.2f");
    fmt_num(ef, sizeof ef, e * 100.0, "%.1f%%");
    fmt_num(mfu, sizeof mfu, p->pred_mfu * 100.0, "%.2f%%");
    fmt_num(meas, sizeof meas, p->n_ok ? p->tps_mean : NAN, "%.1f");
    fprintf(f, "| %d | %d | %s | %s | %s | %s | %s | %s | %s |\n", p->nodes, p->ranks, p->layout,
            st, tps, sp, ef, mfu, meas);
  }
}

/* mean ms per step of each component, per successful point */
static void md_breakdown(FILE *f, const point_rec *pts, int n_pts) {
  fprintf(f, "\nMean step time by component (ms per step, first step skipped as warm-up; "
             "\"other\" is the step time not in a component):\n\n| nodes | ranks | layout |");
  for (int c = 0; c < N_PARTS; c++) fprintf(f, " %s |", mt_report_parts[c]);
  fprintf(f, "\n|---:|---:|---|");
  for (int c = 0; c < N_PARTS; c++) fprintf(f, "---:|");
  fputc('\n', f);
  for (int k = 0; k < n_pts; k++) {
    if (!pts[k].n_ok) continue;
    fprintf(f, "| %d | %d | %s |", pts[k].nodes, pts[k].ranks, pts[k].layout);
    for (int c = 0; c < N_PARTS; c++) {
      char v[32];
      fmt_num(v, sizeof v, pts[k].part_s[c] * 1e3, "%.3f");
      fprintf(f, " %s |", v);
    }
    fputc('\n', f);
  }
}

/* the peak bus bandwidth per collective and size of group (bench runs) */
static void md_collectives(FILE *f, const report *r) {
  fprintf(f, "\n## Collectives\n\nPeak bus bandwidth per collective and size of group "
             "(all rows in bench.csv):\n\n| op | nodes | ranks | peak busbw (GB/s) | at size (B) | "
             "#wrong |\n|---|---:|---:|---:|---:|---:|\n");
  int *done = calloc((size_t)r->n_bench, sizeof(int));
  for (int i = 0; i < r->n_bench; i++) {
    if (done[i]) continue;
    double peak = -1, at = 0, wrong = 0;
    for (int j = i; j < r->n_bench; j++)
      if (!done[j] && !strcmp(r->bench[j].op, r->bench[i].op) &&
          r->bench[j].ranks == r->bench[i].ranks && r->bench[j].nodes == r->bench[i].nodes) {
        done[j] = 1;
        if (r->bench[j].busbw > peak) peak = r->bench[j].busbw, at = r->bench[j].bytes;
        wrong += r->bench[j].wrong > 0 ? r->bench[j].wrong : 0;
      }
    fprintf(f, "| %s | %d | %d | %.3f | %.0f | %.0f |\n", r->bench[i].op, r->bench[i].nodes,
            r->bench[i].ranks, peak, at, wrong);
  }
  free(done);
}

/* each attempt of the runs that were requeued or resumed, and their totals */
static void md_attempts(FILE *f, const report *r) {
  fprintf(f, "\n## Runs in several attempts\n\nA preempted run checkpoints, is requeued and "
             "resumes; a run may also be resumed under another layout. Lost: set-up time of "
             "each restart plus steps computed again; waited: time between attempts.\n\n"
             "| run | attempt | steps | layout | ranks | exit | set-up (s) | tokens/s |\n"
             "|---|---:|---|---|---:|---:|---:|---:|\n");
  for (int i = 0; i < r->n_runs; i++) {
    const run_rec *x = &r->runs[i];
    if (!x->ok || x->n_attempts <= 1) continue;
    for (int a = 0; a < x->n_attempts; a++) {
      const attempt_rec *t = &x->attempts[a];
      char setup[32], tps[32], code[16];
      fmt_num(setup, sizeof setup, t->recorded ? t->setup_s : NAN, "%.1f");
      fmt_num(tps, sizeof tps, t->recorded ? t->tokens_per_s : NAN, "%.1f");
      fmt_num(code, sizeof code, t->recorded ? (double)t->exit_code : NAN, "%.0f");
      fprintf(f, "| `%s` | %d | %lld-%lld | %s | %d | %s | %s | %s |\n", x->id, a + 1,
              t->start_step + 1, t->end_step, t->recorded ? t->layout : "(no summary)",
              t->world, code, setup, tps);
    }
    fprintf(f, "| `%s` | all | %d restart%s | | | | lost %.1f s, waited %.1f s | %.1f |\n", x->id,
            x->restarts, x->restarts == 1 ? "" : "s", x->lost_s, x->wait_s, x->tokens_per_s);
  }
}

/* the runs that began from another run's checkpoint */
static void md_resumed_from(FILE *f, const report *r) {
  fprintf(f, "\n## Runs resumed from another run's checkpoint\n\nTheir steps, tokens and "
             "times count from that checkpoint on (its run has the earlier ones).\n\n");
  for (int i = 0; i < r->n_runs; i++)
    if (r->runs[i].ok && r->runs[i].resumed_from[0])
      fprintf(f, "- `%s` (%d ranks, %s): resumed from %s, steps %lld-%lld\n", r->runs[i].id,
              r->runs[i].ranks, r->runs[i].layout, r->runs[i].resumed_from,
              r->runs[i].start_step + 1,
              r->runs[i].n_attempts ? r->runs[i].attempts[r->runs[i].n_attempts - 1].end_step
                                    : r->runs[i].start_step);
}

/* the runs that rolled back loss spikes (train.on_spike = rollback) */
static void md_rollbacks(FILE *f, const report *r) {
  fprintf(f, "\n## Loss spikes rolled back\n\nEach reloaded the newest checkpoint and skipped "
             "the windows since it (train.on_spike = rollback; docs/faults.md).\n\n");
  for (int i = 0; i < r->n_runs; i++)
    if (r->runs[i].ok && r->runs[i].rollbacks[0])
      fprintf(f, "- `%s` (%d ranks, %s): %s\n", r->runs[i].id, r->runs[i].ranks,
              r->runs[i].layout, r->runs[i].rollbacks);
}

/* the runs whose nodes had more ranks x threads than cores */
static void md_oversubscribed(FILE *f, const report *r) {
  fprintf(f, "\n## Ranks outnumbered cores\n\nIn these runs a node had more ranks x threads "
             "than cores: their times measure cores shared between ranks, not the machine.\n\n");
  for (int i = 0; i < r->n_runs; i++)
    if (r->runs[i].ok && r->runs[i].oversubscribed)
      fprintf(f, "- `%s` (%d ranks, %s): %d ranks x %d thread%s on %d CPU%s\n", r->runs[i].id,
              r->runs[i].ranks, r->runs[i].layout, r->runs[i].over_ranks, r->runs[i].over_threads,
              r->runs[i].over_threads == 1 ? "" : "s", r->runs[i].over_cpus,
              r->runs[i].over_cpus == 1 ? "" : "s");
}

/* the runs that failed or never ran, with their status and directory */
static void md_failed(FILE *f, const report *r) {
  int n_failed = 0;
  for (int i = 0; i < r->n_runs; i++) n_failed += !r->runs[i].ok;
  fprintf(f, "\n## Failed or missing runs\n\n");
  if (!n_failed) fprintf(f, "None.\n");
  for (int i = 0; i < r->n_runs; i++)
    if (!r->runs[i].ok)
      fprintf(f, "- `%s` (%d nodes, %d ranks, %s): %s — `%s`\n", r->runs[i].id, r->runs[i].nodes,
              r->runs[i].ranks, r->runs[i].layout[0] ? r->runs[i].layout : "?", r->runs[i].status,
              r->runs[i].dir);
}

/* the PNGs (or why they were not drawn) and the files beside them */
static void md_plots(FILE *f, const report *r, const point_rec *pts, int n_pts,
                     const step_plots *sp, int plots, const char *why) {
  fprintf(f, "\n## Plots\n\n");
  if (plots != 0) fprintf(f, "Not drawn here: %s.\n\n", why);
  int any = mt_report_n_ok_points(pts, n_pts);
  if (sp->n_series) fprintf(f, "![loss](loss.png)\n![tokens/s](tokens_per_s.png)\n");
  if (any > 1) fprintf(f, "![speedup](speedup.png)\n![efficiency](efficiency.png)\n");
  if (any) fprintf(f, "![step time breakdown](breakdown.png)\n");
  if (r->n_bench) fprintf(f, "![bus bandwidth](busbw.png)\n");
  fprintf(f, "\nFiles: summary.csv (per point), runs.csv (per run), steps.csv (per step of the "
             "plotted runs)%s; plots.gp draws the PNGs from steps.dat, scaling.dat%s.\n",
          r->n_bench ? ", bench.csv" : "", r->n_bench ? ", busbw.dat" : "");
}

void mt_report_write_md(const char *out, const report *r, const point_rec *pts, int n_pts,
                        const step_plots *sp, int plots, const char *why) {
  char path[PATH_LEN];
  FILE *f = open_out(out, "report.md", path);
  fprintf(f, "# %s\n\n", r->name);
  md_intro(f, r, pts, n_pts);
  if (n_pts) {
    mt_report_markdown_table(f, pts, n_pts);
    md_breakdown(f, pts, n_pts);
    md_predicted(f, r, pts, n_pts);
  }
  if (r->n_bench) md_collectives(f, r);
  int n_multi = 0, n_over = 0, n_from = 0, n_rolled = 0;
  for (int i = 0; i < r->n_runs; i++) {
    n_multi += r->runs[i].ok && r->runs[i].n_attempts > 1;
    n_over += r->runs[i].ok && r->runs[i].oversubscribed;
    n_from += r->runs[i].ok && r->runs[i].resumed_from[0];
    n_rolled += r->runs[i].ok && r->runs[i].rollbacks[0];
  }
  if (n_multi) md_attempts(f, r);
  if (n_from) md_resumed_from(f, r);
  if (n_rolled) md_rollbacks(f, r);
  if (n_over) md_oversubscribed(f, r);
  md_failed(f, r);
  md_plots(f, r, pts, n_pts, sp, plots, why);
  close_out(f, path);
}
