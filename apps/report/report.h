/* meshreport's pieces, one concern a file under apps/report/:
 *   util.c      errors, files, JSON, number formatting, gnuplot
 *   load.c      run and campaign directories read into a report
 *   points.c    runs grouped into points: means, spread, speedup, efficiency
 *   csv.c       runs.csv, summary.csv, bench.csv
 *   steps.c     steps.csv and steps.dat: the series of loss and tokens/s
 *   plots.c     plots.gp and its data (scaling, predicted, busbw); gnuplot
 *   markdown.c  the Markdown tables (measured, predicted) and report.md
 *   timeline.c  the timeline subcommand
 *   flight.c    the flight subcommand (the watchdog's records)
 * and meshreport.c, the main: arguments, the pieces in order, stdout. */
#ifndef MT_REPORT_H
#define MT_REPORT_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdio.h>

#include "core/core.h"

#define PROG "meshreport"
#define PATH_LEN 4096

/* one error line, then exit with code (bad input or runtime failure) */
void __attribute__((format(printf, 2, 3), noreturn)) mt_report_die(int code, const char *fmt, ...);
#define die_input(...) mt_report_die(MT_EXIT_BADINPUT, __VA_ARGS__)
#define die_runtime(...) mt_report_die(MT_EXIT_RUNTIME, __VA_ARGS__)

/* the whole file as a NUL-terminated string, or NULL */
char *read_text(const char *path);
/* the file parsed as JSON, or NULL (missing, unreadable or not JSON) */
cJSON *read_json(const char *path);
double num_or(const cJSON *o, const char *key, double fallback);
/* snprintf that truncates silently (labels, statuses) */
void __attribute__((format(printf, 3, 4))) fmt_into(char *dst, size_t cap, const char *fmt, ...);
void copy_str(char *dst, size_t cap, const char *src);
/* v with fmt into buf, or "-" for NaN (tables) */
void fmt_num(char *buf, size_t cap, double v, const char *fmt);
/* "1 rank", "2 ranks" */
void plural(char *buf, size_t cap, int n, const char *what);
/* a CSV field: ",%.9g", or "," alone for NaN */
void csv_num(FILE *f, double v);
/* a/b (b alone when absolute) into out (PATH_LEN); too long is bad input */
void path_join(char *out, const char *a, const char *b);
int is_dir(const char *p);
/* dir/name opened for writing (its path into path, PATH_LEN), or exit 3 */
FILE *open_out(const char *dir, const char *name, char *path);
void close_out(FILE *f, const char *path);
/* runs `gnuplot SCRIPT` in dir (its output to gnuplot.log there): 0 when
 * the PNGs were drawn, else -1 with why: one line saying how to draw them */
int run_gnuplot(const char *dir, const char *script, char *why, size_t why_cap);

/* a subcommand's (cmd's) argument a that is not one of its options: the run
 * directory into *run; an unknown option or a second directory is bad input */
void take_run_dir(const char *cmd, const char *a, const char **run);
/* bad input naming cmd when no run directory was given */
void need_run_dir(const char *cmd, const char *run);

/* meshreport timeline RUN_DIR ...: the subcommand (timeline.c) */
int mt_report_timeline(int argc, char **argv);
/* meshreport flight RUN_DIR ...: the subcommand (flight.c) */
int mt_report_flight(int argc, char **argv);

/* ------------------------------------------------------------------ */
/* the report: what was read (load.c) and what it groups into (points.c) */

/* step-time components, as metrics.jsonl names them, plus what is left */
#define N_PARTS 6
extern const char *const mt_report_parts[N_PARTS];

/* one attempt of a run (summary.json "attempts": a requeued run has several) */
typedef struct {
  long long start_step, end_step;
  int recorded, world, exit_code;
  char layout[64];
  double setup_s, tokens_per_s;
} attempt_rec;

typedef struct {
  char id[256], dir[PATH_LEN], layout[64], status[256];
  int nodes, ranks, repeat, ok, is_bench;
  double tokens_per_s, tokens_per_s_per_rank, mean_step_s, mfu, final_loss;
  double part_s[N_PARTS]; /* mean seconds per step of each component */
  int steps;
  int restarts, oversubscribed; /* oversubscribed: ranks x threads > cores on a node */
  int over_ranks, over_threads, over_cpus; /* the worst such case seen */
  double lost_s, wait_s;        /* lost to restarts; waited between attempts */
  attempt_rec *attempts;        /* NULL for summaries without "attempts" */
  int n_attempts;
  char resumed_from[PATH_LEN / 4]; /* the other run's checkpoint it began from, or "" */
  long long start_step;            /* the step it began at (0, or that checkpoint's) */
  char rollbacks[512];             /* its loss spikes rolled back (summary.json), or "" */
  int has_pred; /* predicted/summary.json (meshslurm.py campaign --emulate): */
  double pred_tps, pred_step_s, pred_mfu; /* the virtual device's figures */
  char pred_hw[64];                       /* the profile it priced at */
  int not_run;    /* no summary.json and no status: not run yet (a campaign's point
                     before its job ran), not a failure */
  int is_virtual; /* the run itself ran on the virtual device: a prediction (has_pred), not
                   * a measurement (ok = 0), neither failed nor counted among the runs */
} run_rec;

typedef struct {
  int nodes, ranks, n_ok, n_total;
  char layout[64];
  double tps_mean, tps_std, tps_min, tps_max, tps_per_rank, step_s, mfu, speedup, efficiency;
  double part_s[N_PARTS];
  int restarts, oversubscribed; /* over its runs: requeues, runs with ranks > cores */
  int n_pred;                   /* runs with a prediction, and their mean figures */
  double pred_tps, pred_step_s, pred_mfu;
  double pred_speedup, pred_efficiency; /* against the predicted point with the fewest ranks */
  char pred_hw[64];
} point_rec;

typedef struct {
  char op[32], run[256];
  int ranks, nodes;
  double bytes, time_us, algbw, busbw, wrong;
} bench_rec;

typedef struct {
  run_rec *runs;
  int n_runs, cap_runs;
  bench_rec *bench;
  int n_bench, cap_bench;
  char name[256], scaling[16];
} report;

/* load.c: one run directory (plan, a manifest entry or point.json, may be
 * NULL), or every point of a campaign (DIR/manifest.json; unreadable: exit
 * 2). A run that failed, never ran or left unreadable files is kept with its
 * status, never fatal. */
void mt_report_load_run(report *r, const char *dir, const cJSON *plan);
void mt_report_load_campaign(report *r, const char *dir);

/* points.c: the training points (runs grouped by nodes, ranks and layout),
 * sorted by ranks, with speedup and efficiency against the successful point
 * with the fewest ranks; returns how many (*out: free it) */
int mt_report_make_points(const report *r, point_rec **out);
/* 1 when run x belongs to point p */
int mt_report_point_holds(const point_rec *p, const run_rec *x);
/* the points with a successful run; with a prediction */
int mt_report_n_ok_points(const point_rec *pts, int n_pts);
int mt_report_n_pred_points(const point_rec *pts, int n_pts);
/* the predicted point with the fewest ranks (the predictions' reference), or NULL */
const point_rec *mt_report_pred_ref(const point_rec *pts, int n_pts);
/* the runs that failed or are missing (neither measured nor a virtual run) */
int mt_report_n_failed(const report *r);
/* the runs not run yet (no summary.json, no status) */
int mt_report_n_not_run(const report *r);

/* ------------------------------------------------------------------ */
/* the outputs                                                         */

/* csv.c: runs.csv, summary.csv and (bench runs) bench.csv into out */
void mt_report_write_csvs(const char *out, const report *r, const point_rec *pts, int n_pts);

/* the lines of loss.png and tokens_per_s.png, and where runs resumed */
typedef struct {
  char (*title)[PATH_LEN / 8]; /* per series */
  int *has_val;                /* per series: it has validation losses */
  long long *first, *last;     /* per series: its first and last step */
  int n_series;
  long long *resumes; /* steps after which an attempt resumed (unique) */
  int n_resumes;
  char (*origin)[PATH_LEN / 4]; /* "RUN: resumed from CHECKPOINT", runs that began elsewhere */
  int n_origins;
  int window; /* steps in the moving average of tokens/s (1: none) */
  /* a blend's validation loss per source: the blocks of val_sources.dat,
   * one per (series, source), "step loss", and their titles */
  char (*src_title)[PATH_LEN / 8];
  int n_src;
} step_plots;

/* steps.c: steps.csv and steps.dat into out, and the series they hold (sp) */
void mt_report_write_steps(const char *out, const report *r, const point_rec *pts, int n_pts,
                           step_plots *sp);
void mt_report_step_plots_free(step_plots *sp);

/* plots.c: plots.gp and its data (scaling.dat, predicted.dat, busbw.dat)
 * always; the PNGs where gnuplot runs. Returns 0 when it drew them, else
 * -1 with why (one line, how to draw them). */
int mt_report_make_plots(const char *out, const report *r, const point_rec *pts, int n_pts,
                         const step_plots *sp, char *why, size_t why_cap);

/* markdown.c: the main Markdown table (to report.md and to stdout; speedup
 * and efficiency only where two points compare), and report.md (plots: 0
 * when the PNGs were drawn, else why says how to draw them) */
void mt_report_markdown_table(FILE *f, const point_rec *pts, int n_pts);
/* the predictions' table (points with one), to report.md and, with nothing
 * measured, to stdout */
void mt_report_predicted_table(FILE *f, const point_rec *pts, int n_pts);
void mt_report_write_md(const char *out, const report *r, const point_rec *pts, int n_pts,
                        const step_plots *sp, int plots, const char *why);

#endif
