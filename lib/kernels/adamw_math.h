/* One element of AdamW, the arithmetic every backend runs (the CPU's
 * loops, the CUDA kernels): with the gradient g already widened and
 * scaled, bc1 = 1 - beta1^step and bc2 = 1 - beta2^step,
 *   m = b1 m + (1 - b1) g        v = b2 v + (1 - b2) g^2
 *   p -= lr * (m / bc1 / (sqrt(v / bc2) + eps) + wd * p)
 * m, v and param[i] updated in place; returns the new p (for the compute
 * copy). Written once so that the backends agree bit for bit. */
#ifndef MT_KERNELS_ADAMW_MATH_H
#define MT_KERNELS_ADAMW_MATH_H

#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define MT_ADAMW_FN __host__ __device__ __forceinline__
#else
#define MT_ADAMW_FN static inline __attribute__((always_inline))
#endif

MT_ADAMW_FN float mt_adamw_elem(float *param, float *m, float *v, size_t i, float g, float lr,
                                float beta1, float beta2, float eps, float wd, float bc1,
                                float bc2) {
  float mi = beta1 * m[i] + (1.0f - beta1) * g;
  float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  float mhat = mi / bc1, vhat = vi / bc2;
  float p = param[i] - lr * (mhat / (sqrtf(vhat) + eps) + wd * param[i]);
  param[i] = p;
  return p;
}

#endif
