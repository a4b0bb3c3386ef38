/* Shared by the CUDA backend's files (not public): checked calls, the
 * backend's state, launch helpers, the op table's per-type bodies and the
 * other entry points of each file.
 *
 * One op table (kernels.h): every compute op takes the storage type t of
 * its `void *` operands, fp32 (float) or bf16 (mt_bf16, the bits of a
 * __nv_bfloat16). Each op is written once, as a host function template
 * over the storage type S, mt_cuda_<op><S>, with the table's parameters
 * after t (below, declared from kernels.h's lists): it casts its `void *`
 * operands to S once and launches kernels templated on S, which do their
 * math in fp32 (mt_ld widens exactly, mt_st<S> rounds to nearest even;
 * both the identity on float, so an fp32 kernel computes what the same
 * expression written for float does). The file that defines a body
 * instantiates it for both types (MT_CUDA_INSTANTIATE, one line); the
 * table's member, which runs the instantiation of type t, and the per-op
 * timers are generated from the lists in backend.cu.
 *
 * Precision (train.precision) picks the matmuls' path for fp32 operands:
 *   fp32  cuBLASLt with CUBLAS_COMPUTE_32F (no TF32), so a GPU run follows
 *         the CPU one within fp32 rounding.
 *   bf16  fp32 operands are rounded to bf16 on the fly, by a conversion pass
 *         into the backend's scratch ("bf16", the default) or inside
 *         cuBLASLt (CUBLAS_COMPUTE_32F_FAST_16BF, "bf16-fast";
 *         MT_CUDA_BF16_GEMM=fast), and the products accumulate and write
 *         fp32; the reference T x T attention's two products likewise.
 *   bf16 operands (t = MT_DT_BF16) go to cuBLASLt as they are, at either
 *   precision (matmul.cu); the block attention (attention_flash.cu) runs on
 *   the CUDA cores in fp32 for either type.
 * Determinism: no atomics. Every reduction (sums over rows, the scalars)
 * has a shape fixed by the sizes alone, so a run gives the same bits each
 * time on the same GPU. */
#ifndef MT_KERNELS_CUDA_COMMON_CUH
#define MT_KERNELS_CUDA_COMMON_CUH

#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stddef.h>

extern "C" {
#include "core/core.h"
#include "core/flight.h"
#include "kernels/kernels.h"
}

/* cuBLASLt is opened at mt_cuda_init (cublaslt.cu), not linked: loading it
 * costs every process ~0.15 s and ~200 MB of memory, CPU runs included.
 * These names then go through the pointers it fills. */
typedef struct {
  cublasStatus_t (*Create)(cublasLtHandle_t *);
  cublasStatus_t (*Destroy)(cublasLtHandle_t);
  const char *(*GetStatusString)(cublasStatus_t);
  cublasStatus_t (*MatmulDescCreate)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
  cublasStatus_t (*MatmulDescDestroy)(cublasLtMatmulDesc_t);
  cublasStatus_t (*MatmulDescSetAttribute)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
                                           const void *, size_t);
  cublasStatus_t (*MatrixLayoutCreate)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t,
                                       int64_t);
  cublasStatus_t (*MatrixLayoutDestroy)(cublasLtMatrixLayout_t);
  cublasStatus_t (*MatrixLayoutSetAttribute)(cublasLtMatrixLayout_t,
                                             cublasLtMatrixLayoutAttribute_t, const void *, size_t);
  cublasStatus_t (*MatmulPreferenceCreate)(cublasLtMatmulPreference_t *);
  cublasStatus_t (*MatmulPreferenceDestroy)(cublasLtMatmulPreference_t);
  cublasStatus_t (*MatmulPreferenceSetAttribute)(cublasLtMatmulPreference_t,
                                                 cublasLtMatmulPreferenceAttributes_t,
                                                 const void *, size_t);
  cublasStatus_t (*MatmulAlgoGetHeuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                           cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                           cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                           cublasLtMatmulPreference_t, int,
                                           cublasLtMatmulHeuristicResult_t *, int *);
  cublasStatus_t (*Matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                           cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t,
                           const void *, const void *, cublasLtMatrixLayout_t, void *,
                           cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t *, void *, size_t,
                           cudaStream_t);
} mt_cublaslt_api;
extern mt_cublaslt_api g_lt_api;
/* opens the library (once); 0, or -1 with the reason in e */
int mt_cublaslt_load(mt_err *e);
#define cublasLtCreate g_lt_api.Create
#define cublasLtDestroy g_lt_api.Destroy
#define cublasLtGetStatusString g_lt_api.GetStatusString
#define cublasLtMatmulDescCreate g_lt_api.MatmulDescCreate
#define cublasLtMatmulDescDestroy g_lt_api.MatmulDescDestroy
#define cublasLtMatmulDescSetAttribute g_lt_api.MatmulDescSetAttribute
#define cublasLtMatrixLayoutCreate g_lt_api.MatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy g_lt_api.MatrixLayoutDestroy
#define cublasLtMatrixLayoutSetAttribute g_lt_api.MatrixLayoutSetAttribute
#define cublasLtMatmulPreferenceCreate g_lt_api.MatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy g_lt_api.MatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute g_lt_api.MatmulPreferenceSetAttribute
#define cublasLtMatmulAlgoGetHeuristic g_lt_api.MatmulAlgoGetHeuristic
#define cublasLtMatmul g_lt_api.Matmul

#define CUDA_CHECK(call)                                                              \
  do {                                                                                \
    cudaError_t mt_e_ = (call);                                                       \
    if (mt_e_ != cudaSuccess) mt_die("%s failed: %s", #call, cudaGetErrorString(mt_e_)); \
  } while (0)

#define CUBLAS_CHECK(call)                                                            \
  do {                                                                                \
    cublasStatus_t mt_s_ = (call);                                                    \
    if (mt_s_ != CUBLAS_STATUS_SUCCESS)                                               \
      mt_die("%s failed: %s", #call, cublasLtGetStatusString(mt_s_));                 \
  } while (0)

/* after a kernel launch: a bad configuration shows here, with file and line */
#define CUDA_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

/* how matmul operands are multiplied */
typedef enum { MT_GEMM_FP32 = 0, MT_GEMM_BF16 = 1, MT_GEMM_BF16_FAST = 2 } mt_gemm_path;

typedef struct {
  int up;
  int device;
  mt_precision prec;
  mt_gemm_path gemm;
  cudaStream_t stream;
  cudaDeviceProp prop;
  cublasLtHandle_t lt;
  void *lt_workspace;       /* cuBLASLt's workspace */
  size_t lt_workspace_bytes;
  void *scratch;            /* bf16 operands and partial sums; one op at a time */
  size_t scratch_bytes;
  double *red_dev;          /* partial sums of the scalar reductions */
  double *red_host;         /* page-locked: the scalar's way back */
  size_t dev_cur, dev_peak; /* device bytes held by mt_ops allocations */
  size_t extra_bytes;       /* other scratch that grows on demand (embedding backward) */
} mt_cuda_state;

extern mt_cuda_state g_cu;

/* scalar reductions: fixed grid, so fixed summation order */
enum { MT_RED_BLOCKS = 256, MT_RED_THREADS = 256 };

static inline unsigned mt_blocks(size_t n, unsigned threads) {
  size_t b = (n + threads - 1) / threads;
  if (b > 65535u * 16u) b = 65535u * 16u; /* kernels stride over the rest */
  return (unsigned)(b ? b : 1);
}

/* Storage types of the op kernels: float or mt_bf16 (the bits of a
 * __nv_bfloat16). A kernel templated on the type S it reads and writes does
 * its math in fp32: mt_ld widens exactly, mt_st<S> rounds to nearest even.
 * Both are the identity on float, so the fp32 kernels keep their
 * arithmetic (and their bits). */
static __device__ __forceinline__ float mt_ld(float x) { return x; }
static __device__ __forceinline__ float mt_ld(mt_bf16 x) {
  return __bfloat162float(__ushort_as_bfloat16(x));
}
template <typename S> __device__ __forceinline__ S mt_st(float x);
template <> __device__ __forceinline__ float mt_st<float>(float x) { return x; }
template <> __device__ __forceinline__ mt_bf16 mt_st<mt_bf16>(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

/* ------------------------------------------------------------------ */
/* the op table's bodies                                               */

/* mt_cuda_<op><S> for every op of MT_OPS_TYPED and MT_OPS_TYPED_SUMS: the
 * table's parameters after t, operands of storage type S (float or
 * mt_bf16) behind the `void *`. backend.cu's member <op>(t, ...) runs
 * mt_cuda_<op><float> or mt_cuda_<op><mt_bf16>. */
#define MT_CUDA_DECLARE_TYPED_(name, params, args)                                          \
  template <typename S> void mt_cuda_##name(MT_OPS_UNPAREN params);
#define MT_CUDA_DECLARE_SUMS_(name, params, args)                                           \
  template <typename S> double mt_cuda_##name(MT_OPS_UNPAREN params);
MT_OPS_TYPED(MT_CUDA_DECLARE_TYPED_)
MT_OPS_TYPED_SUMS(MT_CUDA_DECLARE_SUMS_)
#undef MT_CUDA_DECLARE_TYPED_
#undef MT_CUDA_DECLARE_SUMS_

/* mt_cuda_<op> for every op of MT_OPS_FIXED, with the member's parameters */
#define MT_CUDA_DECLARE_FIXED_(name, optional, params, args) void mt_cuda_##name params;
MT_OPS_FIXED(MT_CUDA_DECLARE_FIXED_)
#undef MT_CUDA_DECLARE_FIXED_

/* After the body of mt_cuda_<op> in the file that defines it: its two
 * instantiations, float and mt_bf16 (the signature is the declaration's
 * above, so a body whose parameters differ from the list's fails here) */
#define MT_CUDA_INSTANTIATE(name)                                                            \
  template decltype(mt_cuda_##name<float>) mt_cuda_##name<float>;                            \
  template decltype(mt_cuda_##name<mt_bf16>) mt_cuda_##name<mt_bf16>;

/* ------------------------------------------------------------------ */
/* helpers shared between the files                                    */

/* the backend's scratch, checked for size (one op uses it at a time, in
 * stream order) */
void *mt_cuda_scratch(size_t bytes, const char *what);

/* ops.cu */
/* out[c] += sum over rows n of x (N, ld) column c, c < cols, in fp32,
 * deterministic; x of storage type S (float or mt_bf16) */
template <typename S> void mt_cuda_colsum_add(float *out, const S *x, int N, int cols, int ld);
/* bf16 copies of fp32 data (round to nearest even): n contiguous, or rows x
 * cols taken from a matrix with leading dimension ld */
void mt_cuda_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n);
void mt_cuda_to_bf16_2d(__nv_bfloat16 *dst, const float *src, int rows, int cols, int ld);
/* embedding backward keeps sort buffers between calls */
void mt_cuda_ops_shutdown(void);

/* matmul.cu */
/* C (m x n, column-major, ldc) = alpha op(A) op(B) + beta C (+ bias per
 * row), batched with strides (elements); A and B of type ab (fp32 or bf16),
 * C and the bias of type cd (fp32; or bf16 with bf16 operands: the sum in
 * fp32, rounded once), computed along the backend's gemm path for that
 * operand type. mt_cuda_gemm: cd fp32. */
void mt_cuda_gemm_ex(int transa, int transb, int m, int n, int k, float alpha, const void *A,
                     int lda, long long strideA, const void *B, int ldb, long long strideB,
                     float beta, void *C, int ldc, long long strideC, int batch,
                     cudaDataType_t ab, cudaDataType_t cd, const void *bias);
void mt_cuda_gemm(int transa, int transb, int m, int n, int k, float alpha, const void *A,
                  int lda, long long strideA, const void *B, int ldb, long long strideB,
                  float beta, float *C, int ldc, long long strideC, int batch,
                  cudaDataType_t ab, const float *bias);
void mt_cuda_matmul_shutdown(void);

#endif
