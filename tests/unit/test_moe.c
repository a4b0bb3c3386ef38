/* test_moe: the Mixture-of-Experts pieces on one rank.
 *
 * 1. Router ops (softmax, and sigmoid scores in test_router_sigmoid):
 *    forward against a double reference (softmax, the top-k in
 *    decreasing probability with the lower index first on ties, the chosen
 *    weights renormalised); backward against central finite differences of
 *    L = sum R * top_w + sum A[seq] * probs + zc * sum lse^2, the three terms
 *    the MoE block's backward feeds it (combine weights, load balancing,
 *    z-loss). Logits are spaced so no perturbation changes the top-k.
 * 2. Combine, its backward and the gather-sum: finite differences (dy, dw)
 *    and a naive reference; dropped slots (-1) get nothing.
 * 3. Grouped GEMM: forward against a double reference with empty groups;
 *    backward (dinp, dw, dbias) against finite differences; the same bits at
 *    1 and 2 threads.
 * 4. A MoE model (tiny, E = 4, k = 2, a shared expert, aux and z-loss on,
 *    capacity 1.0 and dropless) against finite differences of its whole
 *    loss (LM loss + the load-balancing and z-losses it reports): the
 *    router, the experts' weights and biases (dispatch and combine in
 *    between), the shared expert, ln2 and the attention below; error per
 *    element relative to the larger of the two and 5% of the tensor's
 *    largest gradient, tolerance 2e-2 (fp32 noise; see MODEL_TOL);
 *    perturbations that change a routing choice are skipped (counted, at
 *    least 8 of ~24 samples per tensor must remain). The same for the
 *    Llama architecture (SwiGLU experts with gate|up fused, a SwiGLU shared
 *    expert, rotary attention), with the softmax and with the sigmoid
 *    router (DeepSeek-V3's scores; no z-loss), dropless.
 * 5. E = 1, k = 1, no auxiliary losses equals the dense model (the dense
 *    MLP's weights copied into the one expert) within 1e-6: loss and every
 *    gradient.
 * NaN fails every comparison. Exits 1 naming each failure. */
#include "model/model.h"
#include "../check.h"
#include "../test_rng.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FD_TOL 5e-3
/* the whole model: fp32 activations put ~1e-7 relative noise on its loss
 * (summed in double); with eps = 1e-2 the worst errors observed are ~1.5e-2
 * (smaller steps are noisier, larger ones feel the curvature) */
#define MODEL_EPS 1e-2f
#define MODEL_TOL 2e-2

static const mt_ops *ops;

/* ------------------------------------------------------------------ */
/* 1. router                                                           */

typedef struct {
  int N, E, k, Ts;
  float *logits, *probs, *lse, *topw;
  int *top;
  const float *R, *A;
  float zc;
  int sigmoid;
} router_ctx;

static double router_loss(void *p) {
  router_ctx *c = p;
  ops->moe_router_forward(c->probs, c->lse, c->top, c->topw, c->logits, NULL, c->N, c->E, c->k,
                          c->sigmoid);
  double l = dot(c->topw, c->R, (size_t)c->N * c->k);
  for (int n = 0; n < c->N; n++) {
    l += dot(c->probs + (size_t)n * c->E, c->A + (size_t)(n / c->Ts) * c->E, (size_t)c->E);
    l += (double)c->zc * (double)c->lse[n] * (double)c->lse[n];
  }
  return l;
}

/* A router of N tokens over E experts choosing k, its load-balancing term
 * over slices of Ts tokens: logits a permutation of values `step` apart
 * per row, plus `offset` (top-k stable under +-eps), random weights of the
 * combine (R) and balancing (A) terms, the outputs allocated */
static router_ctx router_new(int N, int E, int k, int Ts, float step, float offset, float zc,
                             int sigmoid) {
  float *logits = zeros((size_t)N * E);
  for (int n = 0; n < N; n++)
    for (int e = 0; e < E; e++)
      logits[(size_t)n * E + e] =
          step * (float)((e * 5 + n * 7) % E) + offset + rng_uniform(-0.05f, 0.05f);
  router_ctx c = {N, E, k, Ts, logits, zeros((size_t)N * E), zeros((size_t)N),
                  zeros((size_t)N * k), calloc((size_t)N * k, sizeof(int)), NULL, NULL, zc,
                  sigmoid};
  c.R = rand_tensor((size_t)N * k, -1, 1);
  c.A = rand_tensor((size_t)(N / Ts) * E, -1, 1);
  return c;
}

static void router_free(router_ctx *c) {
  free(c->logits), free(c->probs), free(c->lse), free(c->topw), free(c->top);
  free((void *)c->R), free((void *)c->A);
}

/* c's forward (run first) against a double reference: probabilities
 * (softmax, with its log-sum-exp; or sigmoid scores), the k chosen
 * distinct, highest first, none left out higher than the last, and their
 * weights renormalised over the chosen */
static void check_router_forward(const router_ctx *c, const char *what) {
  const int N = c->N, E = c->E, k = c->k;
  double worst = 0.0;
  int order_ok = 1;
  for (int n = 0; n < N; n++) {
    const float *x = c->logits + (size_t)n * E;
    double p[16], chosen = 0.0;
    if (c->sigmoid) {
      for (int e = 0; e < E; e++) p[e] = 1.0 / (1.0 + exp(-(double)x[e]));
    } else {
      double mx = x[0], sum = 0.0;
      for (int e = 1; e < E; e++) mx = x[e] > mx ? x[e] : mx;
      for (int e = 0; e < E; e++) sum += exp((double)x[e] - mx);
      for (int e = 0; e < E; e++) p[e] = exp((double)x[e] - mx) / sum;
      worst = mt_worst(worst, fabs(mx + log(sum) - c->lse[n]));
    }
    for (int e = 0; e < E; e++) worst = mt_worst(worst, fabs(p[e] - c->probs[(size_t)n * E + e]));
    const int *t = c->top + (size_t)n * k;
    for (int j = 0; j < k; j++) chosen += p[t[j]];
    for (int j = 0; j + 1 < k; j++) order_ok &= p[t[j]] >= p[t[j + 1]] && t[j] != t[j + 1];
    for (int e = 0; e < E; e++) {
      int in = 0;
      for (int j = 0; j < k; j++) in |= t[j] == e;
      order_ok &= in || p[e] <= p[t[k - 1]];
    }
    for (int j = 0; j < k; j++)
      worst = mt_worst(worst, fabs(p[t[j]] / chosen - c->topw[(size_t)n * k + j]));
  }
  char name[96];
  snprintf(name, sizeof name, "%s forward vs double reference", what);
  mt_check_err(name, worst, 1e-6);
  snprintf(name, sizeof name, "%s top-k: the k highest, highest first", what);
  mt_check_true(name, order_ok);
}

/* The sigmoid router (DeepSeek-V3): probs[e] = sigmoid(logits[e]), the k
 * largest scores (+ bias) chosen and renormalised; backward against finite
 * differences of the combine and load-balancing terms (no z-loss). */
static void test_router_sigmoid(void) {
  printf("router, sigmoid scores\n");
  const int N = 12, E = 6, k = 3, Ts = 4;
  router_ctx c = router_new(N, E, k, Ts, 0.4f, -1.0f, 0.0f, 1);
  router_loss(&c);
  check_router_forward(&c, "sigmoid router");
  /* the bias moves the choice only: expert 0 (the lowest score) lifted in */
  float low[4] = {-2.0f, 1.0f, 0.5f, 0.0f}, bias[4] = {1.0f, 0.0f, 0.0f, 0.0f}, bp[4], bl, bw[2];
  int bt[2];
  ops->moe_router_forward(bp, &bl, bt, bw, low, bias, 1, 4, 2, 1);
  double s0 = 1.0 / (1.0 + exp(2.0)), s1 = 1.0 / (1.0 + exp(-1.0));
  /* scores 0.12 + 1, 0.73, 0.62, 0.5: expert 0 first, then 1 */
  mt_check_true("sigmoid + bias: the choice by score + bias", bt[0] == 0 && bt[1] == 1);
  mt_check_err("sigmoid + bias: the weights from the scores alone",
               mt_worst(fabs(bw[0] - s0 / (s0 + s1)), fabs(bw[1] - s1 / (s0 + s1))), 1e-6);
  float *dlogits = zeros((size_t)N * E);
  router_loss(&c);
  ops->moe_router_backward(dlogits, c.probs, c.lse, c.top, c.topw, c.R, c.A, Ts, 0.0f, N, E, k,
                           1);
  mt_check_err("sigmoid router backward (combine + aux) vs FD",
               gradcheck(router_loss, &c, c.logits, dlogits, (size_t)N * E, 1), FD_TOL);
  free(dlogits);
  router_free(&c);
}

static void test_router(void) {
  printf("router\n");
  const int N = 12, E = 6, k = 2, Ts = 4;
  router_ctx c = router_new(N, E, k, Ts, 0.3f, 0.0f, 0.05f, 0);
  float *logits = c.logits;
  router_loss(&c);
  check_router_forward(&c, "router");
  /* ties: the lower index first */
  float tie[4] = {1.0f, 2.0f, 2.0f, 0.5f}, tp[4], tl, tw[2];
  int tt[2];
  ops->moe_router_forward(tp, &tl, tt, tw, tie, NULL, 1, 4, 2, 0);
  mt_check_true("ties: the lower index first", tt[0] == 1 && tt[1] == 2);
  /* a balancing bias moves the choice, not the weights: expert 3's bias
   * lifts it over expert 2 (and 0 on the tie with 1, lower index first) */
  float bias[4] = {0.0f, 0.0f, 0.0f, 1.0f}, bw[2], bp[4], bl;
  int bt[2];
  ops->moe_router_forward(bp, &bl, bt, bw, tie, bias, 1, 4, 2, 0);
  double bsum = (double)tp[3] + (double)tp[1];
  mt_check_true("bias: the choice by p + bias", bt[0] == 3 && bt[1] == 1);
  mt_check_err("bias: the weights from p alone",
               mt_worst(fabs(bw[0] - tp[3] / bsum), fabs(bw[1] - tp[1] / bsum)), 1e-6);
  /* backward against finite differences */
  float *dlogits = zeros((size_t)N * E);
  router_loss(&c);
  ops->moe_router_backward(dlogits, c.probs, c.lse, c.top, c.topw, c.R, c.A, Ts, 2.0f * c.zc, N,
                           E, k, 0);
  mt_check_err("router backward (combine + aux + z) vs FD",
               gradcheck(router_loss, &c, logits, dlogits, (size_t)N * E, 1), FD_TOL);
  /* without the aux term */
  const float *A = c.A;
  c.A = zeros((size_t)(N / Ts) * E);
  router_loss(&c);
  ops->moe_router_backward(dlogits, c.probs, c.lse, c.top, c.topw, c.R, NULL, Ts, 2.0f * c.zc, N,
                           E, k, 0);
  mt_check_err("router backward, aux_grad NULL vs FD",
               gradcheck(router_loss, &c, logits, dlogits, (size_t)N * E, 1), FD_TOL);
  free((void *)c.A);
  /* prob sums per sequence slice */
  float *sums = zeros((size_t)(N / Ts) * E);
  ops->moe_prob_sums(sums, c.probs, N, E, Ts);
  double sw = 0.0;
  for (int s = 0; s < N / Ts; s++)
    for (int e = 0; e < E; e++) {
      double ref = 0.0;
      for (int r = 0; r < Ts; r++) ref += c.probs[((size_t)s * Ts + r) * E + e];
      sw = mt_worst(sw, fabs(ref - sums[(size_t)s * E + e]));
    }
  mt_check_err("prob sums per sequence", sw, 1e-6);
  free(sums), free(dlogits);
  c.A = A;
  router_free(&c);
}

/* ------------------------------------------------------------------ */
/* 2. combine                                                          */

typedef struct {
  int N, C, k;
  float *y, *w, *out;
  const int *slot;
  const float *R;
} combine_ctx;

static double combine_loss(void *p) {
  combine_ctx *c = p;
  ops->moe_combine(MT_DT_F32, c->out, c->y, c->slot, c->w, c->N, c->C, c->k);
  return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_combine(void) {
  printf("combine\n");
  const int N = 7, C = 5, k = 2, S = N * k;
  int *slot = calloc((size_t)N * k, sizeof(int));
  for (int i = 0; i < N * k; i++) slot[i] = (i * 5) % S; /* a permutation of the slots */
  slot[3] = -1, slot[8] = -1;                           /* two dropped */
  combine_ctx c = {N, C, k, rand_tensor((size_t)S * C, -1, 1), rand_tensor((size_t)N * k, 0, 1),
                   zeros((size_t)N * C), slot, rand_tensor((size_t)N * C, -1, 1)};
  float *dy = zeros((size_t)S * C), *dw = zeros((size_t)N * k);
  combine_loss(&c);
  ops->moe_combine_backward(MT_DT_F32, dy, dw, c.R, c.y, slot, c.w, N, C, k);
  mt_check_err("combine backward dy vs FD", gradcheck(combine_loss, &c, c.y, dy, (size_t)S * C, 1),
               FD_TOL);
  mt_check_err("combine backward dw vs FD", gradcheck(combine_loss, &c, c.w, dw, (size_t)N * k, 1),
               FD_TOL);
  mt_check_true("a dropped slot's weight gets gradient 0", dw[3] == 0.0f && dw[8] == 0.0f);
  /* gather-sum: dx[n] += sum of src rows of its kept slots */
  float *dx = rand_tensor((size_t)N * C, -1, 1), *dx0 = malloc((size_t)N * C * sizeof(float));
  memcpy(dx0, dx, (size_t)N * C * sizeof(float));
  ops->moe_gather_sum(MT_DT_F32, dx, c.y, slot, N, C, k);
  double worst = 0.0;
  for (int n = 0; n < N; n++)
    for (int ch = 0; ch < C; ch++) {
      double ref = dx0[(size_t)n * C + ch];
      for (int j = 0; j < k; j++)
        if (slot[n * k + j] >= 0) ref += c.y[(size_t)slot[n * k + j] * C + ch];
      worst = mt_worst(worst, fabs(ref - dx[(size_t)n * C + ch]));
    }
  mt_check_err("gather-sum vs reference", worst, 1e-6);
  /* gather rows */
  int idx[4] = {3, 0, 3, 1};
  float *g = zeros(4 * (size_t)C);
  ops->gather_rows(MT_DT_F32, g, c.y, idx, 4, C);
  int same = 1;
  for (int i = 0; i < 4; i++) same &= !memcmp(g + i * C, c.y + idx[i] * C, (size_t)C * sizeof(float));
  mt_check_true("gather_rows copies the named rows", same);
  free(g), free(dx), free(dx0), free(dy), free(dw), free(slot), free(c.y), free(c.w), free(c.out);
  free((void *)c.R);
}

/* ------------------------------------------------------------------ */
/* 3. grouped GEMM                                                     */

typedef struct {
  int G, C, OC;
  const int *off;
  float *inp, *w, *b, *out;
  const float *R;
} gg_ctx;

static double gg_loss(void *p) {
  gg_ctx *c = p;
  ops->grouped_matmul_forward(MT_DT_F32, c->out, c->inp, c->w, c->b, c->off, c->G, c->C, c->OC);
  return dot(c->out, c->R, (size_t)c->off[c->G] * c->OC);
}

static void test_grouped_gemm(void) {
  printf("grouped GEMM\n");
  const int G = 5, C = 6, OC = 4;
  const int off[6] = {0, 3, 3, 10, 11, 11}; /* groups 1 and 4 empty */
  const int rows = off[G];
  gg_ctx c = {G, C, OC, off, rand_tensor((size_t)rows * C, -1, 1),
              rand_tensor((size_t)G * OC * C, -1, 1), rand_tensor((size_t)G * OC, -1, 1),
              zeros((size_t)rows * OC), rand_tensor((size_t)rows * OC, -1, 1)};
  gg_loss(&c);
  double worst = 0.0;
  for (int g = 0; g < G; g++)
    for (int r = off[g]; r < off[g + 1]; r++)
      for (int o = 0; o < OC; o++) {
        double ref = c.b[g * OC + o];
        for (int i = 0; i < C; i++)
          ref += (double)c.inp[(size_t)r * C + i] * c.w[((size_t)g * OC + o) * C + i];
        worst = mt_worst(worst, fabs(ref - c.out[(size_t)r * OC + o]));
      }
  mt_check_err("grouped forward vs double reference", worst, 1e-5);
  float *dinp = zeros((size_t)rows * C), *dw = zeros((size_t)G * OC * C), *db = zeros((size_t)G * OC);
  ops->grouped_matmul_backward(MT_DT_F32, dinp, dw, db, c.R, c.inp, c.w, off, G, C, OC);
  mt_check_err("grouped backward dinp vs FD",
               gradcheck(gg_loss, &c, c.inp, dinp, (size_t)rows * C, 1), FD_TOL);
  mt_check_err("grouped backward dw vs FD", gradcheck(gg_loss, &c, c.w, dw, (size_t)G * OC * C, 1),
               FD_TOL);
  mt_check_err("grouped backward dbias vs FD", gradcheck(gg_loss, &c, c.b, db, (size_t)G * OC, 1),
               FD_TOL);
  int empty_zero = 1;
  for (int i = 0; i < OC * C; i++) empty_zero &= dw[(size_t)1 * OC * C + i] == 0.0f;
  mt_check_true("an empty group's weight gradient stays 0", empty_zero);
  /* the same bits at 1 and 2 threads (3 non-empty groups: groups on threads) */
  float *o1 = zeros((size_t)rows * OC), *o2 = zeros((size_t)rows * OC);
  float *w1 = zeros((size_t)G * OC * C), *w2 = zeros((size_t)G * OC * C);
  mt_kernels_set_threads(1);
  ops->grouped_matmul_forward(MT_DT_F32, o1, c.inp, c.w, c.b, off, G, C, OC);
  ops->grouped_matmul_backward(MT_DT_F32, NULL, w1, NULL, c.R, c.inp, c.w, off, G, C, OC);
  mt_kernels_set_threads(2);
  ops->grouped_matmul_forward(MT_DT_F32, o2, c.inp, c.w, c.b, off, G, C, OC);
  ops->grouped_matmul_backward(MT_DT_F32, NULL, w2, NULL, c.R, c.inp, c.w, off, G, C, OC);
  mt_kernels_set_threads(1);
  mt_check_true("1 and 2 threads: the same bits",
                !memcmp(o1, o2, (size_t)rows * OC * sizeof(float)) &&
                    !memcmp(w1, w2, (size_t)G * OC * C * sizeof(float)));
  free(o1), free(o2), free(w1), free(w2), free(dinp), free(dw), free(db);
  free(c.inp), free(c.w), free(c.b), free(c.out), free((void *)c.R);
}

/* ------------------------------------------------------------------ */
/* 4. a MoE model against finite differences of its whole loss         */

typedef struct {
  mt_gpt *m;
  const int *inp, *tgt;
  int B;
  int *top0;   /* the routing choices at the unperturbed parameters */
  int changed; /* the last loss's routing differs from top0 */
} model_ctx;

/* LM loss + the load-balancing and z-losses (their sums per token / tokens) */
static double model_loss(void *p) {
  model_ctx *c = p;
  mt_gpt *m = c->m;
  mt_gpt_moe_stats_reset(m);
  double tokens = (double)c->B * m->T;
  /* the token losses summed in double (mt_gpt_forward rounds the mean to float) */
  double l = mt_gpt_forward_range(m, &m->a, 0, m->shape.n_layer, 1, 1, c->inp, c->tgt, c->B) /
             tokens;
  for (int b = 0; b < m->moe.n_blocks; b++) l += (m->moe.aux[b] + m->moe.z[b]) / tokens;
  size_t n = (size_t)m->moe_window_of[m->shape.n_layer] * c->B * m->moe.Ts * m->shape.moe_topk;
  if (c->top0) c->changed = memcmp(c->top0, m->a.moe_top, n * sizeof(int)) != 0;
  return l;
}

/* FD over sampled elements of tensor name, skipping perturbations that move a token to
 * another expert; returns the worst error and counts the kept samples */
static double model_gradcheck(model_ctx *c, const char *name, int samples, int *kept) {
  mt_gpt *m = c->m;
  int i = mt_registry_find(&m->reg, name);
  if (i < 0) {
    MT_FAIL("%s not registered", name);
    return NAN;
  }
  const mt_tensor *t = &m->reg.t[i];
  float *x = m->params + t->offset, *g = m->grads + t->offset;
  size_t stride = t->numel_local / (size_t)samples + 1;
  /* fp32 losses: an element's numeric derivative carries ~1e-5 of noise;
   * errors are relative to the larger of the two and 5% of the tensor's
   * largest gradient */
  double gmax = 0.0;
  for (size_t j = 0; j < t->numel_local; j++) gmax = fmax(gmax, fabs((double)g[j]));
  double worst = 0.0;
  for (size_t j = 0; j < t->numel_local; j += stride) {
    float x0 = x[j], xp = x0 + MODEL_EPS, xm = x0 - MODEL_EPS;
    x[j] = xp;
    double lp = model_loss(c);
    int moved = c->changed;
    x[j] = xm;
    double lm = model_loss(c);
    moved |= c->changed;
    x[j] = x0;
    if (moved) continue;
    (*kept)++;
    double numeric = (lp - lm) / ((double)xp - (double)xm);
    double denom = fmax(fmax(fabs((double)g[j]), fabs(numeric)), 0.05 * gmax);
    worst = mt_worst(worst, fabs((double)g[j] - numeric) / denom);
  }
  return worst;
}

/* llama: the Llama architecture's SwiGLU experts (gate|up fused) and
 * shared expert; sigmoid: DeepSeek-V3's router scores (no z-loss) */
static void test_model_fd(double capacity, int llama, int sigmoid) {
  printf("MoE model vs finite differences (%s%s%s)\n", capacity > 0 ? "capacity 1.0" : "dropless",
         llama ? ", llama: SwiGLU experts" : "", sigmoid ? ", sigmoid router" : "");
  mt_model_shape s;
  mt_model_preset(llama ? MT_PRESET_TINY_LLAMA : MT_PRESET_TINY, &s);
  s.n_layer = 2;
  s.seq_len = 8;
  s.vocab = 64;
  s.vocab_padded = mt_model_pad_vocab(s.vocab, 1);
  s.moe_experts = 4;
  s.moe_topk = 2;
  s.moe_every = 1;
  s.moe_ffn = 16;
  s.moe_shared = 1;
  s.moe_capacity = capacity;
  s.moe_router = sigmoid ? MT_ROUTER_SIGMOID : MT_ROUTER_SOFTMAX;
  const int B = 2;
  mt_gpt m;
  mt_err e = {0};
  if (mt_gpt_create(&m, &s, ops, B, &e) != 0) {
    MT_FAIL("create: %s", e.msg);
    return;
  }
  mt_gpt_init_params(&m, 7);
  /* SwiGLU multiplies two small projections: weights of std 0.02 give
   * gradients near the fp32 losses' noise over eps; std 0.1 lifts them */
  for (int i = 0; llama && i < m.reg.n; i++)
    if (m.reg.t[i].ndim > 1)
      for (size_t j = 0; j < m.reg.t[i].numel_local; j++) m.params[m.reg.t[i].offset + j] *= 5.0f;
  /* larger router weights: decisive routing, fewer choices moved by a perturbation */
  for (int l = 0; l < s.n_layer; l++) {
    int i = mt_registry_findf(&m.reg, "blocks.%d.moe.router.weight", l);
    for (size_t j = 0; j < m.reg.t[i].numel_local; j++)
      m.params[m.reg.t[i].offset + j] *= sigmoid ? 5.0f : 20.0f;
  }
  mt_gpt_set_moe_loss(&m, 0.1f, sigmoid ? 0.0f : 0.01f);
  mt_gpt_moe_stats(&m, 1);
  int inp[2 * 8], tgt[2 * 8];
  for (int i = 0; i < B * s.seq_len; i++) inp[i] = (int)(rng_next() % 64), tgt[i] = (int)(rng_next() % 64);
  model_ctx c = {&m, inp, tgt, B, NULL, 0};
  model_loss(&c);
  size_t n = (size_t)m.moe_window_of[s.n_layer] * B * m.moe.Ts * s.moe_topk;
  c.top0 = malloc(n * sizeof(int));
  memcpy(c.top0, m.a.moe_top, n * sizeof(int));
  double dropped = 0.0;
  for (int b = 0; b < m.moe.n_blocks; b++) dropped += m.moe.dropped[b];
  if (capacity > 0) mt_check_true("capacity 1.0 drops some slots here", dropped > 0);
  else mt_check_true("dropless drops nothing", dropped == 0);
  mt_gpt_zero_grad(&m);
  mt_gpt_forward(&m, inp, tgt, B);
  mt_gpt_backward(&m, 1.0f / (float)(B * s.seq_len), NULL, NULL);
  const char *gpt2[] = {"blocks.1.moe.router.weight",       "blocks.1.moe.experts.fc.weight",
                        "blocks.1.moe.experts.fc.bias",     "blocks.1.moe.experts.proj.weight",
                        "blocks.1.moe.experts.proj.bias",   "blocks.1.moe.shared.fc.weight",
                        "blocks.0.moe.router.weight",       "blocks.0.moe.experts.fc.weight",
                        "blocks.1.ln2.weight",              "blocks.0.attn.qkv.weight"};
  const char *swiglu[] = {"blocks.1.moe.router.weight",     "blocks.1.moe.experts.fc.weight",
                          "blocks.1.moe.experts.proj.weight", "blocks.1.moe.shared.gate.weight",
                          "blocks.1.moe.shared.up.weight",  "blocks.1.moe.shared.proj.weight",
                          "blocks.0.moe.router.weight",     "blocks.0.moe.experts.fc.weight",
                          "blocks.1.ln2.weight",            "blocks.0.attn.q.weight"};
  const char **names = llama ? swiglu : gpt2;
  for (size_t q = 0; q < 10; q++) {
    int kept = 0;
    double err = model_gradcheck(&c, names[q], 24, &kept);
    char what[128];
    snprintf(what, sizeof what, "%s (%d samples)", names[q], kept);
    mt_check_err(what, err, MODEL_TOL);
    if (kept < 8) {
      MT_FAIL("%s: only %d samples kept routing", names[q], kept);
    }
  }
  free(c.top0);
  mt_gpt_destroy(&m);
}

/* ------------------------------------------------------------------ */
/* 5. E = 1, k = 1 equals the dense model                              */

static void copy_tensor(mt_gpt *dst, const char *dname, const mt_gpt *src, const char *sname) {
  int i = mt_registry_find(&dst->reg, dname), j = mt_registry_find(&src->reg, sname);
  if (i < 0 || j < 0 || dst->reg.t[i].numel_local != src->reg.t[j].numel_local) {
    MT_FAIL("cannot copy %s into %s", sname, dname);
    return;
  }
  memcpy(dst->params + dst->reg.t[i].offset, src->params + src->reg.t[j].offset,
         dst->reg.t[i].numel_local * sizeof(float));
}

static double grad_diff(const mt_gpt *a, const char *an, const mt_gpt *b, const char *bn) {
  int i = mt_registry_find(&a->reg, an), j = mt_registry_find(&b->reg, bn);
  if (i < 0 || j < 0) return NAN;
  return mt_max_rel_err(a->grads + a->reg.t[i].offset, b->grads + b->reg.t[j].offset,
                        a->reg.t[i].numel_local);
}

static void test_one_expert_is_dense(void) {
  printf("E = 1, k = 1 equals the dense model\n");
  mt_model_shape d, s;
  mt_model_preset(MT_PRESET_TINY, &d);
  s = d;
  s.moe_experts = 1;
  s.moe_topk = 1;
  s.moe_every = 1;
  s.moe_ffn = 4 * d.n_embd;
  const int B = 2, T = d.seq_len;
  mt_gpt dense, moe;
  mt_err e = {0};
  if (mt_gpt_create(&dense, &d, ops, B, &e) != 0 || mt_gpt_create(&moe, &s, ops, B, &e) != 0) {
    MT_FAIL("create: %s", e.msg);
    return;
  }
  mt_gpt_init_params(&dense, 11);
  mt_gpt_init_params(&moe, 11); /* the router: anything (softmax over one expert is 1) */
  mt_gpt_set_moe_loss(&moe, 0.0f, 0.0f);
  /* every tensor of the dense model into the MoE model, the MLP as the expert */
  for (int i = 0; i < dense.reg.n; i++) {
    char mname[MT_NAME_MAX];
    const char *dn = dense.reg.t[i].name;
    snprintf(mname, sizeof mname, "%s", dn);
    for (int l = 0; l < d.n_layer; l++) {
      char pre[32], from[MT_NAME_MAX];
      snprintf(pre, sizeof pre, "blocks.%d.mlp.", l);
      if (!strncmp(dn, pre, strlen(pre))) {
        snprintf(from, sizeof from, "blocks.%d.moe.experts.%s", l, dn + strlen(pre));
        snprintf(mname, sizeof mname, "%s", from);
      }
    }
    copy_tensor(&moe, mname, &dense, dn);
  }
  int *inp = malloc((size_t)B * T * sizeof(int)), *tgt = malloc((size_t)B * T * sizeof(int));
  for (int i = 0; i < B * T; i++) inp[i] = (int)(rng_next() % 256), tgt[i] = (int)(rng_next() % 256);
  mt_gpt_zero_grad(&dense);
  mt_gpt_zero_grad(&moe);
  float ld = mt_gpt_forward(&dense, inp, tgt, B), lm = mt_gpt_forward(&moe, inp, tgt, B);
  mt_gpt_backward(&dense, 1.0f / (float)(B * T), NULL, NULL);
  mt_gpt_backward(&moe, 1.0f / (float)(B * T), NULL, NULL);
  mt_check_err("loss", fabs((double)ld - lm) / fabs((double)ld), 1e-6);
  double worst = 0.0;
  for (int i = 0; i < dense.reg.n; i++) {
    char mname[MT_NAME_MAX];
    const char *dn = dense.reg.t[i].name;
    snprintf(mname, sizeof mname, "%s", dn);
    for (int l = 0; l < d.n_layer; l++) {
      char pre[32];
      snprintf(pre, sizeof pre, "blocks.%d.mlp.", l);
      if (!strncmp(dn, pre, strlen(pre)))
        snprintf(mname, sizeof mname, "blocks.%d.moe.experts.%s", l, dn + strlen(pre));
    }
    worst = mt_worst(worst, grad_diff(&moe, mname, &dense, dn));
  }
  mt_check_err("every gradient (relative to its tensor's largest)", worst, 1e-6);
  double rg = 0.0;
  for (int l = 0; l < d.n_layer; l++) {
    int i = mt_registry_findf(&moe.reg, "blocks.%d.moe.router.weight", l);
    rg += ops->sumsq(MT_DT_F32, moe.grads + moe.reg.t[i].offset, moe.reg.t[i].numel_local);
  }
  mt_check_err("the router of one expert gets no gradient", sqrt(rg), 0.0);
  free(inp), free(tgt);
  mt_gpt_destroy(&dense);
  mt_gpt_destroy(&moe);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mt_log_init(0);
  mt_kernels_set_threads(1);
  g_rng = 0x2545F4914F6CDD1DULL; /* this test's inputs */
  ops = mt_ops_cpu();
  test_router();
  test_router_sigmoid();
  test_combine();
  test_grouped_gemm();
  test_model_fd(0.0, 0, 0);
  test_model_fd(1.0, 0, 0);
  test_model_fd(0.0, 1, 0);
  test_model_fd(0.0, 1, 1);
  test_one_expert_is_dense();
  MPI_Finalize();
  return mt_check_summary("test_moe");
}
