/* test_gqa_spread: grouped-query attention's fused key/value spread
 * (kv_spread, kv_spread_backward) against the unfused ops the model used
 * before them: copy_2d of q and of each query head's key and value head;
 * backward zero, then add_2d of q and of each head onto the key/value head
 * it came from.
 *
 * Shapes are (n_head, n_kv_head, tp, tp rank, head size) with the local
 * heads and the op's h0 derived as the model does (lib/model/block.c's
 * kv_h0), while the reference maps each local query head to its local
 * key/value head by the formula the model used before: global head
 * rank NH_local + h over the group size, less the rank's first local
 * key/value head where tp splits them. Covered: llama-124m's 12/4 on one
 * rank; tp splitting the key/value heads (2 and 4 ranks); tp not dividing
 * them (every rank holds them all and uses a window, which may cut a group
 * and leave heads unused: their gradient must be 0); multi-query (one
 * key/value head) with and without tp; head sizes not a multiple of the
 * CPU's 64-channel chunk (24, 80) and two chunks (128); group 1.
 *
 *   forward: the same bits in fp32 and bf16 (copies)
 *   backward fp32: the same bits (each element 0 + its terms in head order
 *            in fp32 either way)
 *   backward bf16: the fused op rounds the fp32 sum once, the unfused one
 *            after every head. Checked: the fused result is exactly the
 *            fp32 sum rounded once (a scalar reference here); elements of at
 *            most two terms (q, group <= 2, window-cut groups) the same bits
 *            as before; every element within k u S of before (k terms, S the
 *            sum of their magnitudes, u = 2^-8: the unfused path's k - 1
 *            roundings and the fused one's one). The largest difference is
 *            printed in units of u S (about 2 at group 3, 2.8 at group 4).
 * With rope's angles (cs): kv_spread against rope on c, then kv_spread,
 * and kv_spread_backward against kv_spread_backward, then rope inverse on
 * dc, the same bits in fp32 and bf16 (the same arithmetic in one pass),
 * c left as it was; rows at positions given and at their index.
 * Without q (with_q 0, ring context parallelism's compact K|V): the bits
 * of the with-q op's key/value columns both ways, with rope and without.
 * Outputs start as NaN, so an element the op does not write fails. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "../check.h"
#include "../test_rng.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mt_ops *ops;

typedef struct {
  const char *what;
  int n_head, n_kv, tp, rank, hs;
} shape;

/* the local view of one rank, as lib/model derives it */
typedef struct {
  int nh, nkv, hs, group, h0, split, rank;
  size_t Cl, Ckv, W; /* q channels, one of k/v's channels, c's row */
} local;

static local local_of(const shape *s) {
  local l = {.hs = s->hs, .group = s->n_head / s->n_kv, .rank = s->rank};
  l.nh = s->n_head / s->tp;
  l.split = s->n_kv % s->tp == 0;
  l.nkv = l.split ? s->n_kv / s->tp : s->n_kv;
  l.h0 = l.split ? 0 : s->rank * l.nh;
  l.Cl = (size_t)l.nh * l.hs, l.Ckv = (size_t)l.nkv * l.hs, l.W = l.Cl + 2 * l.Ckv;
  return l;
}

/* the pre-fusion mapping: local query head h -> local key/value head */
static int kv_of(const local *l, int h) {
  const int kv = (l->rank * l->nh + h) / l->group;
  return l->split ? kv - l->rank * l->nkv : kv;
}

static size_t es_of(mt_dtype t) { return mt_dtype_bytes(t); }
static void *at(mt_dtype t, void *p, size_t i) { return (char *)p + i * es_of(t); }

/* n elements of t in [-1, 1) */
static void *rnd_t(mt_dtype t, size_t n) {
  void *x = test_alloc(n * es_of(t));
  for (size_t i = 0; i < n; i++) {
    float f = (float)rng_uniform_f64(-1.0, 1.0);
    if (t == MT_DT_F32) ((float *)x)[i] = f;
    else ((mt_bf16 *)x)[i] = mt_bf16_from_f32(f);
  }
  return x;
}

static void *nans(mt_dtype t, size_t n) {
  void *x = test_alloc(n * es_of(t));
  for (size_t i = 0; i < n; i++) {
    if (t == MT_DT_F32) ((float *)x)[i] = NAN;
    else ((mt_bf16 *)x)[i] = mt_bf16_from_f32(NAN);
  }
  return x;
}

static float get(mt_dtype t, const void *x, size_t i) {
  return t == MT_DT_F32 ? ((const float *)x)[i] : mt_bf16_to_f32(((const mt_bf16 *)x)[i]);
}

/* the unfused forward and backward, as lib/model/block.c had them */
static void spread_unfused(mt_dtype t, const local *l, void *qkv, void *c, size_t rows) {
  ops->copy_2d(t, qkv, 3 * l->Cl, c, l->W, rows, l->Cl);
  for (int h = 0; h < l->nh; h++)
    for (int kv = 0; kv < 2; kv++)
      ops->copy_2d(t, at(t, qkv, (1 + kv) * l->Cl + (size_t)h * l->hs), 3 * l->Cl,
                   at(t, c, l->Cl + kv * l->Ckv + (size_t)kv_of(l, h) * l->hs), l->W, rows,
                   (size_t)l->hs);
}

static void spread_backward_unfused(mt_dtype t, const local *l, void *dc, void *dqkv,
                                    size_t rows) {
  ops->zero(t, dc, rows * l->W);
  ops->add_2d(t, dc, l->W, dqkv, 3 * l->Cl, rows, l->Cl);
  for (int h = 0; h < l->nh; h++)
    for (int kv = 0; kv < 2; kv++)
      ops->add_2d(t, at(t, dc, l->Cl + kv * l->Ckv + (size_t)kv_of(l, h) * l->hs), l->W,
                  at(t, dqkv, (1 + kv) * l->Cl + (size_t)h * l->hs), 3 * l->Cl, rows,
                  (size_t)l->hs);
}

static void run_shape(const shape *s, mt_dtype t, size_t rows) {
  const local l = local_of(s);
  const size_t nq = rows * 3 * l.Cl, nc = rows * l.W, es = es_of(t);
  char what[160];
  snprintf(what, sizeof what, "%s %s (nh %d nkv %d group %d h0 %d hs %d)", s->what,
           t == MT_DT_BF16 ? "bf16" : "fp32", l.nh, l.nkv, l.group, l.h0, l.hs);
  MT_CHECK(l.nh * s->tp == s->n_head && s->n_head % s->n_kv == 0, "%s: a bad test shape", what);
  for (int h = 0; h < l.nh; h++) /* the op's mapping is the model's */
    MT_CHECK((l.h0 + h) / l.group == kv_of(&l, h) && kv_of(&l, h) < l.nkv,
             "%s: query head %d reads %d, the model's %d", what, h, (l.h0 + h) / l.group,
             kv_of(&l, h));

  /* forward */
  void *c = rnd_t(t, nc), *qkv = nans(t, nq), *qkv_ref = nans(t, nq);
  ops->kv_spread(t, qkv, c, rows, l.nh, l.nkv, l.hs, l.h0, l.group, 1, NULL, NULL, 0);
  spread_unfused(t, &l, qkv_ref, c, rows);
  mt_check_true(what, memcmp(qkv, qkv_ref, nq * es) == 0);

  /* backward */
  void *dqkv = rnd_t(t, nq), *dc = nans(t, nc), *dc_ref = nans(t, nc);
  ops->kv_spread_backward(t, dc, dqkv, rows, l.nh, l.nkv, l.hs, l.h0, l.group, 1, NULL, NULL, 0);
  spread_backward_unfused(t, &l, dc_ref, dqkv, rows);
  if (t == MT_DT_F32) {
    mt_check_true("  backward: the same bits", memcmp(dc, dc_ref, nc * es) == 0);
  } else {
    size_t not_once = 0, short_differ = 0, differ = 0, over = 0;
    double worst_units = 0.0; /* |fused - unfused| / (u S) */
    for (size_t r = 0; r < rows; r++)
      for (size_t col = 0; col < l.W; col++) {
        /* this element's terms: its q element, or a channel of the query heads of a
         * key/value head */
        float sum = 0.0f;
        double mag = 0.0;
        int k = 0;
        const size_t drow = r * 3 * l.Cl;
        if (col < l.Cl) {
          sum += get(t, dqkv, drow + col), mag = fabs(sum), k = 1;
        } else {
          const size_t kv = (col - l.Cl) / l.Ckv, j = (col - l.Cl) % l.Ckv / (size_t)l.hs;
          const size_t d = col % (size_t)l.hs;
          for (int h = 0; h < l.nh; h++) {
            if ((size_t)kv_of(&l, h) != j) continue;
            float x = get(t, dqkv, drow + (1 + kv) * l.Cl + (size_t)h * l.hs + d);
            sum += x, mag += fabs(x), k++;
          }
        }
        const size_t i = r * l.W + col;
        const float got = get(t, dc, i), was = get(t, dc_ref, i);
        if (!(got == mt_bf16_to_f32(mt_bf16_from_f32(sum)))) not_once++;
        if (k <= 2 && ((const mt_bf16 *)dc)[i] != ((const mt_bf16 *)dc_ref)[i]) short_differ++;
        const double diff = fabs((double)got - was), tol = k * ldexp(mag, -8);
        if (diff != 0.0) differ++;
        if (!(diff <= tol)) over++;
        if (diff != 0.0) worst_units = mt_worst(worst_units, diff / ldexp(mag, -8));
      }
    printf("  bf16 backward: %zu of %zu elements differ from the unfused path, by at most "
           "%.3f u S\n", differ, nc, worst_units);
    mt_check_err("  backward: the fp32 sum rounded once (elements not)", (double)not_once, 0);
    mt_check_err("  backward: <= 2 terms, the same bits (elements not)", (double)short_differ,
                 0);
    mt_check_err("  backward: within k u S of the unfused path (elements not)", (double)over, 0);
  }
  free(c), free(qkv), free(qkv_ref), free(dqkv), free(dc), free(dc_ref);
}

/* rope's angles for positions 0..96, head size hs */
static float *rope_table(int hs) {
  const int P = 97;
  float *cs = test_alloc((size_t)P * hs * sizeof(float));
  for (int p = 0; p < P; p++)
    for (int d = 0; d < hs / 2; d++) {
      double a = p * pow(10000.0, -2.0 * d / hs);
      cs[(size_t)p * hs + d] = (float)cos(a), cs[(size_t)p * hs + hs / 2 + d] = (float)sin(a);
    }
  return cs;
}

/* with_q 0 (ring context parallelism's compact K|V): the layouts without
 * q give the bits of the with-q op's key/value columns, both ways, with
 * rope's turn (cs) and without */
static void run_no_q(const shape *s, mt_dtype t, size_t rows, int rope) {
  const local l = local_of(s);
  const size_t es = es_of(t), nq = rows * 3 * l.Cl, nc = rows * l.W;
  const size_t wkv = 2 * l.Ckv, wh = 2 * l.Cl; /* the rows without q */
  float *cs = rope ? rope_table(l.hs) : NULL;
  char what[160];
  snprintf(what, sizeof what, "%s %s, no q%s: kv_spread = the with-q columns (bits)", s->what,
           t == MT_DT_BF16 ? "bf16" : "fp32", rope ? ", rope" : "");
  void *c = rnd_t(t, nc), *c_kv = test_alloc(rows * wkv * es);
  ops->copy_2d(t, c_kv, wkv, at(t, c, l.Cl), l.W, rows, wkv);
  void *qkv = nans(t, nq), *kv = nans(t, rows * wh), *kv_ref = test_alloc(rows * wh * es);
  ops->kv_spread(t, qkv, c, rows, l.nh, l.nkv, l.hs, l.h0, l.group, 1, cs, NULL, (int)rows);
  ops->kv_spread(t, kv, c_kv, rows, l.nh, l.nkv, l.hs, l.h0, l.group, 0, cs, NULL, (int)rows);
  ops->copy_2d(t, kv_ref, wh, at(t, qkv, l.Cl), 3 * l.Cl, rows, wh);
  mt_check_true(what, !memcmp(kv, kv_ref, rows * wh * es));
  void *dqkv = rnd_t(t, nq), *dkv = test_alloc(rows * wh * es);
  ops->copy_2d(t, dkv, wh, at(t, dqkv, l.Cl), 3 * l.Cl, rows, wh);
  void *dc = nans(t, nc), *dc_kv = nans(t, rows * wkv), *dc_ref = test_alloc(rows * wkv * es);
  ops->kv_spread_backward(t, dc, dqkv, rows, l.nh, l.nkv, l.hs, l.h0, l.group, 1, cs, NULL,
                          (int)rows);
  ops->kv_spread_backward(t, dc_kv, dkv, rows, l.nh, l.nkv, l.hs, l.h0, l.group, 0, cs, NULL,
                          (int)rows);
  ops->copy_2d(t, dc_ref, wkv, at(t, dc, l.Cl), l.W, rows, wkv);
  mt_check_true("  backward: the with-q op's key/value columns (bits)",
                !memcmp(dc_kv, dc_ref, rows * wkv * es));
  free(cs), free(c), free(c_kv), free(qkv), free(kv), free(kv_ref), free(dqkv), free(dkv);
  free(dc), free(dc_kv), free(dc_ref);
}

/* the fused turn (cs) against rope, then the spread (backward: the spread,
 * then rope inverse); rows at positions pos (NULL: r % rows) */
static void run_rope(const shape *s, mt_dtype t, size_t rows, const int *pos) {
  const local l = local_of(s);
  const size_t nq = rows * 3 * l.Cl, nc = rows * l.W, es = es_of(t);
  const int hs = l.hs;
  float *cs = rope_table(hs);
  char what[160];
  snprintf(what, sizeof what, "%s %s, rope%s: kv_spread = rope, then kv_spread (bits)", s->what,
           t == MT_DT_BF16 ? "bf16" : "fp32", pos ? " at positions" : "");
  void *c = rnd_t(t, nc), *c_was = test_alloc(nc * es), *turned = test_alloc(nc * es);
  memcpy(c_was, c, nc * es), memcpy(turned, c, nc * es);
  void *qkv = nans(t, nq), *qkv_ref = nans(t, nq);
  ops->kv_spread(t, qkv, c, rows, l.nh, l.nkv, hs, l.h0, l.group, 1, cs, pos, (int)rows);
  ops->rope(t, turned, l.W, 1, (int)rows, l.nh + l.nkv, hs, cs, pos, 0);
  ops->kv_spread(t, qkv_ref, turned, rows, l.nh, l.nkv, hs, l.h0, l.group, 1, NULL, NULL, 0);
  mt_check_true(what, !memcmp(qkv, qkv_ref, nq * es) && !memcmp(c, c_was, nc * es));
  void *dqkv = rnd_t(t, nq), *dc = nans(t, nc), *dc_ref = nans(t, nc);
  ops->kv_spread_backward(t, dc, dqkv, rows, l.nh, l.nkv, hs, l.h0, l.group, 1, cs, pos, (int)rows);
  ops->kv_spread_backward(t, dc_ref, dqkv, rows, l.nh, l.nkv, hs, l.h0, l.group, 1, NULL, NULL, 0);
  ops->rope(t, dc_ref, l.W, 1, (int)rows, l.nh + l.nkv, hs, cs, pos, 1);
  mt_check_true("  backward: = kv_spread_backward, then rope inverse (bits)",
                !memcmp(dc, dc_ref, nc * es));
  free(cs), free(c), free(c_was), free(turned), free(qkv), free(qkv_ref), free(dqkv), free(dc);
  free(dc_ref);
}

int main(void) {
  g_rng = 0x51A7D0C5u;
  ops = mt_ops_cpu();
  mt_kernels_set_threads(2);
  printf("test_gqa_spread: %s, %d threads\n", ops->name, mt_kernels_threads());
  static const shape shapes[] = {
      {"llama-124m", 12, 4, 1, 0, 64},
      {"tp 2 splits kv, rank 1", 12, 4, 2, 1, 64},
      {"tp 4 splits kv, rank 3", 16, 4, 4, 3, 32},
      {"tp 3 holds all kv, rank 1", 12, 4, 3, 1, 64},
      {"tp 3 holds all kv, rank 2", 12, 4, 3, 2, 24},
      {"multi-query", 8, 1, 1, 0, 80},
      {"multi-query tp 2, rank 1", 8, 1, 2, 1, 24},
      {"32/8 tp 2, rank 0", 32, 8, 2, 0, 128},
      {"group 1", 4, 4, 1, 0, 16},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    run_shape(&shapes[i], MT_DT_F32, 67);
    run_shape(&shapes[i], MT_DT_BF16, 67);
  }
  int pos[67];
  for (int r = 0; r < 67; r++) pos[r] = (r * 37 + 5) % 97;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int ti = 0; ti < 2; ti++) {
      run_rope(&shapes[i], ti ? MT_DT_BF16 : MT_DT_F32, 67, NULL);
      run_rope(&shapes[i], ti ? MT_DT_BF16 : MT_DT_F32, 67, pos);
    }
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int ti = 0; ti < 2; ti++)
      for (int rope = 0; rope < 2; rope++)
        run_no_q(&shapes[i], ti ? MT_DT_BF16 : MT_DT_F32, 67, rope);
  return mt_check_summary("test_gqa_spread");
}
