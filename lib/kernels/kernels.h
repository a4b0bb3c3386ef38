/* kernels: one op table for every compute op of the model and optimizer.
 * A backend (cpu/, cuda/, null/) fills an mt_ops; the model only ever calls
 * through it, so a new backend slots in without touching model code. Knows
 * nothing of MPI.
 *
 * The element type travels with the data: every compute op takes the
 * storage type t (core.h's mt_dtype: MT_DT_F32 or MT_DT_BF16) of its
 * operands declared `void *` (the weights' compute copy, activations and
 * their gradients); a backend writes each op once over the storage type
 * and computes in fp32 whatever t is, rounding each stored bf16 value
 * once. Operands declared float or double are fp32/fp64 whatever t is:
 * weight gradients (accumulated in fp32), LayerNorm statistics, the
 * attention's log-sum-exp, losses and the cross-entropy's row statistics,
 * the optimizer's master weights and moments, the MoE router.
 *
 * Tensors are row-major and contiguous unless a stride is given.
 * B = batch, T = sequence, C = channels, NH = heads, OC = output channels,
 * V = true vocab, Vp = padded vocab (Vp >= V).
 * Backward ops ACCUMULATE (+=) into parameter gradients and into input
 * gradients (bf16: dinp = round(dinp + this call's fp32 sum), one rounding
 * per call), so gradient accumulation over micro-batches is free. An op
 * named <op>_first is <op> with its input gradient WRITTEN: dinp = 0 + this
 * call's sum (the same bits as zero, then <op>; GEMMs with beta 0), for the
 * first contribution to a buffer, without a zero pass before it; its
 * parameter gradients still accumulate.
 *
 * Determinism: for a fixed thread count every op gives the same bits on
 * every run; most give the same bits at any thread count (the CPU's notes
 * say which do not).
 *
 * Adding an op: its line in MT_OPS_TYPED (or MT_OPS_FIXED) below, its body
 * once in each backend (cpu/, cuda/), its price in null/ops_virtual.c, the
 * call where the model needs it, and a test; the struct member, the null
 * table, the traced table and each backend's per-type dispatch follow from
 * the list. */
#ifndef MT_KERNELS_H
#define MT_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "core/core.h"

/* Where a block pair of attention lives (see attn_forward below).
 * Element (b, i, h, d) of a (B, rows, NH, hs) tensor sits at
 *     p[b * bs + i * rs + h * hs + d]
 * (strides in elements; head h's hs channels contiguous). In the fused qkv
 * buffer (B,T,3C) of a layer: q = qkv, k = qkv + C, v = qkv + 2C, each with
 * rs = 3C, bs = T*3C; out (B,T,C) has rs = C, bs = T*C. A block starting at
 * row r0 of such a buffer is the pointer moved by r0 * rs. The LSE of row
 * i, batch b, head h sits at lse[b * l_bs + h * l_hs + i] (a (B,NH,T)
 * buffer: l_hs = T, l_bs = NH*T; a block at row r0: lse + r0). dq, dk, dv
 * share the strides of q, k, v; dout those of out. Row i has global
 * position q_pos0 + i, key row j position k_pos0 + j.
 *
 * Documents (packed sequences whose documents do not see each other):
 * q_lo[b * lo_bs + i], in backend memory, is the global position where
 * query row i's document begins; the row sees only keys at positions >=
 * it (with causal: the keys of its own document up to its own position).
 * Along a sequence q_lo never decreases. NULL: every row sees from
 * position 0 (one document). */
typedef struct mt_attn_block {
  int B, NH, hs;      /* batch, heads, head size */
  int Tq, Tk;         /* query rows, key (and value) rows */
  int q_pos0, k_pos0; /* global sequence position of query row 0 and key row 0 */
  int causal;         /* 1: a query sees the keys at positions <= its own */
  size_t q_bs, q_rs, k_bs, k_rs, v_bs, v_rs, o_bs, o_rs, l_bs, l_hs;
  const int *q_lo; /* where each query row's document begins (NULL: 0) */
  size_t lo_bs;    /* q_lo's stride between sequences */
  /* pricing only (the virtual device, which reads no q_lo): the share of
   * the causal pairs the documents leave visible; 0: all of them */
  double density;
} mt_attn_block;

/* ------------------------------------------------------------------ */
/* the ops over the storage type                                       */
/*
 * X(name, (parameters after t), (their names)): mt_ops has a member
 * void (*name)(mt_dtype t, parameters). What each computes:
 *
 * helpers (fp32 math, one rounding per stored element):
 *   zero        x = 0 (n elements)
 *   copy        dst = src (no overlap)
 *   axpy        y = y + a x
 *   scale       x = s x
 *   copy_2d     dst (rows, cols; leading dimension ld_dst) = src (ld_src): strided row
 *               copies (packing for communication); add_2d: dst = dst + src
 *   kv_spread   grouped-query attention's key/value heads spread over the query heads:
 *               c (rows, nh hs + 2 nkv hs) holds q (nh heads of hs), then nkv key heads,
 *               then nkv value heads; qkv (rows, 3 nh hs) WRITES q, then per query
 *               head h the key head (h0 + h) / group of c (< nkv), then the value
 *               heads alike (one pass over the rows: the bits as they are)
 *   kv_spread_backward  dc (rows, nh hs + 2 nkv hs) WRITES dqkv's q and, per key
 *               (value) head j, the sum of dqkv's key (value) heads h with (h0 + h) /
 *               group = j, in h order: each element 0 + its terms in fp32, rounded
 *               once (0 where none). zero, then add_2d of q and of each head, gives
 *               the same bits in fp32 and rounds after every head in bf16
 *               Both with cs non-NULL also turn c's q and key heads by rope's angles
 *               (row r of a sequence of T rows at position pos[r], or r % T when pos
 *               is NULL), in the same pass: kv_spread writes the turned heads (c is
 *               left as it is), the bits of rope on c, then kv_spread;
 *               kv_spread_backward turns dc's q and key heads back after their sums
 *               are rounded, the bits of kv_spread_backward, then rope (inverse)
 *               on dc. cs NULL: no turn (pos and T unused). with_q 0: neither layout
 *               holds q (c (rows, 2 nkv hs), qkv (rows, 2 nh hs)): ring context
 *               parallelism's compact K|V spread for a step, and its gradient summed
 *   residual_forward  out = a + b (out may alias a or b)
 *   residual_layernorm_forward, residual_rmsnorm_forward  the residual sum and the
 *               norm that reads it, fused: res (N,C) = a + b (res may alias a or b),
 *               then out = layernorm(res) (mean, rstd) or rmsnorm(res) (rstd) as
 *               below; the same bits as residual_forward then the norm (the CPU
 *               does both per row in one pass; a backend may compose the two)
 *
 * embedding:
 *   encoder_forward   out (B,T,C) = wte[inp] + wpe[t]; inp (B,T) ids < V; wte (Vp,C),
 *                     wpe (T_max,C)
 *   encoder_backward  dwte[inp] += dout, dwpe[t] += dout (fp32)
 *   encoder_vp_forward  vocabulary-parallel: this rank holds rows [v0, v0+Vl) of wte
 *                     as (Vl,C); out = (v0 <= inp < v0+Vl ? wte[inp-v0] : 0) +
 *                     wpe[p] with p = pos[b,t] (pos (B,T) in backend memory: positions
 *                     of chunks, or restarting at each document), or p = t when pos is
 *                     NULL; wpe may be NULL (no positional term: one rank of the group
 *                     adds it). With v0 = 0, Vl = Vp, wpe set and pos NULL:
 *                     encoder_forward's bits.
 *   encoder_vp_backward  dwte[inp-v0] += dout for tokens in [v0, v0+Vl); dwpe[p] +=
 *                     dout (p as above) unless dwpe is NULL
 *
 * layernorm: out (N,C) = (inp - mean) rstd w + b; saves mean, rstd (N) (fp32);
 *   backward: dinp += (g - mean_c(g) - norm mean_c(g norm)) rstd with g = w dout,
 *   dw += sum_n dout norm, db += sum_n dout (fp32); layernorm_backward_first writes dinp
 *
 * matmuls (fp32 accumulation):
 *   matmul_forward   out (N,OC) = inp (N,C) @ w^T + bias; w (OC,C); bias (OC) or NULL
 *   matmul_backward  dinp += dout @ w, dw += dout^T @ inp, dbias += column sums of
 *                    dout (fp32 dw, dbias); any of dinp, dw, dbias may be NULL
 *                    (skipped; inp unused without dw, w without dinp)
 *   matmul_backward_first  the same with dinp = dout @ w (beta 0)
 *
 * attention by blocks (FlashAttention-2): never a T x T matrix, only the
 * output and the per-row log-sum-exp (LSE, fp32) are kept. One call handles
 * one pair (query block, key block) of the layout mt_attn_block describes:
 * Tq query rows at global positions q_pos0.., Tk key/value rows at k_pos0..,
 * for B x NH heads of hs channels, scale 1/sqrt(hs) and, when causal, a key
 * at position p visible to a query at position >= p. Context parallelism
 * calls it once per pair of a rank's query chunks and the key chunks it
 * holds or receives, and merges the partial results exactly through their
 * LSE.
 *   attn_forward   WRITES out (Tq rows, strides o_*) = softmax over the visible keys
 *                  of this block times v, and lse = log of the sum of exp(scale q.k)
 *                  over those keys; a row that sees no key of the block gets out = 0
 *                  and lse = -INFINITY
 *   attn_merge     exact merge of two partial results over disjoint key sets: (out,
 *                  lse) and (part, part_lse) become the result over the union: lse' =
 *                  log(e^lse + e^part_lse), out' = out e^(lse - lse') + part
 *                  e^(part_lse - lse'); a -INFINITY side contributes nothing
 *   attn_backward  from the FINAL out and lse (after every merge) and dout (strides
 *                  o_*): recomputes P = exp(scale q.k - lse) for the visible keys and
 *                  ACCUMULATES dq, dk, dv (strides of q, k, v); D = rowsum(dout out)
 *                  is formed here. Summed over every block pair of a query row, it
 *                  gives the exact gradient of the whole attention.
 *   attn_backward_first  attn_backward with dq, dk, dv WRITTEN (= 0 + this call's
 *                  sum): every element of the Tq query rows and Tk key rows of each
 *                  head, 0 where no visible pair reaches it; for the first (or only)
 *                  key block of a buffer, without a zero pass before it (the same
 *                  bits as zero, then attn_backward)
 *
 * GELU (tanh approximation): gelu_forward out = gelu(inp); gelu_backward
 *   dinp += gelu'(inp) dout (gelu_backward_first: dinp =)
 * SwiGLU: swiglu_forward out (N,F) = silu(gate) * up with inp (N,2F) each row
 *   gate (F) then up (F), silu(x) = x sigmoid(x); swiglu_backward dinp (N,2F)
 *   += (dout up silu'(gate), dout silu(gate)) (swiglu_backward_first: =)
 *
 * RMSNorm: out (N,C) = inp rstd w with rstd = 1/sqrt(mean_c(inp^2) + eps)
 *   saved (N) (fp32); backward: dinp += (g - norm mean_c(g norm)) rstd with
 *   g = w dout, norm = inp rstd; dw += sum_n dout norm (fp32); rmsnorm_backward_first
 *   writes dinp
 *
 * rotary position embedding, in place: element (b, i, h, d) of x at
 *   x[(b T + i) ld + h hs + d], for nh heads of hs channels; pairs (d, d +
 *   hs/2) of each head turn by the angle of position p and pair d, whose
 *   cosine and sine are cs[p hs + d] and cs[p hs + hs/2 + d] (fp32, a row
 *   per position), p = pos[b T + i] (pos (B,T) in backend memory) or p = i
 *   when pos is NULL:
 *   x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin (the "rotate half" form of
 *   Hugging Face's Llama); inverse = 1 turns back (sin -> -sin): the backward,
 *   on the gradient
 *
 * cross-entropy over the true vocab V of logits (N,Vp) (fp32 math, losses
 * fp32): columns V..Vp-1 are padding and never receive probability. A target
 * of MT_TARGET_IGNORE (-1) marks a position without a target (the padding of
 * variable-length batches): its loss is exactly 0 and its whole dlogits row
 * (padding columns too) exactly 0, so it adds nothing to a loss sum or to
 * any gradient; its probabilities are the softmax as for any row. Any other
 * target is a real column, 0 <= target < V.
 *   softmax_xent_forward   WRITES losses (N) and probs = softmax (probs may alias
 *                          logits)
 *   softmax_xent_backward  dlogits (N,Vp) = (probs - onehot) dloss on columns < V,
 *                          0 on padding; WRITES (=), may alias probs. dloss is the same
 *                          scale for every position (e.g. 1/(global tokens)).
 * vocabulary-parallel, in pieces between which the caller combines per-row
 * statistics over the ranks that share the vocabulary (max, then sums); the
 * full logits are never gathered. This rank holds columns [v0, v0+Vl) as
 * logits (N,Vl), the first nvalid of them real (global index < V), the rest
 * padding. With v0 = 0, Vl = Vp, nvalid = V: softmax_xent_forward's bits.
 *   xent_vp_max     rowmax (N) = max over the real local columns (-inf when none)
 *   xent_vp_exp     with M = the global row max: stats (N,2) (fp64): [n][0] = the sum of
 *                   exp(logits - M) over the real columns, [n][1] = the target's
 *                   logit if this rank holds its column, else 0 (0 too for an ignored
 *                   target: no rank holds it); the logits are left as they are
 *   xent_vp_finish  with stats summed over the ranks: probs = exp(logits - M) / sum
 *                   (the exps of xent_vp_exp, recomputed; 0 on padding; probs may
 *                   alias logits), losses (N) = log(sum) + M - target logit, 0 where
 *                   the target is ignored (the stats cannot tell an ignored target
 *                   from one held by no rank, so finish reads the targets)
 *   xent_vp_backward  dlogits (N,Vl) = (probs - onehot(target - v0)) dloss on real
 *                   columns, 0 on padding and on the whole row of an ignored target;
 *                   WRITES (=), may alias probs
 *
 * AdamW on n contiguous elements of the fp32 master (param, grad, m, v; step
 * = the step count after this update, >= 1), and param_copy = the new param
 * in the storage type t, in the same pass (the weights' compute copy; NULL:
 * none)
 * adamw_ranges  the same update over several ranges of one buffer in one pass
 *            (one parallel region on the CPU, where adamw_update per tensor
 *            was one each): ranges (n_ranges, host memory, ascending and
 *            disjoint) give elements [begin, end) of param, param_copy, grad,
 *            m and v, each with its weight decay; the gradient is of type
 *            grad_t (fp32 or bf16: widened on the fly) and multiplied by
 *            grad_scale (the clip factor; 1: none) as it is read. Per element
 *            the arithmetic of adamw_update on the scaled fp32 gradient: the
 *            same bits as convert, scale and adamw_update per range.
 *
 * Mixture-of-Experts token movement and the experts' grouped GEMM (index
 * arrays idx, slot in backend memory; the grouped GEMM's group offsets off
 * (G+1) in host memory: they decide the launches):
 *   gather_rows     out (n,C) WRITES: row i = inp row idx[i]
 *   moe_combine     out (N,C) WRITES: row n = sum over j = 0..k-1 with slot[n*k+j] >= 0
 *                   of w[n*k+j] y[slot[n*k+j]] (w fp32), in fp32 in j order, one
 *                   rounding (0 when every slot is < 0)
 *   moe_combine_backward  dy row slot[n*k+j] = w[n*k+j] dout row n (WRITES the rows
 *                   named by slots >= 0); dw (N,k) fp32 WRITES dot(dout row n, y row
 *                   slot[n*k+j]), 0 where slot < 0
 *   moe_gather_sum  dx (N,C) += the rows src[slot[n*k+j]] of slots >= 0, in j order
 *   grouped_matmul_forward  group g is rows [off[g], off[g+1]) of inp (rows, C); w
 *                   (G,OC,C), bias (G,OC) or NULL; out rows of group g = inp rows @
 *                   w[g]^T + bias[g] (WRITES)
 *   grouped_matmul_backward  per group, as matmul_backward (dw (G,OC,C), dbias (G,OC)
 *                   fp32)
 */

/* one range of adamw_ranges: elements [begin, end) and their weight decay */
typedef struct {
  size_t begin, end;
  float weight_decay;
} mt_adamw_range;

/* the target of a position without one (cross-entropy above): loss 0,
 * gradient 0 */
#define MT_TARGET_IGNORE (-1)

#define MT_OPS_TYPED(X)                                                                     \
  X(zero, (void *x, size_t n), (x, n))                                                      \
  X(copy, (void *dst, const void *src, size_t n), (dst, src, n))                            \
  X(axpy, (void *y, float a, const void *x, size_t n), (y, a, x, n))                        \
  X(scale, (void *x, float s, size_t n), (x, s, n))                                         \
  X(copy_2d, (void *dst, size_t ld_dst, const void *src, size_t ld_src, size_t rows,        \
              size_t cols), (dst, ld_dst, src, ld_src, rows, cols))                         \
  X(add_2d, (void *dst, size_t ld_dst, const void *src, size_t ld_src, size_t rows,         \
             size_t cols), (dst, ld_dst, src, ld_src, rows, cols))                          \
  X(kv_spread, (void *qkv, const void *c, size_t rows, int nh, int nkv, int hs, int h0,      \
                int group, int with_q, const float *cs, const int *pos, int T),              \
    (qkv, c, rows, nh, nkv, hs, h0, group, with_q, cs, pos, T))                             \
  X(kv_spread_backward, (void *dc, const void *dqkv, size_t rows, int nh, int nkv, int hs,  \
                         int h0, int group, int with_q, const float *cs, const int *pos,     \
                         int T),                                                             \
    (dc, dqkv, rows, nh, nkv, hs, h0, group, with_q, cs, pos, T))                           \
  X(residual_forward, (void *out, const void *a, const void *b, size_t n), (out, a, b, n))  \
  X(encoder_forward, (void *out, const int *inp, const void *wte, const void *wpe, int B,   \
                      int T, int C), (out, inp, wte, wpe, B, T, C))                         \
  X(encoder_backward, (float *dwte, float *dwpe, const void *dout, const int *inp, int B,   \
                       int T, int C), (dwte, dwpe, dout, inp, B, T, C))                     \
  X(encoder_vp_forward, (void *out, const int *inp, const void *wte, int v0, int Vl,        \
                         const void *wpe, const int *pos, int B, int T, int C),             \
    (out, inp, wte, v0, Vl, wpe, pos, B, T, C))                                             \
  X(encoder_vp_backward, (float *dwte, float *dwpe, const void *dout, const int *inp,       \
                          const int *pos, int v0, int Vl, int B, int T, int C),             \
    (dwte, dwpe, dout, inp, pos, v0, Vl, B, T, C))                                          \
  X(layernorm_forward, (void *out, float *mean, float *rstd, const void *inp, const void *w, \
                        const void *b, int N, int C), (out, mean, rstd, inp, w, b, N, C))   \
  X(layernorm_backward, (void *dinp, float *dw, float *db, const void *dout,                \
                         const void *inp, const void *w, const float *mean,                 \
                         const float *rstd, int N, int C),                                  \
    (dinp, dw, db, dout, inp, w, mean, rstd, N, C))                                         \
  X(layernorm_backward_first, (void *dinp, float *dw, float *db, const void *dout,          \
                               const void *inp, const void *w, const float *mean,           \
                               const float *rstd, int N, int C),                            \
    (dinp, dw, db, dout, inp, w, mean, rstd, N, C))                                         \
  X(matmul_forward, (void *out, const void *inp, const void *w, const void *bias, int N,    \
                     int C, int OC), (out, inp, w, bias, N, C, OC))                         \
  X(matmul_backward, (void *dinp, float *dw, float *dbias, const void *dout,                \
                      const void *inp, const void *w, int N, int C, int OC),                \
    (dinp, dw, dbias, dout, inp, w, N, C, OC))                                              \
  X(matmul_backward_first, (void *dinp, float *dw, float *dbias, const void *dout,          \
                            const void *inp, const void *w, int N, int C, int OC),          \
    (dinp, dw, dbias, dout, inp, w, N, C, OC))                                              \
  X(attn_forward, (const mt_attn_block *a, void *out, float *lse, const void *q,            \
                   const void *k, const void *v), (a, out, lse, q, k, v))                   \
  X(attn_merge, (const mt_attn_block *a, void *out, float *lse, const void *part,           \
                 const float *part_lse), (a, out, lse, part, part_lse))                     \
  X(attn_backward, (const mt_attn_block *a, void *dq, void *dk, void *dv, const void *dout, \
                    const void *out, const float *lse, const void *q, const void *k,        \
                    const void *v), (a, dq, dk, dv, dout, out, lse, q, k, v))               \
  X(attn_backward_first, (const mt_attn_block *a, void *dq, void *dk, void *dv,             \
                          const void *dout, const void *out, const float *lse,              \
                          const void *q, const void *k, const void *v),                     \
    (a, dq, dk, dv, dout, out, lse, q, k, v))                                               \
  X(gelu_forward, (void *out, const void *inp, size_t n), (out, inp, n))                    \
  X(gelu_backward, (void *dinp, const void *inp, const void *dout, size_t n),               \
    (dinp, inp, dout, n))                                                                   \
  X(gelu_backward_first, (void *dinp, const void *inp, const void *dout, size_t n),         \
    (dinp, inp, dout, n))                                                                   \
  X(swiglu_forward, (void *out, const void *inp, int N, int F), (out, inp, N, F))           \
  X(swiglu_backward, (void *dinp, const void *inp, const void *dout, int N, int F),         \
    (dinp, inp, dout, N, F))                                                                \
  X(swiglu_backward_first, (void *dinp, const void *inp, const void *dout, int N, int F),   \
    (dinp, inp, dout, N, F))                                                                \
  X(rmsnorm_forward, (void *out, float *rstd, const void *inp, const void *w, int N, int C, \
                      float eps), (out, rstd, inp, w, N, C, eps))                           \
  X(rmsnorm_backward, (void *dinp, float *dw, const void *dout, const void *inp,            \
                       const void *w, const float *rstd, int N, int C),                     \
    (dinp, dw, dout, inp, w, rstd, N, C))                                                   \
  X(rmsnorm_backward_first, (void *dinp, float *dw, const void *dout, const void *inp,      \
                             const void *w, const float *rstd, int N, int C),               \
    (dinp, dw, dout, inp, w, rstd, N, C))                                                   \
  X(residual_layernorm_forward, (void *res, void *out, float *mean, float *rstd,           \
                                 const void *a, const void *b, const void *w,              \
                                 const void *bias, int N, int C),                          \
    (res, out, mean, rstd, a, b, w, bias, N, C))                                            \
  X(residual_rmsnorm_forward, (void *res, void *out, float *rstd, const void *a,            \
                               const void *b, const void *w, int N, int C, float eps),      \
    (res, out, rstd, a, b, w, N, C, eps))                                                   \
  X(rope, (void *x, size_t ld, int B, int T, int nh, int hs, const float *cs, const int *pos, \
            int inverse),                                                                   \
    (x, ld, B, T, nh, hs, cs, pos, inverse))                                                \
  X(softmax_xent_forward, (float *losses, void *probs, const void *logits,                  \
                           const int *targets, int N, int V, int Vp),                       \
    (losses, probs, logits, targets, N, V, Vp))                                             \
  X(softmax_xent_backward, (void *dlogits, const void *probs, const int *targets,           \
                            float dloss, int N, int V, int Vp),                             \
    (dlogits, probs, targets, dloss, N, V, Vp))                                             \
  X(xent_vp_max, (float *rowmax, const void *logits, int N, int Vl, int nvalid),            \
    (rowmax, logits, N, Vl, nvalid))                                                        \
  X(xent_vp_exp, (double *stats, const void *logits, const float *rowmax,                   \
                  const int *targets, int v0, int N, int Vl, int nvalid),                   \
    (stats, logits, rowmax, targets, v0, N, Vl, nvalid))                                    \
  X(xent_vp_finish, (float *losses, void *probs, const void *logits, const double *stats,   \
                     const float *rowmax, const int *targets, int N, int Vl, int nvalid),   \
    (losses, probs, logits, stats, rowmax, targets, N, Vl, nvalid))                         \
  X(xent_vp_backward, (void *dlogits, const void *probs, const int *targets, int v0,        \
                       float dloss, int N, int Vl, int nvalid),                             \
    (dlogits, probs, targets, v0, dloss, N, Vl, nvalid))                                    \
  X(adamw_update, (float *param, void *param_copy, const float *grad, float *m, float *v,   \
                   size_t n, float lr, float beta1, float beta2, float eps,                 \
                   float weight_decay, int step),                                           \
    (param, param_copy, grad, m, v, n, lr, beta1, beta2, eps, weight_decay, step))          \
  X(adamw_ranges, (float *param, void *param_copy, const void *grad, mt_dtype grad_t,       \
                   float grad_scale, float *m, float *v, const mt_adamw_range *ranges,      \
                   int n_ranges, float lr, float beta1, float beta2, float eps, int step),  \
    (param, param_copy, grad, grad_t, grad_scale, m, v, ranges, n_ranges, lr, beta1, beta2, \
     eps, step))                                                                            \
  X(gather_rows, (void *out, const void *inp, const int *idx, int n, int C),                \
    (out, inp, idx, n, C))                                                                  \
  X(moe_combine, (void *out, const void *y, const int *slot, const float *w, int N, int C,  \
                  int k), (out, y, slot, w, N, C, k))                                       \
  X(moe_combine_backward, (void *dy, float *dw, const void *dout, const void *y,            \
                           const int *slot, const float *w, int N, int C, int k),           \
    (dy, dw, dout, y, slot, w, N, C, k))                                                    \
  X(moe_gather_sum, (void *dx, const void *src, const int *slot, int N, int C, int k),      \
    (dx, src, slot, N, C, k))                                                               \
  X(grouped_matmul_forward, (void *out, const void *inp, const void *w, const void *bias,   \
                             const int *off, int G, int C, int OC),                         \
    (out, inp, w, bias, off, G, C, OC))                                                     \
  X(grouped_matmul_backward, (void *dinp, float *dw, float *dbias, const void *dout,        \
                              const void *inp, const void *w, const int *off, int G, int C, \
                              int OC), (dinp, dw, dbias, dout, inp, w, off, G, C, OC))

/* Sums over the storage type, in fp64: X(name, params after t, their
 * names); member double (*name)(mt_dtype t, parameters).
 *   sum    of x[0..n) in index order (losses of a micro-batch)
 *   sumsq  of x[i]^2, in chunks fixed by n (never by the thread count),
 *          each summed in order, then the chunks in order */
#define MT_OPS_TYPED_SUMS(X)                                                                \
  X(sum, (const void *x, size_t n), (x, n))                                                 \
  X(sumsq, (const void *x, size_t n), (x, n))

/* Ops of fixed types: X(name, optional, (parameters), (their names)); member
 * void (*name)(parameters). optional: a backend may leave it NULL.
 *   convert  dst (n elements of dst_t) = src (of src_t): widened exactly or rounded to
 *            nearest even; the same type is a copy (comm staging, the master ->
 *            the compute copy, bf16 gradients widened for AdamW)
 *   attention_forward, attention_backward: the reference causal self-attention
 *            (fp32), kept for tests and benchmarks (the model uses the block ops):
 *            qkv (B,T,3C) holds q|k|v (NH heads of hs = C/NH); out (B,T,C); att
 *            (B,NH,T,T) saves the softmax probabilities (T x T memory); dqkv is
 *            accumulated; datt is scratch of att's size
 *   The MoE router, in fp32 whatever the storage type (bf16 logits would round
 *   scores 2^-8 apart into ties):
 *   moe_router_forward  probs (N,E) = softmax of each row of logits (N,E), lse (N) its
 *            log-sum-exp; top_idx (N,k) the k experts of the largest probs[e] +
 *            bias[e], largest first (ties: the lower index first); top_w (N,k) their
 *            probabilities (without the bias) divided by the sum of the k. bias (E)
 *            or NULL (zeros): the load-balancing bias of aux-loss-free routing, which
 *            moves the choice only (DeepSeek-V3). sigmoid: probs[e] = sigmoid(logits[e])
 *            instead of the softmax (DeepSeek-V3's scores; lse still the logits'
 *            log-sum-exp), chosen and renormalised the same way
 *   moe_router_backward  dlogits (N,E) WRITES the gradient of the logits from: dtop_w
 *            (N,k), the loss's gradient with respect to top_w; aux_grad
 *            (N/rows_per_seq, E) or NULL, the gradient with respect to probs of row
 *            n, aux_grad[n / rows_per_seq] (the load-balancing loss, per sequence);
 *            and the z-loss, whose gradient with respect to logits[n][e] is z_grad *
 *            lse[n] * probs[n][e] (softmax only: under sigmoid z_grad is not applied,
 *            and dlogits = probs (1 - probs) dprobs)
 *   moe_prob_sums  sums (N/rows_per_seq, E) WRITES: row s = the sum of probs rows
 *            [s*rows_per_seq, (s+1)*rows_per_seq), in row order */
#define MT_OPS_FIXED(X)                                                                     \
  X(convert, 0, (void *dst, mt_dtype dst_t, const void *src, mt_dtype src_t, size_t n),     \
    (dst, dst_t, src, src_t, n))                                                            \
  X(attention_forward, 1, (float *out, float *att, const float *qkv, int B, int T, int C,   \
                           int NH), (out, att, qkv, B, T, C, NH))                           \
  X(attention_backward, 1, (float *dqkv, float *datt, const float *dout, const float *qkv, \
                            const float *att, int B, int T, int C, int NH),                 \
    (dqkv, datt, dout, qkv, att, B, T, C, NH))                                              \
  X(moe_router_forward, 0, (float *probs, float *lse, int *top_idx, float *top_w,           \
                            const float *logits, const float *bias, int N, int E, int k,    \
                            int sigmoid),                                                   \
    (probs, lse, top_idx, top_w, logits, bias, N, E, k, sigmoid))                           \
  X(moe_router_backward, 0, (float *dlogits, const float *probs, const float *lse,          \
                             const int *top_idx, const float *top_w, const float *dtop_w,   \
                             const float *aux_grad, int rows_per_seq, float z_grad, int N,  \
                             int E, int k, int sigmoid),                                    \
    (dlogits, probs, lse, top_idx, top_w, dtop_w, aux_grad, rows_per_seq, z_grad, N, E, k,  \
     sigmoid))                                                                              \
  X(moe_prob_sums, 0, (float *sums, const float *probs, int N, int E, int rows_per_seq),    \
    (sums, probs, N, E, rows_per_seq))

/* the parameter list inside a list entry's parentheses */
#define MT_OPS_UNPAREN(...) __VA_ARGS__
#define MT_OPS_MEMBER_TYPED_(name, params, args) void (*name)(mt_dtype t, MT_OPS_UNPAREN params);
#define MT_OPS_MEMBER_SUMS_(name, params, args) double (*name)(mt_dtype t, MT_OPS_UNPAREN params);
#define MT_OPS_MEMBER_FIXED_(name, optional, params, args) void (*name) params;

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
  /* wait until every op queued so far has finished (timers and benchmarks;
   * a no-op where ops run synchronously, as on the CPU) */
  void (*sync)(void);
  /* The router's choices at top_idx (moe_router_forward's) where this
   * backend makes them up from the shapes alone (the null and virtual
   * tables: tokens, experts, k and skew): a non-zero number, the same for
   * the same choices, so the host may reuse what it derived from them
   * (mt_ep_route). Such a backend computes nothing from a routing's index
   * arrays (slots, send order, permutations: its ops see their lengths
   * only), so a routing reused need not upload them again. 0, or a NULL
   * member (the backends that compute them): choices from data. */
  unsigned (*moe_routing_id)(const int *top_idx);

  /* ---- compute (the lists above) ---- */
  MT_OPS_TYPED(MT_OPS_MEMBER_TYPED_)
  MT_OPS_TYPED_SUMS(MT_OPS_MEMBER_SUMS_)
  MT_OPS_FIXED(MT_OPS_MEMBER_FIXED_)
} mt_ops;

/* A backend's member from its per-type bodies impl##_f32 and impl##_bf16
 * (taking the parameters after t): fn(t, ...) calls the one of type t. A
 * backend defines X(name, params, args) as MT_OPS_DISPATCH_TYPED(its
 * function for name, its bodies' prefix for name, params, args) and expands
 * MT_OPS_TYPED with it (and _SUMS with MT_OPS_DISPATCH_SUMS). */
#define MT_OPS_DISPATCH_TYPED(fn, impl, params, args)                                      \
  static void fn(mt_dtype t, MT_OPS_UNPAREN params) {                                      \
    if (t == MT_DT_BF16)                                                                   \
      impl##_bf16 args;                                                                    \
    else                                                                                   \
      impl##_f32 args;                                                                     \
  }
#define MT_OPS_DISPATCH_SUMS(fn, impl, params, args)                                       \
  static double fn(mt_dtype t, MT_OPS_UNPAREN params) {                                    \
    return t == MT_DT_BF16 ? impl##_bf16 args : impl##_f32 args;                           \
  }

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
 * (only the optional ones of MT_OPS_FIXED may be NULL): their names,
 * ", "-separated, in names (cut at len bytes; names may be NULL); returns
 * how many. 0 for a complete table. */
int mt_ops_missing(const mt_ops *ops, char *names, size_t len);

/* ------------------------------------------------------------------ */
/* bf16 on the CPU                                                     */
/*
 * bf16 = the upper 16 bits of an IEEE fp32 (sign, 8 exponent bits, 7
 * fraction bits: 8 significant bits, unit roundoff u = 2^-8 under
 * round-to-nearest-even); core.h has the type (mt_bf16) and the scalar
 * conversions. Matmuls on bf16 take the path chosen once per process (see
 * mt_bf16_gemm_path); the elementwise ops and attention give the same bits
 * at any thread count. */

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
/* The AMX tdpbf16ps peak of one core in GFLOP/s (the best of three runs of
 * iters iterations of four tile products, this thread's CPU time); 0 where
 * mt_cpu_bf16_level() < 2. */
double mt_cpu_amx_peak(long iters);
/* Force a path: "onednn" or "sgemm", or "auto" for the process's default
 * (tests and benchmarks; call outside any op). 0, or -1 when name is none
 * of these or oneDNN is not in this build (then nothing changes). */
int mt_bf16_gemm_select(const char *name);

/* ------------------------------------------------------------------ */
/* devices: which backend a rank computes on                          */

/* (mt_device_kind and mt_precision, train.device's and train.precision's
 * enums, are core.h's: the configuration produces them.) */

/* train.device resolved (pure; device.c): want (auto: cuda when cuda_built
 * and n_visible > 0, else cpu) against what this process has. no_gpu_why
 * says why n_visible is 0 (e.g. "no CUDA-capable device is detected").
 * Returns the device kind (never MT_DEVICE_AUTO), or -1 with one line in
 * msg naming the key, the value and the reason. train.precision is the
 * configuration's (mt_config_check refuses fp16): bf16 storage for the
 * compute tensors, on the CPU, on CUDA and on the virtual device alike. */
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
 * (every backend's ops take either). The combinations that cannot run
 * (bf16 gradients or a bf16 reduction under fp32 precision; bf16 gradients
 * reduced in fp32: they are reduced where they are, in bf16) are
 * mt_config_check's to refuse. */
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

/* One strided, batched product of the CUDA backend's general GEMM (the
 * entry its matmuls and attention call, matmul.cu): batch times, C
 * (m x n, column-major, leading dimension ldc, stride_c elements apart) =
 * alpha op(A) op(B) + beta C, op(A) m x k and op(B) k x n, transposed when
 * trans_a / trans_b; A and B of storage type ab, C of type cd (fp32; bf16
 * only with bf16 operands: the sum in fp32, rounded once). For tests of
 * the leading dimensions and strides the ops do not take. */
typedef struct {
  int trans_a, trans_b, m, n, k, lda, ldb, ldc, batch;
  long long stride_a, stride_b, stride_c; /* elements; read only when batch > 1 */
  float alpha, beta;
  mt_dtype ab, cd;
} mt_gemm_shape;
/* 0, or -1 without the CUDA backend (not built, or before mt_cuda_init) */
int mt_cuda_gemm_strided(const mt_gemm_shape *s, const void *A, const void *B, void *C);

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
/* The same of the bf16 matmul (bf16 operands, fp32 accumulation) on the path
 * this process's bf16 ops take (mt_bf16_gemm_path): a bf16 run's peak. */
double mt_cpu_bf16_gemm_gflops(int n, double min_seconds);

#endif
