/* The CUDA backend's elementwise, normalisation, embedding and conversion
 * ops (the loss: xent.cu; AdamW: adamw.cu; rotary embedding and the
 * key/value spread: heads.cu): one kernel (or a short fixed
 * sequence) per op and direction, shapes as kernels.h states them. Rows
 * are spread over blocks or warps; sums over rows (weight and bias
 * gradients) go through per-chunk partial sums added in chunk order, never
 * atomics, so results repeat bit for bit. Each op is templated on the
 * storage type S (float or mt_bf16, cuda_common.cuh's mt_ld / mt_st): fp32
 * math either way, one rounding per stored bf16 value, fp32 weight
 * gradients and LayerNorm statistics. */
#include "kernels/cuda/cuda_common.cuh"

#include <cub/cub.cuh>
#include <math.h>
#include <string.h>

/* the sum over a warp's lanes, in every lane */
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* ------------------------------------------------------------------ */
/* sums over rows: out[c] += sum_n x[n, c]                             */

/* The rows are cut into `chunks` pieces (a number fixed by N and the
 * columns); block (cx, k) sums rows of piece k for 256 columns, and a second
 * kernel adds the pieces in order. Threads of a warp read consecutive
 * columns of a row: coalesced. */
static int colsum_chunks(int N, int cols, int arrays) {
  int chunks = (N + 127) / 128;
  if (chunks > 64) chunks = 64;
  size_t most = g_cu.scratch_bytes / ((size_t)arrays * (size_t)cols * sizeof(float));
  if ((size_t)chunks > most) chunks = (int)(most ? most : 1);
  return chunks < 1 ? 1 : chunks;
}

/* mode 0: x; mode 1 (LayerNorm dw, db): (inp - mean) * rstd * x into partial,
 * x into partial2 (x and inp of storage type S, the sums fp32); RMSNorm's dw:
 * mode 1 with mean and partial2 NULL */
template <typename S>
__global__ void colsum_partial_kernel(float *partial, float *partial2, const S *x, const S *inp,
                                      const float *mean, const float *rstd, int N, int cols,
                                      int ld, int rows_per_chunk, int mode) {
  int c = blockIdx.x * blockDim.x + threadIdx.x, k = blockIdx.y;
  if (c >= cols) return;
  int n0 = k * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
  float acc = 0.0f, acc2 = 0.0f;
  for (int n = n0; n < n1; n++) {
    float v = mt_ld(x[(size_t)n * ld + c]);
    if (mode == 1) {
      acc += (mt_ld(inp[(size_t)n * ld + c]) - (mean ? mean[n] : 0.0f)) * rstd[n] * v;
      acc2 += v;
    } else {
      acc += v;
    }
  }
  partial[(size_t)k * cols + c] = acc;
  if (mode == 1 && partial2) partial2[(size_t)k * cols + c] = acc2;
}

__global__ void colsum_finish_kernel(float *out, const float *partial, int chunks, int cols) {
  int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (int k = 0; k < chunks; k++) acc += partial[(size_t)k * cols + c];
  out[c] += acc;
}

template <typename S> void mt_cuda_colsum_add(float *out, const S *x, int N, int cols, int ld) {
  if (N <= 0 || cols <= 0) return;
  int chunks = colsum_chunks(N, cols, 1), rows = (N + chunks - 1) / chunks;
  float *partial = (float *)mt_cuda_scratch((size_t)chunks * cols * sizeof(float), "a sum over rows");
  dim3 grid((unsigned)((cols + 255) / 256), (unsigned)chunks);
  colsum_partial_kernel<S><<<grid, 256, 0, g_cu.stream>>>(partial, NULL, x, NULL, NULL, NULL, N,
                                                          cols, ld, rows, 0);
  CUDA_LAUNCH_CHECK();
  colsum_finish_kernel<<<(cols + 255) / 256, 256, 0, g_cu.stream>>>(out, partial, chunks, cols);
  CUDA_LAUNCH_CHECK();
}
template void mt_cuda_colsum_add<float>(float *, const float *, int, int, int);
template void mt_cuda_colsum_add<mt_bf16>(float *, const mt_bf16 *, int, int, int);

/* ------------------------------------------------------------------ */
/* casts between storage types, and strided row sums                   */

/* dst (rows x cols, leading dimension ld_dst) = src (rows x cols, ld_src)
 * converted from From to To (exact, or rounded to nearest even), or with ADD
 * dst = dst + src in fp32, rounded once. One flat index over the elements
 * (a single row when both are contiguous), so short rows keep every thread
 * busy. */
template <typename From, typename To, int ADD>
__global__ void rows_cast_kernel(To *dst, size_t ld_dst, const From *src, size_t ld_src,
                                 size_t rows, size_t cols) {
  size_t n = rows * cols;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = rows == 1 ? 0 : i / cols, c = rows == 1 ? i : i % cols;
    To *y = dst + r * ld_dst + c;
    float v = mt_ld(src[r * ld_src + c]);
    *y = mt_st<To>(ADD ? mt_ld(*y) + v : v);
  }
}

template <typename From, typename To, int ADD>
static void rows_cast(To *dst, size_t ld_dst, const From *src, size_t ld_src, size_t rows,
                      size_t cols) {
  size_t n = rows * cols;
  if (!n) return;
  if (ld_dst == cols && ld_src == cols) rows = 1, cols = ld_dst = ld_src = n;
  rows_cast_kernel<From, To, ADD><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>(
      dst, ld_dst, src, ld_src, rows, cols);
  CUDA_LAUNCH_CHECK();
}

/* n contiguous elements */
template <typename From, typename To> static void cast_n(To *dst, const From *src, size_t n) {
  rows_cast<From, To, 0>(dst, n, src, n, 1, n);
}

/* the bits as they are (a 2D copy) */
template <typename S>
void mt_cuda_copy_2d(void *dst, size_t ld_dst, const void *src, size_t ld_src, size_t rows,
                     size_t cols) {
  if (!rows || !cols) return;
  CUDA_CHECK(cudaMemcpy2DAsync(dst, ld_dst * sizeof(S), src, ld_src * sizeof(S),
                               cols * sizeof(S), rows, cudaMemcpyDeviceToDevice, g_cu.stream));
}
MT_CUDA_INSTANTIATE(copy_2d)

template <typename S>
void mt_cuda_add_2d(void *dst, size_t ld_dst, const void *src, size_t ld_src, size_t rows,
                    size_t cols) {
  rows_cast<S, S, 1>((S *)dst, ld_dst, (const S *)src, ld_src, rows, cols);
}
MT_CUDA_INSTANTIATE(add_2d)

/* dst (n elements of dst_t) = src (of src_t): rounded to nearest even,
 * widened exactly, or (the same type) copied */
void mt_cuda_convert(void *dst, mt_dtype dst_t, const void *src, mt_dtype src_t, size_t n) {
  if (dst_t == MT_DT_BF16 && src_t == MT_DT_F32)
    cast_n<float, mt_bf16>((mt_bf16 *)dst, (const float *)src, n);
  else if (dst_t == MT_DT_F32 && src_t == MT_DT_BF16)
    cast_n<mt_bf16, float>((float *)dst, (const mt_bf16 *)src, n);
  else if (dst_t == src_t && dst_t == MT_DT_F32)
    mt_cuda_copy<float>(dst, src, n);
  else if (dst_t == src_t && dst_t == MT_DT_BF16)
    mt_cuda_copy<mt_bf16>(dst, src, n);
  else
    mt_die("convert: %s to %s is not a conversion of the op table", mt_dtype_name(src_t),
           mt_dtype_name(dst_t));
}

void mt_cuda_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n) {
  cast_n<float, mt_bf16>((mt_bf16 *)dst, src, n);
}

void mt_cuda_to_bf16_2d(__nv_bfloat16 *dst, const float *src, int rows, int cols, int ld) {
  rows_cast<float, mt_bf16, 0>((mt_bf16 *)dst, (size_t)cols, src, (size_t)ld, (size_t)rows,
                               (size_t)cols);
}

/* ------------------------------------------------------------------ */
/* encoder                                                             */

/* out (B,T,C) = (wte row inp - v0 when in [0, Vl), else 0) + (wpe[p] when
 * wpe is given; p = pos[bt], or t without pos); the plain encoder is v0 =
 * 0, Vl = every row. A lone term is stored as it is (exact in bf16 too). */
template <typename S>
__global__ void encoder_forward_kernel(S *out, const int *inp, const S *wte, int v0, int Vl,
                                       const S *wpe, const int *pos, int BT, int T, int C) {
  size_t n = (size_t)BT * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    int bt = (int)(i / (size_t)C), c = (int)(i % (size_t)C), t = pos ? pos[bt] : bt % T;
    int row = inp[bt] - v0;
    float v = row >= 0 && row < Vl ? mt_ld(wte[(size_t)row * C + c]) : 0.0f;
    if (wpe) {
      float p = mt_ld(wpe[(size_t)t * C + c]);
      v = row >= 0 && row < Vl ? v + p : p;
    }
    out[i] = mt_st<S>(v);
  }
}

template <typename S>
void mt_cuda_encoder_vp_forward(void *out, const int *inp, const void *wte, int v0, int Vl,
                                const void *wpe, const int *pos, int B, int T, int C) {
  size_t n = (size_t)B * T * C;
  encoder_forward_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>(
      (S *)out, inp, (const S *)wte, v0, Vl, (const S *)wpe, pos, B * T, T, C);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(encoder_vp_forward)

template <typename S>
void mt_cuda_encoder_forward(void *out, const int *inp, const void *wte, const void *wpe, int B,
                             int T, int C) {
  mt_cuda_encoder_vp_forward<S>(out, inp, wte, 0, 0x7fffffff, wpe, NULL, B, T, C);
}
MT_CUDA_INSTANTIATE(encoder_forward)

/* dwpe[t, c] += dout[b, t, c] for b in order (the CPU's order), in fp32 */
template <typename S>
__global__ void encoder_dwpe_kernel(float *dwpe, const S *dout, int B, int T, int C) {
  size_t n = (size_t)T * C;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float acc = dwpe[i];
    for (int b = 0; b < B; b++) acc += mt_ld(dout[(size_t)b * n + i]);
    dwpe[i] = acc;
  }
}

/* sort key of a position: its local row, or Vl (after every row) when the
 * token is held by another rank */
__global__ void encoder_keys_kernel(int *keys, int *vals, const int *inp, int v0, int Vl, int BT) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= BT) return;
  int row = inp[i] - v0;
  keys[i] = row >= 0 && row < Vl ? row : Vl;
  vals[i] = i;
}

/* Block (k, cy): when sorted position k starts a run of one row, that row's
 * gradient columns of block cy get the run's positions added in position
 * order (the sort is stable): the order the CPU adds them in. */
template <typename S>
__global__ void encoder_dwte_kernel(float *dwte, const S *dout, const int *keys, const int *vals,
                                    int BT, int C, int Vl) {
  int k = blockIdx.x;
  int row = keys[k];
  if (row >= Vl || (k > 0 && keys[k - 1] == row)) return;
  int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float acc = dwte[(size_t)row * C + c];
  for (int j = k; j < BT && keys[j] == row; j++) acc += mt_ld(dout[(size_t)vals[j] * C + c]);
  dwte[(size_t)row * C + c] = acc;
}

/* sort buffers, kept from call to call (they grow to the largest B*T) */
static struct {
  int *keys_in, *vals_in, *keys_out, *vals_out;
  void *temp;
  size_t temp_bytes;
  int cap;
} g_sort;

void mt_cuda_ops_shutdown(void) {
  cudaFree(g_sort.keys_in);
  cudaFree(g_sort.temp);
  memset(&g_sort, 0, sizeof g_sort);
}

static void sort_reserve(int BT, int Vl) {
  int end_bit = 1;
  while (end_bit < 31 && (1 << end_bit) <= Vl) end_bit++;
  size_t temp = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, temp, (int *)NULL, (int *)NULL, (int *)NULL,
                                             (int *)NULL, BT, 0, end_bit, g_cu.stream));
  if (BT <= g_sort.cap && temp <= g_sort.temp_bytes) return;
  CUDA_CHECK(cudaStreamSynchronize(g_cu.stream));
  g_cu.extra_bytes -= (size_t)g_sort.cap * 4 * sizeof(int) + g_sort.temp_bytes;
  cudaFree(g_sort.keys_in);
  cudaFree(g_sort.temp);
  int cap = BT > g_sort.cap ? BT : g_sort.cap;
  CUDA_CHECK(cudaMalloc(&g_sort.keys_in, (size_t)cap * 4 * sizeof(int)));
  g_sort.vals_in = g_sort.keys_in + cap;
  g_sort.keys_out = g_sort.vals_in + cap;
  g_sort.vals_out = g_sort.keys_out + cap;
  g_sort.cap = cap;
  g_sort.temp_bytes = temp > g_sort.temp_bytes ? temp : g_sort.temp_bytes;
  CUDA_CHECK(cudaMalloc(&g_sort.temp, g_sort.temp_bytes ? g_sort.temp_bytes : 1));
  g_cu.extra_bytes += (size_t)cap * 4 * sizeof(int) + g_sort.temp_bytes;
}

/* dst[ids - v0] += dout for the BT rows whose id is in [v0, v0 + Vl): the
 * rows are sorted by id on the GPU (stable radix sort), so each id's
 * gradient is summed by one thread per column, rows in order: no atomics,
 * and the CPU's bits. */
template <typename S>
static void scatter_add_rows(float *dst, const S *dout, const int *ids, int v0, int Vl, int BT,
                             int C) {
  if (!dst || BT == 0 || Vl <= 0) return;
  sort_reserve(BT, Vl);
  encoder_keys_kernel<<<(BT + 255) / 256, 256, 0, g_cu.stream>>>(g_sort.keys_in, g_sort.vals_in,
                                                                 ids, v0, Vl, BT);
  CUDA_LAUNCH_CHECK();
  int end_bit = 1;
  while (end_bit < 31 && (1 << end_bit) <= Vl) end_bit++;
  size_t temp = g_sort.temp_bytes;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(g_sort.temp, temp, g_sort.keys_in, g_sort.keys_out,
                                             g_sort.vals_in, g_sort.vals_out, BT, 0, end_bit,
                                             g_cu.stream));
  dim3 grid((unsigned)BT, (unsigned)((C + 255) / 256));
  encoder_dwte_kernel<S><<<grid, 256, 0, g_cu.stream>>>(dst, dout, g_sort.keys_out,
                                                        g_sort.vals_out, BT, C, Vl);
  CUDA_LAUNCH_CHECK();
}

/* dwte[inp - v0] += dout for tokens held here; dwpe[p] += dout unless NULL
 * (p = pos[bt]: positions may repeat, summed as dwte's rows; without pos
 * p = t, every sequence's rows in order) */
template <typename S>
void mt_cuda_encoder_vp_backward(float *dwte, float *dwpe, const void *dout_, const int *inp,
                                 const int *pos, int v0, int Vl, int B, int T, int C) {
  const S *dout = (const S *)dout_;
  if (dwpe && pos) {
    scatter_add_rows<S>(dwpe, dout, pos, 0, 1 << 30, B * T, C);
  } else if (dwpe) {
    size_t n = (size_t)T * C;
    encoder_dwpe_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>(dwpe, dout, B, T, C);
    CUDA_LAUNCH_CHECK();
  }
  scatter_add_rows<S>(dwte, dout, inp, v0, Vl, B * T, C);
}
MT_CUDA_INSTANTIATE(encoder_vp_backward)

/* the largest of n token ids, in one block (into *out) */
__global__ void max_token_kernel(int *out, const int *inp, int n) {
  __shared__ int sh[256];
  int m = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) m = max(m, inp[i]);
  sh[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] = max(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = sh[0];
}

/* The whole vocabulary's rows (no v0, no Vl): the sort then needs the bits
 * of the largest token id in the batch (ceil(log2 V) at most), not 31: one
 * small reduction and a 4-byte read back, on a path only tests and
 * benchmarks take (the model calls encoder_vp_backward with its Vl). */
template <typename S>
void mt_cuda_encoder_backward(float *dwte, float *dwpe, const void *dout, const int *inp, int B,
                              int T, int C) {
  const int BT = B * T;
  int top = 0;
  if (dwte && BT > 0) {
    int *d_top = (int *)mt_cuda_scratch(sizeof(int), "the largest token id");
    max_token_kernel<<<1, 256, 0, g_cu.stream>>>(d_top, inp, BT);
    CUDA_LAUNCH_CHECK();
    CUDA_CHECK(cudaMemcpyAsync(g_cu.red_host, d_top, sizeof(int), cudaMemcpyDeviceToHost,
                               g_cu.stream));
    CUDA_CHECK(cudaStreamSynchronize(g_cu.stream));
    memcpy(&top, g_cu.red_host, sizeof(int));
  }
  mt_cuda_encoder_vp_backward<S>(dwte, dwpe, dout, inp, NULL, 0, top + 1, B, T, C);
}
MT_CUDA_INSTANTIATE(encoder_backward)

/* ------------------------------------------------------------------ */
/* layernorm: one warp per row                                          */

template <typename S>
__global__ void layernorm_forward_kernel(S *out, float *mean, float *rstd, const S *inp,
                                         const S *w, const S *b, int N, int C) {
  int lane = threadIdx.x % 32;
  int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (n >= N) return;
  const S *x = inp + (size_t)n * C;
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += mt_ld(x[c]);
  float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float d = mt_ld(x[c]) - m;
    v += d * d;
  }
  float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
  S *y = out + (size_t)n * C;
  for (int c = lane; c < C; c += 32)
    y[c] = mt_st<S>((mt_ld(x[c]) - m) * r * mt_ld(w[c]) + mt_ld(b[c]));
  if (lane == 0) {
    mean[n] = m;
    rstd[n] = r;
  }
}

template <typename S>
void mt_cuda_layernorm_forward(void *out, float *mean, float *rstd, const void *inp,
                               const void *w, const void *b, int N, int C) {
  if (N <= 0) return;
  layernorm_forward_kernel<S><<<(N + 7) / 8, 256, 0, g_cu.stream>>>(
      (S *)out, mean, rstd, (const S *)inp, (const S *)w, (const S *)b, N, C);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(layernorm_forward)

/* dinp += (g - mean_c(g) - norm * mean_c(g * norm)) * rstd, g = w * dout
 * (bf16: dinp = round(dinp + that)); acc 0: dinp = 0 + that */
template <typename S>
__global__ void layernorm_dinp_kernel(S *dinp, const S *dout, const S *inp, const S *w,
                                      const float *mean, const float *rstd, int N, int C,
                                      int acc) {
  int lane = threadIdx.x % 32;
  int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (n >= N) return;
  const S *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
  float m = mean[n], s = rstd[n];
  float g_sum = 0.0f, gn_sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    float norm = (mt_ld(x[c]) - m) * s, g = mt_ld(w[c]) * mt_ld(dy[c]);
    g_sum += g;
    gn_sum += g * norm;
  }
  float g_mean = warp_sum(g_sum) / C, gn_mean = warp_sum(gn_sum) / C;
  S *dx = dinp + (size_t)n * C;
  for (int c = lane; c < C; c += 32) {
    float norm = (mt_ld(x[c]) - m) * s, g = mt_ld(w[c]) * mt_ld(dy[c]);
    dx[c] = mt_st<S>((acc ? mt_ld(dx[c]) : 0.0f) + (g - g_mean - norm * gn_mean) * s);
  }
}

template <typename S>
static void layernorm_bwd(S *dinp, float *dw, float *db, const S *dout, const S *inp, const S *w,
                          const float *mean, const float *rstd, int N, int C, int acc) {
  if (N <= 0) return;
  layernorm_dinp_kernel<S><<<(N + 7) / 8, 256, 0, g_cu.stream>>>(dinp, dout, inp, w, mean, rstd,
                                                                 N, C, acc);
  CUDA_LAUNCH_CHECK();
  int chunks = colsum_chunks(N, C, 2), rows = (N + chunks - 1) / chunks;
  float *partial = (float *)mt_cuda_scratch(2 * (size_t)chunks * C * sizeof(float),
                                            "layernorm weight gradients");
  float *partial2 = partial + (size_t)chunks * C;
  dim3 grid((unsigned)((C + 255) / 256), (unsigned)chunks);
  colsum_partial_kernel<S><<<grid, 256, 0, g_cu.stream>>>(partial, partial2, dout, inp, mean,
                                                          rstd, N, C, C, rows, 1);
  CUDA_LAUNCH_CHECK();
  colsum_finish_kernel<<<(C + 255) / 256, 256, 0, g_cu.stream>>>(dw, partial, chunks, C);
  CUDA_LAUNCH_CHECK();
  colsum_finish_kernel<<<(C + 255) / 256, 256, 0, g_cu.stream>>>(db, partial2, chunks, C);
  CUDA_LAUNCH_CHECK();
}

template <typename S>
void mt_cuda_layernorm_backward(void *dinp, float *dw, float *db, const void *dout,
                                const void *inp, const void *w, const float *mean,
                                const float *rstd, int N, int C) {
  layernorm_bwd<S>((S *)dinp, dw, db, (const S *)dout, (const S *)inp, (const S *)w, mean, rstd,
                   N, C, 1);
}
MT_CUDA_INSTANTIATE(layernorm_backward)

template <typename S>
void mt_cuda_layernorm_backward_first(void *dinp, float *dw, float *db, const void *dout,
                                      const void *inp, const void *w, const float *mean,
                                      const float *rstd, int N, int C) {
  layernorm_bwd<S>((S *)dinp, dw, db, (const S *)dout, (const S *)inp, (const S *)w, mean, rstd,
                   N, C, 0);
}
MT_CUDA_INSTANTIATE(layernorm_backward_first)

/* RMSNorm: one warp per row; dw as LayerNorm's without the mean */

template <typename S>
__global__ void rmsnorm_forward_kernel(S *out, float *rstd, const S *inp, const S *w, int N,
                                       int C, float eps) {
  int lane = threadIdx.x % 32;
  int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (n >= N) return;
  const S *x = inp + (size_t)n * C;
  float ss = 0.0f;
  for (int c = lane; c < C; c += 32) ss += mt_ld(x[c]) * mt_ld(x[c]);
  float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);
  S *y = out + (size_t)n * C;
  for (int c = lane; c < C; c += 32) y[c] = mt_st<S>(mt_ld(x[c]) * r * mt_ld(w[c]));
  if (lane == 0) rstd[n] = r;
}

template <typename S>
void mt_cuda_rmsnorm_forward(void *out, float *rstd, const void *inp, const void *w, int N, int C,
                             float eps) {
  if (N <= 0) return;
  rmsnorm_forward_kernel<S><<<(N + 7) / 8, 256, 0, g_cu.stream>>>(
      (S *)out, rstd, (const S *)inp, (const S *)w, N, C, eps);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(rmsnorm_forward)

/* dinp += (g - norm * mean_c(g * norm)) * rstd, g = w * dout, norm = inp * rstd
 * (acc 0: dinp = 0 + that) */
template <typename S>
__global__ void rmsnorm_dinp_kernel(S *dinp, const S *dout, const S *inp, const S *w,
                                    const float *rstd, int N, int C, int acc) {
  int lane = threadIdx.x % 32;
  int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (n >= N) return;
  const S *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
  float s = rstd[n], gn_sum = 0.0f;
  for (int c = lane; c < C; c += 32) gn_sum += mt_ld(w[c]) * mt_ld(dy[c]) * mt_ld(x[c]) * s;
  float gn_mean = warp_sum(gn_sum) / C;
  S *dx = dinp + (size_t)n * C;
  for (int c = lane; c < C; c += 32) {
    float norm = mt_ld(x[c]) * s, g = mt_ld(w[c]) * mt_ld(dy[c]);
    dx[c] = mt_st<S>((acc ? mt_ld(dx[c]) : 0.0f) + (g - norm * gn_mean) * s);
  }
}

template <typename S>
static void rmsnorm_bwd(S *dinp, float *dw, const S *dout, const S *inp, const S *w,
                        const float *rstd, int N, int C, int acc) {
  if (N <= 0) return;
  rmsnorm_dinp_kernel<S><<<(N + 7) / 8, 256, 0, g_cu.stream>>>(dinp, dout, inp, w, rstd, N, C,
                                                               acc);
  CUDA_LAUNCH_CHECK();
  int chunks = colsum_chunks(N, C, 1), rows = (N + chunks - 1) / chunks;
  float *partial = (float *)mt_cuda_scratch((size_t)chunks * C * sizeof(float),
                                            "rmsnorm weight gradients");
  dim3 grid((unsigned)((C + 255) / 256), (unsigned)chunks);
  colsum_partial_kernel<S><<<grid, 256, 0, g_cu.stream>>>(partial, NULL, dout, inp, NULL, rstd,
                                                          N, C, C, rows, 1);
  CUDA_LAUNCH_CHECK();
  colsum_finish_kernel<<<(C + 255) / 256, 256, 0, g_cu.stream>>>(dw, partial, chunks, C);
  CUDA_LAUNCH_CHECK();
}

template <typename S>
void mt_cuda_rmsnorm_backward(void *dinp, float *dw, const void *dout, const void *inp,
                              const void *w, const float *rstd, int N, int C) {
  rmsnorm_bwd<S>((S *)dinp, dw, (const S *)dout, (const S *)inp, (const S *)w, rstd, N, C, 1);
}
MT_CUDA_INSTANTIATE(rmsnorm_backward)

template <typename S>
void mt_cuda_rmsnorm_backward_first(void *dinp, float *dw, const void *dout, const void *inp,
                                    const void *w, const float *rstd, int N, int C) {
  rmsnorm_bwd<S>((S *)dinp, dw, (const S *)dout, (const S *)inp, (const S *)w, rstd, N, C, 0);
}
MT_CUDA_INSTANTIATE(rmsnorm_backward_first)

/* ------------------------------------------------------------------ */
/* gelu (tanh form, as GPT-2), SwiGLU, residual                         */

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_CUBIC 0.044715f

template <typename S> __global__ void gelu_forward_kernel(S *out, const S *inp, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = mt_ld(inp[i]);
    out[i] = mt_st<S>(0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x))));
  }
}

/* dinp += gelu'(inp) dout (bf16: dinp = round(dinp + that); acc 0: dinp =
 * 0 + that) */
template <typename S>
__global__ void gelu_backward_kernel(S *dinp, const S *inp, const S *dout, size_t n, int acc) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float x = mt_ld(inp[i]);
    float th = tanhf(GELU_SCALE * (x + GELU_CUBIC * x * x * x));
    float local = 0.5f * (1.0f + th) +
                  0.5f * x * (1.0f - th * th) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
    dinp[i] = mt_st<S>((acc ? mt_ld(dinp[i]) : 0.0f) + local * mt_ld(dout[i]));
  }
}

template <typename S> void mt_cuda_gelu_forward(void *out, const void *inp, size_t n) {
  if (!n) return;
  gelu_forward_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>((S *)out, (const S *)inp, n);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(gelu_forward)

template <typename S>
static void gelu_bwd(void *dinp, const void *inp, const void *dout, size_t n, int acc) {
  if (!n) return;
  gelu_backward_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>(
      (S *)dinp, (const S *)inp, (const S *)dout, n, acc);
  CUDA_LAUNCH_CHECK();
}

template <typename S>
void mt_cuda_gelu_backward(void *dinp, const void *inp, const void *dout, size_t n) {
  gelu_bwd<S>(dinp, inp, dout, n, 1);
}
MT_CUDA_INSTANTIATE(gelu_backward)

template <typename S>
void mt_cuda_gelu_backward_first(void *dinp, const void *inp, const void *dout, size_t n) {
  gelu_bwd<S>(dinp, inp, dout, n, 0);
}
MT_CUDA_INSTANTIATE(gelu_backward_first)

/* out (N,F) = silu(gate) up, inp rows gate | up */
template <typename S> __global__ void swiglu_forward_kernel(S *out, const S *inp, int N, int F) {
  size_t n = (size_t)N * F;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / F, f = i % F;
    float g = mt_ld(inp[r * 2 * F + f]);
    out[i] = mt_st<S>(g / (1.0f + expf(-g)) * mt_ld(inp[r * 2 * F + F + f]));
  }
}

/* dgate += dout up silu'(gate), dup += dout silu(gate) (acc 0: = 0 + those) */
template <typename S>
__global__ void swiglu_backward_kernel(S *dinp, const S *inp, const S *dout, int N, int F,
                                       int acc) {
  size_t n = (size_t)N * F;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / F, f = i % F, gi = r * 2 * F + f, ui = gi + F;
    float g = mt_ld(inp[gi]), s = 1.0f / (1.0f + expf(-g)), d = mt_ld(dout[i]);
    dinp[gi] = mt_st<S>((acc ? mt_ld(dinp[gi]) : 0.0f) +
                        d * mt_ld(inp[ui]) * s * (1.0f + g * (1.0f - s)));
    dinp[ui] = mt_st<S>((acc ? mt_ld(dinp[ui]) : 0.0f) + d * g * s);
  }
}

template <typename S> void mt_cuda_swiglu_forward(void *out, const void *inp, int N, int F) {
  size_t n = (size_t)N * F;
  if (!n) return;
  swiglu_forward_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>((S *)out, (const S *)inp,
                                                                        N, F);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(swiglu_forward)

template <typename S>
static void swiglu_bwd(void *dinp, const void *inp, const void *dout, int N, int F, int acc) {
  size_t n = (size_t)N * F;
  if (!n) return;
  swiglu_backward_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>(
      (S *)dinp, (const S *)inp, (const S *)dout, N, F, acc);
  CUDA_LAUNCH_CHECK();
}

template <typename S>
void mt_cuda_swiglu_backward(void *dinp, const void *inp, const void *dout, int N, int F) {
  swiglu_bwd<S>(dinp, inp, dout, N, F, 1);
}
MT_CUDA_INSTANTIATE(swiglu_backward)

template <typename S>
void mt_cuda_swiglu_backward_first(void *dinp, const void *inp, const void *dout, int N, int F) {
  swiglu_bwd<S>(dinp, inp, dout, N, F, 0);
}
MT_CUDA_INSTANTIATE(swiglu_backward_first)

template <typename S>
__global__ void residual_kernel(S *out, const S *a, const S *b, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    out[i] = mt_st<S>(mt_ld(a[i]) + mt_ld(b[i]));
}

template <typename S>
void mt_cuda_residual_forward(void *out, const void *a, const void *b, size_t n) {
  if (!n) return;
  residual_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>((S *)out, (const S *)a,
                                                                 (const S *)b, n);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(residual_forward)

/* the fused residual + norm of the op table, composed of the two kernels
 * (kernel launches are not the CPU's fork-joins; the bits are those of the
 * two ops by construction) */
template <typename S>
void mt_cuda_residual_layernorm_forward(void *res, void *out, float *mean, float *rstd,
                                        const void *a, const void *b, const void *w,
                                        const void *bias, int N, int C) {
  mt_cuda_residual_forward<S>(res, a, b, (size_t)N * C);
  mt_cuda_layernorm_forward<S>(out, mean, rstd, res, w, bias, N, C);
}
MT_CUDA_INSTANTIATE(residual_layernorm_forward)

template <typename S>
void mt_cuda_residual_rmsnorm_forward(void *res, void *out, float *rstd, const void *a,
                                      const void *b, const void *w, int N, int C, float eps) {
  mt_cuda_residual_forward<S>(res, a, b, (size_t)N * C);
  mt_cuda_rmsnorm_forward<S>(out, rstd, res, w, N, C, eps);
}
MT_CUDA_INSTANTIATE(residual_rmsnorm_forward)
