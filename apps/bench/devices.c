/* meshbench info | devices: what this process computes with (the BLAS
 * kernels and threads; the GPUs it sees, or why none). */
#include <stdio.h>

#include "bench/bench.h"
#include "comm/comm.h"
#include "core/core.h"
#include "kernels/kernels.h"

int mt_bench_info(int argc, char **argv) {
  (void)argc;
  (void)argv;
  printf("blas_core %s\nthreads %d\n", mt_kernels_blas_core(), mt_kernels_threads());
  return MT_EXIT_OK;
}

/* meshbench devices: the GPUs this process sees, or why none (the GPU tests
 * ask it before they run; exit 0 either way) */
int mt_bench_devices(int argc, char **argv) {
  (void)argc;
  (void)argv;
  char why[256] = "";
  int n = mt_cuda_device_count(why, sizeof why);
  printf("cuda_built %d\nnccl_built %d\ngpus %d\n", mt_cuda_built(), mt_comm_nccl_built(), n);
  if (n == 0) printf("reason %s\n", why);
  for (int i = 0; i < n; i++) {
    mt_err e = {0};
    mt_cuda_info info;
    if (mt_cuda_init(i, MT_PRECISION_FP32, &e) == 0 && mt_cuda_get_info(&info) == 0)
      printf("gpu %d %s (compute capability %d.%d, %d SMs, %.1f GiB, %s)\n", i, info.name,
             info.sm_major, info.sm_minor, info.sm_count, info.total_bytes / 1073741824.0,
             info.uuid);
    else
      printf("gpu %d unusable: %s\n", i, e.msg);
    mt_cuda_shutdown();
  }
  return MT_EXIT_OK;
}
