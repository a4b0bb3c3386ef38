/* Context parallelism: causal attention over a sequence split across the
 * ranks of the cp group, by the op table's block attention (out + LSE per
 * (query block, key block) pair, merged exactly through the LSE).
 *
 * Ring (Liu et al., Ring Attention; the zigzag split of Transformer
 * Engine): each rank holds chunks r and 2N-1-r of every sequence. Forward:
 * N steps; at step s a rank attends its two query chunks to the K/V of rank
 * r-s, while that K/V goes on to rank r+1 and the next arrives from r-1
 * (non-blocking, overlapped with the step's compute). Causality decides the
 * work per step: from an earlier rank both query chunks see its early chunk
 * in full, from a later rank the late query chunk sees both of its chunks
 * in full, so every rank computes two chunk pairs per step (three on the
 * diagonal step, two of them half masked). Backward: K/V go round again,
 * and next to them each K/V's gradient accumulator: a rank adds its part
 * (computed while the accumulator is in flight) and passes it on; after N
 * steps it arrives complete at its owner.
 *
 * Ulysses (Jacobs et al., DeepSpeed-Ulysses): each rank holds a contiguous
 * chunk of T/N; an all-to-all sends each rank the whole sequence's q|k|v for
 * NH/N of its heads, attention runs locally over the whole sequence, and an
 * all-to-all brings the output back to sequence shards (backward: the same
 * two in reverse). */
#include "parallel/parallel.h"

#include <string.h>

enum { TAG_KV = 71, TAG_DKV = 72 };

int mt_cp_mode_parse(const char *name) {
  if (strcmp(name, "ring") == 0) return MT_CP_RING;
  if (strcmp(name, "ulysses") == 0) return MT_CP_ULYSSES;
  return -1;
}

const char *mt_cp_mode_name(mt_cp_mode mode) { return mode == MT_CP_ULYSSES ? "ulysses" : "ring"; }

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

void mt_cp_take_tokens(const mt_cp_layout *l, const int *seq, int *local) {
  for (int c = 0; c < l->n_chunks; c++)
    memcpy(local + (size_t)c * l->chunk_len, seq + l->chunk_pos[c],
           (size_t)l->chunk_len * sizeof(int));
}

static int ring(const mt_cp_layout *l) { return l->size > 1 && l->mode == MT_CP_RING; }
static int ulysses(const mt_cp_layout *l) { return l->size > 1 && l->mode == MT_CP_ULYSSES; }

size_t mt_cp_comm_bytes(const mt_cp_layout *l, int max_B, int C) {
  if (!ring(l)) return 0;
  return 5 * (size_t)max_B * l->T_local * 2 * (size_t)C * sizeof(float);
}

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

double mt_cp_bytes(const mt_cp_layout *l, int B, int C, int backward) {
  int N = l->size;
  size_t out = (size_t)B * l->T_local * C * sizeof(float); /* one (B, T_local, C) tensor */
  if (ring(l)) /* K|V of 2C per row: N-1 sends forward; backward N-1 of K|V and N of dK|dV */
    return (double)(backward ? 2 * N - 1 : N - 1) * 2.0 * (double)out;
  if (ulysses(l)) /* q|k|v (3C) and the output (C), or their gradients */
    return mt_bytes_alltoall(3 * out, N) + mt_bytes_alltoall(out, N);
  return 0.0;
}

void mt_cp_create(mt_cp *cp, mt_group *g, const mt_cp_layout *lay, int max_B, int C, int NH,
                  const mt_ops *ops) {
  memset(cp, 0, sizeof *cp);
  cp->lay = *lay;
  cp->g = g && g->size > 1 ? g : NULL;
  if ((cp->g ? cp->g->size : 1) != lay->size)
    mt_die("context parallelism: the layout has %d ranks, the cp group %d", lay->size,
           cp->g ? cp->g->size : 1);
  cp->ops = ops;
  cp->max_B = max_B;
  cp->C = C;
  cp->NH = NH;
  cp->hs = C / NH;
  if (ring(lay)) {
    cp->kv_numel = (size_t)max_B * lay->T_local * 2 * (size_t)C;
    for (int i = 0; i < 2; i++) cp->kv[i] = ops->alloc(MT_MEM_COMM, cp->kv_numel * sizeof(float));
    for (int i = 0; i < 3; i++) cp->dkv[i] = ops->alloc(MT_MEM_COMM, cp->kv_numel * sizeof(float));
  }
}

void mt_cp_destroy(mt_cp *cp) {
  for (int i = 0; i < 2; i++)
    if (cp->kv[i]) cp->ops->free(MT_MEM_COMM, cp->kv[i], cp->kv_numel * sizeof(float));
  for (int i = 0; i < 3; i++)
    if (cp->dkv[i]) cp->ops->free(MT_MEM_COMM, cp->dkv[i], cp->kv_numel * sizeof(float));
  memset(cp, 0, sizeof *cp);
}

void mt_cp_set_scratch(mt_cp *cp, float *part, float *part_lse, float *dout_h, float *dqkv_h) {
  cp->part = part;
  cp->part_lse = part_lse;
  cp->dout_h = dout_h;
  cp->dqkv_h = dqkv_h;
}

/* ------------------------------------------------------------------ */
/* one rank (or a rank's own chunk pairs): a block description          */

/* Queries of a (B, rows, 3C) q|k|v buffer from row q_row, keys and values
 * from a buffer of row stride kv_rs and rows_kv rows per sequence, out (B,
 * rows, C) and lse (B, NH, rows) at row q_row. */
static mt_attn_block block(const mt_cp *cp, int B, int rows, int Tq, int Tk, int q_pos0,
                           int k_pos0, size_t kv_rs, int rows_kv) {
  const size_t C = (size_t)cp->C;
  mt_attn_block a = {B, cp->NH, cp->hs, Tq, Tk, q_pos0, k_pos0, 1,
                     (size_t)rows * 3 * C, 3 * C,           /* q */
                     (size_t)rows_kv * kv_rs, kv_rs,        /* k */
                     (size_t)rows_kv * kv_rs, kv_rs,        /* v */
                     (size_t)rows * C, C,                   /* out */
                     (size_t)cp->NH * rows, (size_t)rows};  /* lse */
  return a;
}

static void local_forward(mt_cp *cp, float *out, const float *qkv, float *lse, int B) {
  const mt_cp_layout *l = &cp->lay;
  const size_t C = (size_t)cp->C;
  mt_attn_block a = block(cp, B, l->T_local, l->T_local, l->T_local, l->chunk_pos[0],
                          l->chunk_pos[0], 3 * C, l->T_local);
  cp->ops->attn_forward(&a, out, lse, qkv, qkv + C, qkv + 2 * C);
}

static void local_backward(mt_cp *cp, float *dqkv, const float *dout, const float *out,
                           const float *qkv, const float *lse, int B) {
  const mt_cp_layout *l = &cp->lay;
  const size_t C = (size_t)cp->C;
  mt_attn_block a = block(cp, B, l->T_local, l->T_local, l->T_local, l->chunk_pos[0],
                          l->chunk_pos[0], 3 * C, l->T_local);
  cp->ops->zero(dqkv, (size_t)B * l->T_local * 3 * C);
  cp->ops->attn_backward(&a, dqkv, dqkv + C, dqkv + 2 * C, dout, out, lse, qkv, qkv + C,
                         qkv + 2 * C);
}

/* ------------------------------------------------------------------ */
/* ring                                                                */

/* global position of chunk c (0 early, 1 late) of rank r */
static int chunk_pos(const mt_cp_layout *l, int r, int c) {
  return (c == 0 ? r : 2 * l->size - 1 - r) * l->chunk_len;
}

/* this rank's K|V rows (columns C..3C of qkv) into a (B, T_local, 2C) buffer */
static void pack_kv(mt_cp *cp, float *kv, const float *qkv, int B) {
  const size_t C = (size_t)cp->C;
  cp->ops->copy_2d(kv, 2 * C, qkv + C, 3 * C, (size_t)B * cp->lay.T_local, 2 * C);
}

static void ring_forward(mt_cp *cp, float *out, const float *qkv, float *lse, int B) {
  const mt_cp_layout *l = &cp->lay;
  const mt_ops *o = cp->ops;
  const int N = l->size, r = l->rank, Tc = l->chunk_len, Tl = l->T_local;
  const int next = (r + 1) % N, prev = (r + N - 1) % N;
  const size_t C = (size_t)cp->C, n = (size_t)B * Tl * 2 * C;
  mt_request send, recv;
  memset(&send, 0, sizeof send);
  memset(&recv, 0, sizeof recv);
  pack_kv(cp, cp->kv[0], qkv, B);
  int written[2] = {0, 0}; /* has query chunk c a partial result yet */
  for (int s = 0; s < N; s++) {
    const int src = (r - s + N) % N; /* whose K/V this step sees */
    float *kv = cp->kv[s % 2];
    if (s < N - 1) { /* the next K/V arrives while this one is used and passed on */
      mt_irecv_f32(cp->g, cp->kv[(s + 1) % 2], n, prev, TAG_KV, o->loc, &recv);
      mt_isend_f32(cp->g, kv, n, next, TAG_KV, o->loc, &send);
    }
    for (int qc = 0; qc < 2; qc++)
      for (int kc = 0; kc < 2; kc++) {
        int qpos = chunk_pos(l, r, qc), kpos = chunk_pos(l, src, kc);
        if (kpos > qpos) continue; /* a later chunk: nothing visible */
        mt_attn_block a = block(cp, B, Tl, Tc, Tc, qpos, kpos, 2 * C, Tl);
        const float *q = qkv + (size_t)qc * Tc * 3 * C, *k = kv + (size_t)kc * Tc * 2 * C;
        float *oq = out + (size_t)qc * Tc * C, *lq = lse + (size_t)qc * Tc;
        if (!written[qc]) {
          o->attn_forward(&a, oq, lq, q, k, k + C);
          written[qc] = 1;
        } else {
          float *po = cp->part + (size_t)qc * Tc * C, *pl = cp->part_lse + (size_t)qc * Tc;
          o->attn_forward(&a, po, pl, q, k, k + C);
          o->attn_merge(&a, oq, lq, po, pl);
        }
        mt_progress(&recv);
        mt_progress(&send);
      }
    mt_wait(&recv);
    mt_wait(&send);
  }
}

static void ring_backward(mt_cp *cp, float *dqkv, const float *dout, const float *out,
                          const float *qkv, const float *lse, int B) {
  const mt_cp_layout *l = &cp->lay;
  const mt_ops *o = cp->ops;
  const int N = l->size, r = l->rank, Tc = l->chunk_len, Tl = l->T_local;
  const int next = (r + 1) % N, prev = (r + N - 1) % N;
  const size_t C = (size_t)cp->C, rows = (size_t)B * Tl, n = rows * 2 * C;
  mt_request ks, kr, ds, dr;
  memset(&ks, 0, sizeof ks), memset(&kr, 0, sizeof kr);
  memset(&ds, 0, sizeof ds), memset(&dr, 0, sizeof dr);
  /* this step's part of a dK|dV, the accumulator arriving, the one leaving */
  float *part = cp->dkv[0], *in = cp->dkv[1], *leaving = cp->dkv[2];
  o->zero(dqkv, rows * 3 * C);
  pack_kv(cp, cp->kv[0], qkv, B);
  for (int s = 0; s < N; s++) {
    const int src = (r - s + N) % N;
    float *kv = cp->kv[s % 2];
    if (s < N - 1) {
      mt_irecv_f32(cp->g, cp->kv[(s + 1) % 2], n, prev, TAG_KV, o->loc, &kr);
      mt_isend_f32(cp->g, kv, n, next, TAG_KV, o->loc, &ks);
    }
    /* src's dK|dV so far: summed by ranks src .. r-1 */
    if (s > 0) mt_irecv_f32(cp->g, in, n, prev, TAG_DKV, o->loc, &dr);
    o->zero(part, n);
    for (int qc = 0; qc < 2; qc++)
      for (int kc = 0; kc < 2; kc++) {
        int qpos = chunk_pos(l, r, qc), kpos = chunk_pos(l, src, kc);
        if (kpos > qpos) continue;
        mt_attn_block a = block(cp, B, Tl, Tc, Tc, qpos, kpos, 2 * C, Tl);
        size_t qo = (size_t)qc * Tc * 3 * C, oo = (size_t)qc * Tc * C, ko = (size_t)kc * Tc * 2 * C;
        o->attn_backward(&a, dqkv + qo, part + ko, part + ko + C, dout + oo, out + oo,
                         lse + (size_t)qc * Tc, qkv + qo, kv + ko, kv + ko + C);
        mt_progress(&kr), mt_progress(&ks), mt_progress(&dr), mt_progress(&ds);
      }
    if (s > 0) {
      mt_wait(&dr);
      o->axpy(part, 1.0f, in, n);
    }
    mt_wait(&ds); /* the previous accumulator has left: its buffer is free */
    float *t = leaving;
    leaving = part;
    part = t;
    mt_isend_f32(cp->g, leaving, n, next, TAG_DKV, o->loc, &ds);
    mt_wait(&kr);
    mt_wait(&ks);
  }
  /* this rank's own K|V gradient, complete after its trip round the ring */
  mt_irecv_f32(cp->g, in, n, prev, TAG_DKV, o->loc, &dr);
  mt_wait(&dr);
  o->add_2d(dqkv + C, 3 * C, in, 2 * C, rows, 2 * C);
  mt_wait(&ds);
}

/* ------------------------------------------------------------------ */
/* Ulysses                                                             */

/* the heads of this rank over the whole sequence: q|k|v (B, T, 3Ch) */
static mt_attn_block heads_block(const mt_cp *cp, int B) {
  const int N = cp->lay.size, T = cp->lay.T;
  const size_t Ch = (size_t)cp->C / N;
  mt_attn_block a = {B, cp->NH / N, cp->hs, T, T, 0, 0, 1,
                     (size_t)T * 3 * Ch, 3 * Ch, (size_t)T * 3 * Ch, 3 * Ch,
                     (size_t)T * 3 * Ch, 3 * Ch, (size_t)T * Ch, Ch,
                     (size_t)(cp->NH / N) * T, (size_t)T};
  return a;
}

static void ulysses_forward(mt_cp *cp, float *out, const float *qkv, const mt_cp_saved *s,
                            int B) {
  const int N = cp->lay.size, Tl = cp->lay.T_local;
  const size_t Ch = (size_t)cp->C / N, rows = (size_t)B * Tl;
  const mt_loc loc = cp->ops->loc;
  /* (B, Tl, 3, N, Ch): head group j of every q, k, v row to rank j;
   * arriving: (B, N, Tl, 3Ch), rank j's positions in order */
  mt_alltoall_dim_f32(cp->g, qkv, s->qkv_h, rows * 3, Ch, (size_t)B, (size_t)Tl * 3 * Ch, loc);
  mt_attn_block a = heads_block(cp, B);
  cp->ops->attn_forward(&a, s->out_h, s->lse, s->qkv_h, s->qkv_h + Ch, s->qkv_h + 2 * Ch);
  /* (B, N, Tl, Ch): rank j's positions back to it; arriving: (B, Tl, N, Ch) */
  mt_alltoall_dim_f32(cp->g, s->out_h, out, (size_t)B, (size_t)Tl * Ch, rows, Ch, loc);
}

static void ulysses_backward(mt_cp *cp, float *dqkv, const float *dout, const mt_cp_saved *s,
                             int B) {
  const int N = cp->lay.size, Tl = cp->lay.T_local;
  const size_t Ch = (size_t)cp->C / N, rows = (size_t)B * Tl;
  const mt_loc loc = cp->ops->loc;
  mt_alltoall_dim_f32(cp->g, dout, cp->dout_h, rows, Ch, (size_t)B, (size_t)Tl * Ch, loc);
  mt_attn_block a = heads_block(cp, B);
  cp->ops->zero(cp->dqkv_h, rows * 3 * cp->C);
  cp->ops->attn_backward(&a, cp->dqkv_h, cp->dqkv_h + Ch, cp->dqkv_h + 2 * Ch, cp->dout_h,
                         s->out_h, s->lse, s->qkv_h, s->qkv_h + Ch, s->qkv_h + 2 * Ch);
  mt_alltoall_dim_f32(cp->g, cp->dqkv_h, dqkv, (size_t)B, (size_t)Tl * 3 * Ch, rows * 3, Ch, loc);
}

/* ------------------------------------------------------------------ */

void mt_cp_attention_forward(mt_cp *cp, float *out, const float *qkv, const mt_cp_saved *s,
                             int B) {
  if (ring(&cp->lay)) ring_forward(cp, out, qkv, s->lse, B);
  else if (ulysses(&cp->lay)) ulysses_forward(cp, out, qkv, s, B);
  else local_forward(cp, out, qkv, s->lse, B);
}

void mt_cp_attention_backward(mt_cp *cp, float *dqkv, const float *dout, const float *out,
                              const float *qkv, const mt_cp_saved *s, int B) {
  if (ring(&cp->lay)) ring_backward(cp, dqkv, dout, out, qkv, s->lse, B);
  else if (ulysses(&cp->lay)) ulysses_backward(cp, dqkv, dout, s, B);
  else local_backward(cp, dqkv, dout, out, qkv, s->lse, B);
}
