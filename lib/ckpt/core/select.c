/* What a rank writes or reads of each tensor: the boxes of its ranges and
 * the memory of each, with the staging copies between the two. */
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

#include "ckpt/core/ckpt_core.h"

#include <stdlib.h>
#include <string.h>

/* copy the boxes' elements from a shard (mem = the shard's local element 0)
 * into staging, in canonical order; to_shard reverses the direction */
static void gather_boxes(float *staging, float *shard, const mt_ckpt_boxes *bx, int64_t L1,
                         int to_shard) {
  size_t k = 0;
  for (int i = 0; i < bx->n; i++) {
    const mt_ckpt_box *b = &bx->b[i];
    for (int64_t r = 0; r < b->count[0]; r++) {
      float *src = shard + b->local_off + (size_t)(r * L1);
      size_t w = (size_t)b->count[1];
      if (to_shard) memcpy(src, staging + k, w * sizeof(float));
      else memcpy(staging + k, src, w * sizeof(float));
      k += w;
    }
  }
}

/* Does this rank write its shard of t at all? Replicated state is written
 * once: by tp rank 0 for tensors replicated over tp, by the owning pipeline
 * stage only (a stage's copy, pp_copy, is not). Over dp and cp the state's
 * ranges (the registry's write partition over the dp x cp group) already
 * split it: each rank writes its part. Experts live on the folded mesh:
 * every (ep, etp) rank holds its own shard (written by etp rank 0 for
 * tensors replicated over etp), and the edp ranks holding the same shard
 * write their parts of its buckets. */
int mt_ckpt_writes_tensor(const mt_tensor *t, const mt_mesh *mesh) {
  if (t->pp_stage >= 0 && t->pp_stage != mesh->pp_rank) return 0;
  if (t->group == MT_GROUP_EDP)
    return t->etp.kind == MT_PLACE_SHARDED || mesh->etp == 1 || mesh->etp_rank == 0;
  if ((t->tp.kind == MT_PLACE_REPLICATED || mesh->tp == 1) && mesh->tp_rank != 0) return 0;
  return 1;
}

int mt_ckpt_sel_build(mt_ckpt_sel *s, const mt_tensor *t, const mt_ckpt_view_t *v,
                      const mt_flat_range *ranges, int n_ranges) {
  s->boxes.n = 0;
  s->volume = 0;
  mt_ckpt_boxes part = {0};
  int rc = 0;
  size_t t0 = t->offset, t1 = t->offset + t->numel_local;
  for (int i = 0; i < n_ranges; i++) {
    size_t r0 = ranges[i].begin, r1 = ranges[i].begin + ranges[i].len;
    size_t lo = r0 > t0 ? r0 : t0, hi = r1 < t1 ? r1 : t1;
    if (lo >= hi) continue;
    if ((rc = mt_ckpt_boxes_for_range(v, lo - t0, hi - t0, &part)) != 0) break;
    for (int j = 0; j < part.n; j++) {
      if (s->boxes.n == s->boxes.cap) { /* no abort: this runs in the background writer too */
        int cap = s->boxes.cap ? 2 * s->boxes.cap : 16;
        mt_ckpt_box *b = realloc(s->boxes.b, (size_t)cap * sizeof *s->boxes.b);
        if (b) s->boxes.b = b;
        float **m = b ? realloc(s->piece_mem, (size_t)cap * sizeof *s->piece_mem) : NULL;
        if (m) s->piece_mem = m;
        if (!b || !m) {
          rc = -1;
          break;
        }
        s->boxes.cap = cap;
      }
      mt_ckpt_box b = part.b[j];
      /* memory of the box: the range's memory shifted to the box's local offset */
      s->piece_mem[s->boxes.n] = ranges[i].mem + (t0 + b.local_off - r0);
      b.local_off = 0;
      s->boxes.b[s->boxes.n++] = b;
      s->volume += (size_t)(b.count[0] * b.count[1]);
    }
    if (rc != 0) break;
  }
  free(part.b);
  return rc;
}

/* The selection's data lies end to end in memory already (whole local rows,
 * one range): then no staging copy is needed. Returns that memory or NULL. */
float *mt_ckpt_sel_contiguous(const mt_ckpt_sel *s, int64_t L1) {
  if (s->boxes.n == 0) return NULL;
  float *next = s->piece_mem[0];
  for (int i = 0; i < s->boxes.n; i++) {
    const mt_ckpt_box *b = &s->boxes.b[i];
    if (s->piece_mem[i] != next || (b->count[0] > 1 && b->count[1] != L1)) return NULL;
    next += b->count[0] * b->count[1];
  }
  return s->piece_mem[0];
}

void mt_ckpt_sel_free(mt_ckpt_sel *s) {
  free(s->boxes.b);
  free(s->piece_mem);
}

/* staging <-> memory for a selection whose pieces have their own memory */
void mt_ckpt_sel_copy(mt_ckpt_sel *s, float *staging, int64_t L1, int to_mem) {
  size_t k = 0;
  for (int i = 0; i < s->boxes.n; i++) {
    mt_ckpt_boxes one = {.b = &s->boxes.b[i], .n = 1, .cap = 1};
    gather_boxes(staging + k, s->piece_mem[i], &one, L1, to_mem);
    k += (size_t)(s->boxes.b[i].count[0] * s->boxes.b[i].count[1]);
  }
}

void mt_ckpt_walk_begin(mt_ckpt_walk *w, const mt_registry *reg, const mt_mesh *mesh,
                        const mt_ckpt_state *st, int writing) {
  memset(w, 0, sizeof *w);
  w->reg = reg;
  w->mesh = mesh;
  w->st = st;
  w->writing = writing;
  w->g = 0;
  w->i = -1;
}

int mt_ckpt_walk_next(mt_ckpt_walk *w) {
  if (++w->i == w->reg->n) {
    w->i = 0;
    w->g++;
  }
  if (w->g >= MT_CKPT_NGROUPS || w->reg->n == 0) return 0;
  w->t = &w->reg->t[w->i];
  mt_ckpt_view(w->t, w->reg->tp_size, &w->v);
  w->sel.boxes.n = 0;
  w->sel.volume = 0;
  if (w->writing && !mt_ckpt_writes_tensor(w->t, w->mesh)) return 1;
  return mt_ckpt_sel_build(&w->sel, w->t, &w->v, w->st->ranges[w->g], w->st->n_ranges[w->g]) == 0
             ? 1
             : -1;
}

void mt_ckpt_walk_end(mt_ckpt_walk *w) { mt_ckpt_sel_free(&w->sel); }

uint64_t mt_ckpt_box_hash_mem(const float *first, const mt_ckpt_box *b, int64_t L1) {
  size_t w = (size_t)b->count[1];
  if (b->count[0] == 1 || (int64_t)w == L1) return mt_ckpt_box_hash(first, w * (size_t)b->count[0]);
  XXH64_state_t st; /* the box's rows one after the other: the same bytes as laid end to end */
  XXH64_reset(&st, 0);
  for (int64_t r = 0; r < b->count[0]; r++) XXH64_update(&st, first + r * L1, w * sizeof(float));
  return XXH64_digest(&st);
}
