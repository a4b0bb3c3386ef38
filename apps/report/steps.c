/* meshreport's step series (report.h): steps.csv, and steps.dat for the
 * plots of loss and tokens/s against step. */
#include "report/report.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* one step of a series, as steps.csv and steps.dat hold it */
typedef struct {
  long long step;
  int attempt;
  double loss, val, tps, tps_avg, step_s;
  double flop_imbalance;  /* data.documents: the ranks' FLOP imbalance (NaN: none) */
  char val_by_source[256]; /* a blend's validation losses, "name=loss;name=loss" */
} step_row;

/* metrics.jsonl's val_loss_by_source {name: loss} as "name=loss;..." */
static void sources_text(const cJSON *j, char *out, size_t size) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "val_loss_by_source");
  size_t n = 0;
  out[0] = '\0';
  for (const cJSON *s = v ? v->child : NULL; s && n < size; s = s->next)
    if (cJSON_IsNumber(s) && s->string && !strpbrk(s->string, ",;=\"\n"))
      n += (size_t)snprintf(out + n, size - n, "%s%s=%.9g", n ? ";" : "", s->string,
                            s->valuedouble);
}

/* the run plotted for point k: its first successful repeat */
static const run_rec *plotted_run(const report *r, const point_rec *p) {
  const run_rec *x = NULL;
  for (int i = 0; i < r->n_runs; i++) {
    const run_rec *y = &r->runs[i];
    if (y->ok && !y->is_bench && mt_report_point_holds(p, y) &&
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
    csv_num(csv, rows[i].flop_imbalance);
    fprintf(csv, ",%s\n", rows[i].val_by_source);
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

/* A series' validation losses per source (a blend's) to val_sources.dat:
 * one block per source, "step loss", each one plot line (sp->src_title). */
static void flush_sources(FILE *vs, step_plots *sp, int series, const step_row *rows, int n) {
  char names[16][64];
  int n_names = 0;
  for (int i = 0; i < n; i++) { /* the sources, in the order met */
    char buf[sizeof rows[i].val_by_source];
    copy_str(buf, sizeof buf, rows[i].val_by_source);
    for (char *kv = strtok(buf, ";"); kv; kv = strtok(NULL, ";")) {
      char *eq = strchr(kv, '=');
      if (!eq) continue;
      *eq = '\0';
      int known = 0;
      for (int k = 0; k < n_names; k++) known |= !strcmp(names[k], kv);
      if (!known && n_names < 16) copy_str(names[n_names++], sizeof names[0], kv);
    }
  }
  for (int k = 0; k < n_names; k++) {
    fprintf(vs, "# series %d source %s\n", series, names[k]);
    for (int i = 0; i < n; i++) {
      char key[80];
      fmt_into(key, sizeof key, "%s=", names[k]);
      const char *r = rows[i].val_by_source, *at = strstr(r, key);
      while (at && at != r && at[-1] != ';') at = strstr(at + 1, key);
      if (at) {
        at += strlen(key);
        fprintf(vs, "%lld %.*s\n", rows[i].step, (int)strcspn(at, ";"), at);
      }
    }
    fprintf(vs, "\n\n");
    sp->src_title = realloc(sp->src_title, (size_t)(sp->n_src + 1) * sizeof *sp->src_title);
    if (!sp->src_title) die_runtime("out of memory");
    fmt_into(sp->src_title[sp->n_src++], sizeof sp->src_title[0], "%s: %s", names[k],
             sp->title[series]);
  }
}

/* the steps in the moving average of tokens/s: it follows the longest
 * plotted run, ~50 averages over it (1: none, under 100 steps) */
static int step_window(const report *r, const point_rec *pts, int n_pts) {
  long longest = 0;
  for (int k = 0; k < n_pts; k++) {
    const run_rec *x = plotted_run(r, &pts[k]);
    char mp[PATH_LEN];
    if (!x) continue;
    path_join(mp, x->dir, "metrics.jsonl");
    long n = count_lines(mp);
    if (n > longest) longest = n;
  }
  return longest >= 100 ? (int)(longest / 50) : 1;
}

/* a new series of run x, beginning at step under layout lay (computed by
 * attempt att, -1: none known; layouts: how many the run went through);
 * returns its index */
static int new_series(step_plots *sp, const run_rec *x, int att, const char *lay, int layouts,
                      double step) {
  int series = sp->n_series++;
  sp->title = realloc(sp->title, (size_t)sp->n_series * sizeof *sp->title);
  sp->has_val = realloc(sp->has_val, (size_t)sp->n_series * sizeof(int));
  sp->first = realloc(sp->first, (size_t)sp->n_series * sizeof(long long));
  sp->last = realloc(sp->last, (size_t)sp->n_series * sizeof(long long));
  if (!sp->title || !sp->has_val || !sp->first || !sp->last) die_runtime("out of memory");
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
  return series;
}

/* After run x's series (s0 its first): the titles say the steps of each
 * part of a run in several layouts, and where a run began from another
 * run's checkpoint; the steps where an attempt resumed are kept for the
 * plot's marks. */
static void mark_run(step_plots *sp, const run_rec *x, int s0, int layouts) {
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

/* run x's steps (its metrics.jsonl) to steps.csv (f) and steps.dat (d), a
 * series per layout; rows: a buffer kept between runs */
static void write_run(FILE *f, FILE *d, FILE *vs, const run_rec *x, step_plots *sp, step_row **rows,
                      size_t *cap_rows) {
  char mp[PATH_LEN];
  path_join(mp, x->dir, "metrics.jsonl");
  FILE *m = fopen(mp, "r");
  if (!m) return;
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
      if (series >= 0) {
        flush_series(f, d, series, x->id, cur, *rows, n, sp->window);
        flush_sources(vs, sp, series, *rows, n);
      }
      n = 0;
      series = new_series(sp, x, att, lay, layouts, step);
      copy_str(cur, sizeof cur, lay);
    }
    sp->last[series] = (long long)step;
    if ((size_t)n == *cap_rows) {
      *cap_rows = *cap_rows ? 2 * *cap_rows : 256;
      *rows = realloc(*rows, *cap_rows * sizeof **rows);
      if (!*rows) die_runtime("out of memory");
    }
    step_row *row = &(*rows)[n++];
    *row = (step_row){.step = (long long)step, .attempt = att + 1, .loss = loss,
                      .val = num_or(j, "val_loss", NAN), .tps = num_or(j, "tokens_per_s", NAN),
                      .step_s = num_or(j, "step_s", NAN),
                      .flop_imbalance = num_or(j, "flop_imbalance", NAN)};
    sources_text(j, row->val_by_source, sizeof row->val_by_source);
    sp->has_val[series] |= !isnan(row->val);
    cJSON_Delete(j);
  }
  if (series >= 0) {
    flush_series(f, d, series, x->id, cur, *rows, n, sp->window);
    flush_sources(vs, sp, series, *rows, n);
  }
  free(line);
  fclose(m);
  mark_run(sp, x, s0, layouts);
}

/* steps.csv (and steps.dat for the plots): per step of one run per training
 * point (its first successful repeat): loss, validation loss, tokens/s, step
 * time, its moving average, the FLOP imbalance with documents, a blend's
 * validation loss per source ("name=loss;..."), and the layout and
 * attempt that computed it. A
 * series is one run under one layout: a run resumed under another layout
 * (the default job: dp=4, then dp=2) has one series per layout, its resumes
 * marked; a run that began from another run's checkpoint says so. */
void mt_report_write_steps(const char *out, const report *r, const point_rec *pts, int n_pts,
                           step_plots *sp) {
  char path[PATH_LEN], dpath[PATH_LEN], vpath[PATH_LEN];
  memset(sp, 0, sizeof *sp);
  sp->window = step_window(r, pts, n_pts);
  FILE *f = open_out(out, "steps.csv", path);
  FILE *d = open_out(out, "steps.dat", dpath);
  FILE *vs = open_out(out, "val_sources.dat", vpath);
  fprintf(vs, "# meshreport: a blend's validation loss per source, a block per (series, "
              "source): step val_loss\n");
  fprintf(f, "series,run,layout,attempt,step,loss,val_loss,tokens_per_s,step_s,tokens_per_s_avg,"
             "flop_imbalance,val_loss_by_source\n");
  fprintf(d, "# meshreport: per series, a block of steps (step loss val_loss tokens/s tokens/s "
             "averaged over %d steps) and a block of validation losses (step val_loss)\n",
          sp->window);
  step_row *rows = NULL;
  size_t cap_rows = 0;
  for (int k = 0; k < n_pts; k++) {
    const run_rec *x = plotted_run(r, &pts[k]);
    if (x) write_run(f, d, vs, x, sp, &rows, &cap_rows);
  }
  free(rows);
  close_out(f, path);
  close_out(d, dpath);
  close_out(vs, vpath);
}

void mt_report_step_plots_free(step_plots *sp) {
  free(sp->title), free(sp->has_val), free(sp->first), free(sp->last), free(sp->resumes);
  free(sp->origin), free(sp->src_title);
}
