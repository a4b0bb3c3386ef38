/* bf16 dot products on AVX512-BF16 (vdpbf16ps) straight from bf16 rows:
 * the products of attention (S = scale q k^T, dP = dout v^T on the bf16
 * rows; O += P v, dV += P^T dout, dQ += scale dS k, dK += scale dS^T q with
 * P and dS rounded to bf16 once), used where the process's bf16 matmuls run on oneDNN on a
 * CPU with AVX512-BF16 (mt_bf16_gemm_path: vdpbf16ps at full rate, e.g. AMD
 * Zen 4 at 2.0x the fp32 FMA flops) and the head size is even.
 * vdpbf16ps treats denormal inputs as zero and flushes denormal results to
 * zero; bf16 q, k, v, dout and the scores come nowhere near fp32's
 * denormals (below 1.2e-38), so this costs nothing in practice. Each (row,
 * column) of the result is one accumulator's sum over the depth in a fixed
 * order: the same bits at any thread count. */
#include "kernels/cpu/cpu_internal.h"

#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* MT_BF16_ATTN=widened keeps attention on the widened fp32 products (P
 * and dS unrounded) whatever the matmuls run on: the GPU tests' CPU
 * reference, since the CUDA kernels keep P and dS in fp32 as that path does */
int mt_cpu_dot_bf16_usable(int hs) {
  const char *attn = getenv("MT_BF16_ATTN");
  return hs > 0 && hs % 2 == 0 && !strcmp(mt_bf16_gemm_path(), "onednn") &&
         mt_cpu_bf16_level() >= 1 && !(attn && !strcmp(attn, "widened"));
}

#define DP_NR 8         /* rows of a microkernel tile */
#define DP_NC MT_DOT_NC /* columns of a microkernel tile: two zmm */

void mt_cpu_dot_pack_pairs(uint32_t *Bp, size_t ldp, const mt_bf16 *B, size_t ldb, int cols,
                           int np) {
  const int cend = mt_dot_round_nc(cols);
  for (int c = 0; c < cols; c++) {
    const mt_bf16 *b = B + (size_t)c * ldb;
    for (int p = 0; p < np; p++) memcpy(Bp + (size_t)p * ldp + c, b + 2 * p, 4);
  }
  if (cend > cols)
    for (int p = 0; p < np; p++) memset(Bp + (size_t)p * ldp + cols, 0, (size_t)(cend - cols) * 4);
}

/* vectorised: each 16 columns of the two rows zero-extended to words, the
 * second shifted into the upper halves */
__attribute__((target("avx512f"))) void mt_cpu_dot_pack_rows(uint32_t *Bp, size_t ldp,
                                                             const mt_bf16 *B, size_t ldb, int n,
                                                             int cols) {
  const int cend = mt_dot_round_nc(cols), np = (n + 1) / 2;
  for (int p = 0; p < np; p++) {
    const int two = 2 * p + 1 < n; /* an odd n: the last pair's second row is 0 */
    const mt_bf16 *b0 = B + (size_t)(2 * p) * ldb, *b1 = two ? b0 + ldb : b0;
    uint32_t *d = Bp + (size_t)p * ldp;
    int c = 0;
    for (; c + 16 <= cols; c += 16) {
      __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(b0 + c)));
      if (two)
        w = _mm512_or_si512(w, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(
                                                     (const __m256i *)(b1 + c))),
                                                 16));
      _mm512_storeu_si512(d + c, w);
    }
    for (; c < cols; c++) d[c] = (uint32_t)b0[c] | (two ? (uint32_t)b1[c] << 16 : 0u);
    if (cend > cols) memset(d + cols, 0, (size_t)(cend - cols) * 4);
  }
}

void mt_cpu_dot_round_rows(mt_bf16 *A, size_t lda, const float *X, size_t ldx, int rows, int n) {
  for (int r = 0; r < rows; r++) {
    mt_bf16_from_f32_serial(A + (size_t)r * lda, X + (size_t)r * ldx, (size_t)n);
    if (n % 2) A[(size_t)r * lda + n] = 0;
  }
}

/* one tile: nr (<= DP_NR) rows of A against DP_NC packed columns (A's
 * word of row r, pair p at A + r ars + p aps bytes); columns
 * stored (add: added to S) where the masks say. Inlined with nr constant
 * (unrolled, the accumulators in registers). */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void
dot_tile(float *S, int lds, const char *A, size_t ars, size_t aps, const uint32_t *Bp, size_t ldp,
         int np, int nr, __mmask16 m0, __mmask16 m1, float alpha, int add) {
  __m512 acc[DP_NR][2];
#pragma GCC unroll 8
  for (int r = 0; r < nr; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int p = 0; p < np; p++) {
    const __m512i b0 = _mm512_loadu_si512(Bp + (size_t)p * ldp);
    const __m512i b1 = _mm512_loadu_si512(Bp + (size_t)p * ldp + 16);
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++) {
      uint32_t w;
      memcpy(&w, A + (size_t)r * ars + (size_t)p * aps, 4);
      const __m512i av = _mm512_set1_epi32((int)w);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)av, (__m512bh)b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)av, (__m512bh)b1);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
  if (add) {
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++) {
      float *s = S + (size_t)r * lds;
      _mm512_mask_storeu_ps(s, m0, _mm512_fmadd_ps(acc[r][0], va, _mm512_maskz_loadu_ps(m0, s)));
      _mm512_mask_storeu_ps(s + 16, m1,
                            _mm512_fmadd_ps(acc[r][1], va, _mm512_maskz_loadu_ps(m1, s + 16)));
    }
    return;
  }
#pragma GCC unroll 8
  for (int r = 0; r < nr; r++) {
    _mm512_mask_storeu_ps(S + (size_t)r * lds, m0, _mm512_mul_ps(acc[r][0], va));
    _mm512_mask_storeu_ps(S + (size_t)r * lds + 16, m1, _mm512_mul_ps(acc[r][1], va));
  }
}

/* S (rows x cols) = or += alpha A B over np pairs, A's words as dot_tile
 * says */
__attribute__((target("avx512f,avx512bf16"))) static void
dot_run(float *S, int lds, const char *A, size_t ars, size_t aps, int rows, const uint32_t *Bp,
        size_t ldp, int cols, int np, float alpha, int add) {
  for (int c0 = 0; c0 < cols; c0 += DP_NC) {
    const int nc = mt_min_int(DP_NC, cols - c0);
    const __mmask16 m0 = (__mmask16)(nc >= 16 ? 0xFFFFu : (1u << nc) - 1u);
    const __mmask16 m1 = (__mmask16)(nc >= 32 ? 0xFFFFu : nc > 16 ? (1u << (nc - 16)) - 1u : 0u);
    const uint32_t *bp = Bp + c0;
    int r0 = 0;
    for (; r0 + DP_NR <= rows; r0 += DP_NR)
      dot_tile(S + (size_t)r0 * lds + c0, lds, A + (size_t)r0 * ars, ars, aps, bp, ldp, np, DP_NR,
               m0, m1, alpha, add);
    float *s = S + (size_t)r0 * lds + c0;
    const char *a = A + (size_t)r0 * ars;
    switch (rows - r0) {
    case 7: dot_tile(s, lds, a, ars, aps, bp, ldp, np, 7, m0, m1, alpha, add); break;
    case 6: dot_tile(s, lds, a, ars, aps, bp, ldp, np, 6, m0, m1, alpha, add); break;
    case 5: dot_tile(s, lds, a, ars, aps, bp, ldp, np, 5, m0, m1, alpha, add); break;
    case 4: dot_tile(s, lds, a, ars, aps, bp, ldp, np, 4, m0, m1, alpha, add); break;
    case 3: dot_tile(s, lds, a, ars, aps, bp, ldp, np, 3, m0, m1, alpha, add); break;
    case 2: dot_tile(s, lds, a, ars, aps, bp, ldp, np, 2, m0, m1, alpha, add); break;
    case 1: dot_tile(s, lds, a, ars, aps, bp, ldp, np, 1, m0, m1, alpha, add); break;
    default: break;
    }
  }
}

void mt_cpu_dot_nt_bf16(float *S, int lds, const mt_bf16 *A, size_t lda, int rows,
                        const uint32_t *Bp, size_t ldp, int cols, int np, float alpha, int add) {
  dot_run(S, lds, (const char *)A, lda * sizeof(mt_bf16), 4, rows, Bp, ldp, cols, np, alpha, add);
}

void mt_cpu_dot_tn_bf16(float *S, int lds, const uint32_t *Ap, size_t lda, int rows,
                        const uint32_t *Bp, size_t ldp, int cols, int np, float alpha, int add) {
  dot_run(S, lds, (const char *)Ap, 4, lda * 4, rows, Bp, ldp, cols, np, alpha, add);
}
