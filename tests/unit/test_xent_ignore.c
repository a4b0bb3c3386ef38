/* test_xent_ignore: a target of MT_TARGET_IGNORE (-1, the padding of
 * variable-length batches) in the CPU backend's cross-entropy ops, fp32 and
 * bf16 storage: loss 0 and dlogits 0 on the ignored rows, the compact
 * batch's bits on the others, on the whole ops and the vocabulary-parallel
 * pieces on one and two simulated ranks (tests/xent_ignore_check.h; the
 * CUDA backend's twin is tests/gpu/gpu_xent_ignore.c). At 2 threads, the
 * rows split over both. */
#include "../xent_ignore_check.h"

int main(void) {
  g_rng = 0x2B7E151628AED2A6ull; /* this test's inputs (none drawn from g_rng yet) */
  mt_kernels_set_threads(2);
  const mt_ops *cpu = mt_ops_cpu();
  xent_ignore_check(cpu, MT_DT_F32);
  xent_ignore_check(cpu, MT_DT_BF16);
  return mt_check_summary("test_xent_ignore");
}
