/* CPU backend of the op table: plain C loops parallelised with OpenMP, and
 * OpenBLAS cblas_sgemm for every matrix product (matmuls and attention).
 *
 * Determinism: for a fixed thread count every op returns the same bits on
 * every run. OpenMP loops use schedule(static) and never reduce across
 * threads; a sum over rows (dw, dbias, dwte) is owned by the thread that owns
 * the column, and walks the rows in order. Most ops (everything but the
 * multi-threaded sgemms in matmul) even give the same bits at any thread
 * count. Backward ops ACCUMULATE into their gradients (see kernels.h). */
#include "kernels/kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

/* Columns (channels) per task when a sum over rows is split by column: wide
 * enough for contiguous, vectorised rows, narrow enough to spread over threads. */
#define MT_COL_BLOCK 64
/* Attention rows per sgemm: a row block only needs key columns up to its last
 * row (causality), which skips ~3/8 of the work at T=256 and ~1/2 for long T. */
#define MT_ATT_BLOCK 64

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* ------------------------------------------------------------------ */
/* encoder                                                             */

/* out (B,T,C) = wte[inp[b,t]] (Vp,C) + wpe[t] (T_max,C) */
static void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                            int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    int t = bt % T;
    float *out_bt = out + (size_t)bt * C;
    const float *wte_ix = wte + (size_t)inp[bt] * C;
    const float *wpe_t = wpe + (size_t)t * C;
    for (int c = 0; c < C; c++) out_bt[c] = wte_ix[c] + wpe_t[c];
  }
}

/* dwte[inp[b,t]] += dout[b,t]; dwpe[t] += dout[b,t]; dout (B,T,C).
 * Two positions may carry the same token, so the work is split by channel
 * block, not by position: each thread owns whole columns of dwte and dwpe and
 * adds positions in (b,t) order, the same order at any thread count. */
static void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                             int B, int T, int C) {
  int nblocks = (C + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * MT_COL_BLOCK, c1 = min_int(c0 + MT_COL_BLOCK, C);
    for (int bt = 0; bt < B * T; bt++) {
      int t = bt % T;
      const float *dout_bt = dout + (size_t)bt * C;
      float *dwte_ix = dwte + (size_t)inp[bt] * C;
      float *dwpe_t = dwpe + (size_t)t * C;
      for (int c = c0; c < c1; c++) {
        dwte_ix[c] += dout_bt[c];
        dwpe_t[c] += dout_bt[c];
      }
    }
  }
}

/* Vocabulary-parallel encoder: rows [v0, v0+Vl) of wte live here as (Vl,C).
 * out = wte[inp-v0] (or 0 for a token held elsewhere) + wpe[t] (when wpe is
 * given): the same one addition as encoder_forward, so summing the ranks'
 * outputs (one holds the token, the others add exact zeros) reproduces it. */
static void encoder_vp_forward(float *out, const int *inp, const float *wte, int v0, int Vl,
                               const float *wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    int t = bt % T, row = inp[bt] - v0;
    float *out_bt = out + (size_t)bt * C;
    const float *wte_ix = row >= 0 && row < Vl ? wte + (size_t)row * C : NULL;
    const float *wpe_t = wpe ? wpe + (size_t)t * C : NULL;
    if (wte_ix && wpe_t)
      for (int c = 0; c < C; c++) out_bt[c] = wte_ix[c] + wpe_t[c];
    else if (wte_ix)
      memcpy(out_bt, wte_ix, (size_t)C * sizeof(float));
    else if (wpe_t)
      memcpy(out_bt, wpe_t, (size_t)C * sizeof(float));
    else
      memset(out_bt, 0, (size_t)C * sizeof(float));
  }
}

/* encoder_backward restricted to the local rows of wte; dwpe may be NULL.
 * Same column-block split and position order as encoder_backward. */
static void encoder_vp_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                                int v0, int Vl, int B, int T, int C) {
  int nblocks = (C + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * MT_COL_BLOCK, c1 = min_int(c0 + MT_COL_BLOCK, C);
    for (int bt = 0; bt < B * T; bt++) {
      int t = bt % T, row = inp[bt] - v0;
      const float *dout_bt = dout + (size_t)bt * C;
      if (row >= 0 && row < Vl) {
        float *dwte_ix = dwte + (size_t)row * C;
        for (int c = c0; c < c1; c++) dwte_ix[c] += dout_bt[c];
      }
      if (dwpe) {
        float *dwpe_t = dwpe + (size_t)t * C;
        for (int c = c0; c < c1; c++) dwpe_t[c] += dout_bt[c];
      }
    }
  }
}

/* ------------------------------------------------------------------ */
/* layernorm                                                           */

/* out (N,C) = (inp - mean) * rstd * w + b, per row n of inp (N,C);
 * mean (N), rstd (N) = 1/sqrt(var + 1e-5) with the biased variance. The row
 * sums are `omp simd` reductions (vectorised; a fixed order, so the same
 * bits on every run). */
static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C) {
  const float eps = 1e-5f;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    float m = 0.0f;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
      float d = x[c] - m;
      v += d * d;
    }
    v /= C;
    float s = 1.0f / sqrtf(v + eps);
    float *y = out + (size_t)n * C;
    for (int c = 0; c < C; c++) y[c] = (x[c] - m) * s * w[c] + b[c];
    mean[n] = m;
    rstd[n] = s;
  }
}

/* With norm = (inp - mean) * rstd and g = w * dout (per row, over C):
 *   dinp += (g - mean_c(g) - norm * mean_c(g * norm)) * rstd
 *   dw   += sum_n dout * norm        db += sum_n dout
 * dinp is done per row; dw and db per column block, rows in order. */
static void layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *x = inp + (size_t)n * C;
    const float *dy = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n];
    float g_mean = 0.0f, gnorm_mean = 0.0f;
#pragma omp simd reduction(+ : g_mean, gnorm_mean)
    for (int c = 0; c < C; c++) {
      float norm = (x[c] - m) * s;
      float g = w[c] * dy[c];
      g_mean += g;
      gnorm_mean += g * norm;
    }
    g_mean /= C;
    gnorm_mean /= C;
    float *dx = dinp + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float norm = (x[c] - m) * s;
      float g = w[c] * dy[c];
      dx[c] += (g - g_mean - norm * gnorm_mean) * s;
    }
  }
  int nblocks = (C + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * MT_COL_BLOCK, c1 = min_int(c0 + MT_COL_BLOCK, C);
    float dw_acc[MT_COL_BLOCK] = {0}, db_acc[MT_COL_BLOCK] = {0};
    for (int n = 0; n < N; n++) {
      const float *x = inp + (size_t)n * C;
      const float *dy = dout + (size_t)n * C;
      float m = mean[n], s = rstd[n];
      for (int c = c0; c < c1; c++) {
        dw_acc[c - c0] += (x[c] - m) * s * dy[c];
        db_acc[c - c0] += dy[c];
      }
    }
    for (int c = c0; c < c1; c++) {
      dw[c] += dw_acc[c - c0];
      db[c] += db_acc[c - c0];
    }
  }
}

/* ------------------------------------------------------------------ */
/* matmul                                                              */

/* out (N,OC) = inp (N,C) @ w^T + bias; w (OC,C), bias (OC) or NULL.
 * One sgemm "NT": out = inp * w^T; the bias is written first, beta = 1. */
static void matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                           int N, int C, int OC) {
  float beta = 0.0f;
  if (bias) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OC, bias, (size_t)OC * sizeof(float));
    beta = 1.0f;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, w, C, beta, out,
              OC);
}

/* dinp (N,C) += dout (N,OC) @ w (OC,C)          sgemm "NN"
 * dw (OC,C)  += dout^T (OC,N) @ inp (N,C)       sgemm "TN"
 * dbias (OC) += sum over rows of dout           (skipped when dbias is NULL;
 * dinp may be NULL too, for a layer whose input needs no gradient; dw NULL
 * skips the weight gradient, and inp is then unused: the input-gradient half
 * of a split backward) */
static void matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int C, int OC) {
  if (dinp)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, w, C, 1.0f,
                dinp, C);
  if (dw)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                dw, C);
  if (dbias) {
    int nblocks = (OC + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
      int o0 = blk * MT_COL_BLOCK, o1 = min_int(o0 + MT_COL_BLOCK, OC);
      float acc[MT_COL_BLOCK] = {0};
      for (int n = 0; n < N; n++) {
        const float *dy = dout + (size_t)n * OC;
        for (int o = o0; o < o1; o++) acc[o - o0] += dy[o];
      }
      for (int o = o0; o < o1; o++) dbias[o] += acc[o - o0];
    }
  }
}

/* ------------------------------------------------------------------ */
/* attention                                                           */

/* Threading: one OpenMP thread per (b,h) head with single-threaded sgemms
 * inside (the 64-row sgemms are too small to split), which also makes
 * attention bitwise independent of the thread count. The pool size of
 * OpenBLAS is global, so it is set to 1 for the parallel region and restored
 * after (a pthreads OpenBLAS would otherwise oversubscribe or serialise on
 * its lock). With an OpenMP OpenBLAS, openblas_set_num_threads also sets
 * OpenMP's default team size: the region must then ask for its team
 * explicitly (num_threads), or it runs on one thread (it did, until the
 * block attention measured it: 1 thread 80 ms, "2 threads" 91 ms). */
int mt_cpu_blas_serial_begin(int *blas_threads) {
  int team = mt_kernels_threads();
  *blas_threads = openblas_get_num_threads();
  if (*blas_threads != 1) openblas_set_num_threads(1);
  return team;
}

void mt_cpu_blas_serial_end(int blas_threads) {
  if (blas_threads != 1) openblas_set_num_threads(blas_threads);
}

/* One head. q, k, v point at this head's hs columns of (T,3C) rows (ld C3);
 * out_h at this head's columns of out (T,C) (ld C); att_h is (T,T).
 *   S = scale * Q K^T (T,T), causal: S[i][j] = -inf for j > i
 *   P = softmax over each row of S, stored in att_h, exact zeros for j > i
 *   out_h = P V (T,hs)
 * Row block [r0,r1) of S and of P V only touches columns/keys < r1. */
static void attention_forward_head(float *out_h, float *att_h, const float *q, const float *k,
                                   const float *v, int T, int C, int C3, int hs, float scale) {
  for (int r0 = 0; r0 < T; r0 += MT_ATT_BLOCK) {
    int r1 = min_int(r0 + MT_ATT_BLOCK, T);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale,
                q + (size_t)r0 * C3, C3, k, C3, 0.0f, att_h + (size_t)r0 * T, T);
  }
  for (int t = 0; t < T; t++) {
    float *row = att_h + (size_t)t * T;
    float maxv = row[0];
    for (int j = 1; j <= t; j++) maxv = row[j] > maxv ? row[j] : maxv;
    float sum = 0.0f;
    for (int j = 0; j <= t; j++) {
      row[j] = expf(row[j] - maxv);
      sum += row[j];
    }
    float inv = 1.0f / sum;
    for (int j = 0; j <= t; j++) row[j] *= inv;
    for (int j = t + 1; j < T; j++) row[j] = 0.0f;
  }
  for (int r0 = 0; r0 < T; r0 += MT_ATT_BLOCK) {
    int r1 = min_int(r0 + MT_ATT_BLOCK, T);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f,
                att_h + (size_t)r0 * T, T, v, C3, 0.0f, out_h + (size_t)r0 * C, C);
  }
}

/* qkv (B,T,3C) = q|k|v, head h of q at columns h*hs..h*hs+hs-1 (hs = C/NH),
 * k at C + h*hs, v at 2C + h*hs; scale = 1/sqrt(hs). out (B,T,C) has head h
 * at columns h*hs; att (B,NH,T,T) = P. The sgemms read qkv and write out in
 * place through their leading dimensions: no copies. */
static void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH) {
  int hs = C / NH, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  int blas_threads, team = mt_cpu_blas_serial_begin(&blas_threads);
#pragma omp parallel for schedule(static) num_threads(team)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    attention_forward_head(out + (size_t)b * T * C + (size_t)h * hs, att + (size_t)bh * T * T,
                           q, q + C, q + 2 * C, T, C, C3, hs, scale);
  }
  mt_cpu_blas_serial_end(blas_threads);
}

/* One head, same layout as the forward; dO = dout_h (T,hs, ld C), P = att_h.
 *   dV += P^T dO
 *   dP  = dO V^T                         (into dp_h, T x T scratch)
 *   dS  = P * (dP - rowsum(dP * P))      (softmax backward, in place in dp_h)
 *   dQ += scale * dS K
 *   dK += scale * dS^T Q
 * P and dS are lower triangular, so for output row block [r0,r1):
 * dV, dK only sum rows i >= r0 and dP, dQ only columns j < r1. */
static void attention_backward_head(float *dq, float *dk, float *dv, float *dp_h,
                                    const float *dout_h, const float *q, const float *k,
                                    const float *v, const float *att_h, int T, int C, int C3,
                                    int hs, float scale) {
  for (int r0 = 0; r0 < T; r0 += MT_ATT_BLOCK) {
    int r1 = min_int(r0 + MT_ATT_BLOCK, T);
    /* dV rows [r0,r1) += P[r0:T, r0:r1]^T dO[r0:T] */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, hs, T - r0, 1.0f,
                att_h + (size_t)r0 * T + r0, T, dout_h + (size_t)r0 * C, C, 1.0f,
                dv + (size_t)r0 * C3, C3);
    /* dP rows [r0,r1), columns [0,r1) = dO[r0:r1] V[0:r1]^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, 1.0f,
                dout_h + (size_t)r0 * C, C, v, C3, 0.0f, dp_h + (size_t)r0 * T, T);
  }
  for (int t = 0; t < T; t++) {
    const float *p = att_h + (size_t)t * T;
    float *dp = dp_h + (size_t)t * T;
    float dot = 0.0f;
    for (int j = 0; j <= t; j++) dot += p[j] * dp[j];
    for (int j = 0; j <= t; j++) dp[j] = p[j] * (dp[j] - dot);
    for (int j = t + 1; j < T; j++) dp[j] = 0.0f;
  }
  for (int r0 = 0; r0 < T; r0 += MT_ATT_BLOCK) {
    int r1 = min_int(r0 + MT_ATT_BLOCK, T);
    /* dQ rows [r0,r1) += scale * dS[r0:r1, 0:r1] K[0:r1] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, scale,
                dp_h + (size_t)r0 * T, T, k, C3, 1.0f, dq + (size_t)r0 * C3, C3);
    /* dK rows [r0,r1) += scale * dS[r0:T, r0:r1]^T Q[r0:T] */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, hs, T - r0, scale,
                dp_h + (size_t)r0 * T + r0, T, q + (size_t)r0 * C3, C3, 1.0f,
                dk + (size_t)r0 * C3, C3);
  }
}

/* dqkv (B,T,3C) += gradients of q|k|v; dout (B,T,C); att (B,NH,T,T) from the
 * forward; datt (B,NH,T,T) is scratch (holds dS on return). */
static void attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH) {
  int hs = C / NH, C3 = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  int blas_threads, team = mt_cpu_blas_serial_begin(&blas_threads);
#pragma omp parallel for schedule(static) num_threads(team)
  for (int bh = 0; bh < B * NH; bh++) {
    int b = bh / NH, h = bh % NH;
    size_t head = (size_t)b * T * C3 + (size_t)h * hs;
    const float *q = qkv + head;
    float *dq = dqkv + head;
    attention_backward_head(dq, dq + C, dq + 2 * C, datt + (size_t)bh * T * T,
                            dout + (size_t)b * T * C + (size_t)h * hs, q, q + C, q + 2 * C,
                            att + (size_t)bh * T * T, T, C, C3, hs, scale);
  }
  mt_cpu_blas_serial_end(blas_threads);
}

/* ------------------------------------------------------------------ */
/* gelu, residual                                                      */


/* out = a + b; out may alias a or b */
static void residual_forward(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* ------------------------------------------------------------------ */
/* softmax + cross-entropy                                             */

/* Row n of logits (N,Vp): p = softmax(logits[n, 0:V]), p = 0 on padding
 * columns V..Vp-1; losses[n] = -log p[target] computed as
 * log(sum_j exp(l_j - max)) + max - l_target, which stays finite when
 * p[target] underflows. probs may alias logits: l_target and the max are read
 * before the row is overwritten, and each exp is written over its own input.
 * The maximum and the exps are rows_cpu.c's vectorised loops (a polynomial
 * exp, relative error below 2e-7). */
static void softmax_xent_forward(float *losses, float *probs, const float *logits,
                                 const int *targets, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * Vp;
    float *p = probs + (size_t)n * Vp;
    float maxv = mt_cpu_row_max(l, V);
    float l_target = l[targets[n]];
    /* Vp is up to ~50k terms: summed in double */
    double sum = mt_cpu_row_exp_f64(p, l, V, maxv);
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < V; j++) p[j] *= inv;
    for (int j = V; j < Vp; j++) p[j] = 0.0f;
    losses[n] = (float)(log(sum) + (double)maxv - (double)l_target);
  }
}

/* dlogits (N,Vp) = (probs - onehot(target)) * dloss on columns < V, 0 on the
 * padding. This one WRITES (=) rather than accumulates: dlogits may alias
 * probs, and the logits are an activation, not a parameter. */
static void softmax_xent_backward(float *dlogits, const float *probs, const int *targets,
                                  float dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *p = probs + (size_t)n * Vp;
    float *d = dlogits + (size_t)n * Vp;
    int target = targets[n];
    for (int j = 0; j < V; j++) d[j] = (p[j] - (j == target ? 1.0f : 0.0f)) * dloss;
    for (int j = V; j < Vp; j++) d[j] = 0.0f;
  }
}

/* Vocabulary-parallel cross-entropy: softmax_xent_forward's three passes
 * (max, exp and sum, normalise), cut where the statistics of a row must be
 * combined over the ranks that share the vocabulary. The arithmetic is
 * softmax_xent's, so one rank holding the whole vocabulary gets its bits. */
static void xent_vp_max(float *rowmax, const float *logits, int N, int Vl, int nvalid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * Vl;
    rowmax[n] = nvalid > 0 ? mt_cpu_row_max(l, nvalid) : -INFINITY;
  }
}

static void xent_vp_exp(double *stats, float *probs, const float *logits, const float *rowmax,
                        const int *targets, int v0, int N, int Vl, int nvalid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *l = logits + (size_t)n * Vl;
    float *p = probs + (size_t)n * Vl;
    float maxv = rowmax[n];
    int col = targets[n] - v0;
    double l_target = col >= 0 && col < nvalid ? (double)l[col] : 0.0;
    /* up to ~50k terms: summed in double */
    double sum = nvalid > 0 ? mt_cpu_row_exp_f64(p, l, nvalid, maxv) : 0.0;
    for (int j = nvalid; j < Vl; j++) p[j] = 0.0f;
    stats[2 * (size_t)n] = sum;
    stats[2 * (size_t)n + 1] = l_target;
  }
}

static void xent_vp_finish(float *losses, float *probs, const double *stats, const float *rowmax,
                           int N, int Vl, int nvalid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    float *p = probs + (size_t)n * Vl;
    double sum = stats[2 * (size_t)n];
    float inv = (float)(1.0 / sum);
    for (int j = 0; j < nvalid; j++) p[j] *= inv;
    losses[n] = (float)(log(sum) + (double)rowmax[n] - stats[2 * (size_t)n + 1]);
  }
}

static void xent_vp_backward(float *dlogits, const float *probs, const int *targets, int v0,
                             float dloss, int N, int Vl, int nvalid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const float *p = probs + (size_t)n * Vl;
    float *d = dlogits + (size_t)n * Vl;
    int col = targets[n] - v0;
    for (int j = 0; j < nvalid; j++) d[j] = (p[j] - (j == col ? 1.0f : 0.0f)) * dloss;
    for (int j = nvalid; j < Vl; j++) d[j] = 0.0f;
  }
}

/* ------------------------------------------------------------------ */
/* optimizer helpers                                                   */

/* AdamW, decoupled weight decay, step t >= 1 (after this update):
 *   m = b1 m + (1-b1) g          v = b2 v + (1-b2) g^2
 *   mhat = m / (1 - b1^t)        vhat = v / (1 - b2^t)
 *   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p) */
static void adamw_update(float *param, const float *grad, float *m, float *v, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int t) {
  float bc1 = (float)(1.0 - pow((double)beta1, t));
  float bc2 = (float)(1.0 - pow((double)beta2, t));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) {
    float g = grad[i];
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / bc1, vhat = vi / bc2;
    param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[i]);
  }
}

/* sum of x[i]^2 in double. The range is cut into a number of chunks that
 * depends on n only (never on the thread count); each chunk is summed in
 * order, then the chunk sums are added in order: the same bits everywhere. */
#define MT_SUMSQ_MAX_CHUNKS 256
#define MT_SUMSQ_MIN_CHUNK 16384

static double sumsq(const float *x, size_t n) {
  size_t nchunks = (n + MT_SUMSQ_MIN_CHUNK - 1) / MT_SUMSQ_MIN_CHUNK;
  if (nchunks > MT_SUMSQ_MAX_CHUNKS) nchunks = MT_SUMSQ_MAX_CHUNKS;
  if (nchunks == 0) return 0.0;
  size_t chunk = (n + nchunks - 1) / nchunks;
  double partial[MT_SUMSQ_MAX_CHUNKS];
#pragma omp parallel for schedule(static)
  for (size_t ci = 0; ci < nchunks; ci++) {
    size_t i0 = ci * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
    double acc = 0.0;
    for (size_t i = i0; i < i1; i++) acc += (double)x[i] * (double)x[i];
    partial[ci] = acc;
  }
  double total = 0.0;
  for (size_t ci = 0; ci < nchunks; ci++) total += partial[ci];
  return total;
}

/* x *= s */
static void scale(float *x, float s, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* ------------------------------------------------------------------ */
/* memory and elementwise helpers (host memory)                        */

static void host_upload(void *dst, const void *src, size_t bytes) {
  if (bytes) memcpy(dst, src, bytes);
}

/* Clears and copies of more than MT_PAR_MIN floats are split over the
 * threads in contiguous pieces: one core does not saturate the memory
 * bandwidth, and a serial memset left the other threads idle (the gradient
 * buffer, 40 MB for `small`, is cleared every step). */
#define MT_PAR_MIN ((size_t)1 << 16)

static void zero(float *x, size_t n) {
  if (n < MT_PAR_MIN) {
    if (n) memset(x, 0, n * sizeof(float));
    return;
  }
#pragma omp parallel
  {
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    memset(x + i0, 0, (i1 - i0) * sizeof(float));
  }
}

static void copy(float *dst, const float *src, size_t n) {
  if (n < MT_PAR_MIN) {
    if (n) memcpy(dst, src, n * sizeof(float));
    return;
  }
#pragma omp parallel
  {
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    memcpy(dst + i0, src + i0, (i1 - i0) * sizeof(float));
  }
}

static void axpy(float *y, float a, const float *x, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void host_sync(void) {}

/* in index order, one thread: the same bits for any thread count */
static double sum(const float *x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += x[i];
  return s;
}

/* ------------------------------------------------------------------ */

static const mt_ops g_ops_cpu = {
    .name = "cpu",
    .loc = MT_LOC_HOST,
    .alloc = mt_mem_alloc,
    .free = mt_mem_free,
    .upload = host_upload,
    .download = host_upload,
    .zero = zero,
    .copy = copy,
    .axpy = axpy,
    .sum = sum,
    .sync = host_sync,
    .encoder_forward = encoder_forward,
    .encoder_backward = encoder_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .matmul_forward = matmul_forward,
    .matmul_backward = matmul_backward,
    .attention_forward = attention_forward,
    .attention_backward = attention_backward,
    .attn_forward = mt_cpu_attn_forward,
    .attn_merge = mt_cpu_attn_merge,
    .attn_backward = mt_cpu_attn_backward,
    .copy_2d = mt_cpu_copy_2d,
    .add_2d = mt_cpu_add_2d,
    .gelu_forward = mt_cpu_gelu_forward,
    .gelu_backward = mt_cpu_gelu_backward,
    .residual_forward = residual_forward,
    .softmax_xent_forward = softmax_xent_forward,
    .softmax_xent_backward = softmax_xent_backward,
    .encoder_vp_forward = encoder_vp_forward,
    .encoder_vp_backward = encoder_vp_backward,
    .xent_vp_max = xent_vp_max,
    .xent_vp_exp = xent_vp_exp,
    .xent_vp_finish = xent_vp_finish,
    .xent_vp_backward = xent_vp_backward,
    .adamw_update = adamw_update,
    .moe_router_forward = mt_cpu_moe_router_forward,
    .moe_router_backward = mt_cpu_moe_router_backward,
    .moe_prob_sums = mt_cpu_moe_prob_sums,
    .gather_rows = mt_cpu_gather_rows,
    .moe_combine = mt_cpu_moe_combine,
    .moe_combine_backward = mt_cpu_moe_combine_backward,
    .moe_gather_sum = mt_cpu_moe_gather_sum,
    .grouped_matmul_forward = mt_cpu_grouped_matmul_forward,
    .grouped_matmul_backward = mt_cpu_grouped_matmul_backward,
    .sumsq = sumsq,
    .scale = scale,
};

const mt_ops *mt_ops_cpu(void) { return &g_ops_cpu; }
