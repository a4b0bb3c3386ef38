/* test_bf16_attn: bf16 block attention and bf16 cross-entropy against the
 * fp32 ops of mt_ops_cpu on the same bf16-representable inputs (tolerances
 * in test_bf16.h: the fp32 result rounded once, plus a floor for fp32 sums
 * taken in another order).
 *
 * - attn_forward on a fused (B,T,3C) qkv buffer at T = 70 (two query
 *   blocks, the last partial), causal; block pairs of context parallelism
 *   (query rows 64.. against keys 16..55; rows that see no key: out 0,
 *   LSE -inf); attn_merge of two key halves against the fp32 merge;
 *   attn_backward (dq, dk, dv accumulated onto non-zero values) from the
 *   same out and LSE; the same bits twice and at 1 and 2 threads. All of
 *   it at hs = 16, 32, 48, 64, 80, 128 and 15 (odd: always sgemm), and at
 *   T = 300 (two key blocks) at hs = 64 and 128, also with documents (each
 *   row sees its own) and causal pairs of other lengths at offsets, on both
 *   matmul paths: "sgemm" (every product on sgemm of converted rows, the
 *   fallback) and, where oneDNN is built and the CPU has AVX512-BF16,
 *   "onednn" (every product on vdpbf16ps dot products, P and dS rounded to
 *   bf16 for theirs: within the bound of rounding_bounds besides).
 * - softmax_xent forward (also in place) and backward; the vocabulary-
 *   parallel pieces on one rank give softmax_xent's bits, on two column
 *   ranges combined by hand the same losses and probabilities. */
#include "test_bf16.h"

/* tolerance floor: a few hundred fp32 roundings of the largest value (sums
 * over up to 70 keys or rows, split into blocks in another order) */
#define ORDER_FLOOR (256 * FP32_U)

/* set while the products run on vdpbf16ps with P and dS rounded to bf16
 * (path "onednn" on a CPU with AVX512-BF16, hs even) */
static int g_rounded;

/* The extra error of rounding P and dS to bf16 for their products, per
 * element: each rounded term carries a relative error of at most 2^-9, so
 * a sum over them is off by at most 2^-9 times the sum of the terms'
 * magnitudes (cancellation in the sum cannot hide it); BF16_U = 2^-8 gives
 * twice that, for P and dS themselves differing from the fp32 reference's
 * by the order of the sums. Taken in double from the fp32 reference's
 * inputs, with the block's own masks:
 *   out: u sum_c P |v|       dv: u sum_r P |dout|
 *   dq:  u scale sum_c |dS| |k|   dk: u scale sum_r |dS| |q|
 * ex_out (B,T,C) and ex_d (B,T,3C) are zeroed first. */
static void rounding_bounds(const mt_attn_block *a, int q0, int k0, int T, const float *qkv,
                            const float *dout, const float *out, const float *lse, double *ex_out,
                            double *ex_d) {
  const int hs = a->hs, C = a->NH * hs;
  const size_t r3 = 3 * (size_t)C;
  const double scale = 1.0 / sqrt((double)hs), u = BF16_U;
  memset(ex_out, 0, (size_t)a->B * T * C * sizeof(double));
  memset(ex_d, 0, (size_t)a->B * T * r3 * sizeof(double));
  double *P = test_alloc((size_t)a->Tk * sizeof(double)), *dS = test_alloc((size_t)a->Tk * 8);
  for (int b = 0; b < a->B; b++)
    for (int h = 0; h < a->NH; h++)
      for (int r = 0; r < a->Tq; r++) {
        const size_t qi = ((size_t)b * T + q0 + r) * r3 + (size_t)h * hs;
        const size_t oi = ((size_t)b * T + q0 + r) * C + (size_t)h * hs;
        const double L = lse[(size_t)b * a->NH * T + (size_t)h * T + q0 + r];
        double D = 0.0;
        for (int d = 0; d < hs; d++) D += (double)dout[oi + d] * out[oi + d];
        for (int c = 0; c < a->Tk; c++) {
          const size_t ki = ((size_t)b * T + k0 + c) * r3 + C + (size_t)h * hs;
          const long pos = (long)a->k_pos0 + c;
          int vis = isfinite(L) && (!a->causal || pos <= (long)a->q_pos0 + r);
          if (a->q_lo && pos < a->q_lo[(size_t)b * a->lo_bs + r]) vis = 0;
          double s = 0.0, dp = 0.0;
          for (int d = 0; d < hs; d++) {
            s += (double)qkv[qi + d] * qkv[ki + d];
            dp += (double)dout[oi + d] * qkv[ki + C + d];
          }
          P[c] = vis ? exp(scale * s - L) : 0.0;
          dS[c] = fabs(P[c] * (dp - D));
        }
        for (int c = 0; c < a->Tk; c++) {
          const size_t ki = ((size_t)b * T + k0 + c) * r3 + C + (size_t)h * hs;
          for (int d = 0; d < hs; d++) {
            ex_out[oi + d] += u * P[c] * fabs(qkv[ki + C + d]);
            ex_d[ki + C + d] += u * P[c] * fabs(dout[oi + d]);
            ex_d[qi + d] += u * scale * dS[c] * fabs(qkv[ki + d]);
            ex_d[ki + d] += u * scale * dS[c] * fabs(qkv[qi + d]);
          }
        }
      }
  free(P), free(dS);
}

static mt_attn_block fused_block(int B, int NH, int hs, int T, int Tq, int Tk, int q0, int k0,
                                 int causal) {
  size_t C = (size_t)NH * hs;
  return (mt_attn_block){.B = B, .NH = NH, .hs = hs, .Tq = Tq, .Tk = Tk, .q_pos0 = q0,
                         .k_pos0 = k0, .causal = causal, .q_bs = (size_t)T * 3 * C,
                         .q_rs = 3 * C, .k_bs = (size_t)T * 3 * C, .k_rs = 3 * C,
                         .v_bs = (size_t)T * 3 * C, .v_rs = 3 * C, .o_bs = (size_t)T * C,
                         .o_rs = C, .l_bs = (size_t)NH * T, .l_hs = (size_t)T};
}

/* forward + backward of one block pair in bf16 and fp32; q rows from q0,
 * key rows from k0 (offsets into the (B,T,.) buffers) */
static void check_pair(const char *what, const mt_attn_block *a, int q0, int k0,
                       const mt_bf16 *qkv, const float *qkv_f, const mt_bf16 *dout,
                       const float *dout_f, const mt_bf16 *d0, int T) {
  const int B = a->B, NH = a->NH, C = NH * a->hs;
  size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
  mt_bf16 *out = test_alloc(nout * 2), *dqkv = test_alloc(nqkv * 2), *out2 = test_alloc(nout * 2),
          *dqkv2 = test_alloc(nqkv * 2);
  float *out_f = test_alloc(nout * 4), *lse = test_alloc(nlse * 4), *lse_f = test_alloc(nlse * 4),
        *lse2 = test_alloc(nlse * 4), *outb_f = test_alloc(nout * 4), *dqkv_f = test_alloc(nqkv * 4);
  size_t qo = (size_t)q0 * 3 * C, ko = (size_t)k0 * 3 * C, oo = (size_t)q0 * C;
  bops->attn_forward(MT_DT_BF16, a, out + oo, lse + q0, qkv + qo, qkv + ko + C, qkv + ko + 2 * C);
  f32ops->attn_forward(MT_DT_F32, a, out_f + oo, lse_f + q0, qkv_f + qo, qkv_f + ko + C,
                       qkv_f + ko + 2 * C);
  for (size_t i = 0; i < nout; i++) outb_f[i] = mt_bf16_to_f32(out[i]);
  double *ex_out = NULL, *ex_d = NULL; /* the rounded path's extra error (rounding_bounds) */
  if (g_rounded && a->hs % 2 == 0) {
    ex_out = test_alloc(nout * sizeof(double)), ex_d = test_alloc(nqkv * sizeof(double));
    rounding_bounds(a, q0, k0, T, qkv_f, dout_f, outb_f, lse, ex_out, ex_d);
  }
  char msg[160];
  snprintf(msg, sizeof msg, "%s forward out", what);
  TEST_WITHIN(msg,
              test_worst_bf16(out, out_f, ex_out, nout, ORDER_FLOOR * test_max_abs(out_f, nout)));
  double lw = 0.0;
  for (size_t i = 0; i < nlse; i++) {
    if (lse[i] == lse_f[i]) continue; /* -inf both, or equal */
    lw = mt_worst(lw, fabs(lse[i] - lse_f[i]) / (ORDER_FLOOR * (1 + fabs(lse_f[i]))));
  }
  snprintf(msg, sizeof msg, "%s forward lse", what);
  TEST_WITHIN(msg, lw);

  /* backward from the same (bf16) out and lse, onto the same start values */
  memcpy(dqkv, d0, nqkv * 2);
  for (size_t i = 0; i < nqkv; i++) dqkv_f[i] = mt_bf16_to_f32(d0[i]);
  bops->attn_backward(MT_DT_BF16, a, dqkv + qo, dqkv + ko + C, dqkv + ko + 2 * C, dout + oo,
                      out + oo, lse + q0, qkv + qo, qkv + ko + C, qkv + ko + 2 * C);
  f32ops->attn_backward(MT_DT_F32, a, dqkv_f + qo, dqkv_f + ko + C, dqkv_f + ko + 2 * C,
                        dout_f + oo, outb_f + oo, lse + q0, qkv_f + qo, qkv_f + ko + C,
                        qkv_f + ko + 2 * C);
  snprintf(msg, sizeof msg, "%s backward dq|dk|dv", what);
  TEST_WITHIN(msg,
              test_worst_bf16(dqkv, dqkv_f, ex_d, nqkv, ORDER_FLOOR * test_max_abs(dqkv_f, nqkv)));
  free(ex_out), free(ex_d);

  /* the same bits again, and at the other thread count */
  int threads = mt_kernels_threads();
  mt_kernels_set_threads(threads == 1 ? 2 : 1);
  memcpy(out2, out, nout * 2);
  memcpy(lse2, lse, nlse * 4);
  memcpy(dqkv2, d0, nqkv * 2);
  bops->attn_forward(MT_DT_BF16, a, out2 + oo, lse2 + q0, qkv + qo, qkv + ko + C, qkv + ko + 2 * C);
  bops->attn_backward(MT_DT_BF16, a, dqkv2 + qo, dqkv2 + ko + C, dqkv2 + ko + 2 * C, dout + oo,
                      out + oo, lse + q0, qkv + qo, qkv + ko + C, qkv + ko + 2 * C);
  mt_kernels_set_threads(threads);
  MT_CHECK(!memcmp(out, out2, nout * 2) && !memcmp(lse, lse2, nlse * 4) &&
               !memcmp(dqkv, dqkv2, nqkv * 2),
           "%s: other bits at another thread count", what);
  free(out), free(dqkv), free(out2), free(dqkv2), free(out_f), free(lse), free(lse_f), free(lse2);
  free(outb_f), free(dqkv_f);
}

/* random fused q|k|v (B, T, 3C), an output gradient (B, T, C) and initial
 * dq|dk|dv, each in bf16 and as the same values in fp32 */
typedef struct {
  size_t nqkv, nout;
  mt_bf16 *qkv, *dout, *d0;
  float *qkv_f, *dout_f, *d0_f;
} attn_inputs;

static attn_inputs inputs_make(int B, int T, int C) {
  attn_inputs x = {.nqkv = (size_t)B * T * 3 * C, .nout = (size_t)B * T * C};
  x.qkv = test_alloc(x.nqkv * 2), x.dout = test_alloc(x.nout * 2), x.d0 = test_alloc(x.nqkv * 2);
  x.qkv_f = test_alloc(x.nqkv * 4), x.dout_f = test_alloc(x.nout * 4);
  x.d0_f = test_alloc(x.nqkv * 4);
  test_rand_pair(x.qkv, x.qkv_f, x.nqkv, -2, 2);
  test_rand_pair(x.dout, x.dout_f, x.nout, -1, 1);
  test_rand_pair(x.d0, x.d0_f, x.nqkv, -0.1, 0.1);
  return x;
}

static void inputs_free(attn_inputs *x) {
  free(x->qkv), free(x->dout), free(x->d0), free(x->qkv_f), free(x->dout_f), free(x->d0_f);
}

static void test_attention(const char *path, int hs) {
  const int B = 2, NH = 2, C = NH * hs, T = 70;
  attn_inputs in = inputs_make(B, T, C);
  const size_t nout = in.nout;
  mt_bf16 *qkv = in.qkv, *dout = in.dout, *d0 = in.d0;
  float *qkv_f = in.qkv_f, *dout_f = in.dout_f;
  mt_attn_block full = fused_block(B, NH, hs, T, T, T, 0, 0, 1);
  char name[128];
  snprintf(name, sizeof name, "%s hs=%d: attention causal T=70", path, hs);
  check_pair(name, &full, 0, 0, qkv, qkv_f, dout, dout_f, d0, T);
  mt_attn_block nc = fused_block(B, NH, hs, T, T, T, 0, 0, 0);
  snprintf(name, sizeof name, "%s hs=%d: attention non-causal T=70", path, hs);
  check_pair(name, &nc, 0, 0, qkv, qkv_f, dout, dout_f, d0, T);
  mt_attn_block pair = fused_block(B, NH, hs, T, 6, 40, 64, 16, 1);
  snprintf(name, sizeof name, "%s hs=%d: attention pair q 64..69 k 16..55", path, hs);
  check_pair(name, &pair, 64, 16, qkv, qkv_f, dout, dout_f, d0, T);
  mt_attn_block blind = fused_block(B, NH, hs, T, 20, 20, 0, 50, 1);
  snprintf(name, sizeof name, "%s hs=%d: attention pair that sees no key", path, hs);
  check_pair(name, &blind, 0, 50, qkv, qkv_f, dout, dout_f, d0, T);

  /* merge: the keys in two halves, merged, against the fp32 merge of the
   * same (bf16) partial results */
  size_t nlse = (size_t)B * NH * T;
  mt_bf16 *o1 = test_alloc(nout * 2), *o2 = test_alloc(nout * 2);
  float *l1 = test_alloc(nlse * 4), *l2 = test_alloc(nlse * 4), *o1_f = test_alloc(nout * 4),
        *o2_f = test_alloc(nout * 4), *l1_f = test_alloc(nlse * 4);
  mt_attn_block h1 = fused_block(B, NH, hs, T, T, 35, 0, 0, 1);
  mt_attn_block h2 = fused_block(B, NH, hs, T, T, 35, 0, 35, 1);
  bops->attn_forward(MT_DT_BF16, &h1, o1, l1, qkv, qkv + C, qkv + 2 * C);
  bops->attn_forward(MT_DT_BF16, &h2, o2, l2, qkv, qkv + (size_t)35 * 3 * C + C,
                     qkv + (size_t)35 * 3 * C + 2 * C);
  for (size_t i = 0; i < nout; i++) o1_f[i] = mt_bf16_to_f32(o1[i]), o2_f[i] = mt_bf16_to_f32(o2[i]);
  memcpy(l1_f, l1, nlse * 4);
  bops->attn_merge(MT_DT_BF16, &full, o1, l1, o2, l2);
  f32ops->attn_merge(MT_DT_F32, &full, o1_f, l1_f, o2_f, l2);
  snprintf(name, sizeof name, "%s hs=%d: attn_merge out", path, hs);
  TEST_WITHIN(name, test_worst_bf16(o1, o1_f, NULL, nout, 0.0));
  MT_CHECK(!memcmp(l1, l1_f, nlse * 4),
           "%s hs=%d: attn_merge: the LSE differs from the fp32 merge's", path, hs);
  inputs_free(&in);
  free(o1), free(o2), free(l1), free(l2), free(o1_f), free(o2_f), free(l1_f);
}

/* several key blocks (ATT_BC = 256 keys): causal and non-causal at T = 300,
 * causal block pairs of other lengths (Tq != Tk) at position offsets as
 * token slices and the ring give them: queries 100..299 against keys
 * 40..299 (two key blocks, the second of 4), queries 256..299 against keys
 * 0..255 (every key visible), queries 3..203 against keys 1..255 (odd
 * offsets and lengths) */
static void test_attention_long(const char *path, int hs) {
  const int B = 1, NH = 2, C = NH * hs, T = 300;
  attn_inputs in = inputs_make(B, T, C);
  char name[128];
  for (int causal = 0; causal < 2; causal++) {
    mt_attn_block blk = fused_block(B, NH, hs, T, T, T, 0, 0, causal);
    snprintf(name, sizeof name, "%s hs=%d: attention %s T=300", path, hs,
             causal ? "causal" : "non-causal");
    check_pair(name, &blk, 0, 0, in.qkv, in.qkv_f, in.dout, in.dout_f, in.d0, T);
  }
  /* documents: each row sees its own document; boundaries in both key
   * blocks, a one-token document, a last one that starts past 288 */
  const int pairs[][4] = {{100, 200, 40, 260}, {256, 44, 0, 256}, {3, 201, 1, 255}};
  for (int p = 0; p < 3; p++) {
    const int q0 = pairs[p][0], tq = pairs[p][1], k0 = pairs[p][2], tk = pairs[p][3];
    mt_attn_block blk = fused_block(B, NH, hs, T, tq, tk, q0, k0, 1);
    snprintf(name, sizeof name, "%s hs=%d: attention pair q %d..%d k %d..%d", path, hs, q0,
             q0 + tq - 1, k0, k0 + tk - 1);
    check_pair(name, &blk, q0, k0, in.qkv, in.qkv_f, in.dout, in.dout_f, in.d0, T);
  }
  const int starts[] = {0, 45, 140, 141, 290};
  int *lo = test_alloc(T * sizeof(int));
  for (int i = 0, k = 0; i < T; i++) {
    while (k + 1 < 5 && starts[k + 1] <= i) k++;
    lo[i] = starts[k];
  }
  mt_attn_block docs = fused_block(B, NH, hs, T, T, T, 0, 0, 1);
  docs.q_lo = lo, docs.lo_bs = (size_t)T;
  snprintf(name, sizeof name, "%s hs=%d: attention with documents T=300", path, hs);
  check_pair(name, &docs, 0, 0, in.qkv, in.qkv_f, in.dout, in.dout_f, in.d0, T);
  free(lo);
  inputs_free(&in);
}

/* ------------------------------------------------------------------ */
/* cross-entropy                                                       */

static void test_xent(void) {
  const int N = 5, V = 37, Vp = 40;
  size_t n = (size_t)N * Vp;
  int targets[5] = {0, 36, 17, 17, 5};
  mt_bf16 *logits = test_alloc(n * 2), *probs = test_alloc(n * 2), *inplace = test_alloc(n * 2);
  mt_bf16 *dl = test_alloc(n * 2), *p2 = test_alloc(n * 2), *dl2 = test_alloc(n * 2);
  float *logits_f = test_alloc(n * 4), *probs_f = test_alloc(n * 4), *pb_f = test_alloc(n * 4),
        *dl_f = test_alloc(n * 4);
  float losses[5], losses_f[5], losses2[5];
  test_rand_pair(logits, logits_f, n, -4, 4);
  f32ops->softmax_xent_forward(MT_DT_F32, losses_f, probs_f, logits_f, targets, N, V, Vp);
  bops->softmax_xent_forward(MT_DT_BF16, losses, probs, logits, targets, N, V, Vp);
  /* the same fp32 arithmetic: the losses equal, the probabilities rounded */
  double lw = 0.0;
  for (int i = 0; i < N; i++)
    lw = mt_worst(lw, fabs(losses[i] - losses_f[i]) / (16 * FP32_U * (1 + fabs(losses_f[i]))));
  TEST_WITHIN("softmax_xent_forward losses", lw);
  TEST_WITHIN("softmax_xent_forward probs", test_worst_bf16(probs, probs_f, NULL, n, 0.0));
  size_t pad = 0;
  for (int r = 0; r < N; r++)
    for (int j = V; j < Vp; j++) pad += probs[(size_t)r * Vp + j] != 0;
  MT_CHECK(pad == 0, "softmax_xent_forward: %zu padding probabilities are not 0", pad);
  memcpy(inplace, logits, n * 2);
  bops->softmax_xent_forward(MT_DT_BF16, losses2, inplace, inplace, targets, N, V, Vp);
  MT_CHECK(!memcmp(inplace, probs, n * 2) && !memcmp(losses2, losses, sizeof losses),
           "softmax_xent_forward in place differs");
  /* backward from the same (bf16) probabilities */
  for (size_t i = 0; i < n; i++) pb_f[i] = mt_bf16_to_f32(probs[i]);
  f32ops->softmax_xent_backward(MT_DT_F32, dl_f, pb_f, targets, 0.01f, N, V, Vp);
  bops->softmax_xent_backward(MT_DT_BF16, dl, probs, targets, 0.01f, N, V, Vp);
  TEST_WITHIN("softmax_xent_backward", test_worst_bf16(dl, dl_f, NULL, n, 0.0));

  /* vocabulary-parallel, one rank: softmax_xent's bits */
  float rowmax[5], rowmax2[5];
  double stats[10], stats2[10];
  bops->xent_vp_max(MT_DT_BF16, rowmax, logits, N, Vp, V);
  bops->xent_vp_exp(MT_DT_BF16, stats, logits, rowmax, targets, 0, N, Vp, V);
  bops->xent_vp_finish(MT_DT_BF16, losses2, p2, logits, stats, rowmax, targets, N, Vp, V);
  bops->xent_vp_backward(MT_DT_BF16, dl2, p2, targets, 0, 0.01f, N, Vp, V);
  MT_CHECK(!memcmp(losses2, losses, sizeof losses) && !memcmp(p2, probs, n * 2) &&
               !memcmp(dl2, dl, n * 2),
           "xent_vp on one rank differs from softmax_xent");
  /* two ranks: columns [0,20) and [20,40) (17 real), combined by hand */
  mt_bf16 *lr0 = test_alloc(N * 20 * 2), *lr1 = test_alloc(N * 20 * 2);
  mt_bf16 *pr0 = test_alloc(N * 20 * 2), *pr1 = test_alloc(N * 20 * 2);
  for (int r = 0; r < N; r++) {
    memcpy(lr0 + r * 20, logits + (size_t)r * Vp, 40);
    memcpy(lr1 + r * 20, logits + (size_t)r * Vp + 20, 40);
  }
  bops->xent_vp_max(MT_DT_BF16, rowmax, lr0, N, 20, 20);
  bops->xent_vp_max(MT_DT_BF16, rowmax2, lr1, N, 20, 17);
  for (int r = 0; r < N; r++) rowmax[r] = rowmax2[r] = rowmax[r] > rowmax2[r] ? rowmax[r] : rowmax2[r];
  bops->xent_vp_exp(MT_DT_BF16, stats, lr0, rowmax, targets, 0, N, 20, 20);
  bops->xent_vp_exp(MT_DT_BF16, stats2, lr1, rowmax, targets, 20, N, 20, 17);
  for (int i = 0; i < 2 * N; i++) stats[i] = stats2[i] = stats[i] + stats2[i];
  bops->xent_vp_finish(MT_DT_BF16, losses2, pr0, lr0, stats, rowmax, targets, N, 20, 20);
  bops->xent_vp_finish(MT_DT_BF16, losses2, pr1, lr1, stats2, rowmax2, targets, N, 20, 17);
  lw = 0.0;
  for (int i = 0; i < N; i++)
    lw = mt_worst(lw, fabs(losses2[i] - losses[i]) / (16 * FP32_U * (1 + fabs(losses[i]))));
  TEST_WITHIN("xent_vp on two ranks: losses", lw);
  double pw = 0.0;
  for (int r = 0; r < N; r++)
    for (int j = 0; j < Vp; j++) {
      mt_bf16 got = j < 20 ? pr0[r * 20 + j] : pr1[r * 20 + j - 20];
      float want = mt_bf16_to_f32(probs[(size_t)r * Vp + j]);
      /* both round the same value up to a double sum's order: one
       * bf16 rounding apart at most */
      double e = fabs(mt_bf16_to_f32(got) - want) / (2 * BF16_U * fabs(want) + 1e-30);
      pw = mt_worst(pw, mt_bf16_to_f32(got) == want ? 0.0 : e);
    }
  TEST_WITHIN("xent_vp on two ranks: probabilities", pw);
  free(logits), free(probs), free(inplace), free(dl), free(p2), free(dl2), free(logits_f);
  free(probs_f), free(pb_f), free(dl_f), free(lr0), free(lr1), free(pr0), free(pr1);
}

int main(void) {
  test_bf16_start("test_bf16_attn");
  const char *paths[] = {"sgemm", "onednn"};
  for (int p = 0; p < 2; p++) {
    if (mt_bf16_gemm_select(paths[p]) != 0) {
      printf("test_bf16_attn: matmul path %s not in this build, skipped\n", paths[p]);
      continue;
    }
    g_rounded = p == 1 && mt_cpu_bf16_level() >= 1;
    printf("test_bf16_attn: path %s: attention's products on %s\n", paths[p],
           g_rounded ? "vdpbf16ps (hs even; P, dS rounded to bf16)" : "sgemm of widened rows");
    const int sizes[] = {16, 32, 48, 64, 80, 128, 15};
    for (int i = 0; i < 7; i++) test_attention(paths[p], sizes[i]);
    test_attention_long(paths[p], 64);
    test_attention_long(paths[p], 128);
  }
  g_rounded = 0;
  mt_bf16_gemm_select("auto");
  test_xent();
  return mt_check_summary("test_bf16_attn");
}
