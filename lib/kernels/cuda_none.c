/* The CUDA backend's entry points in a build without CUDA: they say so. */
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>

static const char *NOT_BUILT = "this meshtrain was built without CUDA (nvcc was not found when "
                               "it was configured)";

int mt_cuda_built(void) { return 0; }

int mt_cuda_device_count(char *why, size_t why_len) {
  if (why && why_len) snprintf(why, why_len, "%s", NOT_BUILT);
  return 0;
}

int mt_cuda_init(int device, mt_precision prec, mt_err *e) {
  (void)device, (void)prec;
  mt_err_set(e, "%s", NOT_BUILT);
  return -1;
}

void mt_cuda_shutdown(void) {}
const mt_ops *mt_ops_cuda(void) { return NULL; }
int mt_cuda_get_info(mt_cuda_info *info) {
  (void)info;
  return -1;
}
void *mt_cuda_stream(void) { return NULL; }
int mt_cuda_op_times(mt_cuda_op_time *out, int max) {
  (void)out, (void)max;
  return 0;
}
void *mt_cuda_host_alloc(size_t bytes) { return mt_malloc(bytes ? bytes : 1); }
void mt_cuda_host_free(void *p) { free(p); }
int mt_cuda_gemm_strided(const mt_gemm_shape *s, const void *A, const void *B, void *C) {
  (void)s, (void)A, (void)B, (void)C;
  return -1;
}
