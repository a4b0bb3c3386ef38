/* The CUDA backend's AdamW (kernels.h's adamw_update and adamw_ranges):
 * the CPU's arithmetic per element (adamw_math.h) on the fp32 master
 * weights, the compute copy written in the same pass, templated on its
 * storage type S as the other ops (ops.cu). */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/adamw_math.h"

#include <math.h>

/* AdamW (the CPU's arithmetic, per element) on the fp32 master; with
 * param_copy (NULL: none) also the compute copy, param_copy = the new
 * param stored as S (bf16: rounded), in the same pass */

template <typename S>
__global__ void adamw_kernel(float *param, S *param_copy, const float *grad, float *m, float *v,
                             size_t n, float lr, float beta1, float beta2, float eps, float wd,
                             float bc1, float bc2) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float p = mt_adamw_elem(param, m, v, i, grad[i], lr, beta1, beta2, eps, wd, bc1, bc2);
    if (param_copy) param_copy[i] = mt_st<S>(p);
  }
}

template <typename S>
void mt_cuda_adamw_update(float *param, void *param_copy, const float *grad, float *m, float *v,
                          size_t n, float lr, float beta1, float beta2, float eps,
                          float weight_decay, int step) {
  if (!n) return;
  float bc1 = (float)(1.0 - pow((double)beta1, step));
  float bc2 = (float)(1.0 - pow((double)beta2, step));
  adamw_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>(param, (S *)param_copy, grad, m, v,
                                                              n, lr, beta1, beta2, eps,
                                                              weight_decay, bc1, bc2);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(adamw_update)

/* adamw_ranges: adamw_kernel's arithmetic on the gradient of type G
 * (widened) times gs, over one range per launch (a launch costs no
 * barrier of a thread team; the CPU's one pass is for its fork-joins) */
template <typename S, typename G>
__global__ void adamw_range_kernel(float *param, S *param_copy, const G *grad, float gs, float *m,
                                   float *v, size_t begin, size_t end, float lr, float beta1,
                                   float beta2, float eps, float wd, float bc1, float bc2) {
  for (size_t i = begin + blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < end;
       i += (size_t)gridDim.x * blockDim.x) {
    float g = mt_ld(grad[i]) * gs;
    float p = mt_adamw_elem(param, m, v, i, g, lr, beta1, beta2, eps, wd, bc1, bc2);
    if (param_copy) param_copy[i] = mt_st<S>(p);
  }
}

template <typename S, typename G>
static void adamw_ranges_of(float *param, void *param_copy, const void *grad, float gs, float *m,
                            float *v, const mt_adamw_range *ranges, int n_ranges, float lr,
                            float beta1, float beta2, float eps, float bc1, float bc2) {
  for (int r = 0; r < n_ranges; r++) {
    size_t n = ranges[r].end - ranges[r].begin;
    if (!n) continue;
    adamw_range_kernel<S, G><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>(
        param, (S *)param_copy, (const G *)grad, gs, m, v, ranges[r].begin, ranges[r].end, lr,
        beta1, beta2, eps, ranges[r].weight_decay, bc1, bc2);
    CUDA_LAUNCH_CHECK();
  }
}

template <typename S>
void mt_cuda_adamw_ranges(float *param, void *param_copy, const void *grad, mt_dtype grad_t,
                          float grad_scale, float *m, float *v, const mt_adamw_range *ranges,
                          int n_ranges, float lr, float beta1, float beta2, float eps, int step) {
  float bc1 = (float)(1.0 - pow((double)beta1, step));
  float bc2 = (float)(1.0 - pow((double)beta2, step));
  if (grad_t == MT_DT_BF16)
    adamw_ranges_of<S, mt_bf16>(param, param_copy, grad, grad_scale, m, v, ranges, n_ranges, lr,
                                beta1, beta2, eps, bc1, bc2);
  else
    adamw_ranges_of<S, float>(param, param_copy, grad, grad_scale, m, v, ranges, n_ranges, lr,
                              beta1, beta2, eps, bc1, bc2);
}
MT_CUDA_INSTANTIATE(adamw_ranges)
