/* Shared by the CUDA backend's files (not public): checked calls, the
 * backend's state, launch helpers and the entry points of each file.
 *
 * Precision (train.precision):
 *   fp32  every op in fp32; matmuls through cuBLASLt with CUBLAS_COMPUTE_32F
 *         (no TF32), so a GPU run follows the CPU one within fp32 rounding.
 *   bf16  matmuls (the linear layers and the reference T x T attention's two
 *         products) take bf16 operands on the tensor cores and accumulate
 *         and write fp32; the block attention the model uses
 *         (attention_flash.cu) stays in fp32 on the CUDA cores. Every
 *         tensor is still stored in fp32: parameters (the master weights),
 *         gradients (reduced over dp in fp32), AdamW moments and activations.
 *         The operands are rounded to bf16 on the fly, by a conversion pass
 *         into the backend's scratch ("bf16", the default) or inside cuBLASLt
 *         (CUBLAS_COMPUTE_32F_FAST_16BF, "bf16-fast"; MT_CUDA_BF16_GEMM=fast).
 *         So bf16 saves tensor-core time, not memory: the op table hands the
 *         backend fp32 buffers whose sizes the model and the plan count.
 *   The bf16 table (mt_ops_bf16_cuda, kernels.h's mt_ops_bf16) stores bf16
 *         tensors instead, as the CPU's: the same kernels templated on the
 *         storage type (mt_ld / mt_st below), fp32 math, one rounding per
 *         stored value; its matmuls hand bf16 tensors to cuBLASLt as they
 *         are (matmul.cu). The model does not use it yet.
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

/* Storage types of the op kernels: float (mt_ops) or mt_bf16 (mt_ops_bf16:
 * the bits of a __nv_bfloat16). A kernel templated on the type S it reads
 * and writes does its math in fp32: mt_ld widens exactly, mt_st<S> rounds
 * to nearest even. Both are the identity on float, so the fp32 table's
 * kernels keep their arithmetic (and their bits). */
static __device__ __forceinline__ float mt_ld(float x) { return x; }
static __device__ __forceinline__ float mt_ld(mt_bf16 x) {
  return __bfloat162float(__ushort_as_bfloat16(x));
}
template <typename S> __device__ __forceinline__ S mt_st(float x);
template <> __device__ __forceinline__ float mt_st<float>(float x) { return x; }
template <> __device__ __forceinline__ mt_bf16 mt_st<mt_bf16>(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

/* the backend's scratch, checked for size (one op uses it at a time, in
 * stream order) */
void *mt_cuda_scratch(size_t bytes, const char *what);

/* ops.cu */
void mt_cuda_fill_ops(mt_ops *o);
void mt_cuda_fill_ops_bf16(mt_ops_bf16 *o);
/* out[c] += sum over rows n of x (N, ld) column c, c < cols, in fp32,
 * deterministic; x of storage type S (float or mt_bf16) */
template <typename S> void mt_cuda_colsum_add(float *out, const S *x, int N, int cols, int ld);
/* bf16 copies of fp32 data (round to nearest even): n contiguous, or rows x
 * cols taken from a matrix with leading dimension ld */
void mt_cuda_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n);
void mt_cuda_to_bf16_2d(__nv_bfloat16 *dst, const float *src, int rows, int cols, int ld);

/* matmul.cu */
void mt_cuda_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                            int N, int C, int OC);
void mt_cuda_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                             const float *inp, const float *w, int N, int C, int OC);
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
/* the bf16 table's matmuls (kernels.h's mt_ops_bf16: bf16 out and dinp,
 * fp32 dw and dbias); moe.cu calls both overloads per group */
void mt_cuda_matmul_forward(mt_bf16 *out, const mt_bf16 *inp, const mt_bf16 *w,
                            const mt_bf16 *bias, int N, int C, int OC);
void mt_cuda_matmul_backward(mt_bf16 *dinp, float *dw, float *dbias, const mt_bf16 *dout,
                             const mt_bf16 *inp, const mt_bf16 *w, int N, int C, int OC);
void mt_cuda_matmul_shutdown(void);

/* attention.cu */
void mt_cuda_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                               int NH);
void mt_cuda_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                                const float *att, int B, int T, int C, int NH);

/* attention_flash.cu: the block attention ops of the op table (kernels.h
 * states them) */
void mt_cuda_attn_forward(const mt_attn_block *a, float *out, float *lse, const float *q,
                          const float *k, const float *v);
void mt_cuda_attn_merge(const mt_attn_block *a, float *out, float *lse, const float *part,
                        const float *part_lse);
void mt_cuda_attn_backward(const mt_attn_block *a, float *dq, float *dk, float *dv,
                           const float *dout, const float *out, const float *lse, const float *q,
                           const float *k, const float *v);
/* ops.cu: the op table's strided row copies (a 2D copy; the sum through
 * the cast kernel the bf16 table's add_2d uses) */
void mt_cuda_copy_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                     size_t cols);
void mt_cuda_add_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                    size_t cols);
/* the bf16 op table's attn_forward, attn_merge, attn_backward (the same
 * kernels on bf16 tensors) */
void mt_cuda_fill_bf16_attn(mt_ops_bf16 *o);

/* xent.cu: the cross-entropy members of the fp32 op table */
void mt_cuda_fill_xent_ops(mt_ops *o);
/* The members of the bf16 op table (mt_ops_bf16, kernels.h) that share
 * their kernels with the fp32 ones: attn_forward, attn_merge, attn_backward
 * (attention_flash.cu) and softmax_xent_forward, softmax_xent_backward,
 * xent_vp_max, xent_vp_exp, xent_vp_finish, xent_vp_backward (xent.cu);
 * sets those nine and nothing else. */
extern "C" void mt_cuda_fill_bf16_attn_xent(mt_ops_bf16 *o);

/* embedding backward (ops.cu) keeps sort buffers between calls */
void mt_cuda_ops_shutdown(void);

/* moe.cu: the Mixture-of-Experts members of the op tables */
void mt_cuda_fill_moe_ops(mt_ops *o);
void mt_cuda_fill_moe_ops_bf16(mt_ops_bf16 *o);

#endif
