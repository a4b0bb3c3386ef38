/* kernels: thread control shared by every backend's CPU side.
 * One knob sets both the OpenMP team size (our own loops) and the OpenBLAS
 * pool (cblas_sgemm), so "threads = N" means N cores busy, never N*N. */
#include "kernels/kernels.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

static int g_threads = 0; /* 0: never set, report what the runtime uses */

void mt_kernels_set_threads(int n) {
  if (n <= 0) return;
  g_threads = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int mt_kernels_threads(void) { return g_threads > 0 ? g_threads : omp_get_max_threads(); }

const char *mt_kernels_blas_core(void) { return openblas_get_corename(); }

int mt_kernels_cpu_mask(mt_cpu_mask *m) {
  /* with OpenMP binding on (OMP_PROC_BIND, or OMP_PLACES alone) the runtime
   * has already bound this thread to its first place, so its own mask
   * would say 1 CPU: the places (built from the mask the rank started
   * with) are what its threads may use */
  int places = omp_get_num_places();
  if (omp_get_proc_bind() == omp_proc_bind_false || places < 1) return mt_cpu_mask_self(m);
  memset(m, 0, sizeof *m);
  for (int p = 0; p < places; p++) {
    int n = omp_get_place_num_procs(p);
    if (n < 1) continue;
    int *ids = mt_calloc((size_t)n, sizeof(int));
    omp_get_place_proc_ids(p, ids);
    for (int i = 0; i < n; i++)
      if (ids[i] >= 0 && ids[i] < MT_CPU_MASK_BITS) m->bits[ids[i] / 64] |= 1ull << (ids[i] % 64);
    free(ids);
  }
  return 0;
}
