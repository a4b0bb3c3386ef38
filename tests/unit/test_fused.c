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
 * Any failure prints "FAIL ..." and the test exits 1. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "../check.h"
#include "../test_rng.h"

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

int main(void) {
  g_rng = 0x9E3779B97F4A7C15ull;
  ops = mt_ops_cpu();
  mt_kernels_set_threads(2);
  printf("test_fused: %s, %d threads\n", ops->name, mt_kernels_threads());
  test_adamw_ranges();
  test_residual_norm();
  return mt_check_summary("test_fused");
}
