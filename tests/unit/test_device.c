/* test_device: which backend and which GPU a rank gets, without a GPU.
 * - mt_device_resolve: cpu / cuda / auto / virtual against builds with and
 *   without CUDA and 0 or more visible GPUs; each refusal names the key and
 *   the cause.
 * - mt_dtypes_resolve: the dtype of every role from the precision and the
 *   gradients' dtypes.
 * - mt_device_for_local_rank: one GPU per rank by node-local rank; Slurm's
 *   one-visible-GPU-per-task case; more ranks than GPUs share round-robin
 *   and say so; no GPU gives -1.
 * - the CUDA backend's entry points agree with the build: without a GPU
 *   (this machine, CI) the device count is 0 with a reason, and starting
 *   the backend fails with one. */
#include "kernels/kernels.h"

#include <stdio.h>
#include <string.h>

#include "../check.h"

/* resolve and check the kind (or -1) and, on refusal, words of the message */
static void expect(mt_device_kind dev, int built, int n, int want_kind, const char *w1,
                   const char *w2) {
  char msg[512] = "untouched";
  const char *name = mt_device_kind_name(dev);
  int k = mt_device_resolve(dev, built, n, "no CUDA-capable device is detected", msg, sizeof msg);
  MT_CHECK(k == want_kind, "resolve(%s, built %d, %d GPUs) = %d, want %d (%s)", name, built, n,
           k, want_kind, msg);
  if (k >= 0 && want_kind >= 0)
    MT_CHECK(msg[0] == '\0', "resolve(%s): message '%s'", name, msg);
  if (want_kind < 0) {
    MT_CHECK(w1 && strstr(msg, w1), "resolve(%s, built %d, %d GPUs): '%s' lacks '%s'", name,
             built, n, msg, w1);
    MT_CHECK(!w2 || strstr(msg, w2), "resolve(%s, built %d, %d GPUs): '%s' lacks '%s'", name,
             built, n, msg, w2);
  }
}

int main(void) {
  /* cpu: always */
  expect(MT_DEVICE_CPU, 0, 0, MT_DEVICE_CPU, NULL, NULL);
  expect(MT_DEVICE_CPU, 1, 4, MT_DEVICE_CPU, NULL, NULL);
  /* cuda: needs the build and a GPU */
  expect(MT_DEVICE_CUDA, 1, 1, MT_DEVICE_CUDA, NULL, NULL);
  expect(MT_DEVICE_CUDA, 1, 8, MT_DEVICE_CUDA, NULL, NULL);
  expect(MT_DEVICE_CUDA, 0, 0, -1, "train.device = cuda", "built without CUDA");
  expect(MT_DEVICE_CUDA, 1, 0, -1, "train.device = cuda", "no CUDA-capable device");
  /* auto: cuda when it can, else the CPU */
  expect(MT_DEVICE_AUTO, 1, 2, MT_DEVICE_CUDA, NULL, NULL);
  expect(MT_DEVICE_AUTO, 1, 0, MT_DEVICE_CPU, NULL, NULL);
  expect(MT_DEVICE_AUTO, 0, 0, MT_DEVICE_CPU, NULL, NULL);
  /* virtual: whatever this process has */
  expect(MT_DEVICE_VIRTUAL, 0, 0, MT_DEVICE_VIRTUAL, NULL, NULL);
  /* (train.precision = fp16 and the gradients' dtypes against the precision
   * are mt_config_check's: test_config) */

  /* the dtype of each role, decided once */
  {
    mt_dtypes d;
    mt_dtypes_resolve(MT_PRECISION_FP32, MT_DT_F32, MT_DT_F32, &d);
    MT_CHECK(d.master == MT_DT_F32 && d.weights == MT_DT_F32 && d.acts == MT_DT_F32 &&
                 d.msgs == MT_DT_F32 && d.grads == MT_DT_F32 && d.grad_reduce == MT_DT_F32,
             "fp32: every role fp32");
    mt_dtypes_resolve(MT_PRECISION_BF16, MT_DT_F32, MT_DT_F32, &d);
    MT_CHECK(d.master == MT_DT_F32 && d.weights == MT_DT_BF16 && d.acts == MT_DT_BF16 &&
                 d.msgs == MT_DT_BF16 && d.grads == MT_DT_F32 && d.grad_reduce == MT_DT_F32,
             "bf16: weights' copy, activations and messages bf16");
    /* bf16 gradients: under bf16 precision, reduced in bf16 */
    mt_dtypes_resolve(MT_PRECISION_BF16, MT_DT_BF16, MT_DT_BF16, &d);
    MT_CHECK(d.grads == MT_DT_BF16 && d.grad_reduce == MT_DT_BF16 && d.master == MT_DT_F32 &&
                 d.weights == MT_DT_BF16,
             "grad_dtype bf16");
    mt_dtypes_resolve(MT_PRECISION_BF16, MT_DT_F32, MT_DT_BF16, &d);
    MT_CHECK(d.grad_reduce == MT_DT_BF16 && d.grads == MT_DT_F32, "bf16 reduction under bf16");
  }

  /* GPU per node-local rank */
  int shared = -1;
  for (int r = 0; r < 4; r++) {
    int gpu = mt_device_for_local_rank(r, 4, 4, &shared);
    MT_CHECK(gpu == r && shared == 0, "4 ranks, 4 GPUs: rank %d -> GPU %d (shared %d)", r, gpu,
          shared);
  }
  /* Slurm --gpus-per-task=1: each task sees one GPU, index 0 */
  for (int r = 0; r < 4; r++) {
    int gpu = mt_device_for_local_rank(r, 4, 1, &shared);
    MT_CHECK(gpu == 0 && shared == 1, "4 ranks, 1 visible GPU: rank %d -> GPU %d (shared %d)", r, gpu,
          shared);
  }
  /* fewer ranks than GPUs: no sharing */
  MT_CHECK(mt_device_for_local_rank(1, 2, 4, &shared) == 1 && shared == 0, "2 ranks, 4 GPUs");
  /* more ranks than GPUs: round-robin, shared */
  int use[2] = {0, 0};
  for (int r = 0; r < 6; r++) {
    int gpu = mt_device_for_local_rank(r, 6, 2, &shared);
    MT_CHECK(gpu >= 0 && gpu < 2 && shared == 1, "6 ranks, 2 GPUs: rank %d -> %d (shared %d)", r,
          gpu, shared);
    if (gpu >= 0 && gpu < 2) use[gpu]++;
  }
  MT_CHECK(use[0] == 3 && use[1] == 3, "6 ranks on 2 GPUs: %d and %d", use[0], use[1]);
  MT_CHECK(mt_device_for_local_rank(0, 1, 0, &shared) == -1 && shared == 0, "no GPU: -1");

  /* the backend's entry points on this machine */
  char why[256] = "";
  int n = mt_cuda_device_count(why, sizeof why);
  if (n == 0) {
    MT_CHECK(why[0] != '\0', "no GPU but no reason given");
    mt_err e = {0};
    MT_CHECK(mt_cuda_init(0, MT_PRECISION_FP32, &e) != 0 && e.failed && e.msg[0],
          "mt_cuda_init without a GPU did not fail with a message");
    MT_CHECK(mt_ops_cuda() == NULL, "an op table without a started backend");
    mt_cuda_info info;
    MT_CHECK(mt_cuda_get_info(&info) != 0, "device info without a started backend");
    printf("no GPU here (%s); CUDA backend built: %d\n", why, mt_cuda_built());
  } else {
    printf("%d GPU(s) visible; the gpu tests exercise them\n", n);
  }
  if (!mt_cuda_built()) MT_CHECK(n == 0, "a build without CUDA reports %d GPUs", n);
  /* host memory from the backend works without it (plain memory then) */
  float *h = mt_cuda_host_alloc(1000 * sizeof(float));
  MT_CHECK(h != NULL, "mt_cuda_host_alloc");
  for (int i = 0; i < 1000; i++) h[i] = (float)i;
  MT_CHECK(h[999] == 999.0f, "host memory");
  mt_cuda_host_free(h);
  return mt_check_summary("test_device");
}
