/* The parameter registry: logical tensors, placements on every axis, local
 * shards, flat offsets, units and the dp buckets and shards. */
#include "registry/registry.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static void *xrealloc(void *p, size_t bytes) {
  void *q = realloc(p, bytes);
  if (!q && bytes) abort();
  return q;
}

void mt_registry_init(mt_registry *r, int tp_size, int tp_rank) {
  memset(r, 0, sizeof *r);
  r->tp_size = tp_size;
  r->tp_rank = tp_rank;
  r->ep_size = 1;
  r->etp_size = 1;
  r->dp_size = r->cp_size = 1;
  for (int g = 0; g < MT_NGROUPS; g++) r->group_size[g] = 1;
}

const char *mt_grad_group_name(mt_grad_group g) { return g == MT_GROUP_EDP ? "edp" : "dp_cp"; }

void mt_registry_set_dp(mt_registry *r, int dp_size, int dp_rank, int cp_size, int cp_rank) {
  r->dp_size = dp_size;
  r->dp_rank = dp_rank;
  r->cp_size = cp_size;
  r->cp_rank = cp_rank;
  r->group_size[MT_GROUP_DP] = dp_size * cp_size;
  r->group_rank[MT_GROUP_DP] = cp_rank + cp_size * dp_rank;
}

int mt_registry_ep_owner(const mt_registry *r, int64_t extent, int64_t index) {
  int64_t per = extent / (r->ep_size > 0 ? r->ep_size : 1);
  return per > 0 ? (int)(index / per) : 0;
}

void mt_registry_set_ep(mt_registry *r, int ep_size, int ep_rank) {
  r->ep_size = ep_size;
  r->ep_rank = ep_rank;
  r->finalized = 0;
}

void mt_registry_set_etp(mt_registry *r, int etp_size, int etp_rank) {
  r->etp_size = etp_size;
  r->etp_rank = etp_rank;
  r->finalized = 0;
}

void mt_registry_set_edp(mt_registry *r, int edp_size, int edp_rank) {
  r->group_size[MT_GROUP_EDP] = edp_size;
  r->group_rank[MT_GROUP_EDP] = edp_rank;
}

static void free_buckets(mt_registry *r) {
  for (int k = 0; k < r->n_buckets; k++) {
    free(r->buckets[k].counts);
    free(r->buckets[k].displs);
  }
  free(r->buckets);
  r->buckets = NULL;
  r->n_buckets = 0;
  r->shard_numel = 0;
}

void mt_registry_free(mt_registry *r) {
  free_buckets(r);
  free(r->by_name);
  free(r->t);
  free(r->units);
  memset(r, 0, sizeof *r);
}

int mt_registry_add_spec(mt_registry *r, const mt_tensor_spec *s) {
  if (r->n == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 64;
    r->t = xrealloc(r->t, (size_t)r->cap * sizeof *r->t);
  }
  mt_tensor *t = &r->t[r->n];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", s->name);
  t->ndim = s->ndim;
  for (int d = 0; d < s->ndim && d < MT_MAX_DIMS; d++) {
    t->shape[d] = s->shape[d];
    t->padded[d] = s->padded ? s->padded[d] : s->shape[d];
  }
  t->tp = s->tp;
  t->ep = s->ep;
  t->layer = s->layer;
  t->pp_stage = s->pp_stage;
  t->pp_copy = s->pp_copy;
  t->init = s->init;
  t->init_std = s->init_std;
  t->weight_decay = s->weight_decay;
  if (s->tied_to) snprintf(t->tied_to, sizeof t->tied_to, "%s", s->tied_to);
  t->tp_partial_grad = s->tp_partial_grad;
  t->etp = s->etp;
  t->group = s->group;
  r->finalized = 0;
  return r->n++;
}

void mt_registry_set_axes(mt_registry *r, int i, const char *axes) {
  if (i >= 0 && i < r->n) snprintf(r->t[i].axes, sizeof r->t[i].axes, "%s", axes ? axes : "");
}

int mt_tensor_is_positional(const mt_tensor *t) {
  return strncmp(t->axes, "position", 8) == 0 && (t->axes[8] == ',' || t->axes[8] == '\0');
}

int mt_registry_add(mt_registry *r, const char *name, int ndim, const int64_t *shape,
                    const int64_t *padded, mt_placement tp, int weight_decay) {
  mt_tensor_spec s = {.name = name, .ndim = ndim, .shape = shape, .padded = padded, .tp = tp,
                      .ep = mt_replicated(), .layer = 0, .pp_stage = -1, .pp_copy = -1,
                      .init = weight_decay ? MT_INIT_NORMAL : MT_INIT_ZEROS, .init_std = 0.02f,
                      .weight_decay = weight_decay, .tied_to = NULL, .tp_partial_grad = 0,
                      .etp = mt_replicated(), .group = MT_GROUP_DP};
  return mt_registry_add_spec(r, &s);
}

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a */
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 1099511628211ULL;
  return h;
}

/* the name table of a finalized registry (a model of many layers looks up
 * every tensor once: a scan each would be quadratic) */
static void index_names(mt_registry *r) {
  free(r->by_name);
  r->by_name_cap = 4 * (r->n + 1);
  r->by_name = calloc((size_t)r->by_name_cap, sizeof(int));
  if (!r->by_name) abort();
  for (int i = 0; i < r->n; i++) {
    size_t k = hash_name(r->t[i].name) % (size_t)r->by_name_cap;
    while (r->by_name[k]) k = (k + 1) % (size_t)r->by_name_cap;
    r->by_name[k] = i + 1;
  }
}

int mt_registry_find(const mt_registry *r, const char *name) {
  if (!r->finalized || !r->by_name) {
    for (int i = 0; i < r->n; i++)
      if (strcmp(r->t[i].name, name) == 0) return i;
    return -1;
  }
  for (size_t k = hash_name(name) % (size_t)r->by_name_cap; r->by_name[k];
       k = (k + 1) % (size_t)r->by_name_cap)
    if (strcmp(r->t[r->by_name[k] - 1].name, name) == 0) return r->by_name[k] - 1;
  return -1;
}

int mt_registry_findf(const mt_registry *r, const char *fmt, ...) {
  char name[MT_NAME_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof name, fmt, ap);
  va_end(ap);
  return mt_registry_find(r, name);
}

int mt_registry_holds(const mt_registry *r, const mt_tensor *t) {
  return t->pp_stage < 0 || t->pp_stage == r->pp_rank || t->pp_copy == r->pp_rank;
}

size_t mt_tensor_numel(const mt_tensor *t) {
  size_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
  return n;
}

size_t mt_tensor_numel_padded(const mt_tensor *t) {
  size_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= (size_t)t->padded[d];
  return n;
}

/* Split dim p.dim of t over an axis of `size` ranks, this one `rank`. */
static int shard_dim(mt_tensor *t, mt_placement p, int size, int rank, const char *axis,
                     mt_err *e) {
  if (p.kind != MT_PLACE_SHARDED || size <= 1) return 0;
  int d = p.dim, k = p.fused_blocks > 0 ? p.fused_blocks : 1;
  if (d < 0 || d >= t->ndim) {
    mt_err_set(e, "%s: %s placement on dim %d of a %d-d tensor", t->name, axis, d,
             t->ndim);
    return -1;
  }
  int64_t ext = t->local_shape[d];
  if (ext != t->padded[d]) {
    mt_err_set(e, "%s: dim %d is sharded over two axes", t->name, d);
    return -1;
  }
  if (ext % k != 0 || (ext / k) % size != 0) {
    mt_err_set(e, "%s: dim %d of extent %lld (%d fused blocks) is not divisible by %s = %d",
             t->name, d, (long long)ext, k, axis, size);
    return -1;
  }
  int64_t block_local = ext / k / size;
  t->local_shape[d] = block_local * k;
  t->local_start[d] = block_local * rank; /* within each fused block */
  return 0;
}

int mt_registry_finalize(mt_registry *r, mt_err *e) {
  size_t off = 0;
  free(r->units);
  r->units = NULL;
  r->n_units = 0;
  for (int g = 0; g < MT_NGROUPS; g++) r->n_group_tensors[g] = 0;
  for (int i = 0; i < r->n; i++) {
    mt_tensor *t = &r->t[i];
    for (int d = 0; d < t->ndim; d++) {
      t->local_shape[d] = t->padded[d];
      t->local_start[d] = 0;
    }
    if (t->group < 0 || t->group >= MT_NGROUPS) {
      mt_err_set(e, "%s: unknown reduction group %d", t->name, (int)t->group);
      return -1;
    }
    if (t->group == MT_GROUP_EDP && t->tp.kind != MT_PLACE_REPLICATED) {
      mt_err_set(e, "%s: an expert tensor is split over etp and ep, not tp", t->name);
      return -1;
    }
    r->n_group_tensors[t->group]++;
    MT_TRY(e, shard_dim(t, t->tp, r->tp_size, r->tp_rank, "tp", e) != 0 ||
                  shard_dim(t, t->ep, r->ep_size, r->ep_rank, "ep", e) != 0 ||
                  shard_dim(t, t->etp, r->etp_size, r->etp_rank, "etp", e) != 0);
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->local_shape[d];
    t->numel_local = mt_registry_holds(r, t) ? n : 0;
    t->offset = off;
    off += t->numel_local;
    /* units: a new one where the layer or the reduction group changes; a
     * layer seen before (not just now), or its group seen before, is an error */
    const mt_unit *prev = r->n_units ? &r->units[r->n_units - 1] : NULL;
    if (!prev || prev->layer != t->layer || prev->group != t->group) {
      for (int u = 0; u < r->n_units; u++)
        if (r->units[u].layer == t->layer &&
            (r->units[u].group == t->group || prev->layer != t->layer)) {
          mt_err_set(e, "%s: the tensors of layer %d are not registered together",
                   t->name, t->layer);
          return -1;
        }
      r->units = xrealloc(r->units, (size_t)(r->n_units + 1) * sizeof *r->units);
      r->units[r->n_units] = (mt_unit){.layer = t->layer, .group = t->group, .t0 = i, .t1 = i,
                                           .begin = t->offset, .end = t->offset};
      r->n_units++;
    }
    mt_unit *u = &r->units[r->n_units - 1];
    u->t1 = i + 1;
    u->end = off;
    t->unit = r->n_units - 1;
  }
  r->numel_local = off;
  r->finalized = 1;
  index_names(r);
  free_buckets(r);
  return 0;
}

int mt_registry_unit_of_layer(const mt_registry *r, int layer) {
  for (int u = 0; u < r->n_units; u++)
    if (r->units[u].layer == layer) return u;
  return -1;
}

int mt_registry_unit_of(const mt_registry *r, int layer, mt_grad_group g) {
  for (int u = 0; u < r->n_units; u++)
    if (r->units[u].layer == layer && r->units[u].group == g) return u;
  return -1;
}

/* ------------------------------------------------------------------ */
/* the pipeline placement                                              */

int mt_registry_vs_rank(int pp, int vshape, int vs) {
  return vshape && vs >= pp ? 2 * pp - 1 - vs : vs % pp;
}

void mt_registry_stage_layers(int n_layer, int pp, int v, const int *split, int vshape, int vs,
                              int *l0, int *l1) {
  if (split) { /* virtual stage u holds its rank's split / v layers */
    int a = 0;
    for (int u = 0; u < vs; u++) a += split[mt_registry_vs_rank(pp, vshape, u)] / v;
    *l0 = a;
    *l1 = a + split[mt_registry_vs_rank(pp, vshape, vs)] / v;
    return;
  }
  int n = pp * v, base = n_layer / n, extra = n_layer % n;
  *l0 = vs * base + (vs < extra ? vs : extra);
  *l1 = *l0 + base + (vs < extra ? 1 : 0);
}

void mt_registry_stage_map(int n_layer, int pp, int v, const int *split, int vshape,
                           int *stage_of_layer) {
  for (int vs = 0; vs < pp * v; vs++) {
    int a, b;
    mt_registry_stage_layers(n_layer, pp, v, split, vshape, vs, &a, &b);
    for (int l = a; l < b; l++) stage_of_layer[l] = mt_registry_vs_rank(pp, vshape, vs);
  }
}

/* ------------------------------------------------------------------ */
/* the dp placement                                                    */

static void bucket_add(mt_registry *r, size_t begin, size_t end, mt_grad_group g) {
  r->buckets = xrealloc(r->buckets, (size_t)(r->n_buckets + 1) * sizeof *r->buckets);
  mt_bucket_plan *b = &r->buckets[r->n_buckets++];
  memset(b, 0, sizeof *b);
  b->begin = begin;
  b->end = end;
  b->group = g;
}

int mt_registry_unit_tied(const mt_registry *r, int u) {
  for (int i = r->units[u].t0; i < r->units[u].t1; i++) {
    const mt_tensor *t = &r->t[i];
    if (t->numel_local && t->pp_copy >= 0 && t->pp_copy != t->pp_stage) return 1;
    if (t->numel_local && r->tied_here && t->tied_to[0]) return 1;
  }
  return 0;
}

void mt_registry_set_chunks(mt_registry *r, int n, const int *l0, const int *l1) {
  if (n > MT_REG_MAX_CHUNKS) n = MT_REG_MAX_CHUNKS;
  r->n_chunks = n;
  for (int c = 0; c < n; c++) r->chunk_l0[c] = l0[c], r->chunk_l1[c] = l1[c];
}

/* the chunk of this stage holding a layer (the embeddings: the chunk of
 * block 0; the final LN: the chunk of the last block; -1 without chunks) */
static int chunk_of(const mt_registry *r, int layer) {
  int first = -1, last = -1;
  for (int c = 0; c < r->n_chunks; c++) {
    if (layer >= r->chunk_l0[c] && layer < r->chunk_l1[c]) return c;
    if (first < 0 || r->chunk_l0[c] < r->chunk_l0[first]) first = c;
    if (last < 0 || r->chunk_l1[c] > r->chunk_l1[last]) last = c;
  }
  return layer < 0 ? first : last;
}

int mt_registry_shard(mt_registry *r, int zero, size_t bucket_bytes) {
  free_buckets(r);
  r->zero = zero;
  size_t max_elems = bucket_bytes / sizeof(float);
  if (max_elems < 1) max_elems = 1;
  /* an MPI count is an int: keep every bucket below 2^31 elements */
  if (max_elems > (size_t)1 << 30) max_elems = (size_t)1 << 30;
  size_t end = r->numel_local;
  if (zero <= 1) {
    /* from the last tensor backwards, cut at tensor boundaries once a bucket
     * holds max_elems, and where the reduction group changes (held
     * tensors only: another stage's take no room); under pipeline
     * parallelism also where a tied unit (mt_registry_unit_tied) begins or
     * ends, so the reduction of the rest need not wait for the sum across
     * stages */
    int gi = -1; /* the group of the bucket being filled */
    for (int i = r->n - 1; i >= 0; i--) {
      size_t begin = r->t[i].offset;
      if (r->t[i].numel_local) gi = (int)r->t[i].group;
      int next_g = -1, next_i = -1; /* the group of the next held tensor below i */
      for (int j = i - 1; j >= 0 && next_g < 0; j--)
        if (r->t[j].numel_local) {
          next_g = (int)r->t[j].group;
          next_i = j;
        }
      int group_ends = next_g >= 0 && next_g != gi;
      int tied_edge = next_i >= 0 && mt_registry_unit_tied(r, r->t[i].unit) !=
                                         mt_registry_unit_tied(r, r->t[next_i].unit);
      if ((end - begin >= max_elems || i == 0 || group_ends || tied_edge) && end > begin) {
        bucket_add(r, begin, end, gi < 0 ? MT_GROUP_DP : (mt_grad_group)gi);
        end = begin;
      }
    }
  } else {
    /* whole units: zero 3 one each, zero 2 merged up to max_elems (units of
     * one reduction group only). Under pipeline parallelism a bucket also
     * never spans two virtual stages (an empty unit, another stage's, lies
     * between them, or, at a V's turn, the chunks say so: each backward
     * pass then completes whole buckets, and chunks never share one), and a
     * unit holding a tied tensor
     * kept equal across stages is a bucket of its own (its gradients are
     * summed across stages before dp reduces them, so it waits for the end
     * of the step and should hold nothing else) */
    int gu = -1; /* the group of the bucket being filled */
    for (int u = r->n_units - 1; u >= 0; u--) {
      size_t begin = r->units[u].begin;
      if (r->units[u].end > begin) gu = (int)r->units[u].group;
      int next_g = -1, next_u = -1;
      for (int v = u - 1; v >= 0 && next_g < 0; v--)
        if (r->units[v].end > r->units[v].begin) {
          next_g = (int)r->units[v].group;
          next_u = v;
        }
      int group_ends = next_g >= 0 && next_g != gu;
      int gap = next_u >= 0 && (next_u < u - 1 || chunk_of(r, r->units[u].layer) !=
                                                      chunk_of(r, r->units[next_u].layer));
      int tied = next_u >= 0 && (mt_registry_unit_tied(r, u) || mt_registry_unit_tied(r, next_u));
      if ((zero == 3 || end - begin >= max_elems || u == 0 || group_ends || gap || tied) &&
          end > begin) {
        bucket_add(r, begin, end, gu < 0 ? MT_GROUP_DP : (mt_grad_group)gu);
        end = begin;
      }
    }
  }
  size_t shard = 0;
  for (int k = 0; k < r->n_buckets; k++) {
    mt_bucket_plan *b = &r->buckets[k];
    size_t len = b->end - b->begin;
    const int gsize = r->group_size[b->group], grank = r->group_rank[b->group];
    b->counts = calloc((size_t)gsize, sizeof(int));
    b->displs = calloc((size_t)gsize, sizeof(int));
    if (!b->counts || !b->displs) abort();
    size_t base = len / (size_t)gsize, extra = len % (size_t)gsize, off = 0;
    for (int q = 0; q < gsize; q++) {
      b->counts[q] = (int)(base + ((size_t)q < extra ? 1 : 0));
      b->displs[q] = (int)off;
      off += (size_t)b->counts[q];
    }
    b->u0 = r->n_units;
    b->u1 = 0;
    for (int u = 0; u < r->n_units; u++)
      if (r->units[u].end > b->begin && r->units[u].begin < b->end) {
        if (u < b->u0) b->u0 = u;
        b->u1 = u + 1;
      }
    b->shard_off = shard;
    shard += zero ? (size_t)b->counts[grank] : len;
  }
  r->shard_numel = shard;
  return 0;
}

int mt_registry_bucket_of(const mt_registry *r, size_t off) {
  for (int k = 0; k < r->n_buckets; k++)
    if (off >= r->buckets[k].begin && off < r->buckets[k].end) return k;
  return -1;
}

/* ------------------------------------------------------------------ */

size_t mt_tensor_global_index(const mt_tensor *t, size_t local_index, int tp_size) {
  (void)tp_size; /* the local shape says which dims are split */
  int64_t coord[MT_MAX_DIMS];
  size_t rem = local_index;
  for (int d = t->ndim - 1; d >= 0; d--) {
    coord[d] = (int64_t)(rem % (size_t)t->local_shape[d]);
    rem /= (size_t)t->local_shape[d];
  }
  for (int d = 0; d < t->ndim; d++) {
    if (t->local_shape[d] == t->padded[d]) continue;
    int k = 1;
    if (t->tp.kind == MT_PLACE_SHARDED && t->tp.dim == d) k = t->tp.fused_blocks;
    else if (t->ep.kind == MT_PLACE_SHARDED && t->ep.dim == d) k = t->ep.fused_blocks;
    else if (t->etp.kind == MT_PLACE_SHARDED && t->etp.dim == d) k = t->etp.fused_blocks;
    if (k < 1) k = 1;
    int64_t block_local = t->local_shape[d] / k, block_global = t->padded[d] / k;
    int64_t blk = coord[d] / block_local, within = coord[d] % block_local;
    coord[d] = blk * block_global + t->local_start[d] + within;
  }
  size_t g = 0;
  for (int d = 0; d < t->ndim; d++) g = g * (size_t)t->padded[d] + (size_t)coord[d];
  return g;
}

/* ------------------------------------------------------------------ */
/* initial values: counter-based, layout-free                          */

/* standard normal for element idx of a tensor keyed by key (Box-Muller) */
static double normal_at(uint64_t key, uint64_t idx) {
  uint64_t a = mt_splitmix64(key ^ mt_splitmix64(2 * idx));
  uint64_t b = mt_splitmix64(key ^ mt_splitmix64(2 * idx + 1));
  double u1 = ((double)(a >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  double u2 = (double)(b >> 11) * (1.0 / 9007199254740992.0);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* Is global flat index g (over the padded shape) a padding element? */
static int is_padding(const mt_tensor *t, size_t g) {
  for (int d = t->ndim - 1; d >= 0; d--) {
    int64_t c = (int64_t)(g % (size_t)t->padded[d]);
    g /= (size_t)t->padded[d];
    if (c >= t->shape[d]) return 1;
  }
  return 0;
}

void mt_registry_init_values(const mt_registry *r, int i, uint64_t seed, size_t lo, size_t hi,
                             float *out) {
  const mt_tensor *t = &r->t[i];
  if (t->init != MT_INIT_NORMAL) {
    float v = t->init == MT_INIT_ONES ? 1.0f : 0.0f;
    for (size_t j = lo; j < hi; j++) out[j - lo] = v;
    return;
  }
  uint64_t key = mt_splitmix64(seed ^ hash_name(t->name));
  for (size_t j = lo; j < hi; j++) {
    size_t g = mt_tensor_global_index(t, j, r->tp_size);
    out[j - lo] = is_padding(t, g) ? 0.0f : (float)(t->init_std * normal_at(key, g));
  }
}
