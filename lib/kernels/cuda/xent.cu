/* Cross-entropy on the GPU: softmax_xent_forward, softmax_xent_backward and
 * the vocabulary-parallel pieces xent_vp_max, xent_vp_exp, xent_vp_finish,
 * xent_vp_backward, as kernels.h states them. One block per row.
 *
 * Each op is templated on the storage type T of the logits, the
 * probabilities and their gradient (float, or mt_bf16): elements are
 * widened exactly, the math is fp32 (the row sums double), and a bf16 result
 * is rounded once. xent_vp_exp only sums exp(logit - M); xent_vp_finish
 * computes each probability exp(logit - M) / sum from the logits (the same
 * expf as the sum saw, so an fp32 probability has the bits of the exp
 * stored and then scaled, and a bf16 one is rounded once where a stored
 * bf16 exp would be rounded twice). The whole-vocabulary loss is the three
 * pieces on one rank, so the pieces with v0 = 0, Vl = Vp, nvalid = V give
 * its bits. As the CPU's cross-entropy (cpu/xent_t.h), but for its
 * polynomial exp. A target of MT_TARGET_IGNORE: loss 0, dlogits row 0
 * (kernels.h).
 * Determinism: block reductions of a fixed shape, no atomics. */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

/* ------------------------------------------------------------------ */
/* reductions inside a block (blockDim.x a power of two <= 1024)        */

template <typename S> struct SumOp {
  __device__ S operator()(S a, S b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/* every thread gets the block's reduction of v; sh holds blockDim.x values */
template <typename S, typename Op> __device__ S block_reduce(S v, Op op, S *sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  S r = sh[0];
  __syncthreads();
  return r;
}

/* ------------------------------------------------------------------ */
/* kernels: one block per row                                          */

#define XENT_THREADS 512

/* row max over the first nvalid columns (-inf when none) */
template <typename T>
__global__ void xent_max_kernel(float *rowmax, const T *logits, int Vl, int nvalid) {
  __shared__ float sh[XENT_THREADS];
  const T *l = logits + (size_t)blockIdx.x * Vl;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < nvalid; j += blockDim.x) m = fmaxf(m, mt_ld(l[j]));
  m = block_reduce(m, MaxOp(), sh);
  if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

/* stats (sum of exp(logits - M) over the real columns, the target's logit
 * held here or 0: an ignored target, -1, is held nowhere, col < 0 for any
 * v0 >= 0); the logits are left as they are */
template <typename T>
__global__ void xent_exp_kernel(double *stats, const T *logits, const float *rowmax,
                                const int *targets, int v0, int Vl, int nvalid) {
  __shared__ double sh[XENT_THREADS];
  size_t row = blockIdx.x;
  const T *l = logits + row * Vl;
  int col = targets[row] - v0;
  float M = rowmax[row];
  double s = 0.0;
  for (int j = threadIdx.x; j < nvalid; j += blockDim.x) s += expf(mt_ld(l[j]) - M);
  s = block_reduce(s, SumOp<double>(), sh);
  if (threadIdx.x == 0) {
    stats[2 * row] = s;
    stats[2 * row + 1] = col >= 0 && col < nvalid ? (double)mt_ld(l[col]) : 0.0;
  }
}

/* losses = log(sum) + M - target logit (0 for an ignored target), and
 * probs = exp(logits - M) / sum on the real columns, 0 on padding (probs
 * may alias logits: each thread reads only the columns it writes) */
template <typename T>
__global__ void xent_finish_kernel(float *losses, T *probs, const T *logits, const double *stats,
                                   const float *rowmax, const int *targets, int Vl, int nvalid) {
  size_t row = blockIdx.x;
  double sum = stats[2 * row];
  float inv = (float)(1.0 / sum);
  T *p = probs + row * Vl;
  const T *x = logits + row * Vl;
  float M = rowmax[row];
  for (int j = threadIdx.x; j < Vl; j += blockDim.x)
    p[j] = mt_st<T>(j < nvalid ? expf(mt_ld(x[j]) - M) * inv : 0.0f);
  if (threadIdx.x == 0)
    losses[row] = targets[row] == MT_TARGET_IGNORE
                      ? 0.0f
                      : (float)(log(sum) + (double)rowmax[row] - stats[2 * row + 1]);
}

/* dlogits = (probs - onehot(target - v0)) * dloss on real columns, 0 on
 * padding and on the whole row of an ignored target */
template <typename T>
__global__ void xent_backward_kernel(T *dlogits, const T *probs, const int *targets, int v0,
                                     float dloss, int Vl, int nvalid) {
  size_t row = blockIdx.x;
  int col = targets[row] - v0;
  int real = targets[row] == MT_TARGET_IGNORE ? 0 : nvalid;
  const T *p = probs + row * Vl;
  T *d = dlogits + row * Vl;
  for (int j = threadIdx.x; j < Vl; j += blockDim.x)
    d[j] = mt_st<T>(j < real ? (mt_ld(p[j]) - (j == col ? 1.0f : 0.0f)) * dloss : 0.0f);
}

/* ------------------------------------------------------------------ */
/* the op table's bodies                                               */

template <typename T>
void mt_cuda_xent_vp_max(float *rowmax, const void *logits, int N, int Vl, int nvalid) {
  if (N <= 0) return;
  xent_max_kernel<T><<<N, XENT_THREADS, 0, g_cu.stream>>>(rowmax, (const T *)logits, Vl, nvalid);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(xent_vp_max)

template <typename T>
void mt_cuda_xent_vp_exp(double *stats, const void *logits, const float *rowmax,
                         const int *targets, int v0, int N, int Vl, int nvalid) {
  if (N <= 0) return;
  xent_exp_kernel<T><<<N, XENT_THREADS, 0, g_cu.stream>>>(stats, (const T *)logits, rowmax,
                                                          targets, v0, Vl, nvalid);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(xent_vp_exp)

template <typename T>
void mt_cuda_xent_vp_finish(float *losses, void *probs, const void *logits, const double *stats,
                            const float *rowmax, const int *targets, int N, int Vl, int nvalid) {
  if (N <= 0) return;
  xent_finish_kernel<T><<<N, XENT_THREADS, 0, g_cu.stream>>>(
      losses, (T *)probs, (const T *)logits, stats, rowmax, targets, Vl, nvalid);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(xent_vp_finish)

template <typename T>
void mt_cuda_xent_vp_backward(void *dlogits, const void *probs, const int *targets, int v0,
                              float dloss, int N, int Vl, int nvalid) {
  if (N <= 0) return;
  xent_backward_kernel<T><<<N, XENT_THREADS, 0, g_cu.stream>>>(
      (T *)dlogits, (const T *)probs, targets, v0, dloss, Vl, nvalid);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(xent_vp_backward)

/* The whole-vocabulary loss: the pieces on one rank (the row statistics in
 * the backend's scratch) */
template <typename T>
void mt_cuda_softmax_xent_forward(float *losses, void *probs, const void *logits,
                                  const int *targets, int N, int V, int Vp) {
  if (N <= 0) return;
  float *rowmax = (float *)mt_cuda_scratch((size_t)N * (sizeof(float) + 2 * sizeof(double)),
                                           "cross-entropy row statistics");
  double *stats = (double *)(rowmax + ((size_t)N + 1) / 2 * 2);
  mt_cuda_xent_vp_max<T>(rowmax, logits, N, Vp, V);
  mt_cuda_xent_vp_exp<T>(stats, logits, rowmax, targets, 0, N, Vp, V);
  mt_cuda_xent_vp_finish<T>(losses, probs, logits, stats, rowmax, targets, N, Vp, V);
}
MT_CUDA_INSTANTIATE(softmax_xent_forward)

template <typename T>
void mt_cuda_softmax_xent_backward(void *dlogits, const void *probs, const int *targets,
                                   float dloss, int N, int V, int Vp) {
  mt_cuda_xent_vp_backward<T>(dlogits, probs, targets, 0, dloss, N, Vp, V);
}
MT_CUDA_INSTANTIATE(softmax_xent_backward)
