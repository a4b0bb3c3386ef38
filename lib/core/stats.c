/* Small statistics shared by the step loop (loss spikes), the watchdog
 * (the median step) and the benchmarks (the median repetition). */
#include "core/core.h"

#include <stdlib.h>

static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double mt_median(double *v, int n) {
  if (n <= 0) return 0.0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
