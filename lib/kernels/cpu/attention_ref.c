/* The reference causal self-attention on the CPU (kernels.h's
 * attention_forward / attention_backward, fp32, T x T probabilities kept),
 * for tests and benchmarks (the model uses the block attention of
 * attention.c), and the switch of OpenBLAS's pool to one thread for
 * parallel regions whose threads each call sgemm. */
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <math.h>

/* Attention rows per sgemm: a row block only needs key columns up to its last
 * row (causality), which skips ~3/8 of the work at T=256 and ~1/2 for long T. */
#define MT_ATT_BLOCK 64

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
    int r1 = mt_min_int(r0 + MT_ATT_BLOCK, T);
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
    int r1 = mt_min_int(r0 + MT_ATT_BLOCK, T);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f,
                att_h + (size_t)r0 * T, T, v, C3, 0.0f, out_h + (size_t)r0 * C, C);
  }
}

/* qkv (B,T,3C) = q|k|v, head h of q at columns h*hs..h*hs+hs-1 (hs = C/NH),
 * k at C + h*hs, v at 2C + h*hs; scale = 1/sqrt(hs). out (B,T,C) has head h
 * at columns h*hs; att (B,NH,T,T) = P. The sgemms read qkv and write out in
 * place through their leading dimensions: no copies. */
void mt_cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
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
    int r1 = mt_min_int(r0 + MT_ATT_BLOCK, T);
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
    int r1 = mt_min_int(r0 + MT_ATT_BLOCK, T);
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
void mt_cpu_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
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
