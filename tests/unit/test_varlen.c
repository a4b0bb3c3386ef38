/* data.seq_policy = varlen's plan (lib/data/varlen.c) on a long-tail mix of
 * documents cut by windows, for dp 1, 2, 4 x cp 1, 2, 4, ring and Ulysses:
 * every sequence placed once, inside its row, none overlapping another;
 * the plan's order and row_first agree with the placements; a sequence
 * longer than a chunk crosses one, and a row flagged local has none that
 * does; padding = rows x T minus the tokens; the same plan twice (hash);
 * each dp rank's rows that need the exchange come first; the work over dp
 * x cp within 1.10 of the mean; and with too few rows allowed, the windows
 * kept as they are. */
#include "../check.h"
#include "data/data.h"
#include "../test_rng.h"

#include <string.h>

/* G windows of T positions cut into documents: 85% of 8-15 positions, 15%
 * of 60-460 (as the long-tail tests draw them), cut at the window edges */
static int make_segs(int G, int T, int *win, int *start, int *len) {
  int n = 0, left = 0; /* positions left of the running document */
  for (int w = 0; w < G; w++)
    for (int p = 0; p < T;) {
      if (left == 0) {
        double u = rng_unit(), v = rng_unit();
        left = u < 0.85 ? 8 + (int)(8 * v) : 60 + (int)(400 * v * v);
      }
      int m = left < T - p ? left : T - p;
      win[n] = w, start[n] = p, len[n] = m;
      n++, p += m, left -= m;
    }
  return n;
}

static void check_plan(const mt_varlen_plan *p, const mt_varlen_shape *s, const int *len,
                       int n, const char *what) {
  const int T = s->T, Lc = s->chunk_len;
  MT_CHECK(p->n_segs == n && p->n_rows == p->rows_per_rank * s->dp, "%s: rows %d x %d", what,
           p->rows_per_rank, s->dp);
  MT_CHECK(p->rows_per_rank <= s->row_cap, "%s: %d rows per rank > cap %d", what,
           p->rows_per_rank, s->row_cap);
  long long tokens = 0;
  int bad_place = 0, bad_order = 0, bad_local = 0, bad_long = 0;
  for (int r = 0; r < p->n_rows; r++) {
    int at = 0;
    for (int k = p->row_first[r]; k < p->row_first[r + 1]; k++) {
      const int i = p->order[k];
      if (p->row[i] != r || p->pos[i] < at) bad_order++;
      if (p->pos[i] < 0 || p->pos[i] + len[i] > T) bad_place++;
      const int crosses = p->pos[i] / Lc != (p->pos[i] + len[i] - 1) / Lc;
      if (crosses && p->local[r]) bad_local++;
      if (len[i] > Lc && !crosses) bad_long++;
      at = p->pos[i] + len[i];
      tokens += len[i];
    }
  }
  MT_CHECK(p->row_first[p->n_rows] == n, "%s: row_first ends at %d of %d", what,
           p->row_first[p->n_rows], n);
  MT_CHECK(!bad_place && !bad_order, "%s: %d outside their row, %d out of order or overlapping",
           what, bad_place, bad_order);
  MT_CHECK(!bad_local && !bad_long, "%s: %d crossing in local rows, %d long not crossing", what,
           bad_local, bad_long);
  MT_CHECK(p->pad == (long long)p->n_rows * T - tokens, "%s: padding %lld, expected %lld", what,
           p->pad, (long long)p->n_rows * T - tokens);
  int late_exchange = 0; /* a row that needs the exchange after a local one, per dp rank */
  for (int d = 0; d < s->dp; d++)
    for (int k = 1; k < p->rows_per_rank; k++) {
      const int r = d * p->rows_per_rank + k;
      if (!p->local[r] && p->local[r - 1]) late_exchange++;
    }
  MT_CHECK(late_exchange == 0, "%s: %d rows needing the exchange after local ones", what,
           late_exchange);
}

int main(void) {
  g_rng = 11;
  enum { G = 64, T = 1024 };
  int *win = test_alloc(G * T * sizeof(int)), *start = test_alloc(G * T * sizeof(int));
  int *len = test_alloc(G * T * sizeof(int));
  const int n = make_segs(G, T, win, start, len);
  const int dps[] = {1, 2, 4}, cps[] = {1, 2, 4};
  for (int a = 0; a < 3; a++)
    for (int b = 0; b < 3; b++)
      for (int ring = 0; ring < (cps[b] > 1 ? 2 : 1); ring++) {
        const int dp = dps[a], cp = cps[b];
        mt_varlen_shape s = {.T = T, .dp = dp, .cp = cp,
                             .chunk_len = cp > 1 && ring ? T / (2 * cp) : T / cp, .ring = ring,
                             .row_cap = 2 * G / dp, .lin = 6 * 1000, .att = 12 * 2 * 64};
        char what[64];
        snprintf(what, sizeof what, "dp %d cp %d %s", dp, cp, ring ? "ring" : "contiguous");
        mt_varlen_plan p, q;
        mt_varlen_plan_make(&p, &s, win, start, len, n, G);
        mt_varlen_plan_make(&q, &s, win, start, len, n, G);
        check_plan(&p, &s, len, n, what);
        MT_CHECK(!p.fallback, "%s: fell back to the windows", what);
        MT_CHECK(mt_varlen_plan_hash(&p) == mt_varlen_plan_hash(&q), "%s: two plans differ", what);
        char row[96];
        snprintf(row, sizeof row, "%s: imbalance - 1 (pad %.3f)", what,
                 (double)p.pad / ((double)p.n_rows * T));
        mt_check_err(row, p.imbalance - 1.0, 0.10); /* measured at most 1.055 */
        mt_varlen_plan_free(&p);
        mt_varlen_plan_free(&q);
      }
  /* rows that would not fit: the windows as they are */
  mt_varlen_shape s = {.T = T, .dp = 2, .cp = 2, .chunk_len = T / 4, .ring = 1,
                       .row_cap = G / 2, .lin = 6000, .att = 1536};
  mt_varlen_plan p;
  mt_varlen_plan_make(&p, &s, win, start, len, n, G);
  int same = p.fallback && p.pad == 0 && p.rows_per_rank == G / 2;
  for (int i = 0; i < n && same; i++) same = p.row[i] == win[i] && p.pos[i] == start[i];
  mt_check_true("row_cap = windows per rank: the windows kept (fallback, no padding)", same);
  check_plan(&p, &s, len, n, "fallback");
  mt_varlen_plan_free(&p);
  free(win), free(start), free(len);
  return mt_check_summary("test_varlen");
}
