/* The CPU table with every compute op on the timeline (metrics.trace =
 * true on the CPU device): each op runs the CPU's own and records its wall
 * span on the compute track under the op's member name, the name the
 * virtual device gives the same op (null/ops_virtual.c), so a real and an
 * emulated trace of one layout compare op by op (meshreport timeline's
 * per-op table). Memory, transfers and sync pass straight through; so does
 * the bf16 table (mt_ops_bf16_of maps this table to the CPU's). The CPU
 * runs ops synchronously, so a span is the op's time; a CUDA op would need
 * a sync per op, which is why only the CPU has this table. */
#include "kernels/kernels.h"

static const mt_ops *g_base;
static mt_ops g_traced;

#define B g_base
/* time the call in the enclosing wrapper under its member name */
#define SPAN(call)                                                                         \
  do {                                                                                     \
    double t0_ = mt_now();                                                                 \
    call;                                                                                  \
    mt_trace_span(__func__ + 2, "op", MT_TRACK_COMPUTE, t0_, mt_now(), -1, -1);            \
  } while (0)

static void t_zero(float *x, size_t n) { SPAN(B->zero(x, n)); }
static void t_copy(float *dst, const float *src, size_t n) { SPAN(B->copy(dst, src, n)); }
static void t_axpy(float *y, float a, const float *x, size_t n) { SPAN(B->axpy(y, a, x, n)); }
static double t_sum(const float *x, size_t n) {
  double r;
  SPAN(r = B->sum(x, n));
  return r;
}
static void t_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                              int Bn, int T, int C) {
  SPAN(B->encoder_forward(out, inp, wte, wpe, Bn, T, C));
}
static void t_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                               int Bn, int T, int C) {
  SPAN(B->encoder_backward(dwte, dwpe, dout, inp, Bn, T, C));
}
static void t_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, int N, int C) {
  SPAN(B->layernorm_forward(out, mean, rstd, inp, w, b, N, C));
}
static void t_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, int N, int C) {
  SPAN(B->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C));
}
static void t_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                             int N, int C, int OC) {
  SPAN(B->matmul_forward(out, inp, w, bias, N, C, OC));
}
static void t_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, int N, int C, int OC) {
  SPAN(B->matmul_backward(dinp, dw, dbias, dout, inp, w, N, C, OC));
}
static void t_encoder_vp_forward(float *out, const int *inp, const float *wte, int v0, int Vl,
                                 const float *wpe, int Bn, int T, int C) {
  SPAN(B->encoder_vp_forward(out, inp, wte, v0, Vl, wpe, Bn, T, C));
}
static void t_encoder_vp_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                                  int v0, int Vl, int Bn, int T, int C) {
  SPAN(B->encoder_vp_backward(dwte, dwpe, dout, inp, v0, Vl, Bn, T, C));
}
static void t_attn_forward(const mt_attn_block *a, float *out, float *lse, const float *q,
                           const float *k, const float *v) {
  SPAN(B->attn_forward(a, out, lse, q, k, v));
}
static void t_attn_merge(const mt_attn_block *a, float *out, float *lse, const float *part,
                         const float *part_lse) {
  SPAN(B->attn_merge(a, out, lse, part, part_lse));
}
static void t_attn_backward(const mt_attn_block *a, float *dq, float *dk, float *dv,
                            const float *dout, const float *out, const float *lse,
                            const float *q, const float *k, const float *v) {
  SPAN(B->attn_backward(a, dq, dk, dv, dout, out, lse, q, k, v));
}
static void t_copy_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                      size_t cols) {
  SPAN(B->copy_2d(dst, ld_dst, src, ld_src, rows, cols));
}
static void t_add_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                     size_t cols) {
  SPAN(B->add_2d(dst, ld_dst, src, ld_src, rows, cols));
}
static void t_gelu_forward(float *out, const float *inp, size_t n) {
  SPAN(B->gelu_forward(out, inp, n));
}
static void t_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
  SPAN(B->gelu_backward(dinp, inp, dout, n));
}
static void t_residual_forward(float *out, const float *a, const float *b, size_t n) {
  SPAN(B->residual_forward(out, a, b, n));
}
static void t_softmax_xent_forward(float *losses, float *probs, const float *logits,
                                   const int *targets, int N, int V, int Vp) {
  SPAN(B->softmax_xent_forward(losses, probs, logits, targets, N, V, Vp));
}
static void t_softmax_xent_backward(float *dlogits, const float *probs, const int *targets,
                                    float dloss, int N, int V, int Vp) {
  SPAN(B->softmax_xent_backward(dlogits, probs, targets, dloss, N, V, Vp));
}
static void t_xent_vp_max(float *rowmax, const float *logits, int N, int Vl, int nvalid) {
  SPAN(B->xent_vp_max(rowmax, logits, N, Vl, nvalid));
}
static void t_xent_vp_exp(double *stats, float *probs, const float *logits, const float *rowmax,
                          const int *targets, int v0, int N, int Vl, int nvalid) {
  SPAN(B->xent_vp_exp(stats, probs, logits, rowmax, targets, v0, N, Vl, nvalid));
}
static void t_xent_vp_finish(float *losses, float *probs, const double *stats,
                             const float *rowmax, int N, int Vl, int nvalid) {
  SPAN(B->xent_vp_finish(losses, probs, stats, rowmax, N, Vl, nvalid));
}
static void t_xent_vp_backward(float *dlogits, const float *probs, const int *targets, int v0,
                               float dloss, int N, int Vl, int nvalid) {
  SPAN(B->xent_vp_backward(dlogits, probs, targets, v0, dloss, N, Vl, nvalid));
}
static void t_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                           float lr, float beta1, float beta2, float eps, float weight_decay,
                           int t) {
  SPAN(B->adamw_update(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, t));
}
static void t_moe_router_forward(float *probs, float *lse, int *top_idx, float *top_w,
                                 const float *logits, const float *bias, int N, int E, int k) {
  SPAN(B->moe_router_forward(probs, lse, top_idx, top_w, logits, bias, N, E, k));
}
static void t_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                  const int *top_idx, const float *top_w, const float *dtop_w,
                                  const float *aux_grad, int rows_per_seq, float z_grad, int N,
                                  int E, int k) {
  SPAN(B->moe_router_backward(dlogits, probs, lse, top_idx, top_w, dtop_w, aux_grad,
                              rows_per_seq, z_grad, N, E, k));
}
static void t_moe_prob_sums(float *sums, const float *probs, int N, int E, int rows_per_seq) {
  SPAN(B->moe_prob_sums(sums, probs, N, E, rows_per_seq));
}
static void t_gather_rows(float *out, const float *inp, const int *idx, int n, int C) {
  SPAN(B->gather_rows(out, inp, idx, n, C));
}
static void t_moe_combine(float *out, const float *y, const int *slot, const float *w, int N,
                          int C, int k) {
  SPAN(B->moe_combine(out, y, slot, w, N, C, k));
}
static void t_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y,
                                   const int *slot, const float *w, int N, int C, int k) {
  SPAN(B->moe_combine_backward(dy, dw, dout, y, slot, w, N, C, k));
}
static void t_moe_gather_sum(float *dx, const float *src, const int *slot, int N, int C, int k) {
  SPAN(B->moe_gather_sum(dx, src, slot, N, C, k));
}
static void t_grouped_matmul_forward(float *out, const float *inp, const float *w,
                                     const float *bias, const int *off, int G, int C, int OC) {
  SPAN(B->grouped_matmul_forward(out, inp, w, bias, off, G, C, OC));
}
static void t_grouped_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                      const float *inp, const float *w, const int *off, int G,
                                      int C, int OC) {
  SPAN(B->grouped_matmul_backward(dinp, dw, dbias, dout, inp, w, off, G, C, OC));
}
static double t_sumsq(const float *x, size_t n) {
  double r;
  SPAN(r = B->sumsq(x, n));
  return r;
}
static void t_scale(float *x, float s, size_t n) { SPAN(B->scale(x, s, n)); }

const mt_ops *mt_ops_cpu_traced(void) {
  if (!g_base) {
    g_base = mt_ops_cpu();
    g_traced = *g_base; /* memory, transfers, sync, the reference attention */
#define MT_TRACED_SET(op) g_traced.op = t_##op;
    MT_TRACED_SET(zero) MT_TRACED_SET(copy) MT_TRACED_SET(axpy) MT_TRACED_SET(sum)
    MT_TRACED_SET(encoder_forward) MT_TRACED_SET(encoder_backward)
    MT_TRACED_SET(layernorm_forward) MT_TRACED_SET(layernorm_backward)
    MT_TRACED_SET(matmul_forward) MT_TRACED_SET(matmul_backward)
    MT_TRACED_SET(encoder_vp_forward) MT_TRACED_SET(encoder_vp_backward)
    MT_TRACED_SET(attn_forward) MT_TRACED_SET(attn_merge) MT_TRACED_SET(attn_backward)
    MT_TRACED_SET(copy_2d) MT_TRACED_SET(add_2d) MT_TRACED_SET(gelu_forward)
    MT_TRACED_SET(gelu_backward) MT_TRACED_SET(residual_forward)
    MT_TRACED_SET(softmax_xent_forward) MT_TRACED_SET(softmax_xent_backward)
    MT_TRACED_SET(xent_vp_max) MT_TRACED_SET(xent_vp_exp) MT_TRACED_SET(xent_vp_finish)
    MT_TRACED_SET(xent_vp_backward) MT_TRACED_SET(adamw_update)
    MT_TRACED_SET(moe_router_forward) MT_TRACED_SET(moe_router_backward)
    MT_TRACED_SET(moe_prob_sums) MT_TRACED_SET(gather_rows) MT_TRACED_SET(moe_combine)
    MT_TRACED_SET(moe_combine_backward) MT_TRACED_SET(moe_gather_sum)
    MT_TRACED_SET(grouped_matmul_forward) MT_TRACED_SET(grouped_matmul_backward)
    MT_TRACED_SET(sumsq) MT_TRACED_SET(scale)
#undef MT_TRACED_SET
  }
  return &g_traced;
}
