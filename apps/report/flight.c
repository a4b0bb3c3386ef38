/* meshreport flight RUN_DIR [--out DIR]: what every rank was doing when the
 * watchdog ended a run (lib/core/flight.h). Reads RUN_DIR/flight/rank_N.json
 * (or the records in RUN_DIR itself) and writes into DIR (default
 * RUN_DIR/flight-report):
 *   flight.csv   one row per rank: its record's reason, step, the call it
 *                waited in (op, group, call number, peer, seconds), else
 *                its last call and how long before the record it ended
 *   flight.dat, flight.gp, flight.png
 *                the last seconds before the records, one row per rank:
 *                each call a bar, the calls still open in red
 * and prints, per call that ranks waited in, the ranks that did not arrive
 * (a member that had not begun that call of its group, or the peer of a
 * point-to-point wait), then the table. Exit codes: 0 written, 2 bad input
 * (no records), 3 cannot write. */
#include "report/report.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define WINDOW_S 10.0   /* the picture: seconds before the first record */
#define MAX_PRINTED 64  /* table rows printed (the CSV has every rank) */

typedef struct {
  int rank;
  cJSON *doc;
} rank_rec;

static int by_rank(const void *a, const void *b) {
  return ((const rank_rec *)a)->rank - ((const rank_rec *)b)->rank;
}

/* the records of dir/flight (or dir), sorted by rank */
static rank_rec *load_records(const char *run, int *n_out, char *dir) {
  path_join(dir, run, "flight");
  DIR *d = opendir(dir);
  if (!d) {
    copy_str(dir, PATH_LEN, run);
    d = opendir(dir);
  }
  if (!d) die_input("%s: no such directory (%s)", run, strerror(errno));
  rank_rec *r = NULL;
  int n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int rank, len = 0;
    if (sscanf(e->d_name, "rank_%d.json%n", &rank, &len) != 1 || e->d_name[len]) continue;
    char path[PATH_LEN];
    path_join(path, dir, e->d_name);
    cJSON *doc = read_json(path);
    if (!doc) die_input("%s: not a flight record (unreadable or not JSON)", path);
    if (n == cap) {
      cap = cap ? 2 * cap : 64;
      r = realloc(r, (size_t)cap * sizeof *r);
      if (!r) die_runtime("out of memory");
    }
    r[n].rank = rank;
    r[n++].doc = doc;
  }
  closedir(d);
  if (!n)
    die_input("%s: no flight records (rank_N.json): the watchdog writes them when a blocking "
              "call outlives train.collective_timeout_s", dir);
  qsort(r, (size_t)n, sizeof *r, by_rank);
  *n_out = n;
  return r;
}

static const char *str_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : "";
}
static const cJSON *obj_of(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsObject(v) ? v : NULL;
}
static const cJSON *last_op(const cJSON *doc) {
  const cJSON *ops = cJSON_GetObjectItemCaseSensitive(doc, "ops");
  int n = cJSON_IsArray(ops) ? cJSON_GetArraySize(ops) : 0;
  return n ? cJSON_GetArrayItem(ops, n - 1) : NULL;
}
static const rank_rec *find(const rank_rec *r, int n, int rank) {
  for (int i = 0; i < n; i++)
    if (r[i].rank == rank) return &r[i];
  return NULL;
}

/* "step S, last: OP on GROUP call C ended X s before its record" */
static void doing(const cJSON *doc, char *buf, size_t cap) {
  const cJSON *o = obj_of(doc, "open"), *l = last_op(doc);
  const double written = num_or(doc, "written", NAN);
  if (o)
    fmt_into(buf, cap, "step %.0f, waiting %.1f s in %s on %s", num_or(doc, "step", 0),
             written - num_or(o, "start", NAN), str_of(o, "op"), str_of(o, "group"));
  else if (l)
    fmt_into(buf, cap, "step %.0f, in no call; the last, %s on %s, ended %.1f s before",
             num_or(doc, "step", 0), str_of(l, "op"), str_of(l, "group"),
             written - num_or(l, "end", NAN));
  else
    fmt_into(buf, cap, "step %.0f, no call recorded", num_or(doc, "step", 0));
}

/* the world ranks of an entry's group: w0 + q x stride, q < size */
static void members(const cJSON *op, int *w0, int *stride, int *size) {
  const cJSON *ranks = cJSON_GetObjectItemCaseSensitive(op, "ranks");
  if (cJSON_GetArraySize(ranks) != 3) return;
  *w0 = cJSON_GetArrayItem(ranks, 0)->valueint;
  *stride = cJSON_GetArrayItem(ranks, 1)->valueint;
  *size = cJSON_GetArrayItem(ranks, 2)->valueint;
}

/* Per distinct call waited in (group, call number; a point-to-point wait
 * per rank): the waiting ranks and those that did not arrive. */
static void verdicts(const rank_rec *r, int n) {
  int world = (int)num_or(r[0].doc, "world", 0);
  for (int i = 0; i < n; i++) {
    const cJSON *o = obj_of(r[i].doc, "open");
    if (!o) continue;
    const char *group = str_of(o, "group");
    const double call = num_or(o, "call", 0), peer = num_or(o, "peer", -1);
    int w0 = 0, stride = 1, size = 0;
    members(o, &w0, &stride, &size);
    int first = 1; /* (a collective call: once, at its lowest waiting rank) */
    for (int j = 0; j < i && call > 0; j++) {
      const cJSON *p = obj_of(r[j].doc, "open");
      int pw0 = -1, ps = 0, pn = 0;
      if (p) members(p, &pw0, &ps, &pn);
      if (p && !strcmp(str_of(p, "group"), group) && num_or(p, "call", 0) == call && pw0 == w0)
        first = 0;
    }
    if (!first) continue;
    if (call > 0)
      printf("- %s on group %s, call %.0f (world ranks %d + %d x [0, %d)):", str_of(o, "op"),
             group, call, w0, stride, size);
    else
      printf("- rank %d: %s with rank %.0f:", r[i].rank, str_of(o, "op"), peer);
    int missing = 0;
    for (int q = 0; q < (call > 0 ? size : 1); q++) {
      const int m = call > 0 ? w0 + q * stride : (int)peer;
      if (m < 0 || (world && m >= world)) continue;
      const rank_rec *x = find(r, n, m);
      char what[512];
      if (!x) {
        fmt_into(what, sizeof what, "no record");
      } else {
        const cJSON *calls = obj_of(x->doc, "calls");
        if (call > 0 && num_or(calls, group, 0) >= call) continue; /* it arrived */
        doing(x->doc, what, sizeof what);
      }
      printf("%s rank %d (%s)", missing ? ";" : " did not arrive:", m, what);
      missing++;
    }
    if (!missing) printf(" every member arrived: the call itself did not complete");
    printf("\n");
  }
  for (int k = 0; k < world; k++) /* ranks that wrote nothing */
    if (!find(r, n, k)) printf("- rank %d wrote no record (the process did not answer)\n", k);
}

static void help(FILE *f) {
  fprintf(f,
          "usage: %s flight RUN_DIR [--out DIR]\n"
          "What every rank was doing when the watchdog (train.collective_timeout_s) ended a\n"
          "run, from RUN_DIR/flight/rank_N.json: per call ranks waited in, the ranks that did\n"
          "not arrive and their last call; flight.csv (one row per rank) and flight.png (the\n"
          "last %.0f s of calls per rank, open ones in red; gnuplot, flight.gp and .dat always)\n"
          "into DIR (default RUN_DIR/flight-report).\n",
          PROG, WINDOW_S);
}

int mt_report_flight(int argc, char **argv) {
  const char *run = NULL, *out = NULL;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      help(stdout);
      return MT_EXIT_OK;
    } else if (!strcmp(a, "--out")) {
      if (i + 1 >= argc) die_input("flight: --out needs a value (see %s flight --help)", PROG);
      out = argv[++i];
    } else {
      take_run_dir("flight", a, &run);
    }
  }
  need_run_dir("flight", run);
  int n = 0;
  char dir[PATH_LEN], out_default[PATH_LEN], path[PATH_LEN], dat_path[PATH_LEN];
  rank_rec *r = load_records(run, &n, dir);
  if (!out) {
    path_join(out_default, run, "flight-report");
    out = out_default;
  }
  if (mkdir(out, 0777) != 0 && errno != EEXIST)
    die_runtime("cannot create %s: %s", out, strerror(errno));
  if (!is_dir(out)) die_runtime("%s is not a directory", out);

  printf("%s: %d flight record%s\n", dir, n, n == 1 ? "" : "s");
  verdicts(r, n);
  /* the table and the CSV; the picture's origin: the first record written */
  double origin = INFINITY;
  for (int i = 0; i < n; i++) origin = fmin(origin, num_or(r[i].doc, "written", INFINITY));
  FILE *csv = open_out(out, "flight.csv", path);
  FILE *dat = open_out(out, "flight.dat", dat_path);
  fprintf(csv, "rank,host,reason,step,op,group,call,peer,waited_s,last_op,last_group,"
               "last_call,last_ended_s_before\n");
  fprintf(dat, "# x_mid_s y half_width_s half_height rgb\n");
  printf("\n| rank | host | reason | step | doing |\n|---|---|---|---|---|\n");
  for (int i = 0; i < n; i++) {
    const cJSON *doc = r[i].doc, *o = obj_of(doc, "open"), *l = last_op(doc);
    const double written = num_or(doc, "written", NAN);
    fprintf(csv, "%d,%s,%s,%.0f,%s,%s", r[i].rank, str_of(doc, "host"), str_of(doc, "reason"),
            num_or(doc, "step", 0), o ? str_of(o, "op") : "", o ? str_of(o, "group") : "");
    csv_num(csv, o ? num_or(o, "call", NAN) : NAN);
    csv_num(csv, o ? num_or(o, "peer", NAN) : NAN);
    csv_num(csv, o ? written - num_or(o, "start", NAN) : NAN);
    fprintf(csv, ",%s,%s", l ? str_of(l, "op") : "", l ? str_of(l, "group") : "");
    csv_num(csv, l ? num_or(l, "call", NAN) : NAN);
    csv_num(csv, l && !o ? written - num_or(l, "end", NAN) : NAN);
    fputc('\n', csv);
    if (i < MAX_PRINTED) {
      char what[512];
      doing(doc, what, sizeof what);
      printf("| %d | %s | %s | %.0f | %s |\n", r[i].rank, str_of(doc, "host"),
             str_of(doc, "reason"), num_or(doc, "step", 0), what);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "ops")) {
      const double a = num_or(e, "start", NAN) - origin;
      const cJSON *end = cJSON_GetObjectItemCaseSensitive(e, "end");
      const int open = !cJSON_IsNumber(end);
      const double b = (open ? written : end->valuedouble) - origin;
      if (!(b >= -WINDOW_S)) continue; /* (NaN too) */
      const double a0 = fmax(a, -WINDOW_S), w = fmax(b - a0, 1e-4);
      const unsigned rgb = open ? 0xD55E00 : num_or(e, "peer", -1) >= 0 ? 0xCC79A7 : 0x0072B2;
      fprintf(dat, "%.6f %d %.6f 0.3 %u\n", a0 + w / 2, r[i].rank, w / 2, rgb);
    }
  }
  if (n > MAX_PRINTED) printf("| ... | | | | %d more in flight.csv |\n", n - MAX_PRINTED);
  close_out(csv, path);
  close_out(dat, dat_path);
  const int world = (int)fmax(num_or(r[0].doc, "world", 0), r[n - 1].rank + 1);
  FILE *g = open_out(out, "flight.gp", path);
  fprintf(g, "# written by meshreport flight; draw with: gnuplot flight.gp (in this directory)\n"
             "set terminal pngcairo size 1200,%d noenhanced font ',11'\n"
             "set output 'flight.png'\n"
             "set title 'the last %.0f s of blocking calls before the flight records of %s'\n"
             "set xlabel 's before the first record'\nset ylabel 'rank'\n"
             "set xrange [%.1f:0.5]\nset yrange [%d.5:-0.5]\n"
             "set ytics 1\nset grid xtics lc rgb '#d0d0d0'\nset style fill solid 0.9 noborder\n"
             "set key outside bottom center horizontal\n"
             "plot 'flight.dat' using 1:2:3:4:5 with boxxyerror lc rgb variable notitle, "
             "NaN with boxes lc rgb '#0072B2' title 'collective', "
             "NaN with boxes lc rgb '#CC79A7' title 'point-to-point', "
             "NaN with boxes lc rgb '#D55E00' title 'open at the record'\n",
          160 + 24 * (world < 64 ? world : 64), WINDOW_S, run, -WINDOW_S, world - 1);
  close_out(g, path);
  char why[2 * PATH_LEN];
  if (run_gnuplot(out, "flight.gp", why, sizeof why) == 0)
    printf("\npicture: %s/flight.png\n", out);
  else
    printf("\nplot: %s\n", why);
  printf("per rank: %s/flight.csv\n", out);
  for (int i = 0; i < n; i++) cJSON_Delete(r[i].doc);
  free(r);
  return MT_EXIT_OK;
}
