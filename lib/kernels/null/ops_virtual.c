/* The virtual device's op table: the null backend (no arithmetic, memory
 * counted per category but not backed, synthetic values where the host
 * reads them) whose every op moves the rank's virtual clock on by its price
 * (core's mt_price: the cost model's matmul curve, memory bandwidth).
 *
 * What each op is priced as (B batch, T rows, C channels, AB the profile's
 * bytes per activation element, ES the bytes of an element of the op's
 * storage type, fp32 for optimizer state and gradients):
 *   matmuls        2 m n k FLOPs at the throughput of its operands' width's
 *                  curve for that size, or its operands through memory
 *                  where that is longer (core's mt_price_gemm_s);
 *                  backward: the input-gradient and the weight-gradient
 *                  matmul each where asked for (dbias: free)
 *   grouped        the same per non-empty group (rows from the host offsets)
 *   attention      a block pair as the cost model prices block attention
 *                  (core's mt_price_attn_fwd_s: the profile's tiles, its
 *                  fused rate attn_gflops or the matmul curve on the
 *                  visible keys); backward 2.5 times the forward
 *   elementwise    the bytes the op reads and writes over the memory
 *                  bandwidth (an accumulation reads and writes, an op's
 *                  _first form writes only; norms, GELU, SwiGLU, rotary
 *                  embedding alike)
 *   AdamW          7 fp32 streams (read param, grad, m, v; write three),
 *                  and the compute copy's ES when it writes one; adamw_ranges
 *                  the same with the gradient at its own type's width
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
static void gemm(const char *op, double es, double m, double n, double k, double calls) {
  advance(op, mt_price_gemm_s(P, es, m, n, k, calls));
}
/* each wrapper v_<op> names its op on the timeline */
#define ELEM(bytes) elem(__func__ + 2, (bytes))
#define AB (P->act_bytes)
#define ES ((double)mt_dtype_bytes(t))
/* a matmul's operand width: the op's own type in a run that keeps its
 * types (bf16: bytes_as_sent), else the profile's activations' (an fp32
 * run on a bf16 profile stands for the mixed precision the plan prices) */
#define GW(t) (P->bytes_as_sent ? (double)mt_dtype_bytes(t) : AB)
#define GEMM(m, n, k, calls) gemm(__func__ + 2, GW(t), (m), (n), (k), (calls))

static void v_zero(mt_dtype t, void *x, size_t n) { ELEM(ES * n); }
static void v_copy(mt_dtype t, void *dst, const void *src, size_t n) { ELEM(2.0 * AB * n); }
static void v_axpy(mt_dtype t, void *y, float a, const void *x, size_t n) { ELEM(3.0 * ES * n); }
static void v_scale(mt_dtype t, void *x, float s, size_t n) { ELEM(2.0 * ES * n); }
static double v_sum(mt_dtype t, const void *x, size_t n) {
  ELEM(ES * n);
  return g_null->sum(t, x, n);
}
static double v_sumsq(mt_dtype t, const void *x, size_t n) {
  ELEM(ES * n);
  return g_null->sumsq(t, x, n);
}
/* reads one type, writes the other */
static void v_convert(void *dst, mt_dtype dst_t, const void *src, mt_dtype src_t, size_t n) {
  ELEM(((double)mt_dtype_bytes(dst_t) + (double)mt_dtype_bytes(src_t)) * n);
}
static void v_encoder_forward(mt_dtype t, void *out, const int *inp, const void *wte,
                              const void *wpe, int B, int T, int C) {
  ELEM(3.0 * AB * B * T * C);
}
static void v_encoder_backward(mt_dtype t, float *dwte, float *dwpe, const void *dout,
                               const int *inp, int B, int T, int C) {
  ELEM(5.0 * AB * B * T * C);
}
static void v_layernorm_forward(mt_dtype t, void *out, float *mean, float *rstd, const void *inp,
                                const void *w, const void *b, int N, int C) {
  ELEM(2.0 * AB * N * C);
}
static void v_layernorm_backward(mt_dtype t, void *dinp, float *dw, float *db, const void *dout,
                                 const void *inp, const void *w, const float *mean,
                                 const float *rstd, int N, int C) {
  ELEM(4.0 * AB * N * C);
}
/* an op's _first form: dinp written, not read */
static void v_layernorm_backward_first(mt_dtype t, void *dinp, float *dw, float *db,
                                       const void *dout, const void *inp, const void *w,
                                       const float *mean, const float *rstd, int N, int C) {
  ELEM(3.0 * AB * N * C);
}
static void v_matmul_forward(mt_dtype t, void *out, const void *inp, const void *w,
                             const void *bias, int N, int C, int OC) {
  GEMM(N, OC, C, 1);
}
static void v_matmul_backward(mt_dtype t, void *dinp, float *dw, float *dbias, const void *dout,
                              const void *inp, const void *w, int N, int C, int OC) {
  if (dinp) GEMM(N, C, OC, 1);
  if (dw) GEMM(OC, C, N, 1);
}
static void v_matmul_backward_first(mt_dtype t, void *dinp, float *dw, float *dbias,
                                    const void *dout, const void *inp, const void *w, int N,
                                    int C, int OC) {
  if (dinp) GEMM(N, C, OC, 1);
  if (dw) GEMM(OC, C, N, 1);
}
static void v_encoder_vp_forward(mt_dtype t, void *out, const int *inp, const void *wte, int v0,
                                 int Vl, const void *wpe, const int *pos, int B, int T, int C) {
  ELEM((wpe ? 3.0 : 2.0) * AB * B * T * C);
}
static void v_encoder_vp_backward(mt_dtype t, float *dwte, float *dwpe, const void *dout,
                                  const int *inp, const int *pos, int v0, int Vl, int B, int T,
                                  int C) {
  ELEM((dwpe ? 5.0 : 3.0) * AB * B * T * C);
}
static void v_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                int NH) {
  const mt_dtype t = MT_DT_F32; /* two matmuls, half of each (causal) */
  GEMM(T, T, (double)C / NH, (double)B * NH);
}
static void v_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                                 const float *att, int B, int T, int C, int NH) {
  const mt_dtype t = MT_DT_F32;
  GEMM(T, T, (double)C / NH, 2.0 * B * NH);
}
/* with documents, the visible share of the pairs (a->density) */
static double attn_fwd_s(mt_dtype t, const mt_attn_block *a) {
  return mt_price_attn_fwd_s(P, GW(t), (double)a->B * a->NH, a->q_pos0, a->Tq, a->k_pos0, a->Tk,
                             a->causal, a->hs) *
         (a->density > 0.0 ? a->density : 1.0);
}
static void v_attn_forward(mt_dtype t, const mt_attn_block *a, void *out, float *lse,
                           const void *q, const void *k, const void *v) {
  advance("attn_forward", attn_fwd_s(t, a));
}
static void v_attn_merge(mt_dtype t, const mt_attn_block *a, void *out, float *lse,
                         const void *part, const float *part_lse) {
  ELEM(3.0 * AB * a->B * a->NH * (double)a->Tq * a->hs);
}
static void v_attn_backward(mt_dtype t, const mt_attn_block *a, void *dq, void *dk, void *dv,
                            const void *dout, const void *out, const float *lse, const void *q,
                            const void *k, const void *v) {
  advance("attn_backward", 2.5 * attn_fwd_s(t, a));
}
/* the same products; the gradients written instead of read and written (a
 * small share of a price the products set) */
static void v_attn_backward_first(mt_dtype t, const mt_attn_block *a, void *dq, void *dk,
                                  void *dv, const void *dout, const void *out, const float *lse,
                                  const void *q, const void *k, const void *v) {
  advance("attn_backward_first", 2.5 * attn_fwd_s(t, a));
}
static void v_copy_2d(mt_dtype t, void *dst, size_t ld_dst, const void *src, size_t ld_src,
                      size_t rows, size_t cols) {
  ELEM(2.0 * AB * rows * cols);
}
static void v_add_2d(mt_dtype t, void *dst, size_t ld_dst, const void *src, size_t ld_src,
                     size_t rows, size_t cols) {
  ELEM(3.0 * AB * rows * cols);
}
/* one pass: c's q and key/value heads read (each key/value head once per
 * row, its other reads hit the cache), qkv's three parts (two without q) written; the
 * backward the other way round; rope's turn (cs) on the way costs no
 * bytes */
static void v_kv_spread(mt_dtype t, void *qkv, const void *c, size_t rows, int nh, int nkv,
                        int hs, int h0, int group, int with_q, const float *cs, const int *pos,
                        int T) {
  ELEM(AB * rows * ((with_q ? 4.0 : 2.0) * nh + 2.0 * nkv) * hs);
}
static void v_kv_spread_backward(mt_dtype t, void *dc, const void *dqkv, size_t rows, int nh,
                                 int nkv, int hs, int h0, int group, int with_q,
                                 const float *cs, const int *pos, int T) {
  ELEM(AB * rows * ((with_q ? 4.0 : 2.0) * nh + 2.0 * nkv) * hs);
}
static void v_gelu_forward(mt_dtype t, void *out, const void *inp, size_t n) {
  ELEM(2.0 * AB * n);
}
static void v_gelu_backward(mt_dtype t, void *dinp, const void *inp, const void *dout, size_t n) {
  ELEM(4.0 * AB * n);
}
static void v_gelu_backward_first(mt_dtype t, void *dinp, const void *inp, const void *dout,
                                  size_t n) {
  ELEM(3.0 * AB * n);
}
static void v_swiglu_forward(mt_dtype t, void *out, const void *inp, int N, int F) {
  ELEM(3.0 * AB * N * F);
}
static void v_swiglu_backward(mt_dtype t, void *dinp, const void *inp, const void *dout, int N,
                              int F) {
  ELEM(7.0 * AB * N * F);
}
static void v_swiglu_backward_first(mt_dtype t, void *dinp, const void *inp, const void *dout,
                                    int N, int F) {
  ELEM(5.0 * AB * N * F);
}
static void v_rmsnorm_forward(mt_dtype t, void *out, float *rstd, const void *inp,
                              const void *w, int N, int C, float eps) {
  ELEM(2.0 * AB * N * C);
}
static void v_rmsnorm_backward(mt_dtype t, void *dinp, float *dw, const void *dout,
                               const void *inp, const void *w, const float *rstd, int N, int C) {
  ELEM(4.0 * AB * N * C);
}
static void v_rmsnorm_backward_first(mt_dtype t, void *dinp, float *dw, const void *dout,
                                     const void *inp, const void *w, const float *rstd, int N,
                                     int C) {
  ELEM(3.0 * AB * N * C);
}
static void v_rope(mt_dtype t, void *x, size_t ld, int B, int T, int nh, int hs, const float *cs,
                   const int *pos, int inverse) {
  ELEM(2.0 * AB * B * T * nh * hs);
}
static void v_residual_forward(mt_dtype t, void *out, const void *a, const void *b, size_t n) {
  ELEM(3.0 * AB * n);
}
/* fused: read a and b, write res and out (the norm's reads of res hit
 * the row just written) */
static void v_residual_layernorm_forward(mt_dtype t, void *res, void *out, float *mean,
                                         float *rstd, const void *a, const void *b,
                                         const void *w, const void *bias, int N, int C) {
  ELEM(4.0 * AB * N * C);
}
static void v_residual_rmsnorm_forward(mt_dtype t, void *res, void *out, float *rstd,
                                       const void *a, const void *b, const void *w, int N, int C,
                                       float eps) {
  ELEM(4.0 * AB * N * C);
}
static void v_softmax_xent_forward(mt_dtype t, float *losses, void *probs, const void *logits,
                                   const int *targets, int N, int V, int Vp) {
  ELEM(2.0 * AB * N * Vp);
  g_null->softmax_xent_forward(t, losses, probs, logits, targets, N, V, Vp);
}
static void v_softmax_xent_backward(mt_dtype t, void *dlogits, const void *probs,
                                    const int *targets, float dloss, int N, int V, int Vp) {
  ELEM(2.0 * AB * N * Vp);
}
static void v_xent_vp_max(mt_dtype t, float *rowmax, const void *logits, int N, int Vl,
                          int nvalid) {
  ELEM(AB * N * Vl);
}
static void v_xent_vp_exp(mt_dtype t, double *stats, const void *logits, const float *rowmax,
                          const int *targets, int v0, int N, int Vl, int nvalid) {
  ELEM(2.0 * AB * N * Vl);
}
static void v_xent_vp_finish(mt_dtype t, float *losses, void *probs, const void *logits,
                             const double *stats, const float *rowmax, const int *targets, int N,
                             int Vl, int nvalid) {
  ELEM(2.0 * AB * N * Vl);
}
static void v_xent_vp_backward(mt_dtype t, void *dlogits, const void *probs, const int *targets,
                               int v0, float dloss, int N, int Vl, int nvalid) {
  ELEM(2.0 * AB * N * Vl);
}
static void v_adamw_update(mt_dtype t, float *param, void *param_copy, const float *grad,
                           float *m, float *v, size_t n, float lr, float beta1, float beta2,
                           float eps, float weight_decay, int step) {
  ELEM(7.0 * 4.0 * n + (param_copy ? ES * n : 0.0));
}
/* the same streams per element as adamw_update, the gradient read at its
 * own type's width: one pass, whatever the number of ranges */
static void v_adamw_ranges(mt_dtype t, float *param, void *param_copy, const void *grad,
                           mt_dtype grad_t, float grad_scale, float *m, float *v,
                           const mt_adamw_range *ranges, int n_ranges, float lr, float beta1,
                           float beta2, float eps, int step) {
  double n = 0.0;
  for (int r = 0; r < n_ranges; r++) n += (double)(ranges[r].end - ranges[r].begin);
  ELEM((6.0 * 4.0 + (double)mt_dtype_bytes(grad_t) + (param_copy ? ES : 0.0)) * n);
}
static void v_moe_router_forward(float *probs, float *lse, int *top_idx, float *top_w,
                                 const float *logits, const float *bias, int N, int E, int k,
                                 int sigmoid) {
  ELEM(2.0 * 4.0 * N * E);
  g_null->moe_router_forward(probs, lse, top_idx, top_w, logits, bias, N, E, k, sigmoid);
}
static void v_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                  const int *top_idx, const float *top_w, const float *dtop_w,
                                  const float *aux_grad, int rows_per_seq, float z_grad, int N,
                                  int E, int k, int sigmoid) {
  ELEM(2.0 * 4.0 * N * E);
}
static void v_moe_prob_sums(float *sums, const float *probs, int N, int E, int rows_per_seq) {
  ELEM(4.0 * N * E);
}
static void v_gather_rows(mt_dtype t, void *out, const void *inp, const int *idx, int n, int C) {
  ELEM(2.0 * AB * n * C);
}
static void v_moe_combine(mt_dtype t, void *out, const void *y, const int *slot, const float *w,
                          int N, int C, int k) {
  ELEM((k + 1.0) * AB * N * C);
}
static void v_moe_combine_backward(mt_dtype t, void *dy, float *dw, const void *dout,
                                   const void *y, const int *slot, const float *w, int N, int C,
                                   int k) {
  ELEM((2.0 * k + 1.0) * AB * N * C);
}
static void v_moe_gather_sum(mt_dtype t, void *dx, const void *src, const int *slot, int N, int C,
                             int k) {
  ELEM((k + 2.0) * AB * N * C);
}
/* the groups' matmuls one by one, each group's price computed once for a
 * run of groups of equal rows (balanced routing: every group) */
static void v_grouped_matmul_forward(mt_dtype t, void *out, const void *inp, const void *w,
                                     const void *bias, const int *off, int G, int C, int OC) {
  double rows = -1.0, s = 0.0;
  for (int g = 0; g < G; g++) {
    if (off[g + 1] - off[g] != rows)
      rows = off[g + 1] - off[g], s = mt_price_gemm_s(P, GW(t), rows, OC, C, 1);
    advance("grouped_matmul_forward", s);
  }
}
static void v_grouped_matmul_backward(mt_dtype t, void *dinp, float *dw, float *dbias,
                                      const void *dout, const void *inp, const void *w,
                                      const int *off, int G, int C, int OC) {
  double rows = -1.0, s_in = 0.0, s_w = 0.0;
  for (int g = 0; g < G; g++) {
    if (off[g + 1] - off[g] != rows) {
      rows = off[g + 1] - off[g];
      s_in = mt_price_gemm_s(P, GW(t), rows, C, OC, 1);
      s_w = mt_price_gemm_s(P, GW(t), OC, C, rows, 1);
    }
    if (dinp) advance("grouped_matmul_backward", s_in);
    if (dw) advance("grouped_matmul_backward", s_w);
  }
}

const mt_ops *mt_ops_virtual(void) {
  if (g_null) return &g_virt;
  g_null = mt_ops_null();
  g_virt = *g_null; /* memory, upload, download and sync are the null backend's */
  g_virt.name = "virtual";
  /* every op of the lists priced (a list entry without its v_ function
   * fails to build here) */
#define PRICED_(name, params, args) g_virt.name = v_##name;
#define PRICED_FIXED_(name, optional, params, args) g_virt.name = v_##name;
  MT_OPS_TYPED(PRICED_)
  MT_OPS_TYPED_SUMS(PRICED_)
  MT_OPS_FIXED(PRICED_FIXED_)
#undef PRICED_
#undef PRICED_FIXED_
  /* tests only: an op left without a price, as a new op would be */
  const char *drop = getenv("MT_TEST_VIRTUAL_UNPRICED");
#define UNPRICE_(name, params, args)                                                        \
  if (drop && strcmp(drop, #name) == 0) g_virt.name = g_null->name;
#define UNPRICE_FIXED_(name, optional, params, args) UNPRICE_(name, params, args)
  MT_OPS_TYPED(UNPRICE_)
  MT_OPS_TYPED_SUMS(UNPRICE_)
  MT_OPS_FIXED(UNPRICE_FIXED_)
#undef UNPRICE_
#undef UNPRICE_FIXED_
  return &g_virt;
}
