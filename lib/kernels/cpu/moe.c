/* The token movement of a Mixture-of-Experts layer on the CPU, over the
 * storage type of the rows (bodies in moe_t.h, instantiated for float and
 * bf16 by typed.h): row gathers, the weighted combine of the experts'
 * outputs and its backward. Weights and their gradients fp32; a sum over a
 * token's k choices in fp32 in the order j = 0..k-1, one rounding per
 * stored value. Split by token rows, schedule(static): the same bits at any
 * thread count. (The router: moe_router.c.) */
#include "kernels/cpu/cpu_internal.h"

#include <string.h>

#define MT_TYPED_BODY "kernels/cpu/moe_t.h"
#include "kernels/cpu/typed.h"
