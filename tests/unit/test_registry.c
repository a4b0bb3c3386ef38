/* test_registry: placement on every axis, from the registry alone (one
 * process; every rank simulated by building its registry).
 *
 *   - N-d tensors on two axes: an expert tensor E x out x in (4 x 6 x 8)
 *     sharded over ep = 2 on dim 0 and over tp = 3 on dim 1: each rank holds
 *     (2, 2, 8), and over the 6 ranks the local elements cover every global
 *     element exactly once; a dim sharded on both axes, or not divisible,
 *     is refused with the tensor's name;
 *   - units: the GPT registers n_layer + 2 units (embeddings, blocks, final
 *     LN) in flat order; registering a layer's tensors apart is refused;
 *   - the dp placement for zero 0..3 on dp = 3 (tiny with several buckets):
 *     buckets tile the flat buffer from the end, the dp ranks' parts of each
 *     bucket tile it exactly once, ZeRO-2 buckets hold whole units and ZeRO-3
 *     one unit each, zero 0 and 1 cut the same buckets, shard_numel is the
 *     rank's parts (zero >= 1) or everything (zero 0);
 *   - initial values by the registry's init rules: LayerNorm weights 1,
 *     biases 0, the padding rows of a vocabulary padded for tp 0, and every
 *     element a pure function of its global index (tp = 1 and tp = 2 give
 *     bitwise the same logical tensor).
 * Exits 1 naming every failing check. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "model/model.h"

/* r's finalize refuses it with a message naming tensor `name` and saying
 * `why` (the check named `what`); r freed */
static void expect_refused(mt_registry *r, const char *name, const char *why, const char *what) {
  mt_err err = {0};
  MT_CHECK(mt_registry_finalize(r, &err) != 0 && strstr(err.msg, name) && strstr(err.msg, why),
           "%s: '%s'", what, err.msg);
  mt_registry_free(r);
}

static void test_expert_tensor(void) {
  const int ep = 2, tp = 3;
  int64_t shape[3] = {4, 6, 8};
  const size_t total = 4 * 6 * 8;
  unsigned char *seen = calloc(total, 1);
  int bad_index = 0;
  for (int er = 0; er < ep; er++)
    for (int trk = 0; trk < tp; trk++) {
      mt_registry r;
      mt_err err = {0};
      const char *msg = err.msg;
      mt_registry_init(&r, tp, trk);
      mt_registry_set_ep(&r, ep, er);
      mt_tensor_spec s = {"experts.0.fc.weight", 3, shape, NULL, mt_sharded(1, 1), mt_sharded(0, 1),
                          0, -1, -1, MT_INIT_NORMAL, 0.02f, 1, NULL, 0, mt_replicated(), MT_GROUP_DP};
      mt_registry_add_spec(&r, &s);
      MT_CHECK(mt_registry_finalize(&r, &err) == 0, "expert tensor: %s", msg);
      const mt_tensor *t = &r.t[0];
      MT_CHECK(t->local_shape[0] == 2 && t->local_shape[1] == 2 && t->local_shape[2] == 8 &&
                   t->numel_local == 32,
               "ep %d tp %d: local shape %lld x %lld x %lld", er, trk, (long long)t->local_shape[0],
               (long long)t->local_shape[1], (long long)t->local_shape[2]);
      for (size_t j = 0; j < t->numel_local; j++) {
        size_t g = mt_tensor_global_index(t, j, tp);
        if (g >= total) bad_index = 1;
        else seen[g]++;
      }
      mt_registry_free(&r);
    }
  int once = !bad_index;
  for (size_t g = 0; g < total; g++) once &= seen[g] == 1;
  MT_CHECK(once, "expert tensor: the 6 ranks do not cover each element exactly once");
  free(seen);
  /* both axes on one dim; a dim that does not divide */
  mt_registry r;
  mt_registry_init(&r, 2, 0);
  mt_registry_set_ep(&r, 2, 0);
  mt_tensor_spec both = {"experts.0.proj.weight", 3, shape, NULL, mt_sharded(0, 1),
                         mt_sharded(0, 1), 0, -1, -1, MT_INIT_NORMAL, 0.02f, 1, NULL, 0, mt_replicated(), MT_GROUP_DP};
  mt_registry_add_spec(&r, &both);
  expect_refused(&r, "experts.0.proj.weight", "two axes", "a dim sharded over tp and ep");
  mt_registry_init(&r, 1, 0);
  mt_registry_set_ep(&r, 3, 0);
  mt_tensor_spec odd = {"experts.0.up.weight", 3, shape, NULL, mt_replicated(), mt_sharded(0, 1),
                        0, -1, -1, MT_INIT_NORMAL, 0.02f, 1, NULL, 0, mt_replicated(), MT_GROUP_DP};
  mt_registry_add_spec(&r, &odd);
  expect_refused(&r, "experts.0.up.weight", "ep = 3", "4 experts over ep = 3");
}

static void test_units(void) {
  mt_model_shape s;
  mt_model_preset(MT_PRESET_TINY, &s);
  mt_registry r;
  mt_err err = {0};
  const char *msg = err.msg;
  MT_CHECK(mt_gpt_register(&r, &s, 1, 0, 0, &err) == 0, "register: %s", msg);
  MT_CHECK(r.n_units == s.n_layer + 2, "%d units, expected %d", r.n_units, s.n_layer + 2);
  size_t off = 0;
  for (int u = 0; u < r.n_units; u++) {
    MT_CHECK(r.units[u].layer == u - 1 && r.units[u].begin == off,
             "unit %d: layer %d from %zu (expected layer %d from %zu)", u, r.units[u].layer,
             r.units[u].begin, u - 1, off);
    for (int i = r.units[u].t0; i < r.units[u].t1; i++)
      MT_CHECK(r.t[i].unit == u && r.t[i].layer == u - 1, "%s: unit %d", r.t[i].name, r.t[i].unit);
    off = r.units[u].end;
  }
  MT_CHECK(off == r.numel_local, "units end at %zu of %zu", off, r.numel_local);
  mt_registry_free(&r);
  /* layer 0, 1, then 0 again: refused */
  int64_t c = 4;
  mt_registry_init(&r, 1, 0);
  const char *names[3] = {"a.weight", "b.weight", "c.weight"};
  int layers[3] = {0, 1, 0};
  for (int i = 0; i < 3; i++) {
    mt_tensor_spec sp = {names[i], 1, &c, NULL, mt_replicated(), mt_replicated(), layers[i], -1,
                         -1, MT_INIT_ZEROS, 0.0f, 0, NULL, 0, mt_replicated(),
                         MT_GROUP_DP};
    mt_registry_add_spec(&r, &sp);
  }
  expect_refused(&r, "c.weight", "not registered together", "a layer registered apart");
}

static void test_dp_placement(void) {
  mt_model_shape s;
  mt_model_preset(MT_PRESET_TINY, &s);
  s.n_layer = 4;
  const int dp = 3;
  const size_t bucket_bytes = 8192; /* several buckets, some inside a layer */
  size_t z0_begin[64];
  int z0_n = 0;
  for (int z = 0; z <= 3; z++) {
    for (int rank = 0; rank < dp; rank++) {
      mt_registry r;
      mt_err err = {0};
      mt_gpt_register(&r, &s, 1, 0, 0, &err);
      mt_registry_set_dp(&r, dp, rank, 1, 0);
      mt_registry_shard(&r, z, bucket_bytes);
      size_t end = r.numel_local, shard = 0;
      unsigned char *owned = calloc(r.numel_local, 1);
      for (int k = 0; k < r.n_buckets; k++) {
        const mt_bucket_plan *b = &r.buckets[k];
        MT_CHECK(b->end == end && b->begin < b->end, "zero %d bucket %d: [%zu, %zu) after %zu", z,
                 k, b->begin, b->end, end);
        end = b->begin;
        size_t sum = 0;
        for (int q = 0; q < dp; q++) {
          MT_CHECK(b->displs[q] == (int)sum, "zero %d bucket %d: rank %d part starts at %d", z, k,
                   q, b->displs[q]);
          sum += (size_t)b->counts[q];
        }
        MT_CHECK(sum == b->end - b->begin, "zero %d bucket %d: parts sum to %zu of %zu", z, k, sum,
                 b->end - b->begin);
        for (int q = 0; q < dp; q++)
          for (int i = 0; i < b->counts[q]; i++) owned[b->begin + (size_t)b->displs[q] + i]++;
        MT_CHECK(b->shard_off == shard, "zero %d bucket %d: shard offset %zu, expected %zu", z, k,
                 b->shard_off, shard);
        shard += z ? (size_t)b->counts[rank] : b->end - b->begin;
        int unit_begin = 0, unit_end = 0;
        for (int u = 0; u < r.n_units; u++) {
          unit_begin |= r.units[u].begin == b->begin;
          unit_end |= r.units[u].end == b->end;
        }
        if (z >= 2)
          MT_CHECK(unit_begin && unit_end, "zero %d bucket %d [%zu, %zu) cuts a unit", z, k,
                   b->begin, b->end);
        if (z == 3)
          MT_CHECK(b->u1 - b->u0 == 1, "zero 3 bucket %d holds units [%d, %d)", k, b->u0, b->u1);
        if (z == 0 && rank == 0 && k < 64) z0_begin[z0_n++] = b->begin;
        if (z == 1 && rank == 0)
          MT_CHECK(k < z0_n && z0_begin[k] == b->begin, "zero 1 bucket %d differs from zero 0's",
                   k);
      }
      MT_CHECK(end == 0, "zero %d: buckets stop at %zu", z, end);
      int once = 1;
      for (size_t i = 0; i < r.numel_local; i++) once &= owned[i] == 1;
      MT_CHECK(once, "zero %d rank %d: the dp parts do not tile the flat buffer", z, rank);
      MT_CHECK(r.shard_numel == shard, "zero %d rank %d: shard_numel %zu, parts %zu", z, rank,
               r.shard_numel, shard);
      if (z == 2 || z == 3) MT_CHECK(r.n_buckets >= 2, "zero %d: %d buckets", z, r.n_buckets);
      free(owned);
      mt_registry_free(&r);
    }
  }
}

static void test_init_values(void) {
  mt_model_shape s;
  mt_model_preset(MT_PRESET_TINY, &s);
  s.vocab = 250;
  mt_registry r1, r2[2];
  mt_err err = {0};
  s.vocab_padded = mt_model_pad_vocab(s.vocab, 1);
  mt_gpt_register(&r1, &s, 1, 0, 0, &err);
  s.vocab_padded = mt_model_pad_vocab(s.vocab, 2);
  for (int q = 0; q < 2; q++) mt_gpt_register(&r2[q], &s, 2, q, 0, &err);
  const uint64_t seed = 77;
  for (int i = 0; i < r1.n; i++) {
    const mt_tensor *t = &r1.t[i];
    float *v1 = malloc(t->numel_local * sizeof(float));
    mt_registry_init_values(&r1, i, seed, 0, t->numel_local, v1);
    if (t->init == MT_INIT_ONES || t->init == MT_INIT_ZEROS) {
      float want = t->init == MT_INIT_ONES ? 1.0f : 0.0f;
      int ok = 1;
      for (size_t j = 0; j < t->numel_local; j++) ok &= v1[j] == want;
      MT_CHECK(ok, "%s: not all %g", t->name, want);
    }
    for (int q = 0; q < 2; q++) {
      const mt_tensor *t2 = &r2[q].t[i];
      float *v2 = malloc(t2->numel_local * sizeof(float));
      mt_registry_init_values(&r2[q], i, seed, 0, t2->numel_local, v2);
      int ok = 1, pad_ok = 1;
      for (size_t j = 0; j < t2->numel_local; j++) {
        size_t g = mt_tensor_global_index(t2, j, 2);
        size_t row = t2->ndim == 2 ? g / (size_t)t2->padded[1] : 0;
        if (t2->ndim == 2 && (int64_t)row >= t2->shape[0]) {
          pad_ok &= v2[j] == 0.0f;
          continue;
        }
        /* the same logical element at tp = 1 (row-major over its padded shape) */
        size_t g1 = t2->ndim == 2 ? row * (size_t)t->padded[1] + g % (size_t)t2->padded[1] : g;
        ok &= v2[j] == v1[g1];
      }
      MT_CHECK(ok, "%s tp rank %d: initial values differ from tp = 1's", t->name, q);
      MT_CHECK(pad_ok, "%s tp rank %d: padding rows are not 0", t->name, q);
      free(v2);
    }
    free(v1);
  }
  mt_registry_free(&r1);
  for (int q = 0; q < 2; q++) mt_registry_free(&r2[q]);
}

int main(void) {
  test_expert_tensor();
  test_units();
  test_dp_placement();
  test_init_values();
  return mt_check_summary("test_registry");
}
