/* cuBLASLt, opened when the CUDA backend starts (see cuda_common.cuh):
 * first by its soname through the usual search (LD_LIBRARY_PATH, the
 * cluster's CUDA module), then at the path it had at build time; a build
 * that defines MT_CUBLASLT_SONAME opens that one only (the emulated build
 * of tests/gpu/emu: its cuBLASLt reference, never NVIDIA's library). */
#include "kernels/cuda/cuda_common.cuh"

#include <dlfcn.h>
#include <stdio.h>

mt_cublaslt_api g_lt_api;

#define MT_STR2(x) #x
#define MT_STR(x) MT_STR2(x)

int mt_cublaslt_load(mt_err *e) {
  static void *lib;
  if (lib) return 0;
#ifdef MT_CUBLASLT_SONAME /* a build that names its own (the emulated build: its reference) */
  const char *names[] = {MT_CUBLASLT_SONAME};
#else
  const char *names[] = {"libcublasLt.so." MT_STR(CUBLAS_VER_MAJOR),
#ifdef MT_CUBLASLT_PATH
                         MT_CUBLASLT_PATH,
#endif
                         "libcublasLt.so"};
#endif
  char tried[1024] = "";
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !lib; i++) {
    lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      size_t used = strlen(tried);
      snprintf(tried + used, sizeof tried - used, "%s%s", used ? "; " : "", dlerror());
    }
  }
  if (!lib) {
    mt_err_set(e, "cannot open cuBLASLt (%s)", tried);
    return -1;
  }
  struct {
    void **slot;
    const char *name;
  } syms[] = {
      {(void **)&g_lt_api.Create, "cublasLtCreate"},
      {(void **)&g_lt_api.Destroy, "cublasLtDestroy"},
      {(void **)&g_lt_api.GetStatusString, "cublasLtGetStatusString"},
      {(void **)&g_lt_api.MatmulDescCreate, "cublasLtMatmulDescCreate"},
      {(void **)&g_lt_api.MatmulDescDestroy, "cublasLtMatmulDescDestroy"},
      {(void **)&g_lt_api.MatmulDescSetAttribute, "cublasLtMatmulDescSetAttribute"},
      {(void **)&g_lt_api.MatrixLayoutCreate, "cublasLtMatrixLayoutCreate"},
      {(void **)&g_lt_api.MatrixLayoutDestroy, "cublasLtMatrixLayoutDestroy"},
      {(void **)&g_lt_api.MatrixLayoutSetAttribute, "cublasLtMatrixLayoutSetAttribute"},
      {(void **)&g_lt_api.MatmulPreferenceCreate, "cublasLtMatmulPreferenceCreate"},
      {(void **)&g_lt_api.MatmulPreferenceDestroy, "cublasLtMatmulPreferenceDestroy"},
      {(void **)&g_lt_api.MatmulPreferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute"},
      {(void **)&g_lt_api.MatmulAlgoGetHeuristic, "cublasLtMatmulAlgoGetHeuristic"},
      {(void **)&g_lt_api.Matmul, "cublasLtMatmul"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(lib, syms[i].name);
    if (!*syms[i].slot) {
      mt_err_set(e, "cuBLASLt has no %s (a version older than this build's headers?)",
                 syms[i].name);
      dlclose(lib);
      lib = NULL;
      return -1;
    }
  }
  return 0;
}
