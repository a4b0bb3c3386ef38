/* Attention by blocks on the CPU (FlashAttention-2, Dao 2023), over the
 * storage type of q, k, v and out (bodies in attention_t.h, instantiated
 * for float and bf16 by typed.h): queries in blocks of ATT_BR rows, keys in
 * blocks of ATT_BC, an online softmax per query row, and only the output
 * and the row's log-sum-exp (LSE, fp32) kept; the backward recomputes the
 * probabilities from the LSE. Memory: O(rows) per call plus per-thread
 * scratch, never T x T.
 *
 * Products on blocks go to cblas_sgemm (single-threaded inside a parallel
 * region, see mt_cpu_blas_serial_begin) on fp32 rows: an fp32 tensor's rows
 * where they are (through their strides), a bf16 tensor's widened into
 * blocks of the task's own. Where the process's bf16 matmuls run on oneDNN
 * on a CPU with AVX512-BF16 (dot_bf16.c; MT_BF16_GEMM=sgemm, or
 * mt_bf16_gemm_select("sgemm"), keeps the widened fp32 products), every
 * bf16 product runs instead on vdpbf16ps dot products, accumulated in fp32:
 * S = scale q k^T and dP = dout v^T straight from the bf16 rows, and
 * O += P v, dV += P^T dout, dQ += scale dS k, dK += scale dS^T q with the
 * fp32 intermediates P and dS rounded to bf16 once for the product, as GPU
 * flash attention does (the online softmax, the LSE, D and every
 * accumulator stay fp32). The row maximum and the exp-and-sum loops are
 * rows_cpu.c's vectorised ones. Results are accumulated in fp32 and stored
 * once per call: fp32 outputs accumulate in place, bf16 ones are rounded
 * once per call (dq, dk, dv = round(d + this call's fp32 sum)).
 *
 * Threading and determinism: the forward runs one task per (batch, head,
 * query block), each writing only its own rows; the backward one task per
 * (batch, head), which owns that head's columns of dq, dk and dv (every
 * query block of a head adds into the same dk, dv rows, so splitting a head
 * would race or need a reduction). Either way a result does not depend on
 * which thread ran a task: the same bits at any thread count. */
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* Query rows per task and keys per block. The S block (ATT_BR x ATT_BC
 * floats, 64 KiB) and the task's q, k, v rows stay in L2. Causality costs
 * no extra work for wide key blocks (a block's columns end at the last
 * query row's position), and each sgemm call re-packs its operands, so
 * fewer, longer calls are cheaper: 64 x 256 took 3% fewer instructions than
 * 64 x 128 at T = 1024 (callgrind) and was as fast or faster in timings. */
#define ATT_BR 64
#define ATT_BC 256

/* the per-thread scratch slots (mt_cpu_scratch) */
enum {
  SC_S, SC_DP, SC_ACC, SC_M, SC_L, SC_Q, SC_O, SC_DO, SC_K, SC_V, SC_DK, SC_DV, SC_KP, SC_VP,
  SC_PB, SC_PW
};

static float *scratch(int slot, size_t n) { return mt_cpu_scratch(slot, n * sizeof(float)); }

/* Keys [0, end) of the block that some query row below i1 can see (a
 * prefix: under causality row i sees keys at positions <= its own). */
static int keys_end(const mt_attn_block *a, int i1) {
  if (!a->causal) return a->Tk;
  long end = (long)a->q_pos0 + i1 - a->k_pos0; /* keys with position <= that of row i1-1 */
  return end < 0 ? 0 : end > a->Tk ? a->Tk : (int)end;
}

/* The first key of the block that query row i of sequence b may see (its
 * document's first position, relative to key row 0; may lie outside the
 * block). Rows later in a sequence begin no earlier. */
static long row_lo(const mt_attn_block *a, int b, int i) {
  return a->q_lo ? (long)a->q_lo[(size_t)b * a->lo_bs + (size_t)i] - a->k_pos0 : 0;
}

/* Where the key blocks of query rows [i0, ...) start: at the first key
 * row i0 sees, rounded down to a multiple of MT_DOT_NC (the packed keys of
 * the bf16 dot products are read in whole groups of that many columns;
 * the keys before the row's first are masked like any other) */
static int keys_begin(const mt_attn_block *a, int b, int i0) {
  long lo = row_lo(a, b, i0);
  lo = lo < 0 ? 0 : lo > a->Tk ? a->Tk : lo;
  return (int)(lo / MT_DOT_NC * MT_DOT_NC);
}

/* The keys of [j0, j0 + cols) that query row i of sequence b sees: an
 * interval, *lo and the count returned (0: none) */
static int keys_visible(const mt_attn_block *a, int b, int i, int j0, int cols, int *lo) {
  long hi = a->causal ? (long)a->q_pos0 + i - a->k_pos0 - j0 + 1 : cols;
  long l = row_lo(a, b, i) - j0;
  hi = hi > cols ? cols : hi;
  l = l < 0 ? 0 : l;
  *lo = l > cols ? cols : (int)l;
  return hi > l ? (int)(hi - l) : 0;
}

/* s[c] = exp(s[c] - shift) for lo <= c < lo + n, zero for the other c <
 * cols; returns the sum */
static float exp_row(float *s, int lo, int n, int cols, float shift) {
  float sum = n > 0 ? mt_cpu_row_exp(s + lo, s + lo, n, shift) : 0.0f;
  if (lo > 0) memset(s, 0, (size_t)lo * sizeof(float));
  if (cols > lo + n) memset(s + lo + n, 0, (size_t)(cols - lo - n) * sizeof(float));
  return sum;
}

/* what a forward task works in: S (ATT_BR x ATT_BC), acc (ATT_BR x hs), m
 * and l (ATT_BR); for bf16 also the widened rows Q (ATT_BR x hs), K and V
 * (ATT_BC x hs), or on the dot-product path a key block packed in pairs
 * along hs (Kp) and in pairs of keys (Vr), and P rounded to bf16 (Pb) */
typedef struct {
  float *S, *acc, *m, *l, *Q, *K, *V;
  uint32_t *Kp, *Vr;
  mt_bf16 *Pb;
  int dp; /* every product on bf16 dot products (mt_cpu_dot_bf16_usable) */
} fwd_scratch;

/* what a backward task works in: S and dP (ATT_BR x ATT_BC), D and L
 * (ATT_BR); for bf16 also the widened rows O, dO and the accumulator dQ
 * (ATT_BR x hs), the accumulators dK, dV (Tk x hs), and either the widened
 * Q (ATT_BR x hs), K and V (Tk x hs), or on the dot-product path K and V
 * packed once in pairs along hs (Kp, Vp) and K in pairs of keys (Kr), q
 * and dout in pairs of rows (Qr, dOr), and P or dS rounded to bf16 as rows
 * (Pb, ATT_BR x ATT_BC) and then packed in pairs of rows (Pw, ATT_BR / 2 x
 * ATT_BC words: the transposed operand of dV and dK) */
typedef struct {
  float *S, *dP, *D, *L;
  float *Q, *O, *dO, *dQ;
  float *K, *V, *dK, *dV;
  uint32_t *Kp, *Vp, *Kr, *Qr, *dOr;
  mt_bf16 *Pb;
  uint32_t *Pw;
  int dp;    /* every product on bf16 dot products */
  int first; /* attn_backward_first: dq, dk, dv written, not accumulated */
} bwd_scratch;

#define MT_TYPED_BODY "kernels/cpu/attention_t.h"
#include "kernels/cpu/typed.h"
