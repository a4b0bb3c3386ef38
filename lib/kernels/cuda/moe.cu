/* The Mixture-of-Experts ops of the op table on the GPU (kernels.h states
 * each contract; the CPU versions are cpu/moe_router.c and cpu/moe_t.h):
 * the router (softmax, top-k, renormalised weights, log-sum-exp and the
 * backward), the per-sequence sums of the probabilities, the row gathers,
 * the weighted combine and its backward, and the grouped GEMM of the
 * experts.
 *
 * Layout of the work: the router ops give each row (token) to one warp (E
 * experts strided over its 32 lanes); the row ops give each row to one block
 * (C channels strided over its threads). Every sum has an order fixed by
 * the sizes alone (a lane's strided terms in index order, then the warp's or
 * block's tree), and no op uses atomics: a run repeats bit for bit. Where
 * the CPU sums in a given order over k or over rows (the combine, the
 * gathered sum, the sums over a sequence), one thread adds the terms in that
 * same order. The top-k is a selection, as the CPU's: the most probable
 * expert not yet taken, the lower index first among equal probabilities.
 *
 * The grouped GEMM runs one cuBLASLt product per non-empty group through the
 * backend's matmul (matmul.cu): the same fp32, bf16 and bf16-fast paths,
 * bf16 operands in the scratch and products cut into pieces when they do
 * not fit, exactly as the dense layers.
 *
 * The row ops and the grouped GEMM are templated on the storage type S of
 * the rows, float or mt_bf16 (fp32 sums in the same order, one rounding per
 * stored bf16 value; the combine weights and their gradient dw stay fp32).
 * The router is fp32 whatever the storage type (kernels.h's MT_OPS_FIXED). */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>
#include <stdint.h>

#define MOE_FULL_MASK 0xffffffffu
#define MOE_WARP_ROWS 8       /* rows of a router block: 8 warps of 32 lanes */
#define MOE_ROW_GRID_MAX (1u << 20) /* blocks of a row op; they stride over the rest */

/* ------------------------------------------------------------------ */
/* helpers                                                              */

/* the warp's sum (max) of v in every lane: a butterfly, so every lane adds
 * the same pairs and ends with the same bits */
static __device__ float moe_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(MOE_FULL_MASK, v, o);
  return v;
}

static __device__ float moe_warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(MOE_FULL_MASK, v, o));
  return v;
}

/* the block's sum of v, in every thread: each warp's butterfly, then the
 * warp sums in warp order. blockDim.x a multiple of 32; sh holds 32 floats.
 * Every thread of the block must call it (it synchronises). */
static __device__ float moe_block_sum(float v, float *sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = moe_warp_sum(v);
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (int i = 0; i < warps; i++) s += sh[i];
  __syncthreads(); /* sh is free again for the next call */
  return s;
}

/* threads of a row op: the channels rounded up to whole warps, at most 256 */
static unsigned row_threads(int C) {
  unsigned t = (unsigned)((C + 31) / 32 * 32);
  return t < 32u ? 32u : t > 256u ? 256u : t;
}

static unsigned row_blocks(int rows) {
  return (unsigned)rows < MOE_ROW_GRID_MAX ? (unsigned)rows : MOE_ROW_GRID_MAX;
}

/* ------------------------------------------------------------------ */
/* router                                                               */

/* One warp per row n: probs = softmax(logits row), lse = its log-sum-exp,
 * then k rounds of selection on p + bias (bias NULL: p). The CPU's arithmetic: p[e] = exp(x[e] - max)
 * * (1 / sum), lse = max + log(sum), top_w[j] = p[i_j] * (1 / the sum of
 * the k chosen p in j order). A row of -inf logits gives NaN probabilities,
 * as on the CPU; the chosen indices are then still distinct and in [0, E). */
__global__ void moe_router_forward_kernel(float *probs, float *lse, int *top_idx, float *top_w,
                                          const float *logits, const float *bias, int N, int E,
                                          int k, int sigmoid) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (n >= N) return; /* the whole warp: n is the warp's */
  const float *x = logits + (size_t)n * E;
  float *p = probs + (size_t)n * E;
  float m = -INFINITY;
  for (int e = lane; e < E; e += 32) m = fmaxf(m, x[e]);
  m = moe_warp_max(m);
  float s = 0.0f;
  for (int e = lane; e < E; e += 32) {
    float v = expf(x[e] - m);
    p[e] = v;
    s += v;
  }
  s = moe_warp_sum(s);
  const float inv = 1.0f / s;
  /* from here on a lane reads back only the p[e] it wrote itself */
  for (int e = lane; e < E; e += 32) p[e] = sigmoid ? 1.0f / (1.0f + expf(-x[e])) : p[e] * inv;
  if (lane == 0) lse[n] = m + logf(s);

  int *idx = top_idx + (size_t)n * k;
  float *w = top_w + (size_t)n * k;
  float chosen = 0.0f;
  for (int j = 0; j < k; j++) {
    /* this lane's best untaken expert by p + bias (ascending e: the lower
     * index wins ties); bp its probability */
    float bv = 0.0f, bp = 0.0f;
    int bi = -1;
    for (int e = lane; e < E; e += 32) {
      int taken = 0;
      for (int i = 0; i < j; i++) taken |= idx[i] == e;
      if (taken) continue;
      /* a masked expert (probability 0: a -inf logit) never wins by its bias */
      float v = bias ? (p[e] > 0.0f ? p[e] + bias[e] : -INFINITY) : p[e];
      if (bi < 0 || v > bv) bv = v, bi = e, bp = p[e];
    }
    /* the warp's best into lane 0 (higher score, then lower index), then to
     * every lane. A lane past the end gets its own pair back, which changes
     * nothing. */
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_down_sync(MOE_FULL_MASK, bv, o);
      float op = __shfl_down_sync(MOE_FULL_MASK, bp, o);
      int oi = __shfl_down_sync(MOE_FULL_MASK, bi, o);
      if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi, bp = op;
    }
    bp = __shfl_sync(MOE_FULL_MASK, bp, 0);
    bi = __shfl_sync(MOE_FULL_MASK, bi, 0);
    if (lane == 0) {
      idx[j] = bi;
      w[j] = bp;
    }
    chosen += bp;
    __syncwarp(); /* idx[j] (lane 0's write) is read by every lane next round */
  }
  const float inv_chosen = 1.0f / chosen;
  for (int j = lane; j < k; j += 32) w[j] *= inv_chosen; /* after the last __syncwarp */
}

void mt_cuda_moe_router_forward(float *probs, float *lse, int *top_idx, float *top_w,
                                const float *logits, const float *bias, int N, int E, int k,
                                int sigmoid) {
  if (N <= 0 || E <= 0) return;
  unsigned blocks = (unsigned)((N + MOE_WARP_ROWS - 1) / MOE_WARP_ROWS);
  moe_router_forward_kernel<<<blocks, 32 * MOE_WARP_ROWS, 0, g_cu.stream>>>(
      probs, lse, top_idx, top_w, logits, bias, N, E, k, sigmoid);
  CUDA_LAUNCH_CHECK();
}

/* One warp per row: the CPU's formulas (cpu/moe_cpu.c), the scalars over k
 * in j order by every lane, the dot over E as a warp sum. */
__global__ void moe_router_backward_kernel(float *dlogits, const float *probs, const float *lse,
                                           const int *top_idx, const float *top_w,
                                           const float *dtop_w, const float *aux_grad,
                                           int rows_per_seq, float z_grad, int N, int E, int k,
                                           int sigmoid) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (n >= N) return;
  const float *p = probs + (size_t)n * E;
  const int *idx = top_idx + (size_t)n * k;
  const float *w = top_w + (size_t)n * k, *dw = dtop_w + (size_t)n * k;
  const float *aux = aux_grad ? aux_grad + (size_t)(n / rows_per_seq) * E : NULL;
  float *d = dlogits + (size_t)n * E;
  float chosen = 0.0f, wdw = 0.0f;
  for (int j = 0; j < k; j++) {
    chosen += p[idx[j]];
    wdw += w[j] * dw[j];
  }
  /* dp[e] = aux[e] + (e chosen as j ? (dw[j] - wdw) / chosen : 0), kept in d */
  float dot = 0.0f;
  for (int e = lane; e < E; e += 32) {
    float dp = aux ? aux[e] : 0.0f;
    for (int j = 0; j < k; j++)
      if (idx[j] == e) dp += (dw[j] - wdw) / chosen;
    d[e] = dp;
    dot += p[e] * dp;
  }
  dot = moe_warp_sum(dot);
  const float z = z_grad * lse[n];
  for (int e = lane; e < E; e += 32) /* own d[e] */
    d[e] = sigmoid ? p[e] * (1.0f - p[e]) * d[e] : p[e] * (d[e] - dot) + z * p[e];
}

void mt_cuda_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                 const int *top_idx, const float *top_w, const float *dtop_w,
                                 const float *aux_grad, int rows_per_seq, float z_grad, int N,
                                 int E, int k, int sigmoid) {
  if (N <= 0 || E <= 0) return;
  if (aux_grad && rows_per_seq <= 0)
    mt_die("moe_router_backward: rows_per_seq = %d with a load-balancing gradient", rows_per_seq);
  unsigned blocks = (unsigned)((N + MOE_WARP_ROWS - 1) / MOE_WARP_ROWS);
  moe_router_backward_kernel<<<blocks, 32 * MOE_WARP_ROWS, 0, g_cu.stream>>>(
      dlogits, probs, lse, top_idx, top_w, dtop_w, aux_grad, rows_per_seq, z_grad, N, E, k,
      sigmoid);
  CUDA_LAUNCH_CHECK();
}

/* One thread per (sequence s, expert e): the sequence's rows added in row
 * order from 0, as the CPU adds them (the same bits; the contract's order).
 * A warp's reads at each row are consecutive floats when E >= 32. Only
 * S x E threads, each a chain of rows_per_seq adds: fine for a statistic
 * taken once per MoE block and micro-batch. */
__global__ void moe_prob_sums_kernel(float *sums, const float *probs, int S, int E,
                                     int rows_per_seq) {
  const size_t n = (size_t)S * E;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    const size_t s = i / (size_t)E, e = i % (size_t)E;
    const float *p = probs + s * (size_t)rows_per_seq * E + e;
    float acc = 0.0f;
    for (int r = 0; r < rows_per_seq; r++) acc += p[(size_t)r * E];
    sums[i] = acc;
  }
}

void mt_cuda_moe_prob_sums(float *sums, const float *probs, int N, int E, int rows_per_seq) {
  if (N <= 0 || E <= 0 || rows_per_seq <= 0) return;
  const int S = N / rows_per_seq; /* as the CPU: rows past the last whole sequence unused */
  const size_t n = (size_t)S * E;
  if (!n) return;
  moe_prob_sums_kernel<<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>(sums, probs, S, E,
                                                                    rows_per_seq);
  CUDA_LAUNCH_CHECK();
}

/* ------------------------------------------------------------------ */
/* row gathers and the combine: one block per row, threads over channels */

/* out row i = inp row idx[i], bits copied in units V (float4 when the
 * row's bytes and both pointers allow) */
template <typename V>
__global__ void moe_gather_rows_kernel(V *out, const V *inp, const int *idx, int n, int Cv) {
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    const V *src = inp + (size_t)idx[i] * Cv;
    V *dst = out + (size_t)i * Cv;
    for (int c = threadIdx.x; c < Cv; c += blockDim.x) dst[c] = src[c];
  }
}

template <typename S>
void mt_cuda_gather_rows(void *out_, const void *inp_, const int *idx, int n, int C) {
  if (n <= 0 || C <= 0) return;
  S *out = (S *)out_;
  const S *inp = (const S *)inp_;
  const size_t row_bytes = (size_t)C * sizeof(S);
  const int vec = row_bytes % 16 == 0 && (uintptr_t)out % 16 == 0 && (uintptr_t)inp % 16 == 0;
  const int Cv = vec ? (int)(row_bytes / 16) : C;
  if (vec)
    moe_gather_rows_kernel<float4><<<row_blocks(n), row_threads(Cv), 0, g_cu.stream>>>(
        (float4 *)out, (const float4 *)inp, idx, n, Cv);
  else
    moe_gather_rows_kernel<S><<<row_blocks(n), row_threads(Cv), 0, g_cu.stream>>>(
        out, inp, idx, n, Cv);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(gather_rows)

/* out row n = sum over j of w[n,j] * y row slot[n,j] (slots >= 0), j in
 * order from 0 (the CPU's order), in fp32 */
template <typename S>
__global__ void moe_combine_kernel(S *out, const S *y, const int *slot, const float *w, int N,
                                   int C, int k) {
  for (int n = blockIdx.x; n < N; n += gridDim.x) {
    const int *sl = slot + (size_t)n * k;
    const float *wn = w + (size_t)n * k;
    S *o = out + (size_t)n * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
      for (int j = 0; j < k; j++) {
        const int s = sl[j];
        if (s >= 0) acc += wn[j] * mt_ld(y[(size_t)s * C + c]);
      }
      o[c] = mt_st<S>(acc);
    }
  }
}

template <typename S>
void mt_cuda_moe_combine(void *out, const void *y, const int *slot, const float *w, int N, int C,
                         int k) {
  if (N <= 0 || C <= 0) return;
  moe_combine_kernel<S><<<row_blocks(N), row_threads(C), 0, g_cu.stream>>>(
      (S *)out, (const S *)y, slot, w, N, C, k);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(moe_combine)

/* Block per row n, each slot j in turn: dy row slot = w * dout row n, and
 * dw[n,j] = the block's sum of dout row n * y row slot (0 for a dropped
 * slot). A slot is the same for every thread of the block, so the block
 * sum (which synchronises) is reached by all of them or by none. */
template <typename S>
__global__ void moe_combine_backward_kernel(S *dy, float *dw, const S *dout, const S *y,
                                            const int *slot, const float *w, int N, int C, int k) {
  __shared__ float sh[32];
  for (int n = blockIdx.x; n < N; n += gridDim.x) {
    const S *g = dout + (size_t)n * C;
    for (int j = 0; j < k; j++) {
      const size_t nj = (size_t)n * k + j;
      const int s = slot[nj];
      if (s < 0) {
        if (threadIdx.x == 0) dw[nj] = 0.0f;
        continue;
      }
      const S *yr = y + (size_t)s * C;
      S *dyr = dy + (size_t)s * C;
      const float wj = w[nj];
      float acc = 0.0f;
      for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const float gc = mt_ld(g[c]), yc = mt_ld(yr[c]);
        dyr[c] = mt_st<S>(wj * gc);
        acc += gc * yc;
      }
      acc = moe_block_sum(acc, sh);
      if (threadIdx.x == 0) dw[nj] = acc;
    }
  }
}

template <typename S>
void mt_cuda_moe_combine_backward(void *dy, float *dw, const void *dout, const void *y,
                                  const int *slot, const float *w, int N, int C, int k) {
  if (N <= 0 || k <= 0) return;
  moe_combine_backward_kernel<S><<<row_blocks(N), row_threads(C), 0, g_cu.stream>>>(
      (S *)dy, dw, (const S *)dout, (const S *)y, slot, w, N, C, k);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(moe_combine_backward)

/* dx row n += src rows slot[n,j] (slots >= 0), added one after the other in
 * j order onto dx, as the CPU adds them (the same bits; bf16: in fp32,
 * rounded once) */
template <typename S>
__global__ void moe_gather_sum_kernel(S *dx, const S *src, const int *slot, int N, int C, int k) {
  for (int n = blockIdx.x; n < N; n += gridDim.x) {
    const int *sl = slot + (size_t)n * k;
    S *d = dx + (size_t)n * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = mt_ld(d[c]);
      for (int j = 0; j < k; j++) {
        const int s = sl[j];
        if (s >= 0) acc += mt_ld(src[(size_t)s * C + c]);
      }
      d[c] = mt_st<S>(acc);
    }
  }
}

template <typename S>
void mt_cuda_moe_gather_sum(void *dx, const void *src, const int *slot, int N, int C, int k) {
  if (N <= 0 || C <= 0) return;
  moe_gather_sum_kernel<S><<<row_blocks(N), row_threads(C), 0, g_cu.stream>>>(
      (S *)dx, (const S *)src, slot, N, C, k);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(moe_gather_sum)

/* ------------------------------------------------------------------ */
/* grouped GEMM                                                         */

/* The group offsets off[0..G] are host memory (kernels.h: they decide the
 * launches; the model passes the routing record mt_ep_route built on the
 * host, lib/model/moe.c), so they are read here directly, without a
 * download. Each non-empty group is one matmul_forward on its rows: out
 * rows WRITTEN, bias[g] added when given. */
template <typename S>
void mt_cuda_grouped_matmul_forward(void *out_, const void *inp_, const void *w_,
                                    const void *bias_, const int *off, int G, int C, int OC) {
  S *out = (S *)out_;
  const S *inp = (const S *)inp_, *w = (const S *)w_, *bias = (const S *)bias_;
  for (int g = 0; g < G; g++) {
    const int rows = off[g + 1] - off[g];
    if (rows <= 0) continue;
    const size_t r0 = (size_t)off[g];
    mt_cuda_matmul_forward<S>(out + r0 * OC, inp + r0 * C, w + (size_t)g * OC * C,
                              bias ? bias + (size_t)g * OC : NULL, rows, C, OC);
  }
}
MT_CUDA_INSTANTIATE(grouped_matmul_forward)

/* per non-empty group, matmul_backward: dinp += dout @ w[g], dw[g] += dout^T
 * @ inp, dbias[g] += column sums of dout (each skipped when NULL); off in
 * host memory as above */
template <typename S>
void mt_cuda_grouped_matmul_backward(void *dinp_, float *dw, float *dbias, const void *dout_,
                                     const void *inp_, const void *w_, const int *off, int G,
                                     int C, int OC) {
  S *dinp = (S *)dinp_;
  const S *dout = (const S *)dout_, *inp = (const S *)inp_, *w = (const S *)w_;
  for (int g = 0; g < G; g++) {
    const int rows = off[g + 1] - off[g];
    if (rows <= 0) continue;
    const size_t r0 = (size_t)off[g], wo = (size_t)g * OC * C;
    mt_cuda_matmul_backward<S>(dinp ? dinp + r0 * C : NULL, dw ? dw + wo : NULL,
                               dbias ? dbias + (size_t)g * OC : NULL, dout + r0 * OC,
                               inp ? inp + r0 * C : NULL, w ? w + wo : NULL, rows, C, OC);
  }
}
MT_CUDA_INSTANTIATE(grouped_matmul_backward)
