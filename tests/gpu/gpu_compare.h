/* What gpu_ops and gpu_moe_ops share: the two op tables, a seeded
 * generator, device copies, and the comparison that reports one line per
 * check (max |gpu - cpu| / max |cpu|; NaN fails) and counts failures.
 * Include once, from the program's one source file. */
#ifndef MT_TESTS_GPU_COMPARE_H
#define MT_TESTS_GPU_COMPARE_H

#include "core/core.h"
#include "kernels/kernels.h"
#include "../check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mt_ops *cpu, *gpu;
static uint64_t g_rng; /* the program seeds it */

static float urand(float lo, float hi) {
  g_rng = mt_splitmix64(g_rng);
  return lo + (hi - lo) * (float)((g_rng >> 40) * (1.0 / 16777216.0));
}
static float *rnd(size_t n, float lo, float hi) {
  float *x = malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) x[i] = urand(lo, hi);
  return x;
}

/* device copies */
static float *dev(const float *h, size_t n) {
  float *d = gpu->alloc(MT_MEM_OTHER, (n ? n : 1) * sizeof(float));
  gpu->upload(d, h, n * sizeof(float));
  return d;
}
static int *devi(const int *h, size_t n) {
  int *d = gpu->alloc(MT_MEM_OTHER, (n ? n : 1) * sizeof(int));
  gpu->upload(d, h, n * sizeof(int));
  return d;
}
static void dfree(void *d, size_t bytes) { gpu->free(MT_MEM_OTHER, d, bytes ? bytes : 1); }

/* max |gpu - ref| / max |ref| with the GPU tensor downloaded (NaN stays) */
static double err_of(const float *ref, const float *d, size_t n) {
  float *h = malloc((n ? n : 1) * sizeof(float));
  gpu->download(h, d, n * sizeof(float));
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < n; i++) {
    diff = mt_worst(diff, fabs((double)h[i] - (double)ref[i]));
    if (fabs(ref[i]) > scale) scale = fabs(ref[i]);
  }
  free(h);
  return diff / (scale > 0 ? scale : 1.0);
}
#define CMP(what, ref, d, n, tol) mt_check_err(what, err_of(ref, d, n), tol)

/* The CUDA backend for program `prog` at the precision argv[1] names
 * (fp32 | bf16): 0, gpu set; 77 (print "SKIP: ...") where no GPU is
 * visible; 1 when it cannot start. */
static int gpu_compare_open(const char *prog, int bf16) {
  char why[256];
  if (mt_cuda_device_count(why, sizeof why) < 1) {
    printf("SKIP: no GPU visible: %s\n", why);
    return 77;
  }
  mt_err e = {0};
  if (mt_cuda_init(0, bf16 ? MT_PRECISION_BF16 : MT_PRECISION_FP32, &e) != 0) {
    fprintf(stderr, "FAIL: %s\n", e.msg);
    return 1;
  }
  gpu = mt_ops_cuda();
  mt_cuda_info info;
  mt_cuda_get_info(&info);
  printf("%s: %s, precision %s, matmuls %s, scratch %.1f MiB\n", prog, info.name,
         bf16 ? "bf16" : "fp32", info.gemm_path, info.workspace_bytes / 1048576.0);
  return 0;
}

#endif
