/* gpu-emu: a cuBLASLt reference, the library the emulated build's
 * lib/kernels/cuda/cublaslt.cu opens with dlopen in place of NVIDIA's.
 *
 * It enforces what cuBLASLt documents for the calls the backend makes, and
 * reports each violation with the numbers that break it:
 *   - matrices are column-major; op(A) is m x k and op(B) k x n (the layouts
 *     give rows x cols of A, B as stored: transposed views swap them), C and
 *     D are m x n, and every leading dimension is >= the stored rows;
 *   - strided batches: equal batch counts, strides that keep the matrices
 *     of a batch apart, every matrix inside its allocation;
 *   - types: A and B fp32 or bf16 (the same); C and D of one type, fp32, or
 *     bf16 with bf16 A and B under CUBLAS_COMPUTE_32F (cuBLASLt's
 *     BF16/BF16/BF16 row: fp32 sums, rounded once into D); scale fp32;
 *     compute CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_FAST_16BF;
 *   - the bias epilogue: a bias of D's type (BIAS_DATA_TYPE unset, or set
 *     to D's type; another type has no algorithm) and m elements, set
 *     before the call;
 *   - a bf16 D: the preference's REDUCTION_SCHEME_MASK must exclude the
 *     split-K reductions that round partial sums into the output type
 *     (INPLACE, OUTPUT_TYPE), else the one rounding modelled here would
 *     not be what the GPU's algorithm may do;
 *   - alignment: the heuristic's answer holds for the minimum alignments
 *     the preference promised (A, B, C, D); a pointer less aligned at the
 *     call is an error, and so is a bias pointer less than 16-byte aligned
 *     under the bias epilogue (the vector width NVIDIA's epilogues read);
 *   - an algorithm is used only with the descriptors it was chosen for, and
 *     the workspace is a device range of the size passed.
 * It computes D = alpha op(A) op(B) + beta C (+ bias per row) in fp32, each
 * element's products added in k order from 0 (bf16 operands, C and bias
 * converted exactly; CUBLAS_COMPUTE_32F_FAST_16BF rounds fp32 operands to
 * bf16 first), and rounds it once to nearest even into a bf16 D; C is not
 * read when beta is 0. Which algorithms exist for a shape and their
 * summation orders are not modelled. */
#include "mt_emu.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <string.h>

#include <memory>
#include <vector>

namespace {

const uint64_t MAGIC = 0x6d742d656d752d6cULL; /* "mt-emu-l" */

struct layout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch;
  int64_t stride;
  int32_t order;
};

struct desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int32_t transa, transb;
  uint32_t epilogue;
  const void *bias;
  int32_t bias_type;
  bool bias_type_set;
};

struct pref {
  uint64_t max_workspace;
  uint32_t align[4]; /* A, B, C, D */
  uint32_t reductions; /* REDUCTION_SCHEME_MASK */
};

struct handle {
  int alive;
};

layout *L(cublasLtMatrixLayout_t l) { return reinterpret_cast<layout *>(l); }
desc *D(cublasLtMatmulDesc_t d) { return reinterpret_cast<desc *>(d); }
pref *P(cublasLtMatmulPreference_t p) { return reinterpret_cast<pref *>(p); }

/* the problem an algorithm is chosen for, as one fingerprint */
uint64_t fingerprint(const desc *d, const layout *a, const layout *b, const layout *c,
                     const layout *dd) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ULL;
  };
  mix((uint64_t)d->compute), mix((uint64_t)d->transa), mix((uint64_t)d->transb);
  mix(d->epilogue);
  for (const layout *l : {a, b, c, dd}) {
    mix((uint64_t)l->type), mix(l->rows), mix(l->cols), mix((uint64_t)l->ld);
    mix((uint64_t)l->batch), mix((uint64_t)l->stride);
  }
  return h;
}

size_t type_size(cudaDataType t) { return t == CUDA_R_16BF ? 2 : 4; }

int alignment(const void *p) {
  uintptr_t a = (uintptr_t)p;
  int al = 256;
  while (al > 1 && a % (uintptr_t)al) al >>= 1;
  return al;
}

/* the problem's shape, or a message saying why the descriptors disagree */
struct shape {
  uint64_t m, n, k;
  int batch;
};

bool check_problem(const desc *d, const layout *a, const layout *b, const layout *c,
                   const layout *dd, shape *s, char *why, size_t len) {
  if (d->compute != CUBLAS_COMPUTE_32F && d->compute != CUBLAS_COMPUTE_32F_FAST_16BF)
    return snprintf(why, len, "compute type %d (gpu-emu models 32F and 32F_FAST_16BF)",
                    (int)d->compute), false;
  if (d->scale != CUDA_R_32F) return snprintf(why, len, "scale type %d, not fp32", (int)d->scale), false;
  if (a->type != b->type || (a->type != CUDA_R_32F && a->type != CUDA_R_16BF))
    return snprintf(why, len, "A and B of types %d and %d (fp32 or bf16, the same)", (int)a->type,
                    (int)b->type), false;
  if (c->type != dd->type || (c->type != CUDA_R_32F && c->type != CUDA_R_16BF))
    return snprintf(why, len, "C and D of types %d and %d (fp32 or bf16, the same)",
                    (int)c->type, (int)dd->type), false;
  if (dd->type == CUDA_R_16BF && (a->type != CUDA_R_16BF || d->compute != CUBLAS_COMPUTE_32F))
    return snprintf(why, len, "a bf16 D with A and B of type %d under compute type %d (gpu-emu "
                    "models bf16 D for bf16 A and B under CUBLAS_COMPUTE_32F)", (int)a->type,
                    (int)d->compute), false;
  for (const layout *l : {a, b, c, dd})
    if (l->order != CUBLASLT_ORDER_COL)
      return snprintf(why, len, "a layout of order %d (column-major only)", l->order), false;
  uint64_t m = d->transa ? a->cols : a->rows, k = d->transa ? a->rows : a->cols;
  uint64_t kb = d->transb ? b->cols : b->rows, n = d->transb ? b->rows : b->cols;
  if (k != kb)
    return snprintf(why, len, "op(A) is %llu x %llu but op(B) is %llu x %llu (k differs)",
                    (unsigned long long)m, (unsigned long long)k, (unsigned long long)kb,
                    (unsigned long long)n), false;
  if (c->rows != m || c->cols != n || dd->rows != m || dd->cols != n)
    return snprintf(why, len, "C is %llu x %llu and D %llu x %llu, op(A) op(B) is %llu x %llu",
                    (unsigned long long)c->rows, (unsigned long long)c->cols,
                    (unsigned long long)dd->rows, (unsigned long long)dd->cols,
                    (unsigned long long)m, (unsigned long long)n), false;
  const char *names[] = {"A", "B", "C", "D"};
  const layout *ls[] = {a, b, c, dd};
  for (int i = 0; i < 4; i++) {
    if (ls[i]->ld < (int64_t)(ls[i]->rows ? ls[i]->rows : 1))
      return snprintf(why, len, "the leading dimension of %s is %lld, below its %llu rows",
                      names[i], (long long)ls[i]->ld, (unsigned long long)ls[i]->rows), false;
    if (ls[i]->batch != a->batch)
      return snprintf(why, len, "batch counts differ (A %d, %s %d)", a->batch, names[i],
                      ls[i]->batch), false;
    /* the outputs of a batch must not share an element (inputs may: the
     * heads of one buffer are read in place); matrices either follow each
     * other or interleave within the columns */
    if ((ls[i] == c || ls[i] == dd) && ls[i]->batch > 1) {
      uint64_t extent = (uint64_t)ls[i]->ld * (ls[i]->cols ? ls[i]->cols - 1 : 0) + ls[i]->rows;
      uint64_t st = (uint64_t)(ls[i]->stride < 0 ? -ls[i]->stride : ls[i]->stride);
      bool apart = st >= extent ||
                   (st >= ls[i]->rows && (uint64_t)(ls[i]->batch - 1) * st + ls[i]->rows <=
                                             (uint64_t)ls[i]->ld);
      if (!apart)
        return snprintf(why, len, "%s's batch stride %lld makes matrices of the batch share "
                        "elements (%llu x %llu, ld %lld, batch %d)", names[i],
                        (long long)ls[i]->stride, (unsigned long long)ls[i]->rows,
                        (unsigned long long)ls[i]->cols, (long long)ls[i]->ld, ls[i]->batch),
               false;
    }
  }
  if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS)
    return snprintf(why, len, "epilogue %u (gpu-emu models DEFAULT and BIAS)", d->epilogue), false;
  s->m = m, s->n = n, s->k = k, s->batch = a->batch;
  return true;
}

/* the split-K reductions that keep partial sums in the compute type */
const uint32_t FP32_REDUCTIONS =
    CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;

float load(const void *p, cudaDataType t, size_t i, bool round_bf16) {
  if (t == CUDA_R_16BF) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
  float v = ((const float *)p)[i];
  return round_bf16 ? __bfloat162float(__float2bfloat16_rn(v)) : v;
}

} // namespace

extern "C" {

const char *cublasLtGetStatusString(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  default: return "CUBLAS_STATUS (gpu-emu: other)";
  }
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = reinterpret_cast<cublasLtHandle_t>(new handle{1});
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete reinterpret_cast<handle *>(h);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  desc *x = new desc();
  x->compute = compute;
  x->scale = scale;
  x->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  *d = reinterpret_cast<cublasLtMatmulDesc_t>(x);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete D(d);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
  desc *x = D(d);
  auto need = [&](size_t s, const char *what) {
    if (size != s)
      mt_emu::fatal("cublasLtMatmulDescSetAttribute(%s): %zu bytes passed, %zu expected", what,
                    size, s);
  };
  switch (attr) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
    need(4, "TRANSA");
    memcpy(&x->transa, buf, 4);
    break;
  case CUBLASLT_MATMUL_DESC_TRANSB:
    need(4, "TRANSB");
    memcpy(&x->transb, buf, 4);
    break;
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    need(4, "EPILOGUE");
    memcpy(&x->epilogue, buf, 4);
    break;
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    need(sizeof(void *), "BIAS_POINTER");
    memcpy(&x->bias, buf, sizeof(void *));
    break;
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    need(4, "BIAS_DATA_TYPE");
    memcpy(&x->bias_type, buf, 4);
    x->bias_type_set = true;
    break;
  default:
    mt_emu::fatal("cublasLtMatmulDescSetAttribute: attribute %d is not modelled by gpu-emu",
                  (int)attr);
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  layout *x = new layout{type, rows, cols, ld, 1, 0, CUBLASLT_ORDER_COL};
  *l = reinterpret_cast<cublasLtMatrixLayout_t>(x);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete L(l);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t size) {
  layout *x = L(l);
  switch (attr) {
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
    if (size != 4) mt_emu::fatal("BATCH_COUNT: %zu bytes passed, 4 expected", size);
    memcpy(&x->batch, buf, 4);
    if (x->batch < 1) return CUBLAS_STATUS_INVALID_VALUE;
    break;
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
    if (size != 8) mt_emu::fatal("STRIDED_BATCH_OFFSET: %zu bytes passed, 8 expected", size);
    memcpy(&x->stride, buf, 8);
    break;
  case CUBLASLT_MATRIX_LAYOUT_ORDER:
    if (size != 4) mt_emu::fatal("ORDER: %zu bytes passed, 4 expected", size);
    memcpy(&x->order, buf, 4);
    break;
  default:
    mt_emu::fatal("cublasLtMatrixLayoutSetAttribute: attribute %d is not modelled by gpu-emu",
                  (int)attr);
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  pref *x = new pref{0, {256, 256, 256, 256}, CUBLASLT_REDUCTION_SCHEME_MASK};
  *p = reinterpret_cast<cublasLtMatmulPreference_t>(x);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete P(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t size) {
  pref *x = P(p);
  int slot = -1;
  switch (attr) {
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
    if (size != 8) mt_emu::fatal("MAX_WORKSPACE_BYTES: %zu bytes passed, 8 expected", size);
    memcpy(&x->max_workspace, buf, 8);
    return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
    if (size != 4) mt_emu::fatal("REDUCTION_SCHEME_MASK: %zu bytes passed, 4 expected", size);
    memcpy(&x->reductions, buf, 4);
    return CUBLAS_STATUS_SUCCESS;
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: slot = 0; break;
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: slot = 1; break;
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: slot = 2; break;
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: slot = 3; break;
  default:
    mt_emu::fatal("cublasLtMatmulPreferenceSetAttribute: attribute %d is not modelled by gpu-emu",
                  (int)attr);
  }
  if (size != 4) mt_emu::fatal("MIN_ALIGNMENT: %zu bytes passed, 4 expected", size);
  memcpy(&x->align[slot], buf, 4);
  return CUBLAS_STATUS_SUCCESS;
}

/* One algorithm for every valid problem: what it was chosen for (the
 * fingerprint) and the alignments it may assume ride in its data. */
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                              cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                              cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dd,
                                              cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t *res, int *returned) {
  (void)h;
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  shape s;
  char why[256];
  if (!check_problem(D(d), L(a), L(b), L(c), L(dd), &s, why, sizeof why))
    mt_emu::fatal("cublasLtMatmulAlgoGetHeuristic: %s", why);
  /* the bias epilogue adds a bias of D's type (the documented default);
   * another bias type has no algorithm here (the caller falls back) */
  if (D(d)->epilogue == CUBLASLT_EPILOGUE_BIAS && D(d)->bias_type_set &&
      D(d)->bias_type != (int32_t)L(dd)->type)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (L(dd)->type == CUDA_R_16BF && (P(p)->reductions & ~FP32_REDUCTIONS))
    mt_emu::fatal("cublasLtMatmulAlgoGetHeuristic: a bf16 D with REDUCTION_SCHEME_MASK %#x: a "
                  "split-K algorithm may then round partial sums into bf16 (INPLACE or "
                  "OUTPUT_TYPE); allow only NONE and COMPUTE_TYPE for one rounding",
                  P(p)->reductions);
  for (int i = 0; i < 4; i++) {
    uint32_t al = P(p)->align[i];
    if (!al || (al & (al - 1)) || al > 256)
      mt_emu::fatal("cublasLtMatmulAlgoGetHeuristic: minimum alignment %u (a power of two up to 256)", al);
  }
  memset(res, 0, sizeof *res);
  res->algo.data[0] = MAGIC;
  res->algo.data[1] = fingerprint(D(d), L(a), L(b), L(c), L(dd));
  for (int i = 0; i < 4; i++) res->algo.data[2 + i] = P(p)->align[i];
  res->workspaceSize = 0;
  res->state = CUBLAS_STATUS_SUCCESS;
  res->wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t a, const void *B,
                              cublasLtMatrixLayout_t b, const void *beta, const void *C,
                              cublasLtMatrixLayout_t c, void *Dp, cublasLtMatrixLayout_t dd,
                              const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  (void)h;
  const desc *x = D(d);
  const layout *la = L(a), *lb = L(b), *lc = L(c), *ld = L(dd);
  shape s;
  char why[256];
  if (!check_problem(x, la, lb, lc, ld, &s, why, sizeof why)) mt_emu::fatal("cublasLtMatmul: %s", why);
  if (!algo || algo->data[0] != MAGIC)
    mt_emu::fatal("cublasLtMatmul: an algorithm that no cublasLtMatmulAlgoGetHeuristic returned");
  if (algo->data[1] != fingerprint(x, la, lb, lc, ld))
    mt_emu::fatal("cublasLtMatmul: the algorithm was chosen for other descriptors (shape, types, "
                  "transposes, epilogue or batch)");
  /* the alignments the heuristic was promised */
  const void *ptrs[4] = {A, B, C, Dp};
  const char *names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; i++)
    if ((uint64_t)alignment(ptrs[i]) < algo->data[2 + i])
      mt_emu::fatal("cublasLtMatmul: %s = %p is %d-byte aligned, but the algorithm was chosen for "
                    "a preference of %llu bytes (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%s_BYTES)",
                    names[i], ptrs[i], alignment(ptrs[i]), (unsigned long long)algo->data[2 + i],
                    names[i]);
  const bool bias = x->epilogue == CUBLASLT_EPILOGUE_BIAS;
  if (bias) {
    if (!x->bias) mt_emu::fatal("cublasLtMatmul: the bias epilogue without a bias pointer");
    if (alignment(x->bias) < 16)
      mt_emu::fatal("cublasLtMatmul: the bias epilogue's bias = %p is %d-byte aligned; gpu-emu "
                    "asks 16 (the vector width NVIDIA's epilogues read)",
                    x->bias, alignment(x->bias));
    mt_emu::check_device_range(nullptr, 0, "cublasLtMatmul bias (m elements)", x->bias,
                               s.m * type_size(ld->type));
  }
  if (workspace_bytes) mt_emu::check_device_range(nullptr, 0, "cublasLtMatmul workspace", workspace, workspace_bytes);
  const float al = *(const float *)alpha, be = *(const float *)beta; /* host scalars, read now */
  /* every matrix of the batch inside its allocation */
  const layout *ls[4] = {la, lb, lc, ld};
  for (int i = 0; i < 4; i++) {
    if (i == 2 && be == 0.0f) continue; /* C is not read */
    uint64_t extent = (uint64_t)ls[i]->ld * (ls[i]->cols ? ls[i]->cols - 1 : 0) + ls[i]->rows;
    int64_t st = ls[i]->stride;
    int64_t lo = st < 0 ? st * (s.batch - 1) : 0;
    uint64_t span = extent + (uint64_t)(st < 0 ? -st : st) * (uint64_t)(s.batch - 1);
    char what[64];
    snprintf(what, sizeof what, "cublasLtMatmul %s (batch of %d)", names[i], s.batch);
    mt_emu::check_device_range(nullptr, 0, what,
                               (const char *)ptrs[i] + lo * (int64_t)type_size(ls[i]->type),
                               span * type_size(ls[i]->type));
  }
  const bool fast = x->compute == CUBLAS_COMPUTE_32F_FAST_16BF && la->type == CUDA_R_32F;
  const int ta = x->transa, tb = x->transb;
  const void *biasp = x->bias;
  const layout A_ = *la, B_ = *lb, C_ = *lc, D_ = *ld;
  mt_emu::enqueue_host(stream, "cublasLtMatmul", [=]() {
    const uint64_t m = s.m, n = s.n, k = s.k;
    /* op(A) packed k-major (p, i) and op(B) column by column, in fp32:
     * eight outputs of a column are summed side by side, each in k order */
    std::vector<float> ap(k * m), bcol(k);
    for (int bt = 0; bt < s.batch; bt++) {
      const char *Ab = (const char *)A + (int64_t)bt * A_.stride * (int64_t)type_size(A_.type);
      const char *Bb = (const char *)B + (int64_t)bt * B_.stride * (int64_t)type_size(B_.type);
      const char *Cb = (const char *)C + (int64_t)bt * C_.stride * (int64_t)type_size(C_.type);
      char *Db = (char *)Dp + (int64_t)bt * D_.stride * (int64_t)type_size(D_.type);
      for (uint64_t p = 0; p < k; p++)
        for (uint64_t i = 0; i < m; i++)
          ap[p * m + i] = load(Ab, A_.type, ta ? i * A_.ld + p : p * A_.ld + i, fast);
      std::vector<float> out(m);
      for (uint64_t j = 0; j < n; j++) {
        for (uint64_t p = 0; p < k; p++)
          bcol[p] = load(Bb, B_.type, tb ? p * B_.ld + j : j * B_.ld + p, fast);
        for (uint64_t i0 = 0; i0 < m; i0 += 8) {
          float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          const uint64_t w = m - i0 < 8 ? m - i0 : 8;
          if (w == 8) {
            for (uint64_t p = 0; p < k; p++) {
              const float bv = bcol[p], *arow = &ap[p * m + i0];
              for (int q = 0; q < 8; q++) acc[q] += arow[q] * bv;
            }
          } else {
            for (uint64_t p = 0; p < k; p++)
              for (uint64_t q = 0; q < w; q++) acc[q] += ap[p * m + i0 + q] * bcol[p];
          }
          for (uint64_t q = 0; q < w; q++) out[i0 + q] = acc[q];
        }
        for (uint64_t i = 0; i < m; i++) {
          float v = al * out[i];
          if (be != 0.0f) v += be * load(Cb, C_.type, j * C_.ld + i, false);
          if (bias) v += load(biasp, D_.type, i, false);
          if (D_.type == CUDA_R_16BF) /* the one rounding */
            ((__nv_bfloat16 *)Db)[j * D_.ld + i] = __float2bfloat16_rn(v);
          else
            ((float *)Db)[j * D_.ld + i] = v;
        }
      }
    }
  });
  return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
