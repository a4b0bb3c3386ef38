/* Cross-entropy on the GPU: softmax_xent_forward, softmax_xent_backward and
 * the vocabulary-parallel pieces xent_vp_max, xent_vp_exp, xent_vp_finish,
 * xent_vp_backward, as kernels.h states them, for the fp32 op table (mt_ops)
 * and the bf16 one (mt_ops_bf16). One block per row.
 *
 * The kernels are templated on the element type T of the logits, the
 * probabilities and their gradient (float, or mt_bf16): elements are
 * widened exactly, the math is fp32 (the row sums double), and a bf16 result
 * is rounded once. The two tables differ in where a probability is formed:
 *   fp32  xent_vp_exp writes exp(logit - M) over the probabilities (which
 *         may alias the logits) and xent_vp_finish scales them by 1/sum;
 *   bf16  xent_vp_exp only sums, and xent_vp_finish computes exp(logit - M)
 *         / sum from the logits (the same expf as the sum saw) and rounds it
 *         once, where a stored bf16 exp would be rounded twice.
 * The whole-vocabulary loss is the three pieces on one rank, so the pieces
 * with v0 = 0, Vl = Vp, nvalid = V give its bits. As the CPU's cross-entropy
 * (cpu/ops_cpu.c, cpu/ops_bf16.c), but for its polynomial exp.
 * Determinism: block reductions of a fixed shape, no atomics. */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>
#include <type_traits>

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
 * held here or 0); PROBS (the fp32 table): also probs = those exps on real
 * columns, 0 on padding. The target logit is read before any thread
 * overwrites it (probs may alias logits). */
template <typename T, bool PROBS>
__global__ void xent_exp_kernel(double *stats, float *probs, const T *logits,
                                const float *rowmax, const int *targets, int v0, int Vl,
                                int nvalid) {
  __shared__ double sh[XENT_THREADS];
  __shared__ double target_logit;
  size_t row = blockIdx.x;
  const T *l = logits + row * Vl;
  float *p = PROBS ? probs + row * Vl : NULL;
  int col = targets[row] - v0;
  if (threadIdx.x == 0)
    target_logit = col >= 0 && col < nvalid ? (double)mt_ld(l[col]) : 0.0;
  __syncthreads();
  float M = rowmax[row];
  double s = 0.0;
  for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
    if (j < nvalid) {
      float e = expf(mt_ld(l[j]) - M);
      if (PROBS) p[j] = e;
      s += e;
    } else if (PROBS) {
      p[j] = 0.0f;
    }
  }
  s = block_reduce(s, SumOp<double>(), sh);
  if (threadIdx.x == 0) {
    stats[2 * row] = s;
    stats[2 * row + 1] = target_logit;
  }
}

/* losses = log(sum) + M - target logit, and the probabilities over the
 * real columns: probs *= 1/sum in place over the exps (RECOMPUTE false, the
 * fp32 table; src unused), or probs = exp(src - M) / sum from the logits
 * src, 0 on padding (RECOMPUTE, the bf16 table; probs may alias src: each
 * thread reads the columns it writes). */
template <typename T, bool RECOMPUTE>
__global__ void xent_finish_kernel(float *losses, T *probs, const T *src, const double *stats,
                                   const float *rowmax, int Vl, int nvalid) {
  size_t row = blockIdx.x;
  double sum = stats[2 * row];
  float inv = (float)(1.0 / sum);
  T *p = probs + row * Vl;
  if (RECOMPUTE) {
    const T *x = src + row * Vl;
    float M = rowmax[row];
    for (int j = threadIdx.x; j < Vl; j += blockDim.x)
      p[j] = mt_st<T>(j < nvalid ? expf(mt_ld(x[j]) - M) * inv : 0.0f);
  } else {
    for (int j = threadIdx.x; j < nvalid; j += blockDim.x)
      p[j] = mt_st<T>(mt_ld(p[j]) * inv);
  }
  if (threadIdx.x == 0) losses[row] = (float)(log(sum) + (double)rowmax[row] - stats[2 * row + 1]);
}

/* dlogits = (probs - onehot(target - v0)) * dloss on real columns, 0 on padding */
template <typename T>
__global__ void xent_backward_kernel(T *dlogits, const T *probs, const int *targets, int v0,
                                     float dloss, int Vl, int nvalid) {
  size_t row = blockIdx.x;
  int col = targets[row] - v0;
  const T *p = probs + row * Vl;
  T *d = dlogits + row * Vl;
  for (int j = threadIdx.x; j < Vl; j += blockDim.x)
    d[j] = mt_st<T>(j < nvalid ? (mt_ld(p[j]) - (j == col ? 1.0f : 0.0f)) * dloss : 0.0f);
}

/* ------------------------------------------------------------------ */
/* launches, for either element type                                   */

template <typename T>
static void vp_max(float *rowmax, const T *logits, int N, int Vl, int nvalid) {
  if (N <= 0) return;
  xent_max_kernel<T><<<N, XENT_THREADS, 0, g_cu.stream>>>(rowmax, logits, Vl, nvalid);
  CUDA_LAUNCH_CHECK();
}

template <typename T, bool PROBS>
static void vp_exp(double *stats, float *probs, const T *logits, const float *rowmax,
                   const int *targets, int v0, int N, int Vl, int nvalid) {
  if (N <= 0) return;
  xent_exp_kernel<T, PROBS><<<N, XENT_THREADS, 0, g_cu.stream>>>(stats, probs, logits, rowmax,
                                                                 targets, v0, Vl, nvalid);
  CUDA_LAUNCH_CHECK();
}

template <typename T, bool RECOMPUTE>
static void vp_finish(float *losses, T *probs, const T *src, const double *stats,
                      const float *rowmax, int N, int Vl, int nvalid) {
  if (N <= 0) return;
  xent_finish_kernel<T, RECOMPUTE><<<N, XENT_THREADS, 0, g_cu.stream>>>(losses, probs, src, stats,
                                                                        rowmax, Vl, nvalid);
  CUDA_LAUNCH_CHECK();
}

template <typename T>
static void vp_backward(T *dlogits, const T *probs, const int *targets, int v0, float dloss,
                        int N, int Vl, int nvalid) {
  if (N <= 0) return;
  xent_backward_kernel<T><<<N, XENT_THREADS, 0, g_cu.stream>>>(dlogits, probs, targets, v0, dloss,
                                                               Vl, nvalid);
  CUDA_LAUNCH_CHECK();
}

/* The whole-vocabulary loss: the pieces on one rank (the row statistics in
 * the backend's scratch), in the table's form for T (see the top) */
template <typename T>
static void xent_forward(float *losses, T *probs, const T *logits, const int *targets, int N,
                         int V, int Vp) {
  if (N <= 0) return;
  float *rowmax = (float *)mt_cuda_scratch((size_t)N * (sizeof(float) + 2 * sizeof(double)),
                                           "cross-entropy row statistics");
  double *stats = (double *)(rowmax + ((size_t)N + 1) / 2 * 2);
  vp_max(rowmax, logits, N, Vp, V);
  if constexpr (std::is_same<T, float>::value) {
    vp_exp<T, true>(stats, probs, logits, rowmax, targets, 0, N, Vp, V);
    vp_finish<T, false>(losses, probs, probs, stats, rowmax, N, Vp, V);
  } else {
    vp_exp<T, false>(stats, NULL, logits, rowmax, targets, 0, N, Vp, V);
    vp_finish<T, true>(losses, probs, logits, stats, rowmax, N, Vp, V);
  }
}

/* ------------------------------------------------------------------ */
/* mt_ops' members                                                      */

static void softmax_xent_forward(float *losses, float *probs, const float *logits,
                                 const int *targets, int N, int V, int Vp) {
  xent_forward(losses, probs, logits, targets, N, V, Vp);
}

static void softmax_xent_backward(float *dlogits, const float *probs, const int *targets,
                                  float dloss, int N, int V, int Vp) {
  vp_backward(dlogits, probs, targets, 0, dloss, N, Vp, V);
}

static void xent_vp_max(float *rowmax, const float *logits, int N, int Vl, int nvalid) {
  vp_max(rowmax, logits, N, Vl, nvalid);
}

static void xent_vp_exp(double *stats, float *probs, const float *logits, const float *rowmax,
                        const int *targets, int v0, int N, int Vl, int nvalid) {
  vp_exp<float, true>(stats, probs, logits, rowmax, targets, v0, N, Vl, nvalid);
}

static void xent_vp_finish(float *losses, float *probs, const double *stats, const float *rowmax,
                           int N, int Vl, int nvalid) {
  vp_finish<float, false>(losses, probs, probs, stats, rowmax, N, Vl, nvalid);
}

static void xent_vp_backward(float *dlogits, const float *probs, const int *targets, int v0,
                             float dloss, int N, int Vl, int nvalid) {
  vp_backward(dlogits, probs, targets, v0, dloss, N, Vl, nvalid);
}

void mt_cuda_fill_xent_ops(mt_ops *o) {
  o->softmax_xent_forward = softmax_xent_forward;
  o->softmax_xent_backward = softmax_xent_backward;
  o->xent_vp_max = xent_vp_max;
  o->xent_vp_exp = xent_vp_exp;
  o->xent_vp_finish = xent_vp_finish;
  o->xent_vp_backward = xent_vp_backward;
}

/* ------------------------------------------------------------------ */
/* mt_ops_bf16's members: bf16 logits, probabilities and gradients, fp32
 * losses, row maxima and double statistics                             */

static void softmax_xent_backward_bf16(mt_bf16 *dlogits, const mt_bf16 *probs, const int *targets,
                                       float dloss, int N, int V, int Vp) {
  vp_backward(dlogits, probs, targets, 0, dloss, N, Vp, V);
}

static void xent_vp_exp_bf16(double *stats, const mt_bf16 *logits, const float *rowmax,
                             const int *targets, int v0, int N, int Vl, int nvalid) {
  vp_exp<mt_bf16, false>(stats, NULL, logits, rowmax, targets, v0, N, Vl, nvalid);
}

static void xent_vp_finish_bf16(float *losses, mt_bf16 *probs, const mt_bf16 *logits,
                                const double *stats, const float *rowmax, int N, int Vl,
                                int nvalid) {
  vp_finish<mt_bf16, true>(losses, probs, logits, stats, rowmax, N, Vl, nvalid);
}

static void xent_vp_backward_bf16(mt_bf16 *dlogits, const mt_bf16 *probs, const int *targets,
                                  int v0, float dloss, int N, int Vl, int nvalid) {
  vp_backward(dlogits, probs, targets, v0, dloss, N, Vl, nvalid);
}

/* the nine bf16 members that share kernels with the fp32 table (the
 * attention's three from attention_flash.cu) */
extern "C" void mt_cuda_fill_bf16_attn_xent(mt_ops_bf16 *o) {
  mt_cuda_fill_bf16_attn(o);
  o->softmax_xent_forward = xent_forward<mt_bf16>;
  o->softmax_xent_backward = softmax_xent_backward_bf16;
  o->xent_vp_max = vp_max<mt_bf16>;
  o->xent_vp_exp = xent_vp_exp_bf16;
  o->xent_vp_finish = xent_vp_finish_bf16;
  o->xent_vp_backward = xent_vp_backward_bf16;
}
