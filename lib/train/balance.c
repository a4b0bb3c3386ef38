/* Which windows of a step each data-parallel rank trains on, and how even
 * the work is (data.documents).
 *
 * With documents a window's cost depends on what it holds: its linear
 * FLOPs are those of T tokens, but its attention FLOPs are those of the
 * (query, key) pairs inside each document, sum over documents of L (L+1) /
 * 2: a window of one long document costs up to T / L_short times the
 * attention of a window of short ones. Under context parallelism a rank
 * holds its chunks of each window (the zigzag layout evens one causal
 * sequence, not a window of documents), so the cost of rank (d, c) is
 *
 *   lin x T / cp + att x sum over the positions p it holds of (p - start(p) + 1)
 *
 * with lin the matmul FLOPs of a token and att those of one visible pair
 * (mt_doc_work).
 *
 * data.balance = flops hands the step's G windows to the dp ranks by
 * longest processing time first: windows by cost, the dearest first (ties
 * by sample index), each to the rank with the least work so far among
 * those with room (per_rank windows each; ties by rank). The global batch
 * is the same G windows, so the loss is the same up to the order of the
 * sums (ByteScale's balancing over dp, at the granularity of windows); the
 * plan is a function of the windows, hence of (seed, step): the same on
 * every rank, every rerun, every resume. Without it rank d trains samples
 * [d per_rank, (d+1) per_rank) of the step, as always.
 *
 * The step's imbalance (max over the dp x cp ranks of their cost over the
 * mean) goes to metrics.jsonl as flop_imbalance either way. */
#include "train/train.h"

#include <stdlib.h>

/* the cost of window (tokens seq) on each cp rank, into per_cp[cp] */
static void window_costs(const mt_trainer *t, const int *seq, int *doc, double *per_cp) {
  const mt_model_shape *s = &t->lay.shape;
  const mt_cp_layout *l = &t->step.model.attn.lay;
  const int T = s->seq_len, cp = t->cfg.cp, Tl = T / cp;
  double lin, att;
  mt_doc_work(s, &lin, &att);
  mt_doc_starts(seq, T, t->cfg.eot, doc);
  for (int c = 0; c < cp; c++) {
    mt_cp_layout lc;
    mt_cp_layout_make(&lc, cp, c, l->mode, T);
    double pairs = 0.0;
    for (int k = 0; k < lc.n_chunks; k++)
      for (int i = 0; i < lc.chunk_len; i++) {
        int p = lc.chunk_pos[k] + i;
        pairs += (double)(p - doc[p] + 1);
      }
    per_cp[c] = lin * Tl + att * pairs;
  }
}

void mt_balance_step(mt_trainer *t, uint64_t g0, uint64_t *order, double *imbalance) {
  const int G = t->cfg.global_batch, dp = t->cfg.dp, cp = t->cfg.cp, per = t->lay.per_rank;
  const int T = t->lay.shape.seq_len;
  int *seq = mt_malloc(2 * (size_t)T * sizeof(int)), *doc = mt_malloc((size_t)T * sizeof(int));
  double *cost = mt_calloc((size_t)G * cp, sizeof(double)); /* (window, cp rank) */
  double *total = mt_calloc((size_t)G, sizeof(double));       /* (window) */
  int *idx = mt_malloc((size_t)G * sizeof(int));
  for (int i = 0; i < G; i++) {
    mt_blend_get(&t->blend, g0 + (uint64_t)i, seq, seq + T);
    window_costs(t, seq, doc, cost + (size_t)i * cp);
    for (int c = 0; c < cp; c++) total[i] += cost[(size_t)i * cp + c];
  }
  mt_balance_assign(total, G, dp, t->cfg.balance == MT_BALANCE_FLOPS, idx);
  for (int i = 0; i < G; i++) order[i] = g0 + (uint64_t)idx[i];
  /* the cost of each (dp, cp) rank under the order taken */
  double most = 0.0, sum = 0.0;
  for (int d = 0; d < dp; d++)
    for (int c = 0; c < cp; c++) {
      double r = 0.0;
      for (int k = 0; k < per; k++)
        r += cost[(size_t)(order[(size_t)d * per + k] - g0) * cp + c];
      most = r > most ? r : most;
      sum += r;
    }
  *imbalance = sum > 0 ? most / (sum / ((double)dp * cp)) : 1.0;
  free(seq), free(doc), free(cost), free(total), free(idx);
}
