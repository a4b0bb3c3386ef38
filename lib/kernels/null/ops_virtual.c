/* The virtual device's op table: the null backend (no arithmetic, memory
 * counted per category but not backed, synthetic values where the host
 * reads them) whose every op moves the rank's virtual clock on by its price
 * (core's mt_price: the cost model's matmul curve, memory bandwidth).
 *
 * What each op is priced as (B batch, T rows, C channels, AB the profile's
 * bytes per activation element, fp32 for optimizer state and gradients):
 *   matmuls        2 m n k FLOPs at the curve's throughput for that size;
 *                  backward: the input-gradient and the weight-gradient
 *                  matmul each where asked for (dbias: free)
 *   grouped        the same per non-empty group (rows from the host offsets)
 *   attention      a block pair as the cost model prices block attention
 *                  (core's mt_price_attn_fwd_s: the profile's tiles, its
 *                  fused rate attn_gflops or the matmul curve on the
 *                  visible keys); backward 2.5 times the forward
 *   elementwise    the bytes the op reads and writes over the memory
 *                  bandwidth (an accumulation reads and writes)
 *   AdamW          7 fp32 streams (read param, grad, m, v; write three)
 *   alloc, free, upload, download, sync: no time. */
#include "kernels/kernels.h"

#include <stdlib.h>
#include <string.h>

static const mt_ops *g_null;
static mt_ops g_virt;

#define P mt_vclock_price()
/* the clock moves on by s; the op's span on the timeline (metrics.trace) */
static void advance(const char *op, double s) {
  double t0 = mt_now();
  mt_vclock_advance(s);
  if (mt_trace_on()) mt_trace_span(op, "op", MT_TRACK_COMPUTE, t0, mt_now(), -1, -1);
}
static void elem(const char *op, double bytes) { advance(op, mt_price_elem_s(P, bytes)); }
static void gemm(const char *op, double m, double n, double k, double calls) {
  advance(op, mt_price_gemm_s(P, m, n, k, calls));
}
/* each wrapper v_<op> names its op on the timeline */
#define ELEM(bytes) elem(__func__ + 2, (bytes))
#define GEMM(m, n, k, calls) gemm(__func__ + 2, (m), (n), (k), (calls))
#define AB (P->act_bytes)

static void v_zero(float *x, size_t n) { ELEM(4.0 * n); }
static void v_copy(float *dst, const float *src, size_t n) { ELEM(2.0 * AB * n); }
static void v_axpy(float *y, float a, const float *x, size_t n) { ELEM(12.0 * n); }
static double v_sum(const float *x, size_t n) {
  ELEM(4.0 * n);
  return g_null->sum(x, n);
}
static void v_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                              int B, int T, int C) {
  ELEM(3.0 * AB * B * T * C);
}
static void v_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                               int B, int T, int C) {
  ELEM(5.0 * AB * B * T * C);
}
static void v_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int N, int C) {
  ELEM(2.0 * AB * N * C);
}
static void v_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int N, int C) {
  ELEM(4.0 * AB * N * C);
}
static void v_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                             int N, int C, int OC) {
  GEMM(N, OC, C, 1);
}
static void v_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, int N, int C, int OC) {
  if (dinp) GEMM(N, C, OC, 1);
  if (dw) GEMM(OC, C, N, 1);
}
static void v_encoder_vp_forward(float *out, const int *inp, const float *wte, int v0, int Vl,
                                 const float *wpe, int B, int T, int C) {
  ELEM((wpe ? 3.0 : 2.0) * AB * B * T * C);
}
static void v_encoder_vp_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                                  int v0, int Vl, int B, int T, int C) {
  ELEM((dwpe ? 5.0 : 3.0) * AB * B * T * C);
}
static void v_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                int NH) {
  GEMM(T, T, (double)C / NH, (double)B * NH); /* two matmuls, half of each (causal) */
}
static void v_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                                 const float *att, int B, int T, int C, int NH) {
  GEMM(T, T, (double)C / NH, 2.0 * B * NH);
}
static double attn_fwd_s(const mt_attn_block *a) {
  return mt_price_attn_fwd_s(P, (double)a->B * a->NH, a->q_pos0, a->Tq, a->k_pos0, a->Tk,
                             a->causal, a->hs);
}
static void v_attn_forward(const mt_attn_block *a, float *out, float *lse, const float *q,
                           const float *k, const float *v) {
  advance("attn_forward", attn_fwd_s(a));
}
static void v_attn_merge(const mt_attn_block *a, float *out, float *lse, const float *part,
                         const float *part_lse) {
  ELEM(3.0 * AB * a->B * a->NH * (double)a->Tq * a->hs);
}
static void v_attn_backward(const mt_attn_block *a, float *dq, float *dk, float *dv,
                            const float *dout, const float *out, const float *lse,
                            const float *q, const float *k, const float *v) {
  advance("attn_backward", 2.5 * attn_fwd_s(a));
}
static void v_copy_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                      size_t cols) {
  ELEM(2.0 * AB * rows * cols);
}
static void v_add_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                     size_t cols) {
  ELEM(3.0 * AB * rows * cols);
}
static void v_gelu_forward(float *out, const float *inp, size_t n) { ELEM(2.0 * AB * n); }
static void v_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
  ELEM(4.0 * AB * n);
}
static void v_residual_forward(float *out, const float *a, const float *b, size_t n) {
  ELEM(3.0 * AB * n);
}
static void v_softmax_xent_forward(float *losses, float *probs, const float *logits,
                                   const int *targets, int N, int V, int Vp) {
  ELEM(2.0 * AB * N * Vp);
  g_null->softmax_xent_forward(losses, probs, logits, targets, N, V, Vp);
}
static void v_softmax_xent_backward(float *dlogits, const float *probs, const int *targets,
                                    float dloss, int N, int V, int Vp) {
  ELEM(2.0 * AB * N * Vp);
}
static void v_xent_vp_max(float *rowmax, const float *logits, int N, int Vl, int nvalid) {
  ELEM(AB * N * Vl);
}
static void v_xent_vp_exp(double *stats, float *probs, const float *logits, const float *rowmax,
                          const int *targets, int v0, int N, int Vl, int nvalid) {
  ELEM(2.0 * AB * N * Vl);
}
static void v_xent_vp_finish(float *losses, float *probs, const double *stats,
                             const float *rowmax, int N, int Vl, int nvalid) {
  ELEM(2.0 * AB * N * Vl);
}
static void v_xent_vp_backward(float *dlogits, const float *probs, const int *targets, int v0,
                               float dloss, int N, int Vl, int nvalid) {
  ELEM(2.0 * AB * N * Vl);
}
static void v_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                           float lr, float beta1, float beta2, float eps, float weight_decay,
                           int t) {
  ELEM(7.0 * 4.0 * n);
}
static void v_moe_router_forward(float *probs, float *lse, int *top_idx, float *top_w,
                                 const float *logits, const float *bias, int N, int E, int k) {
  ELEM(2.0 * 4.0 * N * E);
  g_null->moe_router_forward(probs, lse, top_idx, top_w, logits, bias, N, E, k);
}
static void v_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                  const int *top_idx, const float *top_w, const float *dtop_w,
                                  const float *aux_grad, int rows_per_seq, float z_grad, int N,
                                  int E, int k) {
  ELEM(2.0 * 4.0 * N * E);
}
static void v_moe_prob_sums(float *sums, const float *probs, int N, int E, int rows_per_seq) {
  ELEM(4.0 * N * E);
}
static void v_gather_rows(float *out, const float *inp, const int *idx, int n, int C) {
  ELEM(2.0 * AB * n * C);
}
static void v_moe_combine(float *out, const float *y, const int *slot, const float *w, int N,
                          int C, int k) {
  ELEM((k + 1.0) * AB * N * C);
}
static void v_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y,
                                   const int *slot, const float *w, int N, int C, int k) {
  ELEM((2.0 * k + 1.0) * AB * N * C);
}
static void v_moe_gather_sum(float *dx, const float *src, const int *slot, int N, int C, int k) {
  ELEM((k + 2.0) * AB * N * C);
}
static void v_grouped_matmul_forward(float *out, const float *inp, const float *w,
                                     const float *bias, const int *off, int G, int C, int OC) {
  for (int g = 0; g < G; g++) GEMM(off[g + 1] - off[g], OC, C, 1);
}
static void v_grouped_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                      const float *inp, const float *w, const int *off, int G,
                                      int C, int OC) {
  for (int g = 0; g < G; g++) {
    double rows = off[g + 1] - off[g];
    if (dinp) GEMM(rows, C, OC, 1);
    if (dw) GEMM(OC, C, rows, 1);
  }
}
static double v_sumsq(const float *x, size_t n) {
  ELEM(4.0 * n);
  return g_null->sumsq(x, n);
}
static void v_scale(float *x, float s, size_t n) { ELEM(8.0 * n); }

/* ---- the bf16 table (train.precision = bf16): each op priced as its fp32
 * form (the operands' dtype is the price's act_bytes, the run's: 2), which
 * reads no operand, so the bf16 pointers go through as they are ---- */
typedef mt_bf16 bf;
#define F(x) ((float *)(void *)(x))
#define CF(x) ((const float *)(const void *)(x))
static mt_ops_bf16 g_virt_bf16;

static void vb_matmul_forward(bf *out, const bf *inp, const bf *w, const bf *bias, int N, int C,
                              int OC) {
  g_virt.matmul_forward(F(out), CF(inp), CF(w), CF(bias), N, C, OC);
}
static void vb_matmul_backward(bf *dinp, float *dw, float *dbias, const bf *dout, const bf *inp,
                               const bf *w, int N, int C, int OC) {
  g_virt.matmul_backward(F(dinp), dw, dbias, CF(dout), CF(inp), CF(w), N, C, OC);
}
static void vb_grouped_matmul_forward(bf *out, const bf *inp, const bf *w, const bf *bias,
                                      const int *off, int G, int C, int OC) {
  g_virt.grouped_matmul_forward(F(out), CF(inp), CF(w), CF(bias), off, G, C, OC);
}
static void vb_grouped_matmul_backward(bf *dinp, float *dw, float *dbias, const bf *dout,
                                       const bf *inp, const bf *w, const int *off, int G, int C,
                                       int OC) {
  g_virt.grouped_matmul_backward(F(dinp), dw, dbias, CF(dout), CF(inp), CF(w), off, G, C, OC);
}
static void vb_gather_rows(bf *out, const bf *inp, const int *idx, int n, int C) {
  g_virt.gather_rows(F(out), CF(inp), idx, n, C);
}
static void vb_moe_combine(bf *out, const bf *y, const int *slot, const float *w, int N, int C,
                           int k) {
  g_virt.moe_combine(F(out), CF(y), slot, w, N, C, k);
}
static void vb_moe_combine_backward(bf *dy, float *dw, const bf *dout, const bf *y,
                                    const int *slot, const float *w, int N, int C, int k) {
  g_virt.moe_combine_backward(F(dy), dw, CF(dout), CF(y), slot, w, N, C, k);
}
static void vb_moe_gather_sum(bf *dx, const bf *src, const int *slot, int N, int C, int k) {
  g_virt.moe_gather_sum(F(dx), CF(src), slot, N, C, k);
}
static void vb_encoder_forward(bf *out, const int *inp, const bf *wte, const bf *wpe, int B,
                               int T, int C) {
  g_virt.encoder_forward(F(out), inp, CF(wte), CF(wpe), B, T, C);
}
static void vb_encoder_backward(float *dwte, float *dwpe, const bf *dout, const int *inp, int B,
                                int T, int C) {
  g_virt.encoder_backward(dwte, dwpe, CF(dout), inp, B, T, C);
}
static void vb_encoder_vp_forward(bf *out, const int *inp, const bf *wte, int v0, int Vl,
                                  const bf *wpe, int B, int T, int C) {
  g_virt.encoder_vp_forward(F(out), inp, CF(wte), v0, Vl, CF(wpe), B, T, C);
}
static void vb_encoder_vp_backward(float *dwte, float *dwpe, const bf *dout, const int *inp,
                                   int v0, int Vl, int B, int T, int C) {
  g_virt.encoder_vp_backward(dwte, dwpe, CF(dout), inp, v0, Vl, B, T, C);
}
static void vb_layernorm_forward(bf *out, float *mean, float *rstd, const bf *inp, const bf *w,
                                 const bf *b, int N, int C) {
  g_virt.layernorm_forward(F(out), mean, rstd, CF(inp), CF(w), CF(b), N, C);
}
static void vb_layernorm_backward(bf *dinp, float *dw, float *db, const bf *dout, const bf *inp,
                                  const bf *w, const float *mean, const float *rstd, int N,
                                  int C) {
  g_virt.layernorm_backward(F(dinp), dw, db, CF(dout), CF(inp), CF(w), mean, rstd, N, C);
}
static void vb_gelu_forward(bf *out, const bf *inp, size_t n) {
  g_virt.gelu_forward(F(out), CF(inp), n);
}
static void vb_gelu_backward(bf *dinp, const bf *inp, const bf *dout, size_t n) {
  g_virt.gelu_backward(F(dinp), CF(inp), CF(dout), n);
}
static void vb_residual_forward(bf *out, const bf *a, const bf *b, size_t n) {
  g_virt.residual_forward(F(out), CF(a), CF(b), n);
}
static void vb_attn_forward(const mt_attn_block *a, bf *out, float *lse, const bf *q,
                            const bf *k, const bf *v) {
  g_virt.attn_forward(a, F(out), lse, CF(q), CF(k), CF(v));
}
static void vb_attn_merge(const mt_attn_block *a, bf *out, float *lse, const bf *part,
                          const float *part_lse) {
  g_virt.attn_merge(a, F(out), lse, CF(part), part_lse);
}
static void vb_attn_backward(const mt_attn_block *a, bf *dq, bf *dk, bf *dv, const bf *dout,
                             const bf *out, const float *lse, const bf *q, const bf *k,
                             const bf *v) {
  g_virt.attn_backward(a, F(dq), F(dk), F(dv), CF(dout), CF(out), lse, CF(q), CF(k), CF(v));
}
static void vb_softmax_xent_forward(float *losses, bf *probs, const bf *logits,
                                    const int *targets, int N, int V, int Vp) {
  g_virt.softmax_xent_forward(losses, F(probs), CF(logits), targets, N, V, Vp);
}
static void vb_softmax_xent_backward(bf *dlogits, const bf *probs, const int *targets,
                                     float dloss, int N, int V, int Vp) {
  g_virt.softmax_xent_backward(F(dlogits), CF(probs), targets, dloss, N, V, Vp);
}
static void vb_xent_vp_max(float *rowmax, const bf *logits, int N, int Vl, int nvalid) {
  g_virt.xent_vp_max(rowmax, CF(logits), N, Vl, nvalid);
}
static void vb_xent_vp_exp(double *stats, const bf *logits, const float *rowmax,
                           const int *targets, int v0, int N, int Vl, int nvalid) {
  g_virt.xent_vp_exp(stats, NULL, CF(logits), rowmax, targets, v0, N, Vl, nvalid);
}
static void vb_xent_vp_finish(float *losses, bf *probs, const bf *logits, const double *stats,
                              const float *rowmax, int N, int Vl, int nvalid) {
  g_virt.xent_vp_finish(losses, F(probs), stats, rowmax, N, Vl, nvalid);
}
static void vb_xent_vp_backward(bf *dlogits, const bf *probs, const int *targets, int v0,
                                float dloss, int N, int Vl, int nvalid) {
  g_virt.xent_vp_backward(F(dlogits), CF(probs), targets, v0, dloss, N, Vl, nvalid);
}
static void vb_adamw_update(float *param, bf *param_bf16, const float *grad, float *m, float *v,
                            size_t n, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t) {
  /* the fp32 update and, in the same pass, the copy written */
  advance("adamw_update",
          mt_price_elem_s(P, 7.0 * 4.0 * n + (param_bf16 ? sizeof(bf) * (double)n : 0.0)));
}
static void vb_zero(bf *x, size_t n) { ELEM(sizeof(bf) * (double)n); }
static void vb_copy(bf *dst, const bf *src, size_t n) { g_virt.copy(F(dst), CF(src), n); }
static void vb_axpy(bf *y, float a, const bf *x, size_t n) { ELEM(3.0 * sizeof(bf) * n); }
static void vb_scale(bf *x, float s, size_t n) { ELEM(2.0 * sizeof(bf) * n); }
static double vb_sum(const bf *x, size_t n) {
  ELEM(sizeof(bf) * (double)n);
  return 0.0;
}
static double vb_sumsq(const bf *x, size_t n) {
  ELEM(sizeof(bf) * (double)n);
  return 0.0;
}
static void vb_copy_2d(bf *dst, size_t ld_dst, const bf *src, size_t ld_src, size_t rows,
                       size_t cols) {
  g_virt.copy_2d(F(dst), ld_dst, CF(src), ld_src, rows, cols);
}
static void vb_add_2d(bf *dst, size_t ld_dst, const bf *src, size_t ld_src, size_t rows,
                      size_t cols) {
  g_virt.add_2d(F(dst), ld_dst, CF(src), ld_src, rows, cols);
}
/* the casts read 4 + write 2 bytes an element or the reverse */
static void vb_from_f32(bf *dst, const float *src, size_t n) { ELEM(6.0 * n); }
static void vb_to_f32(float *dst, const bf *src, size_t n) { ELEM(6.0 * n); }
#undef F
#undef CF

const mt_ops_bf16 *mt_ops_bf16_virtual(void) {
  mt_ops_virtual();
  if (g_virt_bf16.name) return &g_virt_bf16;
  g_virt_bf16.name = "virtual-bf16";
#define PRICED(m) g_virt_bf16.m = vb_##m;
  PRICED(matmul_forward) PRICED(matmul_backward) PRICED(grouped_matmul_forward)
  PRICED(grouped_matmul_backward) PRICED(gather_rows) PRICED(moe_combine)
  PRICED(moe_combine_backward) PRICED(moe_gather_sum) PRICED(encoder_forward)
  PRICED(encoder_backward) PRICED(encoder_vp_forward) PRICED(encoder_vp_backward)
  PRICED(layernorm_forward) PRICED(layernorm_backward) PRICED(gelu_forward)
  PRICED(gelu_backward) PRICED(residual_forward) PRICED(attn_forward) PRICED(attn_merge)
  PRICED(attn_backward) PRICED(softmax_xent_forward) PRICED(softmax_xent_backward)
  PRICED(xent_vp_max) PRICED(xent_vp_exp) PRICED(xent_vp_finish) PRICED(xent_vp_backward)
  PRICED(adamw_update) PRICED(zero) PRICED(copy) PRICED(axpy) PRICED(scale) PRICED(sum)
  PRICED(sumsq) PRICED(copy_2d) PRICED(add_2d) PRICED(from_f32) PRICED(to_f32)
#undef PRICED
  return &g_virt_bf16;
}

const mt_ops *mt_ops_virtual(void) {
  if (g_null) return &g_virt;
  g_null = mt_ops_null();
  g_virt = *g_null; /* memory, upload, download and sync are the null backend's */
  g_virt.name = "virtual";
#define PRICED(m) g_virt.m = v_##m;
  PRICED(zero) PRICED(copy) PRICED(axpy) PRICED(sum) PRICED(encoder_forward)
  PRICED(encoder_backward) PRICED(layernorm_forward) PRICED(layernorm_backward)
  PRICED(matmul_forward) PRICED(matmul_backward) PRICED(encoder_vp_forward)
  PRICED(encoder_vp_backward) PRICED(attention_forward) PRICED(attention_backward)
  PRICED(attn_forward) PRICED(attn_merge) PRICED(attn_backward) PRICED(copy_2d) PRICED(add_2d)
  PRICED(gelu_forward) PRICED(gelu_backward) PRICED(residual_forward)
  PRICED(softmax_xent_forward) PRICED(softmax_xent_backward) PRICED(xent_vp_max)
  PRICED(xent_vp_exp) PRICED(xent_vp_finish) PRICED(xent_vp_backward) PRICED(adamw_update)
  PRICED(moe_router_forward) PRICED(moe_router_backward) PRICED(moe_prob_sums)
  PRICED(gather_rows) PRICED(moe_combine) PRICED(moe_combine_backward) PRICED(moe_gather_sum)
  PRICED(grouped_matmul_forward) PRICED(grouped_matmul_backward) PRICED(sumsq) PRICED(scale)
#undef PRICED
  /* tests only: an op left without a price, as a new op would be */
  const char *drop = getenv("MT_TEST_VIRTUAL_UNPRICED");
#define UNPRICE(m, optional)                                                               \
  if (drop && strcmp(drop, #m) == 0) g_virt.m = g_null->m;
  MT_OPS_MEMBERS(UNPRICE)
#undef UNPRICE
  return &g_virt;
}
