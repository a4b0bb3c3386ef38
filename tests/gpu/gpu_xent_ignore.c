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
  /* g_rng's seed: this test's inputs (none drawn from g_rng yet) */
  int bf16, rc = gpu_compare_start(&argc, &argv, "gpu_xent_ignore", 0x2B7E151628AED2A6ull, &bf16);
  if (rc != 0) return rc;
  xent_ignore_check(gpu, MT_DT_F32);
  xent_ignore_check(gpu, MT_DT_BF16);
  return gpu_compare_finish("gpu_xent_ignore");
}
