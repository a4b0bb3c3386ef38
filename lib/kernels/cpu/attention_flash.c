/* Attention by blocks on the CPU (FlashAttention-2, Dao 2023): queries in
 * blocks of ATT_BR rows, keys in blocks of ATT_BC, an online softmax per
 * query row, and only the output and the row's log-sum-exp (LSE) kept; the
 * backward recomputes the probabilities from the LSE. Memory: O(rows) per
 * call plus per-thread scratch of ATT_BR x ATT_BC, never T x T.
 *
 * Products on blocks go to cblas_sgemm (single-threaded inside a parallel
 * region, see mt_cpu_blas_serial_begin); the row maximum and the
 * exp-and-sum loops are rows_cpu.c's vectorised ones.
 *
 * Threading and determinism: the forward runs one task per (batch, head,
 * query block), each writing only its own rows; the backward one task per
 * (batch, head), which owns that head's columns of dq, dk and dv (every
 * query block of a head adds into the same dk, dv rows, so splitting a head
 * would race or need a reduction). Either way a result does not depend on
 * which thread ran a task: the same bits at any thread count. */
#include "kernels/kernels.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Query rows per task and keys per block. The S block (ATT_BR x ATT_BC
 * floats, 64 KiB) and the task's q, k, v rows stay in L2. Causality costs
 * no extra work for wide key blocks (a block's columns end at the last
 * query row's position), and each sgemm call re-packs its operands, so
 * fewer, longer calls are cheaper: 64 x 256 took 3% fewer instructions than
 * 64 x 128 at T = 1024 (callgrind) and was as fast or faster in timings
 * (-DATT_BR=.. -DATT_BC=.. to try others). */
#ifndef ATT_BR
#define ATT_BR 64
#endif
#ifndef ATT_BC
#define ATT_BC 256
#endif

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* Keys [0, end) of the block that some query row below i1 can see (a
 * prefix: under causality row i sees keys at positions <= its own). */
static int keys_end(const mt_attn_block *a, int i1) {
  if (!a->causal) return a->Tk;
  long end = (long)a->q_pos0 + i1 - a->k_pos0; /* keys with position <= that of row i1-1 */
  return end < 0 ? 0 : end > a->Tk ? a->Tk : (int)end;
}

/* How many of the keys [j0, j0 + cols) query row i sees (a prefix). */
static int keys_visible(const mt_attn_block *a, int i, int j0, int cols) {
  if (!a->causal) return cols;
  long n = (long)a->q_pos0 + i - a->k_pos0 - j0 + 1;
  return n < 0 ? 0 : n > cols ? cols : (int)n;
}

/* s[c] = exp(s[c] - shift) for c < n, zero for n <= c < cols; returns the sum */
static float exp_row(float *s, int n, int cols, float shift) {
  float sum = n > 0 ? mt_cpu_row_exp(s, s, n, shift) : 0.0f;
  if (cols > n) memset(s + n, 0, (size_t)(cols - n) * sizeof(float));
  return sum;
}

/* per-thread scratch of a parallel region */
static float *scratch(size_t n) {
  float *p = malloc(n * sizeof(float));
  if (!p) mt_die("attention: out of memory for %zu floats of scratch", n);
  return p;
}

/* ------------------------------------------------------------------ */
/* forward                                                             */

/* Query rows [i0, i0 + ATT_BR) of head h, batch b against every key of the
 * block. S holds one key block's scores and then probabilities (ATT_BR x
 * ATT_BC), acc the unnormalised output (rows x hs), m and l each row's
 * running maximum and sum of exp(score - maximum). */
static void forward_task(const mt_attn_block *a, float *out, float *lse, const float *q,
                         const float *k, const float *v, int b, int h, int i0, float *S,
                         float *acc, float *m, float *l) {
  const int hs = a->hs, i1 = min_int(i0 + ATT_BR, a->Tq), rows = i1 - i0;
  const float scale = 1.0f / sqrtf((float)hs);
  const float *qb = q + (size_t)b * a->q_bs + (size_t)i0 * a->q_rs + (size_t)h * hs;
  const float *kb = k + (size_t)b * a->k_bs + (size_t)h * hs;
  const float *vb = v + (size_t)b * a->v_bs + (size_t)h * hs;
  for (int r = 0; r < rows; r++) {
    m[r] = -FLT_MAX;
    l[r] = 0.0f;
  }
  memset(acc, 0, (size_t)rows * hs * sizeof(float));
  const int kend = keys_end(a, i1);
  for (int j0 = 0; j0 < kend; j0 += ATT_BC) {
    const int cols = min_int(ATT_BC, kend - j0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, qb, (int)a->q_rs,
                kb + (size_t)j0 * a->k_rs, (int)a->k_rs, 0.0f, S, ATT_BC);
    for (int r = 0; r < rows; r++) {
      float *s = S + (size_t)r * ATT_BC;
      const int vis = keys_visible(a, i0 + r, j0, cols);
      if (vis == 0) { /* nothing visible here (nor in later blocks): P row = 0 */
        memset(s, 0, (size_t)cols * sizeof(float));
        continue;
      }
      float mx = mt_cpu_row_max(s, vis), m_new = mx > m[r] ? mx : m[r];
      float corr = mt_cpu_exp(m[r] - m_new); /* exactly 1 when the maximum stays */
      l[r] = l[r] * corr + exp_row(s, vis, cols, m_new);
      m[r] = m_new;
      if (corr != 1.0f) {
        float *ar = acc + (size_t)r * hs;
#pragma omp simd
        for (int d = 0; d < hs; d++) ar[d] *= corr;
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, 1.0f, S, ATT_BC,
                vb + (size_t)j0 * a->v_rs, (int)a->v_rs, 1.0f, acc, hs);
  }
  for (int r = 0; r < rows; r++) {
    float *o = out + (size_t)b * a->o_bs + (size_t)(i0 + r) * a->o_rs + (size_t)h * hs;
    float *L = lse + (size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)(i0 + r);
    const float *ar = acc + (size_t)r * hs;
    if (l[r] > 0.0f) {
      float inv = 1.0f / l[r];
      for (int d = 0; d < hs; d++) o[d] = ar[d] * inv;
      *L = m[r] + logf(l[r]);
    } else { /* no visible key in this block */
      memset(o, 0, (size_t)hs * sizeof(float));
      *L = -INFINITY;
    }
  }
}

void mt_cpu_attn_forward(const mt_attn_block *a, float *out, float *lse, const float *q,
                         const float *k, const float *v) {
  const int nqb = (a->Tq + ATT_BR - 1) / ATT_BR, ntask = a->B * a->NH * nqb;
  if (ntask == 0) return;
  int blas_threads, team = mt_cpu_blas_serial_begin(&blas_threads);
#pragma omp parallel num_threads(team)
  {
    float *S = scratch((size_t)ATT_BR * ATT_BC), *acc = scratch((size_t)ATT_BR * a->hs);
    float *m = scratch(ATT_BR), *l = scratch(ATT_BR);
    /* later query blocks see more keys: hand tasks out one at a time */
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < ntask; task++) {
      int qb = task % nqb, bh = task / nqb;
      forward_task(a, out, lse, q, k, v, bh / a->NH, bh % a->NH, qb * ATT_BR, S, acc, m, l);
    }
    free(S), free(acc), free(m), free(l);
  }
  mt_cpu_blas_serial_end(blas_threads);
}

/* ------------------------------------------------------------------ */
/* merge                                                               */

/* (out, lse) and (part, part_lse) over disjoint key sets -> the result
 * over both; the weights in double, as the LSE sits in float. */
void mt_cpu_attn_merge(const mt_attn_block *a, float *out, float *lse, const float *part,
                       const float *part_lse) {
  const int hs = a->hs, NH = a->NH, rows = a->B * a->Tq;
#pragma omp parallel for schedule(static)
  for (int bi = 0; bi < rows; bi++) {
    int b = bi / a->Tq, i = bi % a->Tq;
    for (int h = 0; h < NH; h++) {
      size_t lo = (size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)i;
      size_t oo = (size_t)b * a->o_bs + (size_t)i * a->o_rs + (size_t)h * hs;
      float l1 = lse[lo], l2 = part_lse[lo];
      if (l2 == -INFINITY) continue;
      float *o = out + oo;
      const float *p = part + oo;
      if (l1 == -INFINITY) {
        memcpy(o, p, (size_t)hs * sizeof(float));
        lse[lo] = l2;
        continue;
      }
      double mx = l1 > l2 ? l1 : l2;
      double w1 = exp((double)l1 - mx), w2 = exp((double)l2 - mx), s = w1 + w2;
      float c1 = (float)(w1 / s), c2 = (float)(w2 / s);
      for (int d = 0; d < hs; d++) o[d] = c1 * o[d] + c2 * p[d];
      lse[lo] = (float)(mx + log(s));
    }
  }
}

/* ------------------------------------------------------------------ */
/* backward                                                            */

/* Every query block of head h, batch b against every key block it sees:
 *   P  = exp(scale q.k - lse)            (recomputed, rows x cols)
 *   dV += P^T dO         dP = dO V^T      dS = P (dP - D),  D = rowsum(dO O)
 *   dQ += scale dS K     dK += scale dS^T Q
 * P in S, dP and then dS in dP (ATT_BR x ATT_BC each); D, L (ATT_BR). */
static void backward_head(const mt_attn_block *a, float *dq, float *dk, float *dv,
                          const float *dout, const float *out, const float *lse, const float *q,
                          const float *k, const float *v, int b, int h, float *S, float *dP,
                          float *D, float *L) {
  const int hs = a->hs;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t hoff = (size_t)h * hs;
  const float *kb = k + (size_t)b * a->k_bs + hoff, *vb = v + (size_t)b * a->v_bs + hoff;
  float *dkb = dk + (size_t)b * a->k_bs + hoff, *dvb = dv + (size_t)b * a->v_bs + hoff;
  for (int i0 = 0; i0 < a->Tq; i0 += ATT_BR) {
    const int i1 = min_int(i0 + ATT_BR, a->Tq), rows = i1 - i0;
    const int kend = keys_end(a, i1);
    if (kend == 0) continue;
    const size_t qoff = (size_t)b * a->q_bs + (size_t)i0 * a->q_rs + hoff;
    const size_t ooff = (size_t)b * a->o_bs + (size_t)i0 * a->o_rs + hoff;
    const float *qb = q + qoff, *dob = dout + ooff;
    float *dqb = dq + qoff;
    for (int r = 0; r < rows; r++) {
      const float *o = out + ooff + (size_t)r * a->o_rs, *dy = dob + (size_t)r * a->o_rs;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < hs; d++) dot += o[d] * dy[d];
      D[r] = dot;
      L[r] = lse[(size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)(i0 + r)];
    }
    for (int j0 = 0; j0 < kend; j0 += ATT_BC) {
      const int cols = min_int(ATT_BC, kend - j0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, qb,
                  (int)a->q_rs, kb + (size_t)j0 * a->k_rs, (int)a->k_rs, 0.0f, S, ATT_BC);
      for (int r = 0; r < rows; r++) {
        float *s = S + (size_t)r * ATT_BC;
        int vis = L[r] == -INFINITY ? 0 : keys_visible(a, i0 + r, j0, cols);
        exp_row(s, vis, cols, L[r] == -INFINITY ? 0.0f : L[r]);
      }
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, 1.0f, S, ATT_BC, dob,
                  (int)a->o_rs, 1.0f, dvb + (size_t)j0 * a->v_rs, (int)a->v_rs);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, 1.0f, dob,
                  (int)a->o_rs, vb + (size_t)j0 * a->v_rs, (int)a->v_rs, 0.0f, dP, ATT_BC);
      for (int r = 0; r < rows; r++) {
        const float *p = S + (size_t)r * ATT_BC;
        float *ds = dP + (size_t)r * ATT_BC, Dr = D[r];
#pragma omp simd
        for (int c = 0; c < cols; c++) ds[c] = p[c] * (ds[c] - Dr);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, scale, dP, ATT_BC,
                  kb + (size_t)j0 * a->k_rs, (int)a->k_rs, 1.0f, dqb, (int)a->q_rs);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, scale, dP, ATT_BC, qb,
                  (int)a->q_rs, 1.0f, dkb + (size_t)j0 * a->k_rs, (int)a->k_rs);
    }
  }
}

void mt_cpu_attn_backward(const mt_attn_block *a, float *dq, float *dk, float *dv,
                          const float *dout, const float *out, const float *lse, const float *q,
                          const float *k, const float *v) {
  const int nhead = a->B * a->NH;
  if (nhead == 0 || a->Tq == 0 || a->Tk == 0) return;
  int blas_threads, team = mt_cpu_blas_serial_begin(&blas_threads);
#pragma omp parallel num_threads(team)
  {
    float *S = scratch((size_t)ATT_BR * ATT_BC), *dP = scratch((size_t)ATT_BR * ATT_BC);
    float *D = scratch(ATT_BR), *L = scratch(ATT_BR);
#pragma omp for schedule(static)
    for (int bh = 0; bh < nhead; bh++)
      backward_head(a, dq, dk, dv, dout, out, lse, q, k, v, bh / a->NH, bh % a->NH, S, dP, D, L);
    free(S), free(dP), free(D), free(L);
  }
  mt_cpu_blas_serial_end(blas_threads);
}

/* ------------------------------------------------------------------ */
/* strided row copies                                                  */

void mt_cpu_copy_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                    size_t cols) {
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r++)
    memcpy(dst + r * ld_dst, src + r * ld_src, cols * sizeof(float));
}

void mt_cpu_add_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                   size_t cols) {
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r++) {
    float *y = dst + r * ld_dst;
    const float *x = src + r * ld_src;
    for (size_t c = 0; c < cols; c++) y[c] += x[c];
  }
}
