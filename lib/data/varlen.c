/* Variable-length sequences (data.seq_policy = varlen; ByteScale's
 * data-aware sharding): where each of a step's sequences goes.
 *
 * The step's sequences are the documents of its G windows, as the window
 * edges cut them (a pure function of (seed, step), whatever the layout).
 * Rows are T positions, each held by one dp rank and cut over its cp ranks
 * in K = T / chunk_len chunks (chunk j on cp rank owner(j)). A sequence
 * longer than a chunk must be split over cp ranks (their ring or
 * all-to-all carries it); a shorter one can sit whole inside one chunk, on
 * one rank, where attention needs nothing from the others. So:
 *
 *  1. long sequences (> chunk_len), longest first, go first-fit into "long
 *     rows" (laid end to end from position 0);
 *  2. the short ones, longest first, go first-fit into the long rows' free
 *     tails, then into chunk bins of chunk_len positions (first fit
 *     decreasing: a segment tree finds the leftmost bin with room in
 *     O(log bins));
 *  3. R = long rows + ceil(bins / K) rows, rounded up to a multiple of dp:
 *     every dp rank holds R / dp rows (equal linear work);
 *  4. the long rows go to the dp ranks by longest processing time (the
 *     dearest first to the least loaded rank with room), then the bins, the
 *     dearest first, each to the (dp, cp) rank with the least work among
 *     those with a free chunk in their local rows: attention's work is
 *     balanced over dp x cp, as ByteScale balances it.
 *
 * Work is counted where it is done: the ring attends by position (a cp
 * rank does the pairs of its chunks' queries), Ulysses a row that needs the
 * exchange head group by head group (each cp rank an equal share of the
 * row's pairs; a local row by position, as the ring). Positions left over are padding: each run of them a document of its own,
 * restarting at every chunk boundary (so a local row stays local), with no
 * target. A dp rank's long rows come first, so its micro-batches that need
 * the cp exchange are together and the others need none.
 *
 * When the rows do not fit in row_cap rows per dp rank (a mix that pads
 * badly), the step keeps its windows as they are (row w = window w, no
 * padding) and says so (fallback). Work is counted in integers (lin per
 * position, att per visible pair), so every rank computes the same plan. */
#include "data/data.h"

#include <stdlib.h>
#include <string.h>

enum { MT_VARLEN_MAX_CP = 64 }; /* the cp ranks whose long rows are evened */

static int owner(const mt_varlen_shape *s, int j) {
  return s->ring && j >= s->cp ? 2 * s->cp - 1 - j : j;
}

/* the visible pairs of a run of positions [pos, pos + len) of one document
 * that begins off positions before pos, added to the cp ranks holding them */
static void add_pairs(const mt_varlen_shape *s, long long *per_cp, int pos, int len, int off) {
  while (len > 0) {
    const int j = pos / s->chunk_len, n_in = (j + 1) * s->chunk_len - pos;
    const int n = n_in < len ? n_in : len;
    const long long a = off, b = (long long)off + n; /* pairs a+1 .. b */
    per_cp[owner(s, j)] += (b * (b + 1) - a * (a + 1)) / 2;
    pos += n, len -= n, off += n;
  }
}

/* Ulysses: a row that needs the exchange is attended head group by head
 * group over the whole row, so each cp rank does an equal share of its
 * pairs (the ring attends by position, as add_pairs counts) */
static void spread(const mt_varlen_shape *s, long long *per_cp) {
  if (s->ring || s->cp < 2) return;
  long long all = 0;
  for (int c = 0; c < s->cp; c++) all += per_cp[c];
  for (int c = 0; c < s->cp; c++) per_cp[c] = all / s->cp + (c < all % s->cp);
}

/* sort: longest first, then by index */
static const int *g_len;
static int by_len_desc(const void *a, const void *b) {
  const int i = *(const int *)a, j = *(const int *)b;
  if (g_len[i] != g_len[j]) return g_len[i] > g_len[j] ? -1 : 1;
  return (i > j) - (i < j);
}
static const long long *g_cost;
static int by_cost_desc(const void *a, const void *b) {
  const int i = *(const int *)a, j = *(const int *)b;
  if (g_cost[i] != g_cost[j]) return g_cost[i] > g_cost[j] ? -1 : 1;
  return (i > j) - (i < j);
}
static const int *g_row, *g_pos;
static int by_place(const void *a, const void *b) {
  const int i = *(const int *)a, j = *(const int *)b;
  if (g_row[i] != g_row[j]) return g_row[i] < g_row[j] ? -1 : 1;
  return (g_pos[i] > g_pos[j]) - (g_pos[i] < g_pos[j]);
}

/* first fit over bins: a segment tree of each bin's room (max per node) */
typedef struct {
  int n, *room;
} fit_tree;
static void fit_init(fit_tree *f, int bins) {
  f->n = 1;
  while (f->n < bins) f->n *= 2;
  f->room = mt_calloc(2 * (size_t)f->n, sizeof(int));
}
static void fit_set(fit_tree *f, int i, int room) {
  int k = f->n + i;
  f->room[k] = room;
  for (k /= 2; k >= 1; k /= 2)
    f->room[k] = f->room[2 * k] > f->room[2 * k + 1] ? f->room[2 * k] : f->room[2 * k + 1];
}
/* the leftmost bin with room >= len, or -1 */
static int fit_find(const fit_tree *f, int len) {
  if (f->room[1] < len) return -1;
  int k = 1;
  while (k < f->n) k = f->room[2 * k] >= len ? 2 * k : 2 * k + 1;
  return k - f->n;
}

/* where the plan leaves it: the rows of each sequence in order, local
 * rows, padding and each (dp, cp) rank's work */
static void finish(mt_varlen_plan *p, const mt_varlen_shape *s, const int *len) {
  const int n = p->n_segs, R = p->n_rows;
  p->order = mt_malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  p->row_first = mt_calloc((size_t)R + 1, sizeof(int));
  for (int i = 0; i < n; i++) p->order[i] = i, p->row_first[p->row[i] + 1]++;
  for (int r = 0; r < R; r++) p->row_first[r + 1] += p->row_first[r];
  g_row = p->row, g_pos = p->pos;
  qsort(p->order, (size_t)n, sizeof(int), by_place);
  p->local = mt_calloc((size_t)R, 1);
  long long *work = mt_calloc((size_t)s->dp * s->cp, sizeof(long long));
  long long *w = mt_calloc((size_t)s->cp, sizeof(long long)); /* a row's */
  p->pad = 0;
  for (int r = 0; r < R; r++) {
    memset(w, 0, (size_t)s->cp * sizeof(long long));
    int at = 0, local = 1;
    for (int k = p->row_first[r]; k <= p->row_first[r + 1]; k++) {
      const int i = k < p->row_first[r + 1] ? p->order[k] : -1;
      const int end = i >= 0 ? p->pos[i] : s->T;
      while (at < end) { /* padding: a document per chunk it touches */
        const int stop = (at / s->chunk_len + 1) * s->chunk_len;
        const int m = (stop < end ? stop : end) - at;
        add_pairs(s, w, at, m, 0);
        p->pad += m, at += m;
      }
      if (i < 0) break;
      add_pairs(s, w, p->pos[i], len[i], 0);
      if (p->pos[i] / s->chunk_len != (p->pos[i] + len[i] - 1) / s->chunk_len) local = 0;
      at = p->pos[i] + len[i];
    }
    p->local[r] = (unsigned char)local;
    if (!local) spread(s, w);
    for (int c = 0; c < s->cp; c++) work[(size_t)(r / p->rows_per_rank) * s->cp + c] += w[c];
  }
  free(w);
  const long long lin = s->lin * (long long)p->rows_per_rank * (s->T / s->cp);
  double most = 0.0, sum = 0.0;
  for (int k = 0; k < s->dp * s->cp; k++) {
    const double c = (double)(lin + s->att * work[k]);
    most = c > most ? c : most;
    sum += c;
  }
  p->imbalance = sum > 0 ? most / (sum / (s->dp * s->cp)) : 1.0;
  free(work);
}

/* the windows as they are: row = window, no padding */
static void keep_windows(mt_varlen_plan *p, const int *win, const int *start, int G, int dp) {
  for (int i = 0; i < p->n_segs; i++) p->row[i] = win[i], p->pos[i] = start[i];
  p->rows_per_rank = G / dp;
  p->n_rows = G;
  p->fallback = 1;
}

enum { PERMUTE_MAX = 6 }; /* rows of up to this many sequences try every order */

/* the largest work of a cp rank in a row of the k sequences seq laid end
 * to end in the order ord, from position at */
static long long row_spread(const mt_varlen_shape *s, const int *len, const int *seq,
                            const int *ord, int k, int at) {
  long long w[2 * MT_VARLEN_MAX_CP] = {0}, most = 0;
  for (int j = 0; j < k; j++) add_pairs(s, w, at, len[seq[ord[j]]], 0), at += len[seq[ord[j]]];
  for (int c = 0; c < s->cp; c++) most = w[c] > most ? w[c] : most;
  return most;
}

/* the next permutation of ord (k), in lexicographic order; 0 after the last */
static int next_order(int *ord, int k) {
  int i = k - 2;
  while (i >= 0 && ord[i] >= ord[i + 1]) i--;
  if (i < 0) return 0;
  int j = k - 1;
  while (ord[j] <= ord[i]) j--;
  int t = ord[i];
  ord[i] = ord[j], ord[j] = t;
  for (int a = i + 1, b = k - 1; a < b; a++, b--) t = ord[a], ord[a] = ord[b], ord[b] = t;
  return 1;
}

/* A long row's sequences may go in any order (positions restart at each),
 * and its free tail may come first: the cp ranks' shares of its work
 * depend on both. Each long row takes the order (every one for up to
 * PERMUTE_MAX sequences, else as placed and reversed) and the side of its
 * free positions that give the busiest cp rank the least work. */
static void even_long_rows(mt_varlen_plan *p, const mt_varlen_shape *s, const int *len,
                           const int *bin_of, int n, int L, const int *fill) {
  if (s->cp > MT_VARLEN_MAX_CP) return;
  int *first = mt_calloc((size_t)L + 1, sizeof(int)), *seq = mt_malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
  for (int i = 0; i < n; i++)
    if (bin_of[i] >= 0) first[bin_of[i] + 1]++;
  for (int r = 0; r < L; r++) first[r + 1] += first[r];
  int *at = mt_calloc((size_t)L + 1, sizeof(int));
  for (int i = 0; i < n; i++) /* each row's sequences in the order placed */
    if (bin_of[i] >= 0) seq[first[bin_of[i]] + at[bin_of[i]]++] = i;
  for (int r = 0; r < L; r++) {
    const int k = first[r + 1] - first[r], *sq = seq + first[r], gap = s->T - fill[r];
    int ord[64], best[64], best_at = 0;
    if (k > 64) continue;
    for (int j = 0; j < k; j++) ord[j] = best[j] = j;
    long long best_w = row_spread(s, len, sq, ord, k, 0);
    for (int side = 0; side < 2; side++) {
      const int a0 = side ? gap : 0;
      for (int j = 0; j < k; j++) ord[j] = j;
      int more = 1;
      for (int tries = 0; more; tries++) {
        const long long w = row_spread(s, len, sq, ord, k, a0);
        if (w < best_w) {
          best_w = w, best_at = a0;
          memcpy(best, ord, (size_t)k * sizeof(int));
        }
        if (k <= PERMUTE_MAX) more = next_order(ord, k);
        else if (tries == 0) /* reversed */
          for (int j = 0; j < k; j++) ord[j] = k - 1 - j;
        else more = 0;
      }
    }
    for (int j = 0, pos = best_at; j < k; j++) p->pos[sq[best[j]]] = pos, pos += len[sq[best[j]]];
  }
  free(first), free(seq), free(at);
}

/* Rows of Rd per dp rank, with the long rows (L, their work per cp rank lw,
 * their sequences' row in bin_of) placed: the long rows to the dp ranks by
 * longest processing time, then the short sequences left (rest, longest
 * first), each to the (dp, cp) rank with the least work that has a chunk
 * with room, first fit among its chunks. 0, or -1 when one does not fit. */
static int place(mt_varlen_plan *p, const mt_varlen_shape *s, const int *len, const int *rest,
                 int n_rest, int L, const long long *lw, const int *bin_of, int Rd) {
  const int dp = s->dp, cp = s->cp, Lc = s->chunk_len, K = s->T / Lc, per_c = K / cp;
  long long *load = mt_calloc((size_t)dp * cp, sizeof(long long));
  int *rows_long = mt_calloc((size_t)dp, sizeof(int));
  int *row_at = mt_malloc((size_t)(L > 0 ? L : 1) * sizeof(int)); /* the plan's row of each */
  long long *lt = mt_calloc((size_t)(L > 0 ? L : 1), sizeof(long long));
  int *lo = mt_malloc((size_t)(L > 0 ? L : 1) * sizeof(int));
  for (int r = 0; r < L; r++) {
    lo[r] = r;
    for (int c = 0; c < cp; c++) lt[r] += lw[(size_t)r * cp + c];
  }
  g_cost = lt;
  qsort(lo, (size_t)L, sizeof(int), by_cost_desc);
  int ok = 1;
  for (int k = 0; k < L && ok; k++) { /* long rows: the least loaded dp rank with room */
    int best = -1;
    long long best_load = 0;
    for (int d = 0; d < dp; d++) {
      if (rows_long[d] >= Rd) continue;
      long long w = 0;
      for (int c = 0; c < cp; c++) w += load[(size_t)d * cp + c];
      if (best < 0 || w < best_load) best = d, best_load = w;
    }
    if (best < 0) ok = 0;
    else {
      const int r = lo[k];
      row_at[r] = best * Rd + rows_long[best]++;
      for (int c = 0; c < cp; c++) load[(size_t)best * cp + c] += lw[(size_t)r * cp + c];
    }
  }
  /* each (dp, cp) rank's chunks in its local rows: (local row i, its k-th
   * chunk of the row) at slot i per_c + k, each with its room */
  const int slots = Rd * per_c;
  int *room = mt_malloc((size_t)dp * cp * slots * sizeof(int) + sizeof(int));
  int *most = mt_malloc((size_t)dp * cp * sizeof(int)); /* the most room of a rank's chunks */
  for (int q = 0; q < dp * cp; q++) {
    const int have = (Rd - rows_long[q / cp]) * per_c;
    for (int i = 0; i < slots; i++) room[(size_t)q * slots + i] = i < have ? Lc : 0;
    most[q] = have > 0 ? Lc : 0;
  }
  int *slot_of = mt_malloc((size_t)(n_rest > 0 ? n_rest : 1) * sizeof(int));
  int *rank_of = mt_malloc((size_t)(n_rest > 0 ? n_rest : 1) * sizeof(int));
  for (int k = 0; k < n_rest && ok; k++) {
    const int i = rest[k];
    int best = -1;
    for (int q = 0; q < dp * cp; q++)
      if (most[q] >= len[i] && (best < 0 || load[q] < load[best])) best = q;
    if (best < 0) {
      ok = 0;
      break;
    }
    int *rm = room + (size_t)best * slots, j = 0;
    while (rm[j] < len[i]) j++;
    p->pos[i] = Lc - rm[j];
    rm[j] -= len[i];
    slot_of[k] = j, rank_of[k] = best;
    load[best] += (long long)len[i] * (len[i] + 1) / 2;
    most[best] = 0;
    for (int t = 0; t < slots; t++) most[best] = rm[t] > most[best] ? rm[t] : most[best];
  }
  if (ok) {
    for (int i = 0; i < p->n_segs; i++)
      if (bin_of[i] >= 0) p->row[i] = row_at[bin_of[i]];
    for (int k = 0; k < n_rest; k++) {
      const int i = rest[k], q = rank_of[k], d = q / cp, c = q % cp;
      const int li = slot_of[k] / per_c, kk = slot_of[k] % per_c;
      const int j = kk == 0 ? c : 2 * cp - 1 - c; /* the rank's early or late chunk */
      p->row[i] = d * Rd + rows_long[d] + li;
      p->pos[i] += j * Lc;
    }
  }
  free(load), free(rows_long), free(row_at), free(lt), free(lo), free(room), free(most);
  free(slot_of), free(rank_of);
  return ok ? 0 : -1;
}

void mt_varlen_plan_make(mt_varlen_plan *p, const mt_varlen_shape *s, const int *win,
                         const int *start, const int *len, int n, int G) {
  memset(p, 0, sizeof *p);
  const int T = s->T, Lc = s->chunk_len, K = T / Lc, dp = s->dp, cp = s->cp;
  const size_t n1 = (size_t)(n > 0 ? n : 1);
  p->n_segs = n;
  p->row = mt_malloc(n1 * sizeof(int));
  p->pos = mt_malloc(n1 * sizeof(int));
  int *idx = mt_malloc(n1 * sizeof(int));
  for (int i = 0; i < n; i++) idx[i] = i;
  g_len = len;
  qsort(idx, (size_t)n, sizeof(int), by_len_desc);
  int n_long = 0;
  while (n_long < n && len[idx[n_long]] > Lc) n_long++;
  /* long rows: first fit of the long sequences, then of the short ones
   * into their tails (a segment tree of the rows' room) */
  fit_tree f;
  fit_init(&f, n_long > 0 ? n_long : 1);
  int *bin_of = mt_malloc(n1 * sizeof(int)); /* the long row of each (-1: none) */
  int *fill = mt_calloc((size_t)(n_long > 0 ? n_long : 1), sizeof(int));
  int *rest = mt_malloc(n1 * sizeof(int)), n_rest = 0;
  long long rest_tokens = 0;
  int L = 0;
  for (int k = 0; k < n; k++) {
    const int i = idx[k];
    int r = fit_find(&f, len[i]);
    if (r < 0 && k < n_long) r = L++;
    bin_of[i] = r;
    if (r < 0) {
      rest[n_rest++] = i, rest_tokens += len[i];
      continue;
    }
    p->pos[i] = fill[r];
    fill[r] += len[i];
    fit_set(&f, r, T - fill[r]);
  }
  free(f.room);
  long long *lw = mt_calloc((size_t)(L > 0 ? L : 1) * cp, sizeof(long long));
  if (cp > 1 && s->ring) even_long_rows(p, s, len, bin_of, n, L, fill);
  for (int i = 0; i < n; i++)
    if (bin_of[i] >= 0) add_pairs(s, lw + (size_t)bin_of[i] * cp, p->pos[i], len[i], 0);
  for (int r = 0; r < L; r++) spread(s, lw + (size_t)r * cp);
  /* the fewest rows that could hold it, then one more until it fits */
  const long long chunks = (rest_tokens + Lc - 1) / Lc;
  int Rd = (int)((L + (chunks + K - 1) / K + dp - 1) / dp);
  if (Rd < 1) Rd = 1;
  while (Rd <= s->row_cap && place(p, s, len, rest, n_rest, L, lw, bin_of, Rd) != 0) Rd++;
  if (Rd > s->row_cap) keep_windows(p, win, start, G, dp);
  else p->rows_per_rank = Rd, p->n_rows = Rd * dp;
  free(idx), free(bin_of), free(fill), free(rest), free(lw);
  finish(p, s, len);
}

void mt_varlen_plan_free(mt_varlen_plan *p) {
  free(p->row), free(p->pos), free(p->order), free(p->row_first), free(p->local);
  memset(p, 0, sizeof *p);
}

uint64_t mt_varlen_plan_hash(const mt_varlen_plan *p) {
  uint64_t h = mt_splitmix64((uint64_t)p->n_rows);
  for (int i = 0; i < p->n_segs; i++)
    h = mt_splitmix64(h ^ ((uint64_t)(uint32_t)p->row[i] << 32 | (uint32_t)p->pos[i]));
  return h;
}
