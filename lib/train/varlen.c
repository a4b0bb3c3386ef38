/* data.seq_policy = varlen in the trainer: a step's sequences are the
 * documents of its G windows (as the window edges cut them: the same for
 * any layout, the loss that of data.documents' packed windows); the plan
 * (lib/data/varlen.c) places them in rows so that the short ones sit whole
 * in one cp chunk, the long ones go over the cp ranks, and the work is even
 * over dp x cp. This dp rank trains its rows of the plan, B to a
 * micro-batch: those with a sequence that crosses a chunk first (they need
 * the cp exchange), then the rest (which need none). Padding positions
 * read token 0 and predict nothing (target -1: no loss, no gradient); the
 * loss is still the sum over the step's G x T real positions over their
 * count. Every rank reads all G windows and makes the same plan. */
#include "train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int mt_varlen_row_cap(const mt_trainer *t) {
  mt_varlen_shape s;
  mt_varlen_shape_of(&t->lay.shape, &t->step.model.attn.lay, t->cfg.dp, t->cfg.global_batch, &s);
  return s.row_cap;
}

void mt_varlen_check(mt_trainer *t, mt_err *e) {
  const mt_config *cfg = &t->cfg;
  if (cfg->seq_policy != MT_SEQ_VARLEN || cfg->long_documents == MT_LONG_DOCS_SPLIT ||
      t->synthetic)
    return;
  const double t0 = mt_now();
  mt_doc_longest l;
  mt_sources_longest_document(&t->sources, cfg->eot, MPI_COMM_WORLD, &l);
  const int T = t->lay.shape.seq_len;
  if (l.len > T)
    mt_err_set(e, "data.seq_policy = varlen: %s holds a document of %lld tokens (from token "
                  "%lld), longer than model.seq_len = %d; set data.long_documents = split to "
                  "cut it where the windows cut it",
               l.path, l.len, l.offset, T);
  else
    mt_info0("meshtrain: varlen: the longest document holds %lld tokens (model.seq_len = %d; "
             "scanned in %.2f s)", l.len, T, mt_now() - t0);
}

/* the step's sequences: per window, its runs of one document */
static int cut(const mt_trainer *t, int G, int *doc, int *win, int *start, int *len) {
  const int T = t->lay.shape.seq_len;
  int n = 0;
  for (int w = 0; w < G; w++) {
    mt_doc_starts(t->vl_win + (size_t)w * 2 * T, T, t->cfg.eot, doc);
    for (int p = 0; p < T; p++) {
      if (p > 0 && doc[p] == doc[p - 1]) {
        len[n - 1]++;
        continue;
      }
      win[n] = w, start[n] = p, len[n] = 1;
      n++;
    }
  }
  return n;
}

/* row r of the plan: tokens, targets and document starts of the whole row
 * (T); padding (target -1) is a document per run, restarting at each chunk */
static void build_row(const mt_trainer *t, int r, int *in, int *tgt, int *doc) {
  const mt_varlen_plan *p = &t->vl_plan;
  const int T = t->lay.shape.seq_len, Lc = t->step.model.attn.lay.chunk_len;
  const int *win = t->vl_seg, *start = win + (size_t)t->vl_seg_cap, *len = start + t->vl_seg_cap;
  for (int q = 0; q < T; q++) in[q] = 0, tgt[q] = MT_TARGET_IGNORE;
  for (int k = p->row_first[r]; k < p->row_first[r + 1]; k++) {
    const int i = p->order[k], at = p->pos[i];
    const int *w = t->vl_win + (size_t)win[i] * 2 * T + start[i];
    for (int q = 0; q < len[i]; q++) in[at + q] = w[q], tgt[at + q] = w[T + q], doc[at + q] = at;
  }
  for (int q = 0; q < T; q++)
    if (tgt[q] == MT_TARGET_IGNORE)
      doc[q] = q > 0 && q % Lc != 0 && tgt[q - 1] == MT_TARGET_IGNORE ? doc[q - 1] : q;
}

void mt_varlen_load(mt_trainer *t, uint64_t s0) {
  const mt_config *cfg = &t->cfg;
  const mt_model_shape *sh = &t->lay.shape;
  const mt_cp_layout *cpl = &t->step.model.attn.lay;
  const int G = cfg->global_batch, T = sh->seq_len, Tl = cpl->T_local, B = cfg->micro_batch;
  const int dp = cfg->dp, d = t->mesh.dp_rank;
  for (int w = 0; w < G; w++) {
    int *tok = t->vl_win + (size_t)w * 2 * T;
    mt_blend_get(&t->blend, s0 + (uint64_t)w, tok, tok + T);
    if (cfg->data_hash && w % dp == d) t->data_hash_local += mt_window_hash(s0 + (uint64_t)w, tok, 2 * T);
  }
  int *win = t->vl_seg, *start = win + (size_t)t->vl_seg_cap, *len = start + t->vl_seg_cap;
  int *row = mt_malloc(3 * (size_t)T * sizeof(int)), *rtgt = row + T, *rdoc = rtgt + T;
  const int n = cut(t, G, rdoc, win, start, len);
  mt_varlen_shape shape;
  mt_varlen_shape_of(sh, cpl, dp, G, &shape);
  mt_varlen_plan_free(&t->vl_plan);
  mt_varlen_plan_make(&t->vl_plan, &shape, win, start, len, n, G);
  const mt_varlen_plan *p = &t->vl_plan;
  const int Rd = p->rows_per_rank;
  t->n_mb = (Rd + B - 1) / B;
  t->vl_exchange_mb = 0;
  int counted = -1; /* the last micro-batch counted as needing the exchange */
  for (int k = 0; k < Rd; k++) {
    const int r = d * Rd + k, mb = k / B;
    build_row(t, r, row, rtgt, rdoc);
    mt_cp_take_tokens(cpl, row, t->inp + (size_t)k * Tl);
    mt_cp_take_tokens(cpl, rtgt, t->tgt + (size_t)k * Tl);
    memcpy(t->doc + (size_t)k * T, rdoc, (size_t)T * sizeof(int));
    t->rows[mb] = k - mb * B + 1;
    if (!p->local[r] && counted != mb) t->vl_exchange_mb++, counted = mb;
  }
  free(row);
  t->flop_imbalance = p->imbalance;
  t->vl_hash = cfg->data_hash ? mt_varlen_plan_hash(p) : 0;
}
