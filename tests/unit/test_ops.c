/* test_ops: every op of the CPU op table against an independent reference.
 *
 * - Every backward op against central finite differences of the scalar loss
 *   L = sum(out * R), R a fixed random tensor, L accumulated in double. The
 *   ops are fp32, so the difference quotient uses the perturbation actually
 *   stored in float: (L(x+) - L(x-)) / (x+ - x-).
 *   Error measure, per element: |analytic - numeric| / max(|analytic|,
 *   |numeric|, 1e-2) (the floor keeps near-zero entries from dividing fp32
 *   rounding noise by ~0); the test asserts its maximum over the tensor.
 *   Tolerance FD_TOL = 5e-3 with FD_EPS = 1e-2; the worst observed is ~1e-3
 *   (layernorm dinp), the others <= 5e-4 (the maxima are printed).
 * - matmul_forward and attention_forward against naive loops in double, and
 *   attention_backward against a naive double backward at T = 130 (more than
 *   one 64-row block, the last one partial).
 * - softmax_xent: padded columns get probability exactly 0 and gradient
 *   exactly 0; loss = -log p[target]; in-place (aliased) calls.
 * - adamw_update against a scalar double reference for 3 steps.
 * - rmsnorm, swiglu and rope (the Llama block's) against double formulas and
 *   finite differences; rope's inverse undoes it.
 * - Positions given per row (chunks of context parallelism, documents):
 *   rope and the encoder read the table row of each row's position, and
 *   the encoder's dwpe adds the rows that share a position in row order
 *   (bit for bit against loops doing the same).
 * - mt_doc_starts: documents begin at each end-of-text token and at 0.
 * - Backward ops accumulate: a second call doubles the gradient.
 * - Determinism: attention forward+backward twice at 2 threads, same bits.
 * Any mismatch prints "FAIL: <op> ..." and the test exits 1. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "../check.h"
#include "../test_rng.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FD_TOL 5e-3
/* naive double references vs fp32 kernels: error relative to the largest
 * reference magnitude of the tensor */
#define REF_TOL 1e-5
/* "calling twice doubles the gradient": the second call adds onto a non-zero
 * gradient, so sgemm may round differently; relative to the gradient's max */
#define ACCUM_TOL 1e-6

static const mt_ops *ops;

/* ------------------------------------------------------------------ */
/* helpers                                                             */

static float *filled(size_t n, float value) {
  float *x = zeros(n);
  for (size_t i = 0; i < n; i++) x[i] = value;
  return x;
}

static float *copy_of(const float *x, size_t n) {
  float *y = zeros(n);
  memcpy(y, x, n * sizeof(float));
  return y;
}

/* max_i |a_i - ref_i| / max_i |ref_i| */
static double rel_err_max(const float *a, const double *ref, size_t n) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; i++) {
    diff = mt_worst(diff, fabs((double)a[i] - ref[i]));
    if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
  }
  return diff / (scale > 0.0 ? scale : 1.0);
}

/* gradient g2 after two calls vs twice g1 after one call */
static double accum_err(const float *g1, const float *g2, size_t n) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; i++) {
    diff = mt_worst(diff, fabs((double)g2[i] - 2.0 * (double)g1[i]));
    if (fabs(g1[i]) > scale) scale = fabs(g1[i]);
  }
  return scale > 0.0 ? diff / (2.0 * scale) : (diff == 0.0 ? 0.0 : INFINITY); /* NaN: fails */
}

/* ------------------------------------------------------------------ */
/* encoder                                                             */

typedef struct {
  int B, T, C;
  const int *inp;
  float *wte, *wpe, *out;
  const float *R;
} encoder_ctx;

static double encoder_loss(void *p) {
  encoder_ctx *c = p;
  ops->encoder_forward(MT_DT_F32, c->out, c->inp, c->wte, c->wpe, c->B, c->T, c->C);
  return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

static void test_encoder(void) {
  printf("encoder\n");
  int B = 2, T = 5, C = 8, V = 11, Vp = 16;
  size_t n_out = (size_t)B * T * C;
  int inp[10] = {3, 7, 3, 0, 10, 5, 3, 10, 1, 2}; /* repeats: rows accumulate */
  float *wte = rand_tensor((size_t)Vp * C, -1, 1), *wpe = rand_tensor((size_t)T * C, -1, 1);
  float *out = zeros(n_out), *R = rand_tensor(n_out, -1, 1);
  encoder_ctx ctx = {B, T, C, inp, wte, wpe, out, R};
  encoder_loss(&ctx);
  int exact = 1;
  for (int bt = 0; bt < B * T; bt++)
    for (int c = 0; c < C; c++)
      exact &= out[(size_t)bt * C + c] ==
               wte[(size_t)inp[bt] * C + c] + wpe[(size_t)(bt % T) * C + c];
  mt_check_true("encoder_forward == wte[token] + wpe[t]", exact);

  float *dwte = zeros((size_t)Vp * C), *dwpe = zeros((size_t)T * C);
  ops->encoder_backward(MT_DT_F32, dwte, dwpe, R, inp, B, T, C);
  int pad_rows_zero = 1; /* token ids are < V: padding rows V..Vp-1 get nothing */
  for (size_t i = (size_t)V * C; i < (size_t)Vp * C; i++) pad_rows_zero &= dwte[i] == 0.0f;
  mt_check_true("encoder_backward leaves padding rows at 0", pad_rows_zero);
  mt_check_err("encoder_backward dwte vs finite diff",
               gradcheck(encoder_loss, &ctx, wte, dwte, (size_t)Vp * C, 1), FD_TOL);
  mt_check_err("encoder_backward dwpe vs finite diff",
               gradcheck(encoder_loss, &ctx, wpe, dwpe, (size_t)T * C, 1), FD_TOL);

  float *dwte1 = copy_of(dwte, (size_t)Vp * C), *dwpe1 = copy_of(dwpe, (size_t)T * C);
  ops->encoder_backward(MT_DT_F32, dwte, dwpe, R, inp, B, T, C);
  mt_check_err("encoder_backward accumulates (dwte x2)", accum_err(dwte1, dwte, (size_t)Vp * C),
               ACCUM_TOL);
  mt_check_err("encoder_backward accumulates (dwpe x2)", accum_err(dwpe1, dwpe, (size_t)T * C),
               ACCUM_TOL);
  free(wte), free(wpe), free(out), free(R), free(dwte), free(dwpe), free(dwte1), free(dwpe1);
}

/* ------------------------------------------------------------------ */
/* layernorm                                                           */

typedef struct {
  int N, C;
  float *inp, *w, *b, *out, *mean, *rstd;
  const float *R;
} layernorm_ctx;

static double layernorm_loss(void *p) {
  layernorm_ctx *c = p;
  ops->layernorm_forward(MT_DT_F32, c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
  return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_layernorm(void) {
  printf("layernorm\n");
  int N = 10, C = 8;
  size_t n = (size_t)N * C;
  float *inp = rand_tensor(n, -2, 2), *w = rand_tensor(C, 0.5f, 1.5f), *b = rand_tensor(C, -1, 1);
  float *out = zeros(n), *mean = zeros(N), *rstd = zeros(N), *R = rand_tensor(n, -1, 1);
  layernorm_ctx ctx = {N, C, inp, w, b, out, mean, rstd, R};
  layernorm_loss(&ctx);

  double *ref = malloc(n * sizeof(double));
  for (int i = 0; i < N; i++) {
    double m = 0.0, v = 0.0;
    for (int c = 0; c < C; c++) m += inp[i * C + c];
    m /= C;
    for (int c = 0; c < C; c++) v += (inp[i * C + c] - m) * (inp[i * C + c] - m);
    v /= C;
    for (int c = 0; c < C; c++)
      ref[i * C + c] = (inp[i * C + c] - m) / sqrt(v + 1e-5) * w[c] + b[c];
  }
  mt_check_err("layernorm_forward vs double reference", rel_err_max(out, ref, n), REF_TOL);
  free(ref);

  float *dinp = zeros(n), *dw = zeros(C), *db = zeros(C);
  ops->layernorm_backward(MT_DT_F32, dinp, dw, db, R, inp, w, mean, rstd, N, C);
  mt_check_err("layernorm_backward dinp vs finite diff",
               gradcheck(layernorm_loss, &ctx, inp, dinp, n, 1), FD_TOL);
  mt_check_err("layernorm_backward dw vs finite diff", gradcheck(layernorm_loss, &ctx, w, dw, C, 1),
               FD_TOL);
  mt_check_err("layernorm_backward db vs finite diff", gradcheck(layernorm_loss, &ctx, b, db, C, 1),
               FD_TOL);

  layernorm_loss(&ctx); /* mean/rstd of the unperturbed input */
  float *dinp1 = copy_of(dinp, n), *dw1 = copy_of(dw, C), *db1 = copy_of(db, C);
  ops->layernorm_backward(MT_DT_F32, dinp, dw, db, R, inp, w, mean, rstd, N, C);
  mt_check_err("layernorm_backward accumulates (dinp x2)", accum_err(dinp1, dinp, n), ACCUM_TOL);
  mt_check_err("layernorm_backward accumulates (dw x2)", accum_err(dw1, dw, C), ACCUM_TOL);
  mt_check_err("layernorm_backward accumulates (db x2)", accum_err(db1, db, C), ACCUM_TOL);
  free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(R);
  free(dinp), free(dw), free(db), free(dinp1), free(dw1), free(db1);
}

/* ------------------------------------------------------------------ */
/* matmul                                                              */

typedef struct {
  int N, C, OC;
  float *inp, *w, *bias, *out;
  const float *R;
} matmul_ctx;

static double matmul_loss(void *p) {
  matmul_ctx *c = p;
  ops->matmul_forward(MT_DT_F32, c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
  return dot(c->out, c->R, (size_t)c->N * c->OC);
}

/* out (N,OC) = inp (N,C) @ w^T + bias, naive and in double */
static void matmul_reference(double *out, const float *inp, const float *w, const float *bias,
                             int N, int C, int OC) {
  for (int i = 0; i < N; i++)
    for (int o = 0; o < OC; o++) {
      double s = bias ? bias[o] : 0.0;
      for (int c = 0; c < C; c++) s += (double)inp[i * C + c] * w[o * C + c];
      out[(size_t)i * OC + o] = s;
    }
}

static void test_matmul(void) {
  printf("matmul\n");
  /* forward against naive loops, odd sizes, with and without bias */
  {
    int N = 37, C = 70, OC = 45;
    float *inp = rand_tensor((size_t)N * C, -1, 1), *w = rand_tensor((size_t)OC * C, -1, 1);
    float *bias = rand_tensor(OC, -1, 1), *out = zeros((size_t)N * OC);
    double *ref = malloc((size_t)N * OC * sizeof(double));
    ops->matmul_forward(MT_DT_F32, out, inp, w, bias, N, C, OC);
    matmul_reference(ref, inp, w, bias, N, C, OC);
    mt_check_err("matmul_forward vs naive loops (bias)", rel_err_max(out, ref, (size_t)N * OC),
                 REF_TOL);
    ops->matmul_forward(MT_DT_F32, out, inp, w, NULL, N, C, OC);
    matmul_reference(ref, inp, w, NULL, N, C, OC);
    mt_check_err("matmul_forward vs naive loops (no bias)", rel_err_max(out, ref, (size_t)N * OC),
                 REF_TOL);
    free(inp), free(w), free(bias), free(out), free(ref);
  }
  int N = 10, C = 8, OC = 12;
  float *inp = rand_tensor((size_t)N * C, -1, 1), *w = rand_tensor((size_t)OC * C, -1, 1);
  float *bias = rand_tensor(OC, -1, 1), *out = zeros((size_t)N * OC);
  float *R = rand_tensor((size_t)N * OC, -1, 1);
  matmul_ctx ctx = {N, C, OC, inp, w, bias, out, R};
  float *dinp = zeros((size_t)N * C), *dw = zeros((size_t)OC * C), *dbias = zeros(OC);
  ops->matmul_backward(MT_DT_F32, dinp, dw, dbias, R, inp, w, N, C, OC);
  mt_check_err("matmul_backward dinp vs finite diff",
               gradcheck(matmul_loss, &ctx, inp, dinp, (size_t)N * C, 1), FD_TOL);
  mt_check_err("matmul_backward dw vs finite diff",
               gradcheck(matmul_loss, &ctx, w, dw, (size_t)OC * C, 1), FD_TOL);
  mt_check_err("matmul_backward dbias vs finite diff",
               gradcheck(matmul_loss, &ctx, bias, dbias, OC, 1), FD_TOL);

  float *dinp1 = copy_of(dinp, (size_t)N * C), *dw1 = copy_of(dw, (size_t)OC * C);
  float *dbias1 = copy_of(dbias, OC);
  ops->matmul_backward(MT_DT_F32, dinp, dw, dbias, R, inp, w, N, C, OC);
  mt_check_err("matmul_backward accumulates (dinp x2)", accum_err(dinp1, dinp, (size_t)N * C),
               ACCUM_TOL);
  mt_check_err("matmul_backward accumulates (dw x2)", accum_err(dw1, dw, (size_t)OC * C),
               ACCUM_TOL);
  mt_check_err("matmul_backward accumulates (dbias x2)", accum_err(dbias1, dbias, OC), ACCUM_TOL);
  free(inp), free(w), free(bias), free(out), free(R);
  free(dinp), free(dw), free(dbias), free(dinp1), free(dw1), free(dbias1);
}

/* ------------------------------------------------------------------ */
/* attention                                                           */

typedef struct {
  int B, T, C, NH;
  float *qkv, *out, *att;
  const float *R;
} attention_ctx;

static double attention_loss(void *p) {
  attention_ctx *c = p;
  ops->attention_forward(c->out, c->att, c->qkv, c->B, c->T, c->C, c->NH);
  return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

/* Naive causal attention in double: out (B,T,C), att (B,NH,T,T) and, when
 * dout is given, dqkv (B,T,3C) = gradient of sum(out * dout). */
static void attention_reference(double *out, double *att, double *dqkv, const float *qkv,
                                const float *dout, int B, int T, int C, int NH) {
  int hs = C / NH, C3 = 3 * C;
  double scale = 1.0 / sqrt((double)hs);
  double *dp = malloc((size_t)T * sizeof(double));
  if (dqkv) memset(dqkv, 0, (size_t)B * T * C3 * sizeof(double));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++) {
      const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
      double *P = att + ((size_t)b * NH + h) * T * T;
#define Q(t, d) ((double)base[(size_t)(t) * C3 + (d)])
#define K(t, d) ((double)base[(size_t)(t) * C3 + C + (d)])
#define V(t, d) ((double)base[(size_t)(t) * C3 + 2 * C + (d)])
      for (int t = 0; t < T; t++) {
        double maxv = -INFINITY;
        for (int j = 0; j < T; j++) {
          double s = 0.0;
          for (int d = 0; d < hs; d++) s += Q(t, d) * K(j, d);
          P[(size_t)t * T + j] = s * scale;
          if (j <= t && s * scale > maxv) maxv = s * scale;
        }
        double sum = 0.0;
        for (int j = 0; j <= t; j++) sum += exp(P[(size_t)t * T + j] - maxv);
        for (int j = 0; j < T; j++)
          P[(size_t)t * T + j] = j <= t ? exp(P[(size_t)t * T + j] - maxv) / sum : 0.0;
        for (int d = 0; d < hs; d++) {
          double o = 0.0;
          for (int j = 0; j <= t; j++) o += P[(size_t)t * T + j] * V(j, d);
          out[((size_t)b * T + t) * C + h * hs + d] = o;
        }
      }
      if (!dqkv) continue;
      double *dbase = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
      for (int t = 0; t < T; t++) {
        const float *dO = dout + ((size_t)b * T + t) * C + h * hs;
        double rowdot = 0.0;
        for (int j = 0; j <= t; j++) {
          dp[j] = 0.0;
          for (int d = 0; d < hs; d++) dp[j] += dO[d] * V(j, d);
          rowdot += dp[j] * P[(size_t)t * T + j];
        }
        for (int j = 0; j <= t; j++) {
          double p = P[(size_t)t * T + j], ds = p * (dp[j] - rowdot);
          for (int d = 0; d < hs; d++) {
            dbase[(size_t)j * C3 + 2 * C + d] += p * dO[d];          /* dV */
            dbase[(size_t)t * C3 + d] += scale * ds * K(j, d);       /* dQ */
            dbase[(size_t)j * C3 + C + d] += scale * ds * Q(t, d);   /* dK */
          }
        }
      }
#undef Q
#undef K
#undef V
    }
  free(dp);
}

static void test_attention(void) {
  printf("attention\n");
  /* small: every element of dqkv against finite differences */
  {
    int B = 2, T = 5, C = 8, NH = 2;
    size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    float *qkv = rand_tensor(n_qkv, -1, 1), *out = zeros(n_out), *att = zeros(n_att);
    float *R = rand_tensor(n_out, -1, 1), *dqkv = zeros(n_qkv), *datt = zeros(n_att);
    attention_ctx ctx = {B, T, C, NH, qkv, out, att, R};
    attention_loss(&ctx);
    ops->attention_backward(dqkv, datt, R, qkv, att, B, T, C, NH);
    mt_check_err("attention_backward dqkv vs finite diff (T=5)",
                 gradcheck(attention_loss, &ctx, qkv, dqkv, n_qkv, 1), FD_TOL);
    attention_loss(&ctx);
    float *dqkv1 = copy_of(dqkv, n_qkv);
    ops->attention_backward(dqkv, datt, R, qkv, att, B, T, C, NH);
    mt_check_err("attention_backward accumulates (dqkv x2)", accum_err(dqkv1, dqkv, n_qkv),
                 ACCUM_TOL);
    free(qkv), free(out), free(att), free(R), free(dqkv), free(datt), free(dqkv1);
  }
  /* T = 130: three 64-row blocks, the last partial; naive double reference */
  {
    int B = 2, T = 130, C = 32, NH = 4;
    size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
    float *qkv = rand_tensor(n_qkv, -2, 2), *out = zeros(n_out), *att = zeros(n_att);
    float *dout = rand_tensor(n_out, -1, 1), *dqkv = zeros(n_qkv), *datt = zeros(n_att);
    double *out_ref = malloc(n_out * sizeof(double)), *att_ref = malloc(n_att * sizeof(double));
    double *dqkv_ref = malloc(n_qkv * sizeof(double));
    ops->attention_forward(out, att, qkv, B, T, C, NH);
    ops->attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
    attention_reference(out_ref, att_ref, dqkv_ref, qkv, dout, B, T, C, NH);
    mt_check_err("attention_forward out vs naive loops (T=130)", rel_err_max(out, out_ref, n_out),
                 REF_TOL);
    mt_check_err("attention_forward att vs naive loops (T=130)", rel_err_max(att, att_ref, n_att),
                 REF_TOL);
    int upper_zero = 1;
    for (int bh = 0; bh < B * NH; bh++)
      for (int t = 0; t < T; t++)
        for (int j = t + 1; j < T; j++) upper_zero &= att[((size_t)bh * T + t) * T + j] == 0.0f;
    mt_check_true("attention_forward att is exactly 0 above diagonal", upper_zero);
    mt_check_err("attention_backward dqkv vs naive double (T=130)",
                 rel_err_max(dqkv, dqkv_ref, n_qkv), REF_TOL);
    free(qkv), free(out), free(att), free(dout), free(dqkv), free(datt);
    free(out_ref), free(att_ref), free(dqkv_ref);
  }
}

/* Same inputs, two runs of forward + backward at 2 threads: same bits. */
static void test_determinism(void) {
  printf("determinism (2 threads)\n");
  int saved = mt_kernels_threads();
  mt_kernels_set_threads(2);
  int B = 4, T = 100, C = 64, NH = 4;
  size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C, n_att = (size_t)B * NH * T * T;
  float *qkv = rand_tensor(n_qkv, -2, 2), *dout = rand_tensor(n_out, -1, 1);
  float *out[2], *att[2], *dqkv[2], *datt[2];
  for (int run = 0; run < 2; run++) {
    out[run] = zeros(n_out), att[run] = zeros(n_att), dqkv[run] = zeros(n_qkv);
    datt[run] = zeros(n_att);
    ops->attention_forward(out[run], att[run], qkv, B, T, C, NH);
    ops->attention_backward(dqkv[run], datt[run], dout, qkv, att[run], B, T, C, NH);
  }
  mt_check_true("attention_forward out identical across runs",
                memcmp(out[0], out[1], n_out * sizeof(float)) == 0);
  mt_check_true("attention_forward att identical across runs",
                memcmp(att[0], att[1], n_att * sizeof(float)) == 0);
  mt_check_true("attention_backward dqkv identical across runs",
                memcmp(dqkv[0], dqkv[1], n_qkv * sizeof(float)) == 0);
  for (int run = 0; run < 2; run++)
    free(out[run]), free(att[run]), free(dqkv[run]), free(datt[run]);

  /* grad-norm clipping relies on sumsq agreeing everywhere: also across
   * thread counts */
  size_t n = 1000003;
  float *x = rand_tensor(n, -1, 1);
  double s2 = ops->sumsq(MT_DT_F32, x, n);
  mt_kernels_set_threads(1);
  double s1 = ops->sumsq(MT_DT_F32, x, n);
  mt_check_true("sumsq identical at 1 and 2 threads", memcmp(&s1, &s2, sizeof s1) == 0);
  free(x), free(qkv), free(dout);
  mt_kernels_set_threads(saved);
}

/* ------------------------------------------------------------------ */
/* gelu, residual                                                      */

typedef struct {
  size_t n;
  float *inp, *out;
  const float *R;
} gelu_ctx;

static double gelu_loss(void *p) {
  gelu_ctx *c = p;
  ops->gelu_forward(MT_DT_F32, c->out, c->inp, c->n);
  return dot(c->out, c->R, c->n);
}

static void test_gelu_residual(void) {
  printf("gelu, residual\n");
  size_t n = 64;
  float *inp = rand_tensor(n, -4, 4), *out = zeros(n), *R = rand_tensor(n, -1, 1);
  gelu_ctx ctx = {n, inp, out, R};
  gelu_loss(&ctx);
  double *ref = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    double x = inp[i];
    double u = sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x);
    ref[i] = 0.5 * x * (1.0 + tanh(u));
  }
  mt_check_err("gelu_forward vs double tanh formula", rel_err_max(out, ref, n), REF_TOL);
  float *dinp = zeros(n);
  ops->gelu_backward(MT_DT_F32, dinp, inp, R, n);
  mt_check_err("gelu_backward dinp vs finite diff", gradcheck(gelu_loss, &ctx, inp, dinp, n, 1),
               FD_TOL);
  float *dinp1 = copy_of(dinp, n);
  ops->gelu_backward(MT_DT_F32, dinp, inp, R, n);
  mt_check_err("gelu_backward accumulates (dinp x2)", accum_err(dinp1, dinp, n), ACCUM_TOL);

  float *a = rand_tensor(n, -1, 1), *b = rand_tensor(n, -1, 1), *sum = zeros(n);
  ops->residual_forward(MT_DT_F32, sum, a, b, n);
  int exact = 1;
  for (size_t i = 0; i < n; i++) exact &= sum[i] == a[i] + b[i];
  mt_check_true("residual_forward == a + b", exact);
  free(inp), free(out), free(R), free(ref), free(dinp), free(dinp1), free(a), free(b), free(sum);
}

/* ------------------------------------------------------------------ */
/* the Llama block's ops: RMSNorm, SwiGLU, rotary embedding            */

typedef struct {
  int N, C, F, T, nh, hs, inverse;
  float *inp, *w, *out, *rstd, *cs;
  const float *R;
} llama_ctx;

static double rmsnorm_loss(void *p) {
  llama_ctx *c = p;
  ops->rmsnorm_forward(MT_DT_F32, c->out, c->rstd, c->inp, c->w, c->N, c->C, 1e-5f);
  return dot(c->out, c->R, (size_t)c->N * c->C);
}

static double swiglu_loss(void *p) {
  llama_ctx *c = p;
  ops->swiglu_forward(MT_DT_F32, c->out, c->inp, c->N, c->F);
  return dot(c->out, c->R, (size_t)c->N * c->F);
}

/* rope in place: out = rope(copy of inp), rows (N = B T) of nh heads at ld nh hs */
static double rope_loss(void *p) {
  llama_ctx *c = p;
  size_t n = (size_t)c->N * c->nh * c->hs;
  memcpy(c->out, c->inp, n * sizeof(float));
  ops->rope(MT_DT_F32, c->out, (size_t)c->nh * c->hs, c->N / c->T, c->T, c->nh, c->hs, c->cs,
            NULL, c->inverse);
  return dot(c->out, c->R, n);
}

static void test_llama_ops(void) {
  printf("rmsnorm, swiglu, rope\n");
  int N = 10, C = 8, F = 6;
  size_t n = (size_t)N * C;
  float *inp = rand_tensor(n, -2, 2), *w = rand_tensor(C, 0.5f, 1.5f), *out = zeros(n);
  float *rstd = zeros(N), *R = rand_tensor(n, -1, 1);
  llama_ctx ctx = {.N = N, .C = C, .inp = inp, .w = w, .out = out, .rstd = rstd, .R = R};
  rmsnorm_loss(&ctx);
  double *ref = malloc(n * sizeof(double));
  for (int i = 0; i < N; i++) {
    double ss = 0.0;
    for (int c = 0; c < C; c++) ss += (double)inp[i * C + c] * inp[i * C + c];
    for (int c = 0; c < C; c++) ref[i * C + c] = inp[i * C + c] / sqrt(ss / C + 1e-5) * w[c];
  }
  mt_check_err("rmsnorm_forward vs double reference", rel_err_max(out, ref, n), REF_TOL);
  float *dinp = zeros(n), *dw = zeros(C);
  ops->rmsnorm_backward(MT_DT_F32, dinp, dw, R, inp, w, rstd, N, C);
  mt_check_err("rmsnorm_backward dinp vs finite diff",
               gradcheck(rmsnorm_loss, &ctx, inp, dinp, n, 1), FD_TOL);
  mt_check_err("rmsnorm_backward dw vs finite diff", gradcheck(rmsnorm_loss, &ctx, w, dw, C, 1),
               FD_TOL);
  rmsnorm_loss(&ctx);
  float *dinp1 = copy_of(dinp, n), *dw1 = copy_of(dw, C);
  ops->rmsnorm_backward(MT_DT_F32, dinp, dw, R, inp, w, rstd, N, C);
  mt_check_err("rmsnorm_backward accumulates (dinp x2)", accum_err(dinp1, dinp, n), ACCUM_TOL);
  mt_check_err("rmsnorm_backward accumulates (dw x2)", accum_err(dw1, dw, C), ACCUM_TOL);
  free(inp), free(w), free(out), free(rstd), free(R), free(ref), free(dinp), free(dw);
  free(dinp1), free(dw1);

  /* SwiGLU: rows gate | up */
  size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
  inp = rand_tensor(ni, -4, 4), out = zeros(no), R = rand_tensor(no, -1, 1);
  ctx = (llama_ctx){.N = N, .F = F, .inp = inp, .out = out, .R = R};
  swiglu_loss(&ctx);
  ref = malloc(no * sizeof(double));
  for (int i = 0; i < N; i++)
    for (int f = 0; f < F; f++) {
      double g = inp[(size_t)i * 2 * F + f], u = inp[(size_t)i * 2 * F + F + f];
      ref[(size_t)i * F + f] = g / (1.0 + exp(-g)) * u;
    }
  mt_check_err("swiglu_forward vs double silu(gate) up", rel_err_max(out, ref, no), REF_TOL);
  dinp = zeros(ni);
  ops->swiglu_backward(MT_DT_F32, dinp, inp, R, N, F);
  mt_check_err("swiglu_backward dinp vs finite diff",
               gradcheck(swiglu_loss, &ctx, inp, dinp, ni, 1), FD_TOL);
  dinp1 = copy_of(dinp, ni);
  ops->swiglu_backward(MT_DT_F32, dinp, inp, R, N, F);
  mt_check_err("swiglu_backward accumulates (dinp x2)", accum_err(dinp1, dinp, ni), ACCUM_TOL);
  free(inp), free(out), free(R), free(ref), free(dinp), free(dinp1);

  /* rope: B = 2 sequences of T = 5 rows, 3 heads of 8; the table from the
   * model's formula at positions 7.. (a cp chunk's) */
  int T = 5, nh = 3, hs = 8, Nr = 2 * T;
  size_t nr = (size_t)Nr * nh * hs;
  mt_model_shape sh = {.n_embd = nh * hs, .n_head = nh, .arch = MT_ARCH_LLAMA,
                       .rope_theta = 10000.0};
  int pos[5] = {7, 8, 9, 10, 11};
  float *cs = zeros((size_t)T * hs);
  mt_model_rope_table(&sh, pos, T, cs);
  inp = rand_tensor(nr, -2, 2), out = zeros(nr), R = rand_tensor(nr, -1, 1);
  ctx = (llama_ctx){.N = Nr, .T = T, .nh = nh, .hs = hs, .inp = inp, .out = out, .cs = cs, .R = R};
  rope_loss(&ctx);
  ref = malloc(nr * sizeof(double));
  for (int r = 0; r < Nr; r++)
    for (int h = 0; h < nh; h++)
      for (int d = 0; d < hs / 2; d++) {
        double a = pos[r % T] * pow(10000.0, -2.0 * d / hs);
        size_t i1 = ((size_t)r * nh + h) * hs + d, i2 = i1 + hs / 2;
        ref[i1] = inp[i1] * cos(a) - inp[i2] * sin(a);
        ref[i2] = inp[i2] * cos(a) + inp[i1] * sin(a);
      }
  mt_check_err("rope vs double rotation", rel_err_max(out, ref, nr), REF_TOL);
  /* backward: the inverse turn of the gradient is the forward's transpose */
  float *g = copy_of(R, nr), *x = copy_of(inp, nr);
  ops->rope(MT_DT_F32, g, (size_t)nh * hs, 2, T, nh, hs, cs, NULL, 1);
  mt_check_err("rope inverse (backward) vs finite diff", gradcheck(rope_loss, &ctx, inp, g, nr, 1),
               FD_TOL);
  ops->rope(MT_DT_F32, x, (size_t)nh * hs, 2, T, nh, hs, cs, NULL, 0);
  ops->rope(MT_DT_F32, x, (size_t)nh * hs, 2, T, nh, hs, cs, NULL, 1);
  double back = 0.0;
  for (size_t i = 0; i < nr; i++) back = mt_worst(back, fabs((double)x[i] - inp[i]));
  mt_check_err("rope then its inverse gives the input back", back, 1e-6);
  free(inp), free(out), free(R), free(ref), free(cs), free(g), free(x);
}

/* Positions given per row: B = 2 sequences of T = 6 rows at positions
 * that restart (documents) and repeat across the sequences. */
static void test_positions(void) {
  printf("positions per row: rope, encoder, document starts\n");
  enum { B = 2, T = 6, C = 8, V = 11, nh = 2, hs = 4, P = 9 };
  const int pos[B * T] = {0, 1, 2, 0, 1, 0, 4, 5, 0, 1, 2, 3};
  /* rope: each row turned by its position's table row, i.e. rope without
   * positions on the table gathered row by row (one sequence of B*T rows) */
  float *cs = rand_tensor((size_t)P * hs, -1, 1), *gathered = zeros((size_t)B * T * hs);
  for (int r = 0; r < B * T; r++) memcpy(gathered + r * hs, cs + pos[r] * hs, hs * sizeof(float));
  size_t n = (size_t)B * T * nh * hs;
  float *x = rand_tensor(n, -2, 2), *y = copy_of(x, n);
  for (int inverse = 0; inverse < 2; inverse++) {
    ops->rope(MT_DT_F32, x, (size_t)nh * hs, B, T, nh, hs, cs, pos, inverse);
    ops->rope(MT_DT_F32, y, (size_t)nh * hs, 1, B * T, nh, hs, gathered, NULL, inverse);
    mt_check_true(inverse ? "rope inverse at given positions = rope on the gathered table"
                          : "rope at given positions = rope on the gathered table",
                  memcmp(x, y, n * sizeof(float)) == 0);
  }
  /* the encoder: out = wte[token] + wpe[position]; dwpe sums in row order */
  int inp[B * T];
  for (int i = 0; i < B * T; i++) inp[i] = (i * 7) % V;
  float *wte = rand_tensor((size_t)V * C, -1, 1), *wpe = rand_tensor((size_t)P * C, -1, 1);
  float *out = zeros((size_t)B * T * C), *dout = rand_tensor((size_t)B * T * C, -1, 1);
  float *dwte = zeros((size_t)V * C), *dwpe = zeros((size_t)P * C), *want = zeros((size_t)P * C);
  ops->encoder_vp_forward(MT_DT_F32, out, inp, wte, 0, V, wpe, pos, B, T, C);
  int ok = 1;
  for (int r = 0; r < B * T; r++)
    for (int c = 0; c < C; c++) ok &= out[r * C + c] == wte[inp[r] * C + c] + wpe[pos[r] * C + c];
  mt_check_true("encoder_vp_forward adds the row of each token's position", ok);
  ops->encoder_vp_backward(MT_DT_F32, dwte, dwpe, dout, inp, pos, 0, V, B, T, C);
  for (int r = 0; r < B * T; r++)
    for (int c = 0; c < C; c++) want[pos[r] * C + c] += dout[r * C + c];
  mt_check_true("encoder_vp_backward: dwpe of repeated positions summed in row order",
                memcmp(dwpe, want, (size_t)P * C * sizeof(float)) == 0);
  /* documents: begin at each end-of-text token (its first token) and at 0 */
  const int seq[10] = {5, 3, 9, 1, 9, 9, 2, 4, 4, 9}, want_doc[10] = {0, 0, 2, 2, 4, 5, 5, 5, 5, 9};
  int doc[10];
  mt_doc_starts(seq, 10, 9, doc);
  mt_check_true("mt_doc_starts: a document begins at each end-of-text token and at 0",
                memcmp(doc, want_doc, sizeof doc) == 0);
  free(cs), free(gathered), free(x), free(y), free(wte), free(wpe), free(out), free(dout);
  free(dwte), free(dwpe), free(want);
}

/* ------------------------------------------------------------------ */
/* softmax + cross-entropy                                             */

typedef struct {
  int N, V, Vp;
  float *logits, *probs, *losses;
  const int *targets;
  float dloss;
} xent_ctx;

/* L = sum_n losses[n] * dloss, the loss whose gradient the backward returns */
static double xent_loss(void *p) {
  xent_ctx *c = p;
  ops->softmax_xent_forward(MT_DT_F32, c->losses, c->probs, c->logits, c->targets, c->N, c->V,
                            c->Vp);
  double s = 0.0;
  for (int i = 0; i < c->N; i++) s += (double)c->losses[i] * c->dloss;
  return s;
}

static void test_softmax_xent(void) {
  printf("softmax_xent\n");
  int N = 10, V = 11, Vp = 16;
  size_t n = (size_t)N * Vp;
  float *logits = rand_tensor(n, -3, 3), *probs = filled(n, 7.0f), *losses = zeros(N);
  int targets[10] = {0, 10, 5, 3, 3, 7, 1, 9, 2, 10};
  /* huge padding logits: any leak into the softmax would dominate it; probs
   * starts at 7 so a padding entry that is never written shows up */
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 1000.0f;
  xent_ctx ctx = {N, V, Vp, logits, probs, losses, targets, 1.0f / N};
  xent_loss(&ctx);

  int pad_zero = 1;
  double loss_err = 0.0, sum_err = 0.0;
  for (int i = 0; i < N; i++) {
    double psum = 0.0;
    for (int j = 0; j < Vp; j++) {
      if (j >= V) pad_zero &= probs[(size_t)i * Vp + j] == 0.0f;
      else psum += probs[(size_t)i * Vp + j];
    }
    sum_err = mt_worst(sum_err, fabs(psum - 1.0));
    double want = -log((double)probs[(size_t)i * Vp + targets[i]]);
    loss_err = mt_worst(loss_err, fabs(losses[i] - want) / fmax(fabs(want), 1.0));
  }
  mt_check_true("softmax_xent_forward padded probs exactly 0", pad_zero);
  mt_check_err("softmax_xent_forward rows sum to 1", sum_err, REF_TOL);
  mt_check_err("softmax_xent_forward loss == -log p[target]", loss_err, REF_TOL);

  float *dlogits = filled(n, 7.0f); /* stale values must not survive on the padding */
  ops->softmax_xent_backward(MT_DT_F32, dlogits, probs, targets, ctx.dloss, N, V, Vp);
  int dpad_zero = 1;
  for (int i = 0; i < N; i++)
    for (int j = V; j < Vp; j++) dpad_zero &= dlogits[(size_t)i * Vp + j] == 0.0f;
  mt_check_true("softmax_xent_backward padded grads exactly 0", dpad_zero);
  mt_check_err("softmax_xent_backward dlogits vs finite diff",
               gradcheck(xent_loss, &ctx, logits, dlogits, n, 1), FD_TOL);

  /* in place, as the model calls it: probs over logits, dlogits over probs */
  xent_loss(&ctx);
  float *inplace = copy_of(logits, n), *losses2 = zeros(N);
  ops->softmax_xent_forward(MT_DT_F32, losses2, inplace, inplace, targets, N, V, Vp);
  mt_check_true("softmax_xent_forward in place == out of place",
                memcmp(inplace, probs, n * sizeof(float)) == 0 &&
                    memcmp(losses2, losses, N * sizeof(float)) == 0);
  ops->softmax_xent_backward(MT_DT_F32, inplace, inplace, targets, ctx.dloss, N, V, Vp);
  mt_check_true("softmax_xent_backward in place == out of place",
                memcmp(inplace, dlogits, n * sizeof(float)) == 0);

  /* stability: logits of 1e4 and a target with p ~ e^-2000 stay finite */
  for (size_t i = 0; i < n; i++) logits[i] = 0.0f;
  logits[0] = 10000.0f, logits[1] = 8000.0f;
  int target1[1] = {1};
  ops->softmax_xent_forward(MT_DT_F32, losses, probs, logits, target1, 1, V, Vp);
  mt_check_err("softmax_xent_forward large logits (loss 2000)", fabs(losses[0] - 2000.0) / 2000.0,
               REF_TOL);
  free(logits), free(probs), free(losses), free(dlogits), free(inplace), free(losses2);
}

/* ------------------------------------------------------------------ */
/* optimizer helpers                                                   */

static void test_adamw(void) {
  printf("adamw, sumsq, scale\n");
  size_t n = 1000;
  float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
  float *param = rand_tensor(n, -1, 1), *m = zeros(n), *v = zeros(n);
  double *p_ref = malloc(n * sizeof(double)), *m_ref = calloc(n, sizeof(double));
  double *v_ref = calloc(n, sizeof(double));
  for (size_t i = 0; i < n; i++) p_ref[i] = param[i];
  for (int t = 1; t <= 3; t++) {
    float *grad = rand_tensor(n, -1, 1);
    ops->adamw_update(MT_DT_F32, param, NULL, grad, m, v, n, lr, beta1, beta2, eps, wd, t);
    for (size_t i = 0; i < n; i++) {
      double g = grad[i];
      m_ref[i] = beta1 * m_ref[i] + (1.0 - beta1) * g;
      v_ref[i] = beta2 * v_ref[i] + (1.0 - beta2) * g * g;
      double mhat = m_ref[i] / (1.0 - pow(beta1, t)), vhat = v_ref[i] / (1.0 - pow(beta2, t));
      p_ref[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * p_ref[i]);
    }
    free(grad);
  }
  /* the update is ~lr per step: compare the change p - p0 relative to lr */
  double worst = 0.0;
  for (size_t i = 0; i < n; i++) worst = mt_worst(worst, fabs(param[i] - p_ref[i]) / lr);
  mt_check_err("adamw_update 3 steps vs double reference (/lr)", worst, 1e-3);
  mt_check_err("adamw_update m vs double reference", rel_err_max(m, m_ref, n), REF_TOL);
  mt_check_err("adamw_update v vs double reference", rel_err_max(v, v_ref, n), REF_TOL);
  free(param), free(m), free(v), free(p_ref), free(m_ref), free(v_ref);

  size_t big = 100003;
  float *x = rand_tensor(big, -2, 2);
  double want = 0.0;
  for (size_t i = 0; i < big; i++) want += (double)x[i] * x[i];
  mt_check_err("sumsq vs sequential double sum", fabs(ops->sumsq(MT_DT_F32, x, big) - want) / want,
               1e-12);
  mt_check_true("sumsq of nothing is 0", ops->sumsq(MT_DT_F32, x, 0) == 0.0);
  float *y = copy_of(x, big);
  ops->scale(MT_DT_F32, y, 0.37f, big);
  int exact = 1;
  for (size_t i = 0; i < big; i++) exact &= y[i] == x[i] * 0.37f;
  mt_check_true("scale == x * s", exact);
  free(x), free(y);
}

int main(void) {
  g_rng = 0x9E3779B97F4A7C15ull; /* this test's inputs */
  ops = mt_ops_cpu();
  mt_kernels_set_threads(2);
  if (mt_kernels_threads() != 2) {
    MT_FAIL("mt_kernels_set_threads(2) left %d threads", mt_kernels_threads());
  }
  printf("test_ops: backend %s, %d threads, finite differences eps %.0e, tol %.0e\n", ops->name,
         mt_kernels_threads(), (double)FD_EPS, FD_TOL);
  /* the comparisons themselves: a NaN error is the worst error, and fails */
  mt_check_true("NaN is the worst error (mt_worst)", isnan(mt_worst(0.0, NAN)) &&
                                                         isnan(mt_worst(NAN, 1.0)) &&
                                                         mt_worst(1.0, 2.0) == 2.0);
  test_encoder();
  test_layernorm();
  test_matmul();
  test_attention();
  test_gelu_residual();
  test_llama_ops();
  test_positions();
  test_softmax_xent();
  test_adamw();
  test_determinism();
  return mt_check_summary("test_ops");
}
