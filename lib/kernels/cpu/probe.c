/* Short matmul runs that tell what this rank's threads reach: sgemm, and
 * the bf16 matmul on the path the process's bf16 ops take (the peak of a
 * bf16 run: on a CPU with AMX or a full-rate vdpbf16ps it passes sgemm's,
 * and an MFU over sgemm's peak would read above 100%). */
#include <cblas.h>
#include <stdlib.h>
#include <time.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/kernels.h"

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* c = a b^T, n x n x n, of fp32 (bf16 = 0) or bf16 operands */
static void product(int bf16, int n, void *a, void *b, void *c) {
  if (bf16)
    mt_cpu_gemm_bf16(MT_GEMM_NT, n, n, n, a, b, NULL, c, NULL, 0, 0);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
}

/* the best GFLOP/s of n x n x n products over at least min_seconds */
static double best_gflops(int bf16, int n, double min_seconds) {
  size_t nn = (size_t)n * (size_t)n, es = bf16 ? sizeof(mt_bf16) : sizeof(float);
  void *a = malloc(nn * es), *b = malloc(nn * es), *c = malloc(nn * es);
  if (!a || !b || !c) {
    free(a); free(b); free(c);
    return 0.0;
  }
  for (size_t i = 0; i < nn; i++) {
    float x = (float)(i % 13) * 0.01f, y = (float)(i % 7) * 0.02f;
    if (bf16) {
      ((mt_bf16 *)a)[i] = mt_bf16_from_f32(x);
      ((mt_bf16 *)b)[i] = mt_bf16_from_f32(y);
    } else {
      ((float *)a)[i] = x;
      ((float *)b)[i] = y;
    }
  }
  /* warm-up, then as many runs as fit in min_seconds; keep the best */
  product(bf16, n, a, b, c);
  double best = 0.0, start = seconds();
  do {
    double t0 = seconds();
    product(bf16, n, a, b, c);
    double dt = seconds() - t0;
    double g = 2.0 * n * (double)n * n / dt * 1e-9;
    if (g > best) best = g;
  } while (seconds() - start < min_seconds);
  free(a); free(b); free(c);
  return best;
}

double mt_cpu_sgemm_gflops(int n, double min_seconds) { return best_gflops(0, n, min_seconds); }

double mt_cpu_bf16_gemm_gflops(int n, double min_seconds) {
  return best_gflops(1, n, min_seconds);
}
