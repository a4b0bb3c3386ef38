/* Which backend a rank computes on, and which GPU: pure functions of the
 * configuration and of what the process sees, so every rank of a node
 * decides the same way and the tests run them without a GPU. */
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_device_resolve(const char *want, const char *prec_name, int cuda_built, int n_visible,
                      const char *no_gpu_why, mt_precision *prec, char *msg, size_t len) {
  const char *why = no_gpu_why && no_gpu_why[0] ? no_gpu_why : "no GPU is visible";
  int bf16 = strcmp(prec_name, "bf16") == 0;
  if (strcmp(prec_name, "fp16") == 0) {
    snprintf(msg, len, "train.precision = fp16: fp16 needs dynamic loss scaling, which meshtrain "
                       "does not implement; use train.precision = bf16 (fp32's exponent range, "
                       "no loss scaling)");
    return -1;
  }
  if (!bf16 && strcmp(prec_name, "fp32") != 0) {
    snprintf(msg, len, "train.precision = '%s': unknown (fp32|bf16)", prec_name);
    return -1;
  }
  int kind;
  if (strcmp(want, "cpu") == 0) {
    kind = MT_DEVICE_CPU;
  } else if (strcmp(want, "cuda") == 0) {
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
  } else if (strcmp(want, "auto") == 0) {
    kind = cuda_built && n_visible > 0 ? MT_DEVICE_CUDA : MT_DEVICE_CPU;
  } else if (strcmp(want, "virtual") == 0) {
    kind = MT_DEVICE_VIRTUAL; /* (the profile it emulates is checked by the plan) */
  } else {
    snprintf(msg, len, "train.device = '%s': unknown (cpu|cuda|auto|virtual)", want);
    return -1;
  }
  *prec = bf16 ? MT_PRECISION_BF16 : MT_PRECISION_FP32;
  if (len) msg[0] = '\0';
  return kind;
}

static int parse_dtype(const char *key, const char *v, mt_dtype *t, char *msg, size_t len) {
  if (strcmp(v, "fp32") == 0 || strcmp(v, "bf16") == 0) {
    *t = strcmp(v, "bf16") == 0 ? MT_DT_BF16 : MT_DT_F32;
    return 0;
  }
  snprintf(msg, len, "%s = '%s': unknown (fp32|bf16)", key, v);
  return -1;
}

int mt_dtypes_resolve(mt_precision prec, const char *grad_dtype, const char *grad_reduce_dtype,
                      mt_dtypes *out, char *msg, size_t len) {
  mt_dtype g, r;
  if (parse_dtype("train.grad_dtype", grad_dtype, &g, msg, len) != 0 ||
      parse_dtype("parallel.grad_reduce_dtype", grad_reduce_dtype, &r, msg, len) != 0)
    return -1;
  /* the same tensors on every device (the virtual device emulates them) */
  mt_dtype store = prec == MT_PRECISION_BF16 ? MT_DT_BF16 : MT_DT_F32;
  /* bf16 gradients are the bf16 ops' too, and are reduced where they are */
  if (g == MT_DT_BF16 && store != MT_DT_BF16) {
    snprintf(msg, len, "train.grad_dtype = bf16 needs train.precision = bf16; set it to fp32");
    return -1;
  }
  if (g == MT_DT_BF16 && r != MT_DT_BF16) {
    snprintf(msg, len, "train.grad_dtype = bf16 with parallel.grad_reduce_dtype = fp32: bf16 "
                       "gradients are reduced in bf16 (set parallel.grad_reduce_dtype = bf16)");
    return -1;
  }
  /* the bf16 reduction narrows and widens with the bf16 ops of the mixed
   * precision */
  if (r == MT_DT_BF16 && store != MT_DT_BF16) {
    snprintf(msg, len, "parallel.grad_reduce_dtype = bf16 needs train.precision = bf16; set it "
                       "to fp32");
    return -1;
  }
  *out = (mt_dtypes){.master = MT_DT_F32, .weights = store, .acts = store, .msgs = store,
                     .grads = g, .grad_reduce = r};
  if (len) msg[0] = '\0';
  return 0;
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
