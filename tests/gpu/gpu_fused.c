/* gpu_fused: the CUDA backend's fused ops against its own unfused ones and
 * against the CPU's fused ops, on fp32 or bf16 storage.
 *
 *   gpu_fused fp32|bf16
 *
 * - residual_layernorm_forward, residual_rmsnorm_forward: bit for bit the
 *   GPU's residual_forward then its norm (the CUDA backend composes the
 *   two); against the CPU's fused op: the sum bit for bit, the normalised
 *   rows and statistics within 1e-5 (fp32 sums in another order), bf16
 *   rows within one bf16 rounding (2^-8 of the largest value).
 * - adamw_ranges (ranges with different weight decays and a gap, bf16 and
 *   fp32 gradients, the clip factor 0.37, the compute copy of the storage
 *   type, 3 steps): the master, moments and copy bit for bit the GPU's
 *   convert, scale and adamw_update per range; against the CPU's
 *   adamw_ranges within 1e-5 (nvcc may contract into FMAs), the copy =
 *   the GPU's master rounded, the gap untouched.
 * - each backward op's _first form (matmul, GELU, SwiGLU, LayerNorm,
 *   RMSNorm): the input gradient written over NaNs bit for bit the GPU's
 *   zero, then the op; the parameter gradients alike.
 * - attn_backward_first against the GPU's zero, then attn_backward
 *   (tests/attn_first_check.h): dq, dk, dv written over NaN bytes bit for
 *   bit, on the model's layouts, rows that see no key, keys no row sees.
 * - kv_spread and kv_spread_backward with rope's angles: bit for bit the
 *   GPU's rope on c, then kv_spread (backward: kv_spread_backward, then
 *   rope inverse on dc), c left as it was.
 * No GPU: prints "SKIP: <reason>" and exits 77. */
#include "gpu_compare.h"
#include "../attn_first_check.h"

#include <mpi.h>

static mt_dtype g_t; /* the storage type of this run */
#define TOL_EW 1e-5
#define TOL_BF16 (1.0 / 256.0)

/* host copy of n elements of type t, widened to fp32 */
static float *widened(const void *h, mt_dtype t, size_t n) {
  float *f = malloc((n ? n : 1) * sizeof(float));
  if (t == F32) memcpy(f, h, n * sizeof(float));
  else mt_bf16_to_f32_n(f, h, n);
  return f;
}

/* max |device - host| / max |host| over n elements of type t */
static double err_t(const void *ref, const void *d, mt_dtype t, size_t n) {
  size_t es = mt_dtype_bytes(t);
  void *h = host_bytes(d, n * es);
  float *a = widened(h, t, n), *b = widened(ref, t, n);
  double e = mt_max_rel_err(a, b, n);
  free(h), free(a), free(b);
  return e;
}

static void test_residual_norm(int rms, int N, int C) {
  const mt_dtype t = g_t;
  const size_t n = (size_t)N * C, es = mt_dtype_bytes(t);
  printf("residual_%s_forward N=%d C=%d\n", rms ? "rmsnorm" : "layernorm", N, C);
  void *a = rnd_t(t, n, -2, 2), *b = rnd_t(t, n, -1, 1);
  void *w = rnd_t(t, C, 0.5f, 1.5f), *bias = rnd_t(t, C, -0.5f, 0.5f);
  void *res = malloc(n * es), *out = malloc(n * es);
  float *mean = malloc(N * 4), *rstd = malloc(N * 4);
  void *d_a = dev_copy(a, n, es), *d_b = dev_copy(b, n, es), *d_w = dev_copy(w, C, es);
  void *d_bias = dev_copy(bias, C, es);
  void *d_res = dev_copy(res, n, es), *d_out = dev_copy(out, n, es);
  void *d_res2 = dev_copy(res, n, es), *d_out2 = dev_copy(out, n, es);
  float *d_mean = dev(mean, N), *d_rstd = dev(rstd, N), *d_mean2 = dev(mean, N);
  float *d_rstd2 = dev(rstd, N);
  gpu->residual_forward(t, d_res2, d_a, d_b, n);
  if (rms) {
    cpu->residual_rmsnorm_forward(t, res, out, rstd, a, b, w, N, C, 1e-6f);
    gpu->residual_rmsnorm_forward(t, d_res, d_out, d_rstd, d_a, d_b, d_w, N, C, 1e-6f);
    gpu->rmsnorm_forward(t, d_out2, d_rstd2, d_res2, d_w, N, C, 1e-6f);
  } else {
    cpu->residual_layernorm_forward(t, res, out, mean, rstd, a, b, w, bias, N, C);
    gpu->residual_layernorm_forward(t, d_res, d_out, d_mean, d_rstd, d_a, d_b, d_w, d_bias, N, C);
    gpu->layernorm_forward(t, d_out2, d_mean2, d_rstd2, d_res2, d_w, d_bias, N, C);
  }
  void *h_res2 = host_bytes(d_res2, n * es), *h_out2 = host_bytes(d_out2, n * es);
  float *h_rstd2 = host_bytes(d_rstd2, N * 4), *h_mean2 = host_bytes(d_mean2, N * 4);
  int same = same_bytes(h_res2, d_res, n * es) && same_bytes(h_out2, d_out, n * es) &&
             same_bytes(h_rstd2, d_rstd, N * 4) && (rms || same_bytes(h_mean2, d_mean, N * 4));
  mt_check_true("fused = the GPU's residual_forward then its norm (bits)", same);
  mt_check_true("the sum = the CPU's (bits)", same_bytes(res, d_res, n * es));
  mt_check_err("out against the CPU's fused op", err_t(out, d_out, t, n),
               t == F32 ? TOL_EW : TOL_BF16);
  mt_check_err("rstd against the CPU's", err_of(rstd, d_rstd, N), TOL_EW);
  if (!rms) mt_check_err("mean against the CPU's", err_of(mean, d_mean, N), TOL_EW);
  void *ds[] = {d_a, d_b, d_res, d_out, d_res2, d_out2};
  for (int i = 0; i < 6; i++) dfree(ds[i], n * es);
  dfree(d_w, C * es), dfree(d_bias, C * es);
  dfree(d_mean, N * 4), dfree(d_rstd, N * 4), dfree(d_mean2, N * 4), dfree(d_rstd2, N * 4);
  free(a), free(b), free(w), free(bias), free(res), free(out), free(mean), free(rstd);
  free(h_res2), free(h_out2), free(h_rstd2), free(h_mean2);
}

/* AdamW's hyperparameters of every call here */
#define ADAM_ARGS 1e-3f, 0.9f, 0.95f, 1e-8f

static void test_adamw_ranges(size_t n, mt_dtype gt) {
  const mt_dtype t = g_t;
  const size_t es = mt_dtype_bytes(t), ges = mt_dtype_bytes(gt), q = n / 4, gap = n / 16;
  const float scale = 0.37f;
  printf("adamw_ranges n=%zu, %s gradients\n", n, gt == BF16 ? "bf16" : "fp32");
  mt_adamw_range r[4] = {{0, q - 3, 0.1f}, {q - 3, 2 * q + 5, 0.0f}, {2 * q + 5, 3 * q, 0.1f},
                         {3 * q + gap, n, 0.05f}};
  float *p = rnd(n, -1, 1), *m = rnd(n, -0.1f, 0.1f), *v = rnd(n, 0, 0.01f);
  void *copy = rnd_t(t, n, -1, 1);
  float *p0 = dup_bytes(p, n * 4);
  /* fused on the GPU (d_*), unfused on the GPU (u_*) */
  float *d_p = dev(p, n), *d_m = dev(m, n), *d_v = dev(v, n);
  float *u_p = dev(p, n), *u_m = dev(m, n), *u_v = dev(v, n), *u_g = dev(p, n);
  void *d_copy = dev_copy(copy, n, es), *u_copy = dev_copy(copy, n, es);
  for (int step = 1; step <= 3; step++) {
    void *grad = rnd_t(gt, n, -1, 1);
    void *d_grad = dev_copy(grad, n, ges);
    cpu->adamw_ranges(t, p, copy, grad, gt, scale, m, v, r, 4, ADAM_ARGS, step);
    gpu->adamw_ranges(t, d_p, d_copy, d_grad, gt, scale, d_m, d_v, r, 4, ADAM_ARGS, step);
    gpu->convert(u_g, F32, d_grad, gt, n);
    for (int k = 0; k < 4; k++) {
      size_t b = r[k].begin, len = r[k].end - r[k].begin;
      gpu->scale(F32, u_g + b, scale, len);
      gpu->adamw_update(t, u_p + b, (char *)u_copy + b * es, u_g + b, u_m + b, u_v + b, len,
                        ADAM_ARGS, r[k].weight_decay, step);
    }
    dfree(d_grad, n * ges);
    free(grad);
  }
  float *hp = host_bytes(u_p, n * 4), *hm = host_bytes(u_m, n * 4), *hv = host_bytes(u_v, n * 4);
  void *hc = host_bytes(u_copy, n * es);
  int same = same_bytes(hp, d_p, n * 4) && same_bytes(hm, d_m, n * 4) &&
             same_bytes(hv, d_v, n * 4) && same_bytes(hc, d_copy, n * es);
  mt_check_true("fused = the GPU's convert, scale, adamw_update per range (bits)", same);
  CMP("param against the CPU's adamw_ranges", p, d_p, n, TOL_EW);
  CMP("m against the CPU's", m, d_m, n, TOL_EW);
  CMP("v against the CPU's", v, d_v, n, TOL_EW);
  /* the copy is the GPU's master stored as the storage type */
  float *gp = host_bytes(d_p, n * 4);
  void *rounded = malloc(n * es);
  if (t == F32) memcpy(rounded, gp, n * 4);
  else mt_bf16_from_f32_n(rounded, gp, n);
  /* (the gap holds the copy as it was: the CPU's copy there, untouched too) */
  size_t g0 = r[2].end, g1 = r[3].begin;
  memcpy((char *)rounded + g0 * es, (char *)copy + g0 * es, (g1 - g0) * es);
  mt_check_true("copy = the master in the storage type (bits)", same_bytes(rounded, d_copy, n * es));
  mt_check_true("the gap untouched", !memcmp(gp + g0, p0 + g0, (g1 - g0) * 4));
  float *ds[] = {d_p, d_m, d_v, u_p, u_m, u_v, u_g};
  for (int i = 0; i < 7; i++) dfree(ds[i], n * 4);
  dfree(d_copy, n * es), dfree(u_copy, n * es);
  free(p), free(m), free(v), free(copy), free(p0), free(hp), free(hm), free(hv), free(hc);
  free(gp), free(rounded);
}

/* two device buffers of the same bytes */
static int dsame(const void *d1, const void *d2, size_t bytes) {
  void *h = host_bytes(d1, bytes);
  int same = same_bytes(h, d2, bytes);
  free(h);
  return same;
}

/* Each backward op's _first form on the GPU against zero, then the op:
 * the input gradient written over NaNs (never read) bit for bit, the
 * parameter gradients accumulated alike. */
static void test_backward_first(int N, int C, int OC) {
  const mt_dtype t = g_t;
  const size_t es = mt_dtype_bytes(t), nc = (size_t)N * C, big = 2 * nc + (size_t)N * OC;
  printf("backward _first forms N=%d C=%d OC=%d\n", N, C, OC);
  void *dout = rnd_t(t, big, -1, 1), *inp = rnd_t(t, big, -2, 2);
  void *w = rnd_t(t, (size_t)OC * C, -1, 1), *nan = malloc(big * es);
  memset(nan, 0xff, big * es);
  /* db: the matmul's (OC) or the norm's (C); mean, rstd (N) */
  const size_t nb = (size_t)(OC > C ? OC : C);
  float *dw = rnd((size_t)OC * C, -1, 1), *db = rnd(nb, -1, 1), *stats = rnd(N, 0, 1);
  void *d_dout = dev_copy(dout, big, es), *d_inp = dev_copy(inp, big, es);
  void *d_w = dev_copy(w, (size_t)OC * C, es), *d_out = dev_copy(nan, nc, es);
  void *d_ref = dev_copy(nan, big, es), *d_got = dev_copy(nan, big, es);
  float *d_dw = dev(dw, (size_t)OC * C), *d_dw2 = dev(dw, (size_t)OC * C);
  float *d_db = dev(db, nb), *d_db2 = dev(db, nb), *d_mean = dev(stats, N);
  float *d_rstd = dev(stats, N);
  gpu->zero(t, d_ref, nc);
  gpu->matmul_backward(t, d_ref, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC);
  gpu->matmul_backward_first(t, d_got, d_dw2, d_db2, d_dout, d_inp, d_w, N, C, OC);
  mt_check_true("matmul_backward_first = zero, matmul_backward (bits)",
                dsame(d_ref, d_got, nc * es) && dsame(d_dw, d_dw2, (size_t)OC * C * 4) &&
                    dsame(d_db, d_db2, (size_t)OC * 4));
  gpu->zero(t, d_ref, nc);
  gpu->gelu_backward(t, d_ref, d_inp, d_dout, nc);
  gpu->gelu_backward_first(t, d_got, d_inp, d_dout, nc);
  mt_check_true("gelu_backward_first = zero, gelu_backward (bits)", dsame(d_ref, d_got, nc * es));
  gpu->zero(t, d_ref, 2 * nc);
  gpu->swiglu_backward(t, d_ref, d_inp, d_dout, N, C);
  gpu->swiglu_backward_first(t, d_got, d_inp, d_dout, N, C);
  mt_check_true("swiglu_backward_first = zero, swiglu_backward (bits)",
                dsame(d_ref, d_got, 2 * nc * es));
  gpu->layernorm_forward(t, d_out, d_mean, d_rstd, d_inp, d_w, d_w, N, C);
  gpu->zero(t, d_ref, nc);
  gpu->layernorm_backward(t, d_ref, d_dw, d_db, d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
  gpu->layernorm_backward_first(t, d_got, d_dw2, d_db2, d_dout, d_inp, d_w, d_mean, d_rstd, N,
                                C);
  mt_check_true("layernorm_backward_first = zero, layernorm_backward (bits)",
                dsame(d_ref, d_got, nc * es) && dsame(d_dw, d_dw2, (size_t)C * 4) &&
                    dsame(d_db, d_db2, (size_t)C * 4));
  gpu->rmsnorm_forward(t, d_out, d_rstd, d_inp, d_w, N, C, 1e-6f);
  gpu->zero(t, d_ref, nc);
  gpu->rmsnorm_backward(t, d_ref, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
  gpu->rmsnorm_backward_first(t, d_got, d_dw2, d_dout, d_inp, d_w, d_rstd, N, C);
  mt_check_true("rmsnorm_backward_first = zero, rmsnorm_backward (bits)",
                dsame(d_ref, d_got, nc * es) && dsame(d_dw, d_dw2, (size_t)C * 4));
  dfree(d_dout, big * es), dfree(d_inp, big * es), dfree(d_w, (size_t)OC * C * es);
  dfree(d_out, nc * es), dfree(d_ref, big * es), dfree(d_got, big * es);
  dfree(d_dw, (size_t)OC * C * 4), dfree(d_dw2, (size_t)OC * C * 4);
  dfree(d_db, nb * 4), dfree(d_db2, nb * 4);
  dfree(d_mean, (size_t)N * 4), dfree(d_rstd, (size_t)N * 4);
  free(dout), free(inp), free(w), free(nan), free(dw), free(db), free(stats);
}

/* The spread with rope's turn against rope, then the spread, on the GPU:
 * nh query heads, nkv key/value heads of hs, rows at given positions */
static void test_spread_rope(size_t rows, int nh, int nkv, int hs) {
  const mt_dtype t = g_t;
  const size_t es = mt_dtype_bytes(t), W = (size_t)(nh + 2 * nkv) * hs, nc = rows * W;
  const size_t nq = rows * 3 * (size_t)nh * hs;
  const int P = 61, group = nh / nkv;
  printf("kv_spread with rope rows=%zu nh=%d nkv=%d hs=%d\n", rows, nh, nkv, hs);
  float *cs = rnd((size_t)P * hs, -1, 1);
  int *pos = malloc(rows * sizeof(int));
  for (size_t r = 0; r < rows; r++) pos[r] = (int)((r * 17 + 3) % P);
  void *c = rnd_t(t, nc, -1, 1), *dqkv = rnd_t(t, nq, -1, 1), *nan = malloc(nq * es);
  memset(nan, 0xff, nq * es);
  float *d_cs = dev(cs, (size_t)P * hs);
  int *d_pos = devi(pos, rows);
  void *d_c = dev_copy(c, nc, es), *d_turned = dev_copy(c, nc, es);
  void *d_dqkv = dev_copy(dqkv, nq, es), *d_got = dev_copy(nan, nq, es);
  void *d_ref = dev_copy(nan, nq, es);
  gpu->kv_spread(t, d_got, d_c, rows, nh, nkv, hs, 0, group, 1, d_cs, d_pos, (int)rows);
  gpu->rope(t, d_turned, W, 1, (int)rows, nh + nkv, hs, d_cs, d_pos, 0);
  gpu->kv_spread(t, d_ref, d_turned, rows, nh, nkv, hs, 0, group, 1, NULL, NULL, 0);
  mt_check_true("kv_spread with rope = rope, then kv_spread (bits)",
                dsame(d_got, d_ref, nq * es) && same_bytes(c, d_c, nc * es));
  gpu->kv_spread_backward(t, d_got, d_dqkv, rows, nh, nkv, hs, 0, group, 1, d_cs, d_pos,
                          (int)rows);
  gpu->kv_spread_backward(t, d_ref, d_dqkv, rows, nh, nkv, hs, 0, group, 1, NULL, NULL, 0);
  gpu->rope(t, d_ref, W, 1, (int)rows, nh + nkv, hs, d_cs, d_pos, 1);
  mt_check_true("kv_spread_backward with rope = kv_spread_backward, then rope inverse (bits)",
                dsame(d_got, d_ref, nc * es));
  dfree(d_cs, (size_t)P * hs * 4), dfree(d_pos, rows * sizeof(int));
  dfree(d_c, nc * es), dfree(d_turned, nc * es), dfree(d_dqkv, nq * es);
  dfree(d_got, nq * es), dfree(d_ref, nq * es);
  free(cs), free(pos), free(c), free(dqkv), free(nan);
}

int main(int argc, char **argv) {
  int bf16, rc = gpu_compare_start(&argc, &argv, "gpu_fused", 4242, &bf16);
  if (rc != 0) return rc;
  g_t = bf16 ? BF16 : F32;
  for (int rms = 0; rms < 2; rms++) {
    test_residual_norm(rms, 111, 72);
    test_residual_norm(rms, 300, 768);
  }
  test_adamw_ranges(100003, F32);
  test_adamw_ranges(100003, BF16);
  test_backward_first(130, 96, 128);
  test_backward_first(7, 40, 33);
  attn_first_check(gpu, g_t);
  test_spread_rope(67, 12, 4, 64);
  test_spread_rope(33, 8, 1, 24);
  return gpu_compare_finish("gpu_fused");
}
