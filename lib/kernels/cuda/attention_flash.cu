/* Attention by blocks on the GPU (FlashAttention-2, Dao 2023): the op
 * table's attn_forward, attn_merge and attn_backward over one pair (query
 * block, key block) with strides, global positions and the per-row
 * log-sum-exp (LSE), as kernels.h states them, for either storage type.
 * The CPU twins are in cpu/attention_t.h; tests/gpu/gpu_ops.c (fp32) and
 * gpu_attn_bf16.c (bf16) hold each pair equal.
 *
 * Tiles. A thread block of 256 threads owns a tile of rows of one (batch,
 * head) and walks the tiles of the other side through shared memory:
 *   forward       BR query rows; key tiles of BC rows, an online softmax
 *   backward dq   BR query rows; key tiles of BC rows
 *   backward dkv  BC key rows;   query tiles of BR rows
 * Thread t is (ty, tx) = (t / 16, t % 16). In a product tile (rows x cols)
 * it owns rows ty*R .. ty*R+R-1 (R = rows/16) and columns tx, tx+16, ..; in
 * an accumulator (rows x hs) the same rows and channels tx, tx+16, ..
 * (DPT = ceil(hs/16) of them, in registers). Shared rows are padded to hs+1
 * floats so that 16 threads reading 16 different rows at one channel hit 16
 * different banks. Rows past the end of a block are loaded as zeros and
 * masked, so no uninitialised value can reach a product (0 * NaN).
 * Tile sizes by head size keep every kernel within 99 KiB of shared memory
 * (any GPU of compute capability 8.x or 9.0); heads up to 256 channels.
 *
 * Masking. Key j is visible to query i when (not causal) or k_pos0 + j <=
 * q_pos0 + i, and (with documents) k_pos0 + j >= q_lo of row i: tiles
 * outside every row's document are skipped, those across a boundary
 * masked element by element. A row with no visible key has a running maximum of -INFINITY;
 * it is never subtracted from itself (exp(-inf - -inf) would be NaN): its
 * probabilities are set to 0 and the row ends with out = 0, lse = -INFINITY.
 * The backward sets P = 0 for masked pairs and for rows whose LSE is
 * -INFINITY instead of computing exp(s - lse).
 *
 * Determinism: no atomics. Every output element is written by one thread of
 * one block, which sums over the other side's tiles in a fixed order; D =
 * rowsum(dout * out) is a fixed warp reduction. The same bits every run.
 *
 * Precision: fp32 arithmetic throughout. The ops are templated on the
 * storage type T of q, k, v, out, dout, dq, dk, dv (float or mt_bf16).
 * bf16 elements are widened exactly into the fp32 tiles in shared memory
 * and rounded once when stored (out; dq, dk, dv = round(d + the call's fp32
 * sum)); P, dS, D and the LSE stay fp32, as on the CPU (attention_t.h).
 * Tensor-core products would also round P and dS to bf16; these kernels use
 * CUDA cores (more accurate, slower than a tensor-core kernel would be). */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

#define ATTN_THREADS 256

/* Keys [0, end) of the block that a query row below i1 can see (causal: a
 * prefix of the key block; the CPU's keys_end) */
__host__ __device__ static inline int attn_keys_end(const mt_attn_block &a, int i1) {
  if (!a.causal) return a.Tk;
  long long end = (long long)a.q_pos0 + i1 - a.k_pos0;
  return end < 0 ? 0 : end > a.Tk ? a.Tk : (int)end;
}

/* where query row i of sequence b's document begins, relative to key row 0
 * (documents; else 0) */
__device__ static inline long long attn_row_lo(const mt_attn_block &a, int b, int i) {
  return a.q_lo ? (long long)a.q_lo[(size_t)b * a.lo_bs + (size_t)i] - a.k_pos0 : 0;
}

/* The first key of the block that query rows [i0, ..) of sequence b can
 * see (q_lo never decreases along a sequence), clamped to [0, Tk] */
__device__ static inline int attn_keys_begin(const mt_attn_block &a, int b, int i0) {
  long long lo = attn_row_lo(a, b, i0);
  return lo < 0 ? 0 : lo > a.Tk ? a.Tk : (int)lo;
}

/* First query row that sees key row j (causal), clamped to [0, Tq] */
__device__ static inline int attn_queries_begin(const mt_attn_block &a, int j) {
  if (!a.causal) return 0;
  long long beg = (long long)a.k_pos0 + j - a.q_pos0;
  return beg < 0 ? 0 : beg > a.Tq ? a.Tq : (int)beg;
}

/* One past the last query row of sequence b that may see key row j (its
 * document began at or before j): a binary search over q_lo */
__device__ static inline int attn_queries_end(const mt_attn_block &a, int b, int j) {
  if (!a.q_lo) return a.Tq;
  int lo = 0, hi = a.Tq; /* rows [0, lo) qualify, rows [hi, Tq) do not */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (attn_row_lo(a, b, mid) <= j) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

__device__ static inline bool attn_visible(const mt_attn_block &a, int b, int i, int j) {
  return (!a.causal || (long long)a.k_pos0 + j <= (long long)a.q_pos0 + i) &&
         (!a.q_lo || j >= attn_row_lo(a, b, i));
}

/* dst (nrows x hs, row stride P; fp32) = rows [0, valid) of src (row
 * stride rs; elements T, widened), zeros for rows [valid, nrows). A warp per
 * row, lanes along the channels (coalesced). */
template <typename T>
__device__ static void load_rows(float *dst, int P, const T *src, size_t rs, int valid, int nrows,
                                 int hs) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int r = warp; r < nrows; r += ATTN_THREADS / 32)
    for (int d = lane; d < hs; d += 32)
      dst[r * P + d] = r < valid ? mt_ld(src[(size_t)r * rs + d]) : 0.0f;
}

/* s[i][c] = sum_d A[ty*R + i][d] * Bm[tx + 16c][d]: this thread's entries of
 * A Bm^T, both row stride P */
template <int R, int CC>
__device__ static inline void tile_dot(float (&s)[R][CC], const float *A, const float *Bm, int P,
                                       int hs, int ty, int tx) {
#pragma unroll
  for (int i = 0; i < R; i++)
#pragma unroll
    for (int c = 0; c < CC; c++) s[i][c] = 0.0f;
  for (int d = 0; d < hs; d++) {
    float av[R], bv[CC];
#pragma unroll
    for (int i = 0; i < R; i++) av[i] = A[(ty * R + i) * P + d];
#pragma unroll
    for (int c = 0; c < CC; c++) bv[c] = Bm[(tx + 16 * c) * P + d];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
      for (int c = 0; c < CC; c++) s[i][c] = fmaf(av[i], bv[c], s[i][c]);
  }
}

/* acc[i][j] += sum_{c < n} S[ty*R + i][c] * M[c][tx + 16j] for channels
 * tx + 16j < hs: this thread's entries of S M (S row stride SP, M row
 * stride P) */
template <int R, int DPT>
__device__ static inline void tile_acc(float (&acc)[R][DPT], const float *S, int SP,
                                       const float *M, int P, int n, int hs, int ty, int tx) {
  for (int c = 0; c < n; c++) {
    float sv[R], mv[DPT];
#pragma unroll
    for (int i = 0; i < R; i++) sv[i] = S[(ty * R + i) * SP + c];
#pragma unroll
    for (int j = 0; j < DPT; j++) {
      int d = tx + 16 * j;
      mv[j] = d < hs ? M[c * P + d] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
      for (int j = 0; j < DPT; j++) acc[i][j] = fmaf(sv[i], mv[j], acc[i][j]);
  }
}

/* ------------------------------------------------------------------ */
/* forward                                                             */

/* shared floats of the forward: Q tile, K-then-V tile, S tile, per-row factor */
static size_t fwd_smem_floats(int BR, int BC, int hs) {
  return (size_t)(BR + BC) * (hs + 1) + (size_t)BR * (BC + 1) + BR;
}

/* Block (query tile x, head y, batch z): query rows [i0, i0 + BR) against
 * every key tile they can see. Per key tile: S = scale Q K^T (masked to
 * -INFINITY), then V replaces K in shared memory while TPR threads per row
 * update the row's running maximum m and sum l and turn S into P =
 * exp(S - m), then acc = acc * exp(m_old - m) + P V. */
template <typename T, int BR, int BC, int DPT>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_forward_kernel(const mt_attn_block a, T *out, float *lse, const T *q, const T *k,
                        const T *v, float scale) {
  constexpr int R = BR / 16, CC = BC / 16, TPR = ATTN_THREADS / BR, SP = BC + 1;
  static_assert(BR % 16 == 0 && BC % 16 == 0 && TPR * BR == ATTN_THREADS && TPR <= 32 &&
                    (TPR & (TPR - 1)) == 0,
                "tiles of 16-row steps; a row's softmax threads inside one warp");
  extern __shared__ float smem[];
  const int hs = a.hs, P = hs + 1;
  float *Qs = smem, *KVs = Qs + BR * P, *Ss = KVs + BC * P, *rowf = Ss + BR * SP;
  const int t = threadIdx.x, ty = t >> 4, tx = t & 15;
  const int i0 = blockIdx.x * BR, h = blockIdx.y, b = blockIdx.z;
  const int rows = min(BR, a.Tq - i0);
  const size_t hoff = (size_t)h * hs;
  const T *kb = k + (size_t)b * a.k_bs + hoff, *vb = v + (size_t)b * a.v_bs + hoff;
  load_rows(Qs, P, q + (size_t)b * a.q_bs + (size_t)i0 * a.q_rs + hoff, a.q_rs, rows, BR, hs);

  /* the softmax's view: row sr, part sp of its TPR threads (TPR consecutive
   * lanes of one warp); m and l are the same in all TPR threads */
  const int sr = t / TPR, sp = t % TPR;
  float m = -INFINITY, l = 0.0f;
  float acc[R][DPT];
#pragma unroll
  for (int i = 0; i < R; i++)
#pragma unroll
    for (int j = 0; j < DPT; j++) acc[i][j] = 0.0f;

  const int kend = attn_keys_end(a, i0 + rows);
  for (int j0 = attn_keys_begin(a, b, i0); j0 < kend; j0 += BC) {
    const int cols = min(BC, kend - j0);
    __syncthreads(); /* Q is loaded; the last tile's P V is done with Ss, KVs, rowf */
    load_rows(KVs, P, kb + (size_t)j0 * a.k_rs, a.k_rs, cols, BC, hs);
    __syncthreads();
    float s[R][CC];
    tile_dot<R, CC>(s, Qs, KVs, P, hs, ty, tx);
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
      for (int c = 0; c < CC; c++) {
        int r = ty * R + i, col = tx + 16 * c;
        bool vis = r < rows && col < cols && attn_visible(a, b, i0 + r, j0 + col);
        Ss[r * SP + col] = vis ? s[i][c] * scale : -INFINITY;
      }
    __syncthreads(); /* S is whole; every read of K is done */
    load_rows(KVs, P, vb + (size_t)j0 * a.v_rs, a.v_rs, cols, BC, hs);
    {
      float *srow = Ss + sr * SP;
      float mx = -INFINITY;
      for (int c = sp; c < BC; c += TPR) mx = fmaxf(mx, srow[c]);
#pragma unroll
      for (int o = TPR / 2; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m, mx);
      float corr = 1.0f, sum = 0.0f;
      if (m_new == -INFINITY) { /* nothing visible yet: P = 0, acc and l stay 0 */
        for (int c = sp; c < BC; c += TPR) srow[c] = 0.0f;
      } else { /* m = -INFINITY before: corr = 0, harmless (acc, l are 0) */
        corr = expf(m - m_new);
        for (int c = sp; c < BC; c += TPR) {
          float p = expf(srow[c] - m_new); /* masked: exp(-inf) = 0 */
          srow[c] = p;
          sum += p;
        }
      }
#pragma unroll
      for (int o = TPR / 2; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      l = l * corr + sum;
      m = m_new;
      if (sp == 0) rowf[sr] = corr;
    }
    __syncthreads(); /* P, the factors and V are in place */
#pragma unroll
    for (int i = 0; i < R; i++) {
      float corr = rowf[ty * R + i];
#pragma unroll
      for (int j = 0; j < DPT; j++) acc[i][j] *= corr;
    }
    tile_acc<R, DPT>(acc, Ss, SP, KVs, P, cols, hs, ty, tx);
  }

  __syncthreads(); /* the last tile's reads of rowf are done */
  if (sp == 0) {
    rowf[sr] = l > 0.0f ? 1.0f / l : 0.0f;
    if (sr < rows)
      lse[(size_t)b * a.l_bs + (size_t)h * a.l_hs + (size_t)(i0 + sr)] =
          l > 0.0f ? m + logf(l) : -INFINITY;
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < R; i++) {
    int r = ty * R + i;
    if (r >= rows) continue;
    float inv = rowf[r];
    T *o = out + (size_t)b * a.o_bs + (size_t)(i0 + r) * a.o_rs + hoff;
#pragma unroll
    for (int j = 0; j < DPT; j++) {
      int d = tx + 16 * j;
      if (d < hs) o[d] = mt_st<T>(acc[i][j] * inv); /* no visible key: acc = 0, inv = 0 */
    }
  }
}

/* ------------------------------------------------------------------ */
/* merge                                                               */

/* One warp per (batch, query row, head), lanes along the channels; the
 * weights in double, as the CPU computes them; out rounded once (a side
 * that saw no key: the other side's elements, copied exactly). */
template <typename T>
__global__ void attn_merge_kernel(const mt_attn_block a, T *out, float *lse, const T *part,
                                  const float *part_lse) {
  const size_t w = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (w >= (size_t)a.B * a.Tq * a.NH) return;
  const int h = (int)(w % a.NH), i = (int)(w / a.NH % a.Tq), b = (int)(w / a.NH / a.Tq);
  const size_t lo = (size_t)b * a.l_bs + (size_t)h * a.l_hs + (size_t)i;
  const size_t oo = (size_t)b * a.o_bs + (size_t)i * a.o_rs + (size_t)h * a.hs;
  const float l1 = lse[lo], l2 = part_lse[lo];
  if (l2 == -INFINITY) return; /* the part saw no key: out, lse stay */
  T *o = out + oo;
  const T *p = part + oo;
  float c1 = 0.0f, c2 = 1.0f, merged = l2; /* out saw no key: take the part */
  if (l1 != -INFINITY) {
    double mx = l1 > l2 ? l1 : l2;
    double w1 = exp((double)l1 - mx), w2 = exp((double)l2 - mx), s = w1 + w2;
    c1 = (float)(w1 / s);
    c2 = (float)(w2 / s);
    merged = (float)(mx + log(s));
  }
  for (int d = lane; d < a.hs; d += 32)
    o[d] = mt_st<T>(l1 == -INFINITY ? mt_ld(p[d])
                                      : c1 * mt_ld(o[d]) + c2 * mt_ld(p[d]));
  __syncwarp(); /* every lane has read lse[lo] */
  if (lane == 0) lse[lo] = merged;
}

/* ------------------------------------------------------------------ */
/* backward                                                            */

/* D[g * Tq + i] = sum_d dout * out of row i of (batch, head) bh0 + g, for
 * the nbh pairs of this group: one warp per row */
template <typename T>
__global__ void attn_rowdot_kernel(float *D, const mt_attn_block a, const T *dout, const T *out,
                                   int bh0, int nbh) {
  const size_t w = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (w >= (size_t)nbh * a.Tq) return;
  const int g = (int)(w / a.Tq), i = (int)(w % a.Tq), bh = bh0 + g;
  const int b = bh / a.NH, h = bh % a.NH;
  const size_t oo = (size_t)b * a.o_bs + (size_t)i * a.o_rs + (size_t)h * a.hs;
  float dot = 0.0f;
  for (int d = lane; d < a.hs; d += 32)
    dot = fmaf(mt_ld(out[oo + d]), mt_ld(dout[oo + d]), dot);
  for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
  if (lane == 0) D[w] = dot;
}

/* P and dS of one (query, key) pair: P = exp(scale q.k - L) where visible
 * and L finite, else 0 (never exp of -inf - -inf); dS = P (dP - D) */
__device__ static inline float attn_prob(bool vis, float s, float scale, float L) {
  return vis && L != -INFINITY ? expf(s * scale - L) : 0.0f;
}

static size_t dq_smem_floats(int BR, int BC, int hs) {
  return (size_t)(2 * BR + BC) * (hs + 1) + (size_t)BR * (BC + 1) + 2 * BR;
}

/* rows x hs elements of one head at x (row stride rs) = 0, by the block's
 * threads (attn_backward_first's rows that no visible pair reaches) */
template <typename T> __device__ static void zero_head_rows(T *x, size_t rs, int rows, int hs) {
  for (int i = threadIdx.x; i < rows * hs; i += blockDim.x)
    x[(size_t)(i / hs) * rs + i % hs] = mt_st<T>(0.0f);
}

/* Block (query tile x, (batch, head) bh0 + y): dq of query rows [i0, i0 +
 * BR) += scale sum over the visible keys of dS K (first: dq = 0 + that).
 * Per key tile: V, then dP = dO V^T (registers); K replaces V, S = Q K^T,
 * dS = P (dP - D) into shared memory, acc += dS K. */
template <typename T, int BR, int BC, int DPT>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_backward_dq_kernel(const mt_attn_block a, T *dq, const T *dout, const float *lse,
                            const float *D, int bh0, const T *q, const T *k, const T *v,
                            float scale, int first) {
  constexpr int R = BR / 16, CC = BC / 16, SP = BC + 1;
  static_assert(BR % 16 == 0 && BC % 16 == 0, "tiles of 16-row steps");
  extern __shared__ float smem[];
  const int hs = a.hs, P = hs + 1;
  float *Qs = smem, *dOs = Qs + BR * P, *KVs = dOs + BR * P, *dSs = KVs + BC * P;
  float *Ls = dSs + BR * SP, *Ds = Ls + BR;
  const int t = threadIdx.x, ty = t >> 4, tx = t & 15;
  const int i0 = blockIdx.x * BR, g = blockIdx.y, bh = bh0 + g;
  const int b = bh / a.NH, h = bh % a.NH;
  const int rows = min(BR, a.Tq - i0);
  const int kbeg = attn_keys_begin(a, b, i0), kend = attn_keys_end(a, i0 + rows);
  const size_t hoff = (size_t)h * hs;
  const size_t qoff = (size_t)b * a.q_bs + (size_t)i0 * a.q_rs + hoff;
  if (kend <= kbeg) { /* no key of the block is visible to these rows */
    if (first) zero_head_rows(dq + qoff, a.q_rs, rows, hs);
    return;
  }
  const T *kb = k + (size_t)b * a.k_bs + hoff, *vb = v + (size_t)b * a.v_bs + hoff;
  load_rows(Qs, P, q + qoff, a.q_rs, rows, BR, hs);
  load_rows(dOs, P, dout + (size_t)b * a.o_bs + (size_t)i0 * a.o_rs + hoff, a.o_rs, rows, BR, hs);
  for (int r = t; r < BR; r += ATTN_THREADS) {
    Ls[r] = r < rows ? lse[(size_t)b * a.l_bs + (size_t)h * a.l_hs + (size_t)(i0 + r)] : -INFINITY;
    Ds[r] = r < rows ? D[(size_t)g * a.Tq + (size_t)(i0 + r)] : 0.0f;
  }
  float acc[R][DPT];
#pragma unroll
  for (int i = 0; i < R; i++)
#pragma unroll
    for (int j = 0; j < DPT; j++) acc[i][j] = 0.0f;

  for (int j0 = kbeg; j0 < kend; j0 += BC) {
    const int cols = min(BC, kend - j0);
    __syncthreads(); /* Q, dO, L, D loaded; the last tile's dS K is done */
    load_rows(KVs, P, vb + (size_t)j0 * a.v_rs, a.v_rs, cols, BC, hs);
    __syncthreads();
    float dp[R][CC];
    tile_dot<R, CC>(dp, dOs, KVs, P, hs, ty, tx);
    __syncthreads(); /* every read of V is done */
    load_rows(KVs, P, kb + (size_t)j0 * a.k_rs, a.k_rs, cols, BC, hs);
    __syncthreads();
    float s[R][CC];
    tile_dot<R, CC>(s, Qs, KVs, P, hs, ty, tx);
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
      for (int c = 0; c < CC; c++) {
        int r = ty * R + i, col = tx + 16 * c;
        bool vis = r < rows && col < cols && attn_visible(a, b, i0 + r, j0 + col);
        float p = attn_prob(vis, s[i][c], scale, Ls[r]);
        dSs[r * SP + col] = p != 0.0f ? p * (dp[i][c] - Ds[r]) : 0.0f;
      }
    __syncthreads(); /* dS is whole */
    tile_acc<R, DPT>(acc, dSs, SP, KVs, P, cols, hs, ty, tx);
  }
#pragma unroll
  for (int i = 0; i < R; i++) {
    int r = ty * R + i;
    if (r >= rows) continue;
    T *o = dq + qoff + (size_t)r * a.q_rs;
#pragma unroll
    for (int j = 0; j < DPT; j++) {
      int d = tx + 16 * j;
      if (d < hs) o[d] = mt_st<T>((first ? 0.0f : mt_ld(o[d])) + scale * acc[i][j]);
    }
  }
}

static size_t dkv_smem_floats(int BR, int BC, int hs) {
  return (size_t)(2 * BC + 2 * BR) * (hs + 1) + (size_t)BC * (BR + 1) + 2 * BR;
}

/* Block (key tile x, (batch, head) bh0 + y): dk and dv of key rows [j0, j0
 * + BC) over every query tile that sees them. In the transposed view (key
 * rows, query columns): S^T = K Q^T, dP^T = V dO^T (registers), P^T into
 * shared memory, dv += P^T dO; then dS^T = P^T (dP^T - D) replaces it and
 * dk += scale dS^T Q (first: dk, dv = 0 + those). */
template <typename T, int BR, int BC, int DPT>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_backward_dkv_kernel(const mt_attn_block a, T *dk, T *dv, const T *dout,
                             const float *lse, const float *D, int bh0, const T *q, const T *k,
                             const T *v, float scale, int first) {
  constexpr int R = BC / 16, CC = BR / 16, SP = BR + 1;
  static_assert(BR % 16 == 0 && BC % 16 == 0, "tiles of 16-row steps");
  extern __shared__ float smem[];
  const int hs = a.hs, P = hs + 1;
  float *Ks = smem, *Vs = Ks + BC * P, *Qs = Vs + BC * P, *dOs = Qs + BR * P;
  float *Pt = dOs + BR * P, *Ls = Pt + BC * SP, *Ds = Ls + BR;
  const int t = threadIdx.x, ty = t >> 4, tx = t & 15;
  const int j0 = blockIdx.x * BC, g = blockIdx.y, bh = bh0 + g;
  const int b = bh / a.NH, h = bh % a.NH;
  const int cols = min(BC, a.Tk - j0); /* key rows of this block */
  const int ibeg = attn_queries_begin(a, j0), iend = attn_queries_end(a, b, j0 + cols - 1);
  const size_t hoff = (size_t)h * hs;
  const size_t koff = (size_t)b * a.k_bs + (size_t)j0 * a.k_rs + hoff;
  const size_t voff = (size_t)b * a.v_bs + (size_t)j0 * a.v_rs + hoff;
  if (ibeg >= iend) { /* no query of the block sees these keys */
    if (first) {
      zero_head_rows(dk + koff, a.k_rs, cols, hs);
      zero_head_rows(dv + voff, a.v_rs, cols, hs);
    }
    return;
  }
  const T *qb = q + (size_t)b * a.q_bs + hoff, *dob = dout + (size_t)b * a.o_bs + hoff;
  const float *lb = lse + (size_t)b * a.l_bs + (size_t)h * a.l_hs, *Db = D + (size_t)g * a.Tq;
  load_rows(Ks, P, k + koff, a.k_rs, cols, BC, hs);
  load_rows(Vs, P, v + voff, a.v_rs, cols, BC, hs);
  float dk_acc[R][DPT], dv_acc[R][DPT];
#pragma unroll
  for (int i = 0; i < R; i++)
#pragma unroll
    for (int j = 0; j < DPT; j++) dk_acc[i][j] = dv_acc[i][j] = 0.0f;

  for (int i0 = ibeg; i0 < iend; i0 += BR) {
    const int rows = min(BR, a.Tq - i0);
    __syncthreads(); /* K, V loaded; the last tile's dS^T Q is done */
    load_rows(Qs, P, qb + (size_t)i0 * a.q_rs, a.q_rs, rows, BR, hs);
    load_rows(dOs, P, dob + (size_t)i0 * a.o_rs, a.o_rs, rows, BR, hs);
    for (int r = t; r < BR; r += ATTN_THREADS) {
      Ls[r] = r < rows ? lb[i0 + r] : -INFINITY;
      Ds[r] = r < rows ? Db[i0 + r] : 0.0f;
    }
    __syncthreads();
    float st[R][CC], dpt[R][CC];
    tile_dot<R, CC>(st, Ks, Qs, P, hs, ty, tx);
    tile_dot<R, CC>(dpt, Vs, dOs, P, hs, ty, tx);
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
      for (int c = 0; c < CC; c++) {
        int j = ty * R + i, r = tx + 16 * c;
        bool vis = j < cols && r < rows && attn_visible(a, b, i0 + r, j0 + j);
        float p = attn_prob(vis, st[i][c], scale, Ls[r]);
        Pt[j * SP + r] = p;
        st[i][c] = p != 0.0f ? p * (dpt[i][c] - Ds[r]) : 0.0f; /* dS^T */
      }
    __syncthreads(); /* P^T is whole */
    tile_acc<R, DPT>(dv_acc, Pt, SP, dOs, P, rows, hs, ty, tx);
    __syncthreads(); /* every read of P^T is done */
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
      for (int c = 0; c < CC; c++) Pt[(ty * R + i) * SP + tx + 16 * c] = st[i][c];
    __syncthreads();
    tile_acc<R, DPT>(dk_acc, Pt, SP, Qs, P, rows, hs, ty, tx);
  }
#pragma unroll
  for (int i = 0; i < R; i++) {
    int j = ty * R + i;
    if (j >= cols) continue;
    T *ok = dk + koff + (size_t)j * a.k_rs, *ov = dv + voff + (size_t)j * a.v_rs;
#pragma unroll
    for (int jj = 0; jj < DPT; jj++) {
      int d = tx + 16 * jj;
      if (d < hs) {
        ok[d] = mt_st<T>((first ? 0.0f : mt_ld(ok[d])) + scale * dk_acc[i][jj]);
        /* fp32: the code of ov[d] += (first: of a zeroed ov[d]) */
        ov[d] = mt_st<T>(dv_acc[i][jj] + (first ? 0.0f : mt_ld(ov[d])));
      }
    }
  }
}

/* ------------------------------------------------------------------ */
/* launches                                                            */

/* The largest head size the kernels take (16 channels per thread, 16
 * threads along a row); meshtrain checks it at set-up */
#define ATTN_MAX_HS MT_CUDA_MAX_HEAD_SIZE
static_assert(ATTN_MAX_HS <= 16 * 16, "a thread holds at most 16 channels of a row");

static void attn_check(const mt_attn_block *a, const char *op) {
  if (a->hs < 1 || a->hs > ATTN_MAX_HS)
    mt_die("CUDA backend: %s: head size %d is not supported (1 .. %d channels per head)", op,
           a->hs, ATTN_MAX_HS);
  if (a->NH > 65535 || a->B > 65535)
    mt_die("CUDA backend: %s: %d heads x %d sequences exceed the launch grid (65535 each)", op,
           a->NH, a->B);
}

/* dynamic shared memory past the default 48 KiB must be asked for, per
 * kernel; more than the GPU allows per block is fatal with the figures */
template <typename K> static void smem_allow(K kernel, size_t bytes, const char *op) {
  if (bytes > (size_t)g_cu.prop.sharedMemPerBlockOptin)
    mt_die("CUDA backend: %s needs %zu bytes of shared memory per block, the GPU allows %zu", op,
           bytes, (size_t)g_cu.prop.sharedMemPerBlockOptin);
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)bytes));
}

template <typename T, int BR, int BC, int DPT>
static void forward_launch(const mt_attn_block *a, T *out, float *lse, const T *q, const T *k,
                           const T *v, float scale) {
  size_t bytes = fwd_smem_floats(BR, BC, a->hs) * sizeof(float);
  smem_allow(attn_forward_kernel<T, BR, BC, DPT>, bytes, "attn_forward");
  dim3 grid((unsigned)((a->Tq + BR - 1) / BR), (unsigned)a->NH, (unsigned)a->B);
  attn_forward_kernel<T, BR, BC, DPT><<<grid, ATTN_THREADS, bytes, g_cu.stream>>>(*a, out, lse, q,
                                                                                   k, v, scale);
  CUDA_LAUNCH_CHECK();
}

/* The three ops of the table for storage type T */
template <typename T>
void mt_cuda_attn_forward(const mt_attn_block *a, void *out_, float *lse, const void *q_,
                          const void *k_, const void *v_) {
  if (a->B <= 0 || a->NH <= 0 || a->Tq <= 0) return;
  T *out = (T *)out_;
  const T *q = (const T *)q_, *k = (const T *)k_, *v = (const T *)v_;
  attn_check(a, "attn_forward");
  const float scale = 1.0f / sqrtf((float)a->hs);
  /* (Tk = 0: every row gets out 0, lse -INFINITY, as on the CPU) */
  if (a->hs <= 64) forward_launch<T, 64, 64, 4>(a, out, lse, q, k, v, scale);
  else if (a->hs <= 128) forward_launch<T, 64, 64, 8>(a, out, lse, q, k, v, scale);
  else forward_launch<T, 32, 32, 16>(a, out, lse, q, k, v, scale);
}
MT_CUDA_INSTANTIATE(attn_forward)

template <typename T>
void mt_cuda_attn_merge(const mt_attn_block *a, void *out, float *lse, const void *part,
                        const float *part_lse) {
  if (a->B <= 0 || a->NH <= 0 || a->Tq <= 0 || a->hs <= 0) return;
  size_t warps = (size_t)a->B * a->Tq * a->NH;
  attn_merge_kernel<T><<<(unsigned)((warps + 7) / 8), 256, 0, g_cu.stream>>>(
      *a, (T *)out, lse, (const T *)part, part_lse);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(attn_merge)

template <typename T, int BR, int BC, int DPT>
static void backward_launch(const mt_attn_block *a, T *dq, T *dk, T *dv, const T *dout,
                            const float *lse, const float *D, int bh0, int nbh, const T *q,
                            const T *k, const T *v, float scale, int first) {
  size_t bytes = dq_smem_floats(BR, BC, a->hs) * sizeof(float);
  smem_allow(attn_backward_dq_kernel<T, BR, BC, DPT>, bytes, "attn_backward (dq)");
  dim3 gq((unsigned)((a->Tq + BR - 1) / BR), (unsigned)nbh);
  attn_backward_dq_kernel<T, BR, BC, DPT><<<gq, ATTN_THREADS, bytes, g_cu.stream>>>(
      *a, dq, dout, lse, D, bh0, q, k, v, scale, first);
  CUDA_LAUNCH_CHECK();
  bytes = dkv_smem_floats(BR, BC, a->hs) * sizeof(float);
  smem_allow(attn_backward_dkv_kernel<T, BR, BC, DPT>, bytes, "attn_backward (dk, dv)");
  dim3 gk((unsigned)((a->Tk + BC - 1) / BC), (unsigned)nbh);
  attn_backward_dkv_kernel<T, BR, BC, DPT><<<gk, ATTN_THREADS, bytes, g_cu.stream>>>(
      *a, dk, dv, dout, lse, D, bh0, q, k, v, scale, first);
  CUDA_LAUNCH_CHECK();
}

/* (B, rows, NH, hs) elements at x (strides bs, rs) = 0 */
template <typename T>
__global__ void attn_zero_heads_kernel(T *x, int B, int rows, int NH, int hs, size_t bs,
                                       size_t rs) {
  size_t n = (size_t)B * rows * NH * hs;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t d = i % hs, h = i / hs % NH, r = i / hs / NH % rows, b = i / hs / NH / rows;
    x[b * bs + r * rs + h * hs + d] = mt_st<T>(0.0f);
  }
}

template <typename T>
static void zero_heads(T *x, int B, int rows, int NH, int hs, size_t bs, size_t rs) {
  size_t n = (size_t)B * rows * NH * hs;
  if (n == 0) return;
  unsigned blocks = (unsigned)((n + 255) / 256 < 65535 ? (n + 255) / 256 : 65535);
  attn_zero_heads_kernel<T><<<blocks, 256, 0, g_cu.stream>>>(x, B, rows, NH, hs, bs, rs);
  CUDA_LAUNCH_CHECK();
}

/* D = rowsum(dout * out) goes to the backend's scratch, for as many (batch,
 * head) pairs at a time as it holds (all of them, unless the block is very
 * long); each group then runs the dq and the dk, dv kernels (first: they
 * write, attn_backward_first). */
template <typename T>
static void attn_bwd(const mt_attn_block *a, void *dq_, void *dk_, void *dv_, const void *dout_,
                     const void *out_, const float *lse, const void *q_, const void *k_,
                     const void *v_, int first) {
  if (a->B <= 0 || a->NH <= 0) return;
  T *dq = (T *)dq_, *dk = (T *)dk_, *dv = (T *)dv_;
  if (a->Tq <= 0 || a->Tk <= 0) { /* no pair: the first call still writes its zeros */
    if (first) {
      zero_heads(dq, a->B, a->Tq, a->NH, a->hs, a->q_bs, a->q_rs);
      zero_heads(dk, a->B, a->Tk, a->NH, a->hs, a->k_bs, a->k_rs);
      zero_heads(dv, a->B, a->Tk, a->NH, a->hs, a->v_bs, a->v_rs);
    }
    return;
  }
  const T *dout = (const T *)dout_, *out = (const T *)out_;
  const T *q = (const T *)q_, *k = (const T *)k_, *v = (const T *)v_;
  attn_check(a, "attn_backward");
  const float scale = 1.0f / sqrtf((float)a->hs);
  const int nbh_all = a->B * a->NH;
  size_t cap = g_cu.scratch_bytes / ((size_t)a->Tq * sizeof(float));
  if (cap > 65535) cap = 65535; /* the launch grid's y */
  if (cap < 1)
    mt_die("CUDA backend: attn_backward needs %zu bytes of scratch for one head's %d rows, %zu "
           "reserved (raise MT_CUDA_SCRATCH_MB)", (size_t)a->Tq * sizeof(float), a->Tq,
           g_cu.scratch_bytes);
  for (int bh0 = 0; bh0 < nbh_all; bh0 += (int)cap) {
    int nbh = nbh_all - bh0 < (int)cap ? nbh_all - bh0 : (int)cap;
    float *D = (float *)mt_cuda_scratch((size_t)nbh * a->Tq * sizeof(float), "attn_backward");
    size_t warps = (size_t)nbh * a->Tq;
    attn_rowdot_kernel<T><<<(unsigned)((warps + 7) / 8), 256, 0, g_cu.stream>>>(D, *a, dout, out,
                                                                                bh0, nbh);
    CUDA_LAUNCH_CHECK();
    if (a->hs <= 64)
      backward_launch<T, 64, 64, 4>(a, dq, dk, dv, dout, lse, D, bh0, nbh, q, k, v, scale,
                                    first);
    else if (a->hs <= 128)
      backward_launch<T, 32, 32, 8>(a, dq, dk, dv, dout, lse, D, bh0, nbh, q, k, v, scale,
                                    first);
    else
      backward_launch<T, 16, 16, 16>(a, dq, dk, dv, dout, lse, D, bh0, nbh, q, k, v, scale,
                                     first);
  }
}

template <typename T>
void mt_cuda_attn_backward(const mt_attn_block *a, void *dq, void *dk, void *dv, const void *dout,
                           const void *out, const float *lse, const void *q, const void *k,
                           const void *v) {
  attn_bwd<T>(a, dq, dk, dv, dout, out, lse, q, k, v, 0);
}
MT_CUDA_INSTANTIATE(attn_backward)

template <typename T>
void mt_cuda_attn_backward_first(const mt_attn_block *a, void *dq, void *dk, void *dv,
                                 const void *dout, const void *out, const float *lse,
                                 const void *q, const void *k, const void *v) {
  attn_bwd<T>(a, dq, dk, dv, dout, out, lse, q, k, v, 1);
}
MT_CUDA_INSTANTIATE(attn_backward_first)
