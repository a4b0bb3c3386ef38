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
  return &g_virt;
}
