/* The CPU backend's op table: plain C loops parallelised with OpenMP,
 * OpenBLAS sgemm for fp32 products, and the bf16 GEMM engine of
 * gemm_bf16.c for bf16 ones. Each op is written once over the storage type
 * in the files of cpu/ (typed.h: one body instantiated for float and for
 * bf16); here each member picks its instantiation by the dtype it is
 * given.
 *
 * Determinism: for a fixed thread count every op returns the same bits on
 * every run. OpenMP loops use schedule(static) and never reduce across
 * threads; a sum over rows (dw, dbias, dwte) is owned by the thread that owns
 * the column, and walks the rows in order. Most ops (everything but the
 * multi-threaded GEMMs of the matmuls) even give the same bits at any thread
 * count. Backward ops ACCUMULATE into their gradients (see kernels.h). */
#include "kernels/cpu/cpu_internal.h"

#include <string.h>

static void host_upload(void *dst, const void *src, size_t bytes) {
  if (bytes) memcpy(dst, src, bytes);
}

static void host_sync(void) {}

/* cpu_<op>: the member of each op over the storage type */
#define MT_CPU_TYPED_(name, params, args)                                                   \
  MT_OPS_DISPATCH_TYPED(cpu_##name, mt_cpu_##name, params, args)
#define MT_CPU_SUMS_(name, params, args)                                                    \
  MT_OPS_DISPATCH_SUMS(cpu_##name, mt_cpu_##name, params, args)
MT_OPS_TYPED(MT_CPU_TYPED_)
MT_OPS_TYPED_SUMS(MT_CPU_SUMS_)

#define MT_CPU_MEMBER_(name, params, args) .name = cpu_##name,
#define MT_CPU_FIXED_MEMBER_(name, optional, params, args) .name = mt_cpu_##name,
static const mt_ops g_ops_cpu = {.name = "cpu",
                                 .loc = MT_LOC_HOST,
                                 .alloc = mt_mem_alloc,
                                 .free = mt_mem_free,
                                 .upload = host_upload,
                                 .download = host_upload,
                                 .sync = host_sync,
                                 MT_OPS_TYPED(MT_CPU_MEMBER_) MT_OPS_TYPED_SUMS(MT_CPU_MEMBER_)
                                     MT_OPS_FIXED(MT_CPU_FIXED_MEMBER_)};

const mt_ops *mt_ops_cpu(void) { return &g_ops_cpu; }
