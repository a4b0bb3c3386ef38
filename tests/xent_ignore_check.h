/* What a target of MT_TARGET_IGNORE (-1: a padding position of a
 * variable-length batch) does to the cross-entropy ops of one op table
 * (kernels.h), for the CPU's (tests/unit/test_xent_ignore.c) and the CUDA
 * backend's (tests/gpu/gpu_xent_ignore.c) alike: every buffer comes from
 * the table's alloc and goes through its upload and download.
 *
 * A batch of N = 7 rows over V = 37 (Vp = 40) with rows 0, 3 and 6
 * ignored, against the compact batch of its 4 other rows (targets 0, V-1,
 * 19 and 25: both ends of the vocabulary and each side of the split), on
 * three paths: softmax_xent_forward/backward; the vocabulary-parallel
 * pieces on one rank (v0 = 0, Vl = Vp); and on 2 simulated ranks of 20
 * columns (v0 = 0 with 20 real, v0 = 20 with 17 real and 3 padding), their
 * row maxima and statistics combined on the host as the head combines them
 * over tp. The backward of the pieces runs in place over the probabilities,
 * as the head runs it. Each path, for the storage type t:
 *   - an ignored row's loss is exactly 0 (on every rank);
 *   - a kept row's loss and dlogits (every column) have the bits of the
 *     same row in the compact batch, and so has the losses' sum (the
 *     table's sum, as the head takes it; a few fp32 losses add up in fp64
 *     exactly, in any order): the batch's loss is the loss without the
 *     ignored rows;
 *   - an ignored row's dlogits are exactly 0 on every column, padding
 *     included (the output buffer starts non-zero);
 *   - an ignored row's summed target statistic is 0 (no rank holds -1,
 *     whatever its v0).
 * The pieces on one rank also give softmax_xent's bits on the batch with
 * ignored rows. No tolerance: every comparison is bitwise.
 *
 * Include once, from the program's one source file. */
#ifndef MT_TESTS_XENT_IGNORE_CHECK_H
#define MT_TESTS_XENT_IGNORE_CHECK_H

#include "core/core.h"
#include "kernels/kernels.h"
#include "check.h"
#include "test_rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XI_N 7
#define XI_V 37
#define XI_VP 40
#define XI_DLOSS 0.25f

/* the outputs of one path on one batch, on the host: losses (N), dlogits
 * (N,Vp) over the whole vocabulary (the ranks' columns side by side), the
 * losses' sum and the summed statistics (N,2; the whole path: none) */
typedef struct {
  float losses[XI_N];
  unsigned char dlogits[XI_N * XI_VP * sizeof(float)];
  double loss_sum;
  double stats[2 * XI_N];
  int ranks_agree; /* every rank wrote the same losses */
} xi_result;

static void *xi_dev(const mt_ops *o, const void *h, size_t bytes) {
  void *d = o->alloc(MT_MEM_OTHER, bytes ? bytes : 1);
  if (h) o->upload(d, h, bytes);
  return d;
}
static void xi_free(const mt_ops *o, void *d, size_t bytes) {
  o->free(MT_MEM_OTHER, d, bytes ? bytes : 1);
}

/* the logits of the N rows (storage type t, es bytes an element): row r
 * of the batch is row rows[r] of one fixed random (N,Vp) tensor in
 * [-4, 4), padding columns included */
static void xi_logits(void *out, mt_dtype t, const int *rows, int N) {
  for (int r = 0; r < N; r++)
    for (int j = 0; j < XI_VP; j++) {
      float v = (float)(4.0 * rng_hash_sym(0x5EED, (uint64_t)rows[r] * XI_VP + j));
      size_t i = (size_t)r * XI_VP + j;
      if (t == MT_DT_BF16) ((mt_bf16 *)out)[i] = mt_bf16_from_f32(v);
      else ((float *)out)[i] = v;
    }
}

/* softmax_xent_forward (out of place), then softmax_xent_backward into a
 * buffer that starts non-zero */
static void xi_whole(const mt_ops *o, mt_dtype t, const void *logits, const int *tgt, int N,
                     xi_result *res) {
  const size_t es = mt_dtype_bytes(t), sb = (size_t)N * XI_VP * es, sf = (size_t)N * sizeof(float);
  unsigned char *fill = malloc(sb);
  memset(fill, 0x3c, sb);
  void *d_lg = xi_dev(o, logits, sb), *d_p = xi_dev(o, NULL, sb), *d_dl = xi_dev(o, fill, sb);
  float *d_ls = xi_dev(o, NULL, sf);
  int *d_tgt = xi_dev(o, tgt, (size_t)N * sizeof(int));
  o->softmax_xent_forward(t, d_ls, d_p, d_lg, d_tgt, N, XI_V, XI_VP);
  o->softmax_xent_backward(t, d_dl, d_p, d_tgt, XI_DLOSS, N, XI_V, XI_VP);
  res->loss_sum = o->sum(MT_DT_F32, d_ls, (size_t)N);
  o->download(res->losses, d_ls, sf);
  o->download(res->dlogits, d_dl, sb);
  memset(res->stats, 0, sizeof res->stats);
  res->ranks_agree = 1;
  xi_free(o, d_lg, sb), xi_free(o, d_p, sb), xi_free(o, d_dl, sb), xi_free(o, d_ls, sf);
  xi_free(o, d_tgt, (size_t)N * sizeof(int));
  free(fill);
}

/* the vocabulary-parallel pieces on R ranks of Vp / R columns each, as
 * the head runs them: max, the maxima's max, exp, the statistics summed in
 * rank order, finish in place over the logits, backward in place */
static void xi_ranks(const mt_ops *o, mt_dtype t, const void *logits, const int *tgt, int N,
                     int R, xi_result *res) {
  const size_t es = mt_dtype_bytes(t), sf = (size_t)N * sizeof(float);
  const size_t sd = 2 * (size_t)N * sizeof(double);
  const int Vl = XI_VP / R;
  const size_t sl = (size_t)N * Vl * es;
  unsigned char *slice = malloc(sl);
  float *rowmax = malloc(sf), *part = malloc(sf), *ls = malloc(sf);
  double *stats = calloc(2 * (size_t)N, sizeof(double)), *pst = malloc(sd);
  void *d_lg[2];
  float *d_rmax = xi_dev(o, NULL, sf), *d_ls = xi_dev(o, NULL, sf);
  double *d_st = xi_dev(o, NULL, sd);
  int *d_tgt = xi_dev(o, tgt, (size_t)N * sizeof(int));
  const unsigned char *lg = logits;
  for (int r = 0; r < R; r++) { /* this rank's columns [r Vl, (r+1) Vl) */
    for (int n = 0; n < N; n++)
      memcpy(slice + (size_t)n * Vl * es, lg + ((size_t)n * XI_VP + (size_t)r * Vl) * es, Vl * es);
    d_lg[r] = xi_dev(o, slice, sl);
  }
#define XI_NVALID(r) (XI_V - (r) * Vl < 0 ? 0 : XI_V - (r) * Vl > Vl ? Vl : XI_V - (r) * Vl)
  for (int r = 0; r < R; r++) {
    o->xent_vp_max(t, d_rmax, d_lg[r], N, Vl, XI_NVALID(r));
    o->download(part, d_rmax, sf);
    for (int n = 0; n < N; n++) rowmax[n] = r == 0 || part[n] > rowmax[n] ? part[n] : rowmax[n];
  }
  o->upload(d_rmax, rowmax, sf);
  for (int r = 0; r < R; r++) {
    o->xent_vp_exp(t, d_st, d_lg[r], d_rmax, d_tgt, r * Vl, N, Vl, XI_NVALID(r));
    o->download(pst, d_st, sd);
    for (int i = 0; i < 2 * N; i++) stats[i] += pst[i];
  }
  o->upload(d_st, stats, sd);
  memcpy(res->stats, stats, sd);
  res->ranks_agree = 1;
  for (int r = 0; r < R; r++) {
    o->xent_vp_finish(t, d_ls, d_lg[r], d_lg[r], d_st, d_rmax, d_tgt, N, Vl, XI_NVALID(r));
    o->download(ls, d_ls, sf);
    if (r == 0) {
      memcpy(res->losses, ls, sf);
      res->loss_sum = o->sum(MT_DT_F32, d_ls, (size_t)N);
    }
    res->ranks_agree &= !memcmp(ls, res->losses, sf);
    o->xent_vp_backward(t, d_lg[r], d_lg[r], d_tgt, r * Vl, XI_DLOSS, N, Vl, XI_NVALID(r));
    o->download(slice, d_lg[r], sl);
    for (int n = 0; n < N; n++)
      memcpy(res->dlogits + ((size_t)n * XI_VP + (size_t)r * Vl) * es, slice + (size_t)n * Vl * es,
             Vl * es);
    xi_free(o, d_lg[r], sl);
  }
#undef XI_NVALID
  xi_free(o, d_rmax, sf), xi_free(o, d_ls, sf), xi_free(o, d_st, sd);
  xi_free(o, d_tgt, (size_t)N * sizeof(int));
  free(slice), free(rowmax), free(part), free(ls), free(stats), free(pst);
}

/* 1 when the n bytes at p are all 0 (+0.0 in either type) */
static int xi_zero(const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i]) return 0;
  return 1;
}

/* one path (R = 0: the whole ops; else the pieces on R ranks) on the
 * batch with ignored rows and on the compact batch; the checks above.
 * whole: the whole path's result on the same batch (R = 1 compares with
 * it), or NULL */
static void xi_path(const mt_ops *o, mt_dtype t, int R, xi_result *full, const xi_result *whole) {
  static const int tgt_full[XI_N] = {MT_TARGET_IGNORE, 0, XI_V - 1, MT_TARGET_IGNORE, 19, 25,
                                     MT_TARGET_IGNORE};
  static const int rows_full[XI_N] = {0, 1, 2, 3, 4, 5, 6};
  int kept[XI_N], tgt_kept[XI_N], nk = 0;
  for (int n = 0; n < XI_N; n++)
    if (tgt_full[n] != MT_TARGET_IGNORE) kept[nk] = n, tgt_kept[nk++] = tgt_full[n];
  const size_t es = mt_dtype_bytes(t), row = (size_t)XI_VP * es;
  unsigned char lg_full[XI_N * XI_VP * sizeof(float)], lg_kept[XI_N * XI_VP * sizeof(float)];
  xi_logits(lg_full, t, rows_full, XI_N);
  xi_logits(lg_kept, t, kept, nk);
  xi_result *compact = malloc(sizeof *compact);
  if (R == 0) {
    xi_whole(o, t, lg_full, tgt_full, XI_N, full);
    xi_whole(o, t, lg_kept, tgt_kept, nk, compact);
  } else {
    xi_ranks(o, t, lg_full, tgt_full, XI_N, R, full);
    xi_ranks(o, t, lg_kept, tgt_kept, nk, R, compact);
  }
  char what[160];
  const char *path = R == 0 ? "softmax_xent" : R == 1 ? "xent_vp, 1 rank" : "xent_vp, 2 ranks";
  const char *ty = t == MT_DT_BF16 ? "bf16" : "fp32";
  int loss0 = 1, dl0 = 1, st0 = 1, kept_loss = 1, kept_dl = 1;
  for (int n = 0, k = 0; n < XI_N; n++) {
    if (tgt_full[n] == MT_TARGET_IGNORE) {
      loss0 &= xi_zero(&full->losses[n], sizeof(float));
      dl0 &= xi_zero(full->dlogits + n * row, row);
      st0 &= xi_zero(&full->stats[2 * n + 1], sizeof(double));
      continue;
    }
    kept_loss &= !memcmp(&full->losses[n], &compact->losses[k], sizeof(float));
    kept_dl &= !memcmp(full->dlogits + n * row, compact->dlogits + k * row, row);
    k++;
  }
  snprintf(what, sizeof what, "%s %s: ignored rows' losses exactly 0", path, ty);
  mt_check_true(what, loss0);
  snprintf(what, sizeof what, "%s %s: ignored rows' dlogits exactly 0 (every column)", path, ty);
  mt_check_true(what, dl0);
  snprintf(what, sizeof what, "%s %s: kept rows' losses = the compact batch's, bitwise", path, ty);
  mt_check_true(what, kept_loss);
  snprintf(what, sizeof what, "%s %s: kept rows' dlogits = the compact batch's, bitwise", path, ty);
  mt_check_true(what, kept_dl);
  snprintf(what, sizeof what, "%s %s: loss sum %.9g = the compact batch's %.9g", path, ty,
           full->loss_sum, compact->loss_sum);
  mt_check_true(what, full->loss_sum == compact->loss_sum && compact->loss_sum > 0.0);
  if (R > 0) {
    snprintf(what, sizeof what, "%s %s: ignored rows' target statistic 0, ranks' losses agree",
             path, ty);
    mt_check_true(what, st0 && full->ranks_agree && compact->ranks_agree);
  }
  if (whole) {
    snprintf(what, sizeof what, "%s %s: softmax_xent's bits on the batch with ignored rows", path,
             ty);
    mt_check_true(what, !memcmp(full->losses, whole->losses, sizeof full->losses) &&
                            !memcmp(full->dlogits, whole->dlogits, XI_N * row));
  }
  free(compact);
}

/* every check above for the storage type t on table o */
static void xent_ignore_check(const mt_ops *o, mt_dtype t) {
  printf("cross-entropy with ignored targets on %s, %s\n", o->name,
         t == MT_DT_BF16 ? "bf16" : "fp32");
  xi_result *whole = malloc(sizeof *whole), *res = malloc(sizeof *res);
  xi_path(o, t, 0, whole, NULL);
  xi_path(o, t, 1, res, whole);
  xi_path(o, t, 2, res, NULL);
  free(whole), free(res);
}

#endif
