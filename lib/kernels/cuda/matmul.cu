/* Matrix products through cuBLASLt. Row-major X (R, K) is column-major X^T
 * with leading dimension K, so every product of kernels.h is one
 * column-major cuBLASLt call on the same memory:
 * (stored column-major matrices named by what they hold):
 *   forward  out^T (OC x N)  = op_T(w^T: C x OC) op_N(inp^T: C x N)  (+ bias epilogue)
 *   dinp     dinp^T (C x N) += op_N(w^T: C x OC) op_N(dout^T: OC x N)
 *   dw       dw^T (C x OC)  += op_N(inp^T: C x N) op_T(dout^T: OC x N)
 * Plans (descriptors, layouts and the heuristic's algorithm) are kept per
 * shape, leading dimensions, strides and pointer alignment (the bias's
 * too: the bias epilogue only for a 16-byte-aligned bias, else the bias is
 * written first and the product added onto it): a training step repeats a
 * handful of shapes.
 *
 * fp32 operands under train.precision = bf16 are rounded to bf16 into the
 * backend's scratch (MT_GEMM_BF16) and the product accumulates in fp32
 * into the fp32 output; a product whose operands do not fit the scratch
 * runs in pieces (blocks of output channels and of rows), each piece
 * accumulating into the output.
 *
 * bf16 operands (t = MT_DT_BF16) go to cuBLASLt as they are: out and dinp
 * are bf16 C and D (and the bias bf16, cuBLASLt's bias type for a bf16 D),
 * dw fp32.
 * cuBLASLt sums in fp32 (CUBLAS_COMPUTE_32F), adds beta C and the bias in
 * fp32 and rounds once into D; split-K algorithms that would reduce in the
 * output type (INPLACE, OUTPUT_TYPE) are excluded for a bf16 D, so that the
 * one rounding holds whatever algorithm the heuristic picks. */
#include "kernels/cuda/cuda_common.cuh"

#include <stdint.h>
#include <string.h>

typedef struct {
  int transa, transb, m, n, k, lda, ldb, ldc, batch;
  long long sa, sb, sc;
  int ab; /* cudaDataType_t of A and B */
  int cd; /* cudaDataType_t of C, D and the bias */
  int compute;
  int bias; /* bias epilogue wanted */
  int align_a, align_b, align_c;
  int align_bias; /* the bias pointer's: the epilogue is asked for only when enough */
} gemm_key;

typedef struct {
  gemm_key key;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t a, b, c;
  cublasLtMatmulAlgo_t algo;
  int bias_epilogue; /* 0: the bias (if any) is written first and beta = 1 */
} gemm_plan;

#define MT_MAX_PLANS 512
static gemm_plan g_plans[MT_MAX_PLANS];
static int g_n_plans;

void mt_cuda_matmul_shutdown(void) {
  for (int i = 0; i < g_n_plans; i++) {
    cublasLtMatmulDescDestroy(g_plans[i].op);
    cublasLtMatrixLayoutDestroy(g_plans[i].a);
    cublasLtMatrixLayoutDestroy(g_plans[i].b);
    cublasLtMatrixLayoutDestroy(g_plans[i].c);
  }
  g_n_plans = 0;
}

/* the largest power of two (<= 256) dividing the address */
static int alignment(const void *p) {
  uintptr_t a = (uintptr_t)p;
  int al = 256;
  while (al > 1 && a % (uintptr_t)al) al >>= 1;
  return al;
}

static cublasLtMatrixLayout_t layout(cudaDataType_t t, int rows, int cols, int ld, int batch,
                                     long long stride) {
  cublasLtMatrixLayout_t l;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                  sizeof batch));
    CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
  }
  return l;
}

/* The bias epilogue reads the bias in vectors: cuBLASLt users report
 * failures below 8 to 16 bytes of alignment (a bias at bias + o0 of a bf16
 * piece, or bias + g * OC of a grouped GEMM, can be 4-byte aligned). Below
 * this the bias is written first and the product accumulated onto it. */
#define MT_BIAS_EPILOGUE_ALIGN 16

/* a plan for key: the heuristic's best algorithm; with a bias epilogue when
 * one is wanted and the library has one for these types, else without */
static gemm_plan *plan_for(const gemm_key *key) {
  for (int i = 0; i < g_n_plans; i++)
    if (!memcmp(&g_plans[i].key, key, sizeof *key)) return &g_plans[i];
  if (g_n_plans == MT_MAX_PLANS) {
    mt_cuda_matmul_shutdown(); /* a run with that many shapes: start over */
  }
  gemm_plan *p = &g_plans[g_n_plans];
  memset(p, 0, sizeof *p);
  p->key = *key;
  cudaDataType_t ab = (cudaDataType_t)key->ab, cd = (cudaDataType_t)key->cd;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, (cublasComputeType_t)key->compute, CUDA_R_32F));
  cublasOperation_t ta = key->transa ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = key->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  p->a = key->transa ? layout(ab, key->k, key->m, key->lda, key->batch, key->sa)
                     : layout(ab, key->m, key->k, key->lda, key->batch, key->sa);
  p->b = key->transb ? layout(ab, key->n, key->k, key->ldb, key->batch, key->sb)
                     : layout(ab, key->k, key->n, key->ldb, key->batch, key->sb);
  p->c = layout(cd, key->m, key->n, key->ldc, key->batch, key->sc);

  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = g_cu.lt_workspace_bytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws, sizeof ws));
  uint32_t al[4] = {(uint32_t)key->align_a, (uint32_t)key->align_b, (uint32_t)key->align_c,
                    (uint32_t)key->align_c};
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], sizeof al[0]));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], sizeof al[1]));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], sizeof al[2]));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], sizeof al[3]));
  if (cd != CUDA_R_32F) { /* partial sums kept in fp32: one rounding into D */
    uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes, sizeof schemes));
  }

  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  for (int attempt = key->bias ? 0 : 1; attempt < 2 && !found; attempt++) {
    cublasLtEpilogue_t epi = attempt == 0 ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                                sizeof epi));
    if (attempt == 0) /* the bias of D's type */
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &cd,
                                                  sizeof cd));
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g_cu.lt, p->op, p->a, p->b, p->c, p->c,
                                                       pref, 1, &res, &found);
    /* a result's fields hold only when its state says so */
    if (st != CUBLAS_STATUS_SUCCESS || (found && res.state != CUBLAS_STATUS_SUCCESS)) found = 0;
    if (found && attempt == 0) p->bias_epilogue = 1;
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (!found)
    mt_die("cuBLASLt has no algorithm for a %s product into %s m=%d n=%d k=%d (trans %d%d, ld "
           "%d %d %d, batch %d)", ab == CUDA_R_16BF ? "bf16" : "fp32",
           cd == CUDA_R_16BF ? "bf16" : "fp32", key->m, key->n, key->k, key->transa, key->transb,
           key->lda, key->ldb, key->ldc, key->batch);
  p->algo = res.algo;
  g_n_plans++;
  return p;
}

/* out (rows x cols column-major, ld) = bias broadcast along columns (out
 * and bias of storage type S: bits copied) */
template <typename S>
__global__ void bias_fill_kernel(S *out, const S *bias, int rows, int cols, int ld) {
  size_t n = (size_t)rows * cols;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t c = i / (size_t)rows, r = i % (size_t)rows;
    out[c * (size_t)ld + r] = bias[r];
  }
}

/* A product without terms (k <= 0), for each of the batch's matrices C
 * (rows x cols, ld, stride apart): C = beta C (+ bias per row), in fp32,
 * stored as S; C is not read when beta is 0 (it may hold NaN, as cuBLAS
 * allows) */
template <typename S>
__global__ void gemm_no_terms_kernel(S *C, const S *bias, float beta, int rows, int cols, int ld,
                                     long long stride, int batch) {
  size_t per = (size_t)rows * cols, n = per * (size_t)batch;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t b = i / per, e = i % per, c = e / (size_t)rows, r = e % (size_t)rows;
    S *x = C + (long long)b * stride + c * (size_t)ld + r;
    float v = beta == 0.0f ? 0.0f : beta * mt_ld(*x);
    *x = mt_st<S>(bias ? v + mt_ld(bias[r]) : v);
  }
}

/* the two kernels above on C's storage type cd */
static void gemm_no_terms(void *C, const void *bias, float beta, int rows, int cols, int ld,
                          long long stride, int batch, cudaDataType_t cd) {
  unsigned blocks = mt_blocks((size_t)rows * cols * batch, 256);
  if (cd == CUDA_R_16BF)
    gemm_no_terms_kernel<mt_bf16><<<blocks, 256, 0, g_cu.stream>>>(
        (mt_bf16 *)C, (const mt_bf16 *)bias, beta, rows, cols, ld, stride, batch);
  else
    gemm_no_terms_kernel<float><<<blocks, 256, 0, g_cu.stream>>>(
        (float *)C, (const float *)bias, beta, rows, cols, ld, stride, batch);
  CUDA_LAUNCH_CHECK();
}

static void bias_fill(void *C, const void *bias, int rows, int cols, int ld, cudaDataType_t cd) {
  unsigned blocks = mt_blocks((size_t)rows * cols, 256);
  if (cd == CUDA_R_16BF)
    bias_fill_kernel<mt_bf16><<<blocks, 256, 0, g_cu.stream>>>((mt_bf16 *)C,
                                                               (const mt_bf16 *)bias, rows, cols,
                                                               ld);
  else
    bias_fill_kernel<float><<<blocks, 256, 0, g_cu.stream>>>((float *)C, (const float *)bias,
                                                             rows, cols, ld);
  CUDA_LAUNCH_CHECK();
}

void mt_cuda_gemm(int transa, int transb, int m, int n, int k, float alpha, const void *A,
                  int lda, long long strideA, const void *B, int ldb, long long strideB,
                  float beta, float *C, int ldc, long long strideC, int batch,
                  cudaDataType_t ab, const float *bias) {
  mt_cuda_gemm_ex(transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                  strideC, batch, ab, CUDA_R_32F, bias);
}

void mt_cuda_gemm_ex(int transa, int transb, int m, int n, int k, float alpha, const void *A,
                     int lda, long long strideA, const void *B, int ldb, long long strideB,
                     float beta, void *C, int ldc, long long strideC, int batch,
                     cudaDataType_t ab, cudaDataType_t cd, const void *bias) {
  if (m <= 0 || n <= 0 || batch <= 0) return;
  if (cd != CUDA_R_32F && ab != CUDA_R_16BF)
    mt_die("mt_cuda_gemm: a bf16 output takes bf16 operands");
  if (k <= 0) { /* no terms: C = beta C (+ bias) */
    if (beta == 1.0f && !bias) return;
    gemm_no_terms(C, bias, beta, m, n, ldc, batch > 1 ? strideC : 0, batch, cd);
    return;
  }
  gemm_key key;
  memset(&key, 0, sizeof key);
  key.transa = transa, key.transb = transb, key.m = m, key.n = n, key.k = k;
  key.lda = lda, key.ldb = ldb, key.ldc = ldc, key.batch = batch;
  key.sa = batch > 1 ? strideA : 0, key.sb = batch > 1 ? strideB : 0;
  key.sc = batch > 1 ? strideC : 0;
  key.ab = (int)ab;
  key.cd = (int)cd;
  key.compute = ab == CUDA_R_32F && g_cu.gemm == MT_GEMM_BF16_FAST
                    ? (int)CUBLAS_COMPUTE_32F_FAST_16BF
                    : (int)CUBLAS_COMPUTE_32F;
  key.align_a = alignment(A), key.align_b = alignment(B), key.align_c = alignment(C);
  key.align_bias = bias ? alignment(bias) : 0;
  key.bias = bias != NULL && beta == 0.0f && key.align_bias >= MT_BIAS_EPILOGUE_ALIGN;
  /* strided batches: every matrix of the batch must be as aligned */
  if (batch > 1) {
    size_t es = ab == CUDA_R_16BF ? 2 : 4;
    int sa = alignment((const void *)(uintptr_t)(strideA * (long long)es));
    int sb = alignment((const void *)(uintptr_t)(strideB * (long long)es));
    int sc = alignment((const void *)(uintptr_t)(strideC * (cd == CUDA_R_16BF ? 2 : 4)));
    key.align_a = key.align_a < sa ? key.align_a : sa;
    key.align_b = key.align_b < sb ? key.align_b : sb;
    key.align_c = key.align_c < sc ? key.align_c : sc;
  }
  gemm_plan *p = plan_for(&key);
  if (bias && !p->bias_epilogue) {
    /* the bias written first, then accumulated onto */
    if (beta != 0.0f) mt_die("mt_cuda_gemm: a bias with beta != 0");
    bias_fill(C, bias, m, n, ldc, cd);
    beta = 1.0f;
  } else if (p->bias_epilogue) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                sizeof bias));
  }
  CUBLAS_CHECK(cublasLtMatmul(g_cu.lt, p->op, &alpha, A, p->a, B, p->b, &beta, C, p->c, C, p->c,
                              &p->algo, g_cu.lt_workspace, g_cu.lt_workspace_bytes, g_cu.stream));
}

extern "C" int mt_cuda_gemm_strided(const mt_gemm_shape *s, const void *A, const void *B,
                                    void *C) {
  if (!g_cu.up) return -1;
  cudaDataType_t ab = s->ab == MT_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  cudaDataType_t cd = s->cd == MT_DT_BF16 ? CUDA_R_16BF : CUDA_R_32F;
  mt_cuda_gemm_ex(s->trans_a, s->trans_b, s->m, s->n, s->k, s->alpha, A, s->lda, s->stride_a, B,
                  s->ldb, s->stride_b, s->beta, C, s->ldc, s->stride_c, s->batch, ab, cd, NULL);
  return 0;
}

/* ------------------------------------------------------------------ */
/* the op table's matmuls, per storage type                             */

/* Blocks for a bf16 product in pieces: ocb output channels and nb rows, so
 * that the operands of one piece fit the scratch (elements: fixed + per
 * channel * ocb + per row * nb + per cell * ocb * nb). */
static void bf16_blocks(int N, int OC, size_t per_oc, size_t per_row, size_t per_cell, int *ocb,
                        int *nb) {
  size_t cap = g_cu.scratch_bytes / sizeof(__nv_bfloat16);
  *ocb = OC, *nb = N;
  for (;;) {
    size_t need = per_oc * (size_t)*ocb + per_row * (size_t)*nb + per_cell * (size_t)*ocb * *nb;
    if (need <= cap) return;
    if (per_oc * (size_t)*ocb > cap / 2 && *ocb > 1) *ocb = (*ocb + 1) / 2;
    else if (*nb > 1) *nb = (*nb + 1) / 2;
    else if (*ocb > 1) *ocb = (*ocb + 1) / 2;
    else mt_die("CUDA backend: the bf16 scratch of %zu bytes cannot hold one row of a product "
                "(raise MT_CUDA_SCRATCH_MB)", g_cu.scratch_bytes);
  }
}

/* The three products on operands of type ab as they are: out (N,OC) = inp
 * (N,C) @ w^T (+ bias), out and bias of type od */
static void forward_product(void *out, const void *inp, const void *w, const void *bias, int N,
                            int C, int OC, cudaDataType_t ab, cudaDataType_t od) {
  mt_cuda_gemm_ex(1, 0, OC, N, C, 1.0f, w, C, 0, inp, C, 0, 0.0f, out, OC, 0, 1, ab, od, bias);
}

/* dinp (N,C) = dout (N,OC) @ w + dinp_beta dinp (1: +=, 0: written), dinp
 * of type od; dw (OC,C) += dout^T @ inp in fp32; either NULL: skipped */
static void backward_products(void *dinp, float dinp_beta, float *dw, const void *dout,
                              const void *inp, const void *w, int N, int C, int OC,
                              cudaDataType_t ab, cudaDataType_t od) {
  if (dinp)
    mt_cuda_gemm_ex(0, 0, C, N, OC, 1.0f, w, C, 0, dout, OC, 0, dinp_beta, dinp, C, 0, 1, ab, od,
                    NULL);
  if (dw)
    mt_cuda_gemm_ex(0, 1, C, OC, N, 1.0f, inp, C, 0, dout, OC, 0, 1.0f, dw, C, 0, 1, ab,
                    CUDA_R_32F, NULL);
}

/* fp32: out (N,OC) = inp (N,C) @ w^T (+ bias) */
static void matmul_forward(float *out, const float *inp, const float *w, const float *bias, int N,
                           int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  if (g_cu.gemm != MT_GEMM_BF16) {
    forward_product(out, inp, w, bias, N, C, OC, CUDA_R_32F, CUDA_R_32F);
    return;
  }
  int ocb, nb;
  bf16_blocks(N, OC, (size_t)C, (size_t)C, 0, &ocb, &nb);
  __nv_bfloat16 *wb = (__nv_bfloat16 *)mt_cuda_scratch(g_cu.scratch_bytes, "bf16 operands");
  __nv_bfloat16 *ib = wb + (size_t)ocb * C;
  for (int o0 = 0; o0 < OC; o0 += ocb) {
    int ob = OC - o0 < ocb ? OC - o0 : ocb;
    mt_cuda_to_bf16(wb, w + (size_t)o0 * C, (size_t)ob * C);
    for (int n0 = 0; n0 < N; n0 += nb) {
      int nn = N - n0 < nb ? N - n0 : nb;
      /* one block of rows: converted once, for the first block of channels */
      if (nb < N || o0 == 0) mt_cuda_to_bf16(ib, inp + (size_t)n0 * C, (size_t)nn * C);
      mt_cuda_gemm(1, 0, ob, nn, C, 1.0f, wb, C, 0, ib, C, 0, 0.0f, out + (size_t)n0 * OC + o0, OC,
                   0, 1, CUDA_R_16BF, bias ? bias + o0 : NULL);
    }
  }
}

/* fp32: dinp (N,C) += dout (N,OC) @ w (dinp_beta 0: =); dw (OC,C) +=
 * dout^T @ inp; dbias (OC) += column sums of dout; any of the three may be
 * NULL */
static void matmul_backward(float *dinp, float dinp_beta, float *dw, float *dbias,
                            const float *dout, const float *inp, const float *w, int N, int C,
                            int OC) {
  if (N <= 0) return;
  if (OC <= 0) { /* an empty sum: a written dinp is 0 */
    if (dinp && dinp_beta == 0.0f) mt_cuda_zero<float>(dinp, (size_t)N * C);
    return;
  }
  if (dbias) mt_cuda_colsum_add(dbias, dout, N, OC, OC);
  if (!dinp && !dw) return;
  if (g_cu.gemm != MT_GEMM_BF16) {
    backward_products(dinp, dinp_beta, dw, dout, inp, w, N, C, OC, CUDA_R_32F, CUDA_R_32F);
    return;
  }
  int ocb, nb;
  bf16_blocks(N, OC, dinp ? (size_t)C : 0, dw ? (size_t)C : 0, 1, &ocb, &nb);
  __nv_bfloat16 *db = (__nv_bfloat16 *)mt_cuda_scratch(g_cu.scratch_bytes, "bf16 operands");
  __nv_bfloat16 *wb = db + (size_t)ocb * nb;
  __nv_bfloat16 *ib = wb + (dinp ? (size_t)ocb * C : 0);
  for (int o0 = 0; o0 < OC; o0 += ocb) {
    int ob = OC - o0 < ocb ? OC - o0 : ocb;
    if (dinp) mt_cuda_to_bf16(wb, w + (size_t)o0 * C, (size_t)ob * C);
    for (int n0 = 0; n0 < N; n0 += nb) {
      int nn = N - n0 < nb ? N - n0 : nb;
      mt_cuda_to_bf16_2d(db, dout + (size_t)n0 * OC + o0, nn, ob, OC);
      if (dw) mt_cuda_to_bf16(ib, inp + (size_t)n0 * C, (size_t)nn * C);
      /* the first block of channels writes a written dinp, the rest add */
      if (dinp)
        mt_cuda_gemm(0, 0, C, nn, ob, 1.0f, wb, C, 0, db, ob, 0, o0 == 0 ? dinp_beta : 1.0f,
                     dinp + (size_t)n0 * C, C, 0, 1, CUDA_R_16BF, NULL);
      if (dw)
        mt_cuda_gemm(0, 1, C, ob, nn, 1.0f, ib, C, 0, db, ob, 0, 1.0f, dw + (size_t)o0 * C, C, 0, 1,
                     CUDA_R_16BF, NULL);
    }
  }
}

/* bf16 tensors straight into cuBLASLt: out (N,OC) = round(inp (N,C) @ w^T
 * + bias), the bias added in fp32 */
static void matmul_forward(mt_bf16 *out, const mt_bf16 *inp, const mt_bf16 *w,
                           const mt_bf16 *bias, int N, int C, int OC) {
  if (N <= 0 || OC <= 0) return;
  forward_product(out, inp, w, bias, N, C, OC, CUDA_R_16BF, CUDA_R_16BF);
}

/* dinp = round(dinp + dout @ w) (beta 1 on a bf16 C; dinp_beta 0:
 * round(dout @ w)); dw += dout^T @ inp and dbias += column sums of dout in
 * fp32; any of the three may be NULL */
static void matmul_backward(mt_bf16 *dinp, float dinp_beta, float *dw, float *dbias,
                            const mt_bf16 *dout, const mt_bf16 *inp, const mt_bf16 *w, int N,
                            int C, int OC) {
  if (N <= 0) return;
  if (OC <= 0) {
    if (dinp && dinp_beta == 0.0f) mt_cuda_zero<mt_bf16>(dinp, (size_t)N * C);
    return;
  }
  if (dbias) mt_cuda_colsum_add(dbias, dout, N, OC, OC);
  backward_products(dinp, dinp_beta, dw, dout, inp, w, N, C, OC, CUDA_R_16BF, CUDA_R_16BF);
}

/* the op table's bodies: the overload above for storage type S (moe.cu's
 * grouped GEMM calls them per group) */
template <typename S>
void mt_cuda_matmul_forward(void *out, const void *inp, const void *w, const void *bias, int N,
                            int C, int OC) {
  matmul_forward((S *)out, (const S *)inp, (const S *)w, (const S *)bias, N, C, OC);
}
MT_CUDA_INSTANTIATE(matmul_forward)

template <typename S>
void mt_cuda_matmul_backward(void *dinp, float *dw, float *dbias, const void *dout,
                             const void *inp, const void *w, int N, int C, int OC) {
  matmul_backward((S *)dinp, 1.0f, dw, dbias, (const S *)dout, (const S *)inp, (const S *)w, N, C,
                  OC);
}
MT_CUDA_INSTANTIATE(matmul_backward)

template <typename S>
void mt_cuda_matmul_backward_first(void *dinp, float *dw, float *dbias, const void *dout,
                                   const void *inp, const void *w, int N, int C, int OC) {
  matmul_backward((S *)dinp, 0.0f, dw, dbias, (const S *)dout, (const S *)inp, (const S *)w, N, C,
                  OC);
}
MT_CUDA_INSTANTIATE(matmul_backward_first)
