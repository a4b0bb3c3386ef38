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

/* "1, 2 and 4 nodes": the node counts of the predicted points */
static void pred_nodes(char *buf, size_t cap, const point_rec *pts, int n_pts) {
  int seen[64], n = 0;
  for (int k = 0; k < n_pts; k++) {
    int dup = !pts[k].n_pred;
    for (int i = 0; i < n && !dup; i++) dup = seen[i] == pts[k].nodes;
    if (!dup && n < 64) seen[n++] = pts[k].nodes;
  }
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    size_t used = strlen(buf);
    fmt_into(buf + used, cap - used, "%s%d", i == 0 ? "" : i == n - 1 ? " and " : ", ", seen[i]);
  }
  size_t used = strlen(buf);
  fmt_into(buf + used, cap - used, " node%s", n == 1 && seen[0] == 1 ? "" : "s");
}

/* the opening: one point's figures, or the scaling and its reference, or
 * with nothing measured the predictions' points */
static void md_intro(FILE *f, const report *r, const point_rec *pts, int n_pts) {
  int n_train = 0;
  for (int i = 0; i < r->n_runs; i++) n_train += !r->runs[i].is_bench && !r->runs[i].is_virtual;
  const point_rec *ref = NULL;
  for (int k = 0; k < n_pts && !ref; k++)
    if (pts[k].n_ok) ref = &pts[k];
  const point_rec *pref = mt_report_pred_ref(pts, n_pts);
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
    fprintf(f, "%s scaling, ", weak ? "Weak" : "Strong");
    if (ref) {
      char ranks[32], nodes[32];
      plural(ranks, sizeof ranks, ref->ranks, "rank");
      plural(nodes, sizeof nodes, ref->nodes, "node");
      fprintf(f, "%s in %s. Reference: %s on %s (%s), %.1f tokens/s.\n", runs, points, ranks,
              nodes, ref->layout, ref->tps_mean);
    } else if (pref) {
      char preds[32], on[128];
      plural(preds, sizeof preds, mt_report_n_pred_points(pts, n_pts), "point");
      pred_nodes(on, sizeof on, pts, n_pts);
      fprintf(f, "**predicted only: nothing measured yet.** The virtual device (as %s) "
                 "predicted %s, on %s (below, Predicted).",
              pref->pred_hw, preds, on);
      if (n_train) fprintf(f, " No run has a result yet (%s: Failed or missing runs).", runs);
      fputc('\n', f);
    } else {
      fprintf(f, "%s in %s. No run succeeded.\n", runs, points);
    }
    fprintf(f, "%s%s\n\n",
            weak ? "Work per rank fixed: efficiency E = t0/t from mean step times, "
                   "speedup S = E·N/N0."
                 : "Total work fixed: speedup S = T/T0 from throughputs "
                   "(= t0/t), efficiency E = S·N0/N.",
            ref ? " Throughput counts every step of a run, and every attempt of a run that "
                  "was requeued or resumed (summary.json `run`)."
                : "");
  }
}

void mt_report_predicted_table(FILE *f, const point_rec *pts, int n_pts) {
  int measured = mt_report_n_ok_points(pts, n_pts) > 0;
  fprintf(f, "| nodes | ranks | layout | predicted step (s) | predicted tokens/s | predicted "
             "speedup | predicted efficiency | predicted MFU |%s\n"
             "|---:|---:|---|---:|---:|---:|---:|---:|%s\n",
          measured ? " measured tokens/s | measured/predicted | measured efficiency |" : "",
          measured ? "---:|---:|---:|" : "");
  for (int k = 0; k < n_pts; k++) {
    const point_rec *p = &pts[k];
    if (!p->n_pred) continue;
    char st[32], tps[32], sp[32], ef[32], mfu[32], meas[32], ratio[32], mef[32];
    fmt_num(st, sizeof st, p->pred_step_s, "%.4g");
    fmt_num(tps, sizeof tps, p->pred_tps, "%.1f");
    fmt_num(sp, sizeof sp, p->pred_speedup, "%.2f");
    fmt_num(ef, sizeof ef, p->pred_efficiency * 100.0, "%.1f%%");
    fmt_num(mfu, sizeof mfu, p->pred_mfu * 100.0, "%.2f%%");
    fprintf(f, "| %d | %d | %s | %s | %s | %s | %s | %s |", p->nodes, p->ranks, p->layout, st, tps,
            sp, ef, mfu);
    if (measured) {
      fmt_num(meas, sizeof meas, p->n_ok ? p->tps_mean : NAN, "%.1f");
      fmt_num(ratio, sizeof ratio, p->n_ok ? p->tps_mean / p->pred_tps : NAN, "%.3f");
      fmt_num(mef, sizeof mef, p->efficiency * 100.0, "%.1f%%");
      fprintf(f, " %s | %s | %s |", meas, ratio, mef);
    }
    fputc('\n', f);
  }
}

/* The virtual device's predictions (campaign --emulate, or runs on the
 * virtual device), per point that has one, measured or not: step,
 * tokens/s, and the speedup and efficiency they predict against the
 * predicted point with the fewest ranks (strong: S = T/T0, E = S N0/N;
 * weak: E = t0/t, S = E N/N0), MFU; the measured tokens/s and efficiency
 * beside them where runs exist. */
static void md_predicted(FILE *f, const point_rec *pts, int n_pts) {
  const point_rec *ref = mt_report_pred_ref(pts, n_pts);
  if (!ref) return;
  char ranks[32], nodes[32];
  plural(ranks, sizeof ranks, ref->ranks, "rank");
  plural(nodes, sizeof nodes, ref->nodes, "node");
  fprintf(f, "\n## Predicted (virtual device)\n\nPredicted, not measured: meshtrain's virtual "
             "device (`campaign --emulate`, or a run with `train.device = virtual`) at the "
             "hardware profile %s, each point's figures against the predicted point with the "
             "fewest ranks (%s on %s):\n\n",
          ref->pred_hw, ranks, nodes);
  mt_report_predicted_table(f, pts, n_pts);
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

/* a run's line in the lists below: its id, size, layout, status, directory */
static void md_run_line(FILE *f, const run_rec *x) {
  char nodes[32], ranks[32];
  plural(nodes, sizeof nodes, x->nodes, "node");
  plural(ranks, sizeof ranks, x->ranks, "rank");
  fprintf(f, "- `%s` (%s, %s, %s): %s — `%s`\n", x->id, nodes, ranks,
          x->layout[0] ? x->layout : "?", x->status, x->dir);
}

/* the runs that failed, and those not run yet, with their status and directory */
static void md_failed(FILE *f, const report *r) {
  fprintf(f, "\n## Failed or missing runs\n\n");
  if (!mt_report_n_failed(r)) fprintf(f, "None.\n");
  for (int i = 0; i < r->n_runs; i++)
    if (!r->runs[i].ok && !r->runs[i].is_virtual && !r->runs[i].not_run)
      md_run_line(f, &r->runs[i]);
  if (!mt_report_n_not_run(r)) return;
  fprintf(f, "\n## Not run yet\n\nNo summary.json and no job status yet (not failures):\n\n");
  for (int i = 0; i < r->n_runs; i++)
    if (r->runs[i].not_run) md_run_line(f, &r->runs[i]);
}

/* the PNGs (or why they were not drawn) and the files beside them */
static void md_plots(FILE *f, const report *r, const point_rec *pts, int n_pts,
                     const step_plots *sp, int plots, const char *why) {
  fprintf(f, "\n## Plots\n\n");
  if (plots != 0) fprintf(f, "Not drawn here: %s.\n\n", why);
  int any = mt_report_n_ok_points(pts, n_pts), pred = mt_report_n_pred_points(pts, n_pts);
  int n_virtual = 0;
  for (int i = 0; i < r->n_runs; i++) n_virtual += r->runs[i].is_virtual;
  if (sp->n_series) fprintf(f, "![loss](loss.png)\n![tokens/s](tokens_per_s.png)\n");
  if (sp->n_src) fprintf(f, "![validation loss per source](val_by_source.png)\n");
  else if (pred)
    fprintf(f, "No loss or tokens/s against step: %s.\n\n",
            n_virtual ? "the virtual device computes no values (its loss is 0) and times every "
                        "step alike; measured runs draw them"
                      : "nothing measured yet");
  if (any > 1 || pred > 1) fprintf(f, "![speedup](speedup.png)\n![efficiency](efficiency.png)\n");
  if (any) fprintf(f, "![step time breakdown](breakdown.png)\n");
  if (pred) fprintf(f, "![predicted tokens/s](predicted.png)\n");
  if (r->n_bench) fprintf(f, "![bus bandwidth](busbw.png)\n");
  fprintf(f, "\nFiles: summary.csv (per point), runs.csv (per run), steps.csv (per step of the "
             "plotted runs)%s; plots.gp draws the PNGs from steps.dat, scaling.dat%s%s.\n",
          r->n_bench ? ", bench.csv" : "", pred ? ", predicted.dat" : "",
          r->n_bench ? ", busbw.dat" : "");
}

void mt_report_write_md(const char *out, const report *r, const point_rec *pts, int n_pts,
                        const step_plots *sp, int plots, const char *why) {
  char path[PATH_LEN];
  FILE *f = open_out(out, "report.md", path);
  fprintf(f, "# %s\n\n", r->name);
  md_intro(f, r, pts, n_pts);
  if (mt_report_n_ok_points(pts, n_pts) || !mt_report_n_pred_points(pts, n_pts)) {
    if (n_pts) mt_report_markdown_table(f, pts, n_pts);
    if (n_pts) md_breakdown(f, pts, n_pts);
  }
  md_predicted(f, pts, n_pts); /* nothing measured: the predictions alone */
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
