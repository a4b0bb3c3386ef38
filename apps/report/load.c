/* meshreport: run and campaign directories read into a report (report.h).
 * A run directory holds summary.json and metrics.jsonl (meshtrain),
 * bench.jsonl (meshbench collectives), status (the job script's line),
 * slurm-env.txt (the job's view of the node) and, after campaign
 * --emulate, predicted/summary.json. */
#include "report/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
      for (int k = 0; k < N_PARTS - 1; k++)
        v[k] = num_or(t, mt_report_parts[k], 0.0), known += v[k];
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
/* train.on_spike = rollback: "step A -> B (N windows skipped: why); ..." */
static void read_rollbacks(run_rec *x, const cJSON *s) {
  const cJSON *rb = cJSON_GetObjectItemCaseSensitive(s, "rollbacks"), *e;
  x->rollbacks[0] = '\0';
  if (!cJSON_IsArray(rb)) return;
  cJSON_ArrayForEach(e, rb) {
    const cJSON *why = cJSON_GetObjectItemCaseSensitive(e, "why");
    size_t used = strlen(x->rollbacks);
    fmt_into(x->rollbacks + used, sizeof x->rollbacks - used,
             "%sstep %.0f -> %.0f (%.0f windows skipped: %s)", used ? "; " : "",
             num_or(e, "at_step", NAN), num_or(e, "to_step", NAN),
             num_or(e, "skipped_samples", NAN), cJSON_IsString(why) ? why->valuestring : "?");
  }
}

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

/* a virtual-device summary's figures as the run's prediction: 1 when s is
 * one (device.kind or its "virtual" object says so) */
static int take_prediction(run_rec *x, const cJSON *s) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, "virtual");
  const cJSON *hw = cJSON_GetObjectItemCaseSensitive(v, "hw");
  if (!cJSON_IsObject(v) || !(num_or(s, "tokens_per_s", 0) > 0)) return 0;
  x->pred_tps = num_or(s, "tokens_per_s", NAN);
  x->pred_step_s = num_or(s, "mean_step_s", NAN);
  x->pred_mfu = num_or(s, "mfu", NAN);
  copy_str(x->pred_hw, sizeof x->pred_hw, cJSON_IsString(hw) ? hw->valuestring : "?");
  return x->has_pred = 1;
}

/* the virtual device's prediction of the run (campaign --emulate), if any */
static void read_predicted(run_rec *x) {
  char p[PATH_LEN];
  path_join(p, x->dir, "predicted/summary.json");
  cJSON *s = read_json(p);
  take_prediction(x, s);
  cJSON_Delete(s);
}

/* A run on the virtual device (summary.json of meshtrain with train.device
 * = virtual, a point's predicted/ given directly): its figures are a
 * prediction, its loss is not computed. Nodes: the point's, else the
 * profile's devices_per_node that priced it. 1 when it was one. */
static int read_virtual(run_rec *x, const cJSON *s, int world) {
  const cJSON *dev = cJSON_GetObjectItemCaseSensitive(s, "device");
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(dev, "kind");
  if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "virtual") || !take_prediction(x, s))
    return 0;
  int per_node = (int)num_or(dev, "devices_per_node", 0);
  if (!x->nodes) x->nodes = per_node > 0 ? (world + per_node - 1) / per_node : 1;
  x->is_virtual = 1;
  fmt_into(x->status, sizeof x->status, "predicted (virtual device as %s)", x->pred_hw);
  return 1;
}

/* point.json of a run directory, or for a point's predicted/ its point's */
static cJSON *read_point(const char *dir) {
  char p[PATH_LEN];
  path_join(p, dir, "point.json");
  cJSON *point = read_json(p);
  const char *base = strrchr(dir, '/');
  if (point || !base || strcmp(base, "/predicted") || base - dir >= PATH_LEN - 16) return point;
  fmt_into(p, sizeof p, "%.*s/point.json", (int)(base - dir), dir);
  return read_json(p);
}

/* one run directory; plan (a manifest entry or point.json) may be NULL */
void mt_report_load_run(report *r, const char *dir, const cJSON *plan) {
  run_rec *x = add_run(r);
  copy_str(x->dir, sizeof x->dir, dir);
  const char *base = strrchr(dir, '/');
  copy_str(x->id, sizeof x->id, base && base[1] ? base + 1 : dir);
  cJSON *point = NULL;
  if (!plan) plan = point = read_point(dir);
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
    x->not_run = !s && !x->status[0] && access(p, F_OK) != 0;
    copy_str(why, sizeof why, x->status[0] ? x->status : "not run yet");
    fmt_into(x->status, sizeof x->status, "%s (%s)", why,
             s ? "summary.json lacks tokens_per_s"
               : (access(p, F_OK) == 0 ? "summary.json unreadable" : "no summary.json"));
    cJSON_Delete(s);
    return;
  }
  const cJSON *lay = cJSON_GetObjectItemCaseSensitive(s, "layout");
  int world = (int)num_or(lay, "world", 0);
  if (!x->ranks) x->ranks = world;
  if (!x->layout[0] && cJSON_IsObject(lay))
    fmt_into(x->layout, sizeof x->layout, "dp%d-tp%d-pp%d-cp%d", (int)num_or(lay, "dp", 1),
             (int)num_or(lay, "tp", 1), (int)num_or(lay, "pp", 1), (int)num_or(lay, "cp", 1));
  if (read_virtual(x, s, world)) {
    cJSON_Delete(s);
    return;
  }
  if (!x->nodes) x->nodes = 1;
  x->tokens_per_s = num_or(s, "tokens_per_s", NAN);
  x->tokens_per_s_per_rank =
      num_or(s, "tokens_per_s_per_rank", x->tokens_per_s / (x->ranks ? x->ranks : 1));
  x->mean_step_s = num_or(s, "mean_step_s", NAN);
  x->mfu = num_or(s, "mfu", NAN);
  x->final_loss = num_or(s, "final_loss", NAN);
  read_attempts(x, s);
  read_rollbacks(x, s);
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

void mt_report_load_campaign(report *r, const char *dir) {
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
    mt_report_load_run(r, run_dir, pt);
  }
  cJSON_Delete(m);
}
