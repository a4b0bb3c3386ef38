/* From a rank's flat local range of a tensor to boxes of the canonical
 * (global, unpadded) tensor. See ckpt_internal.h. */
#include "ckpt/ckpt_internal.h"

#include <stdlib.h>
#include <string.h>

void mt_ckpt_view(const mt_tensor *t, int tp_size, mt_ckpt_view_t *v) {
  memset(v, 0, sizeof *v);
  int two = t->ndim == 2;
  v->true_ext[0] = two ? t->shape[0] : 1;
  v->true_ext[1] = two ? t->shape[1] : t->shape[0];
  v->pad_ext[0] = two ? t->padded[0] : 1;
  v->pad_ext[1] = two ? t->padded[1] : t->padded[0];
  v->local_ext[0] = two ? t->local_shape[0] : 1;
  v->local_ext[1] = two ? t->local_shape[1] : t->local_shape[0];
  v->shard_dim = -1;
  v->blocks = 1;
  if (t->tp.kind == MT_PLACE_SHARDED && tp_size > 1) {
    v->shard_dim = two ? t->tp.dim : 1;
    v->blocks = t->tp.fused_blocks > 0 ? t->tp.fused_blocks : 1;
    v->local_start = t->local_start[t->tp.dim];
  }
}

/* local coordinate along view dim d -> global (padded) coordinate */
static int64_t to_global(const mt_ckpt_view_t *v, int d, int64_t x) {
  if (d != v->shard_dim) return x;
  int64_t bl = v->local_ext[d] / v->blocks, bg = v->pad_ext[d] / v->blocks;
  return (x / bl) * bg + v->local_start + x % bl;
}

/* no abort on a full memory: this runs in the background writer too */
static int push(mt_ckpt_boxes *bx, const mt_ckpt_box *b) {
  if (bx->n == bx->cap) {
    int cap = bx->cap ? 2 * bx->cap : 16;
    mt_ckpt_box *grown = realloc(bx->b, (size_t)cap * sizeof *bx->b);
    if (!grown) return -1;
    bx->b = grown;
    bx->cap = cap;
  }
  bx->b[bx->n++] = *b;
  return 0;
}

int mt_ckpt_boxes_for_range(const mt_ckpt_view_t *v, size_t lo, size_t hi, mt_ckpt_boxes *bx) {
  bx->n = 0;
  if (hi <= lo) return 0;
  const int64_t L1 = v->local_ext[1];
  /* a column piece never crosses a fused block boundary of a column-sharded view */
  const int64_t col_block = v->shard_dim == 1 ? L1 / v->blocks : L1;
  for (int64_t r = (int64_t)(lo / (size_t)L1); r <= (int64_t)((hi - 1) / (size_t)L1); r++) {
    int64_t c_begin = r == (int64_t)(lo / (size_t)L1) ? (int64_t)(lo % (size_t)L1) : 0;
    int64_t c_end = r == (int64_t)((hi - 1) / (size_t)L1) ? (int64_t)((hi - 1) % (size_t)L1) + 1 : L1;
    int64_t gr = to_global(v, 0, r);
    if (gr >= v->true_ext[0]) continue; /* padding rows are not part of the tensor */
    for (int64_t c = c_begin; c < c_end;) {
      int64_t piece_end = (c / col_block + 1) * col_block;
      if (piece_end > c_end) piece_end = c_end;
      int64_t gc = to_global(v, 1, c), w = piece_end - c;
      if (gc + w > v->true_ext[1]) w = v->true_ext[1] - gc;
      if (w > 0) {
        mt_ckpt_box *last = bx->n ? &bx->b[bx->n - 1] : NULL;
        int full_row = c == 0 && piece_end == L1 && col_block == L1;
        if (last && full_row && last->full_rows && last->start[1] == gc && last->count[1] == w &&
            last->start[0] + last->count[0] == gr) {
          last->count[0]++; /* whole local rows stack into one block, contiguous in memory */
        } else {
          mt_ckpt_box b = {{gr, gc}, {1, w}, (size_t)(r * L1 + c), full_row};
          if (push(bx, &b) != 0) return -1;
        }
      }
      c = piece_end;
    }
  }
  return 0;
}

size_t mt_ckpt_boxes_volume(const mt_ckpt_boxes *bx) {
  size_t n = 0;
  for (int i = 0; i < bx->n; i++) n += (size_t)(bx->b[i].count[0] * bx->b[i].count[1]);
  return n;
}
