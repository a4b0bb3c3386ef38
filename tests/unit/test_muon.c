/* Muon's pieces that every rank computes alike (lib/optim/muon.c):
 *   - the Newton-Schulz iteration maps each singular value s of G / |G|_F
 *     through the quintic p five times and keeps the singular vectors: the
 *     singular values of the output are p^5 of the input's (checked against
 *     a Jacobi eigensolver in double), inside the polynomial's band [0.68,
 *     1.14] for rectangular random matrices, wide and tall alike (the tall
 *     path's column Gram is the wide path's transposed), and in bf16 within
 *     bf16's rounding of the fp32 result;
 *   - which tensors Muon takes (matrices, not vocabularies, positions,
 *     vectors or the router);
 *   - the owners: deterministic, and balanced (busiest / mean <= 1.10) for
 *     gpt2-124m and a Llama-3-8B over dp 8, and over dp 4 x tp 2. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "optim/muon.h"
#include "../test_rng.h"

/* eigenvalues of the symmetric n x n a (destroyed) by cyclic Jacobi */
static void jacobi_eig(double *a, int n, double *ev) {
  for (int sweep = 0; sweep < 100; sweep++) {
    double off = 0.0;
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++) off += a[i * n + j] * a[i * n + j];
    if (off < 1e-22) break;
    for (int p = 0; p < n; p++)
      for (int q = p + 1; q < n; q++) {
        double apq = a[p * n + q];
        if (fabs(apq) < 1e-300) continue;
        double th = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
        double t = (th >= 0 ? 1.0 : -1.0) / (fabs(th) + sqrt(th * th + 1.0));
        double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
        for (int k = 0; k < n; k++) { /* columns p, q */
          double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (int k = 0; k < n; k++) { /* rows p, q */
          double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
      }
  }
  for (int i = 0; i < n; i++) ev[i] = a[i * n + i];
}

static int cmp_double(const void *x, const void *y) {
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* the min(r, c) singular values of the r x c w, ascending */
static void singular_values(const float *w, int r, int c, double *sv) {
  int m = r < c ? r : c;
  double *g = calloc((size_t)m * m, sizeof *g);
  for (int i = 0; i < m; i++)
    for (int j = 0; j < m; j++) {
      double s = 0.0;
      if (r <= c)
        for (int k = 0; k < c; k++) s += (double)w[i * c + k] * w[j * c + k];
      else
        for (int k = 0; k < r; k++) s += (double)w[k * c + i] * w[k * c + j];
      g[i * m + j] = s;
    }
  jacobi_eig(g, m, sv);
  for (int i = 0; i < m; i++) sv[i] = sqrt(sv[i] > 0 ? sv[i] : 0);
  qsort(sv, (size_t)m, sizeof *sv, cmp_double);
  free(g);
}

static double quintic(double s, int steps) {
  for (int i = 0; i < steps; i++)
    s = MT_MUON_NS_A * s + MT_MUON_NS_B * s * s * s + MT_MUON_NS_C * s * s * s * s * s;
  return s;
}

/* orthogonalise a copy of g (r x c) in t; out gets the result */
static void ortho(const mt_ops *ops, mt_dtype t, const float *g, int r, int c, float *out) {
  size_t n = (size_t)r * c, m = (size_t)(r < c ? r : c);
  void *scratch = ops->alloc(MT_MEM_OPTIM, mt_muon_ns_scratch_bytes(n, m * m, t));
  memcpy(out, g, n * sizeof(float));
  mt_muon_orthogonalize(ops, t, out, r, c, 5, scratch);
  ops->free(MT_MEM_OPTIM, scratch, mt_muon_ns_scratch_bytes(n, m * m, t));
}

static void test_iteration(const mt_ops *ops) {
  const int shapes[][2] = {{24, 80}, {80, 24}, {48, 64}, {96, 40}};
  for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
    const int r = shapes[k][0], c = shapes[k][1], m = r < c ? r : c;
    const size_t n = (size_t)r * c;
    float *g = malloc(n * sizeof *g), *o = malloc(n * sizeof *o), *ob = malloc(n * sizeof *ob);
    float *gt = malloc(n * sizeof *gt), *ot = malloc(n * sizeof *ot);
    g_rng = 1000 + k;
    for (size_t i = 0; i < n; i++) g[i] = rng_uniform(-1.0f, 1.0f);
    double *sg = malloc((size_t)m * sizeof *sg), *so = malloc((size_t)m * sizeof *so);
    singular_values(g, r, c, sg);
    double fro = 0.0;
    for (size_t i = 0; i < n; i++) fro += (double)g[i] * g[i];
    fro = sqrt(fro);
    /* the band holds for inputs of at least 1e-2 |G|_F (muon.h) */
    MT_CHECK(sg[0] / fro >= 1e-2, "%dx%d: smallest singular value %.3g |G|_F", r, c, sg[0] / fro);
    for (int i = 0; i < m; i++) sg[i] = quintic(sg[i] / fro, 5);
    qsort(sg, (size_t)m, sizeof *sg, cmp_double);
    ortho(ops, MT_DT_F32, g, r, c, o);
    singular_values(o, r, c, so);
    double worst = 0.0, lo = 1e9, hi = -1e9;
    for (int i = 0; i < m; i++) {
      worst = mt_worst(worst, fabs(so[i] - sg[i]));
      lo = so[i] < lo ? so[i] : lo;
      hi = so[i] > hi ? so[i] : hi;
    }
    char what[96];
    snprintf(what, sizeof what, "%dx%d fp32: singular values = p^5(input's)", r, c);
    mt_check_err(what, worst, 1e-4);
    snprintf(what, sizeof what, "%dx%d fp32: in [0.68, 1.14] (%.3f..%.3f)", r, c, lo, hi);
    mt_check_true(what, lo >= 0.68 && hi <= 1.14);
    /* the transpose through the other path: O(G^T) = O(G)^T */
    for (int i = 0; i < r; i++)
      for (int j = 0; j < c; j++) gt[(size_t)j * r + i] = g[(size_t)i * c + j];
    ortho(ops, MT_DT_F32, gt, c, r, ot);
    double tr = 0.0;
    for (int i = 0; i < r; i++)
      for (int j = 0; j < c; j++)
        tr = mt_worst(tr, fabs(ot[(size_t)j * r + i] - o[(size_t)i * c + j]));
    snprintf(what, sizeof what, "%dx%d: the other side's Gram, transposed", r, c);
    mt_check_err(what, tr, 1e-4);
    /* bf16: the same singular values within bf16's rounding over five steps */
    ortho(ops, MT_DT_BF16, g, r, c, ob);
    singular_values(ob, r, c, so);
    double wb = 0.0;
    for (int i = 0; i < m; i++) wb = mt_worst(wb, fabs(so[i] - sg[i]));
    snprintf(what, sizeof what, "%dx%d bf16: singular values", r, c);
    mt_check_err(what, wb, 0.06);
    free(g), free(o), free(ob), free(gt), free(ot), free(sg), free(so);
  }
}

static void test_takes(void) {
  mt_model_shape s;
  mt_model_preset(MT_PRESET_TINY, &s);
  s.moe_experts = 4;
  s.moe_topk = 2;
  s.moe_every = 1;
  s.moe_ffn = 32;
  mt_registry r;
  mt_err e = {0};
  MT_CHECK(mt_gpt_register(&r, &s, 1, 0, 0, &e) == 0, "register: %s", e.msg);
  const char *no[] = {"wte.weight", "wpe.weight", "blocks.0.ln1.weight", "blocks.0.attn.qkv.bias",
                      "blocks.0.moe.router.weight", "lnf.weight"};
  const char *yes[] = {"blocks.0.attn.qkv.weight", "blocks.0.attn.proj.weight",
                       "blocks.0.moe.experts.fc.weight", "blocks.0.moe.experts.proj.weight"};
  for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
    int k = mt_registry_find(&r, no[i]);
    MT_CHECK(k >= 0 && !mt_muon_takes(&r.t[k], "router"), "Muon takes %s", no[i]);
  }
  for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
    int k = mt_registry_find(&r, yes[i]);
    MT_CHECK(k >= 0 && mt_muon_takes(&r.t[k], "router"), "Muon leaves %s", yes[i]);
  }
  int k = mt_registry_find(&r, "blocks.0.attn.proj.weight");
  MT_CHECK(!mt_muon_takes(&r.t[k], "router, attn.proj"), "muon_exclude's list not applied");
  mt_muon_matrix *m;
  int n = mt_muon_matrices(&r, "router", 5, &m), experts = 0;
  for (int i = 0; i < n; i++) experts += m[i].group == MT_GROUP_EDP;
  MT_CHECK(experts == 2 * 4 * s.n_layer, "%d expert matrices, want %d", experts, 8 * s.n_layer);
  free(m);
  mt_registry_free(&r);
}

/* busiest / mean of the owners over dp x tp for a preset */
static void test_balance(mt_preset preset, const char *name, int dp, int tp) {
  mt_model_shape s;
  mt_model_preset(preset, &s);
  mt_registry r;
  mt_err e = {0};
  MT_CHECK(mt_gpt_register(&r, &s, tp, 0, 0, &e) == 0, "%s: register: %s", name, e.msg);
  mt_muon_matrix *m, *m2;
  int n = mt_muon_matrices(&r, "router", 5, &m);
  mt_muon_matrices(&r, "router", 5, &m2);
  mt_muon_assign(m, n, MT_GROUP_DP, dp, tp);
  mt_muon_assign(m2, n, MT_GROUP_DP, dp, tp);
  int same = 1;
  for (int i = 0; i < n; i++) same &= m[i].owner_g == m2[i].owner_g && m[i].owner_s == m2[i].owner_s;
  double most = 0.0, total = 0.0;
  for (int q = 0; q < dp; q++)
    for (int t = 0; t < tp; t++) {
      double f = mt_muon_owned_flops(m, n, MT_GROUP_DP, q, t);
      most = f > most ? f : most;
      total += f;
    }
  double ratio = most / (total / (dp * tp));
  char what[128];
  snprintf(what, sizeof what, "%s over dp %d x tp %d: %d matrices, busiest / mean", name, dp, tp, n);
  mt_check_err(what, ratio - 1.0, 0.10);
  snprintf(what, sizeof what, "%s: the assignment is the same twice", name);
  mt_check_true(what, same);
  free(m);
  free(m2);
  mt_registry_free(&r);
}

int main(void) {
  const mt_ops *ops = mt_ops_cpu();
  test_iteration(ops);
  test_takes();
  test_balance(MT_PRESET_GPT2_124M, "gpt2-124m", 8, 1);
  test_balance(MT_PRESET_LLAMA3_8B, "llama3-8b", 8, 1);
  test_balance(MT_PRESET_LLAMA3_8B, "llama3-8b", 4, 2);
  return mt_check_summary("test_muon");
}
