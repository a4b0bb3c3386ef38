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
 * addresses. The choices are kept as what makes them (tokens, experts, k,
 * skew) and made when the host reads them; mt_ops's moe_routing_id names
 * them, so the host may reuse what it derived from equal choices. */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, MAP_NORESERVE */
#include "kernels/kernels.h"

#include <math.h>
#include <pthread.h>
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
  unsigned route; /* a router's choices (g_routes[route - 1]), data NULL; 0: data */
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

/* the store's entry for key, empty (added where there is none) */
static entry *fresh(const void *key) {
  entry *e = find(key, 1);
  if (!e->key) g_store_n++;
  free(e->data);
  memset(e, 0, sizeof *e);
  e->key = key;
  return e;
}

/* bytes of src kept under key (replacing what was there) */
static void keep(const void *key, const void *src, size_t bytes) {
  entry *e = fresh(key);
  e->data = mt_malloc(bytes ? bytes : 1);
  e->bytes = bytes;
  if (src) memcpy(e->data, src, bytes);
}

static void make_choices(int *choice, unsigned route);

static void null_upload(void *dst, const void *host_src, size_t bytes) {
  if (bytes <= STORE_MAX_BYTES) keep(dst, host_src, bytes);
}

static void null_download(void *host_dst, const void *src, size_t bytes) {
  const entry *e = find(src, 0);
  size_t have = e ? (e->bytes < bytes ? e->bytes : bytes) : 0;
  if (have && e->route && have == e->bytes) {
    make_choices(host_dst, e->route);
  } else if (have && e->route) { /* a part of the choices: made whole, then cut */
    int *all = mt_malloc(e->bytes);
    make_choices(all, e->route);
    memcpy(host_dst, all, have);
    free(all);
  } else if (have) {
    memcpy(host_dst, e->data, have);
  }
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

/* every op of the lists, empty; the sums 0 (the losses and norms the host
 * reads) */
#define NULL_TYPED_(name, params, args)                                                     \
  static void null_##name(mt_dtype t, MT_OPS_UNPAREN params) {}
#define NULL_SUMS_(name, params, args)                                                      \
  static double null_##name(mt_dtype t, MT_OPS_UNPAREN params) { return 0.0; }
#define NULL_FIXED_(name, optional, params, args) static void null_##name params {}
MT_OPS_TYPED(NULL_TYPED_)
MT_OPS_TYPED_SUMS(NULL_SUMS_)
MT_OPS_FIXED(NULL_FIXED_)
static void null_sync(void) {}

/* the router's choices, round-robin over the experts (the host reads them) */
static double g_skew; /* the routing's Zipf exponent; 0: round-robin */
static double *g_cdf;  /* the cumulative shares over g_cdf_E experts at g_cdf_skew */
static int g_cdf_E;
static double g_cdf_skew;

void mt_ops_null_moe_skew(double skew) { g_skew = skew; }

/* expert e with probability (e + 1)^-s / H: the first e whose cumulative
 * share exceeds u in [0, 1) */
static int zipf_expert(double u, int E, double s) {
  if (g_cdf_E != E || g_cdf_skew != s) {
    free(g_cdf);
    g_cdf = mt_malloc((size_t)E * sizeof(double));
    double h = 0.0, c = 0.0;
    for (int e = 0; e < E; e++) h += g_cdf[e] = pow(e + 1.0, -s);
    for (int e = 0; e < E; e++) g_cdf[e] = c += g_cdf[e] / h;
    g_cdf[E - 1] = 1.0; /* (rounding) */
    g_cdf_E = E;
    g_cdf_skew = s;
  }
  int lo = 0, hi = E - 1; /* the first e with u < cdf[e] */
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (u < g_cdf[mid]) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* The routings made so far: route r (1-based) is g_routes[r - 1], N
 * tokens' k choices of E experts at skew (an entry of the store names its
 * route, so equal routes share a number: moe_routing_id) */
typedef struct {
  int N, E, k;
  double skew;
} route_shape;
static route_shape *g_routes;
static unsigned g_n_routes, g_routes_cap;

static unsigned route_of(int N, int E, int k, double skew) {
  for (unsigned r = 0; r < g_n_routes; r++)
    if (g_routes[r].N == N && g_routes[r].E == E && g_routes[r].k == k && g_routes[r].skew == skew)
      return r + 1;
  if (g_n_routes == g_routes_cap) {
    g_routes_cap = g_routes_cap ? 2 * g_routes_cap : 16;
    g_routes = realloc(g_routes, g_routes_cap * sizeof *g_routes);
    if (!g_routes) mt_die("null backend: out of memory (routes)");
  }
  g_routes[g_n_routes++] = (route_shape){N, E, k, skew};
  return g_n_routes;
}

/* route's choices, (N,k) */
static void make_choices(int *choice, unsigned route) {
  const route_shape *r = &g_routes[route - 1];
  const int E = r->E, k = r->k;
  const size_t n = (size_t)r->N * (size_t)k;
  if (r->skew <= 0.0) {
    for (size_t i = 0, e = 0; i < n; i++, e = e + 1 == (size_t)E ? 0 : e + 1) choice[i] = (int)e;
    return;
  }
  /* token t's j-th choice: the Zipf quantile of the golden-ratio sequence
   * at t k + j, moved on to the next expert the token has not chosen */
  for (size_t t = 0; t < (size_t)r->N; t++)
    for (int j = 0; j < k; j++) {
      double x = ((double)(t * (size_t)k + (size_t)j) + 0.5) * 0.6180339887498949;
      int e = zipf_expert(x - floor(x), E, r->skew);
      for (int taken = 1; taken;) {
        taken = 0;
        for (int i = 0; i < j; i++) taken |= choice[t * (size_t)k + (size_t)i] == e;
        if (taken) e = (e + 1) % E;
      }
      choice[t * (size_t)k + (size_t)j] = e;
    }
}

/* the choices are kept as their route and made when the host reads them */
static void router_forward(float *probs, float *lse, int *top_idx, float *top_w,
                           const float *logits, const float *bias, int N, int E, int k,
                           int sigmoid) {
  entry *e = fresh(top_idx);
  e->bytes = (size_t)N * (size_t)k * sizeof(int);
  e->route = route_of(N, E, k, g_skew > 0.0 ? g_skew : 0.0);
}

static unsigned routing_id(const int *top_idx) {
  const entry *e = find(top_idx, 0);
  return e ? e->route : 0;
}

static mt_ops g_ops_null;
static pthread_once_t g_ops_null_once = PTHREAD_ONCE_INIT;

static void ops_null_build(void) {
  mt_ops *o = &g_ops_null;
  o->name = "null";
  o->loc = MT_LOC_DEVICE; /* not host memory: nothing may read it */
  o->alloc = null_alloc;
  o->free = null_free;
  o->upload = null_upload;
  o->download = null_download;
  o->sync = null_sync;
#define NULL_MEMBER_(name, params, args) o->name = null_##name;
#define NULL_FIXED_MEMBER_(name, optional, params, args) o->name = null_##name;
  MT_OPS_TYPED(NULL_MEMBER_)
  MT_OPS_TYPED_SUMS(NULL_MEMBER_)
  MT_OPS_FIXED(NULL_FIXED_MEMBER_)
  /* the one op whose results the host reads: the routing */
  o->moe_router_forward = router_forward;
  o->moe_routing_id = routing_id;
}

const mt_ops *mt_ops_null(void) {
  pthread_once(&g_ops_null_once, ops_null_build);
  return &g_ops_null;
}
