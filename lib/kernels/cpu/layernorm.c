/* The norms on the CPU, LayerNorm and RMSNorm, forward and backward, over
 * the storage type (bodies in layernorm_t.h, instantiated for float and
 * bf16 by typed.h): statistics, weight and bias gradients in fp32. The row sums are `omp
 * simd` reductions (vectorised; a fixed order, so the same bits on every
 * run); dinp is done per row, dw and db per column block, rows in order:
 * the same bits at any thread count. */
#include "kernels/cpu/cpu_internal.h"

#include <math.h>

#define MT_TYPED_BODY "kernels/cpu/layernorm_t.h"
#include "kernels/cpu/typed.h"
