/* The CPU's bf16 op table (kernels.h, mt_ops_bf16): embedding, layernorm,
 * residual, cross-entropy, AdamW and the helpers here; matmuls in
 * matmul_bf16.c, GELU in gelu_bf16.c, attention in attention_bf16.c.
 *
 * Every op converts its bf16 operands to fp32 as it reads them, computes
 * with the arithmetic of the fp32 op of ops_cpu.c (same order, same
 * constants) and rounds each stored bf16 result once (round to nearest
 * even). On bf16-representable inputs a bf16 op therefore returns the fp32
 * op's result rounded, up to the order of vectorised sums. Sums over rows
 * (dw, db, dwte, dwpe) are fp32, each column owned by one thread, rows in
 * order; losses and row statistics fp32/double as in mt_ops: the same bits
 * at any thread count. */
#include "kernels/cpu/bf16_internal.h"
#include "kernels/cpu/cpu_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#define MT_COL_BLOCK 64

static inline int min_int(int a, int b) { return a < b ? a : b; }
static inline float bf(mt_bf16 x) { return mt_bf16_to_f32(x); }
static inline mt_bf16 rnd(float x) { return mt_bf16_from_f32(x); }

/* ------------------------------------------------------------------ */
/* encoder                                                             */

static void encoder_forward(mt_bf16 *out, const int *inp, const mt_bf16 *wte,
                            const mt_bf16 *wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    mt_bf16 *o = out + (size_t)bt * C;
    const mt_bf16 *e = wte + (size_t)inp[bt] * C, *p = wpe + (size_t)(bt % T) * C;
    for (int c = 0; c < C; c++) o[c] = rnd(bf(e[c]) + bf(p[c]));
  }
}

/* dwte[inp] += dout, dwpe[t] += dout in fp32; column blocks, positions in
 * (b,t) order (two positions may carry one token) */
static void encoder_vp_backward(float *dwte, float *dwpe, const mt_bf16 *dout, const int *inp,
                                int v0, int Vl, int B, int T, int C) {
  int nblocks = (C + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * MT_COL_BLOCK, c1 = min_int(c0 + MT_COL_BLOCK, C);
    for (int bt = 0; bt < B * T; bt++) {
      int row = inp[bt] - v0;
      const mt_bf16 *dy = dout + (size_t)bt * C;
      if (row >= 0 && row < Vl) {
        float *d = dwte + (size_t)row * C;
        for (int c = c0; c < c1; c++) d[c] += bf(dy[c]);
      }
      if (dwpe) {
        float *d = dwpe + (size_t)(bt % T) * C;
        for (int c = c0; c < c1; c++) d[c] += bf(dy[c]);
      }
    }
  }
}

static void encoder_backward(float *dwte, float *dwpe, const mt_bf16 *dout, const int *inp,
                             int B, int T, int C) {
  encoder_vp_backward(dwte, dwpe, dout, inp, 0, 1 << 30, B, T, C);
}

/* rows [v0, v0+Vl) of wte here; wpe may be NULL (another rank adds it) */
static void encoder_vp_forward(mt_bf16 *out, const int *inp, const mt_bf16 *wte, int v0, int Vl,
                               const mt_bf16 *wpe, int B, int T, int C) {
#pragma omp parallel for schedule(static)
  for (int bt = 0; bt < B * T; bt++) {
    int row = inp[bt] - v0;
    mt_bf16 *o = out + (size_t)bt * C;
    const mt_bf16 *e = row >= 0 && row < Vl ? wte + (size_t)row * C : NULL;
    const mt_bf16 *p = wpe ? wpe + (size_t)(bt % T) * C : NULL;
    if (e && p)
      for (int c = 0; c < C; c++) o[c] = rnd(bf(e[c]) + bf(p[c]));
    else if (e || p)
      memcpy(o, e ? e : p, (size_t)C * sizeof(mt_bf16));
    else
      memset(o, 0, (size_t)C * sizeof(mt_bf16));
  }
}

/* ------------------------------------------------------------------ */
/* layernorm: mean and rstd in fp32, as layernorm_forward of ops_cpu.c  */

static void layernorm_forward(mt_bf16 *out, float *mean, float *rstd, const mt_bf16 *inp,
                              const mt_bf16 *w, const mt_bf16 *b, int N, int C) {
  const float eps = 1e-5f;
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const mt_bf16 *x = inp + (size_t)n * C;
    float m = 0.0f;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; c++) m += bf(x[c]);
    m /= C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
      float d = bf(x[c]) - m;
      v += d * d;
    }
    v /= C;
    float s = 1.0f / sqrtf(v + eps);
    mt_bf16 *y = out + (size_t)n * C;
    for (int c = 0; c < C; c++) y[c] = rnd((bf(x[c]) - m) * s * bf(w[c]) + bf(b[c]));
    mean[n] = m;
    rstd[n] = s;
  }
}

/* dinp = round(dinp + (g - mean(g) - norm mean(g norm)) rstd), g = w dout;
 * dw += sum_n dout norm, db += sum_n dout (fp32, column blocks) */
static void layernorm_backward(mt_bf16 *dinp, float *dw, float *db, const mt_bf16 *dout,
                               const mt_bf16 *inp, const mt_bf16 *w, const float *mean,
                               const float *rstd, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const mt_bf16 *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
    float m = mean[n], s = rstd[n];
    float g_mean = 0.0f, gnorm_mean = 0.0f;
#pragma omp simd reduction(+ : g_mean, gnorm_mean)
    for (int c = 0; c < C; c++) {
      float norm = (bf(x[c]) - m) * s;
      float g = bf(w[c]) * bf(dy[c]);
      g_mean += g;
      gnorm_mean += g * norm;
    }
    g_mean /= C;
    gnorm_mean /= C;
    mt_bf16 *dx = dinp + (size_t)n * C;
    for (int c = 0; c < C; c++) {
      float norm = (bf(x[c]) - m) * s;
      float g = bf(w[c]) * bf(dy[c]);
      dx[c] = rnd(bf(dx[c]) + (g - g_mean - norm * gnorm_mean) * s);
    }
  }
  int nblocks = (C + MT_COL_BLOCK - 1) / MT_COL_BLOCK;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < nblocks; blk++) {
    int c0 = blk * MT_COL_BLOCK, c1 = min_int(c0 + MT_COL_BLOCK, C);
    float dw_acc[MT_COL_BLOCK] = {0}, db_acc[MT_COL_BLOCK] = {0};
    for (int n = 0; n < N; n++) {
      const mt_bf16 *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
      float m = mean[n], s = rstd[n];
      for (int c = c0; c < c1; c++) {
        dw_acc[c - c0] += (bf(x[c]) - m) * s * bf(dy[c]);
        db_acc[c - c0] += bf(dy[c]);
      }
    }
    for (int c = c0; c < c1; c++) {
      dw[c] += dw_acc[c - c0];
      db[c] += db_acc[c - c0];
    }
  }
}

static void residual_forward(mt_bf16 *out, const mt_bf16 *a, const mt_bf16 *b, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = rnd(bf(a[i]) + bf(b[i]));
}

/* ------------------------------------------------------------------ */
/* cross-entropy: each row converted to an fp32 row of the thread's own,
 * then softmax_xent's arithmetic (rows_cpu.c's max and exp, the sum in
 * double); the probabilities rounded once */

static float *row_scratch(int n) {
  float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
  if (!p) mt_die("bf16 cross-entropy: out of memory for a row of %d floats", n);
  return p;
}

static void softmax_xent_forward(float *losses, mt_bf16 *probs, const mt_bf16 *logits,
                                 const int *targets, int N, int V, int Vp) {
#pragma omp parallel
  {
    float *row = row_scratch(V);
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      mt_bf16_to_f32_serial(row, logits + (size_t)n * Vp, (size_t)V);
      float maxv = mt_cpu_row_max(row, V), l_target = row[targets[n]];
      double sum = mt_cpu_row_exp_f64(row, row, V, maxv);
      float inv = (float)(1.0 / sum);
      mt_bf16 *p = probs + (size_t)n * Vp;
      for (int j = 0; j < V; j++) p[j] = rnd(row[j] * inv);
      for (int j = V; j < Vp; j++) p[j] = 0;
      losses[n] = (float)(log(sum) + (double)maxv - (double)l_target);
    }
    free(row);
  }
}

static void softmax_xent_backward(mt_bf16 *dlogits, const mt_bf16 *probs, const int *targets,
                                  float dloss, int N, int V, int Vp) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const mt_bf16 *p = probs + (size_t)n * Vp;
    mt_bf16 *d = dlogits + (size_t)n * Vp;
    int target = targets[n];
    for (int j = 0; j < V; j++) d[j] = rnd((bf(p[j]) - (j == target ? 1.0f : 0.0f)) * dloss);
    for (int j = V; j < Vp; j++) d[j] = 0;
  }
}

static void xent_vp_max(float *rowmax, const mt_bf16 *logits, int N, int Vl, int nvalid) {
#pragma omp parallel
  {
    float *row = row_scratch(nvalid);
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      mt_bf16_to_f32_serial(row, logits + (size_t)n * Vl, (size_t)(nvalid > 0 ? nvalid : 0));
      rowmax[n] = nvalid > 0 ? mt_cpu_row_max(row, nvalid) : -INFINITY;
    }
    free(row);
  }
}

/* stats[n] = {sum of exp(logit - M) over the real local columns, the
 * target's logit if held here else 0}; the logits are left as they are */
static void xent_vp_exp(double *stats, const mt_bf16 *logits, const float *rowmax,
                        const int *targets, int v0, int N, int Vl, int nvalid) {
#pragma omp parallel
  {
    float *row = row_scratch(nvalid);
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      const mt_bf16 *l = logits + (size_t)n * Vl;
      int col = targets[n] - v0;
      double l_target = col >= 0 && col < nvalid ? (double)bf(l[col]) : 0.0;
      double sum = 0.0;
      if (nvalid > 0) {
        mt_bf16_to_f32_serial(row, l, (size_t)nvalid);
        sum = mt_cpu_row_exp_f64(row, row, nvalid, rowmax[n]);
      }
      stats[2 * (size_t)n] = sum;
      stats[2 * (size_t)n + 1] = l_target;
    }
    free(row);
  }
}

/* probs = exp(logit - M) / sum, recomputed from the logits (the same
 * exps as xent_vp_exp's), 0 on padding; probs may alias logits */
static void xent_vp_finish(float *losses, mt_bf16 *probs, const mt_bf16 *logits,
                           const double *stats, const float *rowmax, int N, int Vl, int nvalid) {
#pragma omp parallel
  {
    float *row = row_scratch(nvalid);
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      double sum = stats[2 * (size_t)n];
      mt_bf16 *p = probs + (size_t)n * Vl;
      if (nvalid > 0) {
        mt_bf16_to_f32_serial(row, logits + (size_t)n * Vl, (size_t)nvalid);
        mt_cpu_row_exp(row, row, nvalid, rowmax[n]);
        float inv = (float)(1.0 / sum);
        for (int j = 0; j < nvalid; j++) p[j] = rnd(row[j] * inv);
      }
      for (int j = nvalid > 0 ? nvalid : 0; j < Vl; j++) p[j] = 0;
      losses[n] = (float)(log(sum) + (double)rowmax[n] - stats[2 * (size_t)n + 1]);
    }
    free(row);
  }
}

static void xent_vp_backward(mt_bf16 *dlogits, const mt_bf16 *probs, const int *targets, int v0,
                             float dloss, int N, int Vl, int nvalid) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const mt_bf16 *p = probs + (size_t)n * Vl;
    mt_bf16 *d = dlogits + (size_t)n * Vl;
    int col = targets[n] - v0;
    for (int j = 0; j < nvalid; j++) d[j] = rnd((bf(p[j]) - (j == col ? 1.0f : 0.0f)) * dloss);
    for (int j = nvalid > 0 ? nvalid : 0; j < Vl; j++) d[j] = 0;
  }
}

/* ------------------------------------------------------------------ */
/* AdamW on the fp32 master: adamw_update's arithmetic (the same bits),
 * and the bf16 compute copy rounded from the new master in the same pass */

static void adamw_update(float *param, mt_bf16 *param_bf16, const float *grad, float *m,
                         float *v, size_t n, float lr, float beta1, float beta2, float eps,
                         float weight_decay, int t) {
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
    float p = param[i] - lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[i]);
    param[i] = p;
    if (param_bf16) param_bf16[i] = rnd(p);
  }
}

/* ------------------------------------------------------------------ */
/* helpers                                                             */

#define MT_PAR_MIN ((size_t)1 << 16)

static void zero(mt_bf16 *x, size_t n) {
  if (n < MT_PAR_MIN) {
    if (n) memset(x, 0, n * sizeof(mt_bf16));
    return;
  }
#pragma omp parallel
  {
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    memset(x + i0, 0, (i1 - i0) * sizeof(mt_bf16));
  }
}

static void copy(mt_bf16 *dst, const mt_bf16 *src, size_t n) {
  if (n < MT_PAR_MIN) {
    if (n) memcpy(dst, src, n * sizeof(mt_bf16));
    return;
  }
#pragma omp parallel
  {
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    memcpy(dst + i0, src + i0, (i1 - i0) * sizeof(mt_bf16));
  }
}

static void axpy(mt_bf16 *y, float a, const mt_bf16 *x, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) y[i] = rnd(bf(y[i]) + a * bf(x[i]));
}

static void scale(mt_bf16 *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) x[i] = rnd(bf(x[i]) * s);
}

/* in index order, one thread: the same bits at any thread count */
static double sum(const mt_bf16 *x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += bf(x[i]);
  return s;
}

/* sumsq's chunking of ops_cpu.c (chunks fixed by n, summed in order) */
#define MT_SUMSQ_MAX_CHUNKS 256
#define MT_SUMSQ_MIN_CHUNK 16384

static double sumsq(const mt_bf16 *x, size_t n) {
  size_t nchunks = (n + MT_SUMSQ_MIN_CHUNK - 1) / MT_SUMSQ_MIN_CHUNK;
  if (nchunks > MT_SUMSQ_MAX_CHUNKS) nchunks = MT_SUMSQ_MAX_CHUNKS;
  if (nchunks == 0) return 0.0;
  size_t chunk = (n + nchunks - 1) / nchunks;
  double partial[MT_SUMSQ_MAX_CHUNKS];
#pragma omp parallel for schedule(static)
  for (size_t ci = 0; ci < nchunks; ci++) {
    size_t i0 = ci * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
    double acc = 0.0;
    for (size_t i = i0; i < i1; i++) acc += (double)bf(x[i]) * (double)bf(x[i]);
    partial[ci] = acc;
  }
  double total = 0.0;
  for (size_t ci = 0; ci < nchunks; ci++) total += partial[ci];
  return total;
}

static void copy_2d(mt_bf16 *dst, size_t ld_dst, const mt_bf16 *src, size_t ld_src, size_t rows,
                    size_t cols) {
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r++)
    memcpy(dst + r * ld_dst, src + r * ld_src, cols * sizeof(mt_bf16));
}

static void add_2d(mt_bf16 *dst, size_t ld_dst, const mt_bf16 *src, size_t ld_src, size_t rows,
                   size_t cols) {
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r++) {
    mt_bf16 *y = dst + r * ld_dst;
    const mt_bf16 *x = src + r * ld_src;
    for (size_t c = 0; c < cols; c++) y[c] = rnd(bf(y[c]) + bf(x[c]));
  }
}

/* ------------------------------------------------------------------ */

static const mt_ops_bf16 g_ops_bf16_cpu = {
    .name = "cpu-bf16",
    .matmul_forward = mt_cpu_matmul_forward_bf16,
    .matmul_backward = mt_cpu_matmul_backward_bf16,
    .grouped_matmul_forward = mt_cpu_grouped_matmul_forward_bf16,
    .grouped_matmul_backward = mt_cpu_grouped_matmul_backward_bf16,
    .gather_rows = mt_cpu_gather_rows_bf16,
    .moe_combine = mt_cpu_moe_combine_bf16,
    .moe_combine_backward = mt_cpu_moe_combine_backward_bf16,
    .moe_gather_sum = mt_cpu_moe_gather_sum_bf16,
    .encoder_forward = encoder_forward,
    .encoder_backward = encoder_backward,
    .encoder_vp_forward = encoder_vp_forward,
    .encoder_vp_backward = encoder_vp_backward,
    .layernorm_forward = layernorm_forward,
    .layernorm_backward = layernorm_backward,
    .gelu_forward = mt_cpu_gelu_forward_bf16,
    .gelu_backward = mt_cpu_gelu_backward_bf16,
    .residual_forward = residual_forward,
    .attn_forward = mt_cpu_attn_forward_bf16,
    .attn_merge = mt_cpu_attn_merge_bf16,
    .attn_backward = mt_cpu_attn_backward_bf16,
    .softmax_xent_forward = softmax_xent_forward,
    .softmax_xent_backward = softmax_xent_backward,
    .xent_vp_max = xent_vp_max,
    .xent_vp_exp = xent_vp_exp,
    .xent_vp_finish = xent_vp_finish,
    .xent_vp_backward = xent_vp_backward,
    .adamw_update = adamw_update,
    .zero = zero,
    .copy = copy,
    .axpy = axpy,
    .scale = scale,
    .sum = sum,
    .sumsq = sumsq,
    .copy_2d = copy_2d,
    .add_2d = add_2d,
    .from_f32 = mt_bf16_from_f32_n,
    .to_f32 = mt_bf16_to_f32_n,
};

const mt_ops_bf16 *mt_ops_bf16_cpu(void) { return &g_ops_bf16_cpu; }
