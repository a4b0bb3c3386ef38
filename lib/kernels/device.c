/* Which backend a rank computes on, and which GPU: pure functions of the
 * configuration and of what the process sees, so every rank of a node
 * decides the same way and the tests run them without a GPU. */
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_device_resolve(mt_device_kind want, int cuda_built, int n_visible, const char *no_gpu_why,
                      char *msg, size_t len) {
  const char *why = no_gpu_why && no_gpu_why[0] ? no_gpu_why : "no GPU is visible";
  int kind;
  switch (want) {
  case MT_DEVICE_CPU: kind = MT_DEVICE_CPU; break;
  case MT_DEVICE_CUDA:
    if (!cuda_built) {
      snprintf(msg, len, "train.device = cuda: this meshtrain was built without CUDA (nvcc was "
                         "not found when it was configured); rebuild with the CUDA toolkit, or "
                         "set train.device = cpu");
      return -1;
    }
    if (n_visible < 1) {
      snprintf(msg, len, "train.device = cuda: no GPU is usable: %s (check the allocation's "
                         "GPUs and CUDA_VISIBLE_DEVICES, or set train.device = cpu)", why);
      return -1;
    }
    kind = MT_DEVICE_CUDA;
    break;
  case MT_DEVICE_AUTO: kind = cuda_built && n_visible > 0 ? MT_DEVICE_CUDA : MT_DEVICE_CPU; break;
  case MT_DEVICE_VIRTUAL:
    kind = MT_DEVICE_VIRTUAL; /* (the profile it emulates is checked by the plan) */
    break;
  default:
    snprintf(msg, len, "train.device = %d: unknown", (int)want);
    return -1;
  }
  if (len) msg[0] = '\0';
  return kind;
}

void mt_dtypes_resolve(mt_precision prec, mt_dtype grads, mt_dtype grad_reduce, mt_dtypes *out) {
  /* the same tensors on every device (the virtual device emulates them) */
  mt_dtype store = prec == MT_PRECISION_BF16 ? MT_DT_BF16 : MT_DT_F32;
  *out = (mt_dtypes){.master = MT_DT_F32, .weights = store, .acts = store, .msgs = store,
                     .grads = grads, .grad_reduce = grad_reduce};
}

int mt_device_for_local_rank(int local_rank, int local_size, int n_visible, int *shared) {
  if (shared) *shared = 0;
  if (n_visible < 1 || local_rank < 0) return -1;
  if (shared) *shared = local_size > n_visible;
  return local_rank % n_visible;
}

int mt_device_env_check(char *msg, size_t len) {
  static const struct {
    const char *name;
    const char *choices; /* "a|b", or NULL for a number of MiB */
  } vars[] = {
      {"MT_CUDA_BF16_GEMM", "convert|fast"},
      {"MT_CUDA_SCRATCH_MB", NULL},
      {"MT_CUDA_OP_TIMES", "0|1"},
      {"MT_COMM_HOST_WAIT", "0|1"},
  };
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i].name);
    if (!v || !*v) continue;
    if (vars[i].choices) {
      char set[32];
      snprintf(set, sizeof set, "|%s|", vars[i].choices);
      char key[64];
      snprintf(key, sizeof key, "|%s|", v);
      if (strlen(v) < sizeof key - 2 && strstr(set, key)) continue;
      snprintf(msg, len, "%s = '%s': not one of %s", vars[i].name, v, vars[i].choices);
      return -1;
    }
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end != '\0' || x < 1 || x >= (1L << 20)) {
      snprintf(msg, len, "%s = '%s': a whole number of MiB from 1 to 1048575", vars[i].name, v);
      return -1;
    }
  }
  if (len) msg[0] = '\0';
  return 0;
}
