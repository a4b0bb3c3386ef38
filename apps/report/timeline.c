/* meshreport timeline RUN_DIR [--out DIR] [--step N]: one training step of
 * a run written with metrics.trace = true, every pipeline stage on one time
 * axis.
 *
 * Reads RUN_DIR/trace/rank<R>.json (Chrome trace events, one file per rank,
 * lib/core/trace.c) and writes into DIR (default RUN_DIR/timeline):
 *   timeline.json  every rank's events in one file (Perfetto opens it: one
 *                  process per rank, listed by pipeline stage)
 *   timeline.csv   one row per stage: its rank, the step's time on it and
 *                  the time in forward, backward (input, weight), waiting,
 *                  collectives and sends, and the idle share of the step
 *   ops.csv        per stage, each op's calls and time in the step (the
 *                  virtual device's ops; a CPU run's with metrics.trace)
 *   timeline.dat, timeline.gp, timeline.png
 *                  the step drawn per stage (the lowest rank of each stage):
 *                  forward, backward and weight-gradient spans on one row,
 *                  collectives and point-to-point sends on the row below
 * The step is N (default: the last one every rank recorded). Times are
 * each rank's mt_now(): virtual time on the virtual device, the node's
 * monotonic clock in a real run (ranks on different nodes are not aligned
 * to better than their clocks' offset). Exit codes: 0 written, 2 bad input
 * (no trace, a step the trace does not hold), 3 cannot write. */
#include "report/report.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* what a span is, for the drawing and the table */
enum { K_FORWARD, K_BACKWARD, K_BWD_INPUT, K_BWD_WEIGHT, K_WAIT, K_COLL, K_SEND, K_N };
static const char *g_kind_name[K_N] = {"forward",         "backward", "backward-input",
                                       "backward-weight", "wait",     "collective",
                                       "send"};
static const unsigned g_kind_rgb[K_N] = {0x0072B2, 0xD55E00, 0xE69F00, 0x009E73,
                                         0xCCCCCC, 0x555555, 0xCC79A7};

typedef struct {
  int rank, stage; /* stage -1: the name does not say */
  cJSON *doc;      /* the rank's trace */
} rank_trace;

/* the kind of an "X" event, or -1 (ops, steps: not drawn) */
static int kind_of(const cJSON *ev) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(ev, "name");
  const cJSON *cat = cJSON_GetObjectItemCaseSensitive(ev, "cat");
  if (!cJSON_IsString(name) || !cJSON_IsString(cat)) return -1;
  if (!strcmp(cat->valuestring, "collective")) return K_COLL;
  if (!strcmp(cat->valuestring, "send")) return K_SEND;
  if (strcmp(cat->valuestring, "pipeline")) return -1;
  for (int k = K_FORWARD; k <= K_WAIT; k++)
    if (!strcmp(name->valuestring, g_kind_name[k])) return k;
  return -1;
}

static const cJSON *events(const rank_trace *t) {
  const cJSON *ev = cJSON_GetObjectItemCaseSensitive(t->doc, "traceEvents");
  return cJSON_IsArray(ev) ? ev : NULL;
}

/* the rank's pipeline stage from its process name ("rank 5: pp 1 tp ...") */
static int stage_of(const cJSON *evs) {
  const cJSON *e;
  cJSON_ArrayForEach(e, evs) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(e, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    if (!cJSON_IsString(n) || strcmp(n->valuestring, "process_name") || !args) continue;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(args, "name");
    const char *pp = cJSON_IsString(v) ? strstr(v->valuestring, " pp ") : NULL;
    return pp ? atoi(pp + 4) : -1;
  }
  return -1;
}

/* [t0, t1] (us) of step `step` on this rank; 0 when found */
static int step_window(const rank_trace *t, int step, double *t0, double *t1) {
  const cJSON *e;
  cJSON_ArrayForEach(e, events(t)) {
    const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    if (!cJSON_IsString(cat) || strcmp(cat->valuestring, "step") || !args) continue;
    if ((int)num_or(args, "step", -1) != step) continue;
    *t0 = num_or(e, "ts", NAN);
    *t1 = *t0 + num_or(e, "dur", NAN);
    return isfinite(*t0) && isfinite(*t1) ? 0 : -1;
  }
  return -1;
}

/* the largest step number this rank recorded (0: none) */
static int last_step(const rank_trace *t) {
  int last = 0;
  const cJSON *e;
  cJSON_ArrayForEach(e, events(t)) {
    const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(e, "args");
    if (cJSON_IsString(cat) && !strcmp(cat->valuestring, "step") && args) {
      int s = (int)num_or(args, "step", 0);
      if (s > last) last = s;
    }
  }
  return last;
}

static int by_rank(const void *a, const void *b) {
  return ((const rank_trace *)a)->rank - ((const rank_trace *)b)->rank;
}

/* every trace/rank<R>.json of the run, sorted by rank */
static rank_trace *load_traces(const char *run, int *n_out) {
  char dir[PATH_LEN];
  path_join(dir, run, "trace");
  DIR *d = opendir(dir);
  if (!d)
    die_input("%s: no trace directory (%s): the run was not made with metrics.trace = true", run,
              strerror(errno));
  rank_trace *t = NULL;
  int n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    int rank;
    char tail[8];
    if (sscanf(de->d_name, "rank%d.%7s", &rank, tail) != 2 || strcmp(tail, "json")) continue;
    if (n == cap) {
      cap = cap ? 2 * cap : 16;
      t = realloc(t, (size_t)cap * sizeof *t);
      if (!t) die_runtime("out of memory (%d traces)", cap);
    }
    char path[PATH_LEN];
    path_join(path, dir, de->d_name);
    cJSON *doc = read_json(path);
    if (!doc || !cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")))
      die_input("%s: not a trace (unreadable, or no traceEvents array)", path);
    t[n] = (rank_trace){.rank = rank, .doc = doc};
    t[n].stage = stage_of(events(&t[n]));
    n++;
  }
  closedir(d);
  if (n == 0) die_input("%s holds no rank<N>.json: the run was not made with metrics.trace = true", dir);
  qsort(t, (size_t)n, sizeof *t, by_rank);
  *n_out = n;
  return t;
}

/* every rank's events in one Chrome trace */
static void write_merged(const char *out, const rank_trace *t, int n) {
  cJSON *all = cJSON_CreateArray();
  for (int i = 0; i < n; i++) {
    const cJSON *e;
    cJSON_ArrayForEach(e, events(&t[i])) cJSON_AddItemToArray(all, cJSON_Duplicate(e, 1));
  }
  cJSON *doc = cJSON_CreateObject();
  cJSON_AddStringToObject(doc, "displayTimeUnit", "ms");
  cJSON_AddItemToObject(doc, "traceEvents", all);
  char *text = cJSON_PrintUnformatted(doc);
  cJSON_Delete(doc);
  if (!text) die_runtime("out of memory (merged trace)");
  char path[PATH_LEN];
  FILE *f = open_out(out, "timeline.json", path);
  fputs(text, f);
  fputc('\n', f);
  close_out(f, path);
  free(text);
}

/* ops.csv: per stage (its drawn rank), each op's calls and time in the
 * step (the compute track's "op" spans: every op of the virtual device, of
 * a CPU run with metrics.trace = true), so that a real and an emulated run
 * of one layout compare op by op */
static void write_ops(const char *out, const rank_trace *t, const int *rep, const double *w0,
                      const double *w1, int n_stages, int step) {
  char path[PATH_LEN];
  FILE *f = open_out(out, "ops.csv", path);
  fprintf(f, "stage,rank,step,op,calls,ms\n");
  enum { MAX_OPS = 128 };
  const char *name[MAX_OPS];
  double ms[MAX_OPS];
  int calls[MAX_OPS];
  for (int s = 0; s < n_stages; s++) {
    int n_ops = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, events(&t[rep[s]])) {
      const cJSON *cat = cJSON_GetObjectItemCaseSensitive(e, "cat");
      const cJSON *nm = cJSON_GetObjectItemCaseSensitive(e, "name");
      if (!cJSON_IsString(cat) || strcmp(cat->valuestring, "op") || !cJSON_IsString(nm)) continue;
      double a = num_or(e, "ts", NAN), b = a + num_or(e, "dur", NAN);
      if (!(a >= w0[s] && b <= w1[s])) continue;
      int i = 0;
      while (i < n_ops && strcmp(name[i], nm->valuestring)) i++;
      if (i == n_ops) {
        if (n_ops == MAX_OPS) continue; /* (the op table has fewer members) */
        name[n_ops] = nm->valuestring, ms[n_ops] = 0.0, calls[n_ops] = 0;
        n_ops++;
      }
      ms[i] += (b - a) / 1e3;
      calls[i]++;
    }
    for (int i = 0; i < n_ops; i++)
      fprintf(f, "%d,%d,%d,%s,%d,%.6f\n", s, t[rep[s]].rank, step, name[i], calls[i], ms[i]);
  }
  close_out(f, path);
}

static void help(FILE *f) {
  fprintf(f,
          "usage: %s timeline RUN_DIR [--out DIR] [--step N]\n"
          "One training step of a run made with metrics.trace = true, every pipeline stage on\n"
          "one time axis: timeline.json (every rank's trace merged; Perfetto opens it),\n"
          "timeline.csv (per stage: forward, backward, weight gradients, waits, collectives,\n"
          "sends, idle share of the step), ops.csv (per stage, each op's calls and time in the\n"
          "step), timeline.png (gnuplot; timeline.gp and .dat always)\n"
          "into DIR (default RUN_DIR/timeline). The step is N, by default the last one every\n"
          "rank recorded. Real and virtual (train.device = virtual) runs alike.\n",
          PROG);
}

int mt_report_timeline(int argc, char **argv) {
  const char *run = NULL, *out = NULL;
  int step = 0;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      help(stdout);
      return MT_EXIT_OK;
    } else if (!strcmp(a, "--out") || !strcmp(a, "--step")) {
      if (i + 1 >= argc) die_input("timeline: %s needs a value (see %s timeline --help)", a, PROG);
      const char *v = argv[++i];
      if (!strcmp(a, "--out")) {
        out = v;
      } else {
        char *end;
        long s = strtol(v, &end, 10);
        if (*end || end == v || s < 1 || s > 1000000000)
          die_input("timeline: --step: expected a step number (1 or more), got '%s'", v);
        step = (int)s;
      }
    } else {
      take_run_dir("timeline", a, &run);
    }
  }
  need_run_dir("timeline", run);
  int n = 0;
  rank_trace *t = load_traces(run, &n);
  /* the step: given, or the last one every rank holds */
  int common = last_step(&t[0]);
  for (int i = 1; i < n; i++) {
    int l = last_step(&t[i]);
    if (l < common) common = l;
  }
  if (common == 0)
    die_input("%s/trace: no step spans (a trace written before steps were recorded?)", run);
  if (step == 0) step = common;
  /* one rank per stage: the lowest */
  int n_stages = 0;
  for (int i = 0; i < n; i++) {
    if (t[i].stage < 0) die_input("%s/trace/rank%d.json: its name does not give its stage", run, t[i].rank);
    if (t[i].stage + 1 > n_stages) n_stages = t[i].stage + 1;
  }
  int *rep = malloc((size_t)n_stages * sizeof(int));
  double *w0 = malloc((size_t)n_stages * sizeof(double)), *w1 = malloc((size_t)n_stages * sizeof(double));
  if (!rep || !w0 || !w1) die_runtime("out of memory");
  for (int s = 0; s < n_stages; s++) rep[s] = -1;
  for (int i = n - 1; i >= 0; i--) rep[t[i].stage] = i;
  double origin = INFINITY;
  for (int s = 0; s < n_stages; s++) {
    if (rep[s] < 0) die_input("%s/trace: no rank of pipeline stage %d", run, s);
    if (step_window(&t[rep[s]], step, &w0[s], &w1[s]) != 0)
      die_input("%s/trace/rank%d.json holds no step %d (steps 1..%d are in every rank's trace)",
                run, t[rep[s]].rank, step, common);
    if (w0[s] < origin) origin = w0[s];
  }

  char out_default[PATH_LEN];
  if (!out) {
    path_join(out_default, run, "timeline");
    out = out_default;
  }
  if (mkdir(out, 0777) != 0 && errno != EEXIST) die_runtime("cannot create %s: %s", out, strerror(errno));
  if (!is_dir(out)) die_runtime("%s is not a directory", out);
  write_merged(out, t, n);

  /* the spans of the step per stage: drawn (ms from the step's start on the
   * earliest stage) and summed per kind */
  char path[PATH_LEN], csv_path[PATH_LEN];
  FILE *dat = open_out(out, "timeline.dat", path);
  FILE *csv = open_out(out, "timeline.csv", csv_path);
  fprintf(dat, "# x_mid_ms y half_width_ms half_height rgb kind stage\n");
  fprintf(csv, "stage,rank,step,step_ms");
  for (int k = 0; k < K_N; k++) fprintf(csv, ",%s_ms", g_kind_name[k]);
  fprintf(csv, ",idle_share\n");
  double end_ms = 0.0;
  int seen[K_N] = {0}; /* the legend lists the kinds drawn */
  printf("%s: step %d, %d stage%s (%d ranks)\n", run, step, n_stages, n_stages == 1 ? "" : "s", n);
  printf("| stage | rank | step ms | forward | backward | weight | wait | collectives | sends | idle |\n"
         "|---|---|---|---|---|---|---|---|---|---|\n");
  for (int s = 0; s < n_stages; s++) {
    const rank_trace *r = &t[rep[s]];
    double sum[K_N] = {0};
    const cJSON *e;
    cJSON_ArrayForEach(e, events(r)) {
      const cJSON *ph = cJSON_GetObjectItemCaseSensitive(e, "ph");
      if (!cJSON_IsString(ph) || strcmp(ph->valuestring, "X")) continue;
      int k = kind_of(e);
      if (k < 0) continue;
      double a = num_or(e, "ts", NAN), b = a + num_or(e, "dur", NAN);
      if (!(a >= w0[s] && b <= w1[s])) continue; /* (NaN: not in it either) */
      sum[k] += b - a;
      seen[k] = 1;
      int comm = k == K_COLL || k == K_SEND;
      double y = n_stages - 1 - s - (comm ? 0.32 : 0.0); /* stage 0 on top */
      double h = comm ? 0.12 : k == K_WAIT ? 0.08 : 0.25; /* a wait: a thin bar */
      fprintf(dat, "%.6f %.3f %.6f %.3f %u %s %d\n", ((a + b) / 2 - origin) / 1e3, y,
              (b - a) / 2e3, h, g_kind_rgb[k], g_kind_name[k], s);
    }
    double step_us = w1[s] - w0[s];
    double busy = sum[K_FORWARD] + sum[K_BACKWARD] + sum[K_BWD_INPUT] + sum[K_BWD_WEIGHT];
    double idle = step_us > 0 ? 1.0 - busy / step_us : NAN;
    if ((w1[s] - origin) / 1e3 > end_ms) end_ms = (w1[s] - origin) / 1e3;
    fprintf(csv, "%d,%d,%d,%.6f", s, r->rank, step, step_us / 1e3);
    for (int k = 0; k < K_N; k++) fprintf(csv, ",%.6f", sum[k] / 1e3);
    fprintf(csv, ",%.6f\n", idle);
    printf("| %d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f%% |\n", s, r->rank,
           step_us / 1e3, sum[K_FORWARD] / 1e3, (sum[K_BACKWARD] + sum[K_BWD_INPUT]) / 1e3,
           sum[K_BWD_WEIGHT] / 1e3, sum[K_WAIT] / 1e3, sum[K_COLL] / 1e3, sum[K_SEND] / 1e3,
           100.0 * idle);
  }
  close_out(dat, path);
  close_out(csv, csv_path);
  write_ops(out, t, rep, w0, w1, n_stages, step);

  FILE *g = open_out(out, "timeline.gp", path);
  fprintf(g, "# written by meshreport timeline; draw with: gnuplot timeline.gp (in this directory)\n"
             "set terminal pngcairo size 1400,%d noenhanced font ',11'\n"
             "set output 'timeline.png'\n"
             "set title 'step %d of %s: one rank per pipeline stage'\n"
             "set xlabel 'ms from the start of the step'\n"
             "set xrange [0:%.6f]\nset yrange [-0.7:%d.5]\n"
             "set grid xtics lc rgb '#d0d0d0'\nset key outside bottom center horizontal samplen 2 maxcols 4\n"
             "set style fill solid 0.9 noborder\nset bmargin 6\nset ytics (",
          120 + 70 * n_stages, step, run, end_ms * 1.01, n_stages - 1);
  for (int s = 0; s < n_stages; s++)
    fprintf(g, "%s'stage %d (rank %d)' %d", s ? ", " : "", s, t[rep[s]].rank, n_stages - 1 - s);
  fprintf(g, ")\nplot 'timeline.dat' using 1:2:3:4:5 with boxxyerror lc rgb variable notitle");
  for (int k = 0; k < K_N; k++)
    if (seen[k]) fprintf(g, ", NaN with boxes lc rgb '#%06X' title '%s'", g_kind_rgb[k], g_kind_name[k]);
  fputc('\n', g);
  close_out(g, path);
  char why[2 * PATH_LEN];
  if (run_gnuplot(out, "timeline.gp", why, sizeof why) == 0) printf("\ntimeline: %s/timeline.png\n", out);
  else printf("\nplot: %s\n", why);
  printf("merged trace: %s/timeline.json; per stage: %s/timeline.csv; per op: %s/ops.csv\n", out,
         out, out);
  for (int i = 0; i < n; i++) cJSON_Delete(t[i].doc);
  free(t), free(rep), free(w0), free(w1);
  return MT_EXIT_OK;
}
