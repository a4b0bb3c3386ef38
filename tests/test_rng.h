/* The tests' random numbers: the same sequence on every machine, from
 * splitmix64 (mt_splitmix64, lib/core). Include once, from the program's one
 * source file (or a header only it includes): the state is the program's.
 *
 *   g_rng                   the state; the program seeds it in main, before
 *                           its first draw (g_rng = <its seed>;). The seeds
 *                           are the tests' own: their inputs, and so the
 *                           margins of their tolerances, come from them.
 *   rng_next()              the next 64 bits: the k-th draw from seed s is
 *                           mt_splitmix64(s + k * 0x9E3779B97F4A7C15)
 *   rng_uniform(lo, hi)     a float in [lo, hi) from the top 53 bits (hi - lo
 *                           taken in float, the rest in double, one rounding)
 *   rng_uniform_f64(lo, hi) the same in double
 *   rand_tensor(n, lo, hi)  n such floats, in a new buffer (free it)
 *
 * The GPU comparisons (tests/gpu) draw another sequence over the same
 * state, kept as they have always drawn it (their tolerances were measured
 * on it): each draw replaces the state by mt_splitmix64(state) and takes its
 * top 24 bits.
 *   urand(lo, hi)           a float in [lo, hi) (in float arithmetic)
 *   rnd(n, lo, hi)          n such floats, in a new buffer (free it)
 *
 * And a generator without state, for values that must not depend on the
 * order they are drawn in (the same parameter in any layout):
 *   rng_hash_sym(key, i)    a double in [-1, 1), a pure function of (key, i) */
#ifndef MT_TESTS_RNG_H
#define MT_TESTS_RNG_H

#include "core/core.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t g_rng; /* the program seeds it */

static inline uint64_t rng_next(void) {
  uint64_t z = mt_splitmix64(g_rng);
  g_rng += 0x9E3779B97F4A7C15ULL;
  return z;
}

/* [0, 1): the top 53 bits over 2^53 (exact in double) */
static inline double rng_unit(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }

static inline float rng_uniform(float lo, float hi) { return (float)(lo + (hi - lo) * rng_unit()); }

static inline double rng_uniform_f64(double lo, double hi) { return lo + (hi - lo) * rng_unit(); }

/* n floats (at least one allocated); out of memory ends the test */
static inline float *rng_alloc_floats(size_t n) {
  float *x = malloc((n ? n : 1) * sizeof(float));
  if (!x) {
    fprintf(stderr, "out of memory (%zu floats of random input)\n", n);
    exit(1);
  }
  return x;
}

static inline float *rand_tensor(size_t n, float lo, float hi) {
  float *x = rng_alloc_floats(n);
  for (size_t i = 0; i < n; i++) x[i] = rng_uniform(lo, hi);
  return x;
}

static inline float urand(float lo, float hi) {
  g_rng = mt_splitmix64(g_rng);
  return lo + (hi - lo) * (float)((g_rng >> 40) * (1.0 / 16777216.0));
}

static inline float *rnd(size_t n, float lo, float hi) {
  float *x = rng_alloc_floats(n);
  for (size_t i = 0; i < n; i++) x[i] = urand(lo, hi);
  return x;
}

static inline double rng_hash_sym(uint64_t key, uint64_t i) {
  return (double)(mt_splitmix64(key ^ mt_splitmix64(i)) >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

#endif
