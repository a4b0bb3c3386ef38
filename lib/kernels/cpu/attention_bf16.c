/* Attention by blocks on bf16 q, k, v (kernels.h, mt_ops_bf16): the
 * algorithm and blocking of attention_flash.c (FlashAttention-2: query
 * blocks of ATT_BR rows, key blocks of ATT_BC, online softmax, the LSE kept
 * in fp32, the backward recomputing probabilities from it). Each task
 * converts the bf16 rows it needs into fp32 blocks of its own and runs the
 * fp32 algorithm on them with cblas_sgemm (where vdpbf16ps runs at half
 * rate, sgemm on converted operands is faster than bf16 dot products: see
 * gemm_bf16.c; the exception, below); out, dq, dk, dv are rounded to bf16 once per call:
 *   out       = round(softmax(scale q k^T) v)          (fp32 until stored)
 *   dq, dk, dv = round(d + the fp32 sum of this call's key or query blocks)
 * Threading as attention_flash.c: forward one task per (batch, head, query
 * block), backward one per (batch, head) owning that head's dq, dk, dv
 * columns; the same bits at any thread count.
 *
 * The two products whose operands are both bf16, S = scale q k^T (forward
 * and backward) and dP = dout v^T (backward), run on AVX512-BF16 dot
 * products (vdpbf16ps, dot_nt_bf16 below) straight from the bf16 rows when
 * the process's bf16 matmuls run on oneDNN on a CPU with AVX512-BF16
 * (mt_bf16_gemm_path: vdpbf16ps at full rate, e.g. AMD Zen 4 at 2.0x the
 * fp32 FMA flops) and hs is even; the products with an fp32 operand (P v,
 * P^T dout, dS k, dS^T q) stay on sgemm. Elsewhere (vdpbf16ps at half rate,
 * or absent) all of them run on sgemm of converted rows as before.
 * vdpbf16ps treats denormal inputs as zero and flushes denormal results to
 * zero; bf16 q, k, v, dout and the scores come nowhere near fp32's
 * denormals (below 1.2e-38), so this costs nothing in practice. Each (row,
 * column) of S or dP is one accumulator's sum over hs in a fixed order:
 * the same bits at any thread count on either path.
 *
 * Scratch is per thread, grows to the largest request and is kept between
 * calls (freed at thread exit): at T = 1024, hs = 64 about 1.3 MiB a
 * thread; a fresh malloc of the key blocks per call (above glibc's mmap
 * threshold) faulted their pages in on every call. */
#include "kernels/cpu/bf16_internal.h"
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ATT_BR 64
#define ATT_BC 256

static inline int min_int(int a, int b) { return a < b ? a : b; }

/* keys [0, end) that some query row below i1 sees (causal: a prefix) */
static int keys_end(const mt_attn_block *a, int i1) {
  if (!a->causal) return a->Tk;
  long end = (long)a->q_pos0 + i1 - a->k_pos0;
  return end < 0 ? 0 : end > a->Tk ? a->Tk : (int)end;
}

/* how many of the keys [j0, j0 + cols) query row i sees (a prefix) */
static int keys_visible(const mt_attn_block *a, int i, int j0, int cols) {
  if (!a->causal) return cols;
  long n = (long)a->q_pos0 + i - a->k_pos0 - j0 + 1;
  return n < 0 ? 0 : n > cols ? cols : (int)n;
}

static float exp_row(float *s, int n, int cols, float shift) {
  float sum = n > 0 ? mt_cpu_row_exp(s, s, n, shift) : 0.0f;
  if (cols > n) memset(s + n, 0, (size_t)(cols - n) * sizeof(float));
  return sum;
}

/* ------------------------------------------------------------------ */
/* per-thread scratch                                                  */

/* Slots of per-thread scratch, grown to the largest request and kept (as
 * gemm_bf16.c's); a pthread key's destructor frees them when the thread
 * exits (an OpenMP team that shrinks ends threads), the main thread's stay
 * reachable through its thread-locals until the process exits. */
enum {
  SC_S, SC_DP, SC_ACC, SC_M, SC_L, SC_Q, SC_O, SC_DO, SC_K, SC_V, SC_DK, SC_DV, SC_KP, SC_VP,
  SC_SLOTS
};
static _Thread_local void *g_buf[SC_SLOTS];
static _Thread_local size_t g_buf_n[SC_SLOTS];
static pthread_key_t g_buf_key;
static pthread_once_t g_buf_once = PTHREAD_ONCE_INIT;

static void free_bufs(void *unused) {
  for (int i = 0; i < SC_SLOTS; i++) {
    free(g_buf[i]);
    g_buf[i] = NULL;
    g_buf_n[i] = 0;
  }
}

static void make_buf_key(void) {
  if (pthread_key_create(&g_buf_key, free_bufs) != 0)
    mt_die("bf16 attention: no thread-specific key for the scratch");
}

/* n bytes (64-byte aligned) of this thread's slot; contents undefined */
static void *scratch_bytes(int slot, size_t n) {
  if (n > g_buf_n[slot]) {
    pthread_once(&g_buf_once, make_buf_key);
    pthread_setspecific(g_buf_key, g_buf); /* non-NULL: the destructor runs */
    free(g_buf[slot]);
    size_t sz = (n + 63) & ~(size_t)63;
    g_buf[slot] = aligned_alloc(64, sz);
    if (!g_buf[slot]) mt_die("bf16 attention: out of memory for %zu bytes of scratch", n);
    g_buf_n[slot] = sz;
  }
  return g_buf[slot];
}

static float *scratch(int slot, size_t n) {
  return scratch_bytes(slot, (n ? n : 1) * sizeof(float));
}

/* ------------------------------------------------------------------ */
/* bf16 dot products (AVX512-BF16)                                     */

/* the dot-product path: the process's bf16 matmuls run on oneDNN because
 * the CPU has AVX512-BF16 at full rate (or AMX), and hs is even */
static int use_dp(int hs) {
  return hs > 0 && hs % 2 == 0 && !strcmp(mt_bf16_gemm_path(), "onednn") &&
         mt_cpu_bf16_level() >= 1;
}

#define DP_NR 8  /* rows of a microkernel tile */
#define DP_NC 32 /* columns of a microkernel tile: two zmm */

static inline int round_nc(int n) { return (n + DP_NC - 1) / DP_NC * DP_NC; }

/* Bp (np x ldp words) = the bf16 rows B (cols x 2 np, row stride ldb) in
 * pair-major order: Bp[p][c] = the 32-bit word of B[c][2p], B[c][2p+1];
 * columns cols .. round_nc(cols) - 1 are zero. */
static void pack_pairs(uint32_t *Bp, size_t ldp, const mt_bf16 *B, size_t ldb, int cols, int np) {
  const int cend = round_nc(cols);
  for (int c = 0; c < cols; c++) {
    const mt_bf16 *b = B + (size_t)c * ldb;
    for (int p = 0; p < np; p++) memcpy(Bp + (size_t)p * ldp + c, b + 2 * p, 4);
  }
  if (cend > cols)
    for (int p = 0; p < np; p++) memset(Bp + (size_t)p * ldp + cols, 0, (size_t)(cend - cols) * 4);
}

/* one tile: nr (<= DP_NR) rows of A against DP_NC packed columns; columns
 * stored where the masks say. Inlined with nr constant (unrolled, the
 * accumulators in registers). */
__attribute__((target("avx512f,avx512bf16"), always_inline)) static inline void
dot_tile(float *S, int lds, const mt_bf16 *A, size_t lda, const uint32_t *Bp, size_t ldp, int np,
         int nr, __mmask16 m0, __mmask16 m1, float alpha) {
  __m512 acc[DP_NR][2];
#pragma GCC unroll 8
  for (int r = 0; r < nr; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int p = 0; p < np; p++) {
    const __m512i b0 = _mm512_loadu_si512(Bp + (size_t)p * ldp);
    const __m512i b1 = _mm512_loadu_si512(Bp + (size_t)p * ldp + 16);
#pragma GCC unroll 8
    for (int r = 0; r < nr; r++) {
      uint32_t w;
      memcpy(&w, A + (size_t)r * lda + 2 * (size_t)p, 4);
      const __m512i av = _mm512_set1_epi32((int)w);
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)av, (__m512bh)b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)av, (__m512bh)b1);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < nr; r++) {
    _mm512_mask_storeu_ps(S + (size_t)r * lds, m0, _mm512_mul_ps(acc[r][0], va));
    _mm512_mask_storeu_ps(S + (size_t)r * lds + 16, m1, _mm512_mul_ps(acc[r][1], va));
  }
}

/* S[r][c] = alpha sum_d A[r][d] B[c][d] (r < rows, c < cols, d < 2 np) for
 * bf16 rows A (row stride lda) and B packed by pack_pairs (Bp, ldp >=
 * round_nc(cols)); fp32 S (row stride lds). */
__attribute__((target("avx512f,avx512bf16"))) static void
dot_nt_bf16(float *S, int lds, const mt_bf16 *A, size_t lda, int rows, const uint32_t *Bp,
            size_t ldp, int cols, int np, float alpha) {
  for (int c0 = 0; c0 < cols; c0 += DP_NC) {
    const int nc = min_int(DP_NC, cols - c0);
    const __mmask16 m0 = (__mmask16)(nc >= 16 ? 0xFFFFu : (1u << nc) - 1u);
    const __mmask16 m1 = (__mmask16)(nc >= 32 ? 0xFFFFu : nc > 16 ? (1u << (nc - 16)) - 1u : 0u);
    const uint32_t *bp = Bp + c0;
    int r0 = 0;
    for (; r0 + DP_NR <= rows; r0 += DP_NR)
      dot_tile(S + (size_t)r0 * lds + c0, lds, A + (size_t)r0 * lda, lda, bp, ldp, np, DP_NR, m0,
               m1, alpha);
    float *s = S + (size_t)r0 * lds + c0;
    const mt_bf16 *a = A + (size_t)r0 * lda;
    switch (rows - r0) {
    case 7: dot_tile(s, lds, a, lda, bp, ldp, np, 7, m0, m1, alpha); break;
    case 6: dot_tile(s, lds, a, lda, bp, ldp, np, 6, m0, m1, alpha); break;
    case 5: dot_tile(s, lds, a, lda, bp, ldp, np, 5, m0, m1, alpha); break;
    case 4: dot_tile(s, lds, a, lda, bp, ldp, np, 4, m0, m1, alpha); break;
    case 3: dot_tile(s, lds, a, lda, bp, ldp, np, 3, m0, m1, alpha); break;
    case 2: dot_tile(s, lds, a, lda, bp, ldp, np, 2, m0, m1, alpha); break;
    case 1: dot_tile(s, lds, a, lda, bp, ldp, np, 1, m0, m1, alpha); break;
    default: break;
    }
  }
}

/* rows x hs bf16 rows with stride rs -> contiguous fp32 (ld hs) */
static void load_rows(float *dst, const mt_bf16 *src, size_t rs, int rows, int hs) {
  for (int r = 0; r < rows; r++) mt_bf16_to_f32_serial(dst + (size_t)r * hs, src + r * rs, hs);
}

/* dst rows = round(dst + add), add contiguous fp32 (ld hs) */
static void add_rows(mt_bf16 *dst, size_t rs, const float *add, int rows, int hs) {
  for (int r = 0; r < rows; r++) {
    mt_bf16 *d = dst + r * rs;
    const float *x = add + (size_t)r * hs;
    for (int c = 0; c < hs; c++) d[c] = mt_bf16_from_f32(mt_bf16_to_f32(d[c]) + x[c]);
  }
}

/* ------------------------------------------------------------------ */
/* forward                                                             */

typedef struct {
  float *S, *acc, *m, *l, *Q, *K, *V; /* Q, K: the sgemm path only */
  uint32_t *Kp;                       /* the dot-product path: a key block packed */
  int dp;                             /* S on bf16 dot products (use_dp) */
} fwd_scratch;

static void forward_task(const mt_attn_block *a, mt_bf16 *out, float *lse, const mt_bf16 *q,
                         const mt_bf16 *k, const mt_bf16 *v, int b, int h, int i0,
                         const fwd_scratch *w) {
  const int hs = a->hs, i1 = min_int(i0 + ATT_BR, a->Tq), rows = i1 - i0;
  const float scale = 1.0f / sqrtf((float)hs);
  const mt_bf16 *kb = k + (size_t)b * a->k_bs + (size_t)h * hs;
  const mt_bf16 *vb = v + (size_t)b * a->v_bs + (size_t)h * hs;
  const mt_bf16 *qb = q + (size_t)b * a->q_bs + (size_t)i0 * a->q_rs + (size_t)h * hs;
  if (!w->dp) load_rows(w->Q, qb, a->q_rs, rows, hs);
  for (int r = 0; r < rows; r++) {
    w->m[r] = -FLT_MAX;
    w->l[r] = 0.0f;
  }
  memset(w->acc, 0, (size_t)rows * hs * sizeof(float));
  const int kend = keys_end(a, i1);
  for (int j0 = 0; j0 < kend; j0 += ATT_BC) {
    const int cols = min_int(ATT_BC, kend - j0);
    if (w->dp) {
      pack_pairs(w->Kp, ATT_BC, kb + (size_t)j0 * a->k_rs, a->k_rs, cols, hs / 2);
      dot_nt_bf16(w->S, ATT_BC, qb, a->q_rs, rows, w->Kp, ATT_BC, cols, hs / 2, scale);
    } else {
      load_rows(w->K, kb + (size_t)j0 * a->k_rs, a->k_rs, cols, hs);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, w->Q, hs, w->K,
                  hs, 0.0f, w->S, ATT_BC);
    }
    load_rows(w->V, vb + (size_t)j0 * a->v_rs, a->v_rs, cols, hs);
    for (int r = 0; r < rows; r++) {
      float *s = w->S + (size_t)r * ATT_BC;
      const int vis = keys_visible(a, i0 + r, j0, cols);
      if (vis == 0) {
        memset(s, 0, (size_t)cols * sizeof(float));
        continue;
      }
      float mx = mt_cpu_row_max(s, vis), m_new = mx > w->m[r] ? mx : w->m[r];
      float corr = mt_cpu_exp(w->m[r] - m_new);
      w->l[r] = w->l[r] * corr + exp_row(s, vis, cols, m_new);
      w->m[r] = m_new;
      if (corr != 1.0f) {
        float *ar = w->acc + (size_t)r * hs;
        for (int d = 0; d < hs; d++) ar[d] *= corr;
      }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, 1.0f, w->S, ATT_BC,
                w->V, hs, 1.0f, w->acc, hs);
  }
  for (int r = 0; r < rows; r++) {
    mt_bf16 *o = out + (size_t)b * a->o_bs + (size_t)(i0 + r) * a->o_rs + (size_t)h * hs;
    float *L = lse + (size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)(i0 + r);
    const float *ar = w->acc + (size_t)r * hs;
    if (w->l[r] > 0.0f) {
      float inv = 1.0f / w->l[r];
      for (int d = 0; d < hs; d++) o[d] = mt_bf16_from_f32(ar[d] * inv);
      *L = w->m[r] + logf(w->l[r]);
    } else {
      memset(o, 0, (size_t)hs * sizeof(mt_bf16));
      *L = -INFINITY;
    }
  }
}

void mt_cpu_attn_forward_bf16(const mt_attn_block *a, mt_bf16 *out, float *lse, const mt_bf16 *q,
                              const mt_bf16 *k, const mt_bf16 *v) {
  const int nqb = (a->Tq + ATT_BR - 1) / ATT_BR, ntask = a->B * a->NH * nqb;
  if (ntask == 0) return;
  const size_t hs = (size_t)a->hs;
  const int dp = use_dp(a->hs); /* once per call, the same for every task */
  int blas_threads, team = mt_cpu_blas_serial_begin(&blas_threads);
#pragma omp parallel num_threads(team)
  {
    fwd_scratch w = {.S = scratch(SC_S, (size_t)ATT_BR * ATT_BC),
                     .acc = scratch(SC_ACC, ATT_BR * hs), .m = scratch(SC_M, ATT_BR),
                     .l = scratch(SC_L, ATT_BR), .V = scratch(SC_V, ATT_BC * hs), .dp = dp};
    if (dp)
      w.Kp = scratch_bytes(SC_KP, (size_t)ATT_BC * (hs / 2) * sizeof(uint32_t));
    else
      w.Q = scratch(SC_Q, ATT_BR * hs), w.K = scratch(SC_K, ATT_BC * hs);
#pragma omp for schedule(dynamic, 1)
    for (int task = 0; task < ntask; task++) {
      int qb = task % nqb, bh = task / nqb;
      forward_task(a, out, lse, q, k, v, bh / a->NH, bh % a->NH, qb * ATT_BR, &w);
    }
  }
  mt_cpu_blas_serial_end(blas_threads);
}

/* ------------------------------------------------------------------ */
/* merge: attention_flash.c's weights (double), out rounded once       */

void mt_cpu_attn_merge_bf16(const mt_attn_block *a, mt_bf16 *out, float *lse,
                            const mt_bf16 *part, const float *part_lse) {
  const int hs = a->hs, NH = a->NH, rows = a->B * a->Tq;
#pragma omp parallel for schedule(static)
  for (int bi = 0; bi < rows; bi++) {
    int b = bi / a->Tq, i = bi % a->Tq;
    for (int h = 0; h < NH; h++) {
      size_t lo = (size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)i;
      size_t oo = (size_t)b * a->o_bs + (size_t)i * a->o_rs + (size_t)h * hs;
      float l1 = lse[lo], l2 = part_lse[lo];
      if (l2 == -INFINITY) continue;
      mt_bf16 *o = out + oo;
      const mt_bf16 *p = part + oo;
      if (l1 == -INFINITY) {
        memcpy(o, p, (size_t)hs * sizeof(mt_bf16));
        lse[lo] = l2;
        continue;
      }
      double mx = l1 > l2 ? l1 : l2;
      double w1 = exp((double)l1 - mx), w2 = exp((double)l2 - mx), s = w1 + w2;
      float c1 = (float)(w1 / s), c2 = (float)(w2 / s);
      for (int d = 0; d < hs; d++)
        o[d] = mt_bf16_from_f32(c1 * mt_bf16_to_f32(o[d]) + c2 * mt_bf16_to_f32(p[d]));
      lse[lo] = (float)(mx + log(s));
    }
  }
}

/* ------------------------------------------------------------------ */
/* backward                                                            */

typedef struct {
  float *S, *dP, *D, *L;     /* ATT_BR x ATT_BC, ATT_BR */
  float *Q, *O, *dO, *dQ;    /* ATT_BR x hs */
  float *K, *V, *dK, *dV;    /* Tk x hs (the head's visible keys); V: sgemm path only */
  uint32_t *Kp, *Vp;         /* dot-product path: hs / 2 x round_nc(Tk), pair-major */
  int dp;                    /* S and dP on bf16 dot products (use_dp) */
} bwd_scratch;

static void backward_head(const mt_attn_block *a, mt_bf16 *dq, mt_bf16 *dk, mt_bf16 *dv,
                          const mt_bf16 *dout, const mt_bf16 *out, const float *lse,
                          const mt_bf16 *q, const mt_bf16 *k, const mt_bf16 *v, int b, int h,
                          const bwd_scratch *w) {
  const int hs = a->hs;
  const float scale = 1.0f / sqrtf((float)hs);
  const size_t hoff = (size_t)h * hs;
  const int kall = keys_end(a, a->Tq); /* every key a row of this call sees */
  if (kall == 0) return;
  const size_t ldp = (size_t)round_nc(kall); /* Kp, Vp: all the head's keys packed once */
  load_rows(w->K, k + (size_t)b * a->k_bs + hoff, a->k_rs, kall, hs);
  if (w->dp) {
    pack_pairs(w->Kp, ldp, k + (size_t)b * a->k_bs + hoff, a->k_rs, kall, hs / 2);
    pack_pairs(w->Vp, ldp, v + (size_t)b * a->v_bs + hoff, a->v_rs, kall, hs / 2);
  } else {
    load_rows(w->V, v + (size_t)b * a->v_bs + hoff, a->v_rs, kall, hs);
  }
  memset(w->dK, 0, (size_t)kall * hs * sizeof(float));
  memset(w->dV, 0, (size_t)kall * hs * sizeof(float));
  for (int i0 = 0; i0 < a->Tq; i0 += ATT_BR) {
    const int i1 = min_int(i0 + ATT_BR, a->Tq), rows = i1 - i0;
    const int kend = keys_end(a, i1);
    if (kend == 0) continue;
    const size_t qoff = (size_t)b * a->q_bs + (size_t)i0 * a->q_rs + hoff;
    const size_t ooff = (size_t)b * a->o_bs + (size_t)i0 * a->o_rs + hoff;
    load_rows(w->Q, q + qoff, a->q_rs, rows, hs);
    load_rows(w->O, out + ooff, a->o_rs, rows, hs);
    load_rows(w->dO, dout + ooff, a->o_rs, rows, hs);
    memset(w->dQ, 0, (size_t)rows * hs * sizeof(float));
    for (int r = 0; r < rows; r++) {
      const float *o = w->O + (size_t)r * hs, *dy = w->dO + (size_t)r * hs;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int d = 0; d < hs; d++) dot += o[d] * dy[d];
      w->D[r] = dot;
      w->L[r] = lse[(size_t)b * a->l_bs + (size_t)h * a->l_hs + (size_t)(i0 + r)];
    }
    for (int j0 = 0; j0 < kend; j0 += ATT_BC) {
      const int cols = min_int(ATT_BC, kend - j0);
      const float *Kj = w->K + (size_t)j0 * hs;
      if (w->dp)
        dot_nt_bf16(w->S, ATT_BC, q + qoff, a->q_rs, rows, w->Kp + j0, ldp, cols, hs / 2, scale);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, scale, w->Q, hs, Kj,
                    hs, 0.0f, w->S, ATT_BC);
      for (int r = 0; r < rows; r++) {
        float *s = w->S + (size_t)r * ATT_BC;
        int vis = w->L[r] == -INFINITY ? 0 : keys_visible(a, i0 + r, j0, cols);
        exp_row(s, vis, cols, w->L[r] == -INFINITY ? 0.0f : w->L[r]);
      }
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, 1.0f, w->S, ATT_BC,
                  w->dO, hs, 1.0f, w->dV + (size_t)j0 * hs, hs);
      if (w->dp)
        dot_nt_bf16(w->dP, ATT_BC, dout + ooff, a->o_rs, rows, w->Vp + j0, ldp, cols, hs / 2,
                    1.0f);
      else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, hs, 1.0f, w->dO, hs,
                    w->V + (size_t)j0 * hs, hs, 0.0f, w->dP, ATT_BC);
      for (int r = 0; r < rows; r++) {
        const float *p = w->S + (size_t)r * ATT_BC;
        float *ds = w->dP + (size_t)r * ATT_BC, Dr = w->D[r];
#pragma omp simd
        for (int c = 0; c < cols; c++) ds[c] = p[c] * (ds[c] - Dr);
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hs, cols, scale, w->dP, ATT_BC,
                  Kj, hs, 1.0f, w->dQ, hs);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hs, rows, scale, w->dP, ATT_BC,
                  w->Q, hs, 1.0f, w->dK + (size_t)j0 * hs, hs);
    }
    add_rows(dq + qoff, a->q_rs, w->dQ, rows, hs);
  }
  add_rows(dk + (size_t)b * a->k_bs + hoff, a->k_rs, w->dK, kall, hs);
  add_rows(dv + (size_t)b * a->v_bs + hoff, a->v_rs, w->dV, kall, hs);
}

void mt_cpu_attn_backward_bf16(const mt_attn_block *a, mt_bf16 *dq, mt_bf16 *dk, mt_bf16 *dv,
                               const mt_bf16 *dout, const mt_bf16 *out, const float *lse,
                               const mt_bf16 *q, const mt_bf16 *k, const mt_bf16 *v) {
  const int nhead = a->B * a->NH;
  if (nhead == 0 || a->Tq == 0 || a->Tk == 0) return;
  const size_t hs = (size_t)a->hs, tk = (size_t)a->Tk;
  const int dp = use_dp(a->hs); /* once per call, the same for every task */
  int blas_threads, team = mt_cpu_blas_serial_begin(&blas_threads);
#pragma omp parallel num_threads(team)
  {
    bwd_scratch w = {.S = scratch(SC_S, (size_t)ATT_BR * ATT_BC),
                     .dP = scratch(SC_DP, (size_t)ATT_BR * ATT_BC), .D = scratch(SC_M, ATT_BR),
                     .L = scratch(SC_L, ATT_BR), .Q = scratch(SC_Q, ATT_BR * hs),
                     .O = scratch(SC_O, ATT_BR * hs), .dO = scratch(SC_DO, ATT_BR * hs),
                     .dQ = scratch(SC_ACC, ATT_BR * hs), .K = scratch(SC_K, tk * hs),
                     .dK = scratch(SC_DK, tk * hs), .dV = scratch(SC_DV, tk * hs), .dp = dp};
    if (dp) {
      size_t np = hs / 2, ldp = (size_t)round_nc(a->Tk);
      w.Kp = scratch_bytes(SC_KP, np * ldp * sizeof(uint32_t));
      w.Vp = scratch_bytes(SC_VP, np * ldp * sizeof(uint32_t));
    } else {
      w.V = scratch(SC_V, tk * hs);
    }
#pragma omp for schedule(static)
    for (int bh = 0; bh < nhead; bh++)
      backward_head(a, dq, dk, dv, dout, out, lse, q, k, v, bh / a->NH, bh % a->NH, &w);
  }
  mt_cpu_blas_serial_end(blas_threads);
}
