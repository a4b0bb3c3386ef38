/* gpu_edges: the CUDA backend's ops at the edges of their shapes, against
 * the CPU backend (gpu_ops covers the bulk; this is where a kernel's
 * bounds, masks and tiles end):
 *   - a matmul without terms (C = 0: out = bias, or 0);
 *   - channel counts C in {1, 7, 31, 33} (under, at and over a warp) for
 *     layernorm, the matmuls (both ways; N = 1 and 7; OC 1, 7, 33; a bias
 *     at a 4-byte-aligned address, which takes the bias-first path), the
 *     encoder, the elementwise ops and the row gathers;
 *   - every attention head size from 1 to 256 (each tile shape and every
 *     partial row of 16-channel steps), forward and backward, plus Tq = 1,
 *     Tk = 1, and blocks whose rows see no key (out 0, lse -inf, and the
 *     backward adds nothing for them), and the merge of such rows;
 *   - a vocabulary of one (V = 1) for the loss and its vocabulary-parallel
 *     pieces; MoE routing with E = 1 and k = 1, and a combine over C = 1.
 * Error: max |gpu - cpu| / max |cpu|; NaN fails. Tolerances: 1e-5 for fp32
 * ops, exact for the copies and gathers; matmuls under bf16 5e-2 (gpu_ops:
 * 2e-2): both operands rounded to bf16 (2^-8 relative each) and products
 * of one to 33 terms whose sum may cancel, against the output's largest
 * entry, as seen at N=7 C=1 OC=1 (2.1e-2).
 *
 *   gpu_edges fp32|bf16
 *
 * No GPU: prints "SKIP: <reason>" and exits 77. */
#include "gpu_compare.h"

static double TOL_MM;
#define TOL 1e-5

static const int CS[] = {1, 7, 31, 33};
#define NCS ((int)(sizeof CS / sizeof CS[0]))

static void free_all(float **h, float **d, const size_t *n, int k) {
  for (int i = 0; i < k; i++) {
    free(h[i]);
    dfree(d[i], n[i] * sizeof(float));
  }
}

static void test_layernorm(int N, int C) {
  char w[96];
  size_t n = (size_t)N * C;
  enum { X, WT, BS, OUT, MEAN, RSTD, DOUT, DINP, DW, DB, K };
  size_t ns[K] = {n, (size_t)C, (size_t)C, n, (size_t)N, (size_t)N, n, n, (size_t)C, (size_t)C};
  float *h[K], *d[K];
  for (int i = 0; i < K; i++) h[i] = rnd(ns[i], -1, 1), d[i] = dev(h[i], ns[i]);
  cpu->layernorm_forward(F32, h[OUT], h[MEAN], h[RSTD], h[X], h[WT], h[BS], N, C);
  gpu->layernorm_forward(F32, d[OUT], d[MEAN], d[RSTD], d[X], d[WT], d[BS], N, C);
  snprintf(w, sizeof w, "layernorm_forward N=%d C=%d", N, C);
  CMP(w, h[OUT], d[OUT], n, TOL);
  cpu->layernorm_backward(F32, h[DINP], h[DW], h[DB], h[DOUT], h[X], h[WT], h[MEAN], h[RSTD], N, C);
  gpu->layernorm_backward(F32, d[DINP], d[DW], d[DB], d[DOUT], d[X], d[WT], d[MEAN], d[RSTD], N, C);
  snprintf(w, sizeof w, "layernorm_backward dinp, dw, db N=%d C=%d", N, C);
  mt_check_err(w, mt_worst(mt_worst(err_of(h[DINP], d[DINP], n), err_of(h[DW], d[DW], (size_t)C)),
                     err_of(h[DB], d[DB], (size_t)C)),
         TOL);
  free_all(h, d, ns, K);
}

static void test_matmul(int N, int C, int OC) {
  char w[96];
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  enum { IN, WT, BIAS, OUT, DOUT, DINP, DW, DBIAS, K };
  /* the bias one float into its buffer: 4-byte aligned */
  size_t ns[K] = {ni, nw, (size_t)OC + 1, no, no, ni, nw, (size_t)OC};
  float *h[K], *d[K];
  for (int i = 0; i < K; i++) h[i] = rnd(ns[i], -1, 1), d[i] = dev(h[i], ns[i]);
  for (int b = 0; b < 2; b++) {
    cpu->matmul_forward(F32, h[OUT], h[IN], h[WT], b ? h[BIAS] + 1 : NULL, N, C, OC);
    gpu->matmul_forward(F32, d[OUT], d[IN], d[WT], b ? d[BIAS] + 1 : NULL, N, C, OC);
    snprintf(w, sizeof w, "matmul_forward N=%d C=%d OC=%d%s", N, C, OC,
             b ? " (bias 4-byte aligned)" : "");
    CMP(w, h[OUT], d[OUT], no, TOL_MM);
  }
  cpu->matmul_backward(F32, h[DINP], h[DW], h[DBIAS], h[DOUT], h[IN], h[WT], N, C, OC);
  gpu->matmul_backward(F32, d[DINP], d[DW], d[DBIAS], d[DOUT], d[IN], d[WT], N, C, OC);
  snprintf(w, sizeof w, "matmul_backward dinp, dw N=%d C=%d OC=%d", N, C, OC);
  mt_check_err(w, mt_worst(err_of(h[DINP], d[DINP], ni), err_of(h[DW], d[DW], nw)), TOL_MM);
  snprintf(w, sizeof w, "matmul_backward dbias N=%d OC=%d", N, OC);
  CMP(w, h[DBIAS], d[DBIAS], (size_t)OC, TOL);
  free_all(h, d, ns, K);
}

/* a product with no terms (C = 0): out = bias, or 0 (cuBLAS's k = 0:
 * C = beta C (+ bias), C never read when beta is 0) */
static void test_matmul_no_terms(void) {
  const int N = 3, OC = 5;
  float *out = rnd((size_t)N * OC, -1, 1), *bias = rnd(OC, -1, 1);
  float *d_out = dev(out, (size_t)N * OC), *d_bias = dev(bias, OC), *d_w = dev(bias, 1);
  for (int b = 1; b >= 0; b--) {
    /* the expectation written out (the CPU's sgemm refuses lda = 0) */
    for (int n = 0; n < N; n++)
      for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] = b ? bias[o] : 0.0f;
    gpu->matmul_forward(F32, d_out, d_bias, d_w, b ? d_bias : NULL, N, 0, OC);
    CMP(b ? "matmul_forward C=0: out = bias" : "matmul_forward C=0: out = 0", out, d_out,
        (size_t)N * OC, 0.0);
  }
  dfree(d_out, (size_t)N * OC * 4), dfree(d_bias, OC * 4), dfree(d_w, 4);
  free(out), free(bias);
}

static void test_encoder_and_rows(int C) {
  char w[96];
  const int B = 2, T = 3, V = 5, Vp = 8, BT = B * T;
  int inp[6] = {0, 4, 4, 1, 0, 4};
  int *d_inp = devi(inp, BT);
  enum { WTE, WPE, OUT, DOUT, DWTE, DWPE, X, Y, K };
  size_t ns[K] = {(size_t)Vp * C, (size_t)T * C, (size_t)BT * C, (size_t)BT * C,
                  (size_t)Vp * C, (size_t)T * C, (size_t)C, (size_t)C};
  float *h[K], *d[K];
  for (int i = 0; i < K; i++) h[i] = rnd(ns[i], -1, 1), d[i] = dev(h[i], ns[i]);
  cpu->encoder_forward(F32, h[OUT], inp, h[WTE], h[WPE], B, T, C);
  gpu->encoder_forward(F32, d[OUT], d_inp, d[WTE], d[WPE], B, T, C);
  snprintf(w, sizeof w, "encoder_forward C=%d (exact)", C);
  CMP(w, h[OUT], d[OUT], ns[OUT], 0.0);
  cpu->encoder_backward(F32, h[DWTE], h[DWPE], h[DOUT], inp, B, T, C);
  gpu->encoder_backward(F32, d[DWTE], d[DWPE], d[DOUT], d_inp, B, T, C);
  snprintf(w, sizeof w, "encoder_backward C=%d (the CPU's order: exact)", C);
  mt_check_err(w, mt_worst(err_of(h[DWTE], d[DWTE], ns[DWTE]), err_of(h[DWPE], d[DWPE], ns[DWPE])), 0);
  (void)V;
  /* elementwise over C elements */
  cpu->gelu_forward(F32, h[Y], h[X], (size_t)C);
  gpu->gelu_forward(F32, d[Y], d[X], (size_t)C);
  snprintf(w, sizeof w, "gelu_forward n=%d", C);
  CMP(w, h[Y], d[Y], (size_t)C, TOL);
  cpu->residual_forward(F32, h[Y], h[X], h[Y], (size_t)C);
  gpu->residual_forward(F32, d[Y], d[X], d[Y], (size_t)C);
  snprintf(w, sizeof w, "residual_forward n=%d", C);
  CMP(w, h[Y], d[Y], (size_t)C, TOL);
  /* rows: gather, 2D copy of one column and of every column */
  int idx[3] = {5, 0, 5};
  int *d_idx = devi(idx, 3);
  cpu->gather_rows(F32, h[DOUT], h[OUT], idx, 3, C);
  gpu->gather_rows(F32, d[DOUT], d[OUT], d_idx, 3, C);
  snprintf(w, sizeof w, "gather_rows C=%d (exact)", C);
  CMP(w, h[DOUT], d[DOUT], (size_t)3 * C, 0.0);
  cpu->copy_2d(F32, h[DOUT], (size_t)C, h[OUT] + C - 1, (size_t)C, (size_t)BT, 1);
  gpu->copy_2d(F32, d[DOUT], (size_t)C, d[OUT] + C - 1, (size_t)C, (size_t)BT, 1);
  cpu->add_2d(F32, h[DOUT], (size_t)C, h[OUT], (size_t)C, 1, (size_t)C);
  gpu->add_2d(F32, d[DOUT], (size_t)C, d[OUT], (size_t)C, 1, (size_t)C);
  snprintf(w, sizeof w, "copy_2d one column, add_2d one row C=%d (exact)", C);
  CMP(w, h[DOUT], d[DOUT], ns[DOUT], 0.0);
  dfree(d_inp, (size_t)BT * sizeof(int));
  dfree(d_idx, 3 * sizeof(int));
  free_all(h, d, ns, K);
}

/* one vocabulary entry: every row's probability is 1 and its loss 0 */
static void test_vocab_of_one(int N) {
  char w[96];
  const int V = 1, Vp = 64;
  size_t n = (size_t)N * Vp;
  int *tgt = calloc((size_t)N, sizeof(int));
  int *d_tgt = devi(tgt, (size_t)N);
  enum { LG, PR, LS, K };
  size_t ns[K] = {n, n, (size_t)N};
  float *h[K], *d[K];
  for (int i = 0; i < K; i++) h[i] = rnd(ns[i], -3, 3), d[i] = dev(h[i], ns[i]);
  cpu->softmax_xent_forward(F32, h[LS], h[PR], h[LG], tgt, N, V, Vp);
  gpu->softmax_xent_forward(F32, d[LS], d[PR], d[LG], d_tgt, N, V, Vp);
  snprintf(w, sizeof w, "softmax_xent_forward V=1 N=%d: losses", N);
  CMP(w, h[LS], d[LS], (size_t)N, TOL);
  snprintf(w, sizeof w, "softmax_xent_forward V=1 N=%d: probs (1, then 0 on padding)", N);
  CMP(w, h[PR], d[PR], n, TOL);
  cpu->softmax_xent_backward(F32, h[PR], h[PR], tgt, 0.5f, N, V, Vp);
  gpu->softmax_xent_backward(F32, d[PR], d[PR], d_tgt, 0.5f, N, V, Vp);
  snprintf(w, sizeof w, "softmax_xent_backward V=1 N=%d", N);
  CMP(w, h[PR], d[PR], n, TOL);
  /* the pieces on the slice that holds the one real column, nvalid = 1 */
  float *rmax = rnd((size_t)N, 0, 1), *d_rmax = dev(rmax, (size_t)N);
  cpu->xent_vp_max(F32, rmax, h[LG], N, Vp, 1);
  gpu->xent_vp_max(F32, d_rmax, d[LG], N, Vp, 1);
  snprintf(w, sizeof w, "xent_vp_max nvalid=1 N=%d (exact)", N);
  CMP(w, rmax, d_rmax, (size_t)N, 0.0);
  dfree(d_tgt, (size_t)N * sizeof(int));
  dfree(d_rmax, (size_t)N * sizeof(float));
  free(tgt), free(rmax);
  free_all(h, d, ns, K);
}

/* MoE routing with one expert and k = 1; a combine over one channel */
static void test_moe_small(void) {
  const int N = 7, E = 1, k = 1, C = 1;
  enum { LOGITS, PROBS, LSE, TW, DTW, DLOG, Y, OUT, DY, DW, WK, K };
  size_t ns[K] = {(size_t)N * E, (size_t)N * E, (size_t)N, (size_t)N * k, (size_t)N * k,
                  (size_t)N * E, (size_t)N * C, (size_t)N * C, (size_t)N * C, (size_t)N * k,
                  (size_t)N * k};
  float *h[K], *d[K];
  for (int i = 0; i < K; i++) h[i] = rnd(ns[i], -1, 1), d[i] = dev(h[i], ns[i]);
  int *ti = calloc((size_t)N * k, sizeof(int)), *d_ti = devi(ti, (size_t)N * k);
  cpu->moe_router_forward(h[PROBS], h[LSE], ti, h[TW], h[LOGITS], NULL, N, E, k, 0);
  gpu->moe_router_forward(d[PROBS], d[LSE], d_ti, d[TW], d[LOGITS], NULL, N, E, k, 0);
  mt_check_err("moe_router_forward E=1 k=1: probs, lse, weights",
         mt_worst(mt_worst(err_of(h[PROBS], d[PROBS], ns[PROBS]), err_of(h[LSE], d[LSE], ns[LSE])),
                  err_of(h[TW], d[TW], ns[TW])),
         TOL);
  cpu->moe_router_backward(h[DLOG], h[PROBS], h[LSE], ti, h[TW], h[DTW], NULL, N, 0.01f, N, E, k,
                           0);
  gpu->moe_router_backward(d[DLOG], d[PROBS], d[LSE], d_ti, d[TW], d[DTW], NULL, N, 0.01f, N, E,
                           k, 0);
  CMP("moe_router_backward E=1 k=1", h[DLOG], d[DLOG], ns[DLOG], TOL);
  int slot[7] = {0, -1, 2, 3, -1, 5, 6};
  int *d_slot = devi(slot, (size_t)N * k);
  cpu->moe_combine(F32, h[OUT], h[Y], slot, h[WK], N, C, k);
  gpu->moe_combine(F32, d[OUT], d[Y], d_slot, d[WK], N, C, k);
  CMP("moe_combine C=1 k=1 (dropped slots)", h[OUT], d[OUT], ns[OUT], TOL);
  cpu->moe_combine_backward(F32, h[DY], h[DW], h[OUT], h[Y], slot, h[WK], N, C, k);
  gpu->moe_combine_backward(F32, d[DY], d[DW], d[OUT], d[Y], d_slot, d[WK], N, C, k);
  mt_check_err("moe_combine_backward C=1 k=1",
         mt_worst(err_of(h[DY], d[DY], ns[DY]), err_of(h[DW], d[DW], ns[DW])), TOL);
  dfree(d_ti, (size_t)N * k * sizeof(int));
  dfree(d_slot, (size_t)N * k * sizeof(int));
  free(ti);
  free_all(h, d, ns, K);
}

/* One block pair of attention: q from a (B, Tq, NH*hs) buffer, k and v
 * from their own (B, Tk, NH*hs) buffers; forward, the LSE, backward. */
static double attn_case(int B, int NH, int hs, int Tq, int Tk, int q_pos0, int k_pos0,
                        int causal, long *no_key_rows) {
  const size_t C = (size_t)NH * hs;
  mt_attn_block a = {B, NH, hs, Tq, Tk, q_pos0, k_pos0, causal,
                     (size_t)Tq * C, C, (size_t)Tk * C, C, (size_t)Tk * C, C,
                     (size_t)Tq * C, C, (size_t)NH * Tq, (size_t)Tq, NULL, 0, 0.0};
  enum { Q, KK, VV, OUT, LSE, DOUT, DQ, DK, DV, NB };
  size_t nq = (size_t)B * Tq * C, nk = (size_t)B * Tk * C, nl = (size_t)B * NH * Tq;
  size_t ns[NB] = {nq, nk, nk, nq, nl, nq, nq, nk, nk};
  float *h[NB], *d[NB];
  for (int i = 0; i < NB; i++) h[i] = rnd(ns[i], -1.5f, 1.5f), d[i] = dev(h[i], ns[i]);
  cpu->attn_forward(F32, &a, h[OUT], h[LSE], h[Q], h[KK], h[VV]);
  gpu->attn_forward(F32, &a, d[OUT], d[LSE], d[Q], d[KK], d[VV]);
  double e = err_of(h[OUT], d[OUT], nq);
  /* the LSE: -inf rows exactly -inf, finite ones relative to max(1, |ref|) */
  e = mt_worst(e, lse_err_of(h[LSE], d[LSE], nl));
  for (size_t i = 0; i < nl; i++) *no_key_rows += isinf(h[LSE][i]) != 0;
  cpu->attn_backward(F32, &a, h[DQ], h[DK], h[DV], h[DOUT], h[OUT], h[LSE], h[Q], h[KK], h[VV]);
  gpu->attn_backward(F32, &a, d[DQ], d[DK], d[DV], d[DOUT], d[OUT], d[LSE], d[Q], d[KK], d[VV]);
  e = mt_worst(e, err_of(h[DQ], d[DQ], nq));
  e = mt_worst(e, err_of(h[DK], d[DK], nk));
  e = mt_worst(e, err_of(h[DV], d[DV], nk));
  free_all(h, d, ns, NB);
  return e;
}

static void test_attention(void) {
  /* every head size, causal, a query block of 3 rows at positions 2..4 and
   * a key block of 5 at 1..5: the first row sees two keys, every row some */
  double worst = 0.0;
  int worst_hs = 0;
  long none = 0;
  for (int hs = 1; hs <= MT_CUDA_MAX_HEAD_SIZE; hs++) {
    double e = attn_case(1, hs % 3 ? 1 : 2, hs, 3, 5, 2, 1, 1, &none);
    if (!(e <= worst)) worst = e, worst_hs = hs;
  }
  char w[128];
  snprintf(w, sizeof w, "attn forward+backward, every head size 1..%d (worst at %d)",
           MT_CUDA_MAX_HEAD_SIZE, worst_hs);
  mt_check_err(w, worst, TOL);
  /* one query row, one key row; the single pair causal and not */
  long n1 = 0;
  mt_check_err("attn Tq=1 Tk=1 causal (the key at the query's position)",
         attn_case(2, 2, 8, 1, 1, 7, 7, 1, &n1), TOL);
  mt_check_err("attn Tq=1 Tk=1 not causal", attn_case(1, 3, 64, 1, 1, 0, 5, 0, &n1), TOL);
  mt_check_err("attn Tq=1 against 70 keys", attn_case(1, 2, 40, 1, 70, 69, 0, 1, &n1), TOL);
  mt_check_err("attn 70 queries against Tk=1", attn_case(1, 2, 40, 70, 1, 0, 0, 1, &n1), TOL);
  /* keys after the first queries: rows that see no key (out 0, lse -inf,
   * no gradient), at each tile shape */
  long no_key = 0;
  double e = 0.0;
  const int hss[3] = {24, 100, 200};
  for (int i = 0; i < 3; i++) e = mt_worst(e, attn_case(2, 2, hss[i], 20, 9, 0, 12, 1, &no_key));
  snprintf(w, sizeof w, "attn with %ld rows that see no key (hs 24, 100, 200)", no_key);
  mt_check_err(w, no_key > 0 ? e : 1.0, TOL);
  mt_check_err("attn where no row sees a key", attn_case(1, 1, 16, 4, 4, 0, 10, 1, &no_key), TOL);
}

/* merge: one side without keys for some rows, the other for others */
static void test_merge(void) {
  const int B = 1, NH = 2, hs = 33, T = 6;
  const size_t C = (size_t)NH * hs, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
  mt_attn_block a = {B, NH, hs, T, T, 0, 0, 1, (size_t)T * C, C, (size_t)T * C, C, (size_t)T * C,
                     C, (size_t)T * C, C, (size_t)NH * T, (size_t)T, NULL, 0, 0.0};
  float *o = rnd(no, -1, 1), *p = rnd(no, -1, 1), *l = rnd(nl, -1, 1), *pl = rnd(nl, -1, 1);
  for (size_t i = 0; i < nl; i += 3) l[i] = -INFINITY;
  for (size_t i = 1; i < nl; i += 4) pl[i] = -INFINITY;
  pl[0] = -INFINITY; /* both sides without a key */
  float *d_o = dev(o, no), *d_p = dev(p, no), *d_l = dev(l, nl), *d_pl = dev(pl, nl);
  cpu->attn_merge(F32, &a, o, l, p, pl);
  gpu->attn_merge(F32, &a, d_o, d_l, d_p, d_pl);
  mt_check_err("attn_merge with -inf on either side or both: out", err_of(o, d_o, no), TOL);
  float *gl = host_bytes(d_l, nl * sizeof(float));
  double e = 0.0;
  for (size_t i = 0; i < nl; i++)
    e = mt_worst(e, isinf(l[i]) || isinf(gl[i]) ? (l[i] == gl[i] ? 0.0 : INFINITY)
                                                : fabs((double)gl[i] - l[i]));
  mt_check_err("attn_merge lse (-inf kept where both sides are)", e, TOL);
  dfree(d_o, no * 4), dfree(d_p, no * 4), dfree(d_l, nl * 4), dfree(d_pl, nl * 4);
  free(o), free(p), free(l), free(pl), free(gl);
}

int main(int argc, char **argv) {
  int bf16, rc = gpu_compare_start(&argc, &argv, "gpu_edges", 2024, &bf16);
  if (rc != 0) return rc;
  TOL_MM = bf16 ? 5e-2 : 1e-5;
  for (int i = 0; i < NCS; i++) {
    test_layernorm(1, CS[i]);
    test_layernorm(3, CS[i]);
    test_encoder_and_rows(CS[i]);
    for (int oc = 1; oc <= 33; oc += oc == 1 ? 6 : 26) {
      test_matmul(1, CS[i], oc);
      test_matmul(7, CS[i], oc);
    }
  }
  test_matmul_no_terms();
  test_vocab_of_one(1);
  test_vocab_of_one(7);
  test_moe_small();
  test_attention();
  test_merge();
  return gpu_compare_finish("gpu_edges");
}
