/* The token and position embeddings on the CPU, forward and backward, over
 * the storage type (bodies in embedding_t.h, instantiated for float and
 * bf16 by typed.h); the weight gradients in fp32. The plain encoder is the
 * vocabulary-parallel one holding every row: the same bits. */
#include "kernels/cpu/cpu_internal.h"

#include <string.h>

#define MT_TYPED_BODY "kernels/cpu/embedding_t.h"
#include "kernels/cpu/typed.h"
