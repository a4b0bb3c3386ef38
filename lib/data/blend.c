/* A weighted blend of sources: which source sample g comes from, decided
 * from g alone (no table, no state), then that source's own sampler.
 *
 * The schedule nests Bresenham's line: with f the fixed-point share of the
 * first source, sample j of the stream goes to it when floor((j+1) f)
 * exceeds floor(j f), and it is then that source's sample floor(j f); else
 * it is sample j - floor(j f) of the stream the next sources share, which
 * the next source splits the same way with its share of what is left. The
 * last source takes what reaches it. O(sources) per sample, exact integer
 * arithmetic (128-bit products), so every rank and every resume agrees. */
#include "data/data_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { FRAC_BITS = 32 };

/* name the source in front of e's message */
static void name_source(mt_err *e, const char *name) {
  char msg[sizeof e->msg + MT_SOURCE_NAME_MAX + 32];
  snprintf(msg, sizeof msg, "data.blend source '%s': %s", name, e->msg);
  snprintf(e->msg, sizeof e->msg, "%.*s", (int)sizeof e->msg - 1, msg);
}

int mt_blend_init(mt_blend *b, const mt_sources *ss, int T, uint64_t seed, mt_err *e) {
  memset(b, 0, sizeof *b);
  if (ss->n < 1) {
    mt_err_set(e, "data: no sources");
    return -1;
  }
  b->n = ss->n;
  b->src = mt_calloc((size_t)ss->n, sizeof *b->src);
  b->frac = mt_calloc((size_t)ss->n, sizeof *b->frac);
  double left = 1.0; /* the weight of this source and the ones after it */
  for (int i = 0; i < ss->n; i++) {
    const mt_source *src = &ss->src[i];
    /* each source its own key; the first keeps the run's seed, so one
     * source reads the windows a single file always has */
    uint64_t key = i == 0 ? seed : mt_splitmix64(seed ^ (0x626c656e64ull + (uint64_t)i));
    if (src->synthetic_vocab > 0)
      mt_sampler_init_synthetic(&b->src[i], src->synthetic_vocab, T, key);
    else if (mt_sampler_init_shards(&b->src[i], src->train, src->n_train, T, key, e) != 0) {
      if (ss->n > 1) name_source(e, src->name);
      mt_blend_free(b);
      return mt_err_pass(e);
    }
    double f = i == ss->n - 1 || left <= 0 ? 1.0 : src->weight / left;
    if (f > 1.0) f = 1.0;
    b->frac[i] = (uint64_t)(f * (double)(1ull << FRAC_BITS) + 0.5);
    left -= src->weight;
  }
  return 0;
}

void mt_blend_free(mt_blend *b) {
  if (!b) return;
  for (int i = 0; b->src && i < b->n; i++) mt_sampler_free(&b->src[i]);
  free(b->src);
  free(b->frac);
  memset(b, 0, sizeof *b);
}

/* floor(j * f / 2^32), exactly */
static uint64_t share_of(uint64_t j, uint64_t f) {
  return (uint64_t)(((unsigned __int128)j * f) >> FRAC_BITS);
}

int mt_blend_source(const mt_blend *b, uint64_t g, uint64_t *k) {
  uint64_t j = g; /* g's index in the stream the sources from i on share */
  for (int i = 0; i < b->n - 1; i++) {
    uint64_t before = share_of(j, b->frac[i]);
    if (share_of(j + 1, b->frac[i]) > before) {
      *k = before;
      return i;
    }
    j -= before;
  }
  *k = j;
  return b->n - 1;
}

uint64_t mt_blend_window(const mt_blend *b, uint64_t g, int *source) {
  uint64_t k = 0;
  int s = mt_blend_source(b, g, &k);
  if (source) *source = s;
  return mt_sampler_window(&b->src[s], k);
}

void mt_blend_get(const mt_blend *b, uint64_t g, int *inputs, int *targets) {
  int s = 0;
  uint64_t w = mt_blend_window(b, g, &s);
  mt_sampler_get_window(&b->src[s], w, inputs, targets);
}

uint64_t mt_blend_windows(const mt_blend *b) {
  uint64_t n = 0;
  for (int i = 0; i < b->n; i++) n += b->src[i].n_windows;
  return n;
}
