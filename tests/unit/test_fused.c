/* test_fused: each fused op of the CPU table against the unfused ops it
 * replaces, on fp32 and on bf16 storage, bit for bit (the arithmetic is
 * the same by construction: any difference is a bug).
 *
 * - adamw_ranges against, per range, convert (bf16 gradients widened),
 *   scale (the clip factor) and adamw_update: the master, both moments
 *   and the compute copy (none, fp32 or bf16) bit for bit, 3 steps, at a
 *   length above the parallel threshold and a small one; ranges with
 *   different weight decays and a gap whose elements must stay untouched;
 *   the same bits at 1 and at 2 threads.
 * - residual_layernorm_forward and residual_rmsnorm_forward against
 *   residual_forward then the norm: the sum, the normalised rows and the
 *   statistics bit for bit; the sum written over its first input (res
 *   aliasing a, as the op allows).
 * - each backward op's _first form (matmul, GELU, SwiGLU, LayerNorm,
 *   RMSNorm) against zero, then the op: the input gradient bit for bit
 *   from a buffer of NaNs (never read), the parameter gradients
 *   accumulated alike; rows of zeros in dout (signed zeros).
 * - attn_backward_first against zero, then attn_backward
 *   (tests/attn_first_check.h): dq, dk, dv bit for bit from NaN bytes, on
 *   the model's layouts, rows that see no key and keys no row sees.
 * - GELU on bf16 storage (looked up in tables of every bf16 input) against
 *   the fp32 op on the widened operands, rounded once: forward,
 *   backward_first and backward bit for bit at each of the 65536 bf16
 *   values of the input (NaN inputs: a NaN out), and with dout = 1 and
 *   the rounding's residual fed back as dinp, the first 16 bits of each
 *   fp32 slope the backward's table holds.
 * - sumsq (chunks summed side by side) against its contract written out:
 *   chunks fixed by n, each summed in order, then the chunks in order;
 *   fp32 and bf16, lengths with 1 chunk, a part group of chunks, a short
 *   last chunk (in a part and in a full group), and the 256-chunk cap;
 *   at 1 and 2 threads.
 * - the model with a block's output residual summed in the next block's
 *   norm (or the final norm) against the sums apart (mt_gpt fuse_norms
 *   0): gpt2 and llama, fp32 and bf16, with and without recompute, the
 *   loss, the residual stream, the norms and every gradient, and the
 *   forward run as two stages; the sums counted on a wrapped op table.
 * Any failure prints "FAIL ..." and the test exits 1. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "../check.h"
#include "../test_rng.h"
#include "../attn_first_check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mt_ops *ops;

static float *rnd_f32(size_t n, double lo, double hi) {
  float *x = test_alloc(n * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = (float)rng_uniform_f64(lo, hi);
  return x;
}

/* n elements of type t in [lo, hi) (bf16: rounded) */
static void *rnd_t(mt_dtype t, size_t n, double lo, double hi) {
  float *f = rnd_f32(n, lo, hi);
  if (t == MT_DT_F32) return f;
  mt_bf16 *b = test_alloc(n * sizeof(mt_bf16));
  mt_bf16_from_f32_n(b, f, n);
  free(f);
  return b;
}

static void *dup_bytes(const void *p, size_t bytes) {
  void *q = test_alloc(bytes);
  memcpy(q, p, bytes);
  return q;
}

static const char *tname(mt_dtype t) { return t == MT_DT_BF16 ? "bf16" : "fp32"; }

/* ------------------------------------------------------------------ */
/* AdamW over ranges                                                   */

#define N_RANGES 4

/* ranges over n elements: four tensors, the second without weight decay,
 * a gap of n/16 elements between the third and the fourth */
static void make_ranges(mt_adamw_range *r, size_t n) {
  size_t q = n / 4, gap = n / 16;
  r[0] = (mt_adamw_range){0, q - 3, 0.1f};
  r[1] = (mt_adamw_range){q - 3, 2 * q + 5, 0.0f};
  r[2] = (mt_adamw_range){2 * q + 5, 3 * q, 0.1f};
  r[3] = (mt_adamw_range){3 * q + gap, n, 0.05f};
}

typedef struct {
  float *p, *m, *v;
  void *copy; /* NULL: none */
} adam_state;

static void state_init(adam_state *s, const float *p, const float *m, const float *v,
                       const void *copy, size_t n, size_t copy_bytes) {
  s->p = dup_bytes(p, n * 4);
  s->m = dup_bytes(m, n * 4);
  s->v = dup_bytes(v, n * 4);
  s->copy = copy ? dup_bytes(copy, copy_bytes) : NULL;
}

static void state_free(adam_state *s) {
  free(s->p), free(s->m), free(s->v), free(s->copy);
}

static int state_same(const adam_state *a, const adam_state *b, size_t n, size_t copy_bytes) {
  return !memcmp(a->p, b->p, n * 4) && !memcmp(a->m, b->m, n * 4) &&
         !memcmp(a->v, b->v, n * 4) && (!a->copy || !memcmp(a->copy, b->copy, copy_bytes));
}

/* the unfused ops: per range, the gradient widened to fp32 and scaled in
 * a buffer, then adamw_update */
static void unfused_adamw(adam_state *s, mt_dtype ct, const void *grad, mt_dtype gt, float scale,
                          const mt_adamw_range *r, int nr, size_t n, int step) {
  float *g = test_alloc(n * sizeof(float));
  ops->convert(g, MT_DT_F32, grad, gt, n);
  const size_t ces = mt_dtype_bytes(ct);
  for (int k = 0; k < nr; k++) {
    size_t b = r[k].begin, len = r[k].end - r[k].begin;
    if (scale != 1.0f) ops->scale(MT_DT_F32, g + b, scale, len);
    ops->adamw_update(ct, s->p + b, s->copy ? (char *)s->copy + b * ces : NULL, g + b, s->m + b,
                      s->v + b, len, 1e-3f, 0.9f, 0.95f, 1e-8f, r[k].weight_decay, step);
  }
  free(g);
}

static void fused_adamw(adam_state *s, mt_dtype ct, const void *grad, mt_dtype gt, float scale,
                        const mt_adamw_range *r, int nr, int step) {
  ops->adamw_ranges(ct, s->p, s->copy, grad, gt, scale, s->m, s->v, r, nr, 1e-3f, 0.9f, 0.95f,
                    1e-8f, step);
}

/* one case: copy type ct (with or without a copy), gradient type gt, clip
 * scale */
static void adamw_case(size_t n, mt_dtype ct, int with_copy, mt_dtype gt, float scale) {
  mt_adamw_range r[N_RANGES];
  make_ranges(r, n);
  const size_t cb = n * mt_dtype_bytes(ct);
  float *p = rnd_f32(n, -1, 1), *m = rnd_f32(n, -0.1, 0.1), *v = rnd_f32(n, 0, 0.01);
  void *copy = with_copy ? rnd_t(ct, n, -1, 1) : NULL;
  adam_state ref, got, one;
  state_init(&ref, p, m, v, copy, n, cb);
  state_init(&got, p, m, v, copy, n, cb);
  state_init(&one, p, m, v, copy, n, cb);
  for (int step = 1; step <= 3; step++) {
    void *grad = rnd_t(gt, n, -1, 1);
    unfused_adamw(&ref, ct, grad, gt, scale, r, N_RANGES, n, step);
    mt_kernels_set_threads(2);
    fused_adamw(&got, ct, grad, gt, scale, r, N_RANGES, step);
    mt_kernels_set_threads(1);
    fused_adamw(&one, ct, grad, gt, scale, r, N_RANGES, step);
    mt_kernels_set_threads(2);
    free(grad);
  }
  char what[160];
  snprintf(what, sizeof what, "adamw_ranges n=%zu copy %s, grad %s, scale %g = unfused (bits)", n,
           with_copy ? tname(ct) : "none", tname(gt), scale);
  mt_check_true(what, state_same(&got, &ref, n, cb));
  snprintf(what, sizeof what, "adamw_ranges n=%zu copy %s, grad %s: 1 thread = 2 threads", n,
           with_copy ? tname(ct) : "none", tname(gt));
  mt_check_true(what, state_same(&got, &one, n, cb));
  /* the gap between ranges 2 and 3 untouched (and the state did move) */
  size_t g0 = r[2].end, g1 = r[3].begin;
  int gap_kept = g1 > g0 && !memcmp(got.p + g0, p + g0, (g1 - g0) * 4) &&
                 !memcmp(got.m + g0, m + g0, (g1 - g0) * 4);
  int moved = memcmp(got.p, p, r[0].end * 4) != 0;
  mt_check_true("adamw_ranges: the gap untouched, the ranges updated", gap_kept && moved);
  state_free(&ref), state_free(&got), state_free(&one);
  free(p), free(m), free(v), free(copy);
}

static void test_adamw_ranges(void) {
  printf("adamw_ranges\n");
  const size_t lens[] = {200003, 1001};
  const mt_dtype types[] = {MT_DT_F32, MT_DT_BF16};
  for (int li = 0; li < 2; li++)
    for (int ci = 0; ci < 2; ci++)
      for (int gi = 0; gi < 2; gi++) {
        if (types[ci] == MT_DT_F32) adamw_case(lens[li], MT_DT_F32, 0, types[gi], 0.37f);
        adamw_case(lens[li], types[ci], 1, types[gi], 0.37f);
        adamw_case(lens[li], types[ci], 1, types[gi], 1.0f);
      }
}

/* ------------------------------------------------------------------ */
/* residual + norm                                                     */

static void residual_norm_case(mt_dtype t, int rms, int N, int C, int alias) {
  const size_t n = (size_t)N * C, es = mt_dtype_bytes(t);
  void *a = rnd_t(t, n, -2, 2), *b = rnd_t(t, n, -1, 1);
  void *w = rnd_t(t, C, 0.5, 1.5), *bias = rnd_t(t, C, -0.5, 0.5);
  void *res_ref = test_alloc(n * es), *out_ref = test_alloc(n * es);
  void *res = alias ? dup_bytes(a, n * es) : test_alloc(n * es), *out = test_alloc(n * es);
  float *mean_ref = test_alloc(N * 4), *rstd_ref = test_alloc(N * 4);
  float *mean = test_alloc(N * 4), *rstd = test_alloc(N * 4);
  ops->residual_forward(t, res_ref, a, b, n);
  if (rms) {
    ops->rmsnorm_forward(t, out_ref, rstd_ref, res_ref, w, N, C, 1e-6f);
    ops->residual_rmsnorm_forward(t, res, out, rstd, alias ? res : a, b, w, N, C, 1e-6f);
  } else {
    ops->layernorm_forward(t, out_ref, mean_ref, rstd_ref, res_ref, w, bias, N, C);
    ops->residual_layernorm_forward(t, res, out, mean, rstd, alias ? res : a, b, w, bias, N, C);
  }
  int same = !memcmp(res, res_ref, n * es) && !memcmp(out, out_ref, n * es) &&
             !memcmp(rstd, rstd_ref, N * 4) && (rms || !memcmp(mean, mean_ref, N * 4));
  char what[160];
  snprintf(what, sizeof what, "residual_%s_forward %s N=%d C=%d%s = unfused (bits)",
           rms ? "rmsnorm" : "layernorm", tname(t), N, C, alias ? " (res = a)" : "");
  mt_check_true(what, same);
  free(a), free(b), free(w), free(bias), free(res_ref), free(out_ref), free(res), free(out);
  free(mean_ref), free(rstd_ref), free(mean), free(rstd);
}

static void test_residual_norm(void) {
  printf("residual + norm\n");
  const mt_dtype types[] = {MT_DT_F32, MT_DT_BF16};
  for (int ti = 0; ti < 2; ti++)
    for (int rms = 0; rms < 2; rms++) {
      residual_norm_case(types[ti], rms, 257, 768, 0);
      residual_norm_case(types[ti], rms, 33, 72, 0);
      residual_norm_case(types[ti], rms, 65, 100, 1);
    }
}

/* ------------------------------------------------------------------ */
/* backward ops' _first forms: the input gradient written              */

/* n elements of type t with NaN's bits (0xff bytes): a _first op must
 * never read what it writes */
static void *nan_t(mt_dtype t, size_t n) {
  void *x = test_alloc(n * mt_dtype_bytes(t));
  memset(x, 0xff, n * mt_dtype_bytes(t));
  return x;
}

/* every fourth row of x (rows, cols) zero: products and sums of zeros */
static void zero_rows(mt_dtype t, void *x, int rows, int cols) {
  const size_t es = mt_dtype_bytes(t);
  for (int r = 0; r < rows; r += 4) memset((char *)x + (size_t)r * cols * es, 0, cols * es);
}

static void first_check(const char *op, mt_dtype t, int N, int C, const void *got,
                        const void *ref, size_t n, int same_rest) {
  char what[160];
  snprintf(what, sizeof what, "%s_first %s %dx%d = zero, then %s (bits)", op, tname(t), N, C, op);
  mt_check_true(what, !memcmp(got, ref, n * mt_dtype_bytes(t)) && same_rest);
}

/* matmul_backward_first against zero + matmul_backward: dinp, and dw and
 * dbias accumulated onto the same starting values */
static void matmul_first_case(mt_dtype t, int N, int C, int OC) {
  void *dout = rnd_t(t, (size_t)N * OC, -1, 1), *inp = rnd_t(t, (size_t)N * C, -1, 1);
  void *w = rnd_t(t, (size_t)OC * C, -1, 1);
  zero_rows(t, dout, N, OC);
  float *dw0 = rnd_f32((size_t)OC * C, -1, 1), *db0 = rnd_f32((size_t)OC, -1, 1);
  float *dw = dup_bytes(dw0, (size_t)OC * C * 4), *db = dup_bytes(db0, (size_t)OC * 4);
  void *ref = nan_t(t, (size_t)N * C), *got = nan_t(t, (size_t)N * C);
  ops->zero(t, ref, (size_t)N * C);
  ops->matmul_backward(t, ref, dw0, db0, dout, inp, w, N, C, OC);
  ops->matmul_backward_first(t, got, dw, db, dout, inp, w, N, C, OC);
  first_check("matmul_backward", t, N, C, got, ref, (size_t)N * C,
              !memcmp(dw, dw0, (size_t)OC * C * 4) && !memcmp(db, db0, (size_t)OC * 4));
  free(dout), free(inp), free(w), free(dw0), free(db0), free(dw), free(db), free(ref), free(got);
}

/* gelu_backward_first, swiglu_backward_first against zero + the op */
static void act_first_case(mt_dtype t, int N, int F) {
  const size_t n = (size_t)N * F;
  void *inp = rnd_t(t, 2 * n, -3, 3), *dout = rnd_t(t, n, -1, 1);
  zero_rows(t, dout, N, F);
  void *ref = nan_t(t, 2 * n), *got = nan_t(t, 2 * n);
  ops->zero(t, ref, n);
  ops->gelu_backward(t, ref, inp, dout, n);
  ops->gelu_backward_first(t, got, inp, dout, n);
  first_check("gelu_backward", t, N, F, got, ref, n, 1);
  ops->zero(t, ref, 2 * n);
  ops->swiglu_backward(t, ref, inp, dout, N, F);
  ops->swiglu_backward_first(t, got, inp, dout, N, F);
  first_check("swiglu_backward", t, N, F, got, ref, 2 * n, 1);
  free(inp), free(dout), free(ref), free(got);
}

/* layernorm_backward_first, rmsnorm_backward_first against zero + the op
 * (dw, db accumulated onto the same starting values) */
static void norm_first_case(mt_dtype t, int N, int C) {
  const size_t n = (size_t)N * C;
  void *inp = rnd_t(t, n, -2, 2), *dout = rnd_t(t, n, -1, 1), *w = rnd_t(t, C, 0.5, 1.5);
  void *bias = rnd_t(t, C, -0.5, 0.5), *out = test_alloc(n * mt_dtype_bytes(t));
  zero_rows(t, dout, N, C);
  float *mean = test_alloc(N * 4), *rstd = test_alloc(N * 4);
  float *dw0 = rnd_f32(C, -1, 1), *db0 = rnd_f32(C, -1, 1);
  float *dw = dup_bytes(dw0, C * 4), *db = dup_bytes(db0, C * 4);
  void *ref = nan_t(t, n), *got = nan_t(t, n);
  ops->layernorm_forward(t, out, mean, rstd, inp, w, bias, N, C);
  ops->zero(t, ref, n);
  ops->layernorm_backward(t, ref, dw0, db0, dout, inp, w, mean, rstd, N, C);
  ops->layernorm_backward_first(t, got, dw, db, dout, inp, w, mean, rstd, N, C);
  first_check("layernorm_backward", t, N, C, got, ref, n,
              !memcmp(dw, dw0, C * 4) && !memcmp(db, db0, C * 4));
  ops->rmsnorm_forward(t, out, rstd, inp, w, N, C, 1e-6f);
  memset(got, 0xff, n * mt_dtype_bytes(t));
  ops->zero(t, ref, n);
  ops->rmsnorm_backward(t, ref, dw0, dout, inp, w, rstd, N, C);
  ops->rmsnorm_backward_first(t, got, dw, dout, inp, w, rstd, N, C);
  first_check("rmsnorm_backward", t, N, C, got, ref, n, !memcmp(dw, dw0, C * 4));
  free(inp), free(dout), free(w), free(bias), free(out), free(mean), free(rstd);
  free(dw0), free(db0), free(dw), free(db), free(ref), free(got);
}

static void test_backward_first(void) {
  printf("backward ops' _first forms\n");
  const mt_dtype types[] = {MT_DT_F32, MT_DT_BF16};
  for (int ti = 0; ti < 2; ti++) {
    matmul_first_case(types[ti], 256, 192, 320);
    matmul_first_case(types[ti], 7, 5, 3);
    matmul_first_case(types[ti], 130, 64, 48);
    act_first_case(types[ti], 257, 300);
    act_first_case(types[ti], 5, 3);
    norm_first_case(types[ti], 257, 768);
    norm_first_case(types[ti], 9, 20);
    attn_first_check(ops, types[ti]);
  }
}

/* ------------------------------------------------------------------ */
/* GELU and SwiGLU on bf16: the tables against the fp32 arithmetic    */

static int bf16_is_nan(mt_bf16 b) { return (b & 0x7fffu) > 0x7f80u; }

/* the fp32 operands of the reference: x widened, a NaN as 0 (the fp32
 * ops' polynomial exp is undefined on one; a NaN input's bf16 output is
 * checked to be a NaN, not against the reference) */
static void widen_not_nan(float *y, const mt_bf16 *x, size_t n) {
  for (size_t i = 0; i < n; i++) y[i] = bf16_is_nan(x[i]) ? 0.0f : mt_bf16_to_f32(x[i]);
}

/* each of got[i] and round(ref[i]) alike, or, where the input x[i] or
 * the reference is a NaN, got[i] a NaN (which NaN two paths give, its sign
 * and payload, depends on the order of an operation's operands: an input
 * near the fp32 range overflows to NaN in the slope's arithmetic) */
static int bf16_same_or_nan(const mt_bf16 *got, const float *ref, const mt_bf16 *x, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (bf16_is_nan(x[i]) || isnan(ref[i]) ? !bf16_is_nan(got[i])
                                           : got[i] != mt_bf16_from_f32(ref[i]))
      return 0;
  return 1;
}

static void test_gelu_bf16(void) {
  printf("gelu bf16 (tables) = the fp32 op rounded\n");
  const size_t n = 1u << 16;
  mt_bf16 *x = test_alloc(n * 2), *out = test_alloc(n * 2);
  mt_bf16 *dout = rnd_t(MT_DT_BF16, n, -2, 2), *d0 = rnd_t(MT_DT_BF16, n, -1, 1);
  float *x_f = test_alloc(n * 4), *dout_f = test_alloc(n * 4), *out_f = test_alloc(n * 4);
  for (size_t i = 0; i < n; i++) x[i] = (mt_bf16)i; /* every bf16 value, NaNs and infinities too */
  widen_not_nan(x_f, x, n);
  mt_bf16_to_f32_n(dout_f, dout, n);
  ops->gelu_forward(MT_DT_BF16, out, x, n);
  ops->gelu_forward(MT_DT_F32, out_f, x_f, n);
  mt_check_true("gelu_forward bf16 = fp32 rounded, every input (bits)",
                bf16_same_or_nan(out, out_f, x, n));
  memset(out, 0xff, n * 2);
  ops->gelu_backward_first(MT_DT_BF16, out, x, dout, n);
  ops->gelu_backward_first(MT_DT_F32, out_f, x_f, dout_f, n);
  mt_check_true("gelu_backward_first bf16 = fp32 rounded, every input (bits)",
                bf16_same_or_nan(out, out_f, x, n));
  memcpy(out, d0, n * 2);
  mt_bf16_to_f32_n(out_f, d0, n);
  ops->gelu_backward(MT_DT_BF16, out, x, dout, n);
  ops->gelu_backward(MT_DT_F32, out_f, x_f, dout_f, n);
  mt_check_true("gelu_backward bf16 = fp32 rounded, every input (bits)",
                bf16_same_or_nan(out, out_f, x, n));
  /* the slopes' first 16 bits at every input: dout = 1 gives the slope
   * rounded, r; backward onto dinp = -r then gives (slope - r), exact,
   * rounded: the next 8 bits (random douts test the rest) */
  for (size_t i = 0; i < n; i++) dout[i] = mt_bf16_from_f32(1.0f), dout_f[i] = 1.0f;
  ops->gelu_backward_first(MT_DT_BF16, out, x, dout, n);
  ops->gelu_backward_first(MT_DT_F32, out_f, x_f, dout_f, n);
  int same = bf16_same_or_nan(out, out_f, x, n);
  for (size_t i = 0; i < n; i++) out[i] ^= 0x8000u; /* -r */
  mt_bf16_to_f32_n(out_f, out, n);
  ops->gelu_backward(MT_DT_BF16, out, x, dout, n);
  ops->gelu_backward(MT_DT_F32, out_f, x_f, dout_f, n);
  same = same && bf16_same_or_nan(out, out_f, x, n);
  mt_check_true("gelu_backward bf16: 16 bits of every fp32 slope", same);
  free(x), free(out), free(dout), free(d0), free(x_f), free(dout_f), free(out_f);
}

/* SwiGLU on bf16 (its gate's factors looked up) against the fp32 op on
 * the widened operands, rounded: (256, 256) rows whose gates are every
 * bf16 value, NaNs and infinities too (a NaN gate gives NaNs), ups and
 * douts random; forward, backward_first and backward onto random dinp */
static void test_swiglu_bf16(void) {
  printf("swiglu bf16 (tables) = the fp32 op rounded\n");
  const int N = 256, F = 256;
  const size_t n = (size_t)N * F, n2 = 2 * n;
  mt_bf16 *inp = rnd_t(MT_DT_BF16, n2, -3, 3), *dout = rnd_t(MT_DT_BF16, n, -2, 2);
  mt_bf16 *d0 = rnd_t(MT_DT_BF16, n2, -1, 1), *out = test_alloc(n2 * 2);
  mt_bf16 *gate_of = test_alloc((n + n2) * 2); /* each output's gate, for the NaN rule */
  float *inp_f = test_alloc(n2 * 4), *dout_f = test_alloc(n * 4), *out_f = test_alloc(n2 * 4);
  for (size_t r = 0; r < (size_t)N; r++)
    for (size_t f = 0; f < (size_t)F; f++) {
      const mt_bf16 g = (mt_bf16)(r * F + f);
      inp[r * 2 * F + f] = g;
      gate_of[r * F + f] = g; /* the forward's (N, F) */
      gate_of[n + r * 2 * F + f] = gate_of[n + r * 2 * F + F + f] = g; /* (N, 2F), after it */
    }
  widen_not_nan(inp_f, inp, n2);
  mt_bf16_to_f32_n(dout_f, dout, n);
  ops->swiglu_forward(MT_DT_BF16, out, inp, N, F);
  ops->swiglu_forward(MT_DT_F32, out_f, inp_f, N, F);
  mt_check_true("swiglu_forward bf16 = fp32 rounded, every gate (bits)",
                bf16_same_or_nan(out, out_f, gate_of, n));
  memset(out, 0xff, n2 * 2);
  ops->swiglu_backward_first(MT_DT_BF16, out, inp, dout, N, F);
  ops->swiglu_backward_first(MT_DT_F32, out_f, inp_f, dout_f, N, F);
  mt_check_true("swiglu_backward_first bf16 = fp32 rounded, every gate (bits)",
                bf16_same_or_nan(out, out_f, gate_of + n, n2));
  memcpy(out, d0, n2 * 2);
  mt_bf16_to_f32_n(out_f, d0, n2);
  ops->swiglu_backward(MT_DT_BF16, out, inp, dout, N, F);
  ops->swiglu_backward(MT_DT_F32, out_f, inp_f, dout_f, N, F);
  mt_check_true("swiglu_backward bf16 = fp32 rounded, every gate (bits)",
                bf16_same_or_nan(out, out_f, gate_of + n, n2));
  free(inp), free(dout), free(d0), free(out), free(gate_of), free(inp_f), free(dout_f);
  free(out_f);
}

/* ------------------------------------------------------------------ */
/* sumsq against its contract                                          */

/* kernels.h's sumsq as written there: ceil(n / 16384) chunks, at most
 * 256, of ceil(n / chunks) elements, each summed in order, then in order */
static double sumsq_ref(mt_dtype t, const void *x, size_t n) {
  size_t nchunks = (n + 16383) / 16384;
  if (nchunks > 256) nchunks = 256;
  if (nchunks == 0) return 0.0;
  size_t chunk = (n + nchunks - 1) / nchunks;
  double total = 0.0;
  for (size_t c = 0; c < nchunks; c++) {
    double acc = 0.0;
    for (size_t i = c * chunk; i < (c + 1) * chunk && i < n; i++) {
      double v = t == MT_DT_F32 ? ((const float *)x)[i] : mt_bf16_to_f32(((const mt_bf16 *)x)[i]);
      acc += v * v;
    }
    total += acc;
  }
  return total;
}

static void test_sumsq(void) {
  printf("sumsq = chunks in order\n");
  /* 1 chunk; 3 (a part group); 9 (a full group and 1); 9, the last
   * short; 19; 16, the last short in a full group; over the 256 cap */
  const size_t lens[] = {1000, 40000, 147456, 147000, 300001, 261144, 256 * 16384 + 12345};
  const mt_dtype types[] = {MT_DT_F32, MT_DT_BF16};
  for (int ti = 0; ti < 2; ti++)
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
      size_t n = lens[li];
      void *x = rnd_t(types[ti], n, -2, 2);
      double ref = sumsq_ref(types[ti], x, n), got2 = ops->sumsq(types[ti], x, n);
      mt_kernels_set_threads(1);
      double got1 = ops->sumsq(types[ti], x, n);
      mt_kernels_set_threads(2);
      char what[160];
      snprintf(what, sizeof what, "sumsq %s n=%zu = chunks in order, 1 and 2 threads (bits)",
               tname(types[ti]), n);
      mt_check_true(what, !memcmp(&got2, &ref, 8) && !memcmp(&got1, &ref, 8) && ref > 0);
      free(x);
    }
}

/* ------------------------------------------------------------------ */
/* the model: a block's last residual summed in the next block's norm  */

/* What a forward and backward leave: the loss, the kept residual stream
 * (every block's output), the final norm and its statistics, the blocks'
 * first norms (without recompute) and every parameter gradient. */
typedef struct {
  float loss;
  void *res3, *lnf, *ln1;
  float *lnf_stats, *ln1_stats, *grads;
} model_run;

typedef struct {
  mt_gpt m;
  void *params;
  float *grads;
  size_t n, es, btc, bts; /* parameters; bytes of an element; (BTs,C) and BTs elements */
  int L, B, BT, *inp, *tgt;
} model_case;

/* The CPU table with the residual sums counted: the model runs on it */
static mt_ops counted;
static const mt_ops *cpu;
static int n_residual, n_residual_norm;

static void count_residual(mt_dtype t, void *out, const void *a, const void *b, size_t n) {
  n_residual++;
  cpu->residual_forward(t, out, a, b, n);
}

static void count_residual_ln(mt_dtype t, void *res, void *out, float *mean, float *rstd,
                              const void *a, const void *b, const void *w, const void *bias,
                              int N, int C) {
  n_residual_norm++;
  cpu->residual_layernorm_forward(t, res, out, mean, rstd, a, b, w, bias, N, C);
}

static void count_residual_rms(mt_dtype t, void *res, void *out, float *rstd, const void *a,
                               const void *b, const void *w, int N, int C, float eps) {
  n_residual_norm++;
  cpu->residual_rmsnorm_forward(t, res, out, rstd, a, b, w, N, C, eps);
}

static int model_open(model_case *c, const mt_model_shape *shape, mt_dtype t, int recompute) {
  mt_model_shape s = *shape;
  s.vocab_padded = mt_model_pad_vocab(s.vocab, 1);
  mt_gpt_parallel par = {.recompute = recompute, .external_state = 1, .dt = t};
  mt_err e = {0};
  c->B = 2;
  if (mt_gpt_create_parallel(&c->m, &s, &counted, c->B, &par, &e) != 0) {
    MT_FAIL("model: %s", e.msg);
    return -1;
  }
  mt_check_true("the fusion is on by default", c->m.fuse_norms == 1);
  c->L = s.n_layer;
  c->BT = c->B * s.seq_len;
  c->btc = (size_t)c->BT * s.n_embd;
  c->bts = (size_t)c->BT;
  c->n = c->m.reg.numel_local;
  c->es = mt_dtype_bytes(t);
  /* O(0.5) weights: every norm weight, bias and product matters */
  void *w = rnd_t(t, c->n, -0.5, 0.5);
  c->params = ops->alloc(MT_MEM_PARAMS, c->n * c->es);
  c->grads = ops->alloc(MT_MEM_GRADS, c->n * 4);
  memcpy(c->params, w, c->n * c->es);
  free(w);
  for (int u = 0; u < c->m.reg.n_units; u++) {
    size_t at = c->m.reg.units[u].begin;
    mt_gpt_bind_params(&c->m, u, (mt_act *)((char *)c->params + at * c->es));
    mt_gpt_bind_grads(&c->m, u, c->grads + at);
  }
  c->inp = test_alloc((size_t)c->BT * sizeof(int));
  c->tgt = test_alloc((size_t)c->BT * sizeof(int));
  for (int i = 0; i < c->BT; i++) c->inp[i] = (int)(rng_next() % (uint64_t)s.vocab);
  for (int i = 0; i < c->BT; i++) c->tgt[i] = (int)(rng_next() % (uint64_t)s.vocab);
  return 0;
}

static void model_close(model_case *c) {
  ops->free(MT_MEM_PARAMS, c->params, c->n * c->es);
  ops->free(MT_MEM_GRADS, c->grads, c->n * 4);
  mt_gpt_destroy(&c->m);
  free(c->inp), free(c->tgt);
}

/* the whole model forward and backward, the fusion on or off */
static void model_step(model_case *c, int fuse, model_run *r) {
  mt_gpt *m = &c->m;
  const mt_gpt_acts *a = &m->a;
  m->fuse_norms = fuse;
  memset(c->grads, 0, c->n * 4);
  n_residual = n_residual_norm = 0;
  r->loss = mt_gpt_forward(m, c->inp, c->tgt, c->B);
  /* the forward's sums: each block's attention residual with its MLP's
   * norm; fused, every block's output with the next norm too (the last
   * block's with the final norm), none apart */
  char what[96];
  snprintf(what, sizeof what, "forward, fusion %s: %d sums apart, %d fused", fuse ? "on" : "off",
           n_residual, n_residual_norm);
  mt_check_true(what, fuse ? n_residual == 0 && n_residual_norm == 2 * c->L
                           : n_residual == c->L && n_residual_norm == c->L);
  mt_gpt_backward(m, 1.0f / (float)c->BT, NULL, NULL);
  r->res3 = dup_bytes(a->residual3, (size_t)c->L * c->btc * c->es);
  r->lnf = dup_bytes(a->lnf, c->btc * c->es);
  r->lnf_stats = test_alloc(2 * c->bts * 4);
  if (a->lnf_mean) memcpy(r->lnf_stats, a->lnf_mean, c->bts * 4);
  memcpy(r->lnf_stats + c->bts, a->lnf_rstd, c->bts * 4);
  r->ln1 = a->ln1 ? dup_bytes(a->ln1, (size_t)c->L * c->btc * c->es) : NULL;
  r->ln1_stats = a->ln1 ? test_alloc(2 * c->L * c->bts * 4) : NULL;
  if (a->ln1) {
    if (a->ln1_mean) memcpy(r->ln1_stats, a->ln1_mean, c->L * c->bts * 4);
    memcpy(r->ln1_stats + c->L * c->bts, a->ln1_rstd, c->L * c->bts * 4);
  }
  r->grads = dup_bytes(c->grads, c->n * 4);
}

static void run_free(model_run *r) {
  free(r->res3), free(r->lnf), free(r->ln1), free(r->lnf_stats), free(r->ln1_stats);
  free(r->grads);
}

/* The model's forward as two pipeline stages on this one rank: blocks [0,
 * k) with the embedding, then [k, L) with the head from the first range's
 * output (each stage's first block has no previous block to sum its input,
 * the first range's last block sums its own): the loss, the final norm and
 * the first range's output bit for bit the whole model's unfused. */
static int staged_forward_same(model_case *c, int k, const model_run *ref) {
  mt_gpt *m = &c->m;
  mt_gpt_acts s0, s1;
  size_t n0 = mt_gpt_acts_numel(m, k, c->B, 0), n1 = mt_gpt_acts_numel(m, c->L - k, c->B, 1);
  void *mem0 = ops->alloc(MT_MEM_ACTIV, n0 * 4), *mem1 = ops->alloc(MT_MEM_ACTIV, n1 * 4);
  mt_gpt_acts_bind(m, &s0, mem0, k, c->B, 0);
  mt_gpt_acts_bind(m, &s1, mem1, c->L - k, c->B, 1);
  m->fuse_norms = 1;
  mt_gpt_forward_range(m, &s0, 0, k, 1, 0, c->inp, c->tgt, c->B);
  const mt_act *mid = mt_gpt_range_output(m, &s0, k, c->B);
  ops->copy(m->dt, s1.encoded, mid, c->btc);
  double sum = mt_gpt_forward_range(m, &s1, k, c->L, 0, 1, c->inp, c->tgt, c->B);
  float loss = (float)(sum / (double)c->BT);
  int same = !memcmp(&loss, &ref->loss, 4) &&
             !memcmp(mid, (char *)ref->res3 + (size_t)(k - 1) * c->btc * c->es, c->btc * c->es) &&
             !memcmp(s1.lnf, ref->lnf, c->btc * c->es) &&
             !memcmp(s1.lnf_rstd, ref->lnf_stats + c->bts, c->bts * 4);
  ops->free(MT_MEM_ACTIV, mem0, n0 * 4);
  ops->free(MT_MEM_ACTIV, mem1, n1 * 4);
  return same;
}

static void model_case_run(const char *tag, const mt_model_shape *s, mt_dtype t, int recompute) {
  model_case c;
  if (model_open(&c, s, t, recompute) != 0) return;
  model_run ref, got;
  model_step(&c, 0, &ref);
  model_step(&c, 1, &got);
  const size_t res_bytes = (size_t)c.L * c.btc * c.es;
  int same = !memcmp(&got.loss, &ref.loss, 4) && !memcmp(got.res3, ref.res3, res_bytes) &&
             !memcmp(got.lnf, ref.lnf, c.btc * c.es) &&
             !memcmp(got.lnf_stats, ref.lnf_stats, 2 * c.bts * 4) &&
             (!ref.ln1 || (!memcmp(got.ln1, ref.ln1, res_bytes) &&
                           !memcmp(got.ln1_stats, ref.ln1_stats, 2 * c.L * c.bts * 4)));
  char what[160];
  snprintf(what, sizeof what, "%s %s%s: loss, activations = unfused (bits)", tag, tname(t),
           recompute ? " recompute" : "");
  mt_check_true(what, same);
  snprintf(what, sizeof what, "%s %s%s: every gradient = unfused (bits)", tag, tname(t),
           recompute ? " recompute" : "");
  mt_check_true(what, !memcmp(got.grads, ref.grads, c.n * 4));
  snprintf(what, sizeof what, "%s %s%s: two stages' forward = unfused (bits)", tag, tname(t),
           recompute ? " recompute" : "");
  mt_check_true(what, staged_forward_same(&c, c.L / 2, &ref) && staged_forward_same(&c, 1, &ref));
  run_free(&ref), run_free(&got);
  model_close(&c);
}

static void test_model_fusion(void) {
  printf("model: a block's output summed in the next norm\n");
  const mt_model_shape gpt2 = {.n_layer = 3, .n_embd = 32, .n_head = 2, .seq_len = 16,
                               .vocab = 50, .bias = 1};
  const mt_model_shape llama = {.n_layer = 3, .n_embd = 32, .n_head = 4, .seq_len = 16,
                                .vocab = 50, .arch = MT_ARCH_LLAMA, .n_kv_head = 2, .ffn = 24,
                                .norm_eps = 1e-5f, .rope_theta = 10000.0};
  const mt_dtype types[] = {MT_DT_F32, MT_DT_BF16};
  for (int ti = 0; ti < 2; ti++)
    for (int rc = 0; rc < 2; rc++) {
      model_case_run("gpt2", &gpt2, types[ti], rc);
      model_case_run("llama", &llama, types[ti], rc);
    }
}

int main(void) {
  g_rng = 0x9E3779B97F4A7C15ull;
  ops = cpu = mt_ops_cpu();
  counted = *cpu;
  counted.residual_forward = count_residual;
  counted.residual_layernorm_forward = count_residual_ln;
  counted.residual_rmsnorm_forward = count_residual_rms;
  mt_kernels_set_threads(2);
  printf("test_fused: %s, %d threads\n", ops->name, mt_kernels_threads());
  test_adamw_ranges();
  test_residual_norm();
  test_backward_first();
  test_gelu_bf16();
  test_swiglu_bf16();
  test_sumsq();
  test_model_fusion();
  return mt_check_summary("test_fused");
}
