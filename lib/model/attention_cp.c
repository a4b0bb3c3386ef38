/* What context parallelism adds to attention (attention.c): causal
 * attention over a sequence split across the ranks of the cp group, by the
 * op table's block attention (out + LSE per (query block, key block) pair,
 * merged exactly through the LSE).
 *
 * Ring (Liu et al., Ring Attention; the zigzag split of Transformer
 * Engine): each rank holds chunks r and 2N-1-r of every sequence. Forward:
 * N steps; at step s a rank attends its two query chunks to the K/V of rank
 * r-s, while that K/V goes on to rank r+1 and the next arrives from r-1
 * (non-blocking, overlapped with the step's compute). Causality decides the
 * work per step: from an earlier rank both query chunks see its early chunk
 * in full, from a later rank the late query chunk sees both of its chunks
 * in full, so every rank computes two chunk pairs per step (three on the
 * diagonal step, two of them half masked). Under grouped-query attention
 * the key/value heads travel compact and are spread over the query heads
 * at each step (below). Backward: K/V go round again,
 * and next to them each K/V's gradient accumulator: a rank adds its part
 * (computed while the accumulator is in flight) and passes it on; after N
 * steps it arrives complete at its owner. When a pass's documents all stay
 * inside the chunks (mt_attention's local), no query sees another rank's
 * keys: only the diagonal step runs, nothing is sent, and this rank's own
 * dK/dV goes straight into dqkv.
 *
 * Ulysses (Jacobs et al., DeepSpeed-Ulysses): each rank holds a contiguous
 * chunk of T/N; an all-to-all sends each rank the whole sequence's q|k|v for
 * NH/N of its heads, attention runs locally over the whole sequence, and an
 * all-to-all brings the output back to sequence shards (backward: the same
 * two in reverse). */
#include "model/model_internal.h"

#include <string.h>

enum { TAG_KV = 71, TAG_DKV = 72 };

/* ------------------------------------------------------------------ */
/* ring                                                                */

/* global position of chunk c (0 early, 1 late) of rank r */
static int chunk_pos(const mt_cp_layout *l, int r, int c) {
  return (c == 0 ? r : 2 * l->size - 1 - r) * l->chunk_len;
}

/* the bytes of an element of q|k|v, K|V and out (the activations' dtype) */
static size_t es_of(const mt_attention *at) {
  return mt_dtype_bytes(at->dt);
}
/* messages of n such elements go as 4-byte words (n is even: 2 Ckv columns) */
static size_t words(const mt_attention *at, size_t n) { return n * es_of(at) / sizeof(float); }

/* the steps round the ring: N, or only the diagonal one (this rank's own
 * K/V, nothing sent) when the documents stay inside the chunks */
static int ring_steps(const mt_attention *at) { return at->local ? 1 : at->lay.size; }

/* Under grouped-query attention the ring passes the key/value heads
 * compact: 2 Ckv columns (Ckv = kv_heads hs, the heads this rank's query
 * heads read), n_head / n_kv_head times fewer bytes than the query heads'
 * spread copies (16 x for Llama 3 405B). Each step spreads the K|V it
 * holds over the query heads (at->kvs, 2C) for the block kernels, and
 * backward sums a step's spread dK|dV back into the compact heads before it
 * goes on: kv_spread and kv_spread_backward without q, one pass each.
 * Without gqa the two layouts are one. */
static int spreads(const mt_attention *at) { return at->kv_heads != at->NH; }
static size_t kv_cols(const mt_attention *at) { return 2 * (size_t)at->kv_heads * at->hs; }
/* the ops' h0 for the compact heads: query head h reads compact head
 * (h0 + h) / group = mt_attention_kv_of(h) */
static int spread_h0(const mt_attention *at) { return at->kv_h0 % at->kv_group; }
/* the first local query head that reads compact head j */
static int first_head(const mt_attention *at, int j) {
  const int h = j * at->kv_group - spread_h0(at);
  return h > 0 ? h : 0;
}

/* Per compact head j: its hs key and hs value columns, and those of its
 * first query head in dqkv-like rows (ld 3C, K at column C): copied into
 * the compact buffer, or the compact ones added there. */
static void first_heads(mt_attention *at, mt_act *rows3, mt_act *compact, size_t rows, int add) {
  const size_t C = (size_t)at->C, hs = (size_t)at->hs, Ckv = kv_cols(at) / 2, es = es_of(at);
  for (int j = 0; j < at->kv_heads; j++)
    for (size_t half = 0; half < 2; half++) {
      mt_act *wide = mt_act_at(es, rows3, C + half * C + (size_t)first_head(at, j) * hs);
      mt_act *cp = mt_act_at(es, compact, half * Ckv + (size_t)j * hs);
      if (add) at->ops->add_2d(at->dt, wide, 3 * C, cp, 2 * Ckv, rows, hs);
      else at->ops->copy_2d(at->dt, cp, 2 * Ckv, wide, 3 * C, rows, hs);
    }
}

/* this rank's K|V rows (columns C..3C of qkv) into a compact (B, T_local,
 * 2 Ckv) buffer (a group's first query head holds its key/value head) */
static void pack_kv(mt_attention *at, mt_act *kv, const mt_act *qkv, int B) {
  const size_t C = (size_t)at->C, rows = (size_t)B * at->lay.T_local;
  if (!spreads(at))
    at->ops->copy_2d(at->dt, kv, 2 * C, mt_act_at(es_of(at), qkv, C), 3 * C, rows, 2 * C);
  else first_heads(at, (mt_act *)qkv, kv, rows, 0);
}

/* the K|V of a step spread over the query heads (B, T_local, 2C) */
static const mt_act *spread_kv(mt_attention *at, const mt_act *kv, int B) {
  if (!spreads(at)) return kv;
  at->ops->kv_spread(at->dt, at->kvs, kv, (size_t)B * at->lay.T_local, at->NH, at->kv_heads,
                     at->hs, spread_h0(at), at->kv_group, 0, NULL, NULL, 0);
  return at->kvs;
}

/* a step's spread dK|dV (at->dkvs) into the compact part: each compact
 * head the sum of its query heads' (in fp32, rounded once) */
static void gather_dkv(mt_attention *at, mt_act *part, int B) {
  at->ops->kv_spread_backward(at->dt, part, at->dkvs, (size_t)B * at->lay.T_local, at->NH,
                              at->kv_heads, at->hs, spread_h0(at), at->kv_group, 0, NULL, NULL,
                              0);
}

/* a complete compact dK|dV added into dqkv's key and value columns: into
 * each group's first query head (kv_spread_backward sums a group's heads,
 * the others' are 0 from the backward's zero pass) */
static void add_own_dkv(mt_attention *at, mt_act *dqkv, mt_act *dkv, int B) {
  const size_t C = (size_t)at->C, rows = (size_t)B * at->lay.T_local;
  if (!spreads(at))
    at->ops->add_2d(at->dt, mt_act_at(es_of(at), dqkv, C), 3 * C, dkv, 2 * C, rows, 2 * C);
  else first_heads(at, dqkv, dkv, rows, 1);
}

void mt_attention_ring_forward(mt_attention *at, mt_act *out, const mt_act *qkv, float *lse,
                               int B) {
  const mt_cp_layout *l = &at->lay;
  const mt_ops *o = at->ops;
  const mt_dtype dt = at->dt;
  const int N = l->size, r = l->rank, Tc = l->chunk_len, Tl = l->T_local;
  const int next = (r + 1) % N, prev = (r + N - 1) % N;
  const size_t C = (size_t)at->C, n = (size_t)B * Tl * kv_cols(at), es = es_of(at);
  mt_request send, recv;
  memset(&send, 0, sizeof send);
  memset(&recv, 0, sizeof recv);
  const int steps = ring_steps(at);
  pack_kv(at, at->kv[0], qkv, B);
  int written[2] = {0, 0}; /* has query chunk c a partial result yet */
  for (int s = 0; s < steps; s++) {
    const int src = (r - s + N) % N; /* whose K/V this step sees */
    mt_act *held = at->kv[s % 2];
    if (s < steps - 1) { /* the next K/V arrives while this one is used and passed on */
      mt_irecv(at->g, at->kv[(s + 1) % 2], words(at, n), MT_DT_F32, prev, TAG_KV, o->loc, &recv);
      mt_isend(at->g, held, words(at, n), MT_DT_F32, next, TAG_KV, o->loc, &send);
    }
    const mt_act *kv = spread_kv(at, held, B);
    for (int qc = 0; qc < 2; qc++)
      for (int kc = 0; kc < 2; kc++) {
        int qpos = chunk_pos(l, r, qc), kpos = chunk_pos(l, src, kc);
        if (kpos > qpos) continue; /* a later chunk: nothing visible */
        mt_attn_block a = mt_attention_block(at, B, Tl, qc * Tc, Tc, Tc, qpos, kpos, 2 * C, Tl);
        const mt_act *q = mt_act_at(es, qkv, (size_t)qc * Tc * 3 * C);
        const mt_act *k = mt_act_at(es, kv, (size_t)kc * Tc * 2 * C), *v = mt_act_at(es, k, C);
        mt_act *oq = mt_act_at(es, out, (size_t)qc * Tc * C);
        float *lq = lse + (size_t)qc * Tc;
        if (!written[qc]) {
          o->attn_forward(dt, &a, oq, lq, q, k, v);
          written[qc] = 1;
        } else {
          mt_act *po = mt_act_at(es, at->part, (size_t)qc * Tc * C);
          float *pl = at->part_lse + (size_t)qc * Tc;
          o->attn_forward(dt, &a, po, pl, q, k, v);
          o->attn_merge(dt, &a, oq, lq, po, pl);
        }
        mt_progress(&recv);
        mt_progress(&send);
      }
    mt_wait(&recv);
    mt_wait(&send);
  }
}

void mt_attention_ring_backward(mt_attention *at, mt_act *dqkv, const mt_act *dout,
                                const mt_act *out, const mt_act *qkv, const float *lse, int B) {
  const mt_cp_layout *l = &at->lay;
  const mt_ops *o = at->ops;
  const mt_dtype dt = at->dt;
  const int N = l->size, r = l->rank, Tc = l->chunk_len, Tl = l->T_local;
  const int next = (r + 1) % N, prev = (r + N - 1) % N;
  const size_t C = (size_t)at->C, rows = (size_t)B * Tl, n = rows * kv_cols(at), es = es_of(at);
  const size_t nw = words(at, n);
  mt_request ks, kr, ds, dr;
  memset(&ks, 0, sizeof ks), memset(&kr, 0, sizeof kr);
  memset(&ds, 0, sizeof ds), memset(&dr, 0, sizeof dr);
  /* this step's part of a dK|dV, the accumulator arriving, the one leaving */
  mt_act *part = at->dkv[0], *in = at->dkv[1], *leaving = at->dkv[2];
  const int steps = ring_steps(at);
  o->zero(dt, dqkv, rows * 3 * C);
  pack_kv(at, at->kv[0], qkv, B);
  for (int s = 0; s < steps; s++) {
    const int src = (r - s + N) % N;
    mt_act *held = at->kv[s % 2];
    if (s < steps - 1) {
      mt_irecv(at->g, at->kv[(s + 1) % 2], nw, MT_DT_F32, prev, TAG_KV, o->loc, &kr);
      mt_isend(at->g, held, nw, MT_DT_F32, next, TAG_KV, o->loc, &ks);
    }
    /* src's dK|dV so far: summed by ranks src .. r-1 */
    if (s > 0) mt_irecv(at->g, in, nw, MT_DT_F32, prev, TAG_DKV, o->loc, &dr);
    const mt_act *kv = spread_kv(at, held, B);
    mt_act *dpart = spreads(at) ? at->dkvs : part; /* this step's, over the query heads */
    o->zero(dt, dpart, rows * 2 * C);
    for (int qc = 0; qc < 2; qc++)
      for (int kc = 0; kc < 2; kc++) {
        int qpos = chunk_pos(l, r, qc), kpos = chunk_pos(l, src, kc);
        if (kpos > qpos) continue;
        mt_attn_block a = mt_attention_block(at, B, Tl, qc * Tc, Tc, Tc, qpos, kpos, 2 * C, Tl);
        size_t qo = (size_t)qc * Tc * 3 * C, oo = (size_t)qc * Tc * C, ko = (size_t)kc * Tc * 2 * C;
        o->attn_backward(dt, &a, mt_act_at(es, dqkv, qo), mt_act_at(es, dpart, ko),
                  mt_act_at(es, dpart, ko + C), mt_act_at(es, dout, oo), mt_act_at(es, out, oo),
                  lse + (size_t)qc * Tc, mt_act_at(es, qkv, qo), mt_act_at(es, kv, ko),
                  mt_act_at(es, kv, ko + C));
        mt_progress(&kr), mt_progress(&ks), mt_progress(&dr), mt_progress(&ds);
      }
    if (spreads(at)) gather_dkv(at, part, B);
    if (s > 0) {
      mt_wait(&dr);
      o->axpy(dt, part, 1.0f, in, n);
    }
    if (steps == 1) { /* no trip round the ring: this rank's own dK|dV is complete */
      add_own_dkv(at, dqkv, part, B);
      return;
    }
    mt_wait(&ds); /* the previous accumulator has left: its buffer is free */
    mt_act *t = leaving;
    leaving = part;
    part = t;
    mt_isend(at->g, leaving, nw, MT_DT_F32, next, TAG_DKV, o->loc, &ds);
    mt_wait(&kr);
    mt_wait(&ks);
  }
  /* this rank's own K|V gradient, complete after its trip round the ring */
  mt_irecv(at->g, in, nw, MT_DT_F32, prev, TAG_DKV, o->loc, &dr);
  mt_wait(&dr);
  add_own_dkv(at, dqkv, in, B);
  mt_wait(&ds);
}

/* ------------------------------------------------------------------ */
/* Ulysses                                                             */

/* the heads of this rank over the whole sequence: q|k|v (B, T, 3Ch) */
static mt_attn_block heads_block(const mt_attention *at, int B) {
  const int N = at->lay.size, T = at->lay.T;
  const size_t Ch = (size_t)at->C / N;
  mt_attn_block a = {.B = B, .NH = at->NH / N, .hs = at->hs, .Tq = T, .Tk = T, .q_pos0 = 0,
                     .k_pos0 = 0, .causal = 1,
                     .q_bs = (size_t)T * 3 * Ch, .q_rs = 3 * Ch,
                     .k_bs = (size_t)T * 3 * Ch, .k_rs = 3 * Ch,
                     .v_bs = (size_t)T * 3 * Ch, .v_rs = 3 * Ch,
                     .o_bs = (size_t)T * Ch, .o_rs = Ch,
                     .l_bs = (size_t)(at->NH / N) * T, .l_hs = (size_t)T,
                     .q_lo = at->doc_lo_seq, .lo_bs = (size_t)T, .density = at->density_seq};
  return a;
}

/* An all-to-all of mt_alltoall_dim's layout on the activations'
 * dtype (bf16 moved as bits, half the bytes); counts in elements */
static void alltoall_act(const mt_attention *at, const mt_act *send, mt_act *recv,
                         size_t s_outer, size_t s_inner, size_t r_outer, size_t r_inner) {
  mt_alltoall_dim(at->g, send, recv, s_outer, s_inner, r_outer, r_inner, at->dt, at->ops->loc);
}

/* Token slices: this slice's positions of every rank (Ts = T / slices),
 * its NH/N heads here, against the micro-batch's K|V cache in the head
 * layout (B, T, 2Ch), whose first slice + 1 slices it attends */
static mt_attn_block heads_slice_block(const mt_attention *at, int B) {
  const int N = at->lay.size, T = at->lay.T, Ts = T / at->slices;
  const size_t Ch = (size_t)at->C / N;
  mt_attn_block a = {.B = B, .NH = at->NH / N, .hs = at->hs, .Tq = Ts,
                     .Tk = (at->slice + 1) * Ts, .q_pos0 = at->slice * Ts, .k_pos0 = 0,
                     .causal = 1,
                     .q_bs = (size_t)Ts * 3 * Ch, .q_rs = 3 * Ch,
                     .k_bs = (size_t)T * 2 * Ch, .k_rs = 2 * Ch,
                     .v_bs = (size_t)T * 2 * Ch, .v_rs = 2 * Ch,
                     .o_bs = (size_t)Ts * Ch, .o_rs = Ch,
                     .l_bs = (size_t)(at->NH / N) * Ts, .l_hs = (size_t)Ts,
                     .q_lo = NULL, .lo_bs = (size_t)Ts, .density = 1.0};
  return a;
}

/* Token slices under Ulysses: the all-to-alls of the slice's rows (T_local
 * / slices of each sequence here), attention over the cache between them
 * (this slice's K|V written into it first) */
static void ulysses_slice_forward(mt_attention *at, mt_act *out, const mt_act *qkv,
                                  const mt_cp_saved *s, int B) {
  const int N = at->lay.size, Tl = at->lay.T_local / at->slices;
  const size_t Ch = (size_t)at->C / N, rows = (size_t)B * Tl, es = es_of(at);
  alltoall_act(at, qkv, s->qkv_h, rows * 3, Ch, (size_t)B, (size_t)Tl * 3 * Ch);
  mt_attention_slice_rows(at, s->qkv_h, at->kv_cache, B, Ch, (size_t)at->lay.T, 1);
  mt_attn_block a = heads_slice_block(at, B);
  at->ops->attn_forward(at->dt, &a, s->out_h, s->lse, s->qkv_h, at->kv_cache,
                        mt_act_at(es, at->kv_cache, Ch));
  alltoall_act(at, s->out_h, out, (size_t)B, (size_t)Tl * Ch, rows, Ch);
}

/* dQ in the head layout, dK/dV added into the cache's gradients (complete
 * for this slice's rows: the later slices ran first), both sent back */
static void ulysses_slice_backward(mt_attention *at, mt_act *dqkv, const mt_act *dout,
                                   const mt_cp_saved *s, int B) {
  const int N = at->lay.size, Tl = at->lay.T_local / at->slices;
  const size_t Ch = (size_t)at->C / N, rows = (size_t)B * Tl, es = es_of(at);
  mt_act *dh = at->dqkv_h;
  alltoall_act(at, dout, at->dout_h, rows, Ch, (size_t)B, (size_t)Tl * Ch);
  mt_attn_block a = heads_slice_block(at, B);
  /* the last slice (the first to run, seeing every key) writes dQ and the
   * whole cache's gradients */
  const int last = at->slice == at->slices - 1;
  if (!last) at->ops->zero(at->dt, dh, rows * 3 * at->C);
  (last ? at->ops->attn_backward_first : at->ops->attn_backward)(
      at->dt, &a, dh, at->dkv_cache, mt_act_at(es, at->dkv_cache, Ch), at->dout_h, s->out_h,
      s->lse, s->qkv_h, at->kv_cache, mt_act_at(es, at->kv_cache, Ch));
  mt_attention_slice_rows(at, dh, at->dkv_cache, B, Ch, (size_t)at->lay.T, 0);
  alltoall_act(at, dh, dqkv, (size_t)B, (size_t)Tl * 3 * Ch, rows * 3, Ch);
}

void mt_attention_ulysses_forward(mt_attention *at, mt_act *out, const mt_act *qkv,
                                  const mt_cp_saved *s, int B) {
  if (at->slices > 1) {
    ulysses_slice_forward(at, out, qkv, s, B);
    return;
  }
  const int N = at->lay.size, Tl = at->lay.T_local;
  const size_t Ch = (size_t)at->C / N, rows = (size_t)B * Tl, es = es_of(at);
  /* (B, Tl, 3, N, Ch): head group j of every q, k, v row to rank j;
   * arriving: (B, N, Tl, 3Ch), rank j's positions in order */
  alltoall_act(at, qkv, s->qkv_h, rows * 3, Ch, (size_t)B, (size_t)Tl * 3 * Ch);
  mt_attn_block a = heads_block(at, B);
  at->ops->attn_forward(at->dt, &a, s->out_h, s->lse, s->qkv_h,
            mt_act_at(es, s->qkv_h, Ch), mt_act_at(es, s->qkv_h, 2 * Ch));
  /* (B, N, Tl, Ch): rank j's positions back to it; arriving: (B, Tl, N, Ch) */
  alltoall_act(at, s->out_h, out, (size_t)B, (size_t)Tl * Ch, rows, Ch);
}

/* dqkv is written (not accumulated), as by the other modes */
void mt_attention_ulysses_backward(mt_attention *at, mt_act *dqkv, const mt_act *dout,
                                   const mt_cp_saved *s, int B) {
  if (at->slices > 1) {
    ulysses_slice_backward(at, dqkv, dout, s, B);
    return;
  }
  const int N = at->lay.size, Tl = at->lay.T_local;
  const size_t Ch = (size_t)at->C / N, rows = (size_t)B * Tl, es = es_of(at);
  mt_act *dh = at->dqkv_h; /* dq|dk|dv in the head layout */
  alltoall_act(at, dout, at->dout_h, rows, Ch, (size_t)B, (size_t)Tl * Ch);
  mt_attn_block a = heads_block(at, B);
  at->ops->attn_backward_first(at->dt, &a, dh, mt_act_at(es, dh, Ch),
            mt_act_at(es, dh, 2 * Ch), at->dout_h, s->out_h, s->lse, s->qkv_h,
            mt_act_at(es, s->qkv_h, Ch), mt_act_at(es, s->qkv_h, 2 * Ch));
  alltoall_act(at, dh, dqkv, (size_t)B, (size_t)Tl * 3 * Ch, rows * 3, Ch);
}
