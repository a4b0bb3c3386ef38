/* gpu_ops: every op of the CUDA backend against the CPU backend on the same
 * inputs (the CPU backend is itself checked against finite differences and
 * double references by tests/unit/test_ops.c).
 *
 *   gpu_ops fp32|bf16
 *
 * Shapes are not multiples of any tile size (B*T = 111, C = 72, OC = 197,
 * T = 37, Vp = 128 with V = 101), plus larger ones that, run with a small
 * MT_CUDA_SCRATCH_MB, make the bf16 matmuls and attention work in pieces.
 * Backward ops start from non-zero gradients (they accumulate).
 * Error: max |gpu - cpu| / max |cpu| over the tensor (NaN fails).
 * Tolerances: fp32 1e-5 for every op (cuBLASLt without TF32 and the CPU's
 * sgemm differ only in summation order); under bf16 the matmuls and
 * attention (bf16 operands, fp32 sums) 2e-2, everything else 1e-5 (it stays
 * fp32), and the big matmul must differ from fp32 by more than 1e-6 (the
 * bf16 path really ran). Scalar sums (double) 1e-9. The embedding backward
 * adds positions in the CPU's order: bit for bit. axpy from the CPU's
 * inputs within 2.4e-7 (nvcc may contract y + a x into an FMA: one
 * rounding instead of two), scale exactly.
 * Also: two runs give the same bits (no atomics).
 *
 * Block attention (attn_forward, attn_merge, attn_backward; fp32 in both
 * precisions, tolerance 1e-5, LSE rows of -inf exactly -inf and their out
 * exactly 0) on the layouts the model and context parallelism hand it:
 * q|k|v in the fused (B,T,3C) buffer, keys and values in the ring's
 * (B,T,2C) buffer, query and key chunks at row offsets with the global
 * positions of zigzag chunks, Tq != Tk, causal and not, head sizes 24 to
 * 256 (each of the kernels' tile shapes), rows that see no key. Merge: the
 * halves of a key block merged (both, one, neither side empty) against the
 * CPU's merge and against one call over the whole block. A long block with
 * many heads makes the backward's D = rowsum(dout * out) work in groups
 * under the 1 MiB scratch run of ops.sh. copy_2d/add_2d: bit for bit, and
 * nothing outside the rows and columns asked for changes. kv_spread and its
 * backward, with q and without: bit for bit.
 * RMSNorm, SwiGLU and rotary embedding (forward, backward; rope both ways
 * in place at a row stride wider than its heads): fp32 1e-5.
 * The CUDA op table has no NULL member (mt_ops_missing).
 * No GPU: prints "SKIP: <reason>" and exits 77. */
#include "gpu_compare.h"

static int g_bf16;
static int g_quick; /* argv[2] "quick": the sanitizer build's pass, fewer rows in the largest case */
static double TOL_MM; /* matmul and attention outputs and gradients */
#define TOL_EW 1e-5   /* everything computed in fp32 */
/* block attention (fp32 under bf16 too): the GPU's expf and the CPU's
 * polynomial exp, and different summation orders over up to 200 keys */
#define TOL_ATTN 1e-5
#define TOL_SUM 1e-9
/* y + a*x rounded once (an FMA) or twice: at most two units in the last
 * place of the largest |y|, relative to it */
#define TOL_FMA 2.4e-7

/* ------------------------------------------------------------------ */

/* fp32 outputs of the encoder checks: equal */
static void exact_f32(const char *what, const void *ref, const void *d, size_t n) {
  CMP(what, ref, d, n, 0.0);
}

static void test_layernorm(int N, int C) {
  printf("layernorm N=%d C=%d\n", N, C);
  size_t n = (size_t)N * C;
  float *inp = rnd(n, -2, 2), *w = rnd(C, 0.5f, 1.5f), *b = rnd(C, -0.5f, 0.5f);
  float *out = rnd(n, -1, 1), *mean = rnd(N, 0, 1), *rstd = rnd(N, 0, 1);
  float *dout = rnd(n, -1, 1), *dinp = rnd(n, -1, 1), *dw = rnd(C, -1, 1), *db = rnd(C, -1, 1);
  float *d_inp = dev(inp, n), *d_w = dev(w, C), *d_b = dev(b, C), *d_out = dev(out, n);
  float *d_mean = dev(mean, N), *d_rstd = dev(rstd, N), *d_dout = dev(dout, n);
  float *d_dinp = dev(dinp, n), *d_dw = dev(dw, C), *d_db = dev(db, C);
  cpu->layernorm_forward(F32, out, mean, rstd, inp, w, b, N, C);
  gpu->layernorm_forward(F32, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
  CMP("layernorm_forward out", out, d_out, n, TOL_EW);
  CMP("layernorm_forward mean", mean, d_mean, N, TOL_EW);
  CMP("layernorm_forward rstd", rstd, d_rstd, N, TOL_EW);
  cpu->layernorm_backward(F32, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  gpu->layernorm_backward(F32, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
  CMP("layernorm_backward dinp", dinp, d_dinp, n, TOL_EW);
  CMP("layernorm_backward dw", dw, d_dw, C, TOL_EW);
  CMP("layernorm_backward db", db, d_db, C, TOL_EW);
  float *ds[] = {d_inp, d_w, d_b, d_out, d_mean, d_rstd, d_dout, d_dinp, d_dw, d_db};
  size_t ns[] = {n, C, C, n, N, N, n, n, C, C};
  for (int i = 0; i < 10; i++) dfree(ds[i], ns[i] * 4);
  free(inp), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(dinp);
  free(dw), free(db);
}

/* the Llama block's ops: RMSNorm, SwiGLU, rotary embedding (a cos | sin
 * table of T = 37 rows of 24 channels, 3 heads per row at a row stride of 80) */
static void test_llama(int N, int C) {
  printf("rmsnorm, swiglu, rope N=%d C=%d\n", N, C);
  size_t n = (size_t)N * C;
  float *inp = rnd(2 * n, -3, 3), *w = rnd(C, 0.5f, 1.5f), *out = rnd(n, -1, 1);
  float *rstd = rnd(N, 0, 1), *dout = rnd(n, -1, 1), *dinp = rnd(2 * n, -1, 1), *dw = rnd(C, -1, 1);
  float *d_inp = dev(inp, 2 * n), *d_w = dev(w, C), *d_out = dev(out, n), *d_rstd = dev(rstd, N);
  float *d_dout = dev(dout, n), *d_dinp = dev(dinp, 2 * n), *d_dw = dev(dw, C);
  cpu->rmsnorm_forward(F32, out, rstd, inp, w, N, C, 1e-5f);
  gpu->rmsnorm_forward(F32, d_out, d_rstd, d_inp, d_w, N, C, 1e-5f);
  CMP("rmsnorm_forward out", out, d_out, n, TOL_EW);
  CMP("rmsnorm_forward rstd", rstd, d_rstd, N, TOL_EW);
  cpu->rmsnorm_backward(F32, dinp, dw, dout, inp, w, rstd, N, C);
  gpu->rmsnorm_backward(F32, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
  CMP("rmsnorm_backward dinp", dinp, d_dinp, n, TOL_EW);
  CMP("rmsnorm_backward dw", dw, d_dw, C, TOL_EW);
  /* SwiGLU over rows of gate | up (C each) */
  cpu->swiglu_forward(F32, out, inp, N, C);
  gpu->swiglu_forward(F32, d_out, d_inp, N, C);
  CMP("swiglu_forward (expf vs the CPU's polynomial)", out, d_out, n, TOL_EW);
  cpu->swiglu_backward(F32, dinp, inp, dout, N, C);
  gpu->swiglu_backward(F32, d_dinp, d_inp, d_dout, N, C);
  CMP("swiglu_backward", dinp, d_dinp, 2 * n, TOL_EW);
  /* rope in place on both sides' copies of the same rows */
  const int T = 37, hs = 24, nh = 3, ld = 80, B = (int)(2 * n / ((size_t)T * ld));
  float *cs = rnd((size_t)T * hs, -1, 1), *d_cs = dev(cs, (size_t)T * hs);
  for (int inverse = 0; inverse < 2; inverse++) {
    cpu->rope(F32, inp, ld, B, T, nh, hs, cs, NULL, inverse);
    gpu->rope(F32, d_inp, ld, B, T, nh, hs, d_cs, NULL, inverse);
    CMP(inverse ? "rope inverse" : "rope (one FMA's rounding apart at most)", inp, d_inp, 2 * n,
        TOL_EW);
  }
  /* at given positions (restarting, as in documents) */
  int *pos = malloc((size_t)B * T * sizeof(int));
  for (int i = 0; i < B * T; i++) pos[i] = (i * 5) % T % 11;
  int *d_pos = devi(pos, (size_t)B * T);
  cpu->rope(F32, inp, ld, B, T, nh, hs, cs, pos, 0);
  gpu->rope(F32, d_inp, ld, B, T, nh, hs, d_cs, d_pos, 0);
  CMP("rope at given positions", inp, d_inp, 2 * n, TOL_EW);
  dfree(d_pos, (size_t)B * T * 4);
  free(pos);
  float *ds[] = {d_inp, d_w, d_out, d_rstd, d_dout, d_dinp, d_dw, d_cs};
  size_t ns[] = {2 * n, C, n, N, n, 2 * n, C, (size_t)T * hs};
  for (int i = 0; i < 8; i++) dfree(ds[i], ns[i] * 4);
  free(inp), free(w), free(out), free(rstd), free(dout), free(dinp), free(dw), free(cs);
}

static void test_matmul(int N, int C, int OC, int check_rounding) {
  printf("matmul N=%d C=%d OC=%d\n", N, C, OC);
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  float *inp = rnd(ni, -1, 1), *w = rnd(nw, -1, 1), *bias = rnd(OC, -1, 1), *out = rnd(no, -1, 1);
  float *dout = rnd(no, -1, 1), *dinp = rnd(ni, -1, 1), *dw = rnd(nw, -1, 1), *dbias = rnd(OC, -1, 1);
  float *d_inp = dev(inp, ni), *d_w = dev(w, nw), *d_bias = dev(bias, OC), *d_out = dev(out, no);
  float *d_dout = dev(dout, no), *d_dinp = dev(dinp, ni), *d_dw = dev(dw, nw), *d_dbias = dev(dbias, OC);
  for (int with_bias = 1; with_bias >= 0; with_bias--) {
    cpu->matmul_forward(F32, out, inp, w, with_bias ? bias : NULL, N, C, OC);
    gpu->matmul_forward(F32, d_out, d_inp, d_w, with_bias ? d_bias : NULL, N, C, OC);
    double e = err_of(out, d_out, no);
    mt_check_err(with_bias ? "matmul_forward with bias" : "matmul_forward", e, TOL_MM);
    if (check_rounding && g_bf16 && !with_bias)
      mt_check_err("matmul_forward under bf16 is not fp32", e > 1e-6 ? 0 : 1, 0);
  }
  cpu->matmul_backward(F32, dinp, dw, dbias, dout, inp, w, N, C, OC);
  gpu->matmul_backward(F32, d_dinp, d_dw, d_dbias, d_dout, d_inp, d_w, N, C, OC);
  CMP("matmul_backward dinp", dinp, d_dinp, ni, TOL_MM);
  CMP("matmul_backward dw", dw, d_dw, nw, TOL_MM);
  CMP("matmul_backward dbias (fp32 sums)", dbias, d_dbias, OC, TOL_EW);
  /* the halves of a split backward */
  cpu->matmul_backward(F32, dinp, NULL, NULL, dout, NULL, w, N, C, OC);
  gpu->matmul_backward(F32, d_dinp, NULL, NULL, d_dout, NULL, d_w, N, C, OC);
  CMP("matmul_backward dinp only", dinp, d_dinp, ni, TOL_MM);
  cpu->matmul_backward(F32, NULL, dw, dbias, dout, inp, NULL, N, C, OC);
  gpu->matmul_backward(F32, NULL, d_dw, d_dbias, d_dout, d_inp, NULL, N, C, OC);
  CMP("matmul_backward dw, dbias only", dw, d_dw, nw, TOL_MM);
  float *ds[] = {d_inp, d_w, d_bias, d_out, d_dout, d_dinp, d_dw, d_dbias};
  size_t ns[] = {ni, nw, OC, no, no, ni, nw, OC};
  for (int i = 0; i < 8; i++) dfree(ds[i], ns[i] * 4);
  free(inp), free(w), free(bias), free(out), free(dout), free(dinp), free(dw), free(dbias);
}

static void test_attention(int B, int T, int C, int NH) {
  printf("attention B=%d T=%d C=%d NH=%d\n", B, T, C, NH);
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
  float *qkv = rnd(nq, -1, 1), *out = rnd(no, -1, 1), *att = rnd(na, 0, 1), *datt = rnd(na, 0, 1);
  float *dout = rnd(no, -1, 1), *dqkv = rnd(nq, -1, 1);
  float *d_qkv = dev(qkv, nq), *d_out = dev(out, no), *d_att = dev(att, na), *d_datt = dev(datt, na);
  float *d_dout = dev(dout, no), *d_dqkv = dev(dqkv, nq);
  cpu->attention_forward(out, att, qkv, B, T, C, NH);
  gpu->attention_forward(d_out, d_att, d_qkv, B, T, C, NH);
  CMP("attention_forward out", out, d_out, no, TOL_MM);
  CMP("attention_forward att (P; zeros above the diagonal)", att, d_att, na, TOL_MM);
  cpu->attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
  gpu->attention_backward(d_dqkv, d_datt, d_dout, d_qkv, d_att, B, T, C, NH);
  CMP("attention_backward dqkv", dqkv, d_dqkv, nq, TOL_MM);
  float *ds[] = {d_qkv, d_out, d_att, d_datt, d_dout, d_dqkv};
  size_t ns[] = {nq, no, na, na, no, nq};
  for (int i = 0; i < 6; i++) dfree(ds[i], ns[i] * 4);
  free(qkv), free(out), free(att), free(datt), free(dout), free(dqkv);
}

static void test_elementwise(size_t n) {
  printf("elementwise n=%zu\n", n);
  float *x = rnd(n, -4, 4), *y = rnd(n, -1, 1), *o = rnd(n, -1, 1), *g = rnd(n, -1, 1);
  float *d_x = dev(x, n), *d_y = dev(y, n), *d_o = dev(o, n), *d_g = dev(g, n);
  cpu->gelu_forward(F32, o, x, n);
  gpu->gelu_forward(F32, d_o, d_x, n);
  CMP("gelu_forward (tanhf vs the CPU's polynomial)", o, d_o, n, TOL_EW);
  cpu->gelu_backward(F32, g, x, y, n);
  gpu->gelu_backward(F32, d_g, d_x, d_y, n);
  CMP("gelu_backward", g, d_g, n, TOL_EW);
  cpu->residual_forward(F32, o, x, y, n);
  gpu->residual_forward(F32, d_o, d_x, d_y, n);
  CMP("residual_forward", o, d_o, n, 0.0);
  /* from the same inputs (gelu_backward left g and d_g within TOL_EW, not
   * equal): axpy within one rounding of an FMA (nvcc contracts y + a*x, the
   * CPU build does not), scale exactly */
  gpu->upload(d_g, g, n * sizeof(float));
  cpu->axpy(F32, g, -0.75f, x, n);
  gpu->axpy(F32, d_g, -0.75f, d_x, n);
  CMP("axpy (one FMA's rounding apart at most)", g, d_g, n, TOL_FMA);
  gpu->upload(d_g, g, n * sizeof(float));
  cpu->scale(F32, g, 0.3f, n);
  gpu->scale(F32, d_g, 0.3f, n);
  CMP("scale (exact)", g, d_g, n, 0.0);
  double sc = cpu->sumsq(F32, x, n), sg = gpu->sumsq(F32, d_x, n);
  mt_check_err("sumsq (double)", fabs(sc - sg) / sc, TOL_SUM);
  double uc = cpu->sum(F32, y, n), ug = gpu->sum(F32, d_y, n);
  mt_check_err("sum (double)", fabs(uc - ug) / fmax(fabs(uc), 1.0), TOL_SUM);
  cpu->copy(F32, o, x, n);
  gpu->copy(F32, d_o, d_x, n);
  CMP("copy", o, d_o, n, 0.0);
  cpu->zero(F32, o, n / 2);
  gpu->zero(F32, d_o, n / 2);
  CMP("zero (half)", o, d_o, n, 0.0);
  /* AdamW, 3 steps, weight decay on */
  float *p = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 0, 0.01f);
  float *d_p = dev(p, n), *d_m = dev(m, n), *d_v = dev(v, n);
  for (int t = 1; t <= 3; t++) {
    cpu->adamw_update(F32, p, NULL, y, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    gpu->adamw_update(F32, d_p, NULL, d_y, d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
  }
  CMP("adamw_update param (3 steps)", p, d_p, n, TOL_EW);
  CMP("adamw_update m", m, d_m, n, TOL_EW);
  CMP("adamw_update v", v, d_v, n, TOL_EW);
  float *ds[] = {d_x, d_y, d_o, d_g, d_p, d_m, d_v};
  for (int i = 0; i < 7; i++) dfree(ds[i], n * 4);
  free(x), free(y), free(o), free(g), free(p), free(m), free(v);
}

static void test_xent(int N, int V, int Vp) {
  printf("cross-entropy N=%d V=%d Vp=%d\n", N, V, Vp);
  size_t n = (size_t)N * Vp;
  float *logits = rnd(n, -5, 5), *probs = rnd(n, 0, 1), *losses = rnd(N, 0, 1);
  int *tgt = malloc((size_t)N * sizeof(int));
  for (int i = 0; i < N; i++) tgt[i] = (int)(urand(0, 1) * (V - 1));
  float *d_logits = dev(logits, n), *d_probs = dev(probs, n), *d_losses = dev(losses, N);
  int *d_tgt = devi(tgt, N);
  cpu->softmax_xent_forward(F32, losses, probs, logits, tgt, N, V, Vp);
  gpu->softmax_xent_forward(F32, d_losses, d_probs, d_logits, d_tgt, N, V, Vp);
  CMP("softmax_xent_forward losses", losses, d_losses, N, TOL_EW);
  CMP("softmax_xent_forward probs (0 on padding)", probs, d_probs, n, TOL_EW);
  cpu->softmax_xent_backward(F32, probs, probs, tgt, 0.01f, N, V, Vp); /* in place */
  gpu->softmax_xent_backward(F32, d_probs, d_probs, d_tgt, 0.01f, N, V, Vp);
  CMP("softmax_xent_backward (in place)", probs, d_probs, n, TOL_EW);
  /* in place forward: probs aliases logits */
  float *l2 = dup_bytes(logits, n * sizeof(float)), *d_l2 = dev(l2, n);
  cpu->softmax_xent_forward(F32, losses, l2, l2, tgt, N, V, Vp);
  gpu->softmax_xent_forward(F32, d_losses, d_l2, d_l2, d_tgt, N, V, Vp);
  CMP("softmax_xent_forward in place", l2, d_l2, n, TOL_EW);
  CMP("softmax_xent_forward in place losses", losses, d_losses, N, TOL_EW);
  /* the vocabulary-parallel pieces on one slice, and on a slice beyond V */
  int slices[2][2] = {{V / 3, Vp / 2}, {V + 3, Vp - V - 3}};
  for (int s = 0; s < 2; s++) {
    int v0 = slices[s][0], Vl = slices[s][1];
    int nvalid = V - v0 < 0 ? 0 : V - v0 > Vl ? Vl : V - v0;
    size_t nl = (size_t)N * Vl;
    float *lg = rnd(nl, -5, 5), *rmax = rnd(N, 0, 1), *ls = rnd(N, 0, 1);
    double *st = malloc(2 * (size_t)N * sizeof(double));
    float *d_lg = dev(lg, nl), *d_rmax = dev(rmax, N), *d_ls = dev(ls, N);
    double *d_st = gpu->alloc(MT_MEM_OTHER, 2 * (size_t)N * sizeof(double));
    char what[96];
    cpu->xent_vp_max(F32, rmax, lg, N, Vl, nvalid);
    gpu->xent_vp_max(F32, d_rmax, d_lg, N, Vl, nvalid);
    if (nvalid > 0) {
      snprintf(what, sizeof what, "xent_vp_max v0=%d Vl=%d nvalid=%d", v0, Vl, nvalid);
      CMP(what, rmax, d_rmax, N, 0.0);
    } else {
      float *h = host_bytes(d_rmax, (size_t)N * sizeof(float));
      int all_inf = 1;
      for (int i = 0; i < N; i++) all_inf &= isinf(h[i]) && h[i] < 0;
      mt_check_err("xent_vp_max of a slice without real columns is -inf", all_inf ? 0 : 1, 0);
      free(h);
      for (int i = 0; i < N; i++) rmax[i] = 0.0f; /* a global max from elsewhere */
      gpu->upload(d_rmax, rmax, (size_t)N * sizeof(float));
    }
    cpu->xent_vp_exp(F32, st, lg, rmax, tgt, v0, N, Vl, nvalid);
    gpu->xent_vp_exp(F32, d_st, d_lg, d_rmax, d_tgt, v0, N, Vl, nvalid);
    double *hst = malloc(2 * (size_t)N * sizeof(double));
    gpu->download(hst, d_st, 2 * (size_t)N * sizeof(double));
    double se = 0.0;
    for (int i = 0; i < 2 * N; i++) se = mt_worst(se, fabs(hst[i] - st[i]) / fmax(fabs(st[i]), 1.0));
    snprintf(what, sizeof what, "xent_vp_exp stats (sum, target logit) v0=%d", v0);
    mt_check_err(what, se, TOL_EW);
    CMP("xent_vp_exp leaves the logits", lg, d_lg, nl, TOL_EW);
    for (int i = 0; i < N; i++) st[2 * i] += 1.0, hst[2 * i] += 1.0; /* other ranks' sums */
    gpu->upload(d_st, hst, 2 * (size_t)N * sizeof(double));
    cpu->xent_vp_finish(F32, ls, lg, lg, st, rmax, tgt, N, Vl, nvalid); /* probs over the logits */
    gpu->xent_vp_finish(F32, d_ls, d_lg, d_lg, d_st, d_rmax, d_tgt, N, Vl, nvalid);
    CMP("xent_vp_finish losses", ls, d_ls, N, TOL_EW);
    CMP("xent_vp_finish probs", lg, d_lg, nl, TOL_EW);
    cpu->xent_vp_backward(F32, lg, lg, tgt, v0, 0.5f, N, Vl, nvalid);
    gpu->xent_vp_backward(F32, d_lg, d_lg, d_tgt, v0, 0.5f, N, Vl, nvalid);
    CMP("xent_vp_backward (in place)", lg, d_lg, nl, TOL_EW);
    dfree(d_lg, nl * 4), dfree(d_rmax, (size_t)N * 4), dfree(d_ls, (size_t)N * 4);
    dfree(d_st, 2 * (size_t)N * 8);
    free(lg), free(rmax), free(ls), free(st), free(hst);
  }
  dfree(d_logits, n * 4), dfree(d_probs, n * 4), dfree(d_losses, (size_t)N * 4);
  dfree(d_tgt, (size_t)N * 4), dfree(d_l2, n * 4);
  free(logits), free(probs), free(losses), free(tgt), free(l2);
}

/* ------------------------------------------------------------------ */
/* block attention                                                     */

/* the host and device copies of one case's buffers */
typedef struct {
  float *qkv, *kv, *out, *lse, *dqkv, *dkv, *dout, *out2, *lse2, *part, *part_lse;
} attn_bufs;
#define ATTN_NBUF 11

static void attn_pair_run(const attn_pair *p) {
  const attn_layout L = attn_layout_of(p);
  const int fused = L.fused, B = p->B, NH = p->NH, hs = p->hs;
  const size_t C = L.C, krs = L.krs;
  const size_t n_qkv = L.n_qkv, n_kv = L.n_kv, n_out = L.n_out, n_lse = L.n_lse;
  size_t ns[ATTN_NBUF] = {n_qkv, n_kv, n_out, n_lse, n_qkv, n_kv, n_out,
                          n_out, n_lse, n_out, n_lse};
  /* every buffer random, outputs too: rows outside the block must stay */
  attn_bufs h, d;
  float **hp = (float **)&h, **dp = (float **)&d;
  for (int i = 0; i < ATTN_NBUF; i++) {
    hp[i] = rnd(ns[i], i < 2 ? -2 : -1, i < 2 ? 2 : 1);
    dp[i] = dev(hp[i], ns[i]);
  }
  /* the block as the CPU reads it (documents' starts on the host) and as
   * the GPU does (on the device) */
  int *doc_h = attn_doc_lo(p), *doc_d = doc_h ? devi(doc_h, (size_t)B * p->Tq) : NULL;
  mt_attn_block a = L.a;
  a.q_lo = doc_h;
  const mt_attn_block ad = attn_on(&a, doc_d);
  const size_t qo = L.qo, oo = L.oo, lo = L.lo, ko = L.ko, vo = L.vo;
#define KV(s) ((fused ? (s).qkv : (s).kv))
#define DKV(s) ((fused ? (s).dqkv : (s).dkv))
  char what[128];

  /* forward over the whole key block */
  cpu->attn_forward(F32, &a, h.out + oo, h.lse + lo, h.qkv + qo, KV(h) + ko, KV(h) + vo);
  gpu->attn_forward(F32, &ad, d.out + oo, d.lse + lo, d.qkv + qo, KV(d) + ko, KV(d) + vo);
  CMP("attn_forward out", h.out, d.out, n_out, TOL_ATTN);
  mt_check_err("attn_forward lse (-inf rows exactly)", lse_err_of(h.lse, d.lse, n_lse), TOL_ATTN);
  {
    float *go = host_bytes(d.out, n_out * sizeof(float));
    long no_key = 0, nonzero = 0;
    for (int b = 0; b < B; b++)
      for (int hh = 0; hh < NH; hh++)
        for (int i = 0; i < p->Tq; i++) {
          if (!isinf(h.lse[(size_t)b * a.l_bs + (size_t)hh * a.l_hs + lo + i])) continue;
          no_key++;
          const float *o = go + (size_t)b * a.o_bs + oo + (size_t)i * a.o_rs + (size_t)hh * hs;
          for (int c = 0; c < hs; c++) nonzero += o[c] != 0.0f;
        }
    snprintf(what, sizeof what, "attn_forward: %ld rows see no key: out exactly 0", no_key);
    mt_check_err(what, nonzero ? 1 : 0, 0);
    free(go);
  }

  /* the key block's halves: out2 = the later half, part = the earlier one,
   * merged into out2 (rows where one side or both saw no key included) */
  {
    mt_attn_block first = a, second = a;
    int half = p->Tk / 2;
    first.Tk = half;
    second.Tk = p->Tk - half;
    second.k_pos0 = p->k_pos0 + half;
    const size_t hk = (size_t)half * krs;
    const mt_attn_block firstd = attn_on(&first, doc_d), secondd = attn_on(&second, doc_d);
    cpu->attn_forward(F32, &second, h.out2 + oo, h.lse2 + lo, h.qkv + qo, KV(h) + ko + hk,
                      KV(h) + vo + hk);
    gpu->attn_forward(F32, &secondd, d.out2 + oo, d.lse2 + lo, d.qkv + qo, KV(d) + ko + hk,
                      KV(d) + vo + hk);
    cpu->attn_forward(F32, &first, h.part + oo, h.part_lse + lo, h.qkv + qo, KV(h) + ko,
                      KV(h) + vo);
    gpu->attn_forward(F32, &firstd, d.part + oo, d.part_lse + lo, d.qkv + qo, KV(d) + ko,
                      KV(d) + vo);
    cpu->attn_merge(F32, &a, h.out2 + oo, h.lse2 + lo, h.part + oo, h.part_lse + lo);
    gpu->attn_merge(F32, &ad, d.out2 + oo, d.lse2 + lo, d.part + oo, d.part_lse + lo);
    CMP("attn_merge out (halves of the key block)", h.out2, d.out2, n_out, TOL_ATTN);
    mt_check_err("attn_merge lse", lse_err_of(h.lse2, d.lse2, n_lse), TOL_ATTN);
    /* the GPU's merged halves against one CPU call over the whole block,
     * on the block's rows (outside them out and out2 hold different
     * random values) */
    float *g2 = host_bytes(d.out2, n_out * sizeof(float));
    float *l2 = host_bytes(d.lse2, n_lse * sizeof(float));
    double e = 0.0, sc = 0.0, el = 0.0;
    for (int b = 0; b < B; b++)
      for (int i = 0; i < p->Tq; i++)
        for (size_t c = 0; c < C; c++) {
          size_t o = (size_t)b * a.o_bs + oo + (size_t)i * a.o_rs + c;
          e = mt_worst(e, fabs((double)g2[o] - h.out[o]));
          if (fabs(h.out[o]) > sc) sc = fabs(h.out[o]);
        }
    for (int b = 0; b < B; b++)
      for (int hh = 0; hh < NH; hh++)
        for (int i = 0; i < p->Tq; i++) {
          size_t o = (size_t)b * a.l_bs + (size_t)hh * a.l_hs + lo + i;
          if (isinf(h.lse[o]) || isinf(l2[o])) {
            if (!(h.lse[o] == l2[o])) el = mt_worst(el, INFINITY);
            continue;
          }
          el = mt_worst(el, fabs((double)l2[o] - h.lse[o]) / fmax(1.0, fabs(h.lse[o])));
        }
    mt_check_err("GPU halves merged = one CPU call: out", e / (sc > 0 ? sc : 1.0), TOL_ATTN);
    mt_check_err("GPU halves merged = one CPU call: lse", el, TOL_ATTN);
    free(g2), free(l2);
  }

  /* backward from the whole block's forward (each side's own out, lse),
   * accumulating into random gradients */
  cpu->attn_backward(F32, &a, h.dqkv + qo, DKV(h) + ko, DKV(h) + vo, h.dout + oo, h.out + oo,
                     h.lse + lo, h.qkv + qo, KV(h) + ko, KV(h) + vo);
  gpu->attn_backward(F32, &ad, d.dqkv + qo, DKV(d) + ko, DKV(d) + vo, d.dout + oo, d.out + oo,
                     d.lse + lo, d.qkv + qo, KV(d) + ko, KV(d) + vo);
  CMP(fused ? "attn_backward dq|dk|dv (one buffer)" : "attn_backward dq", h.dqkv, d.dqkv, n_qkv,
      TOL_ATTN);
  if (!fused) CMP("attn_backward dk|dv", h.dkv, d.dkv, n_kv, TOL_ATTN);
#undef KV
#undef DKV
  for (int i = 0; i < ATTN_NBUF; i++) {
    dfree(dp[i], ns[i] * 4);
    free(hp[i]);
  }
  if (doc_d) dfree(doc_d, (size_t)B * p->Tq * 4);
  free(doc_h);
}

static void test_attn_blocks(void) {
  /* zigzag chunks of context parallelism over 2 ranks, chunk length Tc:
   * rank 0 holds positions [0, Tc) and [3Tc, 4Tc), rank 1 [Tc, 2Tc) and
   * [2Tc, 3Tc); a rank's buffers hold its two chunks, Tl = 2 Tc rows */
  const int Tc = 96;
  /* (quick, the sanitizer's pass at the default scratch, where 3500 rows
   * take no pieces either: the same kernels over 700 rows, 5x less time) */
  const int long_rows = g_quick ? 700 : 3500;
  const attn_pair pairs[] = {
      /* the model's own block (no cp, or cp's local and Ulysses calls) */
      {"self", 2, 4, 64, 200, 0, 0, 200, 0, 0, 200, 0, 1, 0},
      {"self", 2, 2, 128, 150, 0, 0, 150, 0, 0, 150, 0, 1, 0},
      {"self", 1, 3, 24, 77, 0, 0, 77, 0, 0, 77, 0, 0, 0},
      /* ring: rank 0's late chunk against its own late chunk, and against
       * rank 1's chunks as they arrive */
      {"ring diagonal", 2, 4, 64, 2 * Tc, 0, Tc, Tc, 3 * Tc, Tc, Tc, 3 * Tc, 1, 0},
      {"ring received", 2, 4, 64, 2 * Tc, 2 * Tc, Tc, Tc, 3 * Tc, 0, Tc, Tc, 1, 0},
      {"ring received", 1, 2, 128, 2 * Tc, 2 * Tc, Tc, Tc, 3 * Tc, Tc, Tc, 2 * Tc, 1, 0},
      {"ring diagonal", 1, 2, 128, 2 * Tc, 2 * Tc, 0, Tc, 0, 0, Tc, 0, 1, 0},
      /* Tq != Tk, partly visible; not causal */
      {"Tq != Tk", 2, 2, 128, 90, 230, 10, 75, 150, 5, 200, 20, 1, 0},
      {"Tq != Tk", 1, 3, 64, 140, 100, 5, 130, 0, 20, 70, 500, 0, 0},
      {"Tq != Tk", 1, 2, 256, 90, 130, 10, 75, 100, 5, 120, 60, 1, 0},
      {"Tq != Tk", 1, 1, 200, 90, 130, 10, 75, 100, 5, 120, 60, 0, 0},
      {"Tq != Tk", 2, 2, 32, 100, 140, 3, 97, 40, 1, 139, 0, 1, 0},
      /* keys partly, then wholly, after the queries: rows see no key */
      {"later keys", 1, 2, 64, 100, 100, 0, 100, 0, 0, 100, 40, 1, 0},
      {"no key visible", 1, 2, 64, 60, 60, 0, 60, 0, 0, 60, 100, 1, 0},
      /* 2 x 40 heads x 3500 rows of D: more than 1 MiB of scratch */
      {"many long rows", 2, 40, 16, long_rows, 40, 0, long_rows, 4000, 0, 40, 0, 1, 0},
      /* documents: each row sees its own document only (tiles skipped
       * before it, masked across its first position) */
      {"documents self", 2, 4, 64, 200, 0, 0, 200, 0, 0, 200, 0, 1, 37},
      {"documents self", 1, 2, 128, 150, 0, 0, 150, 0, 0, 150, 0, 1, 70},
      {"documents ring received", 2, 4, 64, 2 * Tc, 2 * Tc, Tc, Tc, 3 * Tc, 0, Tc, Tc, 1, 50},
      {"documents ring diagonal", 1, 2, 64, 2 * Tc, 0, Tc, Tc, 3 * Tc, Tc, Tc, 3 * Tc, 1, 64},
  };
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) attn_pair_run(&pairs[i]);
}

static void test_copy_2d(void) {
  printf("copy_2d, add_2d\n");
  /* the ring's packing: columns C..3C of a (rows, 3C) buffer into (rows, 2C)
   * and back, added; C = 72, rows = 333 */
  const size_t C = 72, rows = 333, nsrc = rows * 3 * C, ndst = rows * 2 * C;
  float *src = rnd(nsrc, -1, 1), *dst = rnd(ndst, -1, 1);
  float *d_src = dev(src, nsrc), *d_dst = dev(dst, ndst);
  cpu->copy_2d(F32, dst, 2 * C, src + C, 3 * C, rows, 2 * C);
  gpu->copy_2d(F32, d_dst, 2 * C, d_src + C, 3 * C, rows, 2 * C);
  CMP("copy_2d (rows, 2C) from (rows, 3C) at column C", dst, d_dst, ndst, 0.0);
  cpu->add_2d(F32, src + C, 3 * C, dst, 2 * C, rows, 2 * C);
  gpu->add_2d(F32, d_src + C, 3 * C, d_dst, 2 * C, rows, 2 * C);
  CMP("add_2d back (columns 0..C untouched)", src, d_src, nsrc, 0.0);
  /* ragged: a column range inside both rows, wider than one block of threads */
  const size_t ld_s = 1000, ld_d = 700, r2 = 37, c2 = 611, ns2 = r2 * ld_s, nd2 = r2 * ld_d;
  float *s2 = rnd(ns2, -1, 1), *t2 = rnd(nd2, -1, 1);
  float *d_s2 = dev(s2, ns2), *d_t2 = dev(t2, nd2);
  cpu->copy_2d(F32, t2 + 5, ld_d, s2 + 7, ld_s, r2, c2);
  gpu->copy_2d(F32, d_t2 + 5, ld_d, d_s2 + 7, ld_s, r2, c2);
  CMP("copy_2d ragged (37 x 611, ld 1000 -> 700)", t2, d_t2, nd2, 0.0);
  cpu->add_2d(F32, t2 + 80, ld_d, s2 + 300, ld_s, r2, c2 - 1);
  gpu->add_2d(F32, d_t2 + 80, ld_d, d_s2 + 300, ld_s, r2, c2 - 1);
  CMP("add_2d ragged", t2, d_t2, nd2, 0.0);
  dfree(d_src, nsrc * 4), dfree(d_dst, ndst * 4), dfree(d_s2, ns2 * 4), dfree(d_t2, nd2 * 4);
  free(src), free(dst), free(s2), free(t2);
}

/* the block attention twice on the same inputs: the same bits */
static void test_attn_determinism(void) {
  printf("attn determinism\n");
  const int B = 2, NH = 4, hs = 64, T = 200;
  const size_t C = (size_t)NH * hs, nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
  const size_t nl = (size_t)B * NH * T;
  mt_attn_block a = {B, NH, hs, T, T, 0, 0, 1, (size_t)T * 3 * C, 3 * C, (size_t)T * 3 * C,
                     3 * C, (size_t)T * 3 * C, 3 * C, (size_t)T * C, C, (size_t)NH * T,
                     (size_t)T, NULL, 0, 0.0};
  float *qkv = rnd(nq, -2, 2), *dout = rnd(no, -1, 1);
  float *g[2], *o[2];
  for (int run = 0; run < 2; run++) {
    float *d_qkv = dev(qkv, nq), *d_dout = dev(dout, no);
    float *d_out = gpu->alloc(MT_MEM_OTHER, no * 4), *d_lse = gpu->alloc(MT_MEM_OTHER, nl * 4);
    float *d_dqkv = gpu->alloc(MT_MEM_OTHER, nq * 4);
    gpu->attn_forward(F32, &a, d_out, d_lse, d_qkv, d_qkv + C, d_qkv + 2 * C);
    gpu->attn_backward(F32, &a, d_dqkv, d_dqkv + C, d_dqkv + 2 * C, d_dout, d_out, d_lse, d_qkv,
                       d_qkv + C, d_qkv + 2 * C);
    g[run] = malloc(nq * sizeof(float));
    o[run] = malloc(no * sizeof(float));
    gpu->download(g[run], d_dqkv, nq * sizeof(float));
    gpu->download(o[run], d_out, no * sizeof(float));
    dfree(d_qkv, nq * 4), dfree(d_dout, no * 4), dfree(d_out, no * 4), dfree(d_lse, nl * 4);
    dfree(d_dqkv, nq * 4);
  }
  mt_check_err("attn_forward twice: same bits", memcmp(o[0], o[1], no * sizeof(float)) ? 1 : 0, 0);
  mt_check_err("attn_backward twice: same bits", memcmp(g[0], g[1], nq * sizeof(float)) ? 1 : 0, 0);
  free(qkv), free(dout), free(g[0]), free(g[1]), free(o[0]), free(o[1]);
}

/* the same inputs twice: the same bits (matmul, attention, layernorm backward) */
static void test_determinism(void) {
  printf("determinism\n");
  int B = 2, T = 64, C = 96, NH = 3, N = B * T;
  size_t nq = (size_t)B * T * 3 * C, no = (size_t)N * C, na = (size_t)B * NH * T * T;
  float *qkv = rnd(nq, -1, 1), *dout = rnd(no, -1, 1), *w = rnd((size_t)C * C, -1, 1);
  float *h1 = malloc(nq * sizeof(float)), *h2 = malloc(nq * sizeof(float));
  int same = 1;
  for (int run = 0; run < 2; run++) {
    float *d_qkv = dev(qkv, nq), *d_dout = dev(dout, no), *d_w = dev(w, (size_t)C * C);
    float *d_att = gpu->alloc(MT_MEM_OTHER, na * 4), *d_datt = gpu->alloc(MT_MEM_OTHER, na * 4);
    float *d_out = gpu->alloc(MT_MEM_OTHER, no * 4), *d_dqkv = gpu->alloc(MT_MEM_OTHER, nq * 4);
    float *d_dw = gpu->alloc(MT_MEM_OTHER, (size_t)C * C * 4);
    gpu->attention_forward(d_out, d_att, d_qkv, B, T, C, NH);
    gpu->attention_backward(d_dqkv, d_datt, d_dout, d_qkv, d_att, B, T, C, NH);
    gpu->matmul_backward(F32, d_dqkv, d_dw, NULL, d_dout, d_out, d_w, N, C, C);
    gpu->download(run ? h2 : h1, d_dqkv, nq * sizeof(float));
    dfree(d_qkv, nq * 4), dfree(d_dout, no * 4), dfree(d_w, (size_t)C * C * 4);
    dfree(d_att, na * 4), dfree(d_datt, na * 4), dfree(d_out, no * 4), dfree(d_dqkv, nq * 4);
    dfree(d_dw, (size_t)C * C * 4);
  }
  for (size_t i = 0; i < nq; i++) same &= !memcmp(&h1[i], &h2[i], sizeof(float));
  mt_check_err("attention + matmul backward twice: same bits", same ? 0 : 1, 0);
  free(qkv), free(dout), free(w), free(h1), free(h2);
}

int main(int argc, char **argv) {
  int rc = gpu_compare_start(&argc, &argv, "gpu_ops", 12345, &g_bf16);
  if (rc != 0) return rc;
  g_quick = argc > 2 && !strcmp(argv[2], "quick");
  TOL_MM = g_bf16 ? 2e-2 : 1e-5;
  char missing[512];
  int n_missing = mt_ops_missing(gpu, missing, sizeof missing);
  if (n_missing) printf("  the CUDA op table lacks: %s\n", missing);
  mt_check_err("CUDA op table complete (members left NULL)", n_missing, 0);
  encoder_check(F32, exact_f32, 3, 37, 72, 101, 128);
  test_layernorm(111, 72);
  test_layernorm(1000, 300);
  test_llama(111, 296);
  test_matmul(111, 72, 197, 0);
  test_matmul(1024, 256, 1000, 1);
  test_attention(3, 37, 72, 3);
  test_attention(1, 256, 256, 8);
  test_elementwise(100003);
  test_xent(111, 101, 128);
  test_attn_blocks();
  test_copy_2d();
  kv_spread_check(F32, exact_f32);
  test_determinism();
  test_attn_determinism();
  return gpu_compare_finish("gpu_ops");
}
