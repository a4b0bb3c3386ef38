/* Rotary position embedding on the CPU, in place, over the storage type
 * (bodies in rope_t.h, instantiated for float and bf16 by typed.h): each
 * pair (d, d + hs/2) of a head turned by its row's angle, read from the
 * model's cosine | sine table. Rows are independent: the same bits at any
 * thread count. */
#include "kernels/cpu/cpu_internal.h"

#define MT_TYPED_BODY "kernels/cpu/rope_t.h"
#include "kernels/cpu/typed.h"
