/* gpu_ops_bf16: every op of the CUDA table (mt_ops_cuda) on bf16 storage
 * against the CPU's (mt_ops_cpu) on the same bf16 inputs.
 *
 *   gpu_ops_bf16 fp32|bf16   (the precision the backend starts at; the ops
 *                             on bf16 are the same at either)
 *
 * Shapes are not multiples of any tile (N = 111 rows, C = 72, OC = 197, T =
 * 37, n = 100003 elements, groups of 30, 0, 65 and 45 rows); backward ops
 * start from non-zero gradients (they accumulate). Both sides compute in
 * fp32 and round each stored bf16 value once, so the tolerances follow from
 * where their fp32 values may differ:
 *   - bit for bit (0 ulp): ops whose fp32 value is the same expression in
 *     the same order on both sides: encoder forward (one add), residual (one
 *     add), scale (one multiply), moe_combine_backward's dy (one multiply),
 *     moe_gather_sum (adds in j order), gather_rows, copy, zero, copy_2d,
 *     add_2d (one add), kv_spread and its backward (fp32 sums in head order,
 *     one rounding), convert fp32 -> bf16 (round to nearest even; a NaN
 *     stays NaN, payload and sign aside), bf16 -> fp32 (exact); the
 *     embedding's fp32 weight
 *     gradients (positions added in the CPU's order).
 *   - within 1 bf16 ulp: axpy (nvcc contracts y + a x into an FMA, one fp32
 *     rounding instead of two; the bf16 rounding of two fp32 values one
 *     fp32 ulp apart differs by at most one bf16 ulp), GELU (tanhf against
 *     the CPU's polynomial exp, relative error about 2e-7, far below the
 *     bf16 ulp of 2^-8..2^-7 relative on inputs in [-4, 4]), its backward,
 *     moe_combine (w y summed with or without FMAs).
 *   - sums (matmuls, LayerNorm): the two fp32 values differ by the fp32
 *     summation order (cuBLASLt's against sgemm's or oneDNN's; a warp's
 *     strided sums against the CPU's vector sums), then each is rounded
 *     once. Per element |gpu - cpu| <= 1 bf16 ulp of cpu + the fp32 order
 *     error; err = max over elements of the part beyond one ulp, relative
 *     to max |cpu|. The fp32 order error is bounded by k u sum|a_i b_i|
 *     (u = 2^-24, k <= 197 terms of |a b| <= 1 here: below 2e-5 of max|out|
 *     for these shapes); tolerance 2e-5. A second rounding (say of the
 *     product before the bias or before dinp is added) would add up to half
 *     an ulp, 2^-9 of the value, 100 times that, so it cannot pass.
 *   - fp32 outputs (dw, dbias, LayerNorm mean/rstd/dw/db, combine dw): max
 *     |gpu - cpu| / max |cpu| <= 1e-5 (fp32 sums in other orders), as in
 *     gpu_ops; scalar sums (double) 1e-9.
 *   - adamw_update: param, m and v bit for bit the CUDA adamw_update on fp32
 *     (no copy) on the same inputs, the bf16 copy = round(param) bit for
 *     bit; against the CPU's bf16 adamw within 1e-5 (FMA contraction).
 * RMSNorm as LayerNorm; SwiGLU and rotary embedding within 1 ulp (expf
 * against the CPU's polynomial; an FMA or not).
 * NaN fails every check (err <= tol is false for NaN). Also: the table has no
 * NULL member (the block attention and cross-entropy, which gpu_attn_bf16
 * checks, included), and the same inputs twice give the same bits.
 * No GPU: prints "SKIP: <reason>" and exits 77. */
#include "gpu_compare.h"

#define TOL_SUM_F32 1e-5 /* fp32 results of sums in other orders */
#define TOL_ORDER 2e-5   /* fp32 order error beyond one bf16 ulp, of max |out| */
#define TOL_SUM 1e-9     /* double scalar sums */

/* ------------------------------------------------------------------ */
/* bf16 buffers and comparisons                                        */

static float f32(mt_bf16 b) { return mt_bf16_to_f32(b); }

static int bf16_isnan(mt_bf16 b) { return (b & 0x7fff) > 0x7f80; }
/* the bf16 values in order as integers: ulps apart = difference */
static long ordinal(mt_bf16 b) { return b & 0x8000 ? -(long)(b & 0x7fff) : (long)b; }
/* the spacing of the bf16 grid just above |x| (an ulp of x) */
static double ulp_of(mt_bf16 b) {
  int e = (b >> 7) & 0xff;
  return ldexp(1.0, (e ? e : 1) - 127 - 7);
}

/* Compares the device's bf16 tensor d with ref: err = max over elements of
 * (|gpu - cpu| - ulps ulp(cpu)) beyond 0, relative to max |cpu| (NaN on
 * either side: NaN); prints the row with the largest ulp distance seen. */
static void cmp_bf16(const char *what, const mt_bf16 *ref, const mt_bf16 *d, size_t n, int ulps,
                     double tol) {
  mt_bf16 *h = host_bytes(d, n * sizeof(mt_bf16));
  double beyond = 0.0, scale = 0.0;
  long most = 0, differ = 0;
  for (size_t i = 0; i < n; i++) {
    if (bf16_isnan(h[i]) || bf16_isnan(ref[i])) {
      beyond = NAN;
      continue;
    }
    double g = f32(h[i]), r = f32(ref[i]);
    long apart = labs(ordinal(h[i]) - ordinal(ref[i]));
    if (apart > most) most = apart;
    differ += apart != 0;
    beyond = mt_worst(beyond, fmax(0.0, fabs(g - r) - ulps * ulp_of(ref[i])));
    if (fabs(r) > scale) scale = fabs(r);
  }
  char row[160];
  snprintf(row, sizeof row, "%s [%ld/%zu differ, <= %ld ulp]", what, differ, n, most);
  mt_check_err(row, beyond / (scale > 0 ? scale : 1.0), tol);
  free(h);
}
#define EXACT(what, ref, d, n) cmp_bf16(what, ref, d, n, 0, 0.0)
#define ULP1(what, ref, d, n) cmp_bf16(what, ref, d, n, 1, 0.0)
#define SUMS(what, ref, d, n) cmp_bf16(what, ref, d, n, 1, TOL_ORDER)

/* every byte of the device buffer equals the host one's */
static void same_bits(const char *what, const void *host, const void *d, size_t bytes) {
  mt_check_err(what, same_bytes(host, d, bytes) ? 0 : 1, 0);
}

/* ------------------------------------------------------------------ */

static void test_table(void) {
  char missing[512];
  int n = mt_ops_missing(gpu, missing, sizeof missing);
  if (n) printf("  the CUDA table lacks %s\n", missing);
  mt_check_err("CUDA table: members missing", n, 0);
}

static void test_matmul(int N, int C, int OC) {
  printf("matmul N=%d C=%d OC=%d\n", N, C, OC);
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
  mt_bf16 *inp = rnd_bf16(ni, -1, 1), *w = rnd_bf16(nw, -1, 1), *bias = rnd_bf16(OC + 1, -1, 1);
  mt_bf16 *out = rnd_bf16(no, -1, 1), *dout = rnd_bf16(no, -1, 1), *dinp = rnd_bf16(ni, -1, 1);
  float *dw = rnd(nw, -1, 1), *dbias = rnd(OC, -1, 1);
  mt_bf16 *d_inp = devb(inp, ni), *d_w = devb(w, nw), *d_bias = devb(bias, OC + 1);
  mt_bf16 *d_out = devb(out, no), *d_dout = devb(dout, no), *d_dinp = devb(dinp, ni);
  float *d_dw = dev(dw, nw), *d_dbias = dev(dbias, OC);
  /* the bias at the allocation (cuBLASLt's bias epilogue), one element on
   * (2-byte aligned: written first, the product added with beta = 1) */
  for (int b = 0; b < 3; b++) {
    const size_t bo = b == 2 ? 1 : 0;
    const char *what[3] = {"matmul_forward + bias (epilogue)", "matmul_forward, no bias",
                           "matmul_forward + bias at +2 bytes (no epilogue)"};
    cpu->matmul_forward(BF16, out, inp, w, b == 1 ? NULL : bias + bo, N, C, OC);
    gpu->matmul_forward(BF16, d_out, d_inp, d_w, b == 1 ? NULL : d_bias + bo, N, C, OC);
    SUMS(what[b], out, d_out, no);
  }
  cpu->matmul_backward(BF16, dinp, dw, dbias, dout, inp, w, N, C, OC);
  gpu->matmul_backward(BF16, d_dinp, d_dw, d_dbias, d_dout, d_inp, d_w, N, C, OC);
  SUMS("matmul_backward dinp = round(dinp + dout w)", dinp, d_dinp, ni);
  CMP("matmul_backward dw (fp32)", dw, d_dw, nw, TOL_SUM_F32);
  CMP("matmul_backward dbias (fp32 chunked sums)", dbias, d_dbias, OC, TOL_SUM_F32);
  cpu->matmul_backward(BF16, dinp, NULL, NULL, dout, NULL, w, N, C, OC);
  gpu->matmul_backward(BF16, d_dinp, NULL, NULL, d_dout, NULL, d_w, N, C, OC);
  SUMS("matmul_backward dinp only", dinp, d_dinp, ni);
  cpu->matmul_backward(BF16, NULL, dw, dbias, dout, inp, NULL, N, C, OC);
  gpu->matmul_backward(BF16, NULL, d_dw, d_dbias, d_dout, d_inp, NULL, N, C, OC);
  CMP("matmul_backward dw, dbias only: dw", dw, d_dw, nw, TOL_SUM_F32);
  CMP("matmul_backward dw, dbias only: dbias", dbias, d_dbias, OC, TOL_SUM_F32);
  dfree(d_inp, ni * 2), dfree(d_w, nw * 2), dfree(d_bias, (OC + 1) * 2), dfree(d_out, no * 2);
  dfree(d_dout, no * 2), dfree(d_dinp, ni * 2), dfree(d_dw, nw * 4), dfree(d_dbias, OC * 4);
  free(inp), free(w), free(bias), free(out), free(dout), free(dinp), free(dw), free(dbias);
}

/* groups of rows off[g]..off[g+1], one empty; OC odd, so every other
 * group's weights and bias start off the 16-byte grid */
static void test_grouped_matmul(void) {
  const int G = 4, C = 72, OC = 53, off[5] = {0, 30, 30, 95, 140}, N = off[G];
  printf("grouped matmul G=%d rows=%d C=%d OC=%d\n", G, N, C, OC);
  size_t ni = (size_t)N * C, nw = (size_t)G * OC * C, no = (size_t)N * OC, nb = (size_t)G * OC;
  mt_bf16 *inp = rnd_bf16(ni, -1, 1), *w = rnd_bf16(nw, -1, 1), *bias = rnd_bf16(nb, -1, 1);
  mt_bf16 *out = rnd_bf16(no, -1, 1), *dout = rnd_bf16(no, -1, 1), *dinp = rnd_bf16(ni, -1, 1);
  float *dw = rnd(nw, -1, 1), *dbias = rnd(nb, -1, 1);
  mt_bf16 *d_inp = devb(inp, ni), *d_w = devb(w, nw), *d_bias = devb(bias, nb);
  mt_bf16 *d_out = devb(out, no), *d_dout = devb(dout, no), *d_dinp = devb(dinp, ni);
  float *d_dw = dev(dw, nw), *d_dbias = dev(dbias, nb);
  cpu->grouped_matmul_forward(BF16, out, inp, w, bias, off, G, C, OC);
  gpu->grouped_matmul_forward(BF16, d_out, d_inp, d_w, d_bias, off, G, C, OC);
  SUMS("grouped_matmul_forward + bias", out, d_out, no);
  cpu->grouped_matmul_backward(BF16, dinp, dw, dbias, dout, inp, w, off, G, C, OC);
  gpu->grouped_matmul_backward(BF16, d_dinp, d_dw, d_dbias, d_dout, d_inp, d_w, off, G, C, OC);
  SUMS("grouped_matmul_backward dinp", dinp, d_dinp, ni);
  CMP("grouped_matmul_backward dw (fp32)", dw, d_dw, nw, TOL_SUM_F32);
  CMP("grouped_matmul_backward dbias (fp32)", dbias, d_dbias, nb, TOL_SUM_F32);
  dfree(d_inp, ni * 2), dfree(d_w, nw * 2), dfree(d_bias, nb * 2), dfree(d_out, no * 2);
  dfree(d_dout, no * 2), dfree(d_dinp, ni * 2), dfree(d_dw, nw * 4), dfree(d_dbias, nb * 4);
  free(inp), free(w), free(bias), free(out), free(dout), free(dinp), free(dw), free(dbias);
}

/* Token rows (N, C) and expert rows (N k, C): slot n*k+j names the expert
 * row of token n's j-th choice, each row once (41 is prime to N k), every
 * seventh dropped (-1). gather_rows takes 200 rows of the tokens. */
static void test_moe_rows(void) {
  const int N = 111, C = 72, k = 3, rows = 200;
  printf("moe rows N=%d C=%d k=%d\n", N, C, k);
  size_t nk = (size_t)N * k, ny = nk * C, nx = (size_t)N * C, ng = (size_t)rows * C;
  int *slot = malloc(nk * sizeof(int)), *idx = malloc(rows * sizeof(int));
  for (size_t i = 0; i < nk; i++) slot[i] = i % 7 == 3 ? -1 : (int)((i * 41) % nk);
  for (int i = 0; i < rows; i++) idx[i] = (i * 53) % N;
  float *w = rnd(nk, 0, 1), *dw = rnd(nk, -1, 1);
  mt_bf16 *y = rnd_bf16(ny, -1, 1), *x = rnd_bf16(nx, -1, 1), *g = rnd_bf16(ng, -1, 1);
  mt_bf16 *o = rnd_bf16(nx, -1, 1);
  mt_bf16 *dy = rnd_bf16(ny, -1, 1);
  int *d_slot = devi(slot, nk), *d_idx = devi(idx, rows);
  float *d_w = dev(w, nk), *d_dw = dev(dw, nk);
  mt_bf16 *d_y = devb(y, ny), *d_x = devb(x, nx), *d_g = devb(g, ng), *d_o = devb(o, nx);
  mt_bf16 *d_dy = devb(dy, ny);
  cpu->gather_rows(BF16, g, x, idx, rows, C);
  gpu->gather_rows(BF16, d_g, d_x, d_idx, rows, C);
  EXACT("gather_rows", g, d_g, ng);
  cpu->gather_rows(BF16, g, x, idx, rows, C - 3); /* rows of 69: not whole 16-byte vectors */
  gpu->gather_rows(BF16, d_g, d_x, d_idx, rows, C - 3);
  EXACT("gather_rows, rows of 69", g, d_g, ng);
  cpu->moe_combine(BF16, o, y, slot, w, N, C, k);
  gpu->moe_combine(BF16, d_o, d_y, d_slot, d_w, N, C, k);
  ULP1("moe_combine (FMA or not)", o, d_o, nx);
  cpu->moe_combine_backward(BF16, dy, dw, o, y, slot, w, N, C, k);
  gpu->moe_combine_backward(BF16, d_dy, d_dw, d_o, d_y, d_slot, d_w, N, C, k);
  EXACT("moe_combine_backward dy = round(w dout)", dy, d_dy, ny);
  CMP("moe_combine_backward dw (fp32 dots)", dw, d_dw, nk, TOL_SUM_F32);
  cpu->moe_gather_sum(BF16, x, y, slot, N, C, k);
  gpu->moe_gather_sum(BF16, d_x, d_y, d_slot, N, C, k);
  EXACT("moe_gather_sum (j order)", x, d_x, nx);
  dfree(d_slot, nk * 4), dfree(d_idx, rows * 4), dfree(d_w, nk * 4), dfree(d_dw, nk * 4);
  dfree(d_y, ny * 2), dfree(d_x, nx * 2), dfree(d_g, ng * 2), dfree(d_o, nx * 2);
  dfree(d_dy, ny * 2);
  free(slot), free(idx), free(w), free(dw), free(y), free(x), free(g), free(o), free(dy);
}

/* bf16 outputs of the encoder checks: the same bits */
static void exact_bf16(const char *what, const void *ref, const void *d, size_t n) {
  EXACT(what, ref, d, n);
}

static void test_layernorm(int N, int C) {
  printf("layernorm N=%d C=%d\n", N, C);
  size_t n = (size_t)N * C;
  mt_bf16 *inp = rnd_bf16(n, -2, 2), *w = rnd_bf16(C, 0.5f, 1.5f), *b = rnd_bf16(C, -0.5f, 0.5f);
  mt_bf16 *out = rnd_bf16(n, -1, 1), *dout = rnd_bf16(n, -1, 1), *dinp = rnd_bf16(n, -1, 1);
  float *mean = rnd(N, 0, 1), *rstd = rnd(N, 0, 1), *dw = rnd(C, -1, 1), *db = rnd(C, -1, 1);
  mt_bf16 *d_inp = devb(inp, n), *d_w = devb(w, C), *d_b = devb(b, C), *d_out = devb(out, n);
  mt_bf16 *d_dout = devb(dout, n), *d_dinp = devb(dinp, n);
  float *d_mean = dev(mean, N), *d_rstd = dev(rstd, N), *d_dw = dev(dw, C), *d_db = dev(db, C);
  cpu->layernorm_forward(BF16, out, mean, rstd, inp, w, b, N, C);
  gpu->layernorm_forward(BF16, d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C);
  SUMS("layernorm_forward out", out, d_out, n);
  CMP("layernorm_forward mean (fp32)", mean, d_mean, N, TOL_SUM_F32);
  CMP("layernorm_forward rstd (fp32)", rstd, d_rstd, N, TOL_SUM_F32);
  cpu->layernorm_backward(BF16, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  gpu->layernorm_backward(BF16, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
  SUMS("layernorm_backward dinp", dinp, d_dinp, n);
  CMP("layernorm_backward dw (fp32)", dw, d_dw, C, TOL_SUM_F32);
  CMP("layernorm_backward db (fp32)", db, d_db, C, TOL_SUM_F32);
  dfree(d_inp, n * 2), dfree(d_w, C * 2), dfree(d_b, C * 2), dfree(d_out, n * 2);
  dfree(d_dout, n * 2), dfree(d_dinp, n * 2), dfree(d_mean, N * 4), dfree(d_rstd, N * 4);
  dfree(d_dw, C * 4), dfree(d_db, C * 4);
  free(inp), free(w), free(b), free(out), free(dout), free(dinp), free(mean), free(rstd);
  free(dw), free(db);
}

/* the Llama block's ops on bf16: RMSNorm (sums: as LayerNorm), SwiGLU
 * (expf against the CPU's polynomial: 1 ulp), rope (an FMA or not: 1 ulp) */
static void test_llama(int N, int C) {
  printf("rmsnorm, swiglu, rope N=%d C=%d\n", N, C);
  size_t n = (size_t)N * C;
  mt_bf16 *inp = rnd_bf16(2 * n, -3, 3), *w = rnd_bf16(C, 0.5f, 1.5f), *out = rnd_bf16(n, -1, 1);
  mt_bf16 *dout = rnd_bf16(n, -1, 1), *dinp = rnd_bf16(2 * n, -1, 1);
  float *rstd = rnd(N, 0, 1), *dw = rnd(C, -1, 1);
  mt_bf16 *d_inp = devb(inp, 2 * n), *d_w = devb(w, C), *d_out = devb(out, n);
  mt_bf16 *d_dout = devb(dout, n), *d_dinp = devb(dinp, 2 * n);
  float *d_rstd = dev(rstd, N), *d_dw = dev(dw, C);
  cpu->rmsnorm_forward(BF16, out, rstd, inp, w, N, C, 1e-5f);
  gpu->rmsnorm_forward(BF16, d_out, d_rstd, d_inp, d_w, N, C, 1e-5f);
  SUMS("rmsnorm_forward out", out, d_out, n);
  CMP("rmsnorm_forward rstd (fp32)", rstd, d_rstd, N, TOL_SUM_F32);
  cpu->rmsnorm_backward(BF16, dinp, dw, dout, inp, w, rstd, N, C);
  gpu->rmsnorm_backward(BF16, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
  SUMS("rmsnorm_backward dinp", dinp, d_dinp, n);
  CMP("rmsnorm_backward dw (fp32)", dw, d_dw, C, TOL_SUM_F32);
  cpu->swiglu_forward(BF16, out, inp, N, C);
  gpu->swiglu_forward(BF16, d_out, d_inp, N, C);
  ULP1("swiglu_forward", out, d_out, n);
  cpu->swiglu_backward(BF16, dinp, inp, dout, N, C);
  gpu->swiglu_backward(BF16, d_dinp, d_inp, d_dout, N, C);
  ULP1("swiglu_backward", dinp, d_dinp, 2 * n);
  const int T = 37, hs = 24, nh = 3, ld = 80, B = (int)(2 * n / ((size_t)T * ld));
  float *cs = rnd((size_t)T * hs, -1, 1), *d_cs = dev(cs, (size_t)T * hs);
  cpu->rope(BF16, inp, ld, B, T, nh, hs, cs, NULL, 0);
  gpu->rope(BF16, d_inp, ld, B, T, nh, hs, d_cs, NULL, 0);
  ULP1("rope", inp, d_inp, 2 * n);
  dfree(d_inp, 4 * n), dfree(d_w, C * 2), dfree(d_out, n * 2), dfree(d_dout, n * 2);
  dfree(d_dinp, 4 * n), dfree(d_rstd, N * 4), dfree(d_dw, C * 4), dfree(d_cs, (size_t)T * hs * 4);
  free(inp), free(w), free(out), free(dout), free(dinp), free(rstd), free(dw), free(cs);
}

static void test_elementwise(size_t n) {
  printf("elementwise n=%zu\n", n);
  mt_bf16 *x = rnd_bf16(n, -4, 4), *y = rnd_bf16(n, -1, 1), *o = rnd_bf16(n, -1, 1);
  mt_bf16 *g = rnd_bf16(n, -1, 1);
  mt_bf16 *d_x = devb(x, n), *d_y = devb(y, n), *d_o = devb(o, n), *d_g = devb(g, n);
  cpu->gelu_forward(BF16, o, x, n);
  gpu->gelu_forward(BF16, d_o, d_x, n);
  ULP1("gelu_forward (tanhf vs the CPU's polynomial)", o, d_o, n);
  cpu->gelu_backward(BF16, g, x, y, n);
  gpu->gelu_backward(BF16, d_g, d_x, d_y, n);
  ULP1("gelu_backward", g, d_g, n);
  cpu->residual_forward(BF16, o, x, y, n);
  gpu->residual_forward(BF16, d_o, d_x, d_y, n);
  EXACT("residual_forward", o, d_o, n);
  /* from the same inputs: gelu_backward left g and d_g apart by an ulp */
  gpu->upload(d_g, g, n * sizeof(mt_bf16));
  cpu->axpy(BF16, g, -0.75f, x, n);
  gpu->axpy(BF16, d_g, -0.75f, d_x, n);
  ULP1("axpy (an FMA or not)", g, d_g, n);
  gpu->upload(d_g, g, n * sizeof(mt_bf16));
  cpu->scale(BF16, g, 0.3f, n);
  gpu->scale(BF16, d_g, 0.3f, n);
  EXACT("scale", g, d_g, n);
  double sc = cpu->sumsq(BF16, x, n), sg = gpu->sumsq(BF16, d_x, n);
  mt_check_err("sumsq (double)", fabs(sc - sg) / sc, TOL_SUM);
  double uc = cpu->sum(BF16, y, n), ug = gpu->sum(BF16, d_y, n);
  mt_check_err("sum (double)", fabs(uc - ug) / fmax(fabs(uc), 1.0), TOL_SUM);
  cpu->copy(BF16, o, x, n);
  gpu->copy(BF16, d_o, d_x, n);
  EXACT("copy", o, d_o, n);
  cpu->zero(BF16, o, n / 2);
  gpu->zero(BF16, d_o, n / 2);
  EXACT("zero (half)", o, d_o, n);
  free(o), free(g);
  /* convert fp32 -> bf16 and back on random values and on the edges of the
   * rounding: ties (to even), subnormals, overflow to inf, inf, -0 */
  float *f = rnd(n, -3, 3), *back = malloc(n * sizeof(float));
  const float edges[] = {1.0f + 0x1p-8f, 1.0f + 0x3p-8f, -1.0f - 0x1p-8f, 0x1p-130f,
                         0x1.81p-128f, -0x1p-149f, 3.4e38f, -3.4e38f, INFINITY, -0.0f,
                         65504.0f, 1e-3f};
  for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) f[i * 997] = edges[i];
  f[5] = NAN;
  mt_bf16 *fb = malloc(n * sizeof(mt_bf16));
  float *d_f = dev(f, n), *d_back = dev(back, n);
  cpu->convert(fb, BF16, f, F32, n);
  gpu->convert(d_o, BF16, d_f, F32, n);
  mt_bf16 *h = host_bytes(d_o, n * sizeof(mt_bf16));
  mt_check_true("convert to bf16: NaN stays NaN", bf16_isnan(h[5]) && bf16_isnan(fb[5]));
  h[5] = fb[5] = 0;
  gpu->upload(d_o, h, n * sizeof(mt_bf16));
  EXACT("convert to bf16 (nearest even; NaN aside)", fb, d_o, n);
  cpu->convert(back, F32, fb, BF16, n);
  gpu->convert(d_back, F32, d_o, BF16, n);
  same_bits("convert to fp32 (exact)", back, d_back, n * sizeof(float));
  dfree(d_x, n * 2), dfree(d_y, n * 2), dfree(d_o, n * 2), dfree(d_g, n * 2);
  dfree(d_f, n * 4), dfree(d_back, n * 4);
  free(x), free(y), free(f), free(back), free(fb), free(h);
}

static void test_copy_2d(void) {
  printf("copy_2d, add_2d\n");
  /* columns C..3C of a (rows, 3C) buffer into (rows, 2C) and added back;
   * then a ragged range at odd offsets */
  const size_t C = 72, rows = 333, nsrc = rows * 3 * C, ndst = rows * 2 * C;
  mt_bf16 *src = rnd_bf16(nsrc, -1, 1), *dst = rnd_bf16(ndst, -1, 1);
  mt_bf16 *d_src = devb(src, nsrc), *d_dst = devb(dst, ndst);
  cpu->copy_2d(BF16, dst, 2 * C, src + C, 3 * C, rows, 2 * C);
  gpu->copy_2d(BF16, d_dst, 2 * C, d_src + C, 3 * C, rows, 2 * C);
  EXACT("copy_2d (rows, 2C) from (rows, 3C) at column C", dst, d_dst, ndst);
  cpu->add_2d(BF16, src + C, 3 * C, dst, 2 * C, rows, 2 * C);
  gpu->add_2d(BF16, d_src + C, 3 * C, d_dst, 2 * C, rows, 2 * C);
  EXACT("add_2d back (columns 0..C untouched)", src, d_src, nsrc);
  cpu->add_2d(BF16, dst + 5, 2 * C, src + 7, 3 * C, rows - 1, C + 3);
  gpu->add_2d(BF16, d_dst + 5, 2 * C, d_src + 7, 3 * C, rows - 1, C + 3);
  EXACT("add_2d ragged", dst, d_dst, ndst);
  dfree(d_src, nsrc * 2), dfree(d_dst, ndst * 2);
  free(src), free(dst);
}

/* AdamW with a bf16 copy against the CUDA one without (the same bits for
 * the master, m and v) and the CPU's with a bf16 copy; the copy =
 * round(param) */
static void test_adamw(size_t n) {
  printf("adamw n=%zu\n", n);
  float *p = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 0, 0.01f);
  float *grad = rnd(n, -1, 1);
  mt_bf16 *pb = rnd_bf16(n, -1, 1);
  float *d_grad = dev(grad, n);
  float *d_p = dev(p, n), *d_m = dev(m, n), *d_v = dev(v, n);    /* with the bf16 copy */
  float *d_p2 = dev(p, n), *d_m2 = dev(m, n), *d_v2 = dev(v, n); /* fp32, no copy */
  mt_bf16 *d_pb = devb(pb, n);
  for (int t = 1; t <= 3; t++) {
    /* the copy refreshed on the last step only (NULL: not refreshed) */
    cpu->adamw_update(BF16, p, t == 3 ? pb : NULL, grad, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                      t);
    gpu->adamw_update(BF16, d_p, t == 3 ? d_pb : NULL, d_grad, d_m, d_v, n, 1e-3f, 0.9f, 0.95f,
                      1e-8f, 0.1f, t);
    gpu->adamw_update(F32, d_p2, NULL, d_grad, d_m2, d_v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    if (t == 2) same_bits("adamw_update, param_copy NULL: the copy untouched", pb, d_pb, n * 2);
  }
  float *h = malloc(n * sizeof(float));
  const float *pairs[3][2] = {{d_p, d_p2}, {d_m, d_m2}, {d_v, d_v2}};
  const char *names[3] = {"adamw_update param = fp32's (bits)", "adamw_update m (bits)",
                          "adamw_update v (bits)"};
  for (int i = 0; i < 3; i++) {
    gpu->download(h, pairs[i][1], n * sizeof(float));
    same_bits(names[i], h, pairs[i][0], n * sizeof(float));
  }
  gpu->download(h, d_p, n * sizeof(float));
  mt_bf16 *rounded = malloc(n * sizeof(mt_bf16));
  mt_bf16_from_f32_n(rounded, h, n);
  same_bits("adamw_update param_copy = round(param) (bits)", rounded, d_pb, n * sizeof(mt_bf16));
  CMP("adamw_update param against the CPU's", p, d_p, n, TOL_SUM_F32);
  CMP("adamw_update m against the CPU's", m, d_m, n, TOL_SUM_F32);
  CMP("adamw_update v against the CPU's", v, d_v, n, TOL_SUM_F32);
  float *ds[] = {d_grad, d_p, d_m, d_v, d_p2, d_m2, d_v2};
  for (int i = 0; i < 7; i++) dfree(ds[i], n * 4);
  dfree(d_pb, n * 2);
  free(p), free(m), free(v), free(grad), free(pb), free(h), free(rounded);
}

/* the same inputs twice: the same bits (matmul backward with its chunked
 * dbias, layernorm backward, the combine's backward) */
static void test_determinism(void) {
  printf("determinism\n");
  /* the combine: N / k tokens, N expert rows */
  const int N = 150, C = 96, OC = 130, k = 2;
  size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC, nk = (size_t)N;
  mt_bf16 *inp = rnd_bf16(ni, -1, 1), *w = rnd_bf16(nw, -1, 1), *dout = rnd_bf16(no, -1, 1);
  mt_bf16 *lw = rnd_bf16(C, 0.5f, 1.5f), *lb = rnd_bf16(C, -0.5f, 0.5f);
  float *cw = rnd(nk, 0, 1);
  int *slot = malloc(nk * sizeof(int));
  for (size_t i = 0; i < nk; i++) slot[i] = (int)((i * 7) % nk); /* 7 prime to 150 */
  void *res[2];
  const size_t bytes = ni * 2 + nw * 4 + OC * 4 + ni * 2 + C * 8 + ni * 2 + nk * 4;
  for (int run = 0; run < 2; run++) {
    mt_bf16 *d_inp = devb(inp, ni), *d_w = devb(w, nw), *d_dout = devb(dout, no);
    mt_bf16 *d_lw = devb(lw, C), *d_lb = devb(lb, C), *d_dinp = devb(inp, ni);
    mt_bf16 *d_ln = devb(inp, ni), *d_dln = devb(inp, ni), *d_dy = devb(inp, ni);
    float *d_dw = gpu->alloc(MT_MEM_OTHER, nw * 4), *d_db = gpu->alloc(MT_MEM_OTHER, OC * 4);
    float *d_stats = gpu->alloc(MT_MEM_OTHER, (size_t)N * 8);
    float *d_lwg = gpu->alloc(MT_MEM_OTHER, C * 8), *d_cw = dev(cw, nk);
    float *d_cdw = gpu->alloc(MT_MEM_OTHER, nk * 4);
    int *d_slot = devi(slot, nk);
    gpu->matmul_backward(BF16, d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
    gpu->layernorm_forward(BF16, d_ln, d_stats, d_stats + N, d_inp, d_lw, d_lb, N, C);
    gpu->layernorm_backward(BF16, d_dln, d_lwg, d_lwg + C, d_dinp, d_inp, d_lw, d_stats,
                            d_stats + N, N, C);
    gpu->moe_combine_backward(BF16, d_dy, d_cdw, d_dinp, d_ln, d_slot, d_cw, N / k, C, k);
    char *h = res[run] = malloc(bytes);
    size_t at = 0;
    const void *parts[] = {d_dinp, d_dw, d_db, d_dln, d_lwg, d_dy, d_cdw};
    const size_t sizes[] = {ni * 2, nw * 4, OC * 4, ni * 2, C * 8, ni * 2, nk * 4};
    for (int i = 0; i < 7; i++) {
      gpu->download(h + at, parts[i], sizes[i]);
      at += sizes[i];
    }
    dfree(d_inp, ni * 2), dfree(d_w, nw * 2), dfree(d_dout, no * 2), dfree(d_lw, C * 2);
    dfree(d_lb, C * 2), dfree(d_dinp, ni * 2), dfree(d_ln, ni * 2), dfree(d_dln, ni * 2);
    dfree(d_dy, ni * 2), dfree(d_dw, nw * 4), dfree(d_db, OC * 4), dfree(d_stats, (size_t)N * 8);
    dfree(d_lwg, C * 8), dfree(d_cw, nk * 4), dfree(d_cdw, nk * 4), dfree(d_slot, nk * 4);
  }
  mt_check_err("matmul, layernorm, combine backward twice: same bits",
               memcmp(res[0], res[1], bytes) ? 1 : 0, 0);
  free(res[0]), free(res[1]), free(inp), free(w), free(dout), free(lw), free(lb), free(cw);
  free(slot);
}

int main(int argc, char **argv) {
  int bf16, rc = gpu_compare_start(&argc, &argv, "gpu_ops_bf16", 4242, &bf16);
  if (rc != 0) return rc;
  printf("CPU bf16 matmuls: %s\n", mt_bf16_gemm_path());
  test_table();
  test_matmul(111, 72, 197);
  test_grouped_matmul();
  test_moe_rows();
  encoder_check(BF16, exact_bf16, 3, 37, 72, 101, 128);
  test_layernorm(111, 72);
  test_llama(111, 296);
  test_elementwise(100003);
  test_copy_2d();
  kv_spread_check(BF16, exact_bf16);
  test_adamw(100003);
  test_determinism();
  return gpu_compare_finish("gpu_ops_bf16");
}
