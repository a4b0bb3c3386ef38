/* The parameter registry: logical tensors, placements, local shards, flat offsets. */
#include "registry/registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void mt_registry_init(mt_registry *r, int tp_size, int tp_rank) {
  memset(r, 0, sizeof *r);
  r->tp_size = tp_size;
  r->tp_rank = tp_rank;
}

void mt_registry_free(mt_registry *r) {
  free(r->t);
  memset(r, 0, sizeof *r);
}

int mt_registry_add(mt_registry *r, const char *name, int ndim, const int64_t *shape,
                    const int64_t *padded, mt_placement tp, int weight_decay) {
  if (r->n == r->cap) {
    r->cap = r->cap ? 2 * r->cap : 64;
    mt_tensor *nt = realloc(r->t, (size_t)r->cap * sizeof *nt);
    if (!nt) abort();
    r->t = nt;
  }
  mt_tensor *t = &r->t[r->n];
  memset(t, 0, sizeof *t);
  snprintf(t->name, sizeof t->name, "%s", name);
  t->ndim = ndim;
  for (int d = 0; d < ndim; d++) {
    t->shape[d] = shape[d];
    t->padded[d] = padded ? padded[d] : shape[d];
  }
  t->tp = tp;
  t->pp_stage = -1;
  t->pp_copy = -1;
  t->weight_decay = weight_decay;
  r->finalized = 0;
  return r->n++;
}

int mt_registry_find(const mt_registry *r, const char *name) {
  for (int i = 0; i < r->n; i++)
    if (strcmp(r->t[i].name, name) == 0) return i;
  return -1;
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

int mt_registry_finalize(mt_registry *r, char *msg, size_t msg_len) {
  size_t off = 0;
  for (int i = 0; i < r->n; i++) {
    mt_tensor *t = &r->t[i];
    for (int d = 0; d < t->ndim; d++) {
      t->local_shape[d] = t->padded[d];
      t->local_start[d] = 0;
    }
    if (t->tp.kind == MT_PLACE_SHARDED && r->tp_size > 1) {
      int d = t->tp.dim, k = t->tp.fused_blocks > 0 ? t->tp.fused_blocks : 1;
      int64_t ext = t->padded[d];
      if (ext % k != 0 || (ext / k) % r->tp_size != 0) {
        snprintf(msg, msg_len,
                 "%s: dim %d of extent %lld (%d fused blocks) is not divisible by tp = %d",
                 t->name, d, (long long)ext, k, r->tp_size);
        return -1;
      }
      int64_t block_local = ext / k / r->tp_size;
      t->local_shape[d] = block_local * k;
      t->local_start[d] = block_local * r->tp_rank; /* within each fused block */
    }
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->local_shape[d];
    t->numel_local = mt_registry_holds(r, t) ? n : 0;
    t->offset = off;
    off += t->numel_local;
  }
  r->numel_local = off;
  r->finalized = 1;
  return 0;
}

size_t mt_tensor_global_index(const mt_tensor *t, size_t local_index, int tp_size) {
  int64_t coord[MT_MAX_DIMS];
  size_t rem = local_index;
  for (int d = t->ndim - 1; d >= 0; d--) {
    coord[d] = (int64_t)(rem % (size_t)t->local_shape[d]);
    rem /= (size_t)t->local_shape[d];
  }
  if (t->tp.kind == MT_PLACE_SHARDED && tp_size > 1) {
    int d = t->tp.dim, k = t->tp.fused_blocks > 0 ? t->tp.fused_blocks : 1;
    int64_t block_local = t->local_shape[d] / k, block_global = t->padded[d] / k;
    int64_t blk = coord[d] / block_local, within = coord[d] % block_local;
    coord[d] = blk * block_global + t->local_start[d] + within;
  }
  size_t g = 0;
  for (int d = 0; d < t->ndim; d++) g = g * (size_t)t->padded[d] + (size_t)coord[d];
  return g;
}
