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
 * A run that failed, never ran or left unreadable files is listed, never fatal.
 * Exit codes: 0 report written, 2 bad input (options, unreadable manifest),
 * 3 cannot write the output. */
#include "report/report.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* step-time components, as metrics.jsonl names them, plus what is left */
static const char *g_parts[] = {"compute", "dp_comm", "optimizer", "data", "eval", "other"};
#define N_PARTS 6

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
  int has_pred; /* predicted/summary.json (meshslurm.py campaign --emulate): */
  double pred_tps, pred_step_s, pred_mfu; /* the virtual device's figures */
} run_rec;

typedef struct {
  int nodes, ranks, n_ok, n_total;
  char layout[64];
  double tps_mean, tps_std, tps_min, tps_max, tps_per_rank, step_s, mfu, speedup, efficiency;
  double part_s[N_PARTS];
  int restarts, oversubscribed; /* over its runs: requeues, runs with ranks > cores */
  int n_pred;                   /* runs with a prediction, and their mean figures */
  double pred_tps, pred_step_s, pred_mfu;
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

static run_rec *add_run(report *r) {
  if (r->n_runs == r->cap_runs) {
    r->cap_runs = r->cap_runs ? 2 * r->cap_runs : 16;
    r->runs = realloc(r->runs, (size_t)r->cap_runs * sizeof(run_rec));
    if (!r->runs) die_runtime("out of memory");
  }
  run_rec *x = &r->runs[r->n_runs++];
  memset(x, 0, sizeof *x);
  return x;
}

static void add_bench(report *r, const bench_rec *b) {
  if (r->n_bench == r->cap_bench) {
    r->cap_bench = r->cap_bench ? 2 * r->cap_bench : 64;
    r->bench = realloc(r->bench, (size_t)r->cap_bench * sizeof(bench_rec));
    if (!r->bench) die_runtime("out of memory");
  }
  r->bench[r->n_bench++] = *b;
}

/* the one-line status the job script left (done, failed: exit 3, ...) */
static void read_status(const char *dir, char *out, size_t cap) {
  char p[PATH_LEN];
  path_join(p, dir, "status");
  char *s = read_text(p);
  if (!s) {
    copy_str(out, cap, "");
    return;
  }
  s[strcspn(s, "\n")] = '\0';
  copy_str(out, cap, s);
  free(s);
}

/* per-step means of the time_s components over metrics.jsonl, skipping the
 * first step (warm-up) when there are more */
static void read_breakdown(run_rec *x) {
  char p[PATH_LEN];
  path_join(p, x->dir, "metrics.jsonl");
  FILE *f = fopen(p, "r");
  if (!f) return;
  char *line = NULL;
  size_t cap = 0;
  double sum[N_PARTS] = {0}, first[N_PARTS] = {0};
  int n = 0;
  while (getline(&line, &cap, f) > 0) {
    cJSON *j = cJSON_Parse(line);
    if (!j) continue;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "time_s");
    double step = num_or(j, "step_s", NAN), known = 0.0, v[N_PARTS] = {0};
    if (cJSON_IsObject(t) && !isnan(step)) {
      for (int k = 0; k < N_PARTS - 1; k++) v[k] = num_or(t, g_parts[k], 0.0), known += v[k];
      v[N_PARTS - 1] = step > known ? step - known : 0.0;
      for (int k = 0; k < N_PARTS; k++) {
        if (n == 0) first[k] = v[k];
        sum[k] += v[k];
      }
      n++;
    }
    cJSON_Delete(j);
  }
  free(line);
  fclose(f);
  x->steps = n;
  for (int k = 0; k < N_PARTS; k++)
    x->part_s[k] = n > 1 ? (sum[k] - first[k]) / (n - 1) : n == 1 ? sum[k] : NAN;
}

/* bench.jsonl rows of one run (meshbench collectives) */
static int read_bench(report *r, const run_rec *x) {
  char p[PATH_LEN];
  path_join(p, x->dir, "bench.jsonl");
  FILE *f = fopen(p, "r");
  if (!f) return 0;
  char *line = NULL;
  size_t cap = 0;
  int rows = 0;
  while (getline(&line, &cap, f) > 0) {
    cJSON *j = cJSON_Parse(line);
    const cJSON *op = j ? cJSON_GetObjectItemCaseSensitive(j, "bench") : NULL;
    if (cJSON_IsString(op) && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "busbw_gbs"))) {
      bench_rec b = {0};
      copy_str(b.op, sizeof b.op, op->valuestring);
      copy_str(b.run, sizeof b.run, x->id);
      b.ranks = (int)num_or(j, "ranks", x->ranks);
      b.nodes = x->nodes ? x->nodes : (int)num_or(j, "nodes", 1);
      b.bytes = num_or(j, "bytes", 0);
      b.time_us = num_or(j, "time_us", NAN);
      b.algbw = num_or(j, "algbw_gbs", NAN);
      b.busbw = num_or(j, "busbw_gbs", NAN);
      b.wrong = num_or(j, "wrong", 0);
      add_bench(r, &b);
      rows++;
    }
    cJSON_Delete(j);
  }
  free(line);
  fclose(f);
  return rows;
}

/* ranks x threads per rank on a machine of cpus CPUs: flag the run when they
 * outnumber them, keeping the worst case for the report */
static void note_load(run_rec *x, int ranks, int threads, int cpus) {
  if (threads < 1) threads = 1;
  if (cpus <= 0 || ranks * threads <= cpus) return;
  if (!x->oversubscribed ||
      (double)ranks * threads / cpus > (double)x->over_ranks * x->over_threads / x->over_cpus)
    x->over_ranks = ranks, x->over_threads = threads, x->over_cpus = cpus;
  x->oversubscribed = 1;
}

/* The whole run from summary.json's "run" totals (every attempt of a requeued
 * run: tokens and time of every step) and its "attempts"; summaries without
 * them keep the single-attempt figures. */
static void read_attempts(run_rec *x, const cJSON *s) {
  const cJSON *run = cJSON_GetObjectItemCaseSensitive(s, "run");
  const cJSON *atts = cJSON_GetObjectItemCaseSensitive(s, "attempts");
  if (cJSON_IsObject(run) && num_or(run, "tokens_per_s", 0) > 0) {
    double steps = num_or(run, "steps", 0);
    x->tokens_per_s = num_or(run, "tokens_per_s", NAN);
    x->tokens_per_s_per_rank = x->tokens_per_s / (x->ranks ? x->ranks : 1);
    if (steps > 0) x->mean_step_s = num_or(run, "train_s", NAN) / steps;
    x->mfu = num_or(run, "mfu", x->mfu);
    x->restarts = (int)num_or(run, "restarts", 0);
    x->lost_s = num_or(run, "lost_s", 0);
    x->wait_s = num_or(run, "requeue_wait_s", 0);
  }
  const cJSON *from = cJSON_GetObjectItemCaseSensitive(run, "resumed_from");
  if (cJSON_IsString(from)) copy_str(x->resumed_from, sizeof x->resumed_from, from->valuestring);
  x->start_step = (long long)num_or(run, "start_step", 0);
  int n = cJSON_IsArray(atts) ? cJSON_GetArraySize(atts) : 0;
  if (n <= 0) return;
  x->attempts = calloc((size_t)n, sizeof(attempt_rec));
  if (!x->attempts) die_runtime("out of memory");
  const cJSON *a;
  cJSON_ArrayForEach(a, atts) {
    attempt_rec *t = &x->attempts[x->n_attempts++];
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(a, "layout");
    t->start_step = (long long)num_or(a, "start_step", 0);
    t->end_step = (long long)num_or(a, "end_step", 0);
    t->recorded = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "recorded"));
    t->world = (int)num_or(a, "world", 0);
    t->exit_code = (int)num_or(a, "exit_code", -1);
    t->setup_s = num_or(a, "setup_s", NAN);
    t->tokens_per_s = num_or(a, "tokens_per_s", NAN);
    copy_str(t->layout, sizeof t->layout, cJSON_IsString(lay) ? lay->valuestring : "?");
    double ranks = num_or(a, "node_ranks", 0), threads = num_or(a, "threads_per_rank", 1);
    double cpus = num_or(a, "node_cpus", 0);
    note_load(x, (int)ranks, (int)threads, (int)cpus);
  }
}

/* The job script's view (slurm-env.txt, its last attempt): ranks on the
 * batch node's machine and that machine's CPUs. It sees what MPI cannot:
 * emulated nodes of a local test cluster that share one machine. */
static void read_host_load(run_rec *x, int threads) {
  char p[PATH_LEN];
  path_join(p, x->dir, "slurm-env.txt");
  char *text = read_text(p);
  if (!text) return;
  int ranks = 0, cpus = 0;
  for (char *at = text; (at = strstr(at, "host_cpus=")) != NULL; at++) {
    cpus = atoi(at + strlen("host_cpus="));
    const char *r = strstr(at, "host_ranks=");
    ranks = r ? atoi(r + strlen("host_ranks=")) : 0;
  }
  free(text);
  note_load(x, ranks, threads, cpus);
}

/* the virtual device's prediction of the run (campaign --emulate), if any */
static void read_predicted(run_rec *x) {
  char p[PATH_LEN];
  path_join(p, x->dir, "predicted/summary.json");
  cJSON *s = read_json(p);
  x->pred_tps = num_or(s, "tokens_per_s", NAN);
  x->pred_step_s = num_or(s, "mean_step_s", NAN);
  x->pred_mfu = num_or(s, "mfu", NAN);
  x->has_pred = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(s, "virtual")) && x->pred_tps > 0;
  cJSON_Delete(s);
}

/* one run directory; plan (a manifest entry or point.json) may be NULL */
static void load_run(report *r, const char *dir, const cJSON *plan) {
  run_rec *x = add_run(r);
  copy_str(x->dir, sizeof x->dir, dir);
  const char *base = strrchr(dir, '/');
  copy_str(x->id, sizeof x->id, base && base[1] ? base + 1 : dir);
  cJSON *point = NULL;
  if (!plan) {
    char p[PATH_LEN];
    path_join(p, dir, "point.json");
    plan = point = read_json(p);
  }
  if (plan) {
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(plan, "id");
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(plan, "layout_name");
    if (cJSON_IsString(id)) copy_str(x->id, sizeof x->id, id->valuestring);
    if (cJSON_IsString(lay)) copy_str(x->layout, sizeof x->layout, lay->valuestring);
    x->nodes = (int)num_or(plan, "nodes", 0);
    x->ranks = (int)num_or(plan, "ranks", 0);
    x->repeat = (int)num_or(plan, "repeat", 0);
  }
  cJSON_Delete(point);
  read_status(dir, x->status, sizeof x->status);
  read_predicted(x);
  if (!is_dir(dir)) {
    copy_str(x->status, sizeof x->status, "missing: no run directory");
    return;
  }
  if (read_bench(r, x) > 0) {
    x->ok = x->is_bench = 1;
    if (!x->status[0]) copy_str(x->status, sizeof x->status, "done");
    return;
  }
  char p[PATH_LEN];
  path_join(p, dir, "summary.json");
  cJSON *s = read_json(p);
  if (!s || !cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(s, "tokens_per_s"))) {
    char why[256];
    copy_str(why, sizeof why, x->status[0] ? x->status : "never ran");
    fmt_into(x->status, sizeof x->status, "%s (%s)", why,
             s ? "summary.json lacks tokens_per_s"
               : (access(p, F_OK) == 0 ? "summary.json unreadable" : "no summary.json"));
    cJSON_Delete(s);
    return;
  }
  const cJSON *lay = cJSON_GetObjectItemCaseSensitive(s, "layout");
  int world = (int)num_or(lay, "world", 0);
  if (!x->ranks) x->ranks = world;
  if (!x->nodes) x->nodes = 1;
  if (!x->layout[0] && cJSON_IsObject(lay))
    fmt_into(x->layout, sizeof x->layout, "dp%d-tp%d-pp%d-cp%d", (int)num_or(lay, "dp", 1),
             (int)num_or(lay, "tp", 1), (int)num_or(lay, "pp", 1), (int)num_or(lay, "cp", 1));
  x->tokens_per_s = num_or(s, "tokens_per_s", NAN);
  x->tokens_per_s_per_rank = num_or(s, "tokens_per_s_per_rank", x->tokens_per_s / (x->ranks ? x->ranks : 1));
  x->mean_step_s = num_or(s, "mean_step_s", NAN);
  x->mfu = num_or(s, "mfu", NAN);
  x->final_loss = num_or(s, "final_loss", NAN);
  read_attempts(x, s);
  read_host_load(x, (int)num_or(lay, "threads_per_rank", 1));
  cJSON_Delete(s);
  if (x->ranks <= 0 || !(x->tokens_per_s > 0)) {
    fmt_into(x->status, sizeof x->status, "failed (summary.json: no ranks or tokens_per_s)");
    return;
  }
  read_breakdown(x);
  x->ok = 1;
  if (!x->status[0]) copy_str(x->status, sizeof x->status, "done");
}

static void load_campaign(report *r, const char *dir) {
  char p[PATH_LEN];
  path_join(p, dir, "manifest.json");
  cJSON *m = read_json(p);
  if (!m) die_input("%s: cannot read or parse the campaign manifest", p);
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(m, "name");
  const cJSON *scaling = cJSON_GetObjectItemCaseSensitive(m, "scaling");
  const cJSON *points = cJSON_GetObjectItemCaseSensitive(m, "points");
  if (!cJSON_IsArray(points)) die_input("%s: no \"points\" array", p);
  if (cJSON_IsString(name) && !r->name[0]) copy_str(r->name, sizeof r->name, name->valuestring);
  if (cJSON_IsString(scaling) && !r->scaling[0])
    copy_str(r->scaling, sizeof r->scaling, scaling->valuestring);
  const cJSON *pt;
  cJSON_ArrayForEach(pt, points) {
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(pt, "dir");
    if (!cJSON_IsString(d)) continue;
    char run_dir[PATH_LEN];
    path_join(run_dir, dir, d->valuestring);
    load_run(r, run_dir, pt);
  }
  cJSON_Delete(m);
}

/* ------------------------------------------------------------------ */
/* grouping and scaling figures                                        */

static int find_point(point_rec *pts, int n, const run_rec *x) {
  for (int i = 0; i < n; i++)
    if (pts[i].nodes == x->nodes && pts[i].ranks == x->ranks && !strcmp(pts[i].layout, x->layout))
      return i;
  return -1;
}

static int cmp_points(const void *a, const void *b) {
  const point_rec *p = a, *q = b;
  if (p->ranks != q->ranks) return p->ranks - q->ranks;
  if (p->nodes != q->nodes) return p->nodes - q->nodes;
  return strcmp(p->layout, q->layout);
}

/* the training points, sorted by ranks; returns how many */
static int make_points(const report *r, point_rec **out) {
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
    pts[k].n_total++;
    if (x->has_pred) {
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
      if (x->ok && !x->is_bench && find_point(p, 1, x) == 0)
        ss += (x->tokens_per_s - p->tps_mean) * (x->tokens_per_s - p->tps_mean);
    }
    p->tps_std = p->n_ok > 1 ? sqrt(ss / (p->n_ok - 1)) : 0.0;
  }
  qsort(pts, (size_t)n, sizeof(point_rec), cmp_points);
  /* reference: the successful point with the fewest ranks (then nodes) */
  const point_rec *ref = NULL;
  for (int k = 0; k < n && !ref; k++)
    if (pts[k].n_ok) ref = &pts[k];
  int weak = !strcmp(r->scaling, "weak");
  for (int k = 0; k < n; k++) {
    point_rec *p = &pts[k];
    p->speedup = p->efficiency = NAN;
    if (!ref || !p->n_ok) continue;
    double ratio = (double)p->ranks / ref->ranks;
    if (weak) {
      p->efficiency = ref->step_s / p->step_s;
      p->speedup = p->efficiency * ratio;
    } else {
      p->speedup = p->tps_mean / ref->tps_mean;
      p->efficiency = p->speedup / ratio;
    }
  }
  *out = pts;
  return n;
}

/* ------------------------------------------------------------------ */
/* output                                                              */

/* a CSV field: numbers as %.9g, NaN as empty */
static void csv_num(FILE *f, double v) {
  if (isnan(v))
    fputs(",", f);
  else
    fprintf(f, ",%.9g", v);
}

static void write_csvs(const char *out, const report *r, const point_rec *pts, int n_pts) {
  char path[PATH_LEN];
  FILE *f = open_out(out, "runs.csv", path);
  fprintf(f, "id,dir,status,ok,nodes,ranks,layout,repeat,tokens_per_s,tokens_per_s_per_rank,"
             "mean_step_s,mfu,final_loss");
  for (int c = 0; c < N_PARTS; c++) fprintf(f, ",%s_s", g_parts[c]);
  fprintf(f, ",attempts,restarts,lost_s,requeue_wait_s,oversubscribed\n");
  for (int i = 0; i < r->n_runs; i++) {
    const run_rec *x = &r->runs[i];
    if (x->is_bench) continue;
    char status[256];
    copy_str(status, sizeof status, x->status);
    for (char *c = status; *c; c++)
      if (*c == ',' || *c == '"') *c = ';';
    fprintf(f, "%s,%s,%s,%d,%d,%d,%s,%d", x->id, x->dir, status, x->ok, x->nodes, x->ranks,
            x->layout, x->repeat);
    if (x->ok) {
      csv_num(f, x->tokens_per_s), csv_num(f, x->tokens_per_s_per_rank);
      csv_num(f, x->mean_step_s), csv_num(f, x->mfu), csv_num(f, x->final_loss);
      for (int c = 0; c < N_PARTS; c++) csv_num(f, x->part_s[c]);
      fprintf(f, ",%d,%d", x->n_attempts ? x->n_attempts : 1, x->restarts);
      csv_num(f, x->lost_s), csv_num(f, x->wait_s);
      fprintf(f, ",%d", x->oversubscribed);
    } else {
      for (int c = 0; c < 5 + N_PARTS + 5; c++) fputc(',', f);
    }
    fputc('\n', f);
  }
  close_out(f, path);

  f = open_out(out, "summary.csv", path);
  fprintf(f, "nodes,ranks,layout,runs_ok,runs,tokens_per_s_mean,tokens_per_s_std,tokens_per_s_min,"
             "tokens_per_s_max,tokens_per_s_per_rank,step_s_mean,speedup,efficiency,mfu_mean");
  for (int c = 0; c < N_PARTS; c++) fprintf(f, ",%s_s", g_parts[c]);
  fprintf(f, ",predicted_tokens_per_s,predicted_step_s,predicted_mfu,measured_over_predicted\n");
  for (int k = 0; k < n_pts; k++) {
    const point_rec *p = &pts[k];
    fprintf(f, "%d,%d,%s,%d,%d", p->nodes, p->ranks, p->layout, p->n_ok, p->n_total);
    if (p->n_ok) {
      double v[] = {p->tps_mean, p->tps_std, p->tps_min,      p->tps_max, p->tps_per_rank,
                    p->step_s,   p->speedup, p->efficiency, p->mfu};
      for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) csv_num(f, v[i]);
      for (int c = 0; c < N_PARTS; c++) csv_num(f, p->part_s[c]);
    } else {
      for (int c = 0; c < 9 + N_PARTS; c++) fputc(',', f);
    }
    csv_num(f, p->n_pred ? p->pred_tps : NAN), csv_num(f, p->n_pred ? p->pred_step_s : NAN);
    csv_num(f, p->n_pred ? p->pred_mfu : NAN);
    csv_num(f, p->n_pred && p->n_ok ? p->tps_mean / p->pred_tps : NAN);
    fputc('\n', f);
  }
  close_out(f, path);

  if (r->n_bench) {
    f = open_out(out, "bench.csv", path);
    fprintf(f, "run,op,nodes,ranks,bytes,time_us,algbw_gbs,busbw_gbs,wrong\n");
    for (int i = 0; i < r->n_bench; i++) {
      const bench_rec *b = &r->bench[i];
      fprintf(f, "%s,%s,%d,%d,%.0f", b->run, b->op, b->nodes, b->ranks, b->bytes);
      csv_num(f, b->time_us), csv_num(f, b->algbw), csv_num(f, b->busbw), csv_num(f, b->wrong);
      fputc('\n', f);
    }
    close_out(f, path);
  }
}

static void fmt_num(char *buf, size_t cap, double v, const char *fmt) {
  if (isnan(v))
    snprintf(buf, cap, "-");
  else
    snprintf(buf, cap, fmt, v);
}

static int n_ok_points(const point_rec *pts, int n_pts) {
  int n = 0;
  for (int k = 0; k < n_pts; k++) n += pts[k].n_ok > 0;
  return n;
}

/* the main Markdown table, to the report and to stdout; speedup and
 * efficiency only where two points compare */
static void markdown_table(FILE *f, const report *r, const point_rec *pts, int n_pts) {
  int scaling = n_ok_points(pts, n_pts) > 1, pred = 0;
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
  (void)r;
}

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
} step_plots;

static void plural(char *buf, size_t cap, int n, const char *what) {
  fmt_into(buf, cap, "%d %s%s", n, what, n == 1 ? "" : "s");
}

/* one step of a series, as steps.csv and steps.dat hold it */
typedef struct {
  long long step;
  int attempt;
  double loss, val, tps, tps_avg, step_s;
} step_row;

/* the run plotted for point k: its first successful repeat */
static const run_rec *plotted_run(const report *r, const point_rec *p) {
  const run_rec *x = NULL;
  for (int i = 0; i < r->n_runs; i++) {
    const run_rec *y = &r->runs[i];
    if (y->ok && !y->is_bench && find_point((point_rec *)p, 1, y) == 0 &&
        (!x || y->repeat < x->repeat))
      x = y;
  }
  return x;
}

static long count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  long n = 0;
  int c;
  while (f && (c = getc(f)) != EOF) n += c == '\n';
  if (f) fclose(f);
  return n;
}

/* A series' rows to steps.csv and steps.dat (gnuplot: per series two blocks,
 * index 2k its steps "step loss val tokens/s average", index 2k+1 its
 * validation losses "step val"; a block without data holds one NaN row so
 * the indices stay regular). tps_avg: the mean of the last `window` steps'
 * tokens/s of the series (fewer at its start). */
static void flush_series(FILE *csv, FILE *dat, int series, const char *run, const char *layout,
                         step_row *rows, int n, int window) {
  for (int i = 0; i < n; i++) {
    double sum = 0.0;
    int m = 0;
    for (int j = i; j >= 0 && j > i - window; j--)
      if (!isnan(rows[j].tps)) sum += rows[j].tps, m++;
    rows[i].tps_avg = m ? sum / m : NAN;
    fprintf(csv, "%d,%s,%s,%d,%lld", series, run, layout, rows[i].attempt, rows[i].step);
    csv_num(csv, rows[i].loss), csv_num(csv, rows[i].val), csv_num(csv, rows[i].tps);
    csv_num(csv, rows[i].step_s), csv_num(csv, rows[i].tps_avg);
    fputc('\n', csv);
    fprintf(dat, "%lld %.9g %.9g %.9g %.9g\n", rows[i].step, rows[i].loss, rows[i].val,
            rows[i].tps, rows[i].tps_avg);
  }
  int vals = 0;
  fprintf(dat, "\n\n# series %d validation\n", series);
  for (int i = 0; i < n; i++)
    if (!isnan(rows[i].val)) fprintf(dat, "%lld %.9g\n", rows[i].step, rows[i].val), vals++;
  if (!vals) fprintf(dat, "NaN NaN\n");
  fprintf(dat, "\n\n");
}

/* steps.csv (and steps.dat for the plots): per step of one run per training
 * point (its first successful repeat): loss, validation loss, tokens/s, step
 * time, its moving average, and the layout and attempt that computed it. A
 * series is one run under one layout: a run resumed under another layout
 * (the default job: dp=4, then dp=2) has one series per layout, its resumes
 * marked; a run that began from another run's checkpoint says so. */
static void write_steps(const char *out, const report *r, const point_rec *pts, int n_pts,
                        step_plots *sp) {
  char path[PATH_LEN], dpath[PATH_LEN];
  memset(sp, 0, sizeof *sp);
  long longest = 0; /* the window follows the longest run: ~50 averages over it */
  for (int k = 0; k < n_pts; k++) {
    const run_rec *x = plotted_run(r, &pts[k]);
    char mp[PATH_LEN];
    if (!x) continue;
    path_join(mp, x->dir, "metrics.jsonl");
    long n = count_lines(mp);
    if (n > longest) longest = n;
  }
  sp->window = longest >= 100 ? (int)(longest / 50) : 1;
  FILE *f = open_out(out, "steps.csv", path);
  FILE *d = open_out(out, "steps.dat", dpath);
  fprintf(f, "series,run,layout,attempt,step,loss,val_loss,tokens_per_s,step_s,tokens_per_s_avg\n");
  fprintf(d, "# meshreport: per series, a block of steps (step loss val_loss tokens/s tokens/s "
             "averaged over %d steps) and a block of validation losses (step val_loss)\n",
          sp->window);
  step_row *rows = NULL;
  size_t cap_rows = 0;
  for (int k = 0; k < n_pts; k++) {
    const run_rec *x = plotted_run(r, &pts[k]);
    if (!x) continue;
    char mp[PATH_LEN];
    path_join(mp, x->dir, "metrics.jsonl");
    FILE *m = fopen(mp, "r");
    if (!m) continue;
    int layouts = 0; /* layout changes between attempts: one series each */
    for (int a = 0; a < x->n_attempts; a++)
      layouts += a == 0 || strcmp(x->attempts[a].layout, x->attempts[a - 1].layout) != 0;
    char *line = NULL, cur[64] = "";
    size_t cap = 0;
    int series = -1, n = 0, s0 = sp->n_series; /* s0: this run's first series */
    while (getline(&line, &cap, m) > 0) {
      cJSON *j = cJSON_Parse(line);
      double step = num_or(j, "step", NAN), loss = num_or(j, "loss", NAN);
      if (!j || isnan(step) || isnan(loss)) {
        cJSON_Delete(j);
        continue;
      }
      /* the attempt that computed this step: the last whose range holds it */
      int att = -1;
      for (int a = 0; a < x->n_attempts; a++)
        if (x->attempts[a].start_step < step && step <= x->attempts[a].end_step) att = a;
      const char *lay = att >= 0 ? x->attempts[att].layout : x->layout;
      if (series < 0 || strcmp(lay, cur)) {
        if (series >= 0) flush_series(f, d, series, x->id, cur, rows, n, sp->window);
        n = 0;
        series = sp->n_series++;
        sp->title = realloc(sp->title, (size_t)sp->n_series * sizeof *sp->title);
        sp->has_val = realloc(sp->has_val, (size_t)sp->n_series * sizeof(int));
        sp->first = realloc(sp->first, (size_t)sp->n_series * sizeof(long long));
        sp->last = realloc(sp->last, (size_t)sp->n_series * sizeof(long long));
        if (!sp->title || !sp->has_val || !sp->first || !sp->last) die_runtime("out of memory");
        copy_str(cur, sizeof cur, lay);
        int world = att >= 0 && x->attempts[att].world > 0 ? x->attempts[att].world : x->ranks;
        char ranks[32], nodes[32];
        plural(ranks, sizeof ranks, world, "rank");
        plural(nodes, sizeof nodes, x->nodes, "node");
        if (layouts <= 1 && x->nodes > 1)
          fmt_into(sp->title[series], sizeof sp->title[series], "%s on %s, %s", ranks, nodes, lay);
        else
          fmt_into(sp->title[series], sizeof sp->title[series], "%s, %s", ranks, lay);
        sp->has_val[series] = 0;
        sp->first[series] = (long long)step;
      }
      sp->last[series] = (long long)step;
      if ((size_t)n == cap_rows) {
        cap_rows = cap_rows ? 2 * cap_rows : 256;
        rows = realloc(rows, cap_rows * sizeof *rows);
        if (!rows) die_runtime("out of memory");
      }
      step_row *row = &rows[n++];
      *row = (step_row){.step = (long long)step, .attempt = att + 1, .loss = loss,
                        .val = num_or(j, "val_loss", NAN), .tps = num_or(j, "tokens_per_s", NAN),
                        .step_s = num_or(j, "step_s", NAN)};
      sp->has_val[series] |= !isnan(row->val);
      cJSON_Delete(j);
    }
    if (series >= 0) flush_series(f, d, series, x->id, cur, rows, n, sp->window);
    free(line);
    fclose(m);
    /* titles: the steps of each part of a run in several layouts; where a
     * run began from another run's checkpoint */
    for (int s = s0; s < sp->n_series && layouts > 1; s++) {
      size_t used = strlen(sp->title[s]);
      fmt_into(sp->title[s] + used, sizeof sp->title[s] - used, ", steps %lld-%lld", sp->first[s],
               sp->last[s]);
    }
    if (x->resumed_from[0] && s0 < sp->n_series) { /* the path goes on the plot, not in the key */
      size_t used = strlen(sp->title[s0]);
      fmt_into(sp->title[s0] + used, sizeof sp->title[s0] - used, ", from the step-%lld checkpoint",
               x->start_step);
      sp->origin = realloc(sp->origin, (size_t)(sp->n_origins + 1) * sizeof *sp->origin);
      if (!sp->origin) die_runtime("out of memory");
      fmt_into(sp->origin[sp->n_origins++], sizeof sp->origin[0], "%s: resumed from %s", x->id,
               x->resumed_from);
    }
    for (int a = 0; a < x->n_attempts; a++) {
      long long at = x->attempts[a].start_step;
      int known = !x->attempts[a].recorded || at <= 0 || (a == 0 && x->resumed_from[0]);
      for (int q = 0; q < sp->n_resumes && !known; q++) known = sp->resumes[q] == at;
      if (known) continue;
      sp->resumes = realloc(sp->resumes, (size_t)(sp->n_resumes + 1) * sizeof(long long));
      if (!sp->resumes) die_runtime("out of memory");
      sp->resumes[sp->n_resumes++] = at;
    }
  }
  free(rows);
  close_out(f, path);
  close_out(d, dpath);
}

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

/* gnuplot: the script and its data always (plots.gp, steps.dat, scaling.dat,
 * busbw.dat); the PNGs where gnuplot runs. Returns 0 when it drew them, else
 * -1 with why (one line, how to draw them). */
static int make_plots(const char *out, const report *r, const point_rec *pts, int n_pts,
                      const step_plots *sp, char *why, size_t why_cap) {
  char path[PATH_LEN];
  int n_ok = 0;
  for (int k = 0; k < n_pts; k++) n_ok += pts[k].n_ok > 0;
  FILE *d = open_out(out, "scaling.dat", path);
  fprintf(d, "# ranks speedup efficiency ideal label");
  for (int c = 0; c < N_PARTS; c++) fprintf(d, " %s_ms", g_parts[c]);
  fputc('\n', d);
  int ref_ranks = 0;
  for (int k = 0; k < n_pts; k++)
    if (pts[k].n_ok && !ref_ranks) ref_ranks = pts[k].ranks;
  for (int k = 0; k < n_pts; k++) {
    const point_rec *p = &pts[k];
    if (!p->n_ok) continue;
    fprintf(d, "%d %.9g %.9g %.9g \"%dn/%dr %s\"", p->ranks, p->speedup, p->efficiency,
            (double)p->ranks / ref_ranks, p->nodes, p->ranks, p->layout);
    for (int c = 0; c < N_PARTS; c++) fprintf(d, " %.9g", isnan(p->part_s[c]) ? 0.0 : p->part_s[c] * 1e3);
    fputc('\n', d);
  }
  close_out(d, path);
  int n_pred = 0; /* points with a prediction (campaign --emulate): tokens/s beside the measured */
  for (int k = 0; k < n_pts; k++) n_pred += pts[k].n_pred > 0;
  if (n_pred) {
    d = open_out(out, "predicted.dat", path);
    fprintf(d, "# label measured_tokens_per_s predicted_tokens_per_s\n");
    for (int k = 0; k < n_pts; k++) {
      const point_rec *p = &pts[k];
      fprintf(d, "\"%dn/%dr %s\" %.9g %.9g\n", p->nodes, p->ranks, p->layout,
              p->n_ok ? p->tps_mean : NAN, p->n_pred ? p->pred_tps : NAN);
    }
    close_out(d, path);
  }
  if (r->n_bench) {
    d = open_out(out, "busbw.dat", path);
    /* one gnuplot data block per (op, ranks, nodes), separated by two blank lines */
    int *done = calloc((size_t)r->n_bench, sizeof(int));
    for (int i = 0; i < r->n_bench; i++) {
      if (done[i]) continue;
      /* the block's first row is its title (columnheader) */
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
  FILE *g = open_out(out, "plots.gp", path);
  char gp_path[PATH_LEN];
  copy_str(gp_path, sizeof gp_path, path);
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
  if (n_ok > 0) {
    fprintf(g, "set output 'breakdown.png'\nset title name.': step time by component'\n"
               "set style data histograms\nset style histogram rowstacked\n"
               "set style fill solid 0.8 border -1\nset boxwidth 0.7\nset key outside right\n"
               "set xlabel 'point (nodes/ranks layout)'\nset ylabel 'ms per step'\n"
               "set xtics rotate by -30\nset yrange [0:*]\n"
               "plot 'scaling.dat' using 6:xtic(5) title '%s'", g_parts[0]);
    for (int c = 1; c < N_PARTS; c++) fprintf(g, ", '' using %d title '%s'", 6 + c, g_parts[c]);
    fprintf(g, "\nset xtics norotate\nset yrange [*:*]\nset key default\nset style data lines\n");
  }
  if (n_pred) {
    fprintf(g, "set output 'predicted.png'\nset title name.': measured and predicted (virtual "
               "device) tokens/s'\nset style data histograms\nset style histogram clustered gap 1\n"
               "set style fill solid 0.8 border -1\nset boxwidth 0.9\nset key inside top right\n"
               "set xlabel 'point (nodes/ranks layout)'\nset ylabel 'tokens/s'\n"
               "set xtics rotate by -30\nset yrange [0:*]\n"
               "plot 'predicted.dat' using 2:xtic(1) title 'measured' lc rgb '#0072B2', "
               "'' using 3 title 'predicted' lc rgb '#D55E00'\n"
               "set xtics norotate\nset yrange [*:*]\nset key default\nset style data lines\n");
  }
  if (r->n_bench) {
    fprintf(g, "set output 'busbw.png'\nset title name.': bus bandwidth'\nset style data linespoints\n"
               "set logscale x 2\nset format x '%%.0b%%BB'\nset xlabel 'message size'\n"
               "set ylabel 'busbw (GB/s)'\nset key inside top left box opaque\n"
               "set offsets graph 0.03, graph 0.03, graph 0.06, graph 0.06\n"
               "plot for [i=0:*] 'busbw.dat' index i using 1:2 with linespoints lw 2 pt 7 "
               "title columnheader(1)\n");
  }
  close_out(g, gp_path);
  return run_gnuplot(out, "plots.gp", why, why_cap);
}

/* report.md (and steps.csv, the plots); returns 0 when the PNGs were drawn,
 * else -1 with why: one line saying how to draw them */
static int write_report(const char *out, const report *r, const point_rec *pts, int n_pts,
                        char *why, size_t why_cap) {
  char path[PATH_LEN];
  step_plots sp;
  write_steps(out, r, pts, n_pts, &sp);
  int plots = make_plots(out, r, pts, n_pts, &sp, why, why_cap);
  FILE *f = open_out(out, "report.md", path);
  int n_train = 0, n_failed = 0;
  for (int i = 0; i < r->n_runs; i++) {
    n_train += !r->runs[i].is_bench;
    n_failed += !r->runs[i].ok;
  }
  fprintf(f, "# %s\n\n", r->name);
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
    else
      fprintf(f, "No run succeeded.\n");
    fprintf(f, "%s Throughput counts every step of a run, and every attempt of a run that "
               "was requeued or resumed (summary.json `run`).\n\n",
            weak ? "Work per rank fixed: efficiency E = t0/t from mean step times, "
                   "speedup S = E·N/N0."
                 : "Total work fixed: speedup S = T/T0 from throughputs "
                   "(= t0/t), efficiency E = S·N0/N.");
  }
  if (n_pts) {
    markdown_table(f, r, pts, n_pts);
    fprintf(f, "\nMean step time by component (ms per step, first step skipped as warm-up; "
               "\"other\" is the step time not in a component):\n\n| nodes | ranks | layout |");
    for (int c = 0; c < N_PARTS; c++) fprintf(f, " %s |", g_parts[c]);
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
  if (r->n_bench) {
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
  int n_multi = 0, n_over = 0;
  for (int i = 0; i < r->n_runs; i++) {
    n_multi += r->runs[i].ok && r->runs[i].n_attempts > 1;
    n_over += r->runs[i].ok && r->runs[i].oversubscribed;
  }
  if (n_multi) {
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
  int n_from = 0;
  for (int i = 0; i < r->n_runs; i++) n_from += r->runs[i].ok && r->runs[i].resumed_from[0];
  if (n_from) {
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
  if (n_over) {
    fprintf(f, "\n## Ranks outnumbered cores\n\nIn these runs a node had more ranks x threads "
               "than cores: their times measure cores shared between ranks, not the machine.\n\n");
    for (int i = 0; i < r->n_runs; i++)
      if (r->runs[i].ok && r->runs[i].oversubscribed)
        fprintf(f, "- `%s` (%d ranks, %s): %d ranks x %d thread%s on %d CPU%s\n", r->runs[i].id,
                r->runs[i].ranks, r->runs[i].layout, r->runs[i].over_ranks, r->runs[i].over_threads,
                r->runs[i].over_threads == 1 ? "" : "s", r->runs[i].over_cpus,
                r->runs[i].over_cpus == 1 ? "" : "s");
  }
  fprintf(f, "\n## Failed or missing runs\n\n");
  if (!n_failed) fprintf(f, "None.\n");
  for (int i = 0; i < r->n_runs; i++)
    if (!r->runs[i].ok)
      fprintf(f, "- `%s` (%d nodes, %d ranks, %s): %s — `%s`\n", r->runs[i].id, r->runs[i].nodes,
              r->runs[i].ranks, r->runs[i].layout[0] ? r->runs[i].layout : "?", r->runs[i].status,
              r->runs[i].dir);
  fprintf(f, "\n## Plots\n\n");
  if (plots != 0) fprintf(f, "Not drawn here: %s.\n\n", why);
  int any = n_ok_points(pts, n_pts);
  if (sp.n_series) fprintf(f, "![loss](loss.png)\n![tokens/s](tokens_per_s.png)\n");
  if (any > 1) fprintf(f, "![speedup](speedup.png)\n![efficiency](efficiency.png)\n");
  if (any) fprintf(f, "![step time breakdown](breakdown.png)\n");
  if (r->n_bench) fprintf(f, "![bus bandwidth](busbw.png)\n");
  fprintf(f, "\nFiles: summary.csv (per point), runs.csv (per run), steps.csv (per step of the "
             "plotted runs)%s; plots.gp draws the PNGs from steps.dat, scaling.dat%s.\n",
          r->n_bench ? ", bench.csv" : "", r->n_bench ? ", busbw.dat" : "");
  close_out(f, path);
  free(sp.title), free(sp.has_val), free(sp.first), free(sp.last), free(sp.resumes);
  free(sp.origin);
  return plots;
}

static void help(FILE *f) {
  fprintf(f,
          "usage: %s CAMPAIGN_DIR [--out DIR]\n"
          "       %s RUN_DIR... --out DIR [--scaling strong|weak] [--name TITLE]\n"
          "       %s timeline RUN_DIR [--out DIR] [--step N]   (see %s timeline --help)\n"
          "Reads a campaign (manifest.json from slurm/meshslurm.py campaign) or run directories\n"
          "(summary.json + metrics.jsonl of meshtrain, bench.jsonl of meshbench) and writes\n"
          "summary.csv, runs.csv, steps.csv, bench.csv, report.md and PNG plots (gnuplot:\n"
          "loss and tokens/s against step, speedup, efficiency, breakdown, busbw) into DIR\n"
          "(default CAMPAIGN_DIR/report). Prints the Markdown table. A requeued or resumed\n"
          "run counts all its attempts (summary.json run.tokens_per_s; restarts and lost\n"
          "time listed). Speedup and efficiency are against the point with the fewest\n"
          "ranks: strong S = T/T0, E = S*N0/N; weak E = t0/t (step times), S = E*N/N0.\n"
          "Failed or missing runs are listed.\n",
          PROG, PROG, PROG, PROG);
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "timeline")) return mt_report_timeline(argc, argv);
  const char *out = NULL;
  report r = {0};
  const char **paths = calloc((size_t)argc + 1, sizeof(char *));
  int n_paths = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      help(stdout);
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
      load_campaign(&r, paths[i]);
      if (!default_out[0]) path_join(default_out, paths[i], "report");
    } else {
      load_run(&r, paths[i], NULL);
    }
  }
  if (!out && !default_out[0]) die_input("--out DIR is needed when no campaign directory is given");
  if (!out) out = default_out;
  if (!r.scaling[0]) copy_str(r.scaling, sizeof r.scaling, "strong");
  if (mkdir(out, 0777) != 0 && errno != EEXIST) die_runtime("cannot create %s: %s", out, strerror(errno));
  if (!is_dir(out)) die_runtime("%s is not a directory", out);

  point_rec *pts = NULL;
  int n_pts = make_points(&r, &pts);
  if (!r.name[0]) /* a single run is named after its directory */
    copy_str(r.name, sizeof r.name, r.n_runs == 1 ? r.runs[0].id : "meshtrain runs");
  write_csvs(out, &r, pts, n_pts);
  char why[2 * PATH_LEN] = "";
  int plots = write_report(out, &r, pts, n_pts, why, sizeof why);

  int n_failed = 0;
  for (int i = 0; i < r.n_runs; i++) n_failed += !r.runs[i].ok;
  if (n_ok_points(pts, n_pts) > 1)
    printf("%s: %s scaling, %d run%s, %d failed or missing\n\n", r.name, r.scaling, r.n_runs,
           r.n_runs == 1 ? "" : "s", n_failed);
  else
    printf("%s: %d run%s, %d failed or missing\n\n", r.name, r.n_runs, r.n_runs == 1 ? "" : "s",
           n_failed);
  if (n_pts) markdown_table(stdout, &r, pts, n_pts);
  for (int i = 0; i < r.n_runs; i++)
    if (!r.runs[i].ok) printf("failed or missing: %s: %s\n", r.runs[i].id, r.runs[i].status);
  if (plots != 0) printf("\nplots: %s\n", why);
  printf("\nreport: %s/report.md\n", out);
  for (int i = 0; i < r.n_runs; i++) free(r.runs[i].attempts);
  free(pts), free(r.runs), free(r.bench), free(paths);
  return MT_EXIT_OK;
}
