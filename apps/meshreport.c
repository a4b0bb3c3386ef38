/* meshreport: turns run and campaign results into tables and plots.
 *
 *   meshreport CAMPAIGN_DIR [--out DIR]           (a dir with manifest.json)
 *   meshreport RUN_DIR... --out DIR [--scaling strong|weak]
 *   meshreport timeline RUN_DIR [--out DIR] [--step N]   (report/timeline.c)
 *
 * Reads each run's summary.json and metrics.jsonl (training) or bench.jsonl
 * (meshbench collectives), groups repeats of the same point (nodes, ranks,
 * layout) and writes into DIR:
 *   runs.csv      one row per run, failed ones included with their status
 *   summary.csv   one row per point: mean, spread, speedup, efficiency, MFU,
 *                 step-time breakdown
 *   steps.csv     per step of one run per point: loss, validation loss,
 *                 tokens/s, step time, tokens/s averaged over the last W steps
 *   bench.csv     one row per collective, ranks and size (bench runs)
 *   report.md     the tables (no speedup or efficiency for a single point),
 *                 restarts, resumes from other runs, failed or missing runs
 *   plots.gp      the gnuplot script, always, with its data (steps.dat,
 *                 scaling.dat, busbw.dat); where gnuplot runs, it draws
 *   loss.png tokens_per_s.png speedup.png efficiency.png breakdown.png
 *   busbw.png     (without gnuplot, one line on stdout says how to draw them)
 * and prints the Markdown table. A run requeued after preemption counts all
 * its attempts: its throughput is summary.json's run.tokens_per_s (tokens of
 * every step / time of every step, from metrics.jsonl), with restarts and the
 * time they lost listed. Speedup and efficiency are against the point with
 * the fewest ranks (N0, throughput T0):
 *   strong scaling  S = T/T0 (throughputs; = t0/t for step times), E = S*N0/N
 *   weak scaling    E = t0/t (step times), S = E*N/N0
 * Predictions of the virtual device (a campaign's points' predicted/ from
 * campaign --emulate, or run directories whose summary.json says
 * device.kind = virtual) are reported as predicted, never as measured or
 * failed: per point its predicted step, tokens/s, speedup and efficiency
 * (against the predicted point with the fewest ranks) and MFU, beside the
 * measured figures where runs exist (report.md, summary.csv, predicted.png,
 * speedup.png, efficiency.png); with nothing measured, alone.
 * A run that failed, never ran or left unreadable files is listed, never fatal.
 * Exit codes: 0 report written, 2 bad input (options, unreadable manifest),
 * 3 cannot write the output. The pieces live in apps/report/ (report.h). */
#include "report/report.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void help(FILE *f) {
  fprintf(f,
          "usage: %s CAMPAIGN_DIR [--out DIR]\n"
          "       %s RUN_DIR... --out DIR [--scaling strong|weak] [--name TITLE]\n"
          "       %s timeline RUN_DIR [--out DIR] [--step N]   (see %s timeline --help)\n"
          "       %s flight RUN_DIR [--out DIR]   (after the watchdog ended a run)\n"
          "Reads a campaign (manifest.json from slurm/meshslurm.py campaign) or run directories\n"
          "(summary.json + metrics.jsonl of meshtrain, bench.jsonl of meshbench) and writes\n"
          "summary.csv, runs.csv, steps.csv, bench.csv, report.md and PNG plots (gnuplot:\n"
          "loss and tokens/s against step, speedup, efficiency, breakdown, busbw) into DIR\n"
          "(default CAMPAIGN_DIR/report). Prints the Markdown table. A requeued or resumed\n"
          "run counts all its attempts (summary.json run.tokens_per_s; restarts and lost\n"
          "time listed). Speedup and efficiency are against the point with the fewest\n"
          "ranks: strong S = T/T0, E = S*N0/N; weak E = t0/t (step times), S = E*N/N0.\n"
          "The virtual device's figures (campaign --emulate's predicted/, runs with\n"
          "train.device = virtual) are reported as predictions, beside the measured ones.\n"
          "Failed or missing runs are listed.\n",
          PROG, PROG, PROG, PROG, PROG);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "timeline")) return mt_report_timeline(argc, argv);
  if (argc > 1 && !strcmp(argv[1], "flight")) return mt_report_flight(argc, argv);
  const char *out = NULL;
  report r = {0};
  const char **paths = calloc((size_t)argc + 1, sizeof(char *));
  int n_paths = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      help(stdout);
      free(paths);
      return MT_EXIT_OK;
    } else if (!strcmp(a, "--out") || !strcmp(a, "--scaling") || !strcmp(a, "--name")) {
      if (i + 1 >= argc) die_input("%s needs a value (see %s --help)", a, PROG);
      const char *v = argv[++i];
      if (!strcmp(a, "--out")) out = v;
      else if (!strcmp(a, "--name")) copy_str(r.name, sizeof r.name, v);
      else if (strcmp(v, "strong") && strcmp(v, "weak"))
        die_input("--scaling: expected strong or weak, got '%s'", v);
      else copy_str(r.scaling, sizeof r.scaling, v);
    } else if (a[0] == '-' && a[1]) {
      die_input("unknown option '%s' (see %s --help)", a, PROG);
    } else {
      paths[n_paths++] = a;
    }
  }
  if (!n_paths) die_input("no campaign or run directory given (see %s --help)", PROG);
  char default_out[PATH_LEN] = "";
  for (int i = 0; i < n_paths; i++) {
    char manifest[PATH_LEN];
    path_join(manifest, paths[i], "manifest.json");
    if (is_dir(paths[i]) && access(manifest, F_OK) == 0) {
      mt_report_load_campaign(&r, paths[i]);
      if (!default_out[0]) path_join(default_out, paths[i], "report");
    } else {
      mt_report_load_run(&r, paths[i], NULL);
    }
  }
  if (!out && !default_out[0]) die_input("--out DIR is needed when no campaign directory is given");
  if (!out) out = default_out;
  if (!r.scaling[0]) copy_str(r.scaling, sizeof r.scaling, "strong");
  if (mkdir(out, 0777) != 0 && errno != EEXIST) die_runtime("cannot create %s: %s", out, strerror(errno));
  if (!is_dir(out)) die_runtime("%s is not a directory", out);

  point_rec *pts = NULL;
  int n_pts = mt_report_make_points(&r, &pts);
  if (!r.name[0]) /* a single run is named after its directory */
    copy_str(r.name, sizeof r.name, r.n_runs == 1 ? r.runs[0].id : "meshtrain runs");
  mt_report_write_csvs(out, &r, pts, n_pts);
  step_plots sp;
  mt_report_write_steps(out, &r, pts, n_pts, &sp);
  char why[2 * PATH_LEN] = "";
  int plots = mt_report_make_plots(out, &r, pts, n_pts, &sp, why, sizeof why);
  mt_report_write_md(out, &r, pts, n_pts, &sp, plots, why);
  mt_report_step_plots_free(&sp);

  int n_failed = mt_report_n_failed(&r), n_ok = mt_report_n_ok_points(pts, n_pts);
  int n_pred = mt_report_n_pred_points(pts, n_pts), n_train = 0;
  for (int i = 0; i < r.n_runs; i++) n_train += !r.runs[i].is_virtual;
  if (n_ok > 1)
    printf("%s: %s scaling, %d run%s, %d failed or missing\n\n", r.name, r.scaling, n_train,
           n_train == 1 ? "" : "s", n_failed);
  else if (!n_ok && n_pred && !n_train)
    printf("%s: predicted only (virtual device), %d point%s\n\n", r.name, n_pred,
           n_pred == 1 ? "" : "s");
  else
    printf("%s: %d run%s, %d failed or missing\n\n", r.name, n_train, n_train == 1 ? "" : "s",
           n_failed);
  if (n_ok || (n_pts && !n_pred)) mt_report_markdown_table(stdout, pts, n_pts);
  if (!n_ok && n_pred) { /* nothing measured: what the virtual device predicted */
    printf("Predicted (virtual device), nothing measured yet:\n\n");
    mt_report_predicted_table(stdout, pts, n_pts);
  }
  for (int i = 0; i < r.n_runs; i++)
    if (!r.runs[i].ok && !r.runs[i].is_virtual && !r.runs[i].not_run)
      printf("failed or missing: %s: %s\n", r.runs[i].id, r.runs[i].status);
  const int n_not_run = mt_report_n_not_run(&r);
  if (n_not_run) printf("not run yet: %d run%s (listed in report.md)\n", n_not_run,
                        n_not_run == 1 ? "" : "s");
  if (plots != 0) printf("\nplots: %s\n", why);
  printf("\nreport: %s/report.md\n", out);
  for (int i = 0; i < r.n_runs; i++) free(r.runs[i].attempts);
  free(pts), free(r.runs), free(r.bench), free(paths);
  return MT_EXIT_OK;
}
