/* Bodies of elementwise.c, over the storage type T (typed.h). */

#include "kernels/cpu/rope_head_t.h"

/* x = 0 (n elements): large ones split over the threads in contiguous pieces */
void FN(zero)(void *x_, size_t n) {
  T *x = x_;
  if (n < MT_PAR_MIN) {
    if (n) memset(x, 0, n * sizeof(T));
    return;
  }
#pragma omp parallel
  {
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    memset(x + i0, 0, (i1 - i0) * sizeof(T));
  }
}

void FN(copy)(void *dst_, const void *src_, size_t n) {
  T *dst = dst_;
  const T *src = src_;
  if (n < MT_PAR_MIN) {
    if (n) memcpy(dst, src, n * sizeof(T));
    return;
  }
#pragma omp parallel
  {
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t i0 = n * t / nt, i1 = n * (t + 1) / nt;
    memcpy(dst + i0, src + i0, (i1 - i0) * sizeof(T));
  }
}

/* y = y + a x */
void FN(axpy)(void *y_, float a, const void *x_, size_t n) {
  T *y = y_;
  const T *x = x_;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) y[i] = ST(LD(y[i]) + a * LD(x[i]));
}

/* x = s x */
void FN(scale)(void *x_, float s, size_t n) {
  T *x = x_;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) x[i] = ST(LD(x[i]) * s);
}

void FN(copy_2d)(void *dst_, size_t ld_dst, const void *src_, size_t ld_src, size_t rows,
                 size_t cols) {
  T *dst = dst_;
  const T *src = src_;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r++) memcpy(dst + r * ld_dst, src + r * ld_src, cols * sizeof(T));
}

void FN(add_2d)(void *dst_, size_t ld_dst, const void *src_, size_t ld_src, size_t rows,
                size_t cols) {
  T *dst = dst_;
  const T *src = src_;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r++) {
    T *y = dst + r * ld_dst;
    const T *x = src + r * ld_src;
    for (size_t c = 0; c < cols; c++) y[c] = ST(LD(y[c]) + LD(x[c]));
  }
}

/* rope's cosine | sine row of row r of sequences of T_ rows (kernels.h) */
static inline const float *FN(rope_row)(const float *cs, const int *pos, size_t r, int T_,
                                        int hs) {
  return cs + (size_t)(pos ? pos[r] : (int)(r % (size_t)T_)) * hs;
}

/* one head of hs from src to dst: copied, or turned by the angles of row
 * cs (NULL: copied) */
static inline void FN(head_move)(T *dst, const T *src, const float *cs, int hs) {
  if (cs) FN(rope_head)(dst, src, cs, cs + hs / 2, hs / 2, 1.0f);
  else memcpy(dst, src, (size_t)hs * sizeof(T));
}

/* grouped-query attention's key/value heads spread over the query heads
 * (kernels.h): each row in one piece, q, then each query head's key head
 * and its value head, where a copy per head was a parallel region each;
 * with cs, q and the key heads turned on the way (where rope turned c in
 * place in a pass of its own) */
void FN(kv_spread)(void *qkv_, const void *c_, size_t rows, int nh, int nkv, int hs, int h0,
                   int group, int with_q, const float *cs, const int *pos, int T_) {
  T *qkv = qkv_;
  const T *c = c_;
  const size_t Cl = (size_t)nh * hs, Ckv = (size_t)nkv * hs, Cq = with_q ? Cl : 0;
  const size_t W = Cq + 2 * Ckv;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r++) {
    T *out = qkv + r * (Cq + 2 * Cl);
    const T *in = c + r * W;
    const float *turn = cs ? FN(rope_row)(cs, pos, r, T_, hs) : NULL;
    if (turn && with_q)
      for (int h = 0; h < nh; h++)
        FN(head_move)(out + (size_t)h * hs, in + (size_t)h * hs, turn, hs);
    else memcpy(out, in, Cq * sizeof(T));
    for (int h = 0; h < nh; h++) {
      const size_t j = (size_t)((h0 + h) / group) * hs;
      FN(head_move)(out + Cq + (size_t)h * hs, in + Cq + j, turn, hs);
      memcpy(out + Cq + Cl + (size_t)h * hs, in + Cq + Ckv + j, (size_t)hs * sizeof(T));
    }
  }
}

/* its backward, dc WRITTEN row by row: q, then per key (value) head the sum
 * of its query heads' gradients, MT_KV_CHUNK channels at a time in fp32
 * registers (the heads in order, one rounding): no zero pass over dc, no
 * read-modify-write of it per head; with cs, the row's q and key heads
 * then turned back while the row is in cache */
void FN(kv_spread_backward)(void *dc_, const void *dqkv_, size_t rows, int nh, int nkv, int hs,
                            int h0, int group, int with_q, const float *cs, const int *pos,
                            int T_) {
  T *dc = dc_;
  const T *dqkv = dqkv_;
  const size_t Cl = (size_t)nh * hs, Ckv = (size_t)nkv * hs, Cq = with_q ? Cl : 0;
  const size_t W = Cq + 2 * Ckv;
#pragma omp parallel for schedule(static)
  for (size_t r = 0; r < rows; r++) {
    T *out = dc + r * W;
    const T *in = dqkv + r * (Cq + 2 * Cl);
    for (size_t i = 0; i < Cq; i++) out[i] = ST(0.0f + LD(in[i]));
    for (int kv = 0; kv < 2; kv++) {
      const T *x = in + Cq + (size_t)kv * Cl;
      for (int j = 0; j < nkv; j++) {
        /* the query heads [h_lo, h_hi) of key/value head j */
        int h_lo = j * group - h0, h_hi = h_lo + group;
        if (h_lo < 0) h_lo = 0;
        if (h_hi > nh) h_hi = nh;
        T *y = out + Cq + (size_t)kv * Ckv + (size_t)j * hs;
        for (int d0 = 0; d0 < hs; d0 += MT_KV_CHUNK) {
          const int n = hs - d0 < MT_KV_CHUNK ? hs - d0 : MT_KV_CHUNK;
          float acc[MT_KV_CHUNK];
          for (int d = 0; d < n; d++) acc[d] = 0.0f;
          for (int h = h_lo; h < h_hi; h++) {
            const T *xh = x + (size_t)h * hs + d0;
            for (int d = 0; d < n; d++) acc[d] += LD(xh[d]);
          }
          for (int d = 0; d < n; d++) y[d0 + d] = ST(acc[d]);
        }
      }
    }
    if (cs) { /* q and the key heads turned back, from their rounded sums */
      const float *turn = FN(rope_row)(cs, pos, r, T_, hs);
      for (int h = 0; h < (with_q ? nh : 0) + nkv; h++)
        FN(rope_head)(out + (size_t)h * hs, out + (size_t)h * hs, turn, turn + hs / 2, hs / 2,
                      -1.0f);
    }
  }
}

/* out = a + b; out may alias a or b */
void FN(residual_forward)(void *out_, const void *a_, const void *b_, size_t n) {
  T *out = out_;
  const T *a = a_, *b = b_;
#pragma omp parallel for simd schedule(static)
  for (size_t i = 0; i < n; i++) out[i] = ST(LD(a[i]) + LD(b[i]));
}

/* in index order, one thread: the same bits for any thread count */
double FN(sum)(const void *x_, size_t n) {
  const T *x = x_;
  double s = 0.0;
  for (size_t i = 0; i < n; i++) s += LD(x[i]);
  return s;
}

/* sum of x[i]^2 for i in [i0, i0 + len), in order, onto acc */
static inline double FN(sumsq_run)(double acc, const T *x, size_t i0, size_t len) {
  for (size_t i = i0; i < i0 + len; i++) acc += (double)LD(x[i]) * (double)LD(x[i]);
  return acc;
}

/* A chunk's sum is one chain of dependent fp64 adds, which ran at the
 * adder's latency, not at memory's pace; a task sums MT_SUMSQ_LANES
 * chunks side by side instead, each chunk's adds in its own order (the
 * same bits), so that the chains overlap. */
double FN(sumsq)(const void *x_, size_t n) {
  const T *x = x_;
  size_t nchunks = (n + MT_SUMSQ_MIN_CHUNK - 1) / MT_SUMSQ_MIN_CHUNK;
  if (nchunks > MT_SUMSQ_MAX_CHUNKS) nchunks = MT_SUMSQ_MAX_CHUNKS;
  if (nchunks == 0) return 0.0;
  size_t chunk = (n + nchunks - 1) / nchunks;
  size_t ngroups = (nchunks + MT_SUMSQ_LANES - 1) / MT_SUMSQ_LANES;
  double partial[MT_SUMSQ_MAX_CHUNKS];
#pragma omp parallel for schedule(static)
  for (size_t gi = 0; gi < ngroups; gi++) {
    size_t c0 = gi * MT_SUMSQ_LANES;
    size_t c1 = c0 + MT_SUMSQ_LANES < nchunks ? c0 + MT_SUMSQ_LANES : nchunks;
    /* the elements every lane of a full group has (only the last chunk
     * may be short), side by side; then each lane's rest, in order */
    size_t last0 = (c1 - 1) * chunk, common = 0;
    if (c1 - c0 == MT_SUMSQ_LANES && last0 < n) common = n - last0 < chunk ? n - last0 : chunk;
    double acc[MT_SUMSQ_LANES] = {0};
    for (size_t i = 0; i < common; i++)
      for (int l = 0; l < MT_SUMSQ_LANES; l++) {
        double v = (double)LD(x[(c0 + l) * chunk + i]);
        acc[l] += v * v;
      }
    for (size_t ci = c0; ci < c1; ci++) {
      size_t i0 = ci * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
      partial[ci] = i1 > i0 + common ? FN(sumsq_run)(acc[ci - c0], x, i0 + common, i1 - i0 - common)
                                     : acc[ci - c0];
    }
  }
  double total = 0.0;
  for (size_t ci = 0; ci < nchunks; ci++) total += partial[ci];
  return total;
}

/* AdamW, decoupled weight decay, step >= 1 (after this update):
 *   m = b1 m + (1-b1) g          v = b2 v + (1-b2) g^2
 *   mhat = m / (1 - b1^step)     vhat = v / (1 - b2^step)
 *   p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p)
 * and the compute copy (T) of the new p in the same pass when asked for.
 * Two loops, so that the one without a copy vectorises as plain fp32. */
static inline __attribute__((always_inline)) float FN(adamw_one)(
    float *param, const float *grad, float *m, float *v, size_t i, float lr, float beta1,
    float beta2, float eps, float weight_decay, float bc1, float bc2) {
  return mt_adamw_elem(param, m, v, i, grad[i], lr, beta1, beta2, eps, weight_decay, bc1, bc2);
}

/* one thread's share of adamw_ranges: elements [i0, i1) of one range, the
 * gradient fp32 or bf16 (grad_bf16, a constant where it is inlined), the
 * copy written when asked for; the same arithmetic as adamw_one, element by
 * element (g scaled once, rounded to fp32, as the separate scale op did) */
static inline __attribute__((always_inline)) void FN(adamw_span)(
    float *param, T *copy, const void *grad_, int grad_bf16, float gs, float *m, float *v,
    size_t i0, size_t i1, float lr, float beta1, float beta2, float eps, float wd, float bc1,
    float bc2) {
  const float *gf = grad_;
  const mt_bf16 *gb = grad_;
#pragma omp simd
  for (size_t i = i0; i < i1; i++) {
    float g = (grad_bf16 ? mt_bf16_to_f32(gb[i]) : gf[i]) * gs;
    float p = mt_adamw_elem(param, m, v, i, g, lr, beta1, beta2, eps, wd, bc1, bc2);
    if (copy) copy[i] = ST(p);
  }
}

void FN(adamw_update)(float *param, void *param_copy, const float *grad, float *m, float *v,
                      size_t n, float lr, float beta1, float beta2, float eps,
                      float weight_decay, int step) {
  T *copy = param_copy;
  float bc1 = (float)(1.0 - pow((double)beta1, step));
  float bc2 = (float)(1.0 - pow((double)beta2, step));
  if (copy) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
      copy[i] = ST(FN(adamw_one)(param, grad, m, v, i, lr, beta1, beta2, eps, weight_decay, bc1,
                                 bc2));
  } else {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
      FN(adamw_one)(param, grad, m, v, i, lr, beta1, beta2, eps, weight_decay, bc1, bc2);
  }
}

/* AdamW over the ranges (kernels.h) in one parallel region: the elements
 * from the first range's begin to the last one's end split evenly over the
 * threads, each thread walking the ranges its piece meets. Elementwise:
 * the same bits at any thread count, and as adamw_update per range. */
void FN(adamw_ranges)(float *param, void *param_copy, const void *grad, mt_dtype grad_t,
                      float grad_scale, float *m, float *v, const mt_adamw_range *ranges,
                      int n_ranges, float lr, float beta1, float beta2, float eps, int step) {
  if (n_ranges < 1) return;
  T *copy = param_copy;
  const int gb = grad_t == MT_DT_BF16;
  const float bc1 = (float)(1.0 - pow((double)beta1, step));
  const float bc2 = (float)(1.0 - pow((double)beta2, step));
  const size_t lo = ranges[0].begin, n = ranges[n_ranges - 1].end - lo;
#pragma omp parallel if (n >= MT_PAR_MIN)
  {
    size_t nt = (size_t)omp_get_num_threads(), t = (size_t)omp_get_thread_num();
    size_t p0 = lo + n * t / nt, p1 = lo + n * (t + 1) / nt;
    for (int r = 0; r < n_ranges; r++) {
      size_t i0 = ranges[r].begin > p0 ? ranges[r].begin : p0;
      size_t i1 = ranges[r].end < p1 ? ranges[r].end : p1;
      if (i0 >= i1) continue;
      const float wd = ranges[r].weight_decay;
      /* four instantiations, so that each loop is straight-line vector code */
      if (gb && copy)
        FN(adamw_span)(param, copy, grad, 1, grad_scale, m, v, i0, i1, lr, beta1, beta2, eps, wd,
                       bc1, bc2);
      else if (gb)
        FN(adamw_span)(param, NULL, grad, 1, grad_scale, m, v, i0, i1, lr, beta1, beta2, eps, wd,
                       bc1, bc2);
      else if (copy)
        FN(adamw_span)(param, copy, grad, 0, grad_scale, m, v, i0, i1, lr, beta1, beta2, eps, wd,
                       bc1, bc2);
      else
        FN(adamw_span)(param, NULL, grad, 0, grad_scale, m, v, i0, i1, lr, beta1, beta2, eps, wd,
                       bc1, bc2);
    }
  }
}
