/* Evaluation: each source's validation windows split over dp, through a
 * forward-only pass of this rank's stage. */
#include "train/train.h"

#include <stdlib.h>

/* the mean loss over the first n_seq windows of vs (collective) */
static double evaluate_source(mt_trainer *t, const mt_sampler *vs, int n_seq) {
  const mt_mesh *mesh = &t->mesh;
  const mt_gpt *model = &t->step.model;
  const int T = model->attn.lay.T_local, micro_batch = t->cfg.micro_batch;
  double acc[2] = {0.0, 0.0}; /* sum of per-sequence mean losses, sequences */
  int per = (n_seq + mesh->dp - 1) / mesh->dp;
  int first = mesh->dp_rank * per, last = first + per < n_seq ? first + per : n_seq;
  int n_mb = last > first ? (last - first + micro_batch - 1) / micro_batch : 0;
  /* MoE blocks dispatch over ranks of several dp ranks: every rank runs as
   * many micro-batches as the first (the most), the extra ones empty */
  int n_real = n_mb;
  if (model->moe.n_blocks > 0) {
    int most = per < n_seq ? per : n_seq;
    n_mb = (most + micro_batch - 1) / micro_batch;
  }
  int *inp = mt_calloc((size_t)(n_mb + 1) * micro_batch * T, sizeof(int));
  int *tgt = mt_calloc((size_t)(n_mb + 1) * micro_batch * T, sizeof(int));
  const int T_full = t->lay.shape.seq_len;
  int *doc = t->doc ? mt_calloc((size_t)(n_mb + 1) * micro_batch * T_full, sizeof(int)) : NULL;
  int *rows = mt_calloc((size_t)n_mb + 1, sizeof(int));
  int *seq = mt_calloc(2 * (size_t)T_full, sizeof(int));
  for (int k = 0; k < n_real; k++) {
    int s0 = first + k * micro_batch;
    rows[k] = last - s0 < micro_batch ? last - s0 : micro_batch;
    for (int b = 0; b < rows[k]; b++) {
      size_t off = ((size_t)k * micro_batch + b) * T;
      mt_sampler_get_window(vs, (uint64_t)(s0 + b), seq, seq + T_full);
      mt_cp_take_tokens(&model->attn.lay, seq, inp + off);
      mt_cp_take_tokens(&model->attn.lay, seq + T_full, tgt + off);
      if (doc)
        mt_doc_starts(seq, T_full, t->cfg.eot, doc + ((size_t)k * micro_batch + b) * T_full);
    }
    acc[1] += rows[k];
  }
  free(seq);
  mt_pp_batch batch = {.n_mb = n_mb, .B = micro_batch, .T = T, .inputs = inp, .targets = tgt,
                       .rows = rows, .doc = doc, .dloss = 0.0f, .eval = 1, .same_tokens = 0};
  acc[0] = mt_step_evaluate(&t->step, &batch);
  free(inp);
  free(tgt);
  free(doc);
  free(rows);
  /* every cp rank adds its tokens' mean for each of its sequences: equal
   * shares, so the mean over dp x cp is the mean over the sequences */
  mt_allreduce(&t->mesh.dpcp_g, acc, 2, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  return acc[1] > 0 ? acc[0] / acc[1] : 0.0;
}

double mt_train_evaluate(mt_trainer *t) {
  double loss = 0.0, weight = 0.0;
  for (int i = 0; i < t->sources.n; i++) {
    if (t->val_seq[i] <= 0) continue;
    t->val_by_source[i] = evaluate_source(t, &t->val_sampler[i], t->val_seq[i]);
    loss += t->sources.src[i].weight * t->val_by_source[i];
    weight += t->sources.src[i].weight;
  }
  /* (one source: weight 1, its loss exactly) */
  return weight > 0 ? loss / weight : 0.0;
}
