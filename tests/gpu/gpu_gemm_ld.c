/* gpu_gemm_ld: the CUDA backend's general product (mt_cuda_gemm_strided,
 * the GEMM under every matmul and the reference attention) with leading
 * dimensions and batch strides other than the packed ones, against a
 * product the test computes in double from the stored values:
 *   - every operand type (fp32 -> fp32, bf16 -> fp32, bf16 -> bf16) and
 *     both transpositions of A and B;
 *   - lda, ldb, ldc each larger than the rows they hold, and batches whose
 *     strides leave a gap after each matrix; alpha != 1, beta 0 and 0.5;
 *   - a product computed in pieces into one output: row blocks (m of a
 *     piece < ldc, the output one block down) and column blocks (the
 *     output ldc * n0 further on), as the bf16 matmuls do in their scratch.
 * Every element of C outside the product (the gaps past m in each column,
 * between the batches) must keep its bytes: a wrong ldc or stride writes
 * there, or leaves part of the product unwritten.
 * Error: max |gpu - ref| / max |ref| over the product; a gap changed counts
 * as an infinite error. Tolerances: 1e-5 with an fp32 output (the operands
 * are taken as stored, so only the fp32 accumulation differs from the
 * double reference), 8e-3 with a bf16 one (rounded once, 2^-8 relative).
 *
 *   gpu_gemm_ld fp32|bf16    (the backend's precision; the products here
 *                             run on their operands' type either way)
 *
 * No GPU: prints "SKIP: <reason>" and exits 77. */
#include "gpu_compare.h"

#include <mpi.h>

static size_t dt_size(mt_dtype t) { return t == BF16 ? sizeof(mt_bf16) : sizeof(float); }
static float get(const void *x, mt_dtype t, size_t i) {
  return t == BF16 ? mt_bf16_to_f32(((const mt_bf16 *)x)[i]) : ((const float *)x)[i];
}

/* n random values in [-1, 1) of type t (bf16: rounded) */
static void *rnd_of(mt_dtype t, size_t n) {
  if (t == BF16) return rnd_bf16(n, -1, 1);
  return rnd(n, -1, 1);
}

/* the elements a batch of `cols` columns, ld and stride apart, spans */
static size_t span(int cols, int ld, long long stride, int batch) {
  return (size_t)(batch - 1) * (size_t)stride + (size_t)cols * ld;
}

/* the double reference of C (m x n at c0, ldc) = alpha op(A) op(B) + beta
 * C0 for one matrix of the batch, into ref (the same layout as C) */
static void reference(const mt_gemm_shape *s, const void *A, size_t a0, const void *B, size_t b0,
                      const void *C0, size_t c0, float *ref) {
  for (int j = 0; j < s->n; j++)
    for (int i = 0; i < s->m; i++) {
      double acc = 0.0;
      for (int p = 0; p < s->k; p++) {
        size_t ai = a0 + (s->trans_a ? (size_t)i * s->lda + p : (size_t)p * s->lda + i);
        size_t bi = b0 + (s->trans_b ? (size_t)p * s->ldb + j : (size_t)j * s->ldb + p);
        acc += (double)get(A, s->ab, ai) * get(B, s->ab, bi);
      }
      size_t ci = c0 + (size_t)j * s->ldc + i;
      double v = s->alpha * acc;
      if (s->beta != 0.0f) v += (double)s->beta * get(C0, s->cd, ci);
      ref[ci] = (float)v;
    }
}

/* max |got - ref| / max |ref| over the product's elements (in[i] set), an
 * infinite error where an element outside it changed from C0's bits */
static double compare(const void *got, const void *C0, const float *ref, const char *in,
                      size_t n, mt_dtype cd) {
  double diff = 0.0, top = 0.0;
  size_t es = dt_size(cd);
  for (size_t i = 0; i < n; i++) {
    if (!in[i]) {
      if (memcmp((const char *)got + i * es, (const char *)C0 + i * es, es)) return INFINITY;
      continue;
    }
    diff = mt_worst(diff, fabs((double)get(got, cd, i) - ref[i]));
    top = fmax(top, fabs((double)ref[i]));
  }
  return top > 0.0 ? diff / top : diff;
}

/* One case: the product of shape s computed in pieces (rows split in
 * row_pieces, columns in col_pieces; 1 and 1: one call), every matrix of
 * the batch, checked as above. */
static void run_case(mt_gemm_shape shape_of_case, int row_pieces, int col_pieces) {
  const mt_gemm_shape *s = &shape_of_case;
  int a_cols = s->trans_a ? s->m : s->k, b_cols = s->trans_b ? s->k : s->n;
  size_t na = span(a_cols, s->lda, s->stride_a, s->batch);
  size_t nb = span(b_cols, s->ldb, s->stride_b, s->batch);
  size_t nc = span(s->n, s->ldc, s->stride_c, s->batch);
  size_t ea = dt_size(s->ab), ec = dt_size(s->cd);
  void *A = rnd_of(s->ab, na), *B = rnd_of(s->ab, nb), *C0 = rnd_of(s->cd, nc);
  float *ref = calloc(nc, sizeof(float));
  char *in = calloc(nc, 1);
  for (int b = 0; b < s->batch; b++) {
    size_t c0 = (size_t)b * s->stride_c;
    reference(s, A, (size_t)b * s->stride_a, B, (size_t)b * s->stride_b, C0, c0, ref);
    for (int j = 0; j < s->n; j++) memset(in + c0 + (size_t)j * s->ldc, 1, (size_t)s->m);
  }
  char *dA = dev_copy(A, na, ea), *dB = dev_copy(B, nb, ea), *dC = dev_copy(C0, nc, ec);
  /* piece (r, c): rows [m0, m1) and columns [n0, n1) of every matrix */
  for (int r = 0; r < row_pieces; r++)
    for (int c = 0; c < col_pieces; c++) {
      int m0 = s->m * r / row_pieces, m1 = s->m * (r + 1) / row_pieces;
      int n0 = s->n * c / col_pieces, n1 = s->n * (c + 1) / col_pieces;
      mt_gemm_shape p = *s;
      p.m = m1 - m0, p.n = n1 - n0;
      size_t a_off = s->trans_a ? (size_t)m0 * s->lda : (size_t)m0;
      size_t b_off = s->trans_b ? (size_t)n0 : (size_t)n0 * s->ldb;
      size_t c_off = (size_t)n0 * s->ldc + m0;
      if (mt_cuda_gemm_strided(&p, dA + a_off * ea, dB + b_off * ea, (char *)dC + c_off * ec)) {
        mt_check_true("mt_cuda_gemm_strided runs", 0);
        return;
      }
    }
  void *got = host_bytes(dC, nc * ec);
  char what[200];
  snprintf(what, sizeof what,
           "gemm %s->%s tA=%d tB=%d m=%d n=%d k=%d lda=%d ldb=%d ldc=%d batch=%d strides "
           "%lld,%lld,%lld beta=%g pieces %dx%d",
           s->ab == BF16 ? "bf16" : "fp32", s->cd == BF16 ? "bf16" : "fp32", s->trans_a,
           s->trans_b, s->m, s->n, s->k, s->lda, s->ldb, s->ldc, s->batch, s->stride_a,
           s->stride_b, s->stride_c, s->beta, row_pieces, col_pieces);
  mt_check_err(what, compare(got, C0, ref, in, nc, s->cd), s->cd == BF16 ? 8e-3 : 1e-5);
  dfree(dA, na * ea), dfree(dB, nb * ea), dfree(dC, nc * ec);
  free(A), free(B), free(C0), free(ref), free(in), free(got);
}

/* the shape m x n x k with every ld `pad` past its rows and batch strides
 * `gap` past a matrix */
static mt_gemm_shape shape(mt_dtype ab, mt_dtype cd, int ta, int tb, int m, int n, int k,
                           int pad, int batch, int gap, float beta) {
  mt_gemm_shape s = {0};
  s.trans_a = ta, s.trans_b = tb, s.m = m, s.n = n, s.k = k, s.batch = batch;
  s.lda = (ta ? k : m) + pad, s.ldb = (tb ? n : k) + pad + 2, s.ldc = m + pad + 4;
  s.stride_a = (long long)s.lda * (ta ? m : k) + gap;
  s.stride_b = (long long)s.ldb * (tb ? k : n) + gap + 1;
  s.stride_c = (long long)s.ldc * n + gap + 3;
  s.alpha = 0.75f, s.beta = beta, s.ab = ab, s.cd = cd;
  return s;
}

int main(int argc, char **argv) {
  /* (gpu_compare.h's cpu table is set too; the reference here is this file's own) */
  int bf16, rc = gpu_compare_start(&argc, &argv, "gpu_gemm_ld", 4545, &bf16);
  if (rc != 0) return rc;
  const mt_dtype types[3][2] = {{F32, F32}, {BF16, F32}, {BF16, BF16}};
  for (int t = 0; t < 3; t++) {
    mt_dtype ab = types[t][0], cd = types[t][1];
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        /* one matrix, every ld padded; a batch of three with gaps */
        run_case(shape(ab, cd, ta, tb, 13, 9, 11, 3, 1, 0, 0.0f), 1, 1);
        run_case(shape(ab, cd, ta, tb, 13, 9, 11, 5, 3, 7, 0.5f), 1, 1);
      }
    /* in pieces: each piece's m (or n) short of the output's, one matrix
     * and a batch */
    run_case(shape(ab, cd, 1, 0, 29, 10, 17, 0, 1, 0, 0.0f), 3, 1);
    run_case(shape(ab, cd, 0, 0, 29, 10, 17, 2, 2, 5, 0.5f), 2, 3);
    run_case(shape(ab, cd, 0, 1, 16, 24, 8, 0, 1, 0, 0.0f), 1, 4);
  }
  return gpu_compare_finish("gpu_gemm_ld");
}
