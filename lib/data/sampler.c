/* The global sampler: sample g -> (epoch, position) -> window, as a pure
 * function, so any rank computes any sample in O(1) with no tables and no
 * communication, and a resumed run sees exactly the same stream.
 *
 * The shuffle of an epoch is a keyed bijection on [0, n_windows): a 4-round
 * Feistel network on the next power-of-two domain, made to fit the exact range
 * by cycle walking (re-encrypt until the value lands below n_windows; the
 * domain is < 2*n_windows, so on average fewer than two passes). */
#include "data/data_internal.h"

#include <stdlib.h>
#include <string.h>


enum { FEISTEL_ROUNDS = 4 };

static uint64_t low_bits(int w) { return w >= 64 ? ~0ull : (1ull << w) - 1; }

/* One pass of the Feistel network on [0, 2^bits). The two halves may differ
 * by one bit (odd bits): each round maps (L: lw bits, R: rw bits) to
 * (R, L ^ F(R)), which swaps the widths; after an even number of rounds they
 * are back in place. Each round is invertible, so the pass is a bijection. */
static uint64_t feistel(uint64_t x, int bits, const uint64_t key[FEISTEL_ROUNDS]) {
  int lw = bits / 2, rw = bits - lw; /* widths of the high (L) and low (R) halves */
  for (int r = 0; r < FEISTEL_ROUNDS; r++) {
    uint64_t left = x >> rw, right = x & low_bits(rw);
    uint64_t new_right = left ^ (mt_splitmix64(key[r] ^ right) & low_bits(lw));
    x = (right << lw) | new_right;
    int t = lw;
    lw = rw;
    rw = t;
  }
  return x;
}

/* perm_{seed,epoch}(i): a bijection on [0, n). */
static uint64_t keyed_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t i) {
  if (n <= 1) return 0;
  int bits = 2; /* at least one bit per half */
  while (bits < 63 && (1ull << bits) < n) bits++;
  uint64_t key[FEISTEL_ROUNDS];
  uint64_t base = mt_splitmix64(seed ^ mt_splitmix64(epoch ^ 0x6d657368ull /* "mesh" */));
  for (int r = 0; r < FEISTEL_ROUNDS; r++) key[r] = mt_splitmix64(base + (uint64_t)r);
  uint64_t x = i;
  do x = feistel(x, bits, key);
  while (x >= n);
  return x;
}

uint64_t mt_keyed_permute(uint64_t n, uint64_t seed, uint64_t epoch, uint64_t i) {
  return keyed_permute(n, seed, epoch, i);
}

int mt_sampler_init(mt_sampler *s, const mt_dataset *ds, int T, uint64_t seed, mt_err *e) {
  return mt_sampler_init_shards(s, ds, 1, T, seed, e) != 0 ? mt_err_pass(e) : 0;
}

int mt_sampler_init_shards(mt_sampler *s, const mt_dataset *shards, int n_shards, int T,
                           uint64_t seed, mt_err *e) {
  memset(s, 0, sizeof *s);
  const char *what = n_shards > 0 ? shards[0].path : "(no shards)";
  if (T < 1) {
    mt_err_set(e, "%s: sequence length T = %d must be >= 1", what, T);
    return -1;
  }
  if (n_shards < 1) {
    mt_err_set(e, "%s: no token files", what);
    return -1;
  }
  /* windows are cut per shard (a window never spans two files); first[i] is
   * the first window of shard i in the source's numbering */
  uint64_t *first = n_shards > 1 ? mt_calloc((size_t)n_shards + 1, sizeof *first) : NULL;
  uint64_t n_windows = 0;
  for (int i = 0; i < n_shards; i++) {
    size_t ntok = mt_dataset_ntokens(&shards[i]);
    uint64_t w = ntok > 0 ? (uint64_t)(ntok - 1) / (uint64_t)T : 0;
    if (first) first[i] = n_windows;
    if (w == 0) s->n_short++;
    n_windows += w;
  }
  if (first) first[n_shards] = n_windows;
  if (n_windows < 1) {
    if (n_shards == 1)
      mt_err_set(e, "%s: %zu tokens is shorter than one sequence of T+1 = %d tokens", what,
                 mt_dataset_ntokens(&shards[0]), T + 1);
    else
      mt_err_set(e, "%s and the other %d token files: none holds one sequence of T+1 = %d "
                    "tokens (no window)", what, n_shards - 1, T + 1);
    free(first);
    return -1;
  }
  s->ds = &shards[0];
  s->shards = shards;
  s->n_shards = n_shards;
  s->first = first;
  s->T = T;
  s->seed = seed;
  s->n_windows = n_windows;
  return 0;
}

void mt_sampler_init_synthetic(mt_sampler *s, int vocab, int T, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->T = T;
  s->seed = seed;
  s->n_windows = 1ull << 40;
  s->synthetic_vocab = vocab;
}

void mt_sampler_free(mt_sampler *s) {
  if (!s) return;
  free(s->first);
  memset(s, 0, sizeof *s);
}

uint64_t mt_sampler_window(const mt_sampler *s, uint64_t g) {
  uint64_t epoch = g / s->n_windows, i = g % s->n_windows;
  return keyed_permute(s->n_windows, s->seed, epoch, i);
}

/* the shard that holds window w, and w's index within it: a binary search
 * of the prefix sums (shards without windows have first[i] == first[i+1]) */
static const mt_dataset *shard_of(const mt_sampler *s, uint64_t *w) {
  if (!s->first) return s->ds;
  int lo = 0, hi = s->n_shards - 1; /* the last shard i with first[i] <= w */
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (s->first[mid] <= *w) lo = mid;
    else hi = mid - 1;
  }
  *w -= s->first[lo];
  return &s->shards[lo];
}

typedef struct {
  const mt_sampler *s;
  const mt_dataset *ds;
  uint64_t w; /* the window within ds */
  int *inputs, *targets;
} window_args;

/* the tokens of window w: read from the mapping (under the guard) */
static void copy_window(void *arg) {
  const window_args *a = arg;
  const mt_dataset *ds = a->ds;
  size_t T = (size_t)a->s->T, start = ds->begin + (size_t)a->w * T;
  int *inputs = a->inputs, *targets = a->targets;
  if (ds->bytes) {
    const uint8_t *p = ds->bytes + start;
    for (size_t t = 0; t < T; t++) {
      inputs[t] = p[t];
      targets[t] = p[t + 1];
    }
  } else if (ds->u16) {
    const uint16_t *p = ds->u16 + start;
    for (size_t t = 0; t < T; t++) {
      inputs[t] = p[t];
      targets[t] = p[t + 1];
    }
  } else { /* u32: ids < vocab <= INT_MAX, checked by mt_dataset_validate */
    const uint32_t *p = ds->u32 + start;
    for (size_t t = 0; t < T; t++) {
      inputs[t] = (int)p[t];
      targets[t] = (int)p[t + 1];
    }
  }
}

void mt_sampler_get_window(const mt_sampler *s, uint64_t w, int *inputs, int *targets) {
  if (s->synthetic_vocab > 0) { /* T+1 tokens of (seed, w), the targets shifted by one */
    uint64_t h = mt_splitmix64(s->seed ^ mt_splitmix64(w));
    int prev = (int)(h % (uint64_t)s->synthetic_vocab);
    for (int t = 0; t < s->T; t++) {
      h = mt_splitmix64(h);
      int next = (int)(h % (uint64_t)s->synthetic_vocab);
      inputs[t] = prev;
      targets[t] = next;
      prev = next;
    }
    return;
  }
  if (w >= s->n_windows)
    mt_die("%s: window %llu out of range (%llu windows)", s->ds->path, (unsigned long long)w,
           (unsigned long long)s->n_windows);
  uint64_t local = w;
  const mt_dataset *ds = shard_of(s, &local);
  window_args a = {.s = s, .ds = ds, .w = local, .inputs = inputs, .targets = targets};
  if (mt_data_guarded(ds, copy_window, &a) != 0) { /* the file was cut short */
    memset(inputs, 0, (size_t)s->T * sizeof(int));
    memset(targets, 0, (size_t)s->T * sizeof(int));
  }
}

void mt_sampler_get(const mt_sampler *s, uint64_t g, int *inputs, int *targets) {
  mt_sampler_get_window(s, mt_sampler_window(s, g), inputs, targets);
}
