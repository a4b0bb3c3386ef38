/* kernels: one op table for every compute op of the model and optimizer.
 * A backend (cpu/, cuda/, null/) fills an mt_ops; the model only ever calls through
 * it, so a new backend slots in without touching model code. Knows nothing
 * of MPI. All tensors are fp32, row-major, contiguous unless a stride is
 * given (under train.precision = bf16 the CUDA backend multiplies in bf16
 * with fp32 accumulation, but stores every tensor in fp32: see cuda/; the
 * CPU stores bf16 tensors and computes on them with mt_ops_bf16).
 * B = batch, T = sequence, C = channels, NH = heads,
 * OC = output channels, V = true vocab, Vp = padded vocab (Vp >= V).
 * Backward ops ACCUMULATE (+=) into parameter gradients and into input
 * gradients, so gradient accumulation over micro-batches is free. */
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "core/core.h"

/* Where a block pair of attention lives (see attn_forward in mt_ops).
 * Element (b, i, h, d) of a (B, rows, NH, hs) tensor sits at
 *     p[b * bs + i * rs + h * hs + d]
 * (strides in floats; head h's hs channels contiguous). In the fused qkv
 * buffer (B,T,3C) of a layer: q = qkv, k = qkv + C, v = qkv + 2C, each with
 * rs = 3C, bs = T*3C; out (B,T,C) has rs = C, bs = T*C. A block starting at
 * row r0 of such a buffer is the pointer moved by r0 * rs. The LSE of row
 * i, batch b, head h sits at lse[b * l_bs + h * l_hs + i] (a (B,NH,T)
 * buffer: l_hs = T, l_bs = NH*T; a block at row r0: lse + r0). dq, dk, dv
 * share the strides of q, k, v; dout those of out. Row i has global
 * position q_pos0 + i, key row j position k_pos0 + j. */
typedef struct mt_attn_block {
  int B, NH, hs;      /* batch, heads, head size */
  int Tq, Tk;         /* query rows, key (and value) rows */
  int q_pos0, k_pos0; /* global sequence position of query row 0 and key row 0 */
  int causal;         /* 1: a query sees the keys at positions <= its own */
  size_t q_bs, q_rs, k_bs, k_rs, v_bs, v_rs, o_bs, o_rs, l_bs, l_hs;
} mt_attn_block;

typedef struct mt_ops {
  const char *name;
  /* where this backend's tensors live (comm is told with every buffer) */
  mt_loc loc;

  /* ---- memory: every tensor buffer of the model, parallel and optimizer
   * comes from here, counted per category (zeroed, 64-byte aligned) ---- */
  void *(*alloc)(mt_mem_cat cat, size_t bytes);
  void (*free)(mt_mem_cat cat, void *p, size_t bytes);
  /* host <-> backend memory, bytes (tokens in, values out) */
  void (*upload)(void *dst, const void *host_src, size_t bytes);
  void (*download)(void *host_dst, const void *src, size_t bytes);

  /* ---- elementwise helpers on backend memory ---- */
  void (*zero)(float *x, size_t n);                        /* x = 0 */
  void (*copy)(float *dst, const float *src, size_t n);    /* dst = src (no overlap) */
  void (*axpy)(float *y, float a, const float *x, size_t n); /* y += a x */
  /* sum of x[0..n) in double, in index order (losses of a micro-batch) */
  double (*sum)(const float *x, size_t n);
  /* wait until every op queued so far has finished (timers and benchmarks;
   * a no-op where ops run synchronously, as on the CPU) */
  void (*sync)(void);

  /* out (B,T,C) = wte[inp] + wpe[t]; inp (B,T) token ids < V; wte (Vp,C), wpe (T_max,C) */
  void (*encoder_forward)(float *out, const int *inp, const float *wte, const float *wpe,
                          int B, int T, int C);
  void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int *inp,
                           int B, int T, int C);

  /* out (N,C) = layernorm(inp (N,C)) * w + b; saves mean (N) and rstd (N) */
  void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                            const float *w, const float *b, int N, int C);
  void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                             const float *inp, const float *w, const float *mean,
                             const float *rstd, int N, int C);

  /* out (N,OC) = inp (N,C) @ w^T + bias; w (OC,C); bias (OC) or NULL */
  void (*matmul_forward)(float *out, const float *inp, const float *w, const float *bias,
                         int N, int C, int OC);
  /* dinp += dout @ w, dw += dout^T @ inp, dbias += column sums of dout; any of
   * dinp, dw, dbias may be NULL (skipped; inp unused without dw, w without dinp) */
  void (*matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                          const float *inp, const float *w, int N, int C, int OC);

  /* Vocabulary-parallel embedding: this rank holds rows [v0, v0+Vl) of wte as
   * wte (Vl,C). out (B,T,C) = (v0 <= inp < v0+Vl ? wte[inp-v0] : 0) + wpe[t];
   * wpe may be NULL (then no positional term: one rank of the group adds it).
   * With v0 = 0, Vl = Vp and wpe set it equals encoder_forward bit for bit. */
  void (*encoder_vp_forward)(float *out, const int *inp, const float *wte, int v0, int Vl,
                             const float *wpe, int B, int T, int C);
  /* dwte[inp-v0] += dout for tokens in [v0, v0+Vl); dwpe[t] += dout unless
   * dwpe is NULL. */
  void (*encoder_vp_backward)(float *dwte, float *dwpe, const float *dout, const int *inp,
                              int v0, int Vl, int B, int T, int C);

  /* Reference causal self-attention, kept for tests and benchmarks (the
   * model uses the block ops below): qkv (B,T,3C) holds q|k|v, each (NH
   * heads of hs=C/NH); out (B,T,C); att (B,NH,T,T) saves the softmax
   * probabilities for backward (T x T memory). dqkv (B,T,3C) is
   * accumulated; datt is scratch of att's size. A backend may leave these
   * two NULL. */
  void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C,
                            int NH);
  void (*attention_backward)(float *dqkv, float *datt, const float *dout, const float *qkv,
                             const float *att, int B, int T, int C, int NH);

  /* Attention by blocks (FlashAttention-2): never a T x T matrix, only the
   * output and the per-row log-sum-exp (LSE) are kept. One call handles one
   * pair (query block, key block) of the layout mt_attn_block describes
   * (below): a block of Tq query rows at global positions q_pos0.., a block
   * of Tk key/value rows at k_pos0.., for B x NH heads of hs channels, with
   * scale 1/sqrt(hs) and, when causal, a key at position p visible to a
   * query at position >= p. Context parallelism calls it once per pair of
   * a rank's query chunks and the key chunks it holds or receives, and
   * merges the partial results exactly through their LSE.
   *
   * Forward: WRITES out (Tq rows, strides o_*) = softmax over the visible
   * keys of this block times v, and lse (strides l_*) = log of the sum of
   * exp(scale q.k) over those keys. A row that sees no key of the block
   * gets out = 0 and lse = -INFINITY. */
  void (*attn_forward)(const mt_attn_block *a, float *out, float *lse, const float *q,
                       const float *k, const float *v);
  /* Exact merge of two partial results over disjoint key sets: (out, lse)
   * and (part, part_lse), both laid out as out and lse (o_*, l_* strides),
   * become the result over the union: lse' = log(e^lse + e^part_lse),
   * out' = out e^(lse - lse') + part e^(part_lse - lse'). WRITES out, lse;
   * a -INFINITY side contributes nothing. */
  void (*attn_merge)(const mt_attn_block *a, float *out, float *lse, const float *part,
                     const float *part_lse);
  /* Backward of the block pair from the FINAL out and lse (after every
   * merge) and dout (strides o_*): recomputes P = exp(scale q.k - lse) for
   * the visible keys and ACCUMULATES dq (strides q_*), dk (k_*), dv (v_*);
   * D = rowsum(dout * out) is formed here. Summed over every block pair of
   * a query row, it gives the exact gradient of the whole attention. */
  void (*attn_backward)(const mt_attn_block *a, float *dq, float *dk, float *dv,
                        const float *dout, const float *out, const float *lse, const float *q,
                        const float *k, const float *v);

  /* Strided row copies (packing for communication): dst (rows, cols) with
   * leading dimension ld_dst = src (rows, cols) with ld_src; add_2d: +=. */
  void (*copy_2d)(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                  size_t cols);
  void (*add_2d)(float *dst, size_t ld_dst, const float *src, size_t ld_src, size_t rows,
                 size_t cols);

  /* GELU, tanh approximation, elementwise over n */
  void (*gelu_forward)(float *out, const float *inp, size_t n);
  void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);

  /* out = a + b, elementwise */
  void (*residual_forward)(float *out, const float *a, const float *b, size_t n);

  /* Cross-entropy over the true vocab V of logits (N,Vp); columns V..Vp-1 are
   * padding and never receive probability. Writes losses (N) per position.
   * In place: probs may alias logits (it is overwritten by softmax). */
  void (*softmax_xent_forward)(float *losses, float *probs, const float *logits,
                               const int *targets, int N, int V, int Vp);
  /* dlogits (N,Vp) = (probs - onehot) * dloss for columns < V, 0 for padding.
   * dloss is the same scale for every position (e.g. 1/(global tokens)).
   * dlogits may alias probs. */
  void (*softmax_xent_backward)(float *dlogits, const float *probs, const int *targets,
                                float dloss, int N, int V, int Vp);

  /* Vocabulary-parallel cross-entropy, in pieces between which the caller
   * combines per-row statistics over the ranks that share the vocabulary
   * (max, then sums); the full logits are never gathered. This rank holds
   * columns [v0, v0+Vl) of the padded vocabulary as logits (N,Vl); the first
   * nvalid of them (global index < V) are real, the rest padding, which never
   * gets probability. With v0 = 0, Vl = Vp, nvalid = V (one rank) the pieces
   * give softmax_xent_forward/backward's results bit for bit.
   * 1. rowmax (N) = max over the real local columns (-inf when none). */
  void (*xent_vp_max)(float *rowmax, const float *logits, int N, int Vl, int nvalid);
  /* 2. With M = the global row max: probs = exp(logits - M) on real columns,
   * 0 on padding (probs may alias logits); stats (N,2): [n][0] = sum of those
   * exps (double), [n][1] = the target's logit if this rank holds the target
   * column, else 0. */
  void (*xent_vp_exp)(double *stats, float *probs, const float *logits, const float *rowmax,
                      const int *targets, int v0, int N, int Vl, int nvalid);
  /* 3. With stats summed over the ranks: probs /= sum; losses (N) =
   * log(sum) + M - target logit. */
  void (*xent_vp_finish)(float *losses, float *probs, const double *stats, const float *rowmax,
                         int N, int Vl, int nvalid);
  /* dlogits (N,Vl) = (probs - onehot(target - v0)) * dloss on real columns, 0
   * on padding; WRITES (=), may alias probs. */
  void (*xent_vp_backward)(float *dlogits, const float *probs, const int *targets, int v0,
                           float dloss, int N, int Vl, int nvalid);

  /* AdamW on n contiguous elements; t = step count after this update (>= 1) */
  void (*adamw_update)(float *param, const float *grad, float *m, float *v, size_t n,
                       float lr, float beta1, float beta2, float eps, float weight_decay,
                       int t);

  /* ---- Mixture-of-Experts: router, token gathers, combine, grouped GEMM.
   * Index arrays (idx, slot, top_idx) live in backend memory; the grouped
   * GEMM's group offsets in host memory (they decide the launches). ---- */
  /* probs (N,E) = softmax of each row of logits (N,E), lse (N) its
   * log-sum-exp; top_idx (N,k) the k experts of the largest probs[e] +
   * bias[e], largest first (ties: the lower index first); top_w (N,k) their
   * probabilities (without the bias) divided by the sum of the k. bias (E)
   * or NULL (zeros): the load-balancing bias of aux-loss-free routing, which
   * moves the choice only (DeepSeek-V3). */
  void (*moe_router_forward)(float *probs, float *lse, int *top_idx, float *top_w,
                             const float *logits, const float *bias, int N, int E, int k);
  /* dlogits (N,E) WRITES the gradient of the logits from: dtop_w (N,k), the
   * loss's gradient with respect to top_w; aux_grad (N/rows_per_seq, E) or
   * NULL, the gradient with respect to probs of row n, aux_grad[n /
   * rows_per_seq] (the load-balancing loss, per sequence); and the z-loss,
   * whose gradient with respect to logits[n][e] is z_grad * lse[n] *
   * probs[n][e]. */
  void (*moe_router_backward)(float *dlogits, const float *probs, const float *lse,
                              const int *top_idx, const float *top_w, const float *dtop_w,
                              const float *aux_grad, int rows_per_seq, float z_grad, int N, int E,
                              int k);
  /* sums (N/rows_per_seq, E) WRITES: row s = the sum of probs rows
   * [s*rows_per_seq, (s+1)*rows_per_seq), in row order */
  void (*moe_prob_sums)(float *sums, const float *probs, int N, int E, int rows_per_seq);
  /* out (n,C) WRITES: row i = inp row idx[i] */
  void (*gather_rows)(float *out, const float *inp, const int *idx, int n, int C);
  /* out (N,C) WRITES: row n = sum over j = 0..k-1 with slot[n*k+j] >= 0 of
   * w[n*k+j] * y[slot[n*k+j]], in j order (0 when every slot is < 0) */
  void (*moe_combine)(float *out, const float *y, const int *slot, const float *w, int N, int C,
                      int k);
  /* moe_combine's backward: dy row slot[n*k+j] = w[n*k+j] * dout row n
   * (WRITES the rows named by slots >= 0); dw (N,k) WRITES dot(dout row n,
   * y row slot[n*k+j]), 0 where slot < 0 */
  void (*moe_combine_backward)(float *dy, float *dw, const float *dout, const float *y,
                               const int *slot, const float *w, int N, int C, int k);
  /* dx (N,C) += the rows src[slot[n*k+j]] of slots >= 0, in j order */
  void (*moe_gather_sum)(float *dx, const float *src, const int *slot, int N, int C, int k);
  /* Grouped GEMM: group g is rows [off[g], off[g+1]) of inp (rows, C); w
   * (G,OC,C), bias (G,OC) or NULL; out rows of group g = inp rows @ w[g]^T +
   * bias[g] (WRITES). One sgemm per non-empty group; groups run on
   * separate threads, each group's result independent of the thread count
   * when there are at least as many non-empty groups as threads. */
  void (*grouped_matmul_forward)(float *out, const float *inp, const float *w, const float *bias,
                                 const int *off, int G, int C, int OC);
  /* per group, as matmul_backward: dinp += dout @ w[g], dw[g] += dout^T @
   * inp, dbias[g] += column sums of dout; any of dinp, dw, dbias NULL: skipped */
  void (*grouped_matmul_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                                  const float *inp, const float *w, const int *off, int G, int C,
                                  int OC);

  /* sum of squares of x[0..n), accumulated in double, deterministic order */
  double (*sumsq)(const float *x, size_t n);
  /* x *= s */
  void (*scale)(float *x, float s, size_t n);
} mt_ops;

/* Every member of mt_ops after `loc`, in its order, as X(member, optional):
 * optional marks those a backend may leave NULL (the T x T reference
 * attention). ops_table.c checks a table against it; a backend may build
 * its table from it. */
#define MT_OPS_MEMBERS(X)                                                                  \
  X(alloc, 0) X(free, 0) X(upload, 0) X(download, 0) X(zero, 0) X(copy, 0) X(axpy, 0)      \
  X(sum, 0) X(sync, 0) X(encoder_forward, 0) X(encoder_backward, 0)                      \
  X(layernorm_forward, 0) X(layernorm_backward, 0) X(matmul_forward, 0)                  \
  X(matmul_backward, 0) X(encoder_vp_forward, 0) X(encoder_vp_backward, 0)               \
  X(attention_forward, 1) X(attention_backward, 1) X(attn_forward, 0) X(attn_merge, 0)   \
  X(attn_backward, 0) X(copy_2d, 0) X(add_2d, 0) X(gelu_forward, 0) X(gelu_backward, 0)  \
  X(residual_forward, 0) X(softmax_xent_forward, 0) X(softmax_xent_backward, 0)          \
  X(xent_vp_max, 0) X(xent_vp_exp, 0) X(xent_vp_finish, 0) X(xent_vp_backward, 0)        \
  X(adamw_update, 0) X(moe_router_forward, 0) X(moe_router_backward, 0)                 \
  X(moe_prob_sums, 0) X(gather_rows, 0) X(moe_combine, 0) X(moe_combine_backward, 0)     \
  X(moe_gather_sum, 0) X(grouped_matmul_forward, 0) X(grouped_matmul_backward, 0)        \
  X(sumsq, 0) X(scale, 0)


const mt_ops *mt_ops_cpu(void);
/* The CPU table with each compute op's wall span on the timeline under its
 * member name (ops_traced.c; the device's table when metrics.trace = true
 * on the CPU): real and emulated traces compare op by op. */
const mt_ops *mt_ops_cpu_traced(void);
/* The null backend (null/): every op does nothing, alloc counts bytes per
 * category and hands out addresses with no memory behind them; the values
 * the host reads back are synthetic (losses and norms 0, a balanced
 * routing). The real model, dp engine and pipeline run under it to be
 * counted (the plan). mt_ops_null_reset forgets what the host uploaded and
 * reuses the addresses (between two counted ranks). */
const mt_ops *mt_ops_null(void);
void mt_ops_null_reset(void);
/* The virtual device's table (null/ops_virtual.c): the null backend whose
 * every op moves the rank's virtual clock (core's mt_vclock) on by its
 * price from mt_vclock_price(); start the clock before the first op. */
const mt_ops *mt_ops_virtual(void);
/* The compute members of ops that are still base's (a priced table built
 * over the null one: an op the cost model has no price for), as
 * "a, b, ..." in names; returns how many. alloc, free, upload, download
 * and sync are not priced. MT_TEST_VIRTUAL_UNPRICED=member (tests only)
 * leaves that member of mt_ops_virtual unpriced. */
int mt_ops_unpriced(const mt_ops *ops, const mt_ops *base, char *names, size_t len);
/* The synthetic routing of the null and virtual tables: skew 0 is the
 * balanced round-robin; skew s > 0 draws each token's experts from a Zipf
 * law over the experts (expert e's share proportional to 1 / (e + 1)^s,
 * deterministic: a low-discrepancy sequence over the tokens, a token's k
 * experts distinct). virtual.moe_skew sets it for a virtual run. */
void mt_ops_null_moe_skew(double skew);

/* The members of ops that are NULL although every backend must fill them
 * (only the reference attention_forward/backward may be NULL): their names,
 * ", "-separated, in names (cut at len bytes; names may be NULL); returns
 * how many. 0 for a complete table. */
int mt_ops_missing(const mt_ops *ops, char *names, size_t len);

/* ------------------------------------------------------------------ */
/* bf16 compute on the CPU (mixed precision; cpu/ files ending _bf16.c) */
/*
 * bf16 = the upper 16 bits of an IEEE fp32 (sign, 8 exponent bits, 7
 * fraction bits: 8 significant bits, unit roundoff u = 2^-8 under
 * round-to-nearest-even). Tensors stored in bf16 are typed mt_bf16; every
 * op computes in fp32 and rounds once per stored element. The dtype of
 * each tensor role (weights' compute copy, activations, gradients, master)
 * is decided once by the caller; mt_ops_bf16 gives the ops whose operands
 * are bf16, with the dtype of every argument in its C type:
 *   - weights' compute copy and activations: const mt_bf16 *;
 *   - LayerNorm mean/rstd, attention LSE, losses, cross-entropy row
 *     statistics: float / double, as in mt_ops;
 *   - weight gradients (dw, db, dwte, dwpe): float, ACCUMULATED in fp32;
 *   - input gradients (dinp, dq, dk, dv): mt_bf16, ACCUMULATED as
 *     round(float(dinp) + fp32 sum of this call), one rounding per call;
 *   - the optimizer: fp32 master, moments and gradients, bf16 copy refreshed.
 * Shapes, layouts, aliasing and the +=/= rules are those of the same
 * member of mt_ops unless a comment says otherwise.
 *
 * Determinism: for a fixed thread count every op gives the same bits on
 * every run. Matmuls take the path chosen once per process (see
 * mt_bf16_gemm_path); the elementwise ops and attention give the same bits
 * at any thread count. */

/* the element types (mt_dtype, mt_dtype_bytes) and the scalar conversions mt_bf16_from_f32 / mt_bf16_to_f32: core.h */
/* n elements, vectorised, split over the threads (no overlap) */
void mt_bf16_from_f32_n(mt_bf16 *dst, const float *src, size_t n);
void mt_bf16_to_f32_n(float *dst, const mt_bf16 *src, size_t n);

/* How the bf16 matmuls run in this process, decided at the first call:
 *   "onednn"  oneDNN matmul, bf16 operands, fp32 accumulation (built with
 *             oneDNN, and the CPU has AMX-BF16, or AVX512-BF16 whose
 *             vdpbf16ps runs at 1.5x the fp32 FMA flops or more, measured
 *             at the first call: AMD Zen 4, 2.0x; or MT_BF16_GEMM=onednn);
 *   "sgemm"   operands converted to fp32 in blocks, OpenBLAS sgemm, fp32
 *             results rounded once (every other CPU: on an AVX512-BF16
 *             Xeon without AMX, vdpbf16ps ran at 1.0x the FMA flops and
 *             oneDNN's bf16 matmul measured 0.55-0.7x of fp32 sgemm per
 *             core, this path 0.85-0.9x at 1 thread; see gemm_bf16.c).
 * The environment's MT_BF16_GEMM=auto|onednn|sgemm overrides (onednn in a
 * build without it falls back to sgemm). */
const char *mt_bf16_gemm_path(void);
/* One line for the run's start: the path and why (no bf16 instructions,
 * bf16 instructions without AMX, oneDNN absent from the build, ...). */
const char *mt_bf16_gemm_note(void);
/* 1 when the CPU has AVX512-BF16, 2 when it also has AMX-BF16 usable by
 * this process, 0 otherwise */
int mt_cpu_bf16_level(void);
/* The zmm fp32 FMA and vdpbf16ps peaks of one core in GFLOP/s (the best of
 * three runs of iters iterations each, this thread's CPU time); 0 where the
 * CPU lacks the instruction. */
void mt_cpu_bf16_peaks(double *fma, double *dp, long iters);
/* Force a path: "onednn" or "sgemm", or "auto" for the process's default
 * (tests and benchmarks; call outside any op). 0, or -1 when name is none
 * of these or oneDNN is not in this build (then nothing changes). */
int mt_bf16_gemm_select(const char *name);

typedef struct mt_ops_bf16 {
  const char *name;

  /* ---- matmuls: bf16 operands, fp32 accumulation ---- */
  /* out (N,OC) = round(inp (N,C) @ w^T + bias); w (OC,C); bias (OC) or NULL */
  void (*matmul_forward)(mt_bf16 *out, const mt_bf16 *inp, const mt_bf16 *w,
                         const mt_bf16 *bias, int N, int C, int OC);
  /* dinp = round(dinp + dout @ w); dw += dout^T @ inp (fp32); dbias += column
   * sums of dout (fp32); any of dinp, dw, dbias may be NULL (skipped) */
  void (*matmul_backward)(mt_bf16 *dinp, float *dw, float *dbias, const mt_bf16 *dout,
                          const mt_bf16 *inp, const mt_bf16 *w, int N, int C, int OC);
  /* grouped GEMM (experts), per group as above; off in host memory */
  void (*grouped_matmul_forward)(mt_bf16 *out, const mt_bf16 *inp, const mt_bf16 *w,
                                 const mt_bf16 *bias, const int *off, int G, int C, int OC);
  void (*grouped_matmul_backward)(mt_bf16 *dinp, float *dw, float *dbias, const mt_bf16 *dout,
                                  const mt_bf16 *inp, const mt_bf16 *w, const int *off, int G,
                                  int C, int OC);

  /* MoE token movement on bf16 rows (the router stays fp32 in mt_ops); as
   * mt_ops: gather_rows and moe_combine WRITE (combine sums w y in fp32, j
   * order, then rounds), moe_combine_backward WRITES dy rows = round(w dout)
   * and dw (N,k) fp32 dots, moe_gather_sum dx = round(dx + the rows) */
  void (*gather_rows)(mt_bf16 *out, const mt_bf16 *inp, const int *idx, int n, int C);
  void (*moe_combine)(mt_bf16 *out, const mt_bf16 *y, const int *slot, const float *w, int N,
                      int C, int k);
  void (*moe_combine_backward)(mt_bf16 *dy, float *dw, const mt_bf16 *dout, const mt_bf16 *y,
                               const int *slot, const float *w, int N, int C, int k);
  void (*moe_gather_sum)(mt_bf16 *dx, const mt_bf16 *src, const int *slot, int N, int C, int k);

  /* ---- embedding, layernorm, gelu, residual ---- */
  void (*encoder_forward)(mt_bf16 *out, const int *inp, const mt_bf16 *wte, const mt_bf16 *wpe,
                          int B, int T, int C);
  void (*encoder_backward)(float *dwte, float *dwpe, const mt_bf16 *dout, const int *inp, int B,
                           int T, int C);
  void (*encoder_vp_forward)(mt_bf16 *out, const int *inp, const mt_bf16 *wte, int v0, int Vl,
                             const mt_bf16 *wpe, int B, int T, int C);
  void (*encoder_vp_backward)(float *dwte, float *dwpe, const mt_bf16 *dout, const int *inp,
                              int v0, int Vl, int B, int T, int C);
  /* mean, rstd (N) in fp32 */
  void (*layernorm_forward)(mt_bf16 *out, float *mean, float *rstd, const mt_bf16 *inp,
                            const mt_bf16 *w, const mt_bf16 *b, int N, int C);
  void (*layernorm_backward)(mt_bf16 *dinp, float *dw, float *db, const mt_bf16 *dout,
                             const mt_bf16 *inp, const mt_bf16 *w, const float *mean,
                             const float *rstd, int N, int C);
  void (*gelu_forward)(mt_bf16 *out, const mt_bf16 *inp, size_t n);
  void (*gelu_backward)(mt_bf16 *dinp, const mt_bf16 *inp, const mt_bf16 *dout, size_t n);
  void (*residual_forward)(mt_bf16 *out, const mt_bf16 *a, const mt_bf16 *b, size_t n);

  /* ---- attention by blocks: bf16 q, k, v, out, dout, dq, dk, dv; the
   * LSE in fp32 (strides of mt_attn_block, in elements) ---- */
  void (*attn_forward)(const mt_attn_block *a, mt_bf16 *out, float *lse, const mt_bf16 *q,
                       const mt_bf16 *k, const mt_bf16 *v);
  void (*attn_merge)(const mt_attn_block *a, mt_bf16 *out, float *lse, const mt_bf16 *part,
                     const float *part_lse);
  void (*attn_backward)(const mt_attn_block *a, mt_bf16 *dq, mt_bf16 *dk, mt_bf16 *dv,
                        const mt_bf16 *dout, const mt_bf16 *out, const float *lse,
                        const mt_bf16 *q, const mt_bf16 *k, const mt_bf16 *v);

  /* ---- cross-entropy on bf16 logits, fp32 math, fp32 losses ---- */
  void (*softmax_xent_forward)(float *losses, mt_bf16 *probs, const mt_bf16 *logits,
                               const int *targets, int N, int V, int Vp);
  void (*softmax_xent_backward)(mt_bf16 *dlogits, const mt_bf16 *probs, const int *targets,
                                float dloss, int N, int V, int Vp);
  /* vocabulary-parallel pieces. Unlike mt_ops, xent_vp_exp does not write
   * probabilities (it only sums), and xent_vp_finish computes them from the
   * logits (probs may alias logits): one rounding per probability. With v0
   * = 0, Vl = Vp, nvalid = V they give softmax_xent_forward's bits. */
  void (*xent_vp_max)(float *rowmax, const mt_bf16 *logits, int N, int Vl, int nvalid);
  void (*xent_vp_exp)(double *stats, const mt_bf16 *logits, const float *rowmax,
                      const int *targets, int v0, int N, int Vl, int nvalid);
  void (*xent_vp_finish)(float *losses, mt_bf16 *probs, const mt_bf16 *logits,
                         const double *stats, const float *rowmax, int N, int Vl, int nvalid);
  void (*xent_vp_backward)(mt_bf16 *dlogits, const mt_bf16 *probs, const int *targets, int v0,
                           float dloss, int N, int Vl, int nvalid);

  /* ---- optimizer: AdamW on the fp32 master (param, m, v, grad fp32, the
   * same bits as mt_ops' adamw_update) and param_bf16 = round(param) in
   * the same pass (the compute copy; NULL: not refreshed) ---- */
  void (*adamw_update)(float *param, mt_bf16 *param_bf16, const float *grad, float *m, float *v,
                       size_t n, float lr, float beta1, float beta2, float eps,
                       float weight_decay, int t);

  /* ---- helpers on bf16 tensors (fp32 math, one rounding) ---- */
  void (*zero)(mt_bf16 *x, size_t n);
  void (*copy)(mt_bf16 *dst, const mt_bf16 *src, size_t n);
  void (*axpy)(mt_bf16 *y, float a, const mt_bf16 *x, size_t n); /* y = round(y + a x) */
  void (*scale)(mt_bf16 *x, float s, size_t n);                  /* x = round(s x) */
  double (*sum)(const mt_bf16 *x, size_t n);   /* in index order, double */
  double (*sumsq)(const mt_bf16 *x, size_t n); /* mt_ops' chunking, double */
  void (*copy_2d)(mt_bf16 *dst, size_t ld_dst, const mt_bf16 *src, size_t ld_src, size_t rows,
                  size_t cols);
  void (*add_2d)(mt_bf16 *dst, size_t ld_dst, const mt_bf16 *src, size_t ld_src, size_t rows,
                 size_t cols);
  /* casts between the dtypes (comm staging, master -> compute copy) */
  void (*from_f32)(mt_bf16 *dst, const float *src, size_t n);
  void (*to_f32)(float *dst, const mt_bf16 *src, size_t n);
} mt_ops_bf16;

/* Every member of mt_ops_bf16 after `name`, in its order (ops_table.c
 * checks the list against the struct). */
#define MT_OPS_BF16_MEMBERS(X)                                                             \
  X(matmul_forward) X(matmul_backward) X(grouped_matmul_forward)                           \
  X(grouped_matmul_backward) X(gather_rows) X(moe_combine) X(moe_combine_backward)         \
  X(moe_gather_sum) X(encoder_forward) X(encoder_backward) X(encoder_vp_forward)           \
  X(encoder_vp_backward) X(layernorm_forward) X(layernorm_backward) X(gelu_forward)        \
  X(gelu_backward) X(residual_forward) X(attn_forward) X(attn_merge) X(attn_backward)      \
  X(softmax_xent_forward) X(softmax_xent_backward) X(xent_vp_max) X(xent_vp_exp)           \
  X(xent_vp_finish) X(xent_vp_backward) X(adamw_update) X(zero) X(copy) X(axpy) X(scale)   \
  X(sum) X(sumsq) X(copy_2d) X(add_2d) X(from_f32) X(to_f32)

/* The members of ops that are NULL, ", "-separated in names (cut at len
 * bytes; names may be NULL); returns how many. */
int mt_ops_bf16_missing(const mt_ops_bf16 *ops, char *names, size_t len);

/* the CPU's bf16 op table (every member filled) */
const mt_ops_bf16 *mt_ops_bf16_cpu(void);
/* The null backend's (see mt_ops_null): every op empty, for the plan. */
const mt_ops_bf16 *mt_ops_bf16_null(void);
/* The virtual device's (mt_ops_virtual): each op priced as its fp32 form
 * at the price's act_bytes, every member filled. */
const mt_ops_bf16 *mt_ops_bf16_virtual(void);
/* The bf16 table that computes on ops' tensors: the CPU's for mt_ops_cpu,
 * the null one for mt_ops_null, the virtual one for mt_ops_virtual, the
 * CUDA backend's for mt_ops_cuda (timed or not), NULL for any other. */
const mt_ops_bf16 *mt_ops_bf16_of(const mt_ops *ops);

/* ------------------------------------------------------------------ */
/* devices: which backend a rank computes on                          */

/* (mt_device_kind and mt_precision, train.device's and train.precision's
 * enums, are core.h's: the configuration produces them.) */

/* train.device resolved (pure; device.c): want (auto: cuda when cuda_built
 * and n_visible > 0, else cpu) against what this process has. no_gpu_why
 * says why n_visible is 0 (e.g. "no CUDA-capable device is detected").
 * Returns the device kind (never MT_DEVICE_AUTO), or -1 with one line in
 * msg naming the key, the value and the reason. train.precision is the
 * configuration's (mt_config_check refuses fp16): bf16 storage and the bf16
 * ops of mt_ops_bf16, on the CPU, on CUDA and on the virtual device alike. */
int mt_device_resolve(mt_device_kind want, int cuda_built, int n_visible, const char *no_gpu_why,
                      char *msg, size_t len);

/* The dtype of every role of the training state, decided once per run
 * (mt_dtypes_resolve, called by the layout: plan/layout.c) and handed to
 * the model and the dp engine, which only read it:
 *   master       fp32 weights and AdamW moments (what checkpoints hold);
 *   weights      the copy the forward and backward read (bf16: refreshed
 *                from the master by every AdamW update);
 *   acts         activations saved for backward and their gradients
 *                (LayerNorm statistics, attention's LSE, the softmax of the
 *                cross-entropy's statistics and the losses stay fp32);
 *   msgs         activations and their gradients sent between ranks (tp,
 *                sp, cp, pp, ep);
 *   grads        weight gradients as they accumulate (train.grad_dtype);
 *   grad_reduce  their reduction over dp x cp (parallel.grad_reduce_dtype). */
typedef struct {
  mt_dtype master, weights, acts, msgs, grads, grad_reduce;
} mt_dtypes;

/* The roles for precision prec, gradients in grads and reduced in
 * grad_reduce (MT_DT_F32 | MT_DT_BF16), the same on every device: fp32,
 * every role fp32; bf16, the weights' copy, activations and messages bf16
 * (the CPU's, the CUDA backend's and the virtual device's mt_ops_bf16).
 * The combinations that cannot run (bf16 gradients or a bf16 reduction
 * under fp32 precision; bf16 gradients reduced in fp32: they are reduced
 * where they are, in bf16) are mt_config_check's to refuse. */
void mt_dtypes_resolve(mt_precision prec, mt_dtype grads, mt_dtype grad_reduce, mt_dtypes *out);

/* The GPU of one rank: an index among the n_visible GPUs it sees
 * (CUDA_VISIBLE_DEVICES applied by the runtime), from its rank among the
 * ranks of its node. One GPU per rank while there are enough (Slurm's
 * --gpus-per-task=1 leaves each rank one visible GPU: index 0); with more
 * ranks than GPUs, ranks share them round-robin. *shared (may be NULL) is
 * a guess from the counts alone: whether ranks really share a GPU is
 * decided by comparing the GPUs' UUIDs (lib/train/device.c), since every
 * rank of --gpus-per-task=1 sees index 0 of a GPU of its own. -1 when
 * n_visible < 1. */
int mt_device_for_local_rank(int local_rank, int local_size, int n_visible, int *shared);

/* The largest attention head size (channels) the CUDA kernels take. */
#define MT_CUDA_MAX_HEAD_SIZE 256

/* The CUDA backend's environment variables, checked (pure but for
 * getenv): MT_CUDA_BF16_GEMM = convert | fast, MT_CUDA_SCRATCH_MB = a
 * whole number of MiB in 1 .. 1048575, MT_CUDA_OP_TIMES = 0 | 1,
 * MT_COMM_HOST_WAIT = 0 | 1 (unset or empty: the default). 0, or -1 with
 * one line in msg naming the variable, its value and what it takes. */
int mt_device_env_check(char *msg, size_t len);

/* ------------------------------------------------------------------ */
/* the CUDA backend (the .cu files in cuda/; cuda_none.c without CUDA) */

/* 1 when this build has the CUDA backend */
int mt_cuda_built(void);
/* GPUs this process sees; 0 with the reason in why (no driver, no device,
 * CUDA_VISIBLE_DEVICES empty, not built with CUDA). */
int mt_cuda_device_count(char *why, size_t why_len);
/* Bind this process to visible GPU `device` and set the backend up for
 * prec: a compute stream, cuBLASLt and its workspace, the scratch the
 * kernels use. 0, or -1 with e set. */
int mt_cuda_init(int device, mt_precision prec, mt_err *e);
void mt_cuda_shutdown(void);
/* the op table (after mt_cuda_init; NULL before, or without CUDA) */
const mt_ops *mt_ops_cuda(void);
/* The bf16 op table (kernels.h's mt_ops_bf16: bf16 tensors on the GPU, fp32
 * math; every member filled) on the same GPU, stream and scratch, after
 * mt_cuda_init at either precision; NULL before, or without CUDA. */
const mt_ops_bf16 *mt_ops_bf16_cuda(void);

typedef struct {
  int device;              /* index among the visible GPUs */
  char name[256];          /* e.g. "NVIDIA H100 80GB HBM3" */
  char uuid[48];           /* "GPU-xxxxxxxx-..." (distinct GPUs have distinct ids) */
  char pci_bus_id[32];
  int sm_major, sm_minor, sm_count;
  size_t total_bytes;      /* device memory */
  size_t free_bytes;       /* free now (cudaMemGetInfo) */
  size_t workspace_bytes;  /* the backend's own scratch, outside the mt_mem categories */
  size_t peak_bytes;       /* most device memory held by mt_ops allocations at once */
  mt_precision prec;
  const char *gemm_path;   /* "fp32", "bf16" (operands converted) or "bf16-fast" */
} mt_cuda_info;
/* the bound GPU; 0, or -1 before mt_cuda_init */
int mt_cuda_get_info(mt_cuda_info *info);
/* GPU time per op of the table since the backend started, when the
 * environment has MT_CUDA_OP_TIMES=1 (two events around each op; off
 * otherwise): up to max entries, the ops that ran; returns their number. */
typedef struct {
  const char *op;  /* the op table's member name, e.g. "attention_backward" */
  double seconds;  /* GPU time */
  long calls;
} mt_cuda_op_time;
int mt_cuda_op_times(mt_cuda_op_time *out, int max);
/* the compute stream (a cudaStream_t) every op is queued on */
void *mt_cuda_stream(void);
/* page-locked host memory (fast copies, checkpoint snapshots); plain
 * malloc'ed memory when the backend is not up */
void *mt_cuda_host_alloc(size_t bytes);
void mt_cuda_host_free(void *p);

/* Set the number of compute threads for OpenMP loops and BLAS (<=0: leave). */
void mt_kernels_set_threads(int n);
int mt_kernels_threads(void);
/* The CPUs this rank's compute threads may run on, for the placement check
 * (core's mt_affinity_check): its affinity mask, or with OpenMP binding on
 * (OMP_PROC_BIND, OMP_PLACES) the union of OpenMP's places, since the
 * runtime has then bound the calling thread to one place. 0 when known. */
int mt_kernels_cpu_mask(mt_cpu_mask *m);
/* the BLAS library's name for the kernels it selected (e.g. "Haswell") */
const char *mt_kernels_blas_core(void);

/* Best sgemm GFLOP/s for n x n x n on this rank's threads over at least
 * min_seconds (the CPU "peak" when a hardware profile gives none). */
double mt_cpu_sgemm_gflops(int n, double min_seconds);

#endif
