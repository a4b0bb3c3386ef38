/* The null backend: an op table that does no arithmetic and holds no
 * tensor memory, under which the real model, dp engine and pipeline run to
 * be counted (the plan; the virtual device of the time-warp work adds a
 * clock to each op here).
 *
 * Memory: alloc hands out addresses in a reserved, inaccessible range
 * (PROT_NONE: touching one faults, so an op that is not null, or host code
 * that reads tensor memory, shows at once) and counts the bytes per
 * category exactly as a real backend does (mt_mem_count). Ops are empty.
 * Values the control flow reads on the host are synthetic and
 * deterministic: the losses and norms are 0, and the router picks experts
 * round-robin (token n's j-th choice is expert (n k + j) mod E: a balanced
 * routing; every expert when k = E), or, with a skew (mt_ops_null_moe_skew),
 * from a Zipf law. Those choices, and the small records
 * the host uploads and downloads again (a MoE block's routing record), are
 * kept in a little store keyed by address: the only memory behind the
 * addresses. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include "kernels/kernels.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ------------------------------------------------------------------ */
/* memory: addresses without storage                                   */

/* the reserved range; addresses wrap around it (nothing is ever stored at
 * them, so two buffers may alias) */
static uintptr_t g_base, g_next;
static size_t g_span;

static void reserve(void) {
  if (g_base) return;
  for (size_t span = (size_t)1 << 40; span >= ((size_t)1 << 24); span >>= 2) {
    void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    g_base = g_next = (uintptr_t)p;
    g_span = span;
    return;
  }
  mt_die("null backend: no address range could be reserved");
}

static void *null_alloc(mt_mem_cat cat, size_t bytes) {
  reserve();
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded > g_span) rounded = g_span;
  if (g_next + rounded > g_base + g_span) g_next = g_base;
  void *p = (void *)g_next;
  g_next += rounded ? rounded : 64;
  mt_mem_count(cat, bytes);
  return p;
}

static void null_free(mt_mem_cat cat, void *p, size_t bytes) {
  if (p) mt_mem_uncount(cat, bytes);
}

/* ------------------------------------------------------------------ */
/* the store: what the host reads back                                 */

typedef struct {
  const void *key;
  void *data;
  size_t bytes;
} entry;
static entry *g_store;
static size_t g_store_cap, g_store_n;
enum { STORE_MAX_BYTES = 1 << 16 }; /* larger uploads (tokens) are not kept */

static entry *find(const void *key, int add) {
  if (add && 2 * (g_store_n + 1) > g_store_cap) { /* grow: rehash every entry */
    size_t cap = g_store_cap ? 2 * g_store_cap : 256;
    entry *old = g_store;
    size_t old_cap = g_store_cap;
    g_store = calloc(cap, sizeof *g_store);
    if (!g_store) mt_die("null backend: out of memory (store)");
    g_store_cap = cap;
    g_store_n = 0;
    for (size_t i = 0; i < old_cap; i++)
      if (old[i].key) *find(old[i].key, 1) = old[i], g_store_n++;
    free(old);
  }
  if (!g_store_cap) return NULL;
  for (size_t i = ((uintptr_t)key >> 6) % g_store_cap;; i = (i + 1) % g_store_cap) {
    if (g_store[i].key == key) return &g_store[i];
    if (!g_store[i].key) return add ? &g_store[i] : NULL;
  }
}

/* bytes of src kept under key (replacing what was there) */
static void keep(const void *key, const void *src, size_t bytes) {
  entry *e = find(key, 1);
  if (!e->key) g_store_n++;
  free(e->data);
  e->key = key;
  e->data = mt_malloc(bytes ? bytes : 1);
  e->bytes = bytes;
  if (src) memcpy(e->data, src, bytes);
}

static void null_upload(void *dst, const void *host_src, size_t bytes) {
  if (bytes <= STORE_MAX_BYTES) keep(dst, host_src, bytes);
}

static void null_download(void *host_dst, const void *src, size_t bytes) {
  const entry *e = find(src, 0);
  size_t have = e ? (e->bytes < bytes ? e->bytes : bytes) : 0;
  if (have) memcpy(host_dst, e->data, have);
  memset((char *)host_dst + have, 0, bytes - have);
}

void mt_ops_null_reset(void) {
  for (size_t i = 0; i < g_store_cap; i++) free(g_store[i].data);
  free(g_store);
  g_store = NULL;
  g_store_cap = g_store_n = 0;
  g_next = g_base;
}

/* ------------------------------------------------------------------ */
/* ops: none of them computes                                          */

static void null_zero(float *x, size_t n) { (void)x, (void)n; }
static void null_copy(float *dst, const float *src, size_t n) { (void)dst, (void)src, (void)n; }
static void null_axpy(float *y, float a, const float *x, size_t n) {
  (void)y, (void)a, (void)x, (void)n;
}
static double null_sum(const float *x, size_t n) {
  (void)x, (void)n;
  return 0.0;
}
static void null_sync(void) {}
static void null_encoder_forward(float *out, const int *inp, const float *wte, const float *wpe,
                                 int B, int T, int C) {}
static void null_encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                                  int B, int T, int C) {}
static void null_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, int N, int C) {}
static void null_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                    const float *inp, const float *w, const float *mean,
                                    const float *rstd, int N, int C) {}
static void null_matmul_forward(float *out, const float *inp, const float *w, const float *bias,
                                int N, int C, int OC) {}
static void null_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                 const float *inp, const float *w, int N, int C, int OC) {}
static void null_encoder_vp_forward(float *out, const int *inp, const float *wte, int v0, int Vl,
                                    const float *wpe, int B, int T, int C) {}
static void null_encoder_vp_backward(float *dwte, float *dwpe, const float *dout, const int *inp,
                                     int v0, int Vl, int B, int T, int C) {}
static void null_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                                   int NH) {}
static void null_attention_backward(float *dqkv, float *datt, const float *dout, const float *qkv,
                                    const float *att, int B, int T, int C, int NH) {}
static void null_attn_forward(const mt_attn_block *a, float *out, float *lse, const float *q,
                              const float *k, const float *v) {}
static void null_attn_merge(const mt_attn_block *a, float *out, float *lse, const float *part,
                            const float *part_lse) {}
static void null_attn_backward(const mt_attn_block *a, float *dq, float *dk, float *dv,
                               const float *dout, const float *out, const float *lse,
                               const float *q, const float *k, const float *v) {}
static void null_copy_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                         size_t cols) {}
static void null_add_2d(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                        size_t cols) {}
static void null_gelu_forward(float *out, const float *inp, size_t n) {}
static void null_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {}
static void null_residual_forward(float *out, const float *a, const float *b, size_t n) {}
static void null_softmax_xent_forward(float *losses, float *probs, const float *logits,
                                      const int *targets, int N, int V, int Vp) {}
static void null_softmax_xent_backward(float *dlogits, const float *probs, const int *targets,
                                       float dloss, int N, int V, int Vp) {}
static void null_xent_vp_max(float *rowmax, const float *logits, int N, int Vl, int nvalid) {}
static void null_xent_vp_exp(double *stats, float *probs, const float *logits, const float *rowmax,
                             const int *targets, int v0, int N, int Vl, int nvalid) {}
static void null_xent_vp_finish(float *losses, float *probs, const double *stats,
                                const float *rowmax, int N, int Vl, int nvalid) {}
static void null_xent_vp_backward(float *dlogits, const float *probs, const int *targets, int v0,
                                  float dloss, int N, int Vl, int nvalid) {}
static void null_adamw_update(float *param, const float *grad, float *m, float *v, size_t n,
                              float lr, float beta1, float beta2, float eps, float weight_decay,
                              int t) {}

/* the router's choices, round-robin over the experts (the host reads them) */
static double g_skew; /* the routing's Zipf exponent; 0: round-robin */
static double *g_cdf;  /* its cumulative shares over g_cdf_E experts */
static int g_cdf_E;

void mt_ops_null_moe_skew(double skew) {
  g_skew = skew;
  g_cdf_E = 0; /* made again for the next router */
}

/* expert e with probability (e + 1)^-s / H: the first e whose cumulative
 * share exceeds u in [0, 1) */
static int zipf_expert(double u, int E) {
  if (g_cdf_E != E) {
    free(g_cdf);
    g_cdf = mt_malloc((size_t)E * sizeof(double));
    double h = 0.0, c = 0.0;
    for (int e = 0; e < E; e++) h += g_cdf[e] = pow(e + 1.0, -g_skew);
    for (int e = 0; e < E; e++) g_cdf[e] = c += g_cdf[e] / h;
    g_cdf[E - 1] = 1.0; /* (rounding) */
    g_cdf_E = E;
  }
  int lo = 0, hi = E - 1; /* the first e with u < cdf[e] */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (u < g_cdf[mid]) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

static void null_moe_router_forward(float *probs, float *lse, int *top_idx, float *top_w,
                                    const float *logits, const float *bias, int N, int E,
                                    int k) {
  size_t n = (size_t)N * (size_t)k;
  keep(top_idx, NULL, n * sizeof(int));
  int *choice = find(top_idx, 0)->data;
  if (g_skew <= 0.0) {
    for (size_t i = 0; i < n; i++) choice[i] = (int)(i % (size_t)E);
    return;
  }
  /* token t's j-th choice: the Zipf quantile of the golden-ratio sequence
   * at t k + j, moved on to the next expert the token has not chosen */
  for (size_t t = 0; t < (size_t)N; t++)
    for (int j = 0; j < k; j++) {
      double x = ((double)(t * (size_t)k + (size_t)j) + 0.5) * 0.6180339887498949;
      int e = zipf_expert(x - floor(x), E);
      for (int taken = 1; taken;) {
        taken = 0;
        for (int i = 0; i < j; i++) taken |= choice[t * (size_t)k + (size_t)i] == e;
        if (taken) e = (e + 1) % E;
      }
      choice[t * (size_t)k + (size_t)j] = e;
    }
}

static void null_moe_router_backward(float *dlogits, const float *probs, const float *lse,
                                     const int *top_idx, const float *top_w, const float *dtop_w,
                                     const float *aux_grad, int rows_per_seq, float z_grad, int N,
                                     int E, int k) {}
static void null_moe_prob_sums(float *sums, const float *probs, int N, int E, int rows_per_seq) {}
static void null_gather_rows(float *out, const float *inp, const int *idx, int n, int C) {}
static void null_moe_combine(float *out, const float *y, const int *slot, const float *w, int N,
                             int C, int k) {}
static void null_moe_combine_backward(float *dy, float *dw, const float *dout, const float *y,
                                      const int *slot, const float *w, int N, int C, int k) {}
static void null_moe_gather_sum(float *dx, const float *src, const int *slot, int N, int C, int k) {
}
static void null_grouped_matmul_forward(float *out, const float *inp, const float *w,
                                        const float *bias, const int *off, int G, int C, int OC) {}
static void null_grouped_matmul_backward(float *dinp, float *dw, float *dbias, const float *dout,
                                         const float *inp, const float *w, const int *off, int G,
                                         int C, int OC) {}
static double null_sumsq(const float *x, size_t n) {
  (void)x, (void)n;
  return 0.0;
}
static void null_scale(float *x, float s, size_t n) { (void)x, (void)s, (void)n; }
#define NULL_OP(member, optional) .member = null_##member,
static const mt_ops g_ops_null = {
    .name = "null",
    .loc = MT_LOC_DEVICE, /* not host memory: nothing may read it */
    MT_OPS_MEMBERS(NULL_OP)};
#undef NULL_OP

const mt_ops *mt_ops_null(void) { return &g_ops_null; }

/* ------------------------------------------------------------------ */
/* the bf16 ops: empty (nothing the host reads comes from them: the losses
 * are summed by mt_ops' sum, the norms by mt_ops' sumsq over fp32 grads) */

typedef mt_bf16 bf;
static void nb_matmul_forward(bf *out, const bf *inp, const bf *w, const bf *bias, int N, int C,
                              int OC) {}
static void nb_matmul_backward(bf *dinp, float *dw, float *dbias, const bf *dout, const bf *inp,
                               const bf *w, int N, int C, int OC) {}
static void nb_grouped_matmul_forward(bf *out, const bf *inp, const bf *w, const bf *bias,
                                      const int *off, int G, int C, int OC) {}
static void nb_grouped_matmul_backward(bf *dinp, float *dw, float *dbias, const bf *dout,
                                       const bf *inp, const bf *w, const int *off, int G, int C,
                                       int OC) {}
static void nb_gather_rows(bf *out, const bf *inp, const int *idx, int n, int C) {}
static void nb_moe_combine(bf *out, const bf *y, const int *slot, const float *w, int N, int C,
                           int k) {}
static void nb_moe_combine_backward(bf *dy, float *dw, const bf *dout, const bf *y,
                                    const int *slot, const float *w, int N, int C, int k) {}
static void nb_moe_gather_sum(bf *dx, const bf *src, const int *slot, int N, int C, int k) {}
static void nb_encoder_forward(bf *out, const int *inp, const bf *wte, const bf *wpe, int B, int T,
                               int C) {}
static void nb_encoder_backward(float *dwte, float *dwpe, const bf *dout, const int *inp, int B,
                                int T, int C) {}
static void nb_encoder_vp_forward(bf *out, const int *inp, const bf *wte, int v0, int Vl,
                                  const bf *wpe, int B, int T, int C) {}
static void nb_encoder_vp_backward(float *dwte, float *dwpe, const bf *dout, const int *inp,
                                   int v0, int Vl, int B, int T, int C) {}
static void nb_layernorm_forward(bf *out, float *mean, float *rstd, const bf *inp, const bf *w,
                                 const bf *b, int N, int C) {}
static void nb_layernorm_backward(bf *dinp, float *dw, float *db, const bf *dout, const bf *inp,
                                  const bf *w, const float *mean, const float *rstd, int N,
                                  int C) {}
static void nb_gelu_forward(bf *out, const bf *inp, size_t n) {}
static void nb_gelu_backward(bf *dinp, const bf *inp, const bf *dout, size_t n) {}
static void nb_residual_forward(bf *out, const bf *a, const bf *b, size_t n) {}
static void nb_attn_forward(const mt_attn_block *a, bf *out, float *lse, const bf *q, const bf *k,
                            const bf *v) {}
static void nb_attn_merge(const mt_attn_block *a, bf *out, float *lse, const bf *part,
                          const float *part_lse) {}
static void nb_attn_backward(const mt_attn_block *a, bf *dq, bf *dk, bf *dv, const bf *dout,
                             const bf *out, const float *lse, const bf *q, const bf *k,
                             const bf *v) {}
static void nb_softmax_xent_forward(float *losses, bf *probs, const bf *logits, const int *targets,
                                    int N, int V, int Vp) {}
static void nb_softmax_xent_backward(bf *dlogits, const bf *probs, const int *targets, float dloss,
                                     int N, int V, int Vp) {}
static void nb_xent_vp_max(float *rowmax, const bf *logits, int N, int Vl, int nvalid) {}
static void nb_xent_vp_exp(double *stats, const bf *logits, const float *rowmax,
                           const int *targets, int v0, int N, int Vl, int nvalid) {}
static void nb_xent_vp_finish(float *losses, bf *probs, const bf *logits, const double *stats,
                              const float *rowmax, int N, int Vl, int nvalid) {}
static void nb_xent_vp_backward(bf *dlogits, const bf *probs, const int *targets, int v0,
                                float dloss, int N, int Vl, int nvalid) {}
static void nb_adamw_update(float *param, bf *param_bf16, const float *grad, float *m, float *v,
                            size_t n, float lr, float beta1, float beta2, float eps,
                            float weight_decay, int t) {}
static void nb_zero(bf *x, size_t n) {}
static void nb_copy(bf *dst, const bf *src, size_t n) {}
static void nb_axpy(bf *y, float a, const bf *x, size_t n) {}
static void nb_scale(bf *x, float s, size_t n) {}
static double nb_sum(const bf *x, size_t n) { return 0.0; }
static double nb_sumsq(const bf *x, size_t n) { return 0.0; }
static void nb_copy_2d(bf *dst, size_t ld_dst, const bf *src, size_t ld_src, size_t rows,
                       size_t cols) {}
static void nb_add_2d(bf *dst, size_t ld_dst, const bf *src, size_t ld_src, size_t rows,
                      size_t cols) {}
static void nb_from_f32(bf *dst, const float *src, size_t n) {}
static void nb_to_f32(float *dst, const bf *src, size_t n) {}

static const mt_ops_bf16 g_ops_bf16_null = {
    .name = "null-bf16",
    .matmul_forward = nb_matmul_forward, .matmul_backward = nb_matmul_backward,
    .grouped_matmul_forward = nb_grouped_matmul_forward,
    .grouped_matmul_backward = nb_grouped_matmul_backward, .gather_rows = nb_gather_rows,
    .moe_combine = nb_moe_combine, .moe_combine_backward = nb_moe_combine_backward,
    .moe_gather_sum = nb_moe_gather_sum, .encoder_forward = nb_encoder_forward,
    .encoder_backward = nb_encoder_backward, .encoder_vp_forward = nb_encoder_vp_forward,
    .encoder_vp_backward = nb_encoder_vp_backward, .layernorm_forward = nb_layernorm_forward,
    .layernorm_backward = nb_layernorm_backward, .gelu_forward = nb_gelu_forward,
    .gelu_backward = nb_gelu_backward, .residual_forward = nb_residual_forward,
    .attn_forward = nb_attn_forward, .attn_merge = nb_attn_merge,
    .attn_backward = nb_attn_backward, .softmax_xent_forward = nb_softmax_xent_forward,
    .softmax_xent_backward = nb_softmax_xent_backward, .xent_vp_max = nb_xent_vp_max,
    .xent_vp_exp = nb_xent_vp_exp, .xent_vp_finish = nb_xent_vp_finish,
    .xent_vp_backward = nb_xent_vp_backward, .adamw_update = nb_adamw_update, .zero = nb_zero,
    .copy = nb_copy, .axpy = nb_axpy, .scale = nb_scale, .sum = nb_sum, .sumsq = nb_sumsq,
    .copy_2d = nb_copy_2d, .add_2d = nb_add_2d, .from_f32 = nb_from_f32, .to_f32 = nb_to_f32};

const mt_ops_bf16 *mt_ops_bf16_null(void) { return &g_ops_bf16_null; }
