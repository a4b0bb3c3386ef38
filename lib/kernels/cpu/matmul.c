/* Linear layers and the experts' grouped GEMM on the CPU, over the storage
 * type (bodies in matmul_t.h, instantiated for float and bf16 by typed.h).
 * The products go to the GEMM engine of the type: OpenBLAS sgemm for fp32;
 * for bf16 gemm_bf16.c (oneDNN or converted sgemm, fp32 accumulation, one
 * rounding per stored value). Weight and bias gradients are fp32.
 *
 * Grouped GEMM threading: with at least as many non-empty groups as
 * threads, the groups are shared out over OpenMP threads (dynamic: token
 * counts differ) and each product runs on one BLAS thread; a group's result
 * then depends on its rows alone, not on which thread ran it, so a run is
 * bitwise the same twice and at any thread count. With fewer groups than
 * threads (one big expert, a tiny layer) they run one after the other with
 * threaded products, as matmul_forward does. */
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <string.h>

static int nonempty_groups(const int *off, int G) {
  int n = 0;
  for (int g = 0; g < G; g++) n += off[g + 1] > off[g];
  return n;
}

/* whether a grouped GEMM shares its groups out over the threads */
static int groups_on_threads(const int *off, int G) {
  int threads = mt_kernels_threads();
  return threads > 1 && nonempty_groups(off, G) >= threads;
}

#define MT_TYPED_BODY "kernels/cpu/matmul_t.h"
#include "kernels/cpu/typed.h"
