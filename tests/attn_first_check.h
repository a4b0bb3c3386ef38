/* attn_backward_first against zero, then attn_backward, on one op table
 * (kernels.h), for the CPU's (tests/unit/test_fused.c) and the CUDA
 * backend's (tests/gpu/gpu_fused.c) alike: every buffer comes from the
 * table's alloc and goes through its upload and download.
 *
 * Each case runs attn_forward for out and the LSE, then the backward twice
 * from the same inputs: into gradients zeroed by the table's zero, and with
 * attn_backward_first into gradients that start as NaN bytes (0xff: the
 * op must never read them). The whole gradient buffers, bit for bit. The
 * cases are the layouts the model hands the op: q|k|v in the fused (B,T,3C)
 * buffer with dq|dk|dv in one (B,T,3C) gradient (a layer's local
 * attention), and separate query rows (B,Tq,C) and key/value rows
 * (B,Tk,2C) at global offsets (token slices, context parallelism), so that
 * query rows that see no key, keys that no row sees (a causal block whose
 * keys start after its first queries or end after its last), documents
 * (q_lo) and a block with no key at all are all written.
 *
 * Include once, from the program's one source file. */
#ifndef MT_TESTS_ATTN_FIRST_CHECK_H
#define MT_TESTS_ATTN_FIRST_CHECK_H

#include "core/core.h"
#include "kernels/kernels.h"
#include "check.h"
#include "test_rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* one case: B sequences of NH heads of hs channels; Tq query rows at
 * global position q_pos0, Tk key rows at k_pos0; fused: one (B,T,3C)
 * buffer (Tq = Tk, the same positions); docs: documents of doc_len
 * positions (0: one) */
typedef struct {
  int B, NH, hs, Tq, Tk, q_pos0, k_pos0, causal, fused, doc_len;
} af_case;

/* elements held for n elements of a (B,Tk,2C) key/value buffer: at least
 * one row, so that a block without keys still points inside it (v = k + C) */
static size_t af_held(size_t n, size_t C) { return n ? n : 2 * C; }

/* backend memory of bytes, from host h (NULL: zeros) */
static void *af_dev(const mt_ops *o, const void *h, size_t bytes) {
  void *d = o->alloc(MT_MEM_OTHER, bytes ? bytes : 1);
  if (h) o->upload(d, h, bytes);
  return d;
}

/* n elements of type t in [-1, 1) on the host, from key */
static void *af_rand(mt_dtype t, size_t n, uint64_t key) {
  void *h = malloc((n ? n : 1) * mt_dtype_bytes(t));
  for (size_t i = 0; i < n; i++) {
    float v = (float)rng_hash_sym(key, i);
    if (t == MT_DT_BF16) ((mt_bf16 *)h)[i] = mt_bf16_from_f32(v);
    else ((float *)h)[i] = v;
  }
  return h;
}

/* the backward's gradients (host bytes of dq's and dkv's buffers; one
 * buffer when fused) from the table o: first = 1 attn_backward_first over
 * NaN bytes, else zero then attn_backward */
static void af_backward(const mt_ops *o, mt_dtype t, const mt_attn_block *a, int fused,
                        void *const in[4], const void *out, const float *lse, int first,
                        void *h_dq, void *h_dkv, size_t nq, size_t nkv) {
  const size_t es = mt_dtype_bytes(t), C = (size_t)a->NH * a->hs, hk = af_held(nkv, C);
  unsigned char *nan = malloc((nq > hk ? nq : hk) * es);
  memset(nan, 0xff, (nq > hk ? nq : hk) * es);
  void *dq = af_dev(o, nan, nq * es), *dkv = fused ? NULL : af_dev(o, nan, hk * es);
  char *dk = fused ? (char *)dq + C * es : dkv, *dv = dk + C * es;
  if (!first) {
    o->zero(t, dq, nq);
    if (!fused) o->zero(t, dkv, nkv);
  }
  (first ? o->attn_backward_first : o->attn_backward)(t, a, dq, dk, dv, in[3], out, lse, in[0],
                                                       in[1], in[2]);
  o->download(h_dq, dq, nq * es);
  o->free(MT_MEM_OTHER, dq, nq * es);
  if (!fused) {
    o->download(h_dkv, dkv, nkv * es);
    o->free(MT_MEM_OTHER, dkv, hk * es);
  }
  free(nan);
}

static void af_run(const mt_ops *o, mt_dtype t, const af_case *c) {
  const size_t es = mt_dtype_bytes(t), C = (size_t)c->NH * c->hs;
  const size_t q_rs = c->fused ? 3 * C : C, kv_rs = c->fused ? 3 * C : 2 * C;
  const size_t nq = (size_t)c->B * c->Tq * q_rs, nkv = c->fused ? 0 : (size_t)c->B * c->Tk * kv_rs;
  const size_t no = (size_t)c->B * c->Tq * C, nl = (size_t)c->B * c->NH * (c->Tq ? c->Tq : 1);
  const size_t hk = af_held(nkv, C);
  void *h_q = af_rand(t, nq, 11), *h_kv = af_rand(t, hk, 12), *h_dout = af_rand(t, no, 13);
  void *d_q = af_dev(o, h_q, nq * es), *d_kv = c->fused ? NULL : af_dev(o, h_kv, hk * es);
  char *k = c->fused ? (char *)d_q + C * es : d_kv, *v = k + C * es;
  void *in[4] = {d_q, k, v, af_dev(o, h_dout, no * es)};
  void *d_out = af_dev(o, NULL, no * es);
  float *d_lse = af_dev(o, NULL, nl * sizeof(float));
  int *h_lo = malloc(((size_t)c->B * c->Tq + 1) * sizeof(int)), *d_lo = NULL;
  for (int b = 0; b < c->B; b++)
    for (int i = 0; i < c->Tq; i++)
      h_lo[(size_t)b * c->Tq + i] = c->doc_len ? (c->q_pos0 + i) / c->doc_len * c->doc_len : 0;
  if (c->doc_len) d_lo = af_dev(o, h_lo, (size_t)c->B * c->Tq * sizeof(int));
  mt_attn_block a = {.B = c->B, .NH = c->NH, .hs = c->hs, .Tq = c->Tq, .Tk = c->Tk,
                     .q_pos0 = c->q_pos0, .k_pos0 = c->k_pos0, .causal = c->causal,
                     .q_bs = (size_t)c->Tq * q_rs, .q_rs = q_rs,
                     .k_bs = (size_t)c->Tk * kv_rs, .k_rs = kv_rs,
                     .v_bs = (size_t)c->Tk * kv_rs, .v_rs = kv_rs,
                     .o_bs = (size_t)c->Tq * C, .o_rs = C,
                     .l_bs = (size_t)c->NH * c->Tq, .l_hs = (size_t)c->Tq,
                     .q_lo = d_lo, .lo_bs = (size_t)c->Tq};
  o->attn_forward(t, &a, d_out, d_lse, in[0], in[1], in[2]);
  unsigned char *ref[2], *got[2];
  for (int i = 0; i < 2; i++) {
    size_t n = (i == 0 ? nq : nkv) * es + 1;
    ref[i] = malloc(n), got[i] = malloc(n);
  }
  af_backward(o, t, &a, c->fused, in, d_out, d_lse, 0, ref[0], ref[1], nq, nkv);
  af_backward(o, t, &a, c->fused, in, d_out, d_lse, 1, got[0], got[1], nq, nkv);
  char what[200];
  snprintf(what, sizeof what,
           "attn_backward_first %s %s B=%d NH=%d hs=%d Tq=%d@%d Tk=%d@%d%s%s = zero, then "
           "attn_backward (bits)",
           o->name, t == MT_DT_BF16 ? "bf16" : "fp32", c->B, c->NH, c->hs, c->Tq, c->q_pos0, c->Tk,
           c->k_pos0, c->causal ? " causal" : "", c->doc_len ? " documents" : "");
  mt_check_true(what, !memcmp(ref[0], got[0], nq * es) && !memcmp(ref[1], got[1], nkv * es));
  o->free(MT_MEM_OTHER, d_q, nq * es);
  if (d_kv) o->free(MT_MEM_OTHER, d_kv, hk * es);
  o->free(MT_MEM_OTHER, in[3], no * es), o->free(MT_MEM_OTHER, d_out, no * es);
  o->free(MT_MEM_OTHER, d_lse, nl * sizeof(float));
  if (d_lo) o->free(MT_MEM_OTHER, d_lo, (size_t)c->B * c->Tq * sizeof(int));
  for (int i = 0; i < 2; i++) free(ref[i]), free(got[i]);
  free(h_q), free(h_kv), free(h_dout), free(h_lo);
}

/* every case on table o, storage type t */
static void attn_first_check(const mt_ops *o, mt_dtype t) {
  static const af_case cases[] = {
      /* a layer's local attention: the fused buffer, rows past a tile */
      {2, 3, 32, 70, 70, 0, 0, 1, 1, 0},
      {1, 2, 64, 130, 130, 0, 0, 1, 1, 40},
      /* keys after the first queries (a tile of rows that sees none) and past the
       * last (keys none sees) */
      {2, 2, 16, 150, 100, 0, 70, 1, 0, 0},
      {1, 2, 24, 50, 120, 100, 20, 1, 0, 33},
      /* a token slice: its queries over every key up to it */
      {2, 2, 32, 40, 120, 80, 0, 1, 0, 0},
      /* no mask; no key at all */
      {1, 3, 16, 33, 65, 0, 0, 0, 0, 0},
      {2, 2, 16, 20, 0, 0, 0, 1, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) af_run(o, t, &cases[i]);
}

#endif
