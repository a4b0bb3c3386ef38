/* Causal self-attention of one tensor-parallel rank's heads, by the op
 * table's block attention (out + LSE per (query block, key block) pair,
 * merged exactly through the LSE). At cp = 1 a rank holds whole sequences
 * and attends them in one block pair; context parallelism (attention_cp.c:
 * ring and Ulysses) adds the exchanges over the cp group. Also the cp
 * layout of a sequence (which tokens a rank holds) and what attention keeps
 * for backward. */
#include "model/model_internal.h"


#include <string.h>

void mt_cp_layout_make(mt_cp_layout *l, int size, int rank, mt_cp_mode mode, int T) {
  memset(l, 0, sizeof *l);
  l->size = size > 1 ? size : 1;
  l->rank = size > 1 ? rank : 0;
  l->mode = mode;
  l->T = T;
  l->T_local = T / l->size;
  if (l->size > 1 && mode == MT_CP_RING) {
    l->n_chunks = 2;
    l->chunk_len = T / (2 * l->size);
    l->chunk_pos[0] = l->rank * l->chunk_len;
    l->chunk_pos[1] = (2 * l->size - 1 - l->rank) * l->chunk_len;
  } else {
    l->n_chunks = 1;
    l->chunk_len = l->T_local;
    l->chunk_pos[0] = l->rank * l->T_local;
  }
}

void mt_cp_layout_slice(mt_cp_layout *l, int k) {
  if (l->size <= 1 || k <= 1) return;
  l->n_chunks = k;
  l->chunk_len = l->T_local / k;
  for (int s = 0; s < k; s++) l->chunk_pos[s] = s * (l->T / k) + l->rank * l->chunk_len;
}

void mt_cp_take_tokens(const mt_cp_layout *l, const int *seq, int *local) {
  for (int c = 0; c < l->n_chunks; c++)
    memcpy(local + (size_t)c * l->chunk_len, seq + l->chunk_pos[c],
           (size_t)l->chunk_len * sizeof(int));
}

int mt_cp_documents_local(const mt_cp_layout *l, const int *doc, int B) {
  if (l->size <= 1 || !doc) return 0;
  for (size_t k = 0; k < (size_t)B * l->T; k++) {
    const int p = (int)(k % (size_t)l->T);
    if (doc[k] / l->chunk_len != p / l->chunk_len) return 0;
  }
  return 1;
}

static int ring(const mt_cp_layout *l) { return l->size > 1 && l->mode == MT_CP_RING; }
static int ulysses(const mt_cp_layout *l) { return l->size > 1 && l->mode == MT_CP_ULYSSES; }

size_t mt_cp_scratch_numel(const mt_cp_layout *l, int max_B, int C, int NH, int what) {
  size_t rows = (size_t)max_B * l->T_local;
  switch (what) {
  case 0: return ring(l) ? rows * C : 0;
  case 1: return ring(l) ? rows * NH : 0;
  case 2: return ulysses(l) ? rows * C : 0;
  default: return ulysses(l) ? 3 * rows * C : 0;
  }
}

size_t mt_cp_saved_numel(const mt_cp_layout *l, int B, int C, int NH, int what) {
  size_t rows = (size_t)B * l->T_local;
  switch (what) {
  case 0: return rows * NH;
  case 1: return ulysses(l) ? 3 * rows * C : 0;
  default: return ulysses(l) ? rows * C : 0;
  }
}

/* the bytes of an element of q|k|v and out */
static size_t elem(const mt_attention *at) { return mt_dtype_bytes(at->dt); }

void mt_attention_create(mt_attention *at, mt_group *g, const mt_cp_layout *lay, int max_B, int C,
                         int NH, int kv_group, int kv_h0, const mt_ops *ops, mt_dtype dt) {
  memset(at, 0, sizeof *at);
  at->lay = *lay;
  at->g = g && g->size > 1 ? g : NULL;
  if ((at->g ? at->g->size : 1) != lay->size)
    mt_die("context parallelism: the layout has %d ranks, the cp group %d", lay->size,
           at->g ? at->g->size : 1);
  at->ops = ops;
  at->dt = dt;
  at->max_B = max_B;
  at->C = C;
  at->NH = NH;
  at->hs = C / NH;
  at->kv_group = kv_group > 1 ? kv_group : 1;
  at->kv_h0 = at->kv_group > 1 ? kv_h0 : 0;
  at->kv_heads = mt_attention_kv_of(at, NH - 1) + 1;
  if (ring(lay)) {
    const size_t rows = (size_t)max_B * lay->T_local, es = elem(at);
    at->kv_numel = rows * 2 * (size_t)at->kv_heads * at->hs;
    for (int i = 0; i < 2; i++) at->kv[i] = ops->alloc(MT_MEM_COMM, at->kv_numel * es);
    for (int i = 0; i < 3; i++) at->dkv[i] = ops->alloc(MT_MEM_COMM, at->kv_numel * es);
    if (at->kv_heads != NH) { /* the spread K|V of a step and its gradient's part */
      at->kvs_numel = rows * 2 * (size_t)C;
      at->kvs = ops->alloc(MT_MEM_COMM, at->kvs_numel * es);
      at->dkvs = ops->alloc(MT_MEM_COMM, at->kvs_numel * es);
    }
  }
}

int mt_attention_kv_of(const mt_attention *at, int h) {
  return (at->kv_h0 + h) / at->kv_group - at->kv_h0 / at->kv_group;
}

void mt_attention_destroy(mt_attention *at) {
  for (int i = 0; i < 2; i++)
    if (at->kv[i]) at->ops->free(MT_MEM_COMM, at->kv[i], at->kv_numel * elem(at));
  for (int i = 0; i < 3; i++)
    if (at->dkv[i]) at->ops->free(MT_MEM_COMM, at->dkv[i], at->kv_numel * elem(at));
  if (at->kvs) at->ops->free(MT_MEM_COMM, at->kvs, at->kvs_numel * elem(at));
  if (at->dkvs) at->ops->free(MT_MEM_COMM, at->dkvs, at->kvs_numel * elem(at));
  memset(at, 0, sizeof *at);
}

void mt_attention_set_scratch(mt_attention *at, mt_act *part, float *part_lse, mt_act *dout_h,
                              mt_act *dqkv_h) {
  at->part = part;
  at->part_lse = part_lse;
  at->dout_h = dout_h;
  at->dqkv_h = dqkv_h;
}

/* ------------------------------------------------------------------ */
/* cp = 1: the whole sequence here, one block pair                    */

mt_attn_block mt_attention_block(const mt_attention *at, int B, int rows, int q_row, int Tq,
                                 int Tk, int q_pos0, int k_pos0, size_t kv_rs, int rows_kv) {
  const size_t C = (size_t)at->C;
  mt_attn_block a = {.B = B, .NH = at->NH, .hs = at->hs, .Tq = Tq, .Tk = Tk, .q_pos0 = q_pos0,
                     .k_pos0 = k_pos0, .causal = 1,
                     .q_bs = (size_t)rows * 3 * C, .q_rs = 3 * C,
                     .k_bs = (size_t)rows_kv * kv_rs, .k_rs = kv_rs,
                     .v_bs = (size_t)rows_kv * kv_rs, .v_rs = kv_rs,
                     .o_bs = (size_t)rows * C, .o_rs = C,
                     .l_bs = (size_t)at->NH * rows, .l_hs = (size_t)rows,
                     .q_lo = at->doc_lo ? at->doc_lo + q_row : NULL, .lo_bs = (size_t)rows,
                     .density = at->density};
  return a;
}

void mt_attention_set_documents(mt_attention *at, const int *doc_lo, const int *doc_lo_seq) {
  at->doc_lo = doc_lo;
  at->doc_lo_seq = doc_lo_seq;
  at->density = at->density_seq = 1.0;
  at->local = 0;
}

/* ------------------------------------------------------------------ */
/* token slices: this slice's queries over the keys and values of every  */
/* slice up to it, kept in the micro-batch's cache (one block pair)      */

static mt_attn_block slice_block(const mt_attention *at, int B) {
  const int T = at->lay.T_local, Ts = T / at->slices;
  return mt_attention_block(at, B, Ts, 0, Ts, (at->slice + 1) * Ts, at->slice * Ts, 0,
                            2 * (size_t)at->C, T);
}

void mt_attention_slice_rows(const mt_attention *at, mt_act *qkv, mt_act *cache, int B, size_t C,
                             size_t T, int to_cache) {
  const size_t es = elem(at), Ts = T / at->slices;
  for (int b = 0; b < B; b++) {
    mt_act *mine = mt_act_at(es, qkv, (b * Ts) * 3 * C + C);
    mt_act *kept = mt_act_at(es, cache, (b * T + at->slice * Ts) * 2 * C);
    if (to_cache) at->ops->copy_2d(at->dt, kept, 2 * C, mine, 3 * C, Ts, 2 * C);
    else at->ops->copy_2d(at->dt, mine, 3 * C, kept, 2 * C, Ts, 2 * C);
  }
}

static void slice_forward(mt_attention *at, mt_act *out, const mt_act *qkv, float *lse, int B) {
  const size_t C = (size_t)at->C, es = elem(at);
  mt_attention_slice_rows(at, (mt_act *)qkv, at->kv_cache, B, C, at->lay.T_local, 1);
  mt_attn_block a = slice_block(at, B);
  at->ops->attn_forward(at->dt, &a, out, lse, qkv, at->kv_cache,
                        mt_act_at(es, at->kv_cache, C));
}


/* dQ into dqkv; dK/dV added into the cache's gradients (every earlier
 * slice's rows too), of which this slice's rows are then complete: the
 * later slices ran their backward first. The last slice, which runs first
 * and sees every key, writes dQ and the whole cache's gradients (no zero
 * passes before it). */
static void slice_backward(mt_attention *at, mt_act *dqkv, const mt_act *dout, const mt_act *out,
                           const mt_act *qkv, const float *lse, int B) {
  const size_t C = (size_t)at->C, es = elem(at), T = (size_t)at->lay.T_local;
  mt_attn_block a = slice_block(at, B);
  const int last = at->slice == at->slices - 1;
  if (!last) at->ops->zero(at->dt, dqkv, (size_t)B * (T / at->slices) * 3 * C);
  (last ? at->ops->attn_backward_first : at->ops->attn_backward)(
      at->dt, &a, dqkv, at->dkv_cache, mt_act_at(es, at->dkv_cache, C), dout, out, lse, qkv,
      at->kv_cache, mt_act_at(es, at->kv_cache, C));
  mt_attention_slice_rows(at, dqkv, at->dkv_cache, B, C, T, 0);
}

static void local_forward(mt_attention *at, mt_act *out, const mt_act *qkv, float *lse, int B) {
  if (at->slices > 1) {
    slice_forward(at, out, qkv, lse, B);
    return;
  }
  const mt_cp_layout *l = &at->lay;
  const size_t C = (size_t)at->C, es = elem(at);
  mt_attn_block a = mt_attention_block(at, B, l->T_local, 0, l->T_local, l->T_local,
                                       l->chunk_pos[0], l->chunk_pos[0], 3 * C, l->T_local);
  at->ops->attn_forward(at->dt, &a, out, lse, qkv, mt_act_at(es, qkv, C),
            mt_act_at(es, qkv, 2 * C));
}

static void local_backward(mt_attention *at, mt_act *dqkv, const mt_act *dout, const mt_act *out,
                           const mt_act *qkv, const float *lse, int B) {
  if (at->slices > 1) {
    slice_backward(at, dqkv, dout, out, qkv, lse, B);
    return;
  }
  const mt_cp_layout *l = &at->lay;
  const size_t C = (size_t)at->C, es = elem(at);
  mt_attn_block a = mt_attention_block(at, B, l->T_local, 0, l->T_local, l->T_local,
                                       l->chunk_pos[0], l->chunk_pos[0], 3 * C, l->T_local);
  /* one block pair covers dqkv: written, no zero pass before it */
  at->ops->attn_backward_first(at->dt, &a, dqkv, mt_act_at(es, dqkv, C),
            mt_act_at(es, dqkv, 2 * C), dout, out, lse, qkv, mt_act_at(es, qkv, C),
            mt_act_at(es, qkv, 2 * C));
}

/* ------------------------------------------------------------------ */
/* the layer's attention: cp = 1 here, ring or Ulysses in attention_cp.c.
 * Under Ulysses with documents inside this rank's chunk (at->local) the
 * rank's own rows are the whole story: cp = 1's path on them, all heads,
 * the LSE in the rows' layout in the saved lse (as many floats as the head
 * layout's); forward and backward of a micro-batch see the same documents,
 * so the same path. The ring's own diagonal step is its local case. */

void mt_attention_forward(mt_attention *at, mt_act *out, const mt_act *qkv, const mt_cp_saved *s,
                          int B) {
  if (ring(&at->lay)) mt_attention_ring_forward(at, out, qkv, s->lse, B);
  else if (ulysses(&at->lay) && !at->local) mt_attention_ulysses_forward(at, out, qkv, s, B);
  else local_forward(at, out, qkv, s->lse, B);
}

void mt_attention_backward(mt_attention *at, mt_act *dqkv, const mt_act *dout, const mt_act *out,
                           const mt_act *qkv, const mt_cp_saved *s, int B) {
  if (ring(&at->lay)) mt_attention_ring_backward(at, dqkv, dout, out, qkv, s->lse, B);
  else if (ulysses(&at->lay) && !at->local) mt_attention_ulysses_backward(at, dqkv, dout, s, B);
  else local_backward(at, dqkv, dout, out, qkv, s->lse, B);
}
