/* Attention by blocks on bf16 q, k, v (kernels.h, mt_ops_bf16): the
 * algorithm and blocking of attention_flash.c (FlashAttention-2: query
 * blocks of ATT_BR rows, key blocks of ATT_BC, online softmax, the LSE kept
 * in fp32, the backward recomputing probabilities from it). Each task
 * converts the bf16 rows it needs into fp32 blocks of its own and runs the
 * fp32 algorithm on them with cblas_sgemm (on CPUs without AMX, sgemm on
 * converted operands is faster than bf16 dot products: see gemm_bf16.c);
 * out, dq, dk, dv are rounded to bf16 once per call:
 *   out       = round(softmax(scale q k^T) v)          (fp32 until stored)
 *   dq, dk, dv = round(d + the fp32 sum of this call's key or query blocks)
 * Threading as attention_flash.c: forward one task per (batch, head, query
 * block), backward one per (batch, head) owning that head's dq, dk, dv
 * columns; the same bits at any thread count. */
#include "kernels/cpu/bf16_internal.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ATT_BR 64
#define ATT_BC 256

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* keys [0, end) that some query row below i1 sees (causal: a prefix) */
static int keys_end(const mt_attn_block *a, int i1) {
  if (!a->causal) return a->Tk;
  long end = (long)a->q_pos0 + i1 - a->k_pos0;
  return end < 0 ? 0 : end > a->Tk ? a->Tk : (int)end;
}

/* how many of the keys [j0, j0 + cols) query row i sees (a prefix) */
static int keys_visible(const mt_attn_block *a, int i, int j0, int cols) {
  if (!a->causal) return cols;
  long n = (long)a->q_pos0 + i - a->k_pos0 - j0 + 1;
  return n < 0 ? 0 : n > cols ? cols : (int)n;
}

static float exp_row(float *s, int n, int cols, float shift) {
  float sum = n > 0 ? mt_cpu_row_exp(s, s, n, shift) : 0.0f;
  if (cols > n) memset(s + n, 0, (size_t)(cols - n) * sizeof(float));
  return sum;
}

static float *scratch(size_t n) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  if (!p) mt_die("bf16 attention: out of memory for %zu floats of scratch", n);
  return p;
}

/* rows x hs bf16 rows with stride rs -> contiguous fp32 (ld hs) */
static void load_rows(float *dst, const mt_bf16 *src, size_t rs, int rows, int hs) {
  for (int r = 0; r < rows; r++) mt_bf16_to_f32_serial(dst + (size_t)r * hs, src + r * rs, hs);
}

/* dst rows = round(dst + add), add contiguous fp32 (ld hs) */
static void add_rows(mt_bf16 *dst, size_t rs, const float *add, int rows, int hs) {
  for (int r = 0; r < rows; r++) {
    mt_bf16 *d = dst + r * rs;
    const float *x = add + (size_t)r * hs;
    for (int c = 0; c < hs; c++) d[c] = mt_bf16_from_f32(mt_bf16_to_f32(d[c]) + x[c]);
  }
}

/* ------------------------------------------------------------------ */
/* forward                                                             */

typedef struct {
  float *S, *acc, *m, *l, *Q, *K, *V;
} fwd_scratch;

static void forward_task(const mt_attn_block *a, mt_bf16 *out, float *lse, const mt_bf16 *q,
                         const mt_bf16 *k, const mt_bf16 *v, int b, int h, int i0,
                         const fwd_scratch *w) {
  const int hs = a->hs, i1 = min_int(i0 + ATT_BR, a->Tq), rows = i1 - i0;
  const float scale = 1.0f / sqrtf((float)hs);
  const mt_bf16 *kb = k + (size_t)b * a->k_bs + (size_t)h * hs;
  const mt_bf16 *vb = v + (size_t)b * a->v_bs + (size_t)h * hs;
  load_rows(w->Q, q + (size_t)b * a->q_bs + (size_t)i0 * a->q_rs + (size_t)h * hs, a->q_rs, rows,
            hs);
  for (int r = 0; r < rows; r++) {
    w->m[r] = -FLT_MAX;
    w->l[r] = 0.0f;
  }
  memset(w->acc, 0, (size_t)rows * hs * sizeof(float));
  const int kend = keys_end(a, i1);
  for (int j0 = 0; j0 < kend; j0 += ATT_BC) {
    const int cols = min_int(ATT_BC, kend - j0);
    load_rows(w->K, kb + (size_t)j0 * a->k_rs, a->k_rs, cols, hs);
    load_rows(w->V, vb + (size_t)j0 * a->v_rs, a->v_rs, cols, hs);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, w->Q, hs, w->K,
                hs, 0.0f, w->S, ATT_BC);
    for (int r = 0; r < rows; r++) {
      float *s = w->S + (size_t)r * ATT_BC;
      const int vis = keys_visible(a, i0 + r, j0, cols);
      if (vis == 0) {
        memset(s, 0, (size_t)cols * sizeof(float));
        continue;
      }
      float mx = mt_cpu_row_max(s, vis), m_new = mx > w->m[r] ? mx : w->m[r];
      float corr = mt_cpu_exp(w->m[r] - m_new);
      w->l[r] = w->l[r] * corr + exp_row(s, vis, cols, m_new);
      w->m[r] = m_new;
      if (corr != 1.0f) {
        float *ar = w->acc + (size_t)r * hs;
        for (int d = 0; d < hs; d++) ar[d] *= corr;
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, 1.0f, w->S, ATT_BC,
                w->V, hs, 1.0f, w->acc, hs);
  }
  for (int r = 0; r < rows; r++) {
    mt_bf16 *o = out + (size_t)b * a->o_bs + (size_t)(i0 + r) * a->o_rs + (size_t)h * hs;
    float *L = lse + (size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)(i0 + r);
    const float *ar = w->acc + (size_t)r * hs;
    if (w->l[r] > 0.0f) {
      float inv = 1.0f / w->l[r];
      for (int d = 0; d < hs; d++) o[d] = mt_bf16_from_f32(ar[d] * inv);
      *L = w->m[r] + logf(w->l[r]);
    } else {
      memset(o, 0, (size_t)hs * sizeof(mt_bf16));
      *L = -INFINITY;
    }
  }
}

void mt_cpu_attn_forward_bf16(const mt_attn_block *a, mt_bf16 *out, float *lse, const mt_bf16 *q,
                              const mt_bf16 *k, const mt_bf16 *v) {
  const int nqb = (a->Tq + ATT_BR - 1) / ATT_BR, ntask = a->B * a->NH * nqb;
  if (ntask == 0) return;
  const size_t hs = (size_t)a->hs;
  int blas_threads, team = mt_cpu_blas_serial_begin(&blas_threads);
#pragma omp parallel num_threads(team)
  {
    fwd_scratch w = {.S = scratch((size_t)ATT_BR * ATT_BC), .acc = scratch(ATT_BR * hs),
                     .m = scratch(ATT_BR), .l = scratch(ATT_BR), .Q = scratch(ATT_BR * hs),
                     .K = scratch(ATT_BC * hs), .V = scratch(ATT_BC * hs)};
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < ntask; task++) {
      int qb = task % nqb, bh = task / nqb;
      forward_task(a, out, lse, q, k, v, bh / a->NH, bh % a->NH, qb * ATT_BR, &w);
    }
    free(w.S), free(w.acc), free(w.m), free(w.l), free(w.Q), free(w.K), free(w.V);
  }
  mt_cpu_blas_serial_end(blas_threads);
}

/* ------------------------------------------------------------------ */
/* merge: attention_flash.c's weights (double), out rounded once       */

void mt_cpu_attn_merge_bf16(const mt_attn_block *a, mt_bf16 *out, float *lse,
                            const mt_bf16 *part, const float *part_lse) {
  const int hs = a->hs, NH = a->NH, rows = a->B * a->Tq;
#pragma omp parallel for schedule(static)
  for (int bi = 0; bi < rows; bi++) {
    int b = bi / a->Tq, i = bi % a->Tq;
    for (int h = 0; h < NH; h++) {
      size_t lo = (size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)i;
      size_t oo = (size_t)b * a->o_bs + (size_t)i * a->o_rs + (size_t)h * hs;
      float l1 = lse[lo], l2 = part_lse[lo];
      if (l2 == -INFINITY) continue;
      mt_bf16 *o = out + oo;
      const mt_bf16 *p = part + oo;
      if (l1 == -INFINITY) {
        memcpy(o, p, (size_t)hs * sizeof(mt_bf16));
        lse[lo] = l2;
        continue;
      }
      double mx = l1 > l2 ? l1 : l2;
      double w1 = exp((double)l1 - mx), w2 = exp((double)l2 - mx), s = w1 + w2;
      float c1 = (float)(w1 / s), c2 = (float)(w2 / s);
      for (int d = 0; d < hs; d++)
        o[d] = mt_bf16_from_f32(c1 * mt_bf16_to_f32(o[d]) + c2 * mt_bf16_to_f32(p[d]));
      lse[lo] = (float)(mx + log(s));
    }
  }
}

/* ------------------------------------------------------------------ */
/* backward                                                            */

typedef struct {
  float *S, *dP, *D, *L;     /* ATT_BR x ATT_BC, ATT_BR */
  float *Q, *O, *dO, *dQ;    /* ATT_BR x hs */
  float *K, *V, *dK, *dV;    /* Tk x hs (the head's visible keys) */
} bwd_scratch;

static void backward_head(const mt_attn_block *a, mt_bf16 *dq, mt_bf16 *dk, mt_bf16 *dv,
                          const mt_bf16 *dout, const mt_bf16 *out, const float *lse,
                          const mt_bf16 *q, const mt_bf16 *k, const mt_bf16 *v, int b, int h,
                          const bwd_scratch *w) {
  const int hs = a->hs;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t hoff = (size_t)h * hs;
  const int kall = keys_end(a, a->Tq); /* every key a row of this call sees */
  if (kall == 0) return;
  load_rows(w->K, k + (size_t)b * a->k_bs + hoff, a->k_rs, kall, hs);
  load_rows(w->V, v + (size_t)b * a->v_bs + hoff, a->v_rs, kall, hs);
  memset(w->dK, 0, (size_t)kall * hs * sizeof(float));
  memset(w->dV, 0, (size_t)kall * hs * sizeof(float));
  for (int i0 = 0; i0 < a->Tq; i0 += ATT_BR) {
    const int i1 = min_int(i0 + ATT_BR, a->Tq), rows = i1 - i0;
    const int kend = keys_end(a, i1);
    if (kend == 0) continue;
    const size_t qoff = (size_t)b * a->q_bs + (size_t)i0 * a->q_rs + hoff;
    const size_t ooff = (size_t)b * a->o_bs + (size_t)i0 * a->o_rs + hoff;
    load_rows(w->Q, q + qoff, a->q_rs, rows, hs);
    load_rows(w->O, out + ooff, a->o_rs, rows, hs);
    load_rows(w->dO, dout + ooff, a->o_rs, rows, hs);
    memset(w->dQ, 0, (size_t)rows * hs * sizeof(float));
    for (int r = 0; r < rows; r++) {
      const float *o = w->O + (size_t)r * hs, *dy = w->dO + (size_t)r * hs;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < hs; d++) dot += o[d] * dy[d];
      w->D[r] = dot;
      w->L[r] = lse[(size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)(i0 + r)];
    }
    for (int j0 = 0; j0 < kend; j0 += ATT_BC) {
      const int cols = min_int(ATT_BC, kend - j0);
      const float *Kj = w->K + (size_t)j0 * hs, *Vj = w->V + (size_t)j0 * hs;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, w->Q, hs, Kj,
                  hs, 0.0f, w->S, ATT_BC);
      for (int r = 0; r < rows; r++) {
        float *s = w->S + (size_t)r * ATT_BC;
        int vis = w->L[r] == -INFINITY ? 0 : keys_visible(a, i0 + r, j0, cols);
        exp_row(s, vis, cols, w->L[r] == -INFINITY ? 0.0f : w->L[r]);
      }
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, 1.0f, w->S, ATT_BC,
                  w->dO, hs, 1.0f, w->dV + (size_t)j0 * hs, hs);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, 1.0f, w->dO, hs, Vj,
                  hs, 0.0f, w->dP, ATT_BC);
      for (int r = 0; r < rows; r++) {
        const float *p = w->S + (size_t)r * ATT_BC;
        float *ds = w->dP + (size_t)r * ATT_BC, Dr = w->D[r];
#pragma omp simd
        for (int c = 0; c < cols; c++) ds[c] = p[c] * (ds[c] - Dr);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, scale, w->dP, ATT_BC,
                  Kj, hs, 1.0f, w->dQ, hs);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, scale, w->dP, ATT_BC,
                  w->Q, hs, 1.0f, w->dK + (size_t)j0 * hs, hs);
    }
    add_rows(dq + qoff, a->q_rs, w->dQ, rows, hs);
  }
  add_rows(dk + (size_t)b * a->k_bs + hoff, a->k_rs, w->dK, kall, hs);
  add_rows(dv + (size_t)b * a->v_bs + hoff, a->v_rs, w->dV, kall, hs);
}

void mt_cpu_attn_backward_bf16(const mt_attn_block *a, mt_bf16 *dq, mt_bf16 *dk, mt_bf16 *dv,
                               const mt_bf16 *dout, const mt_bf16 *out, const float *lse,
                               const mt_bf16 *q, const mt_bf16 *k, const mt_bf16 *v) {
  const int nhead = a->B * a->NH;
  if (nhead == 0 || a->Tq == 0 || a->Tk == 0) return;
  const size_t hs = (size_t)a->hs, tk = (size_t)a->Tk;
  int blas_threads, team = mt_cpu_blas_serial_begin(&blas_threads);
#pragma omp parallel num_threads(team)
  {
    bwd_scratch w = {.S = scratch((size_t)ATT_BR * ATT_BC), .dP = scratch((size_t)ATT_BR * ATT_BC),
                     .D = scratch(ATT_BR), .L = scratch(ATT_BR), .Q = scratch(ATT_BR * hs),
                     .O = scratch(ATT_BR * hs), .dO = scratch(ATT_BR * hs),
                     .dQ = scratch(ATT_BR * hs), .K = scratch(tk * hs), .V = scratch(tk * hs),
                     .dK = scratch(tk * hs), .dV = scratch(tk * hs)};
#pragma omp for schedule(static)
    for (int bh = 0; bh < nhead; bh++)
      backward_head(a, dq, dk, dv, dout, out, lse, q, k, v, bh / a->NH, bh % a->NH, &w);
    free(w.S), free(w.dP), free(w.D), free(w.L), free(w.Q), free(w.O), free(w.dO), free(w.dQ);
    free(w.K), free(w.V), free(w.dK), free(w.dV);
  }
  mt_cpu_blas_serial_end(blas_threads);
}
