/* A short sgemm run that tells what the BLAS reaches on this rank's threads. */
#include <cblas.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/kernels.h"

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double mt_cpu_sgemm_gflops(int n, double min_seconds) {
  size_t nn = (size_t)n * (size_t)n;
  float *a = malloc(nn * sizeof(float)), *b = malloc(nn * sizeof(float)),
        *c = malloc(nn * sizeof(float));
  if (!a || !b || !c) {
    free(a); free(b); free(c);
    return 0.0;
  }
  for (size_t i = 0; i < nn; i++) {
    a[i] = (float)(i % 13) * 0.01f;
    b[i] = (float)(i % 7) * 0.02f;
  }
  /* warm-up, then as many runs as fit in min_seconds; keep the best */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
  double best = 0.0, start = seconds();
  do {
    double t0 = seconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    double dt = seconds() - t0;
    double g = 2.0 * n * (double)n * n / dt * 1e-9;
    if (g > best) best = g;
  } while (seconds() - start < min_seconds);
  free(a); free(b); free(c);
  return best;
}
