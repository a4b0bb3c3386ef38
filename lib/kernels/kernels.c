/* kernels: thread control shared by every backend's CPU side.
 * One knob sets both the OpenMP team size (our own loops) and the OpenBLAS
 * pool (cblas_sgemm), so "threads = N" means N cores busy, never N*N. */
#include "kernels/kernels.h"

#include <cblas.h>
#include <omp.h>

static int g_threads = 0; /* 0: never set, report what the runtime uses */

void mt_kernels_set_threads(int n) {
  if (n <= 0) return;
  g_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int mt_kernels_threads(void) { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

const char *mt_kernels_blas_core(void) { return openblas_get_corename(); }
