/* Where each of this rank's tokens sits. Its position (the row of the
 * learned position embedding, the angle of the rotary one) is its place in
 * the sequence, the chunks of context parallelism included; with documents
 * (packed sequences whose documents do not see each other) its place in its
 * document, and attention learns where each query's document begins.
 *
 * A document begins at each end-of-text token (llm.c's shards and
 * `meshdata tokenize` put it before every document: it plays the part of a
 * beginning-of-sequence token) and at position 0 of a window. Its tokens
 * take positions 0, 1, ... from there. What a position predicts is not
 * changed: the last token of a document still predicts the next one's
 * end-of-text token. */
#include "model/model_internal.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

void mt_doc_starts(const int *seq, int T, int eot, int *doc) {
  int first = 0;
  for (int p = 0; p < T; p++) {
    if (seq[p] == eot) first = p;
    doc[p] = first;
  }
}

/* the global position of local row i of a sequence (the layout's chunks) */
static int global_pos(const mt_cp_layout *l, int i) {
  return l->chunk_pos[i / l->chunk_len] + i % l->chunk_len;
}

/* The rotary table of every position of a sequence (S x hs), kept from
 * the last model built with the same rotary settings: the plan builds a
 * model for every layout it prices, each with the same table (S x hs/2
 * cosines and sines each time otherwise: a third of a MoE search) */
typedef struct {
  int S, hs, original_len, scaling;
  double theta, factor, low, high;
} rope_key;
static rope_key g_rope_key;
static float *g_rope_cs;
static pthread_mutex_t g_rope_lock = PTHREAD_MUTEX_INITIALIZER;

static void rope_upload(mt_gpt *m, int S, int hs) {
  const mt_model_shape *sh = &m->shape;
  rope_key key;
  memset(&key, 0, sizeof key); /* (padding compared too) */
  key.S = S, key.hs = hs, key.original_len = sh->rope_original_len;
  key.scaling = (int)sh->rope_scaling, key.theta = sh->rope_theta, key.factor = sh->rope_factor;
  key.low = sh->rope_low_freq_factor, key.high = sh->rope_high_freq_factor;
  pthread_mutex_lock(&g_rope_lock);
  if (!g_rope_cs || memcmp(&key, &g_rope_key, sizeof key) != 0) {
    int *all = mt_malloc((size_t)S * sizeof(int));
    for (int p = 0; p < S; p++) all[p] = p;
    free(g_rope_cs);
    g_rope_cs = mt_malloc((size_t)S * hs * sizeof(float));
    mt_model_rope_table(sh, all, S, g_rope_cs);
    free(all);
    g_rope_key = key;
  }
  m->ops->upload(m->rope_cs, g_rope_cs, (size_t)S * hs * sizeof(float));
  pthread_mutex_unlock(&g_rope_lock);
}

void mt_gpt_positions_init(mt_gpt *m) {
  const mt_cp_layout *l = &m->attn.lay;
  const int T = m->T, S = m->shape.seq_len, k = m->attn.slices > 1 ? m->attn.slices : 1;
  const size_t n = (size_t)k * m->max_B * T;
  int *pos = mt_malloc(n * sizeof(int));
  /* token slices: slice j's rows are j * max_B ... (j + 1) * max_B - 1, each
   * the slice's positions (one row computed, copied to the others: the plan
   * builds a model for every layout it prices) */
  for (int j = 0; j < k; j++) {
    int *row = pos + (size_t)j * m->max_B * T;
    for (int i = 0; i < T; i++) row[i] = global_pos(l, j * T + i);
    for (int b = 1; b < m->max_B; b++) memcpy(row + (size_t)b * T, row, (size_t)T * sizeof(int));
  }
  m->ops->upload(m->tok_pos_all, pos, n * sizeof(int));
  m->tok_pos = m->tok_pos_all;
  if (m->rope_cs) /* the angles of every position of a sequence */
    rope_upload(m, S, m->shape.n_embd / m->shape.n_head);
  free(pos);
  mt_attention_set_documents(&m->attn, m->doc_lo, m->doc_lo_seq);
}

void mt_gpt_stage_documents(mt_gpt *m, const int *doc, int B) {
  if (!m->documents) return;
  if (!doc) mt_die("a model with documents got a batch without document starts");
  const mt_cp_layout *l = &m->attn.lay;
  const int T = m->T, S = m->shape.seq_len;
  const size_t n = (size_t)B * T;
  int *pos = m->pos_host, *lo = pos + (size_t)m->max_B * T;
  /* documents inside the chunks: attention exchanges nothing this pass
   * (every rank of the cp group decides the same from the same doc) */
  const int local = mt_cp_documents_local(l, doc, B);
  m->attn.local = local;
  /* visible pairs of this rank's rows, and the causal pairs of the blocks
   * attention computes for them: from position 0, or when local from the
   * rank's first chunk (a ring's late chunk also sees its early one) */
  double seen = 0.0, all = 0.0;
  const int off = m->attn.slices > 1 ? m->attn.slice * T : 0; /* token slices: the pass's */
  for (int b = 0; b < B; b++)
    for (int i = 0; i < T; i++) {
      int p = global_pos(l, off + i), first = doc[(size_t)b * S + p];
      pos[(size_t)b * T + i] = p - first;
      lo[(size_t)b * T + i] = first;
      seen += p - first + 1, all += local ? i + 1 : p + 1;
    }
  double seen_seq = 0.0, all_seq = 0.0; /* of the whole sequences */
  for (size_t k = 0; k < (size_t)B * S; k++) {
    int p = (int)(k % (size_t)S);
    seen_seq += p - doc[k] + 1, all_seq += p + 1;
  }
  m->attn.density = all > 0 ? seen / all : 1.0;
  m->attn.density_seq = all_seq > 0 ? seen_seq / all_seq : 1.0;
  m->ops->upload(m->tok_pos, pos, n * sizeof(int));
  m->ops->upload(m->doc_lo, lo, n * sizeof(int));
  if (m->doc_lo_seq) m->ops->upload(m->doc_lo_seq, doc, (size_t)B * S * sizeof(int));
}

void mt_gpt_set_slice(mt_gpt *m, int slice, void *cache, int l0) {
  m->attn.slice = slice;
  m->tok_pos = m->tok_pos_all + (size_t)slice * m->max_B * m->T;
  m->slice_cache = cache;
  m->slice_l0 = l0;
}

/* one layer's K|V (or their gradients) of a micro-batch's whole sequences */
static size_t slice_layer_bytes(const mt_gpt *m) {
  return (size_t)m->max_B * m->attn.lay.T_local * 2 * m->C_local * m->es;
}

size_t mt_gpt_slice_cache_bytes(const mt_gpt *m, int n_layers) {
  return m->attn.slices > 1 ? 2 * (size_t)n_layers * slice_layer_bytes(m) : 0;
}

void mt_gpt_slice_layer(mt_gpt *m, int l) {
  if (m->attn.slices <= 1) return;
  char *base = (char *)m->slice_cache + 2 * (size_t)(l - m->slice_l0) * slice_layer_bytes(m);
  m->attn.kv_cache = base;
  m->attn.dkv_cache = base + slice_layer_bytes(m);
}
