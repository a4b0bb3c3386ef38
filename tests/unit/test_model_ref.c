/* Reference test of the whole model: mt_gpt_forward / mt_gpt_backward on the
 * CPU op table against an independent GPT-2 written here in double precision
 * with plain loops (no BLAS, no mt_ops). Compares the loss, the activations,
 * the probabilities and EVERY registered parameter gradient; the reference
 * backward is itself checked against central finite differences of the
 * reference forward. Also checks that the gradient does not depend on how a
 * batch is split into micro-batches (gradient accumulation).
 *
 * Cases (all B = 2, T = 8):
 *   tiny-init     preset tiny, V = Vp = 256, parameters exactly as
 *                 mt_gpt_init_params leaves them (LN weight 1, biases 0).
 *   tiny-perturb  same shape, every parameter set to O(0.1..1) noise, so
 *                 LN weights/biases and all linear biases matter and the
 *                 attention is far from uniform.
 *   padded-vocab  V = 100 stored as Vp = 128, C = 24, NH = 3 (hs = 8),
 *                 perturbed, and the padding rows of wte filled with garbage:
 *                 they must not change the loss and must get exactly 0 grad.
 *   ladder        the ladder residual (model.residual = ladder), 3 blocks,
 *                 perturbed: the loss and activations against the reference
 *                 wired as the ladder (each attention and MLP reads the
 *                 stream without the previous module's output; the last MLP
 *                 joins the final stream); forward only here (test_model_fd
 *                 holds its backward to finite differences).
 *
 * Tolerances, fp32 model against a double reference computed on the same
 * fp32 parameter values (so only the model's rounding differs):
 *   fp32 unit round-off is 6e-8. Every value here is a chain of O(10) ops and
 *   sums of at most max(4C, V) = 256 terms, so the error is bounded by
 *   ~256 * 6e-8 = 1.5e-5 of the magnitudes involved and typically ~sqrt(256)
 *   times less (~1e-6); observed errors are 1e-7..1.1e-6 (see the printout),
 *   so 1e-4 leaves a wide margin for other BLAS builds, yet a 1% error in a
 *   single element of GELU backward already fails (tried by mutation).
 *   - loss: relative 1e-5.
 *   - activations and probabilities: max abs error / max abs reference of the
 *     buffer, 1e-4.
 *   - each parameter gradient: max abs error / max abs reference gradient of
 *     that tensor, 1e-4. The normalisation by the tensor's max (not per
 *     element) is deliberate: some gradients are mathematically ~0 (e.g. the
 *     key bias, to which softmax is invariant) and are pure rounding noise.
 *     An indexing or formula error gives O(1) relative errors.
 *   - padded wte rows: exactly 0 (nothing may ever write there).
 *   - batch split (fp32 model against itself, only the summation order of
 *     sgemm over N = B*T rows changes): relative 1e-5, and the same for the
 *     mean loss.
 *   - finite differences of the double reference, h = 1e-5 * max(1, |p|):
 *     truncation O(h^2) and round-off O(1e-16 / h) are both < 1e-9 of the
 *     gradient scale, checked at 1e-6 of the tensor's max abs gradient.
 *
 * Threads: the model runs on 1 thread unless MT_TEST_THREADS=n. At B*T = 16
 * rows the OpenMP and OpenBLAS teams only add barriers, and on a loaded
 * 2-core machine they stretched the run from 0.4 s to over 3 s; thread-count
 * behaviour of the kernels is test_ops' business.
 * Runs in about half a second. Exits 1 naming every failing tensor. */
#include "model/model.h"
#include "../check.h"
#include "../test_rng.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL_LOSS 1e-5
#define TOL_ACT 1e-4
#define TOL_GRAD 1e-4
#define TOL_SPLIT 1e-5
#define TOL_FD 1e-6
#define FD_PER_TENSOR 4

static double *dalloc(size_t n) {
  double *p = calloc(n ? n : 1, sizeof(double));
  if (!p) {
    fprintf(stderr, "test_model_ref: out of memory (%zu doubles)\n", n);
    exit(1);
  }
  return p;
}

/* ------------------------------------------------------------------ */
/* where the reference finds each tensor in the flat buffer (by name)   */

typedef struct {
  size_t ln1_w, ln1_b, qkv_w, qkv_b, attn_proj_w, attn_proj_b;
  size_t ln2_w, ln2_b, fc_w, fc_b, fc_proj_w, fc_proj_b;
} ref_block;

typedef struct {
  int T, C, NH, L, V, Vp;
  int ladder; /* the ladder residual */
  size_t n;   /* flat length */
  size_t wte, wpe, lnf_w, lnf_b;
  ref_block *blk;
} ref_model;

/* Offset of a tensor by registry name, after checking it holds numel
 * elements (the registered shape is part of what is tested). */
static size_t tensor_offset(const mt_gpt *m, const char *name, size_t numel) {
  int i = mt_registry_find(&m->reg, name);
  if (i < 0) {
    fprintf(stderr, "FAIL: tensor %s is not registered\n", name);
    exit(1);
  }
  if (m->reg.t[i].numel_local != numel) {
    fprintf(stderr, "FAIL: tensor %s holds %zu elements, expected %zu\n", name,
            m->reg.t[i].numel_local, numel);
    exit(1);
  }
  return m->reg.t[i].offset;
}

static void ref_model_init(ref_model *r, const mt_gpt *m) {
  const mt_model_shape *s = &m->shape;
  size_t C = (size_t)s->n_embd;
  r->T = s->seq_len;
  r->C = s->n_embd;
  r->NH = s->n_head;
  r->L = s->n_layer;
  r->V = s->vocab;
  r->Vp = s->vocab_padded;
  r->n = m->reg.numel_local;
  r->wte = tensor_offset(m, "wte.weight", (size_t)r->Vp * C);
  r->wpe = tensor_offset(m, "wpe.weight", (size_t)r->T * C);
  r->lnf_w = tensor_offset(m, "lnf.weight", C);
  r->lnf_b = tensor_offset(m, "lnf.bias", C);
  r->blk = calloc((size_t)r->L, sizeof(ref_block));
  char n[MT_NAME_MAX];
  for (int l = 0; l < r->L; l++) {
    ref_block *b = &r->blk[l];
#define OFF(suffix, numel) (snprintf(n, sizeof n, "blocks.%d.%s", l, suffix), tensor_offset(m, n, numel))
    b->ln1_w = OFF("ln1.weight", C);
    b->ln1_b = OFF("ln1.bias", C);
    b->qkv_w = OFF("attn.qkv.weight", 3 * C * C);
    b->qkv_b = OFF("attn.qkv.bias", 3 * C);
    b->attn_proj_w = OFF("attn.proj.weight", C * C);
    b->attn_proj_b = OFF("attn.proj.bias", C);
    b->ln2_w = OFF("ln2.weight", C);
    b->ln2_b = OFF("ln2.bias", C);
    b->fc_w = OFF("mlp.fc.weight", 4 * C * C);
    b->fc_b = OFF("mlp.fc.bias", 4 * C);
    b->fc_proj_w = OFF("mlp.proj.weight", 4 * C * C);
    b->fc_proj_b = OFF("mlp.proj.bias", C);
#undef OFF
  }
}

/* The model's named views (m->p, m->g) must point at the same registry
 * tensors the reference finds by name. */
static void check_views(const mt_gpt *m, const ref_model *r, const char *tag) {
  int bad = 0;
  bad |= m->p.wte != m->params + r->wte || m->g.wte != m->grads + r->wte;
  bad |= m->p.wpe != m->params + r->wpe || m->g.wpe != m->grads + r->wpe;
  bad |= m->p.lnf_w != m->params + r->lnf_w || m->p.lnf_b != m->params + r->lnf_b;
  bad |= m->g.lnf_w != m->grads + r->lnf_w || m->g.lnf_b != m->grads + r->lnf_b;
  for (int l = 0; l < r->L; l++) {
    const ref_block *o = &r->blk[l];
    const mt_block_tensors *p = &m->p.blocks[l], *g = &m->g.blocks[l];
    const float *pv[] = {p->ln1_w, p->ln1_b, p->qkv_w, p->qkv_b, p->attn_proj_w, p->attn_proj_b,
                         p->ln2_w, p->ln2_b, p->fc_w,  p->fc_b,  p->fc_proj_w, p->fc_proj_b};
    const float *gv[] = {g->ln1_w, g->ln1_b, g->qkv_w, g->qkv_b, g->attn_proj_w, g->attn_proj_b,
                         g->ln2_w, g->ln2_b, g->fc_w,  g->fc_b,  g->fc_proj_w, g->fc_proj_b};
    size_t off[] = {o->ln1_w, o->ln1_b, o->qkv_w, o->qkv_b, o->attn_proj_w, o->attn_proj_b,
                    o->ln2_w, o->ln2_b, o->fc_w,  o->fc_b,  o->fc_proj_w, o->fc_proj_b};
    for (int j = 0; j < 12; j++)
      if (pv[j] != m->params + off[j] || gv[j] != m->grads + off[j])
        MT_FAIL("%s: view %d of block %d does not point at its registry tensor", tag, j, l);
  }
  if (bad) MT_FAIL("%s: embedding or final-LN views do not point at their registry tensors", tag);
}

/* ------------------------------------------------------------------ */
/* reference ops, double precision, plain loops                        */

/* out (N,C) = (inp - mean) / sqrt(var + 1e-5) * w + b, biased variance */
static void ref_ln_forward(double *out, double *mean, double *rstd, const double *inp,
                           const double *w, const double *b, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double *x = inp + (size_t)n * C;
    double mu = 0.0, var = 0.0;
    for (int c = 0; c < C; c++) mu += x[c];
    mu /= C;
    for (int c = 0; c < C; c++) var += (x[c] - mu) * (x[c] - mu);
    var /= C;
    double s = 1.0 / sqrt(var + 1e-5);
    for (int c = 0; c < C; c++) out[(size_t)n * C + c] = (x[c] - mu) * s * w[c] + b[c];
    mean[n] = mu;
    rstd[n] = s;
  }
}

/* xhat = (x - mean) rstd, y = xhat w + b. With g = dy w:
 *   dx = rstd (g - mean(g) - xhat mean(g xhat)),  dw = sum dy xhat,  db = sum dy
 * (all accumulate) */
static void ref_ln_backward(double *dinp, double *dw, double *db, const double *dout,
                            const double *inp, const double *w, const double *mean,
                            const double *rstd, int N, int C) {
  for (int n = 0; n < N; n++) {
    const double *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    double g_mean = 0.0, gx_mean = 0.0;
    for (int c = 0; c < C; c++) {
      double xhat = (x[c] - mean[n]) * rstd[n];
      g_mean += dy[c] * w[c];
      gx_mean += dy[c] * w[c] * xhat;
      dw[c] += dy[c] * xhat;
      db[c] += dy[c];
    }
    g_mean /= C;
    gx_mean /= C;
    for (int c = 0; c < C; c++) {
      double xhat = (x[c] - mean[n]) * rstd[n];
      dinp[(size_t)n * C + c] += rstd[n] * (dy[c] * w[c] - g_mean - xhat * gx_mean);
    }
  }
}

/* out (N,OC) = inp (N,C) w^T + b; w (OC,C) */
static void ref_linear_forward(double *out, const double *inp, const double *w, const double *b,
                               int N, int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double acc = b ? b[o] : 0.0;
      for (int c = 0; c < C; c++) acc += inp[(size_t)n * C + c] * w[(size_t)o * C + c];
      out[(size_t)n * OC + o] = acc;
    }
}

static void ref_linear_backward(double *dinp, double *dw, double *db, const double *dout,
                                const double *inp, const double *w, int N, int C, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double d = dout[(size_t)n * OC + o];
      if (db) db[o] += d;
      for (int c = 0; c < C; c++) {
        dw[(size_t)o * C + c] += d * inp[(size_t)n * C + c];
        dinp[(size_t)n * C + c] += d * w[(size_t)o * C + c];
      }
    }
}

/* Causal multi-head attention. qkv (B,T,3C) = [q | k | v], head h uses
 * channels h*hs..(h+1)*hs-1 of each; att (B,NH,T,T) = probabilities,
 * 0 above the diagonal; lse (B,NH,T) = log sum_j exp(scale q_t.k_j), what
 * the model keeps instead of att; out (B,T,C). */
static void ref_attention_forward(double *out, double *att, double *lse, const double *qkv,
                                  int B, int T, int C, int NH) {
  int hs = C / NH;
  double scale = 1.0 / sqrt((double)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
        double *p = att + (((size_t)b * NH + h) * T + t) * T;
        double maxv = -INFINITY, sum = 0.0;
        for (int j = 0; j <= t; j++) {
          const double *k = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs;
          double s = 0.0;
          for (int i = 0; i < hs; i++) s += q[i] * k[i];
          p[j] = s * scale;
          if (p[j] > maxv) maxv = p[j];
        }
        for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - maxv));
        lse[((size_t)b * NH + h) * T + t] = maxv + log(sum);
        for (int j = 0; j <= t; j++) p[j] /= sum;
        for (int j = t + 1; j < T; j++) p[j] = 0.0;
        double *y = out + ((size_t)b * T + t) * C + (size_t)h * hs;
        for (int i = 0; i < hs; i++) {
          double acc = 0.0;
          for (int j = 0; j <= t; j++)
            acc += p[j] * qkv[((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * hs + i];
          y[i] = acc;
        }
      }
}

/* y_t = sum_j p_tj v_j, p_t = softmax_j(scale q_t.k_j), j <= t:
 *   dp_tj = dy_t.v_j      dv_j += p_tj dy_t
 *   ds_tj = p_tj (dp_tj - sum_k p_tk dp_tk)
 *   dq_t += scale sum_j ds_tj k_j      dk_j += scale ds_tj q_t          */
static void ref_attention_backward(double *dqkv, const double *dout, const double *qkv,
                                   const double *att, int B, int T, int C, int NH) {
  int hs = C / NH;
  double scale = 1.0 / sqrt((double)hs);
  double *dp = dalloc((size_t)T);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < NH; h++)
      for (int t = 0; t < T; t++) {
        const double *p = att + (((size_t)b * NH + h) * T + t) * T;
        const double *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
        size_t qoff = ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
        double dot = 0.0;
        for (int j = 0; j <= t; j++) {
          size_t voff = ((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * hs;
          dp[j] = 0.0;
          for (int i = 0; i < hs; i++) {
            dp[j] += dy[i] * qkv[voff + i];
            dqkv[voff + i] += p[j] * dy[i];
          }
          dot += p[j] * dp[j];
        }
        for (int j = 0; j <= t; j++) {
          double ds = p[j] * (dp[j] - dot) * scale;
          size_t koff = ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs;
          for (int i = 0; i < hs; i++) {
            dqkv[qoff + i] += ds * qkv[koff + i];
            dqkv[koff + i] += ds * qkv[qoff + i];
          }
        }
      }
  free(dp);
}

#define GELU_K 0.79788456080286535588 /* sqrt(2/pi) */

static double ref_gelu(double x) {
  return 0.5 * x * (1.0 + tanh(GELU_K * (x + 0.044715 * x * x * x)));
}

static double ref_gelu_grad(double x) {
  double th = tanh(GELU_K * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
}

/* ------------------------------------------------------------------ */
/* reference model                                                     */

typedef struct {
  int B;
  double *x;                          /* (L+1,BT,C): x[0] embeddings, x[l+1] block l output */
  double *ln1, *ln1_mean, *ln1_rstd;  /* (L,BT,C), (L,BT) */
  double *qkv;                        /* (L,BT,3C) */
  double *att;                        /* (L,B,NH,T,T) */
  double *lse;                        /* (L,B,NH,T) */
  double *atty;                       /* (L,BT,C) */
  double *res2;                       /* (L,BT,C) x + attention */
  double *ln2, *ln2_mean, *ln2_rstd;  /* (L,BT,C), (L,BT) */
  double *fch, *fcg;                  /* (L,BT,4C) before and after GELU */
  double *lnf, *lnf_mean, *lnf_rstd;  /* (BT,C), (BT) */
  double *probs;                      /* (BT,V), true vocabulary only */
  double *losses;                     /* (BT) */
} ref_acts;

static void ref_acts_alloc(ref_acts *a, const ref_model *r, int B) {
  size_t BT = (size_t)B * r->T, C = (size_t)r->C, L = (size_t)r->L;
  a->B = B;
  a->x = dalloc((L + 1) * BT * C);
  a->ln1 = dalloc(L * BT * C);
  a->ln1_mean = dalloc(L * BT);
  a->ln1_rstd = dalloc(L * BT);
  a->qkv = dalloc(L * BT * 3 * C);
  a->att = dalloc(L * (size_t)B * r->NH * r->T * r->T);
  a->lse = dalloc(L * (size_t)B * r->NH * r->T);
  a->atty = dalloc(L * BT * C);
  a->res2 = dalloc(L * BT * C);
  a->ln2 = dalloc(L * BT * C);
  a->ln2_mean = dalloc(L * BT);
  a->ln2_rstd = dalloc(L * BT);
  a->fch = dalloc(L * BT * 4 * C);
  a->fcg = dalloc(L * BT * 4 * C);
  a->lnf = dalloc(BT * C);
  a->lnf_mean = dalloc(BT);
  a->lnf_rstd = dalloc(BT);
  a->probs = dalloc(BT * (size_t)r->V);
  a->losses = dalloc(BT);
}

static void ref_acts_free(ref_acts *a) {
  double *all[] = {a->x,    a->ln1,      a->ln1_mean, a->ln1_rstd, a->qkv,      a->att,
                   a->atty, a->res2,     a->ln2,      a->ln2_mean, a->ln2_rstd, a->fch,
                   a->fcg,  a->lnf,      a->lnf_mean, a->lnf_rstd, a->probs,    a->losses,
                   a->lse};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

/* Mean cross-entropy of the GPT-2 with parameters P (flat, the model's
 * layout) on inputs/targets (B,T); fills a (sized for B). */
static double ref_forward(const ref_model *r, const double *P, const int *inp, const int *tgt,
                          ref_acts *a) {
  const int B = a->B, T = r->T, C = r->C, NH = r->NH, L = r->L, V = r->V, BT = B * T;
  const size_t btc = (size_t)BT * C;
  for (int bt = 0; bt < BT; bt++)
    for (int c = 0; c < C; c++)
      a->x[(size_t)bt * C + c] = P[r->wte + (size_t)inp[bt] * C + c] + P[r->wpe + (size_t)(bt % T) * C + c];
  double *pend = dalloc(btc); /* the ladder: the previous MLP's output, not yet in x */
  for (int l = 0; l < L; l++) {
    const ref_block *w = &r->blk[l];
    const double *x = a->x + l * btc;
    double *ln1 = a->ln1 + l * btc, *qkv = a->qkv + 3 * l * btc, *atty = a->atty + l * btc;
    double *res2 = a->res2 + l * btc, *ln2 = a->ln2 + l * btc, *out = a->x + (l + 1) * btc;
    double *fch = a->fch + 4 * l * btc, *fcg = a->fcg + 4 * l * btc;
    double *tmp = dalloc(btc), *proj = dalloc(btc);
    ref_ln_forward(ln1, a->ln1_mean + l * BT, a->ln1_rstd + l * BT, x, P + w->ln1_w,
                   P + w->ln1_b, BT, C);
    ref_linear_forward(qkv, ln1, P + w->qkv_w, P + w->qkv_b, BT, C, 3 * C);
    ref_attention_forward(atty, a->att + (size_t)l * B * NH * T * T, a->lse + (size_t)l * B * NH * T,
                          qkv, B, T, C, NH);
    ref_linear_forward(proj, atty, P + w->attn_proj_w, P + w->attn_proj_b, BT, C, C);
    for (size_t i = 0; i < btc; i++) res2[i] = x[i] + (r->ladder ? pend[i] : proj[i]);
    ref_ln_forward(ln2, a->ln2_mean + l * BT, a->ln2_rstd + l * BT, res2, P + w->ln2_w,
                   P + w->ln2_b, BT, C);
    ref_linear_forward(fch, ln2, P + w->fc_w, P + w->fc_b, BT, C, 4 * C);
    for (size_t i = 0; i < 4 * btc; i++) fcg[i] = ref_gelu(fch[i]);
    ref_linear_forward(tmp, fcg, P + w->fc_proj_w, P + w->fc_proj_b, BT, 4 * C, C);
    for (size_t i = 0; i < btc; i++)
      out[i] = !r->ladder ? res2[i] + tmp[i] : res2[i] + proj[i] + (l == L - 1 ? tmp[i] : 0.0);
    memcpy(pend, tmp, btc * sizeof(double));
    free(tmp);
    free(proj);
  }
  free(pend);
  ref_ln_forward(a->lnf, a->lnf_mean, a->lnf_rstd, a->x + L * btc, P + r->lnf_w, P + r->lnf_b,
                 BT, C);
  /* logits over the true vocabulary only: rows >= V of wte are never read */
  double loss = 0.0;
  for (int bt = 0; bt < BT; bt++) {
    double *p = a->probs + (size_t)bt * V, maxv = -INFINITY, sum = 0.0;
    ref_linear_forward(p, a->lnf + (size_t)bt * C, P + r->wte, NULL, 1, C, V);
    double logit_target = p[tgt[bt]];
    for (int v = 0; v < V; v++) maxv = p[v] > maxv ? p[v] : maxv;
    for (int v = 0; v < V; v++) sum += (p[v] = exp(p[v] - maxv));
    for (int v = 0; v < V; v++) p[v] /= sum;
    a->losses[bt] = log(sum) + maxv - logit_target;
    loss += a->losses[bt];
  }
  return loss / BT;
}

/* G += d(sum over positions of loss * dloss)/dP, from the activations of the
 * last ref_forward. */
static void ref_backward(const ref_model *r, const double *P, const ref_acts *a, const int *inp,
                         const int *tgt, double dloss, double *G) {
  const int B = a->B, T = r->T, C = r->C, NH = r->NH, L = r->L, V = r->V, BT = B * T;
  const size_t btc = (size_t)BT * C;
  double *dx = dalloc(btc), *dln = dalloc(btc), *datty = dalloc(btc);
  double *dqkv = dalloc(3 * btc), *dfch = dalloc(4 * btc), *dfcg = dalloc(4 * btc);
  double *dlogits = dalloc((size_t)BT * V);
  for (int bt = 0; bt < BT; bt++)
    for (int v = 0; v < V; v++)
      dlogits[(size_t)bt * V + v] = (a->probs[(size_t)bt * V + v] - (v == tgt[bt])) * dloss;
  ref_linear_backward(dln, G + r->wte, NULL, dlogits, a->lnf, P + r->wte, BT, C, V);
  ref_ln_backward(dx, G + r->lnf_w, G + r->lnf_b, dln, a->x + L * btc, P + r->lnf_w, a->lnf_mean,
                  a->lnf_rstd, BT, C);
  for (int l = L - 1; l >= 0; l--) {
    const ref_block *w = &r->blk[l];
    /* dx: gradient of block l's output; MLP branch, then the residual */
    memset(dfcg, 0, 4 * btc * sizeof(double));
    ref_linear_backward(dfcg, G + w->fc_proj_w, G + w->fc_proj_b, dx, a->fcg + 4 * l * btc,
                        P + w->fc_proj_w, BT, 4 * C, C);
    for (size_t i = 0; i < 4 * btc; i++) dfch[i] = ref_gelu_grad(a->fch[4 * l * btc + i]) * dfcg[i];
    memset(dln, 0, btc * sizeof(double));
    ref_linear_backward(dln, G + w->fc_w, G + w->fc_b, dfch, a->ln2 + l * btc, P + w->fc_w, BT,
                        C, 4 * C);
    ref_ln_backward(dx, G + w->ln2_w, G + w->ln2_b, dln, a->res2 + l * btc, P + w->ln2_w,
                    a->ln2_mean + l * BT, a->ln2_rstd + l * BT, BT, C);
    /* dx: gradient of res2; attention branch, then the residual */
    memset(datty, 0, btc * sizeof(double));
    ref_linear_backward(datty, G + w->attn_proj_w, G + w->attn_proj_b, dx, a->atty + l * btc,
                        P + w->attn_proj_w, BT, C, C);
    memset(dqkv, 0, 3 * btc * sizeof(double));
    ref_attention_backward(dqkv, datty, a->qkv + 3 * l * btc,
                           a->att + (size_t)l * B * NH * T * T, B, T, C, NH);
    memset(dln, 0, btc * sizeof(double));
    ref_linear_backward(dln, G + w->qkv_w, G + w->qkv_b, dqkv, a->ln1 + l * btc, P + w->qkv_w,
                        BT, C, 3 * C);
    ref_ln_backward(dx, G + w->ln1_w, G + w->ln1_b, dln, a->x + l * btc, P + w->ln1_w,
                    a->ln1_mean + l * BT, a->ln1_rstd + l * BT, BT, C);
  }
  for (int bt = 0; bt < BT; bt++)
    for (int c = 0; c < C; c++) {
      G[r->wte + (size_t)inp[bt] * C + c] += dx[(size_t)bt * C + c];
      G[r->wpe + (size_t)(bt % T) * C + c] += dx[(size_t)bt * C + c];
    }
  free(dx);
  free(dln);
  free(datty);
  free(dqkv);
  free(dfch);
  free(dfcg);
  free(dlogits);
}

/* ------------------------------------------------------------------ */
/* comparisons                                                         */

/* max |got - ref| / max |ref| over n elements (ref max 0: absolute error) */
static double rel_err_f(const float *got, const double *ref, size_t n, double *ref_max) {
  double emax = 0.0, rmax = 0.0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - ref[i]);
    if (!(e <= emax)) emax = e; /* NaN propagates */
    if (fabs(ref[i]) > rmax) rmax = fabs(ref[i]);
  }
  if (ref_max) *ref_max = rmax;
  return rmax > 0.0 ? emax / rmax : emax;
}

static void check_act(const char *tag, const char *what, const float *got, const double *ref,
                      size_t n) {
  double rmax, e = rel_err_f(got, ref, n, &rmax);
  int ok = e <= TOL_ACT;
  printf("  act  %-22s max|ref| %.3e  rel err %.2e %s\n", what, rmax, e, ok ? "ok" : "FAIL");
  if (!ok)
    MT_FAIL("%s: activation %s differs from the reference: rel err %.3e > %.0e", tag, what, e,
            TOL_ACT);
}

/* Leading elements of tensor i that hold real values: all but the wte
 * padding rows, which come last in the row-major padded layout. */
static size_t real_numel(const mt_gpt *m, int i) { return mt_tensor_numel(&m->reg.t[i]); }

/* ------------------------------------------------------------------ */
/* one case                                                            */

typedef struct {
  const char *tag;
  int n_layer, n_embd, n_head, vocab; /* 0: keep the tiny preset's */
  int perturb;                        /* replace parameters by O(0.1..1) noise */
  int garbage_padding;                /* fill wte rows >= V with noise */
  int ladder;                         /* the ladder residual (forward only) */
} test_case;

/* Every parameter set to noise of a scale that keeps activations O(1):
 * weights 0.15 (so a C=32 dot product is ~0.85), biases 0.05, LayerNorm
 * weights 1 +- 0.2 and biases +- 0.1. wte padding rows stay 0 unless
 * garbage_padding. */
static void perturb_params(mt_gpt *m, const test_case *tc) {
  for (int i = 0; i < m->reg.n; i++) {
    const mt_tensor *t = &m->reg.t[i];
    float *p = m->params + t->offset;
    int is_ln = strstr(t->name, "ln") == t->name || strstr(t->name, ".ln") != NULL;
    int is_bias = strstr(t->name, ".bias") != NULL;
    for (size_t j = 0; j < t->numel_local; j++) {
      double u = rng_uniform_f64(-1, 1);
      p[j] = (float)(is_ln ? (is_bias ? 0.1 * u : 1.0 + 0.2 * u) : is_bias ? 0.05 * u : 0.15 * u);
    }
  }
  int wte = mt_registry_find(&m->reg, "wte.weight");
  size_t C = (size_t)m->shape.n_embd;
  for (size_t j = (size_t)m->shape.vocab * C; j < (size_t)m->shape.vocab_padded * C; j++)
    m->params[m->reg.t[wte].offset + j] =
        tc->garbage_padding ? (float)(0.5 * rng_uniform_f64(-1, 1)) : 0.0f;
}

static void run_case(const test_case *tc) {
  mt_model_shape s;
  if (mt_model_preset(MT_PRESET_TINY, &s) != 0) {
    MT_FAIL("%s: preset tiny is unknown", tc->tag);
    return;
  }
  s.seq_len = 8;
  if (tc->n_layer) s.n_layer = tc->n_layer;
  if (tc->n_embd) s.n_embd = tc->n_embd;
  if (tc->n_head) s.n_head = tc->n_head;
  if (tc->vocab) s.vocab = tc->vocab;
  s.vocab_padded = (s.vocab + 63) / 64 * 64;
  if (tc->ladder) s.residual = MT_RESIDUAL_LADDER;
  const int B = 2, T = s.seq_len, BT = B * T, V = s.vocab, Vp = s.vocab_padded, C = s.n_embd;
  printf("case %s: L=%d C=%d NH=%d T=%d V=%d Vp=%d B=%d%s%s\n", tc->tag, s.n_layer, C, s.n_head,
         T, V, Vp, B, tc->perturb ? ", perturbed parameters" : ", init parameters",
         tc->garbage_padding ? ", garbage in wte padding rows" : "");

  mt_gpt m;
  mt_err e = {0};
  if (mt_gpt_create(&m, &s, mt_ops_cpu(), B, &e) != 0) {
    MT_FAIL("%s: mt_gpt_create: %s", tc->tag, e.msg);
    return;
  }
  mt_gpt_init_params(&m, 1234);
  if (tc->perturb) perturb_params(&m, tc);
  ref_model r;
  ref_model_init(&r, &m);
  r.ladder = tc->ladder;
  check_views(&m, &r, tc->tag);

  int *inp = malloc((size_t)BT * sizeof(int)), *tgt = malloc((size_t)BT * sizeof(int));
  for (int i = 0; i < BT; i++) {
    inp[i] = (int)(rng_next() % (uint64_t)V);
    tgt[i] = (int)(rng_next() % (uint64_t)V);
  }
  inp[BT - 1] = inp[0];       /* one token twice: its wte row sums two positions */
  inp[T + 2] = V - 1;         /* last real row and column */
  tgt[1] = V - 1;

  /* model: B = 2 at once */
  mt_gpt_zero_grad(&m);
  float loss = mt_gpt_forward(&m, inp, tgt, B);

  /* reference forward and backward in double on the same fp32 values */
  double *P = dalloc(r.n), *G = dalloc(r.n);
  for (size_t i = 0; i < r.n; i++) P[i] = (double)m.params[i];
  ref_acts a;
  ref_acts_alloc(&a, &r, B);
  double ref_loss = ref_forward(&r, P, inp, tgt, &a);
  if (!tc->ladder) ref_backward(&r, P, &a, inp, tgt, 1.0 / BT, G);

  double loss_err = fabs((double)loss - ref_loss) / fabs(ref_loss);
  printf("  loss model %.8f  reference %.8f  rel err %.2e %s\n", (double)loss, ref_loss, loss_err,
         loss_err <= TOL_LOSS ? "ok" : "FAIL");
  if (!(loss_err <= TOL_LOSS))
    MT_FAIL("%s: loss %.8f differs from the reference %.8f (rel %.3e > %.0e)", tc->tag,
            (double)loss, ref_loss, loss_err, TOL_LOSS);

  /* activations, before backward overwrites the probabilities */
  const size_t btc = (size_t)BT * C;
  check_act(tc->tag, "encoded", m.a.encoded, a.x, btc);
  char what[64];
  for (int l = 0; l < s.n_layer; l++) {
#define ACT(name, got, ref, n) \
  (snprintf(what, sizeof what, "%d.%s", l, name), check_act(tc->tag, what, got, ref, n))
    ACT("ln1", (float *)m.a.ln1 + l * btc, a.ln1 + l * btc, btc);
    ACT("qkv", (float *)m.a.qkv + 3 * l * btc, a.qkv + 3 * l * btc, 3 * btc);
    ACT("lse", m.a.lse + (size_t)l * B * s.n_head * T, a.lse + (size_t)l * B * s.n_head * T,
        (size_t)B * s.n_head * T);
    ACT("atty", (float *)m.a.atty + l * btc, a.atty + l * btc, btc);
    ACT("residual2", (float *)m.a.residual2 + l * btc, a.res2 + l * btc, btc);
    ACT("fch_gelu", (float *)m.a.fch_gelu + 4 * l * btc, a.fcg + 4 * l * btc, 4 * btc);
    ACT("residual3", (float *)m.a.residual3 + l * btc, a.x + (l + 1) * btc, btc);
#undef ACT
  }
  check_act(tc->tag, "lnf", m.a.lnf, a.lnf, btc);
  {
    double emax = 0.0, pad_max = 0.0;
    for (int bt = 0; bt < BT; bt++) {
      for (int v = 0; v < V; v++) {
        double d = fabs((double)((float *)m.a.logits)[(size_t)bt * Vp + v] - a.probs[(size_t)bt * V + v]);
        if (!(d <= emax)) emax = d;
      }
      for (int v = V; v < Vp; v++) {
        double d = fabs((double)((float *)m.a.logits)[(size_t)bt * Vp + v]);
        if (!(d <= pad_max)) pad_max = d;
      }
    }
    int ok = emax <= TOL_ACT && pad_max == 0.0;
    printf("  act  %-22s max abs err %.2e, padding max %.1e %s\n", "probs", emax, pad_max,
           ok ? "ok" : "FAIL");
    if (!ok)
      MT_FAIL(
          "%s: probabilities: max abs err %.3e (tol %.0e), padding columns max %.3e (must be 0)",
          tc->tag, emax, TOL_ACT, pad_max);
  }

  /* ladder: forward only (the reference backward is the standard wiring's) */
  if (tc->ladder) goto done;
  mt_gpt_backward(&m, 1.0f / (float)BT, NULL, NULL);

  /* reference backward against finite differences of the reference forward */
  {
    ref_acts fa;
    ref_acts_alloc(&fa, &r, B);
    double worst = 0.0;
    const char *worst_name = "";
    for (int i = 0; i < m.reg.n; i++) {
      const mt_tensor *t = &m.reg.t[i];
      size_t n = real_numel(&m, i);
      double gmax = 0.0;
      for (size_t j = 0; j < n; j++) gmax = mt_worst(gmax, fabs(G[t->offset + j]));
      for (int k = 0; k < FD_PER_TENSOR; k++) {
        size_t j = t->offset + (size_t)(rng_next() % n);
        double p0 = P[j], h = 1e-5 * fmax(1.0, fabs(p0));
        P[j] = p0 + h;
        double lp = ref_forward(&r, P, inp, tgt, &fa);
        P[j] = p0 - h;
        double lm = ref_forward(&r, P, inp, tgt, &fa);
        P[j] = p0;
        double fd = (lp - lm) / (2.0 * h);
        double err = fabs(fd - G[j]) / (gmax > 0.0 ? gmax : 1.0);
        if (err > worst) {
          worst = err;
          worst_name = t->name;
        }
        if (!(err <= TOL_FD))
          MT_FAIL(
              "%s: reference gradient of %s[%zu] = %.6e but finite differences give %.6e "
              "(the reference itself is wrong)",
              tc->tag, t->name, j - t->offset, G[j], fd);
      }
    }
    printf("  reference vs finite differences (%d elements per tensor): worst rel err %.2e (%s) %s\n",
           FD_PER_TENSOR, worst, worst_name, worst <= TOL_FD ? "ok" : "FAIL");
    ref_acts_free(&fa);
  }

  /* every parameter gradient */
  double worst = 0.0;
  for (int i = 0; i < m.reg.n; i++) {
    const mt_tensor *t = &m.reg.t[i];
    size_t n = real_numel(&m, i);
    double gmax, err = rel_err_f(m.grads + t->offset, G + t->offset, n, &gmax);
    int ok = err <= TOL_GRAD;
    worst = mt_worst(worst, err);
    printf("  grad %-26s max|ref| %.3e  rel err %.2e %s\n", t->name, gmax, err, ok ? "ok" : "FAIL");
    if (!ok)
      MT_FAIL("%s: gradient of %s differs from the reference: rel err %.3e > %.0e", tc->tag,
              t->name, err, TOL_GRAD);
    if (t->numel_local > n) { /* padding (wte rows >= V): must be exactly zero */
      size_t nonzero = 0;
      for (size_t j = n; j < t->numel_local; j++) nonzero += m.grads[t->offset + j] != 0.0f;
      printf("  grad %-26s padding rows %d..%d: %zu non-zero of %zu %s\n", t->name, V, Vp - 1,
             nonzero, t->numel_local - n, nonzero ? "FAIL" : "ok");
      if (nonzero)
        MT_FAIL("%s: %zu elements of the padding rows (>= %d) of %s have a non-zero gradient",
                tc->tag, nonzero, V, t->name);
    }
  }
  printf("  worst parameter gradient rel err %.2e (tolerance %.0e)\n", worst, TOL_GRAD);

  /* gradient accumulation: two micro-batches of B = 1 with dloss 1/(2T) give
   * the gradient of the B = 2 batch */
  {
    size_t n = m.reg.numel_local;
    float *g2 = malloc(n * sizeof(float));
    memcpy(g2, m.grads, n * sizeof(float));
    mt_gpt_zero_grad(&m);
    float l0 = mt_gpt_forward(&m, inp, tgt, 1);
    mt_gpt_backward(&m, 1.0f / (float)(2 * T), NULL, NULL);
    float l1 = mt_gpt_forward(&m, inp + T, tgt + T, 1);
    mt_gpt_backward(&m, 1.0f / (float)(2 * T), NULL, NULL);
    double lsplit = 0.5 * ((double)l0 + (double)l1);
    double lerr = fabs(lsplit - (double)loss) / fabs((double)loss);
    double gworst = 0.0;
    const char *gworst_name = "";
    for (int i = 0; i < m.reg.n; i++) {
      const mt_tensor *t = &m.reg.t[i];
      double emax = 0.0, rmax = 0.0;
      for (size_t j = 0; j < t->numel_local; j++) {
        double d = fabs((double)m.grads[t->offset + j] - (double)g2[t->offset + j]);
        if (!(d <= emax)) emax = d;
        rmax = mt_worst(rmax, fabs((double)g2[t->offset + j]));
      }
      double err = rmax > 0.0 ? emax / rmax : emax;
      if (!(err <= gworst)) {
        gworst = err;
        gworst_name = t->name;
      }
      if (!(err <= TOL_SPLIT))
        MT_FAIL(
            "%s: gradient of %s from 2 micro-batches of B=1 differs from B=2: rel err %.3e > %.0e",
            tc->tag, t->name, err, TOL_SPLIT);
    }
    printf("  batch split 2x(B=1) vs B=2: loss rel err %.2e, worst grad rel err %.2e (%s) %s\n",
           lerr, gworst, gworst_name, lerr <= TOL_SPLIT && gworst <= TOL_SPLIT ? "ok" : "FAIL");
    if (!(lerr <= TOL_SPLIT))
      MT_FAIL("%s: mean loss of 2 micro-batches %.8f differs from B=2 loss %.8f", tc->tag, lsplit,
              (double)loss);
    free(g2);
  }

done:
  ref_acts_free(&a);
  free(P);
  free(G);
  free(inp);
  free(tgt);
  free(r.blk);
  mt_gpt_destroy(&m);
}

int main(void) {
  g_rng = 0x243F6A8885A308D3ULL; /* this test's inputs */
  const char *threads = getenv("MT_TEST_THREADS");
  mt_kernels_set_threads(threads ? atoi(threads) : 1);
  printf("test_model_ref: %d compute thread(s)\n", mt_kernels_threads());
  const test_case cases[] = {
      {"tiny-init", 0, 0, 0, 0, 0, 0, 0},
      {"tiny-perturb", 0, 0, 0, 0, 1, 0, 0},
      {"padded-vocab", 2, 24, 3, 100, 1, 1, 0},
      {"ladder", 3, 0, 0, 0, 1, 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
  return mt_check_summary("test_model_ref");
}
