/* gpu_moe_ops: the Mixture-of-Experts ops of the CUDA backend against the
 * CPU backend on the same inputs (the CPU ops are checked against finite
 * differences and references by tests/unit/test_moe.c).
 *
 *   gpu_moe_ops fp32|bf16 [--cpu]
 *
 * Sizes: E = 4, 5, 8 experts (and 40: more experts than a warp's lanes),
 * k = 1, 2 (3), N = 203 rows (7 sequences of 29; no multiple of a warp or a
 * block), C = 72 and 75 channels (the vector and the scalar gather), group
 * sizes with empty groups first, in the middle and last. Router logits
 * lie on a coarse grid (no near-ties that rounding could flip) and hold
 * exact ties among the top experts (the lower index must come first, within
 * one lane and across lanes) and -inf logits. Backward ops start from
 * non-zero gradients; ops that WRITE start from garbage, and rows an op must
 * not touch are checked unchanged.
 * Error: max |gpu - cpu| / max |cpu| over the tensor; NaN fails.
 * Tolerances: top_idx exactly; gathers, the gathered sum and the sums over a
 * sequence exactly (the CPU's additions in the CPU's order); the router,
 * the combine and its dw 1e-5 (fp32, another order or fused multiply-adds);
 * the grouped GEMM as the dense matmul (fp32 1e-5, bf16 2e-2), its bias
 * gradient 1e-5 (fp32 sums).
 * Also: every op with no rows changes nothing and launches nothing that
 * fails, and two runs give the same bits (no atomics).
 * --cpu: the CPU table on both sides (checks this program where there is no
 * GPU; every error is then 0).
 * No GPU: prints "SKIP: <reason>" and exits 77. */
#include "gpu_compare.h"

static double TOL_MM; /* grouped GEMM outputs and gradients */
#define TOL_EW 1e-5   /* computed in fp32 */

static int irand(int n) { return (int)(urand(0, 1) * n) % n; }

/* the number of ints that differ */
static double int_mismatches(const int *ref, const int *d, size_t n) {
  int *h = host_bytes(d, n * sizeof(int));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != ref[i];
  free(h);
  return (double)bad;
}

/* ------------------------------------------------------------------ */
/* router                                                               */

/* logits (N,E) in [-3, 3] on a grid of 1/64: distinct logits differ by at
 * least 1/64, so their probabilities differ far beyond rounding and the
 * GPU's choices must be the CPU's exactly, while equal ones (frequent with
 * 40 experts) are exact ties. Also ties placed at the top of some rows (the
 * lower index first: within a lane (e and e + 32), across lanes) and rows
 * where every odd expert is -inf. */
static float *router_logits(int N, int E) {
  float *x = rnd((size_t)N * E, -3, 3);
  for (size_t i = 0; i < (size_t)N * E; i++) x[i] = roundf(x[i] * 64.0f) / 64.0f;
  for (int n = 0; n < N; n++) {
    float *r = x + (size_t)n * E;
    switch (n % 6) {
    case 1: r[0] = r[1] = 3.5f; break;                  /* adjacent, lanes 0 and 1 */
    case 2: r[E - 1] = r[2] = 3.5f; break;              /* the higher index first in memory order */
    case 3: r[0] = r[E > 32 ? 32 : E - 1] = 3.5f; break; /* one lane when E > 32 */
    case 4:
      for (int e = 1; e < E; e += 2) r[e] = -INFINITY;
      break;
    case 5:
      for (int e = 0; e < E; e++) r[e] = 0.25f; /* all equal */
      break;
    default: break;
    }
  }
  return x;
}

static void test_router(int N, int E, int k, int rows_per_seq) {
  printf("router N=%d E=%d k=%d rows_per_seq=%d\n", N, E, k, rows_per_seq);
  const size_t ne = (size_t)N * E, nk = (size_t)N * k;
  const int S = N / rows_per_seq;
  char what[128];
  float *logits = router_logits(N, E);
  float *probs = rnd(ne, -1, 1), *lse = rnd(N, -1, 1), *topw = rnd(nk, -1, 1);
  int *top = malloc(nk * sizeof(int));
  for (size_t i = 0; i < nk; i++) top[i] = -7;
  float *d_logits = dev(logits, ne), *d_probs = dev(probs, ne), *d_lse = dev(lse, N);
  float *d_topw = dev(topw, nk);
  int *d_top = devi(top, nk);
  cpu->moe_router_forward(probs, lse, top, topw, logits, NULL, N, E, k, 0);
  gpu->moe_router_forward(d_probs, d_lse, d_top, d_topw, d_logits, NULL, N, E, k, 0);
  CMP("moe_router_forward probs", probs, d_probs, ne, TOL_EW);
  CMP("moe_router_forward lse", lse, d_lse, N, TOL_EW);
  snprintf(what, sizeof what, "moe_router_forward top_idx (exact; of %zu)", nk);
  mt_check_err(what, int_mismatches(top, d_top, nk), 0);
  CMP("moe_router_forward top_w", topw, d_topw, nk, TOL_EW);
  /* with a balancing bias (aux-loss-free routing): the choice moves alike */
  float *bias = rnd((size_t)E, -0.3f, 0.3f), *d_bias = dev(bias, (size_t)E);
  cpu->moe_router_forward(probs, lse, top, topw, logits, bias, N, E, k, 0);
  gpu->moe_router_forward(d_probs, d_lse, d_top, d_topw, d_logits, d_bias, N, E, k, 0);
  snprintf(what, sizeof what, "moe_router_forward + bias top_idx (exact; of %zu)", nk);
  mt_check_err(what, int_mismatches(top, d_top, nk), 0);
  CMP("moe_router_forward + bias top_w", topw, d_topw, nk, TOL_EW);
  /* sigmoid scores (DeepSeek-V3), with the bias, and their backward */
  cpu->moe_router_forward(probs, lse, top, topw, logits, bias, N, E, k, 1);
  gpu->moe_router_forward(d_probs, d_lse, d_top, d_topw, d_logits, d_bias, N, E, k, 1);
  CMP("moe_router_forward sigmoid probs", probs, d_probs, ne, TOL_EW);
  snprintf(what, sizeof what, "moe_router_forward sigmoid + bias top_idx (exact; of %zu)", nk);
  mt_check_err(what, int_mismatches(top, d_top, nk), 0);
  CMP("moe_router_forward sigmoid + bias top_w", topw, d_topw, nk, TOL_EW);
  {
    float *sdtw = rnd(nk, -1, 1), *sdlog = rnd(ne, -9, 9);
    float *d_sdtw = dev(sdtw, nk), *d_sdlog = dev(sdlog, ne);
    gpu->upload(d_probs, probs, ne * sizeof(float));
    gpu->upload(d_top, top, nk * sizeof(int));
    gpu->upload(d_topw, topw, nk * sizeof(float));
    cpu->moe_router_backward(sdlog, probs, lse, top, topw, sdtw, NULL, rows_per_seq, 0.0f, N, E,
                             k, 1);
    gpu->moe_router_backward(d_sdlog, d_probs, d_lse, d_top, d_topw, d_sdtw, NULL,
                             rows_per_seq, 0.0f, N, E, k, 1);
    CMP("moe_router_backward sigmoid dlogits", sdlog, d_sdlog, ne, TOL_EW);
    dfree(d_sdtw, nk * 4);
    dfree(d_sdlog, ne * 4);
    free(sdtw);
    free(sdlog);
  }
  cpu->moe_router_forward(probs, lse, top, topw, logits, NULL, N, E, k, 0);
  free(bias);

  /* backward from the CPU's forward results on both sides */
  gpu->upload(d_probs, probs, ne * sizeof(float));
  gpu->upload(d_lse, lse, (size_t)N * sizeof(float));
  gpu->upload(d_top, top, nk * sizeof(int));
  gpu->upload(d_topw, topw, nk * sizeof(float));
  float *dtw = rnd(nk, -1, 1), *aux = rnd((size_t)S * E, -0.5f, 0.5f);
  float *dlog = rnd(ne, -9, 9); /* garbage: the op WRITES */
  float *d_dtw = dev(dtw, nk), *d_aux = dev(aux, (size_t)S * E), *d_dlog = dev(dlog, ne);
  for (int with_aux = 0; with_aux < 2; with_aux++) {
    float z = with_aux ? 0.0f : 0.3f;
    cpu->moe_router_backward(dlog, probs, lse, top, topw, dtw, with_aux ? aux : NULL,
                             rows_per_seq, z, N, E, k, 0);
    gpu->moe_router_backward(d_dlog, d_probs, d_lse, d_top, d_topw, d_dtw,
                             with_aux ? d_aux : NULL, rows_per_seq, z, N, E, k, 0);
    snprintf(what, sizeof what, "moe_router_backward dlogits (%s)",
             with_aux ? "load-balancing term" : "z-loss term");
    CMP(what, dlog, d_dlog, ne, TOL_EW);
  }

  /* sums over each sequence: whole sequences, then a length that leaves
   * rows over (unused) */
  for (int pass = 0; pass < 2; pass++) {
    int rps = pass ? rows_per_seq + 21 : rows_per_seq, Sp = N / rps;
    float *sums = rnd((size_t)Sp * E, -9, 9), *d_sums = dev(sums, (size_t)Sp * E);
    cpu->moe_prob_sums(sums, probs, N, E, rps);
    gpu->moe_prob_sums(d_sums, d_probs, N, E, rps);
    snprintf(what, sizeof what, "moe_prob_sums rows_per_seq=%d (the CPU's order: exact)", rps);
    CMP(what, sums, d_sums, (size_t)Sp * E, 0.0);
    dfree(d_sums, (size_t)Sp * E * 4);
    free(sums);
  }
  dfree(d_logits, ne * 4), dfree(d_probs, ne * 4), dfree(d_lse, (size_t)N * 4);
  dfree(d_topw, nk * 4), dfree(d_top, nk * 4), dfree(d_dtw, nk * 4);
  dfree(d_aux, (size_t)S * E * 4), dfree(d_dlog, ne * 4);
  free(logits), free(probs), free(lse), free(topw), free(top), free(dtw), free(aux), free(dlog);
}

/* ------------------------------------------------------------------ */
/* gathers and the combine                                              */

/* slot (N,k): about 1 in 5 slots dropped (-1) and every slot of rows n %
 * 13 == 0; the kept ones numbered 0..kept-1 in a shuffled order. Returns
 * kept. */
static int make_slots(int *slot, int N, int k) {
  int kept = 0;
  for (int i = 0; i < N * k; i++) {
    int drop = (i / k) % 13 == 0 || urand(0, 1) < 0.2f;
    slot[i] = drop ? -1 : kept++;
  }
  int *perm = malloc((size_t)(kept ? kept : 1) * sizeof(int));
  for (int i = 0; i < kept; i++) perm[i] = i;
  for (int i = kept - 1; i > 0; i--) {
    int j = irand(i + 1), t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  for (int i = 0; i < N * k; i++)
    if (slot[i] >= 0) slot[i] = perm[slot[i]];
  free(perm);
  return kept;
}

static void test_rows(int N, int C, int k) {
  printf("rows N=%d C=%d k=%d\n", N, C, k);
  char what[128];
  const size_t nc = (size_t)N * C, nk = (size_t)N * k;
  /* gather_rows: n rows picked with repeats; also into a row-misaligned
   * output (the scalar path when C allows the vector one) */
  int n = N * 3 / 4;
  int *idx = malloc((size_t)n * sizeof(int));
  for (int i = 0; i < n; i++) idx[i] = irand(N);
  float *inp = rnd(nc, -1, 1), *out = rnd((size_t)n * C + 1, -9, 9);
  float *d_inp = dev(inp, nc), *d_out = dev(out, (size_t)n * C + 1);
  int *d_idx = devi(idx, n);
  for (int shift = 0; shift < 2; shift++) {
    cpu->gather_rows(F32, out + shift, inp, idx, n, C);
    gpu->gather_rows(F32, d_out + shift, d_inp, d_idx, n, C);
    snprintf(what, sizeof what, "gather_rows n=%d%s (exact)", n,
             shift ? ", output one float off" : "");
    CMP(what, out, d_out, (size_t)n * C + 1, 0.0);
  }

  /* the combine: slots into y (kept + 5 rows: the last 5 never named) */
  int *slot = malloc(nk * sizeof(int));
  const int kept = make_slots(slot, N, k), ny = kept + 5;
  const size_t nyc = (size_t)ny * C;
  float *y = rnd(nyc, -1, 1), *w = rnd(nk, 0, 1), *comb = rnd(nc, -9, 9);
  float *d_y = dev(y, nyc), *d_w = dev(w, nk), *d_comb = dev(comb, nc);
  int *d_slot = devi(slot, nk);
  cpu->moe_combine(F32, comb, y, slot, w, N, C, k);
  gpu->moe_combine(F32, d_comb, d_y, d_slot, d_w, N, C, k);
  snprintf(what, sizeof what, "moe_combine (%d of %zu slots kept)", kept, nk);
  CMP(what, comb, d_comb, nc, TOL_EW);

  float *dout = rnd(nc, -1, 1), *dy = rnd(nyc, -9, 9), *dw = rnd(nk, -9, 9);
  float *d_dout = dev(dout, nc), *d_dy = dev(dy, nyc), *d_dw = dev(dw, nk);
  cpu->moe_combine_backward(F32, dy, dw, dout, y, slot, w, N, C, k);
  gpu->moe_combine_backward(F32, d_dy, d_dw, d_dout, d_y, d_slot, d_w, N, C, k);
  CMP("moe_combine_backward dy (rows not named unchanged; exact)", dy, d_dy, nyc, 0.0);
  CMP("moe_combine_backward dw (0 for dropped slots)", dw, d_dw, nk, TOL_EW);

  float *dx = rnd(nc, -1, 1), *d_dx = dev(dx, nc);
  cpu->moe_gather_sum(F32, dx, y, slot, N, C, k);
  gpu->moe_gather_sum(F32, d_dx, d_y, d_slot, N, C, k);
  CMP("moe_gather_sum (accumulates; the CPU's order: exact)", dx, d_dx, nc, 0.0);

  dfree(d_inp, nc * 4), dfree(d_out, ((size_t)n * C + 1) * 4), dfree(d_idx, (size_t)n * 4);
  dfree(d_y, nyc * 4), dfree(d_w, nk * 4), dfree(d_comb, nc * 4), dfree(d_slot, nk * 4);
  dfree(d_dout, nc * 4), dfree(d_dy, nyc * 4), dfree(d_dw, nk * 4), dfree(d_dx, nc * 4);
  free(idx), free(inp), free(out), free(slot), free(y), free(w), free(comb), free(dout);
  free(dy), free(dw), free(dx);
}

/* ------------------------------------------------------------------ */
/* grouped GEMM                                                         */

static void test_grouped(const int *sizes, int G, int C, int OC) {
  int *off = malloc(((size_t)G + 1) * sizeof(int));
  off[0] = 0;
  for (int g = 0; g < G; g++) off[g + 1] = off[g] + sizes[g];
  const int R = off[G];
  printf("grouped GEMM G=%d rows=%d (", G, R);
  for (int g = 0; g < G; g++) printf("%s%d", g ? " " : "", sizes[g]);
  printf(") C=%d OC=%d\n", C, OC);
  const size_t ni = (size_t)R * C, no = (size_t)R * OC, nw = (size_t)G * OC * C;
  const size_t nb = (size_t)G * OC;
  float *inp = rnd(ni, -1, 1), *w = rnd(nw, -1, 1), *bias = rnd(nb, -1, 1);
  float *out = rnd(no, -9, 9), *dout = rnd(no, -1, 1);
  float *dinp = rnd(ni, -1, 1), *dw = rnd(nw, -1, 1), *dbias = rnd(nb, -1, 1);
  float *d_inp = dev(inp, ni), *d_w = dev(w, nw), *d_bias = dev(bias, nb), *d_out = dev(out, no);
  float *d_dout = dev(dout, no), *d_dinp = dev(dinp, ni), *d_dw = dev(dw, nw);
  float *d_dbias = dev(dbias, nb);
  for (int with_bias = 1; with_bias >= 0; with_bias--) {
    cpu->grouped_matmul_forward(F32, out, inp, w, with_bias ? bias : NULL, off, G, C, OC);
    gpu->grouped_matmul_forward(F32, d_out, d_inp, d_w, with_bias ? d_bias : NULL, off, G, C, OC);
    CMP(with_bias ? "grouped_matmul_forward with bias" : "grouped_matmul_forward", out, d_out, no,
        TOL_MM);
  }
  cpu->grouped_matmul_backward(F32, dinp, dw, dbias, dout, inp, w, off, G, C, OC);
  gpu->grouped_matmul_backward(F32, d_dinp, d_dw, d_dbias, d_dout, d_inp, d_w, off, G, C, OC);
  CMP("grouped_matmul_backward dinp", dinp, d_dinp, ni, TOL_MM);
  CMP("grouped_matmul_backward dw (empty groups' unchanged)", dw, d_dw, nw, TOL_MM);
  CMP("grouped_matmul_backward dbias (fp32 sums)", dbias, d_dbias, nb, TOL_EW);
  cpu->grouped_matmul_backward(F32, dinp, NULL, NULL, dout, NULL, w, off, G, C, OC);
  gpu->grouped_matmul_backward(F32, d_dinp, NULL, NULL, d_dout, NULL, d_w, off, G, C, OC);
  CMP("grouped_matmul_backward dinp only", dinp, d_dinp, ni, TOL_MM);
  cpu->grouped_matmul_backward(F32, NULL, dw, dbias, dout, inp, NULL, off, G, C, OC);
  gpu->grouped_matmul_backward(F32, NULL, d_dw, d_dbias, d_dout, d_inp, NULL, off, G, C, OC);
  CMP("grouped_matmul_backward dw, dbias only", dw, d_dw, nw, TOL_MM);
  CMP("grouped_matmul_backward dbias only pass", dbias, d_dbias, nb, TOL_EW);
  float *ds[] = {d_inp, d_w, d_bias, d_out, d_dout, d_dinp, d_dw, d_dbias};
  size_t ns[] = {ni, nw, nb, no, no, ni, nw, nb};
  for (int i = 0; i < 8; i++) dfree(ds[i], ns[i] * 4);
  free(off), free(inp), free(w), free(bias), free(out), free(dout), free(dinp), free(dw);
  free(dbias);
}

/* ------------------------------------------------------------------ */
/* no rows: an empty micro-batch (nothing may change, no launch may fail) */

static void test_empty(void) {
  printf("no rows\n");
  const int E = 4, k = 2, C = 8, n = 64;
  float *h = rnd(n, -1, 1);
  float *a = dev(h, n), *b = dev(h, n), *c = dev(h, n), *d = dev(h, n);
  int zeros[5] = {0, 0, 0, 0, 0};
  int *ia = devi(zeros, 5);
  gpu->moe_router_forward(a, b, ia, c, d, NULL, 0, E, k, 0);
  gpu->moe_router_backward(a, b, c, ia, d, d, d, 16, 0.5f, 0, E, k, 0);
  gpu->moe_prob_sums(a, b, 0, E, 16);
  gpu->gather_rows(F32, a, b, ia, 0, C);
  gpu->moe_combine(F32, a, b, ia, c, 0, C, k);
  gpu->moe_combine_backward(F32, a, b, c, d, ia, d, 0, C, k);
  gpu->moe_gather_sum(F32, a, b, ia, 0, C, k);
  gpu->grouped_matmul_forward(F32, a, b, c, d, zeros, 4, 2, 2);
  gpu->grouped_matmul_backward(F32, a, b, c, d, d, d, zeros, 4, 2, 2);
  gpu->sync();
  double e = err_of(h, a, n);
  e = mt_worst(e, err_of(h, b, n));
  e = mt_worst(e, err_of(h, c, n));
  mt_check_err("every MoE op with no rows leaves its outputs alone", e, 0.0);
  dfree(a, n * 4), dfree(b, n * 4), dfree(c, n * 4), dfree(d, n * 4), dfree(ia, 5 * 4);
  free(h);
}

/* ------------------------------------------------------------------ */
/* the same inputs twice: the same bits                                 */

static void test_determinism(void) {
  printf("determinism\n");
  const int N = 1000, E = 8, k = 2, C = 96, G = 4, rps = 125;
  const int sizes[4] = {700, 0, 900, 400}; /* the 2000 slots, expert-major */
  int off[5] = {0};
  for (int g = 0; g < G; g++) off[g + 1] = off[g] + sizes[g];
  const int R = off[G];
  const size_t ne = (size_t)N * E, nk = (size_t)N * k, nc = (size_t)N * C;
  float *logits = router_logits(N, E), *dtw = rnd(nk, -1, 1), *aux = rnd((size_t)N / rps * E, -1, 1);
  float *dout = rnd(nc, -1, 1), *y = rnd((size_t)R * C, -1, 1), *w = rnd((size_t)G * C * C, -1, 1);
  int *slot = malloc(nk * sizeof(int));
  make_slots(slot, N, k);
  size_t nres = ne + nk + (size_t)R * C + (size_t)G * C * C;
  float *res[2] = {malloc(nres * sizeof(float)), malloc(nres * sizeof(float))};
  for (int run = 0; run < 2; run++) {
    float *d_logits = dev(logits, ne), *d_dtw = dev(dtw, nk), *d_aux = dev(aux, (size_t)N / rps * E);
    float *d_dout = dev(dout, nc), *d_y = dev(y, (size_t)R * C), *d_w = dev(w, (size_t)G * C * C);
    int *d_slot = devi(slot, nk);
    float *d_probs = gpu->alloc(MT_MEM_OTHER, ne * 4), *d_lse = gpu->alloc(MT_MEM_OTHER, N * 4);
    float *d_topw = gpu->alloc(MT_MEM_OTHER, nk * 4), *d_dcw = gpu->alloc(MT_MEM_OTHER, nk * 4);
    float *d_dy = gpu->alloc(MT_MEM_OTHER, (size_t)R * C * 4);
    float *d_dx = gpu->alloc(MT_MEM_OTHER, (size_t)R * C * 4);
    float *d_dw = gpu->alloc(MT_MEM_OTHER, (size_t)G * C * C * 4);
    int *d_top = gpu->alloc(MT_MEM_OTHER, nk * 4);
    gpu->moe_router_forward(d_probs, d_lse, d_top, d_topw, d_logits, NULL, N, E, k, 0);
    gpu->moe_router_backward(d_logits, d_probs, d_lse, d_top, d_topw, d_dtw, d_aux, rps, 0.1f, N,
                             E, k, 0);
    gpu->moe_combine_backward(F32, d_dy, d_dcw, d_dout, d_y, d_slot, d_topw, N, C, k);
    gpu->grouped_matmul_backward(F32, d_dx, d_dw, NULL, d_y, d_y, d_w, off, G, C, C);
    float *r = res[run];
    gpu->download(r, d_logits, ne * 4);
    gpu->download(r + ne, d_dcw, nk * 4);
    gpu->download(r + ne + nk, d_dx, (size_t)R * C * 4);
    gpu->download(r + ne + nk + (size_t)R * C, d_dw, (size_t)G * C * C * 4);
    dfree(d_logits, ne * 4), dfree(d_dtw, nk * 4), dfree(d_aux, (size_t)N / rps * E * 4);
    dfree(d_dout, nc * 4), dfree(d_y, (size_t)R * C * 4), dfree(d_w, (size_t)G * C * C * 4);
    dfree(d_slot, nk * 4), dfree(d_probs, ne * 4), dfree(d_lse, (size_t)N * 4);
    dfree(d_topw, nk * 4), dfree(d_dcw, nk * 4), dfree(d_dy, (size_t)R * C * 4);
    dfree(d_dx, (size_t)R * C * 4), dfree(d_dw, (size_t)G * C * C * 4), dfree(d_top, nk * 4);
  }
  mt_check_err("router, combine and grouped backward twice: same bits",
               memcmp(res[0], res[1], nres * sizeof(float)) ? 1 : 0, 0);
  free(logits), free(dtw), free(aux), free(dout), free(y), free(w), free(slot);
  free(res[0]), free(res[1]);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  mt_log_init(0);
  int bf16 = argc > 1 && !strcmp(argv[1], "bf16");
  int cpu_only = argc > 2 && !strcmp(argv[2], "--cpu");
  TOL_MM = bf16 ? 2e-2 : 1e-5;
  g_rng = 4242;
  cpu = mt_ops_cpu();
  if (cpu_only) {
    gpu = cpu;
    printf("gpu_moe_ops: the CPU table on both sides (--cpu)\n");
  } else {
    int rc = gpu_compare_open("gpu_moe_ops", bf16);
    if (rc != 0) {
      MPI_Finalize();
      return rc;
    }
  }
  test_router(203, 4, 1, 29);
  test_router(203, 5, 2, 29);
  test_router(203, 8, 2, 29);
  test_router(203, 40, 3, 29);
  test_rows(203, 72, 2);
  test_rows(203, 75, 1);
  const int g1[6] = {0, 37, 1, 0, 64, 101}, g2[4] = {23, 0, 41, 0}, g3[5] = {0, 300, 5, 0, 700};
  test_grouped(g1, 6, 72, 197);
  test_grouped(g2, 4, 75, 64);
  test_grouped(g3, 5, 256, 1000); /* with MT_CUDA_SCRATCH_MB=1 under bf16: in pieces */
  test_empty();
  test_determinism();
  if (!cpu_only) mt_cuda_shutdown();
  MPI_Finalize();
  return mt_check_summary("gpu_moe_ops");
}
