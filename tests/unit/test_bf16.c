/* test_bf16: the CPU's ops on bf16 tensors (MT_DT_BF16) against the same
 * ops on fp32 (MT_DT_F32) on the same bf16-representable inputs (tolerances derived in
 * test_bf16.h), and the conversion itself.
 *
 * - Conversion: round to nearest even at and around ties, NaN (quiet,
 *   signalling, negative) stays NaN, +-inf, overflow to inf, subnormals
 *   rounded (not flushed), -0; the vectorised and threaded array versions
 *   give the scalar's bits on 200003 random bit patterns.
 * - Matmuls on every path this build has (sgemm; oneDNN when built):
 *   forward with and without bias, backward dinp (bf16 +=), dw and dbias
 *   (fp32 +=), at edge shapes (1, 7, 31, 33 columns, depth k = 1) and at a
 *   shape the sgemm path cuts into several tiles; the same bits twice (the
 *   sgemm path: at 2 threads and at 1).
 * - Grouped GEMM with an empty group, at 1 and 2 threads; the MoE row
 *   gathers and the weighted combine (dropped slots).
 * - Embedding (and its vocabulary-parallel pieces), layernorm, GELU,
 *   residual, AdamW (master bits equal to the fp32 op's, copy = its
 *   rounding), axpy, scale, sum, sumsq, copy_2d, add_2d, zero, copy.
 * Any failure prints "FAIL: ..." and the test exits 1. */
#include "test_bf16.h"
#include "kernels/cpu/cpu_internal.h"

/* ------------------------------------------------------------------ */
/* conversion                                                          */

static uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void check_round(uint32_t in, uint16_t want, const char *what) {
  uint16_t got = mt_bf16_from_f32(float_of(in));
  MT_CHECK(got == want, "conversion %s: 0x%08x -> 0x%04x, want 0x%04x", what, in, got, want);
}

static void test_conversion(void) {
  check_round(0x3f800000u, 0x3f80, "1.0 exact");
  check_round(0x3f808000u, 0x3f80, "tie to even (down)");
  check_round(0x3f818000u, 0x3f82, "tie to even (up)");
  check_round(0x3f808001u, 0x3f81, "just above a tie");
  check_round(0x3f807fffu, 0x3f80, "just below a tie");
  check_round(0xbf818000u, 0xbf82, "negative tie to even");
  check_round(0x7f800000u, 0x7f80, "+inf");
  check_round(0xff800000u, 0xff80, "-inf");
  check_round(0x7f7fffffu, 0x7f80, "largest float overflows to inf");
  check_round(0x7f7f7fffu, 0x7f7f, "largest bf16 stays");
  check_round(0x7f7f8000u, 0x7f80, "tie above the largest bf16 (odd) goes to inf");
  check_round(0x00000000u, 0x0000, "+0");
  check_round(0x80000000u, 0x8000, "-0");
  check_round(0x00000001u, 0x0000, "smallest subnormal rounds to 0");
  check_round(0x00008000u, 0x0000, "subnormal tie to even (0)");
  check_round(0x00018000u, 0x0002, "subnormal tie to even (up)");
  check_round(0x00010000u, 0x0001, "subnormal exact");
  check_round(0x007fffffu, 0x0080, "largest subnormal carries into the smallest normal");
  check_round(0x80018000u, 0x8002, "negative subnormal tie");
  /* NaN: any payload stays NaN, quiet, sign kept */
  uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7fbfffffu, 0xffc00001u, 0xff800001u};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    uint16_t b = mt_bf16_from_f32(float_of(nans[i]));
    MT_CHECK(isnan(mt_bf16_to_f32(b)) && (b & 0x0040) && (b >> 15) == (nans[i] >> 31),
             "conversion: NaN 0x%08x -> 0x%04x is not a quiet NaN of the same sign", nans[i], b);
  }
  /* bf16 -> fp32 exact, and back */
  for (uint32_t b = 0; b < 0x10000u; b += 7) {
    float f = mt_bf16_to_f32((mt_bf16)b);
    MT_CHECK(bits_of(f) == b << 16, "bf16 0x%04x -> fp32 0x%08x", b, bits_of(f));
    if (!isnan(f))
      MT_CHECK(mt_bf16_from_f32(f) == b, "bf16 0x%04x does not round-trip", b);
  }
  /* array versions (vectorised, threaded above 32768) = the scalar */
  size_t lens[] = {1, 7, 31, 33, 200003};
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
    size_t n = lens[li];
    float *f = test_alloc(n * 4), *back = test_alloc(n * 4);
    mt_bf16 *b = test_alloc(n * 2);
    for (size_t i = 0; i < n; i++) {
      uint32_t u = (uint32_t)mt_splitmix64(i * 977 + n);
      if (i % 11 == 3) u = (u & 0x807fffffu) | 0x7f800000u; /* inf or NaN patterns */
      if (i % 13 == 5) u &= 0x807fffffu;                    /* subnormals */
      f[i] = float_of(u);
    }
    mt_bf16_from_f32_n(b, f, n);
    mt_bf16_to_f32_n(back, b, n);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
      bad += b[i] != mt_bf16_from_f32(f[i]);
      bad += bits_of(back[i]) != (uint32_t)b[i] << 16;
    }
    MT_CHECK(bad == 0, "array conversion of %zu values: %zu differ from the scalar", n, bad);
    free(f), free(back), free(b);
  }
}

/* ------------------------------------------------------------------ */
/* matmuls                                                             */

/* a linear layer's three products and the bias gradient, bf16 against fp32 */
static void check_matmul(const char *path, int N, int C, int OC, int with_bias) {
  char what[160];
  size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
  mt_bf16 *inp = test_alloc(nin * 2), *w = test_alloc(nw * 2), *bias = test_alloc(OC * 2);
  mt_bf16 *dout = test_alloc(nout * 2), *dinp0 = test_alloc(nin * 2);
  float *inp_f = test_alloc(nin * 4), *w_f = test_alloc(nw * 4), *bias_f = test_alloc(OC * 4);
  float *dout_f = test_alloc(nout * 4), *dinp_f = test_alloc(nin * 4);
  test_rand_pair(inp, inp_f, nin, -2, 2);
  test_rand_pair(w, w_f, nw, -1, 1);
  test_rand_pair(bias, bias_f, OC, -1, 1);
  test_rand_pair(dout, dout_f, nout, -1, 1);
  test_rand_pair(dinp0, dinp_f, nin, -1, 1);
  float *dw0 = test_alloc(nw * 4), *db0 = test_alloc(OC * 4);
  for (size_t i = 0; i < nw; i++) dw0[i] = (float)rng_uniform_f64(-1, 1);
  for (int i = 0; i < OC; i++) db0[i] = (float)rng_uniform_f64(-1, 1);

  /* fp32 references */
  float *out_ref = test_alloc(nout * 4), *dw_ref = test_alloc(nw * 4), *db_ref = test_alloc(OC * 4);
  memcpy(dw_ref, dw0, nw * 4), memcpy(db_ref, db0, OC * 4);
  f32ops->matmul_forward(MT_DT_F32, out_ref, inp_f, w_f, with_bias ? bias_f : NULL, N, C, OC);
  f32ops->matmul_backward(MT_DT_F32, dinp_f, dw_ref, db_ref, dout_f, inp_f, w_f, N, C, OC);

  /* bf16, twice (the same bits) */
  mt_bf16 *out[2], *dinp[2];
  float *dw[2], *db[2];
  /* the sgemm path's tiles make it independent of the thread count: the
   * second call runs on 1 thread there (oneDNN: on 2 again) */
  int threads2 = strcmp(path, "sgemm") ? 2 : 1;
  for (int rep = 0; rep < 2; rep++) {
    out[rep] = test_alloc(nout * 2), dinp[rep] = test_alloc(nin * 2);
    dw[rep] = test_alloc(nw * 4), db[rep] = test_alloc(OC * 4);
    memcpy(dinp[rep], dinp0, nin * 2), memcpy(dw[rep], dw0, nw * 4), memcpy(db[rep], db0, OC * 4);
    mt_kernels_set_threads(rep ? threads2 : 2);
    bops->matmul_forward(MT_DT_BF16, out[rep], inp, w, with_bias ? bias : NULL, N, C, OC);
    bops->matmul_backward(MT_DT_BF16, dinp[rep], dw[rep], db[rep], dout, inp, w, N, C, OC);
  }
  mt_kernels_set_threads(2);
  MT_CHECK(!memcmp(out[0], out[1], nout * 2) && !memcmp(dinp[0], dinp[1], nin * 2) &&
               !memcmp(dw[0], dw[1], nw * 4) && !memcmp(db[0], db[1], OC * 4),
           "matmul %s N=%d C=%d OC=%d: a call at 2 threads and one at %d differ", path, N, C, OC,
           threads2);

  /* the drift allowed between two fp32 sums of the same exact products */
  double *ex = test_alloc((nout > nin ? (nout > nw ? nout : nw) : (nin > nw ? nin : nw)) * 8);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++) {
      double s = with_bias ? fabs(bias_f[o]) : 0.0;
      for (int c = 0; c < C; c++) s += fabs((double)inp_f[(size_t)n * C + c] * w_f[(size_t)o * C + c]);
      ex[(size_t)n * OC + o] = 2.0 * (C + 2) * FP32_U * s;
    }
  snprintf(what, sizeof what, "matmul_forward %s N=%d C=%d OC=%d bias=%d", path, N, C, OC,
           with_bias);
  TEST_WITHIN(what, test_worst_bf16(out[0], out_ref, ex, nout, 0.0));
  for (int n = 0; n < N; n++)
    for (int c = 0; c < C; c++) {
      double s = fabs(mt_bf16_to_f32(dinp0[(size_t)n * C + c]));
      for (int o = 0; o < OC; o++) s += fabs((double)dout_f[(size_t)n * OC + o] * w_f[(size_t)o * C + c]);
      ex[(size_t)n * C + c] = 2.0 * (OC + 2) * FP32_U * s;
    }
  snprintf(what, sizeof what, "matmul_backward dinp %s N=%d C=%d OC=%d", path, N, C, OC);
  TEST_WITHIN(what, test_worst_bf16(dinp[0], dinp_f, ex, nin, 0.0));
  for (int o = 0; o < OC; o++)
    for (int c = 0; c < C; c++) {
      double s = fabs(dw0[(size_t)o * C + c]);
      for (int n = 0; n < N; n++) s += fabs((double)dout_f[(size_t)n * OC + o] * inp_f[(size_t)n * C + c]);
      ex[(size_t)o * C + c] = 2.0 * (N + 2) * FP32_U * s;
    }
  snprintf(what, sizeof what, "matmul_backward dw %s N=%d C=%d OC=%d", path, N, C, OC);
  TEST_WITHIN(what, test_worst_f32(dw[0], dw_ref, ex, nw, 0.0));
  for (int o = 0; o < OC; o++) {
    double s = fabs(db0[o]);
    for (int n = 0; n < N; n++) s += fabs(dout_f[(size_t)n * OC + o]);
    ex[o] = 2.0 * (N + 2) * FP32_U * s;
  }
  snprintf(what, sizeof what, "matmul_backward dbias %s N=%d C=%d OC=%d", path, N, C, OC);
  TEST_WITHIN(what, test_worst_f32(db[0], db_ref, ex, (size_t)OC, 0.0));

  /* NULL outputs are skipped: dinp alone leaves nothing else touched */
  memcpy(dinp[1], dinp0, nin * 2);
  bops->matmul_backward(MT_DT_BF16, dinp[1], NULL, NULL, dout, NULL, w, N, C, OC);
  MT_CHECK(!memcmp(dinp[0], dinp[1], nin * 2), "matmul_backward %s: dinp alone differs", path);

  for (int rep = 0; rep < 2; rep++) free(out[rep]), free(dinp[rep]), free(dw[rep]), free(db[rep]);
  free(inp), free(w), free(bias), free(dout), free(dinp0), free(inp_f), free(w_f), free(bias_f);
  free(dout_f), free(dinp_f), free(dw0), free(db0), free(out_ref), free(dw_ref), free(db_ref);
  free(ex);
}

static void test_matmul(void) {
  /* N, C, OC: columns 1, 7, 31, 33; depth 1 for each product (C = 1:
   * forward, OC = 1: dinp, N = 1: dw) */
  static const int shapes[][3] = {{1, 1, 1},   {7, 1, 33},  {33, 7, 31}, {31, 33, 7},
                                  {1, 31, 33}, {33, 31, 1}, {64, 48, 96}};
  const char *paths[] = {"sgemm", "onednn"};
  for (int p = 0; p < 2; p++) {
    if (mt_bf16_gemm_select(paths[p]) != 0) {
      printf("test_bf16: matmul path %s not in this build, skipped\n", paths[p]);
      continue;
    }
    MT_CHECK(!strcmp(mt_bf16_gemm_path(), paths[p]), "path %s selected, %s reported", paths[p],
             mt_bf16_gemm_path());
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
      for (int bias = 0; bias < 2; bias++)
        check_matmul(paths[p], shapes[s][0], shapes[s][1], shapes[s][2], bias);
    /* several tiles of rows and of columns and several depth blocks in each
     * product (tiles 64 x 48, depth blocks of 40) */
    mt_cpu_gemm_bf16_set_block(64, 48, 40);
    check_matmul(paths[p], 150, 70, 200, 1);
    mt_cpu_gemm_bf16_set_block(0, 0, 0);
  }
  MT_CHECK(mt_bf16_gemm_select("fp16") == -1, "an unknown matmul path was accepted");
  mt_bf16_gemm_select("auto");
  const char *note = mt_bf16_gemm_note();
  MT_CHECK(note && strstr(note, "bf16 matmuls"), "the path's note is '%s'", note ? note : "");
  printf("test_bf16: %s (CPU bf16 level %d)\n", note, mt_cpu_bf16_level());
  /* the default on AVX512-BF16 without AMX follows vdpbf16ps's rate: oneDNN
   * from 1.5x the FMA flops (the CPUs measured: 1.0x and 2.0x, far from
   * the line), where oneDNN is built and nothing overrides the choice */
  const char *env = getenv("MT_BF16_GEMM");
  if (mt_cpu_bf16_level() == 1 && (!env || !*env || !strcmp(env, "auto")) &&
      mt_bf16_gemm_select("onednn") == 0) {
    mt_bf16_gemm_select("auto");
    double fma, dp;
    mt_cpu_bf16_peaks(&fma, &dp, 200000L);
    const char *want = fma > 0 && dp / fma >= 1.5 ? "onednn" : "sgemm";
    printf("test_bf16: vdpbf16ps %.1f GFLOP/s, FMA %.1f (%.2fx): %s\n", dp, fma, dp / fma, want);
    MT_CHECK(!strcmp(mt_bf16_gemm_path(), want),
             "vdpbf16ps at %.2fx the FMA flops, but the default path is %s", dp / fma,
             mt_bf16_gemm_path());
  }
}

/* grouped GEMM: groups of 9, 0, 31 and 1 rows; as the fp32 op per group */
static void test_grouped(int threads) {
  const int G = 4, C = 33, OC = 17, off[5] = {0, 9, 9, 40, 41}, N = 41;
  size_t nin = (size_t)N * C, nw = (size_t)G * OC * C, nout = (size_t)N * OC;
  mt_bf16 *inp = test_alloc(nin * 2), *w = test_alloc(nw * 2), *bias = test_alloc(G * OC * 2);
  mt_bf16 *dout = test_alloc(nout * 2), *out = test_alloc(nout * 2), *dinp = test_alloc(nin * 2);
  float *inp_f = test_alloc(nin * 4), *w_f = test_alloc(nw * 4), *bias_f = test_alloc(G * OC * 4);
  float *dout_f = test_alloc(nout * 4), *out_f = test_alloc(nout * 4), *dinp_f = test_alloc(nin * 4);
  float *dw = test_alloc(nw * 4), *dw_f = test_alloc(nw * 4), *db = test_alloc(G * OC * 4),
        *db_f = test_alloc(G * OC * 4);
  test_rand_pair(inp, inp_f, nin, -1, 1);
  test_rand_pair(w, w_f, nw, -1, 1);
  test_rand_pair(bias, bias_f, (size_t)G * OC, -1, 1);
  test_rand_pair(dout, dout_f, nout, -1, 1);
  mt_kernels_set_threads(threads);
  f32ops->grouped_matmul_forward(MT_DT_F32, out_f, inp_f, w_f, bias_f, off, G, C, OC);
  f32ops->grouped_matmul_backward(MT_DT_F32, dinp_f, dw_f, db_f, dout_f, inp_f, w_f, off, G, C, OC);
  bops->grouped_matmul_forward(MT_DT_BF16, out, inp, w, bias, off, G, C, OC);
  bops->grouped_matmul_backward(MT_DT_BF16, dinp, dw, db, dout, inp, w, off, G, C, OC);
  mt_kernels_set_threads(2);
  /* |values| <= 1: sum |a b| <= k, so the fp32 drift is at most 2 (k+2)^2 2^-24 */
  char what[96];
  snprintf(what, sizeof what, "grouped forward (%d threads)", threads);
  TEST_WITHIN(what, test_worst_bf16(out, out_f, NULL, nout, 2.0 * (C + 2) * (C + 2) * FP32_U));
  snprintf(what, sizeof what, "grouped dinp (%d threads)", threads);
  TEST_WITHIN(what, test_worst_bf16(dinp, dinp_f, NULL, nin, 2.0 * (OC + 2) * (OC + 2) * FP32_U));
  snprintf(what, sizeof what, "grouped dw (%d threads)", threads);
  TEST_WITHIN(what, test_worst_f32(dw, dw_f, NULL, nw, 2.0 * (N + 2) * (N + 2) * FP32_U));
  snprintf(what, sizeof what, "grouped dbias (%d threads)", threads);
  TEST_WITHIN(what, test_worst_f32(db, db_f, NULL, (size_t)G * OC, 2.0 * (N + 2) * (N + 2) * FP32_U));
  free(inp), free(w), free(bias), free(dout), free(out), free(dinp), free(inp_f), free(w_f);
  free(bias_f), free(dout_f), free(out_f), free(dinp_f), free(dw), free(dw_f), free(db), free(db_f);
}

/* MoE token movement: 6 tokens, top-2, slots into 12 expert rows, some
 * slots dropped (-1); the same fp32 arithmetic as moe_cpu.c, rounded */
static void test_moe_rows(void) {
  const int N = 6, k = 2, C = 33, R = 12;
  const int slot[12] = {0, 5, 1, -1, 7, 2, -1, -1, 3, 11, 10, 4};
  const int idx[12] = {0, 2, 4, 5, 1, 3, 5, 0, 2, 4, 1, 3};
  float w[12];
  for (int i = 0; i < N * k; i++) w[i] = (float)rng_uniform_f64(0, 1);
  size_t nr = (size_t)R * C, nt = (size_t)N * C;
  mt_bf16 *y = test_alloc(nr * 2), *x = test_alloc(nt * 2), *out = test_alloc(nr * 2),
          *dy = test_alloc(nr * 2), *dx = test_alloc(nt * 2);
  float *y_f = test_alloc(nr * 4), *x_f = test_alloc(nt * 4), *out_f = test_alloc(nr * 4),
        *dy_f = test_alloc(nr * 4), *dx_f = test_alloc(nt * 4);
  float dw[12], dw_f[12];
  test_rand_pair(y, y_f, nr, -1, 1);
  test_rand_pair(x, x_f, nt, -1, 1);
  bops->gather_rows(MT_DT_BF16, out, x, idx, R, C);
  f32ops->gather_rows(MT_DT_F32, out_f, x_f, idx, R, C);
  TEST_WITHIN("gather_rows", test_worst_bf16(out, out_f, NULL, nr, 0.0));
  bops->moe_combine(MT_DT_BF16, out, y, slot, w, N, C, k);
  f32ops->moe_combine(MT_DT_F32, out_f, y_f, slot, w, N, C, k);
  TEST_WITHIN("moe_combine", test_worst_bf16(out, out_f, NULL, nt, 0.0));
  memset(dy, 0, nr * 2), memset(dy_f, 0, nr * 4);
  bops->moe_combine_backward(MT_DT_BF16, dy, dw, x, y, slot, w, N, C, k);
  f32ops->moe_combine_backward(MT_DT_F32, dy_f, dw_f, x_f, y_f, slot, w, N, C, k);
  TEST_WITHIN("moe_combine_backward dy", test_worst_bf16(dy, dy_f, NULL, nr, 0.0));
  TEST_WITHIN("moe_combine_backward dw", test_worst_f32(dw, dw_f, NULL, 12, 2.0 * (C + 2) * C * FP32_U));
  test_rand_pair(dx, dx_f, nt, -1, 1);
  bops->moe_gather_sum(MT_DT_BF16, dx, y, slot, N, C, k);
  f32ops->moe_gather_sum(MT_DT_F32, dx_f, y_f, slot, N, C, k);
  TEST_WITHIN("moe_gather_sum", test_worst_bf16(dx, dx_f, NULL, nt, 0.0));
  free(y), free(x), free(out), free(dy), free(dx), free(y_f), free(x_f), free(out_f), free(dy_f);
  free(dx_f);
}

/* ------------------------------------------------------------------ */
/* embedding, layernorm, gelu, residual                                */

static void test_encoder(void) {
  const int B = 2, T = 7, C = 33, Vp = 11;
  int inp[14];
  for (int i = 0; i < B * T; i++) inp[i] = (i * 5 + 1) % Vp;
  inp[3] = inp[9]; /* a token twice */
  size_t nte = (size_t)Vp * C, npe = (size_t)T * C, nout = (size_t)B * T * C;
  mt_bf16 *wte = test_alloc(nte * 2), *wpe = test_alloc(npe * 2), *out = test_alloc(nout * 2);
  mt_bf16 *dout = test_alloc(nout * 2);
  float *wte_f = test_alloc(nte * 4), *wpe_f = test_alloc(npe * 4), *out_f = test_alloc(nout * 4);
  float *dout_f = test_alloc(nout * 4);
  float *dwte = test_alloc(nte * 4), *dwpe = test_alloc(npe * 4), *dwte_f = test_alloc(nte * 4),
        *dwpe_f = test_alloc(npe * 4);
  test_rand_pair(wte, wte_f, nte, -1, 1);
  test_rand_pair(wpe, wpe_f, npe, -1, 1);
  test_rand_pair(dout, dout_f, nout, -1, 1);
  f32ops->encoder_forward(MT_DT_F32, out_f, inp, wte_f, wpe_f, B, T, C);
  bops->encoder_forward(MT_DT_BF16, out, inp, wte, wpe, B, T, C);
  TEST_WITHIN("encoder_forward", test_worst_bf16(out, out_f, NULL, nout, 0.0));
  /* the same additions in the same order: the same fp32 bits */
  f32ops->encoder_backward(MT_DT_F32, dwte_f, dwpe_f, dout_f, inp, B, T, C);
  bops->encoder_backward(MT_DT_BF16, dwte, dwpe, dout, inp, B, T, C);
  TEST_WITHIN("encoder_backward dwte", test_worst_f32(dwte, dwte_f, NULL, nte, 0.0));
  TEST_WITHIN("encoder_backward dwpe", test_worst_f32(dwpe, dwpe_f, NULL, npe, 0.0));
  /* vocabulary-parallel: rows [3, 8) here, with and without wpe */
  for (int with_wpe = 0; with_wpe < 2; with_wpe++) {
    f32ops->encoder_vp_forward(MT_DT_F32, out_f, inp, wte_f + 3 * C, 3, 5, with_wpe ? wpe_f : NULL,
                               NULL, B, T, C);
    bops->encoder_vp_forward(MT_DT_BF16, out, inp, wte + 3 * C, 3, 5, with_wpe ? wpe : NULL, NULL,
                             B, T, C);
    TEST_WITHIN("encoder_vp_forward", test_worst_bf16(out, out_f, NULL, nout, 0.0));
    f32ops->encoder_vp_backward(MT_DT_F32, dwte_f, with_wpe ? dwpe_f : NULL, dout_f, inp, NULL, 3,
                                5, B, T, C);
    bops->encoder_vp_backward(MT_DT_BF16, dwte, with_wpe ? dwpe : NULL, dout, inp, NULL, 3, 5, B,
                              T, C);
    TEST_WITHIN("encoder_vp_backward dwte", test_worst_f32(dwte, dwte_f, NULL, nte, 0.0));
    TEST_WITHIN("encoder_vp_backward dwpe", test_worst_f32(dwpe, dwpe_f, NULL, npe, 0.0));
  }
  free(wte), free(wpe), free(out), free(dout), free(wte_f), free(wpe_f), free(out_f), free(dout_f);
  free(dwte), free(dwpe), free(dwte_f), free(dwpe_f);
}

static void test_layernorm(void) {
  const int N = 9, C = 71;
  size_t n = (size_t)N * C;
  mt_bf16 *inp = test_alloc(n * 2), *w = test_alloc(C * 2), *b = test_alloc(C * 2);
  mt_bf16 *out = test_alloc(n * 2), *dout = test_alloc(n * 2), *dinp = test_alloc(n * 2);
  float *inp_f = test_alloc(n * 4), *w_f = test_alloc(C * 4), *b_f = test_alloc(C * 4);
  float *out_f = test_alloc(n * 4), *dout_f = test_alloc(n * 4), *dinp_f = test_alloc(n * 4);
  float mean[9], rstd[9], mean_f[9], rstd_f[9];
  float *dw = test_alloc(C * 4), *db = test_alloc(C * 4), *dw_f = test_alloc(C * 4),
        *db_f = test_alloc(C * 4);
  test_rand_pair(inp, inp_f, n, -3, 5);
  test_rand_pair(w, w_f, C, 0.5, 1.5);
  test_rand_pair(b, b_f, C, -0.5, 0.5);
  test_rand_pair(dout, dout_f, n, -1, 1);
  test_rand_pair(dinp, dinp_f, n, -1, 1);
  f32ops->layernorm_forward(MT_DT_F32, out_f, mean_f, rstd_f, inp_f, w_f, b_f, N, C);
  bops->layernorm_forward(MT_DT_BF16, out, mean, rstd, inp, w, b, N, C);
  /* fp32 sums over C in a possibly different vector order: a few fp32
   * roundings of values of size ~ max|out| */
  double fl = 8 * C * FP32_U * test_max_abs(out_f, n);
  TEST_WITHIN("layernorm_forward out", test_worst_bf16(out, out_f, NULL, n, fl));
  TEST_WITHIN("layernorm_forward mean", test_worst_f32(mean, mean_f, NULL, N, 8 * C * FP32_U * 5));
  TEST_WITHIN("layernorm_forward rstd",
              test_worst_f32(rstd, rstd_f, NULL, N, 8 * C * FP32_U * test_max_abs(rstd_f, N)));
  f32ops->layernorm_backward(MT_DT_F32, dinp_f, dw_f, db_f, dout_f, inp_f, w_f, mean_f, rstd_f, N,
                             C);
  bops->layernorm_backward(MT_DT_BF16, dinp, dw, db, dout, inp, w, mean_f, rstd_f, N, C);
  fl = 8 * C * FP32_U * test_max_abs(dinp_f, n);
  TEST_WITHIN("layernorm_backward dinp", test_worst_bf16(dinp, dinp_f, NULL, n, fl));
  TEST_WITHIN("layernorm_backward dw",
              test_worst_f32(dw, dw_f, NULL, C, 4 * N * FP32_U * test_max_abs(dw_f, C)));
  TEST_WITHIN("layernorm_backward db", test_worst_f32(db, db_f, NULL, C, 0.0));
  free(inp), free(w), free(b), free(out), free(dout), free(dinp), free(inp_f), free(w_f), free(b_f);
  free(out_f), free(dout_f), free(dinp_f), free(dw), free(db), free(dw_f), free(db_f);
}

static void test_gelu_residual(void) {
  const size_t n = 1031;
  mt_bf16 *x = test_alloc(n * 2), *y = test_alloc(n * 2), *out = test_alloc(n * 2),
          *d = test_alloc(n * 2);
  float *x_f = test_alloc(n * 4), *y_f = test_alloc(n * 4), *out_f = test_alloc(n * 4),
        *d_f = test_alloc(n * 4);
  test_rand_pair(x, x_f, n, -6, 6);
  test_rand_pair(y, y_f, n, -1, 1);
  test_rand_pair(d, d_f, n, -1, 1);
  /* the same fp32 arithmetic: the fp32 result, rounded */
  f32ops->gelu_forward(MT_DT_F32, out_f, x_f, n);
  bops->gelu_forward(MT_DT_BF16, out, x, n);
  TEST_WITHIN("gelu_forward", test_worst_bf16(out, out_f, NULL, n, 0.0));
  f32ops->gelu_backward(MT_DT_F32, d_f, x_f, y_f, n);
  bops->gelu_backward(MT_DT_BF16, d, x, y, n);
  TEST_WITHIN("gelu_backward", test_worst_bf16(d, d_f, NULL, n, 0.0));
  f32ops->residual_forward(MT_DT_F32, out_f, x_f, y_f, n);
  bops->residual_forward(MT_DT_BF16, out, x, y, n);
  TEST_WITHIN("residual_forward", test_worst_bf16(out, out_f, NULL, n, 0.0));
  free(x), free(y), free(out), free(d), free(x_f), free(y_f), free(out_f), free(d_f);
}

/* ------------------------------------------------------------------ */
/* optimizer and helpers                                               */

static void test_adamw_helpers(void) {
  const size_t n = 70001; /* above the helpers' threading threshold */
  float *p = test_alloc(n * 4), *p_f = test_alloc(n * 4), *g = test_alloc(n * 4);
  float *m = test_alloc(n * 4), *v = test_alloc(n * 4), *m_f = test_alloc(n * 4),
        *v_f = test_alloc(n * 4);
  mt_bf16 *pb = test_alloc(n * 2);
  for (size_t i = 0; i < n; i++) {
    p[i] = p_f[i] = (float)rng_uniform_f64(-1, 1);
    g[i] = (float)rng_uniform_f64(-0.1, 0.1);
  }
  for (int t = 1; t <= 3; t++) {
    f32ops->adamw_update(MT_DT_F32, p_f, NULL, g, m_f, v_f, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    bops->adamw_update(MT_DT_BF16, p, pb, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
  }
  MT_CHECK(!memcmp(p, p_f, n * 4) && !memcmp(m, m_f, n * 4) && !memcmp(v, v_f, n * 4),
           "adamw_update: the fp32 master or moments differ from the fp32 op's");
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += pb[i] != mt_bf16_from_f32(p[i]);
  MT_CHECK(bad == 0, "adamw_update: %zu bf16 copies are not the master rounded", bad);

  mt_bf16 *x = test_alloc(n * 2), *y = test_alloc(n * 2), *z = test_alloc(n * 2);
  float *x_f = test_alloc(n * 4), *y_f = test_alloc(n * 4);
  test_rand_pair(x, x_f, n, -2, 2);
  test_rand_pair(y, y_f, n, -2, 2);
  f32ops->axpy(MT_DT_F32, y_f, 0.37f, x_f, n);
  bops->axpy(MT_DT_BF16, y, 0.37f, x, n);
  TEST_WITHIN("axpy", test_worst_bf16(y, y_f, NULL, n, 0.0));
  f32ops->scale(MT_DT_F32, y_f, -1.7f, n);
  bops->scale(MT_DT_BF16, y, -1.7f, n);
  /* y_f kept fp32 between the two ops, y rounded after axpy: relative 2u */
  double *ex = test_alloc(n * 8);
  for (size_t i = 0; i < n; i++) ex[i] = 1.01 * BF16_U * fabs(y_f[i]);
  TEST_WITHIN("scale", test_worst_bf16(y, y_f, ex, n, 0.0));
  test_rand_pair(x, x_f, n, -2, 2);
  double s = bops->sum(MT_DT_BF16, x, n), s_f = f32ops->sum(MT_DT_F32, x_f, n);
  double q = bops->sumsq(MT_DT_BF16, x, n), q_f = f32ops->sumsq(MT_DT_F32, x_f, n);
  MT_CHECK(s == s_f && q == q_f, "sum %.17g vs %.17g, sumsq %.17g vs %.17g", s, s_f, q, q_f);
  MT_CHECK(bops->sumsq(MT_DT_BF16, x, 0) == 0.0 && bops->sum(MT_DT_BF16, x, 0) == 0.0,
           "sums of nothing are not 0");
  bops->copy(MT_DT_BF16, z, x, n);
  MT_CHECK(!memcmp(z, x, n * 2), "copy");
  bops->zero(MT_DT_BF16, z, n);
  size_t nz = 0;
  for (size_t i = 0; i < n; i++) nz += z[i] != 0;
  MT_CHECK(nz == 0, "zero left %zu non-zero", nz);
  /* 2-D: a (5 x 7) block between leading dimensions 33 and 9 */
  test_rand_pair(y, y_f, n, -2, 2);
  bops->copy_2d(MT_DT_BF16, z, 9, x, 33, 5, 7);
  bops->add_2d(MT_DT_BF16, z, 9, y, 33, 5, 7);
  size_t wrong = 0;
  for (int r = 0; r < 5; r++)
    for (int c = 0; c < 7; c++)
      wrong += z[r * 9 + c] != mt_bf16_from_f32(x_f[r * 33 + c] + y_f[r * 33 + c]);
  MT_CHECK(wrong == 0, "copy_2d + add_2d: %zu elements wrong", wrong);
  free(p), free(p_f), free(g), free(m), free(v), free(m_f), free(v_f), free(pb);
  free(x), free(y), free(z), free(x_f), free(y_f), free(ex);
}

int main(void) {
  test_bf16_start("test_bf16");
  MT_CHECK(isnan(mt_worst(0.0, NAN)), "NaN is not the worst error");
  test_conversion();
  test_matmul();
  test_grouped(1);
  test_grouped(2);
  test_moe_rows();
  test_encoder();
  test_layernorm();
  test_gelu_residual();
  test_adamw_helpers();
  return mt_check_summary("test_bf16");
}
