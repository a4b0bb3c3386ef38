/* test_attention: the block attention ops (attn_forward, attn_merge,
 * attn_backward; FlashAttention-2 on the CPU) against references.
 *
 * - A naive attention in double (this file) over any pair of query and key
 *   blocks with global positions: forward out and LSE, and the gradients of
 *   sum(out * dout). Cases: causal and not, ragged sizes (not multiples of
 *   the kernel's 64-row and 256-key blocks), key blocks before, on and after
 *   the queries (KV offsets), rows that see no key (out 0, LSE -inf), and
 *   q|k|v inside the fused (B,T,3C) buffer as the model holds them, keys and
 *   values in a separate (B,T,2C) buffer as the ring passes them.
 * - The whole causal sequence against the reference kernel the model used
 *   before (attention_forward/backward of the op table, T x T), T = 130.
 * - Exact merge: the keys cut into blocks at ragged points, each block's
 *   partial (out, LSE) merged, equals one call over all keys; the
 *   backward summed over the blocks from the final out and LSE equals the
 *   backward of one call.
 * - Finite differences of the loss through forward for dq, dk, dv (small).
 * - The backward accumulates; the same bits at 1 and 2 threads and twice.
 * Errors are relative to the largest reference magnitude, collected with
 * mt_worst (NaN fails). Exits 1 on any failure. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "../check.h"
#include "../test_rng.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* fp32 block kernels against double references: relative to the largest
 * reference magnitude (observed worst 9e-7, from the polynomial exp and
 * fp32 sums over up to 600 keys) */
#define REF_TOL 1e-5
#define FD_TOL 5e-3

static const mt_ops *ops;
static double *dzeros(size_t n) { return test_alloc((n ? n : 1) * sizeof(double)); }

/* ------------------------------------------------------------------ */
/* a case: buffers laid out as the model or the ring holds them         */

typedef struct {
  mt_attn_block a;
  int fused;           /* q|k|v in one (B,T,3C) buffer; else q (B,Tq,C) and kv (B,Tk,2C) */
  float *qkv, *kv;     /* the inputs */
  float *q, *k, *v;    /* views */
  float *out, *lse;    /* (B,Tq,C), (B,NH,Tq) */
  float *dqkv, *dkv, *dq, *dk, *dv;
  size_t n_q, n_kv, n_out, n_lse;
} attn_case;

static void case_make(attn_case *c, int B, int NH, int hs, int Tq, int Tk, int q_pos0,
                      int k_pos0, int causal, int fused) {
  memset(c, 0, sizeof *c);
  int C = NH * hs;
  mt_attn_block *a = &c->a;
  *a = (mt_attn_block){.B = B, .NH = NH, .hs = hs, .Tq = Tq, .Tk = Tk, .q_pos0 = q_pos0,
                       .k_pos0 = k_pos0, .causal = causal};
  c->fused = fused;
  if (fused) { /* one sequence, queries and keys the same rows */
    c->n_q = (size_t)B * Tq * 3 * C;
    c->qkv = rand_tensor(c->n_q, -2, 2);
    c->dqkv = zeros(c->n_q);
    c->q = c->qkv, c->k = c->qkv + C, c->v = c->qkv + 2 * C;
    c->dq = c->dqkv, c->dk = c->dqkv + C, c->dv = c->dqkv + 2 * C;
    a->q_rs = a->k_rs = a->v_rs = 3 * (size_t)C;
    a->q_bs = a->k_bs = a->v_bs = (size_t)Tq * 3 * C;
  } else {
    c->n_q = (size_t)B * Tq * C;
    c->n_kv = (size_t)B * Tk * 2 * C;
    c->qkv = rand_tensor(c->n_q, -2, 2);
    c->kv = rand_tensor(c->n_kv, -2, 2);
    c->dqkv = zeros(c->n_q);
    c->dkv = zeros(c->n_kv);
    c->q = c->qkv, c->k = c->kv, c->v = c->kv + C;
    c->dq = c->dqkv, c->dk = c->dkv, c->dv = c->dkv + C;
    a->q_rs = (size_t)C, a->q_bs = (size_t)Tq * C;
    a->k_rs = a->v_rs = 2 * (size_t)C, a->k_bs = a->v_bs = (size_t)Tk * 2 * C;
  }
  a->o_rs = (size_t)C, a->o_bs = (size_t)Tq * C;
  a->l_hs = (size_t)Tq, a->l_bs = (size_t)NH * Tq;
  c->n_out = (size_t)B * Tq * C;
  c->n_lse = (size_t)B * NH * Tq;
  c->out = zeros(c->n_out);
  c->lse = zeros(c->n_lse);
}

/* Documents: sequence b's documents begin at the global positions
 * starts[b][0..] (ascending, -1 ends a list; position 0 always begins
 * one); each query row gets its document's first position in a->q_lo. */
static void case_documents(attn_case *c, const int starts[][8]) {
  mt_attn_block *a = &c->a;
  int *lo = malloc((size_t)a->B * a->Tq * sizeof(int));
  for (int b = 0; b < a->B; b++)
    for (int i = 0; i < a->Tq; i++) {
      int p = a->q_pos0 + i, first = 0;
      for (int k = 0; k < 8 && starts[b][k] >= 0; k++)
        if (starts[b][k] <= p) first = starts[b][k];
      lo[(size_t)b * a->Tq + i] = first;
    }
  a->q_lo = lo;
  a->lo_bs = (size_t)a->Tq;
}

static void case_free(attn_case *c) {
  free(c->qkv), free(c->kv), free(c->out), free(c->lse), free(c->dqkv), free(c->dkv);
  free((void *)c->a.q_lo);
}

#define AT(p, bs, rs, b, i, h, hs) ((p)[(size_t)(b) * (bs) + (size_t)(i) * (rs) + (size_t)(h) * (hs)])

/* Naive attention in double: out, lse and, with dout, the gradients (dq,
 * dk, dv laid out as q, k, v; zeroed first). */
static void reference(const attn_case *c, const float *dout, double *out, double *lse, double *dq,
                      double *dk, double *dv) {
  const mt_attn_block *a = &c->a;
  const int hs = a->hs;
  const double scale = 1.0 / sqrt((double)hs);
  double *p = dzeros((size_t)a->Tk), *dp = dzeros((size_t)a->Tk);
  for (int b = 0; b < a->B; b++)
    for (int h = 0; h < a->NH; h++)
      for (int i = 0; i < a->Tq; i++) {
        const float *qi = &AT(c->q, a->q_bs, a->q_rs, b, i, h, hs);
        double mx = -INFINITY;
        for (int j = 0; j < a->Tk; j++) {
          int vis = (!a->causal || a->k_pos0 + j <= a->q_pos0 + i) &&
                    (!a->q_lo || a->k_pos0 + j >= a->q_lo[(size_t)b * a->lo_bs + i]);
          const float *kj = &AT(c->k, a->k_bs, a->k_rs, b, j, h, hs);
          double s = 0.0;
          for (int d = 0; d < hs; d++) s += (double)qi[d] * kj[d];
          p[j] = vis ? s * scale : -INFINITY;
          if (p[j] > mx) mx = p[j];
        }
        double sum = 0.0;
        for (int j = 0; j < a->Tk; j++) {
          p[j] = mx == -INFINITY ? 0.0 : exp(p[j] - mx);
          sum += p[j];
        }
        double *o = &AT(out, a->o_bs, a->o_rs, b, i, h, hs);
        lse[(size_t)b * a->l_bs + (size_t)h * a->l_hs + i] = sum > 0 ? mx + log(sum) : -INFINITY;
        for (int d = 0; d < hs; d++) o[d] = 0.0;
        if (sum == 0.0) continue;
        for (int j = 0; j < a->Tk; j++) {
          p[j] /= sum;
          const float *vj = &AT(c->v, a->v_bs, a->v_rs, b, j, h, hs);
          for (int d = 0; d < hs; d++) o[d] += p[j] * vj[d];
        }
        if (!dout) continue;
        const float *dy = &AT(dout, a->o_bs, a->o_rs, b, i, h, hs);
        double rowdot = 0.0;
        for (int j = 0; j < a->Tk; j++) {
          const float *vj = &AT(c->v, a->v_bs, a->v_rs, b, j, h, hs);
          dp[j] = 0.0;
          for (int d = 0; d < hs; d++) dp[j] += dy[d] * vj[d];
          rowdot += dp[j] * p[j];
        }
        for (int j = 0; j < a->Tk; j++) {
          double ds = p[j] * (dp[j] - rowdot);
          const float *kj = &AT(c->k, a->k_bs, a->k_rs, b, j, h, hs);
          double *dqi = &AT(dq, a->q_bs, a->q_rs, b, i, h, hs);
          double *dkj = &AT(dk, a->k_bs, a->k_rs, b, j, h, hs);
          double *dvj = &AT(dv, a->v_bs, a->v_rs, b, j, h, hs);
          for (int d = 0; d < hs; d++) {
            dvj[d] += p[j] * dy[d];
            dqi[d] += scale * ds * kj[d];
            dkj[d] += scale * ds * qi[d];
          }
        }
      }
  free(p), free(dp);
}

/* max |x - ref| / max |ref| over the (B, rows, NH, hs) elements of a view */
static double view_err(const float *x, const double *ref, size_t bs, size_t rs, int B, int rows,
                       int NH, int hs) {
  double diff = 0.0, scale = 0.0;
  for (int b = 0; b < B; b++)
    for (int i = 0; i < rows; i++)
      for (int h = 0; h < NH; h++)
        for (int d = 0; d < hs; d++) {
          size_t o = (size_t)b * bs + (size_t)i * rs + (size_t)h * hs + (size_t)d;
          diff = mt_worst(diff, fabs((double)x[o] - ref[o]));
          if (fabs(ref[o]) > scale) scale = fabs(ref[o]);
        }
  return diff / (scale > 0 ? scale : 1.0);
}

/* LSE: finite rows by relative error, -inf rows must be -inf exactly */
static double lse_err(const float *x, const double *ref, size_t n, int *inf_ok) {
  double diff = 0.0;
  *inf_ok = 1;
  for (size_t i = 0; i < n; i++) {
    if (ref[i] == -INFINITY) {
      *inf_ok &= x[i] == -INFINITY;
      continue;
    }
    diff = mt_worst(diff, fabs((double)x[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
  }
  return diff;
}

static size_t span(const attn_case *c, int which) { /* elements of the buffer a view lives in */
  return which == 0 ? c->n_q : (c->fused ? c->n_q : c->n_kv);
}

/* forward and backward of one case against the reference (docs: the
 * documents of case_documents, or NULL) */
static void run_case_docs(const char *name, int B, int NH, int hs, int Tq, int Tk, int q_pos0,
                          int k_pos0, int causal, int fused, const int docs[][8]) {
  attn_case c;
  case_make(&c, B, NH, hs, Tq, Tk, q_pos0, k_pos0, causal, fused);
  if (docs) case_documents(&c, docs);
  const mt_attn_block *a = &c.a;
  float *dout = rand_tensor(c.n_out, -1, 1);
  double *out = dzeros(c.n_out), *lse = dzeros(c.n_lse);
  double *dqb = dzeros(span(&c, 0)), *dkvb = dzeros(span(&c, 1));
  double *dq = dqb, *dk = fused ? dqb + NH * hs : dkvb, *dv = dk + NH * hs;
  reference(&c, dout, out, lse, dq, dk, dv);
  ops->attn_forward(MT_DT_F32, a, c.out, c.lse, c.q, c.k, c.v);
  ops->attn_backward(MT_DT_F32, a, c.dq, c.dk, c.dv, dout, c.out, c.lse, c.q, c.k, c.v);
  char what[160];
  int inf_ok;
  snprintf(what, sizeof what, "%s out", name);
  mt_check_err(what, view_err(c.out, out, a->o_bs, a->o_rs, B, Tq, NH, hs), REF_TOL);
  snprintf(what, sizeof what, "%s lse", name);
  mt_check_err(what, lse_err(c.lse, lse, c.n_lse, &inf_ok), REF_TOL);
  snprintf(what, sizeof what, "%s: rows without keys: lse -inf, out 0", name);
  int zero_ok = inf_ok;
  for (size_t i = 0; i < c.n_lse; i++)
    if (lse[i] == -INFINITY) {
      int b = (int)(i / a->l_bs), h = (int)(i % a->l_bs / a->l_hs), r = (int)(i % a->l_hs);
      for (int d = 0; d < hs; d++) zero_ok &= (&AT(c.out, a->o_bs, a->o_rs, b, r, h, hs))[d] == 0.0f;
    }
  mt_check_true(what, zero_ok);
  snprintf(what, sizeof what, "%s dq", name);
  mt_check_err(what, view_err(c.dq, dq, a->q_bs, a->q_rs, B, Tq, NH, hs), REF_TOL);
  snprintf(what, sizeof what, "%s dk", name);
  mt_check_err(what, view_err(c.dk, dk, a->k_bs, a->k_rs, B, Tk, NH, hs), REF_TOL);
  snprintf(what, sizeof what, "%s dv", name);
  mt_check_err(what, view_err(c.dv, dv, a->v_bs, a->v_rs, B, Tk, NH, hs), REF_TOL);
  free(dout), free(out), free(lse), free(dqb), free(dkvb);
  case_free(&c);
}

static void run_case(const char *name, int B, int NH, int hs, int Tq, int Tk, int q_pos0,
                     int k_pos0, int causal, int fused) {
  run_case_docs(name, B, NH, hs, Tq, Tk, q_pos0, k_pos0, causal, fused, NULL);
}

static void test_against_reference(void) {
  printf("block attention vs naive double\n");
  /* the model's whole sequence: causal, q|k|v fused, ragged lengths */
  run_case("causal T=130 fused (B=2 NH=3 hs=16)", 2, 3, 16, 130, 130, 0, 0, 1, 1);
  run_case("causal T=600 fused (3 key blocks, B=1 NH=2 hs=64)", 1, 2, 64, 600, 600, 0, 0, 1, 1);
  run_case("causal T=1 fused", 1, 2, 8, 1, 1, 0, 0, 1, 1);
  /* ring chunks: keys elsewhere (KV offsets), separate q and kv buffers */
  run_case("keys before queries (q@200, k@0, 70x150)", 2, 2, 16, 70, 150, 200, 0, 1, 0);
  run_case("diagonal chunk (q@96, k@96, 77x77)", 1, 3, 8, 77, 77, 96, 96, 1, 0);
  run_case("keys straddle queries (q@40 x90, k@0 x200)", 2, 2, 16, 90, 200, 40, 0, 1, 0);
  run_case("keys straddle, 3 key blocks (q@300 x70, k@0 x520)", 1, 2, 16, 70, 520, 300, 0, 1, 0);
  run_case("keys after queries: no key seen (q@0, k@64)", 1, 2, 8, 64, 64, 0, 64, 1, 0);
  run_case("keys partly after (q@10 x70, k@50 x129)", 1, 2, 8, 70, 129, 10, 50, 1, 0);
  run_case("not causal (65 x 131)", 2, 2, 16, 65, 131, 0, 0, 0, 0);
  /* documents: boundaries inside and across key blocks, one-token
   * documents, rows whose document begins in a later key block */
  const int docs[2][8] = {{1, 70, 333, 334, 599, -1}, {256, 300, 301, 520, -1}};
  run_case_docs("documents T=600 fused (B=2 NH=2 hs=64)", 2, 2, 64, 600, 600, 0, 0, 1, 1, docs);
  run_case_docs("documents, keys straddle (q@300 x70, k@0 x520)", 2, 2, 16, 70, 520, 300, 0, 1, 0,
                docs);
  const int late[2][8] = {{180, -1}, {100, 210, -1}};
  run_case_docs("documents begin after every key (q@200 x70, k@0 x150)", 2, 2, 16, 70, 150, 200, 0,
                1, 0, late);
}

/* the kernel the model used before: the whole causal sequence, T x T */
static void test_against_old_kernel(void) {
  printf("block attention vs the reference op (T x T)\n");
  int B = 2, T = 130, NH = 4, hs = 16, C = NH * hs;
  attn_case c;
  case_make(&c, B, NH, hs, T, T, 0, 0, 1, 1);
  size_t n_att = (size_t)B * NH * T * T;
  float *out = zeros(c.n_out), *att = zeros(n_att), *datt = zeros(n_att);
  float *dqkv = zeros(c.n_q), *dout = rand_tensor(c.n_out, -1, 1);
  ops->attention_forward(out, att, c.qkv, B, T, C, NH);
  ops->attention_backward(dqkv, datt, dout, c.qkv, att, B, T, C, NH);
  ops->attn_forward(MT_DT_F32, &c.a, c.out, c.lse, c.q, c.k, c.v);
  ops->attn_backward(MT_DT_F32, &c.a, c.dq, c.dk, c.dv, dout, c.out, c.lse, c.q, c.k, c.v);
  double *ref = dzeros(c.n_q);
  for (size_t i = 0; i < c.n_out; i++) ref[i] = out[i];
  mt_check_err("out vs attention_forward", view_err(c.out, ref, c.a.o_bs, c.a.o_rs, B, T, NH, hs),
               REF_TOL);
  for (size_t i = 0; i < c.n_q; i++) ref[i] = dqkv[i];
  mt_check_err("dqkv vs attention_backward",
               view_err(c.dqkv, ref, (size_t)T * 3 * C, 3 * (size_t)C, B, T, 3 * NH, hs), REF_TOL);
  free(out), free(att), free(datt), free(dqkv), free(dout), free(ref);
  case_free(&c);
}

/* Keys cut into blocks at `cuts`: each block's partial result merged into
 * the running one equals one call over every key; the backward summed over
 * the blocks from the final out and LSE equals one backward. */
static void test_merge(int causal) {
  printf("merge of partial results over key blocks (%s)\n", causal ? "causal" : "not causal");
  const int B = 2, NH = 2, hs = 16, C = NH * hs, Tq = 90, Tk = 250, q_pos0 = 150, k_pos0 = 0;
  const int cuts[] = {0, 37, 129, 200, 250}, n_blocks = 4;
  attn_case whole;
  case_make(&whole, B, NH, hs, Tq, Tk, q_pos0, k_pos0, causal, 0);
  float *dout = rand_tensor(whole.n_out, -1, 1);
  ops->attn_forward(MT_DT_F32, &whole.a, whole.out, whole.lse, whole.q, whole.k, whole.v);
  ops->attn_backward(MT_DT_F32, &whole.a, whole.dq, whole.dk, whole.dv, dout, whole.out, whole.lse,
                     whole.q, whole.k, whole.v);
  float *out = zeros(whole.n_out), *lse = zeros(whole.n_lse);
  float *part = zeros(whole.n_out), *part_lse = zeros(whole.n_lse);
  float *dq = zeros(whole.n_q), *dkv = zeros(whole.n_kv);
  for (int blk = 0; blk < n_blocks; blk++) {
    mt_attn_block a = whole.a;
    a.Tk = cuts[blk + 1] - cuts[blk];
    a.k_pos0 = k_pos0 + cuts[blk];
    size_t koff = (size_t)cuts[blk] * a.k_rs;
    if (blk == 0)
      ops->attn_forward(MT_DT_F32, &a, out, lse, whole.q, whole.k + koff, whole.v + koff);
    else {
      ops->attn_forward(MT_DT_F32, &a, part, part_lse, whole.q, whole.k + koff, whole.v + koff);
      ops->attn_merge(MT_DT_F32, &a, out, lse, part, part_lse);
    }
  }
  double *ref = dzeros(whole.n_kv > whole.n_out ? whole.n_kv : whole.n_out);
  for (size_t i = 0; i < whole.n_out; i++) ref[i] = whole.out[i];
  mt_check_err("merged out vs one call",
               view_err(out, ref, whole.a.o_bs, whole.a.o_rs, B, Tq, NH, hs), REF_TOL);
  double lerr = 0.0;
  int same_inf = 1;
  for (size_t i = 0; i < whole.n_lse; i++) {
    if (whole.lse[i] == -INFINITY) {
      same_inf &= lse[i] == -INFINITY;
      continue;
    }
    lerr = mt_worst(lerr, fabs((double)lse[i] - whole.lse[i]) / fmax(1.0, fabs(whole.lse[i])));
  }
  mt_check_err("merged lse vs one call", lerr, REF_TOL);
  mt_check_true("merged lse -inf where one call's is", same_inf);
  /* backward per block from the final (one call's) out and lse */
  for (int blk = 0; blk < n_blocks; blk++) {
    mt_attn_block a = whole.a;
    a.Tk = cuts[blk + 1] - cuts[blk];
    a.k_pos0 = k_pos0 + cuts[blk];
    size_t koff = (size_t)cuts[blk] * a.k_rs;
    ops->attn_backward(MT_DT_F32, &a, dq, dkv + koff, dkv + C + koff, dout, whole.out, whole.lse,
                       whole.q, whole.k + koff, whole.v + koff);
  }
  for (size_t i = 0; i < whole.n_q; i++) ref[i] = whole.dq[i];
  mt_check_err("dq summed over key blocks vs one backward",
               view_err(dq, ref, whole.a.q_bs, whole.a.q_rs, B, Tq, NH, hs), REF_TOL);
  for (size_t i = 0; i < whole.n_kv; i++) ref[i] = whole.dkv[i];
  mt_check_err("dk|dv per key block vs one backward",
               view_err(dkv, ref, whole.a.k_bs, whole.a.k_rs, B, Tk, 2 * NH, hs), REF_TOL);
  free(dout), free(out), free(lse), free(part), free(part_lse), free(dq), free(dkv), free(ref);
  case_free(&whole);
}

/* ------------------------------------------------------------------ */
/* finite differences, accumulation, determinism                        */

typedef struct {
  attn_case *c;
  const float *R;
} fd_ctx;

static double fd_loss(void *ctx) {
  fd_ctx *f = ctx;
  attn_case *c = f->c;
  ops->attn_forward(MT_DT_F32, &c->a, c->out, c->lse, c->q, c->k, c->v);
  double s = 0.0;
  for (size_t i = 0; i < c->n_out; i++) s += (double)c->out[i] * f->R[i];
  return s;
}

static void test_finite_differences(void) {
  printf("finite differences (q at 6, keys at 3..9: partly masked)\n");
  attn_case c;
  case_make(&c, 2, 2, 4, 5, 7, 6, 3, 1, 0);
  float *R = rand_tensor(c.n_out, -1, 1);
  fd_ctx f = {&c, R};
  fd_loss(&f);
  ops->attn_backward(MT_DT_F32, &c.a, c.dq, c.dk, c.dv, R, c.out, c.lse, c.q, c.k, c.v);
  mt_check_err("attn_backward dq vs finite diff",
               gradcheck(fd_loss, &f, c.qkv, c.dqkv, c.n_q, 1), FD_TOL);
  mt_check_err("attn_backward dk|dv vs finite diff",
               gradcheck(fd_loss, &f, c.kv, c.dkv, c.n_kv, 1), FD_TOL);
  /* a second call adds the same again */
  fd_loss(&f);
  float *dq1 = malloc(c.n_q * sizeof(float));
  memcpy(dq1, c.dqkv, c.n_q * sizeof(float));
  ops->attn_backward(MT_DT_F32, &c.a, c.dq, c.dk, c.dv, R, c.out, c.lse, c.q, c.k, c.v);
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < c.n_q; i++) {
    err = mt_worst(err, fabs((double)c.dqkv[i] - 2.0 * dq1[i]));
    scale = fmax(scale, fabs(dq1[i]));
  }
  mt_check_err("attn_backward accumulates (dq x2)", scale > 0 ? err / (2 * scale) : INFINITY, 1e-6);
  free(R), free(dq1);
  case_free(&c);
}

static void test_determinism(void) {
  printf("determinism\n");
  int saved = mt_kernels_threads();
  float *res[3][3]; /* out, lse, dqkv at 1 thread, 2 threads, 2 threads again */
  attn_case c;
  case_make(&c, 3, 4, 32, 200, 200, 0, 0, 1, 1);
  float *dout = rand_tensor(c.n_out, -1, 1);
  for (int run = 0; run < 3; run++) {
    mt_kernels_set_threads(run == 0 ? 1 : 2);
    memset(c.dqkv, 0, c.n_q * sizeof(float));
    ops->attn_forward(MT_DT_F32, &c.a, c.out, c.lse, c.q, c.k, c.v);
    ops->attn_backward(MT_DT_F32, &c.a, c.dq, c.dk, c.dv, dout, c.out, c.lse, c.q, c.k, c.v);
    res[run][0] = malloc(c.n_out * sizeof(float));
    res[run][1] = malloc(c.n_lse * sizeof(float));
    res[run][2] = malloc(c.n_q * sizeof(float));
    memcpy(res[run][0], c.out, c.n_out * sizeof(float));
    memcpy(res[run][1], c.lse, c.n_lse * sizeof(float));
    memcpy(res[run][2], c.dqkv, c.n_q * sizeof(float));
  }
  size_t n[3] = {c.n_out, c.n_lse, c.n_q};
  int same_threads = 1, same_runs = 1;
  for (int k = 0; k < 3; k++) {
    same_threads &= memcmp(res[0][k], res[1][k], n[k] * sizeof(float)) == 0;
    same_runs &= memcmp(res[1][k], res[2][k], n[k] * sizeof(float)) == 0;
  }
  mt_check_true("out, lse, dqkv: same bits at 1 and 2 threads", same_threads);
  mt_check_true("out, lse, dqkv: same bits twice at 2 threads", same_runs);
  for (int run = 0; run < 3; run++)
    for (int k = 0; k < 3; k++) free(res[run][k]);
  free(dout);
  case_free(&c);
  mt_kernels_set_threads(saved);
}

static void test_copy_2d(void) {
  printf("strided copies\n");
  float *src = rand_tensor(7 * 12, -1, 1), *dst = rand_tensor(7 * 5, -1, 1);
  float *before = malloc(7 * 5 * sizeof(float));
  memcpy(before, dst, 7 * 5 * sizeof(float));
  ops->copy_2d(MT_DT_F32, dst, 5, src + 4, 12, 7, 3);
  int ok = 1;
  for (int r = 0; r < 7; r++)
    for (int c = 0; c < 5; c++)
      ok &= dst[r * 5 + c] == (c < 3 ? src[r * 12 + 4 + c] : before[r * 5 + c]);
  mt_check_true("copy_2d writes the columns asked for, nothing else", ok);
  memcpy(before, dst, 7 * 5 * sizeof(float));
  ops->add_2d(MT_DT_F32, dst + 1, 5, src, 12, 7, 4);
  ok = 1;
  for (int r = 0; r < 7; r++)
    for (int c = 0; c < 5; c++)
      ok &= dst[r * 5 + c] == (c >= 1 ? before[r * 5 + c] + src[r * 12 + c - 1] : before[r * 5 + c]);
  mt_check_true("add_2d adds the columns asked for, nothing else", ok);
  free(src), free(dst), free(before);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  g_rng = 0x2545F4914F6CDD1Dull; /* this test's inputs */
  ops = mt_ops_cpu();
  mt_kernels_set_threads(2);
  test_against_reference();
  test_against_old_kernel();
  test_merge(1);
  test_merge(0);
  test_finite_differences();
  test_determinism();
  test_copy_2d();
  MPI_Finalize();
  return mt_check_summary("test_attention");
}
