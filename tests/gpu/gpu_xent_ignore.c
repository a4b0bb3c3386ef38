/* gpu_xent_ignore: a target of MT_TARGET_IGNORE (-1) in the CUDA backend's
 * cross-entropy ops (mt_ops_cuda), fp32 and bf16 storage: the checks of
 * tests/xent_ignore_check.h (loss 0 and dlogits 0 on the ignored rows, the
 * compact batch's bits on the others; whole, and the vocabulary-parallel
 * pieces on one and two simulated ranks), the CPU's twin being
 * tests/unit/test_xent_ignore.c.
 *
 *   gpu_xent_ignore fp32|bf16   (the backend's precision; these ops are the
 *                                same under both)
 * No GPU: prints "SKIP: <reason>" and exits 77. */
#include "gpu_compare.h"
#include "../xent_ignore_check.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mt_log_init(0);
  g_rng = 0x2B7E151628AED2A6ull; /* this test's inputs (none drawn from g_rng yet) */
  cpu = mt_ops_cpu();
  int rc = gpu_compare_open("gpu_xent_ignore", argc > 1 && !strcmp(argv[1], "bf16"));
  if (rc != 0) {
    MPI_Finalize();
    return rc;
  }
  xent_ignore_check(gpu, MT_DT_F32);
  xent_ignore_check(gpu, MT_DT_BF16);
  mt_cuda_shutdown();
  MPI_Finalize();
  return mt_check_summary("gpu_xent_ignore");
}
