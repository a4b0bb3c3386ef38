/* The CPU's elementwise ops over the storage type (kernels.h: zero, copy,
 * axpy, scale, the strided row copies, grouped-query attention's key/value
 * spread, the residual sum, the fp64 sums) and AdamW: bodies in
 * elementwise_t.h, written once, instantiated for float and bf16
 * (typed.h). Every loop is elementwise or a sum in a fixed
 * order: the same bits at any thread count. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/adamw_math.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* sumsq: the range is cut into a number of chunks that depends on n only
 * (never on the thread count); each chunk is summed in order, then the
 * chunk sums are added in order: the same bits everywhere */
#define MT_SUMSQ_MAX_CHUNKS 256
#define MT_SUMSQ_MIN_CHUNK 16384
/* chunks one task sums side by side (sumsq's comment) */
#define MT_SUMSQ_LANES 8

/* kv_spread_backward's channels summed at a time (fp32, on the stack) */
#define MT_KV_CHUNK 64

#define MT_TYPED_BODY "kernels/cpu/elementwise_t.h"
#include "kernels/cpu/typed.h"
