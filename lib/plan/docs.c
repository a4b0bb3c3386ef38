/* Documents in the plan (data.documents with plan.doc_lengths): what a
 * corpus's document lengths do to a step, priced from their histogram
 * (`meshdata lengths` writes one: "length count" lines, '#' comments).
 *
 * The windows are simulated: documents drawn from the histogram (a seeded
 * generator, train.seed) laid end to end, each opened by its end-of-text
 * token, cut into 8 steps of G windows of T tokens; a window's start also
 * begins a document (as mt_doc_starts does). A piece of m tokens in a
 * window has m (m + 1) / 2 visible (query, key) pairs. Two figures:
 *   density     the windows' visible pairs over those of whole causal
 *               windows, T (T + 1) / 2 each: the share of packed
 *               attention's work left (the plan's model prices its block
 *               attention at that share, as the virtual device prices a
 *               run's real windows);
 *   imbalance   per step, the dp ranks' work (linear FLOPs of T tokens
 *               plus 12 n_layer C per visible pair, a window) handed out
 *               as data.balance does (in sample order, or longest first
 *               to the least loaded rank), the largest over the mean,
 *               averaged over the steps: the slowest rank sets the step.
 * Under data.seq_policy = varlen the simulated steps' documents are placed
 * by the run's own plan (lib/data/varlen.c) for the layout's dp, cp and
 * chunks, and three figures replace the packed ones:
 *   imbalance       the plan's, over the dp x cp ranks;
 *   pad_factor      a dp rank's rows over its windows (padding makes more);
 *   exchange_share  the share of micro-batches that need the cp exchange
 *                   (a sequence crosses a chunk; the others send nothing).
 * The simulation depends on (file, T, G, seed) alone, not on the layout:
 * it is kept for the planner's next layout. */
#include "plan/plan.h"
#include "data/data.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SIM_STEPS = 8 };

/* the last simulation: its key, each window's visible pairs and its
 * pieces' lengths (window w's: piece[first[w] .. first[w+1])) */
static struct {
  char path[MT_CFG_STR_MAX];
  int T, G;
  uint64_t seed;
  double *pairs; /* SIM_STEPS x G */
  int *piece, *first, n_pieces;
} g_sim;

/* the histogram: lengths and cumulative counts; -1 with e set */
static int read_hist(const char *path, long **len, double **cum, int *n, mt_err *e) {
  FILE *f = fopen(path, "r");
  if (!f) {
    mt_err_set(e, "plan.doc_lengths: %s: cannot open: %s", path, strerror(errno));
    return -1;
  }
  char line[256];
  int cap = 0, line_no = 0;
  double total = 0.0;
  *n = 0, *len = NULL, *cum = NULL;
  while (fgets(line, sizeof line, f)) {
    line_no++;
    char *p = line;
    while (*p == ' ' || *p == '\t') p++;
    if (*p == '#' || *p == '\n' || *p == '\0') continue;
    long l;
    double c;
    char extra;
    if (sscanf(p, "%ld %lf %c", &l, &c, &extra) != 2 || l < 1 || !(c >= 0.0)) {
      mt_err_set(e, "plan.doc_lengths: %s:%d: expected 'length count' (a length >= 1, a count "
                    ">= 0), got '%.40s'", path, line_no, strtok(p, "\n"));
      break;
    }
    if (*n == cap) {
      cap = cap ? 2 * cap : 256;
      *len = realloc(*len, (size_t)cap * sizeof **len);
      *cum = realloc(*cum, (size_t)cap * sizeof **cum);
      if (!*len || !*cum) mt_die("out of memory");
    }
    total += c;
    (*len)[*n] = l, (*cum)[(*n)++] = total;
  }
  fclose(f);
  if (!e->failed && !(total > 0.0))
    mt_err_set(e, "plan.doc_lengths: %s holds no document", path);
  if (e->failed) {
    free(*len), free(*cum);
    return -1;
  }
  return 0;
}

/* the visible pairs of SIM_STEPS x G windows of T tokens */
static int simulate(const char *path, int T, int G, uint64_t seed, mt_err *e) {
  if (g_sim.pairs && !strcmp(g_sim.path, path) && g_sim.T == T && g_sim.G == G &&
      g_sim.seed == seed)
    return 0;
  long *len;
  double *cum;
  int n;
  MT_TRY(e, read_hist(path, &len, &cum, &n, e));
  free(g_sim.pairs), free(g_sim.piece), free(g_sim.first);
  g_sim.pairs = mt_calloc((size_t)SIM_STEPS * G, sizeof(double));
  g_sim.first = mt_calloc((size_t)SIM_STEPS * G + 1, sizeof(int));
  int cap = SIM_STEPS * G;
  g_sim.piece = mt_malloc((size_t)cap * sizeof(int));
  g_sim.n_pieces = 0;
  uint64_t state = mt_splitmix64(seed ^ 0x646f6373ULL);
  long left = 0; /* tokens of the current document not yet placed */
  for (int w = 0; w < SIM_STEPS * G; w++) {
    double pairs = 0.0;
    for (long room = T; room > 0;) {
      if (left == 0) { /* the next document, by its share of the documents */
        state = mt_splitmix64(state);
        double u = (double)(state >> 11) * 0x1.0p-53 * cum[n - 1];
        int lo = 0, hi = n - 1;
        while (lo < hi) {
          int mid = (lo + hi) / 2;
          if (cum[mid] > u) hi = mid;
          else lo = mid + 1;
        }
        left = len[lo];
      }
      long m = left < room ? left : room; /* its piece in this window */
      pairs += 0.5 * (double)m * (double)(m + 1);
      if (g_sim.n_pieces == cap) {
        cap *= 2;
        g_sim.piece = realloc(g_sim.piece, (size_t)cap * sizeof(int));
        if (!g_sim.piece) mt_die("out of memory");
      }
      g_sim.piece[g_sim.n_pieces++] = (int)m;
      left -= m, room -= m;
    }
    g_sim.pairs[w] = pairs;
    g_sim.first[w + 1] = g_sim.n_pieces;
  }
  snprintf(g_sim.path, sizeof g_sim.path, "%s", path);
  g_sim.T = T, g_sim.G = G, g_sim.seed = seed;
  free(len), free(cum);
  return 0;
}

typedef struct {
  double cost;
  int i;
} wcost;

/* dearest first; equal costs by index */
static int by_cost(const void *a, const void *b) {
  const wcost *x = a, *y = b;
  if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
  return x->i - y->i;
}

double mt_balance_assign(const double *cost, int n, int bins, int flops, int *order) {
  const int cap = n / bins;
  double *load = mt_calloc((size_t)bins, sizeof(double));
  if (!flops) {
    for (int i = 0; i < n; i++) order[i] = i, load[i / cap] += cost[i];
  } else {
    wcost *w = mt_malloc((size_t)n * sizeof *w);
    int *fill = mt_calloc((size_t)bins, sizeof(int));
    for (int i = 0; i < n; i++) w[i] = (wcost){cost[i], i};
    qsort(w, (size_t)n, sizeof *w, by_cost);
    for (int i = 0; i < n; i++) {
      int best = -1;
      for (int d = 0; d < bins; d++)
        if (fill[d] < cap && (best < 0 || load[d] < load[best])) best = d;
      order[best * cap + fill[best]++] = w[i].i;
      load[best] += w[i].cost;
    }
    free(w);
    free(fill);
  }
  double most = 0.0, sum = 0.0;
  for (int d = 0; d < bins; d++) most = load[d] > most ? load[d] : most, sum += load[d];
  free(load);
  return sum > 0 ? most / (sum / bins) : 1.0;
}

void mt_doc_work(const mt_model_shape *s, double *lin, double *att) {
  *lin = mt_train_flops_per_token_mm(mt_model_active_matmul_weights(s), s->n_layer, s->n_embd, 0);
  *att = 12.0 * s->n_layer * s->n_embd;
}

void mt_varlen_shape_of(const mt_model_shape *s, const mt_cp_layout *l, int dp, int global_batch,
                        mt_varlen_shape *out) {
  double lin, att;
  mt_doc_work(s, &lin, &att);
  *out = (mt_varlen_shape){.T = s->seq_len, .dp = dp, .cp = l->size, .chunk_len = l->chunk_len,
                           .ring = l->size > 1 && l->mode == MT_CP_RING,
                           .row_cap = 2 * (global_batch / dp), .lin = llround(lin),
                           .att = llround(att)};
}

/* varlen: the run's plan of each simulated step, for the layout */
static void price_varlen(const mt_config *cfg, const mt_model_shape *s, mt_plan_docs *out) {
  const int G = cfg->global_batch, dp = cfg->dp, B = cfg->micro_batch;
  mt_cp_layout l;
  mt_cp_layout_make(&l, cfg->cp, 0, cfg->cp_mode, s->seq_len);
  mt_varlen_shape vs;
  mt_varlen_shape_of(s, &l, dp, G, &vs);
  double imb = 0.0, rows = 0.0, exch = 0.0, mbs = 0.0;
  for (int st = 0; st < SIM_STEPS; st++) {
    const int p0 = g_sim.first[st * G], n = g_sim.first[(st + 1) * G] - p0;
    int *win = mt_malloc(3 * (size_t)(n > 0 ? n : 1) * sizeof(int)), *start = win + n, *len = start + n;
    for (int w = 0; w < G; w++)
      for (int k = g_sim.first[st * G + w], at = 0; k < g_sim.first[st * G + w + 1]; k++) {
        win[k - p0] = w, start[k - p0] = at, len[k - p0] = g_sim.piece[k];
        at += g_sim.piece[k];
      }
    mt_varlen_plan pl;
    mt_varlen_plan_make(&pl, &vs, win, start, len, n, G);
    imb += pl.imbalance;
    rows += pl.rows_per_rank;
    for (int d = 0; d < dp; d++)
      for (int r0 = 0; r0 < pl.rows_per_rank; r0 += B) {
        int any = 0;
        for (int r = r0; r < r0 + B && r < pl.rows_per_rank; r++)
          any |= !pl.local[d * pl.rows_per_rank + r];
        exch += any, mbs += 1;
      }
    mt_varlen_plan_free(&pl);
    free(win);
  }
  out->varlen = 1;
  out->imbalance = imb / SIM_STEPS;
  out->pad_factor = rows / SIM_STEPS / (G / dp);
  out->exchange_share = mbs > 0 ? exch / mbs : 1.0;
}

int mt_plan_docs_price(const mt_config *cfg, const mt_model_shape *s, mt_plan_docs *out,
                       mt_err *e) {
  out->density = out->imbalance = out->pad_factor = out->exchange_share = 1.0;
  out->priced = out->varlen = 0;
  if (!cfg->documents || !cfg->plan_doc_lengths[0]) return 0;
  const int T = s->seq_len, G = cfg->global_batch, dp = cfg->dp;
  MT_TRY(e, simulate(cfg->plan_doc_lengths, T, G, (uint64_t)cfg->seed, e));
  double lin, att;
  mt_doc_work(s, &lin, &att);
  lin *= T;
  const double whole = 0.5 * (double)T * (T + 1);
  double seen = 0.0, imb = 0.0, *cost = mt_malloc((size_t)G * sizeof(double));
  int *order = mt_malloc((size_t)G * sizeof(int));
  for (int st = 0; st < SIM_STEPS; st++) {
    for (int i = 0; i < G; i++) {
      double p = g_sim.pairs[(size_t)st * G + i];
      seen += p;
      cost[i] = lin + att * p;
    }
    imb += mt_balance_assign(cost, G, dp, cfg->balance == MT_BALANCE_FLOPS, order);
  }
  free(cost);
  free(order);
  out->density = seen / ((double)SIM_STEPS * G * whole);
  out->imbalance = imb / SIM_STEPS;
  out->priced = 1;
  if (cfg->seq_policy == MT_SEQ_VARLEN) price_varlen(cfg, s, out);
  return 0;
}
