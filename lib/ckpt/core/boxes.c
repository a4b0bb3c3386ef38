/* From a rank's flat local range of a tensor to boxes of the canonical
 * (global, unpadded) tensor. See core/ckpt_core.h. */
#include "ckpt/core/ckpt_core.h"

#include <stdlib.h>
#include <string.h>

void mt_ckpt_view(const mt_tensor *t, int tp_size, mt_ckpt_view_t *v) {
  (void)tp_size; /* the local shape says which dims are split */
  memset(v, 0, sizeof *v);
  v->nd = t->ndim;
  v->true_ext[0] = v->pad_ext[0] = v->local_ext[0] = 1;
  for (int d = 0; d < t->ndim; d++) {
    v->shape[d] = t->shape[d];
    v->padded[d] = t->padded[d];
    v->local[d] = t->local_shape[d];
    v->start[d] = t->local_start[d];
    int k = 1; /* the fused blocks of the axis that splits dim d */
    if (t->local_shape[d] != t->padded[d]) {
      if (t->tp.kind == MT_PLACE_SHARDED && t->tp.dim == d) k = t->tp.fused_blocks;
      else if (t->ep.kind == MT_PLACE_SHARDED && t->ep.dim == d) k = t->ep.fused_blocks;
      else if (t->etp.kind == MT_PLACE_SHARDED && t->etp.dim == d) k = t->etp.fused_blocks;
    }
    v->blocks[d] = k > 0 ? k : 1;
    if (d < t->ndim - 1) {
      v->true_ext[0] *= t->shape[d];
      v->pad_ext[0] *= t->padded[d];
      v->local_ext[0] *= t->local_shape[d];
    }
  }
  v->true_ext[1] = t->shape[t->ndim - 1];
  v->pad_ext[1] = t->padded[t->ndim - 1];
  v->local_ext[1] = t->local_shape[t->ndim - 1];
}

/* local index x along dim d -> global (padded) index */
static int64_t dim_global(const mt_ckpt_view_t *v, int d, int64_t x) {
  if (v->local[d] == v->padded[d]) return x;
  int64_t bl = v->local[d] / v->blocks[d], bg = v->padded[d] / v->blocks[d];
  return (x / bl) * bg + v->start[d] + x % bl;
}

/* local row r of the view -> canonical row, or -1 for a padding row */
static int64_t row_global(const mt_ckpt_view_t *v, int64_t r) {
  int64_t coord[MT_MAX_DIMS], g = 0;
  for (int d = v->nd - 2; d >= 0; d--) {
    coord[d] = r % v->local[d];
    r /= v->local[d];
  }
  for (int d = 0; d < v->nd - 1; d++) {
    int64_t x = dim_global(v, d, coord[d]);
    if (x >= v->shape[d]) return -1; /* padding is not part of the tensor */
    g = g * v->shape[d] + x;
  }
  return g;
}

int mt_ckpt_box_pieces(const mt_ckpt_box *b, int nd, const int64_t *dims,
                       int64_t start[3][MT_MAX_DIMS], int64_t count[3][MT_MAX_DIMS]) {
  if (nd <= 2) { /* the box itself (a vector: its row is row 0) */
    if (nd == 2) {
      start[0][0] = b->start[0];
      count[0][0] = b->count[0];
    }
    start[0][nd - 1] = b->start[1];
    count[0][nd - 1] = b->count[1];
    return 1;
  }
  /* nd == 3: rows r of the view are (r / dims[1], r % dims[1]) */
  int n = 0;
  int64_t r = b->start[0], end = b->start[0] + b->count[0], D1 = dims[1];
  while (r < end) {
    int64_t e = r / D1, within = r % D1, rows;
    if (within != 0 || end - r < D1) { /* a part of one expert's rows */
      rows = (D1 - within < end - r) ? D1 - within : end - r;
      start[n][0] = e, count[n][0] = 1;
      start[n][1] = within, count[n][1] = rows;
    } else { /* whole experts */
      int64_t ne = (end - r) / D1;
      rows = ne * D1;
      start[n][0] = e, count[n][0] = ne;
      start[n][1] = 0, count[n][1] = D1;
    }
    start[n][2] = b->start[1];
    count[n][2] = b->count[1];
    n++;
    r += rows;
  }
  return n;
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
  const int cd = v->nd - 1; /* the column dim */
  /* a column piece never crosses a fused block boundary of a column-sharded view */
  const int64_t col_block = v->local[cd] != v->padded[cd] ? L1 / v->blocks[cd] : L1;
  for (int64_t r = (int64_t)(lo / (size_t)L1); r <= (int64_t)((hi - 1) / (size_t)L1); r++) {
    int64_t c_begin = r == (int64_t)(lo / (size_t)L1) ? (int64_t)(lo % (size_t)L1) : 0;
    int64_t c_end = r == (int64_t)((hi - 1) / (size_t)L1) ? (int64_t)((hi - 1) % (size_t)L1) + 1 : L1;
    int64_t gr = v->nd == 1 ? 0 : row_global(v, r);
    if (gr < 0) continue; /* padding rows are not part of the tensor */
    for (int64_t c = c_begin; c < c_end;) {
      int64_t piece_end = (c / col_block + 1) * col_block;
      if (piece_end > c_end) piece_end = c_end;
      int64_t gc = dim_global(v, cd, c), w = piece_end - c;
      if (gc + w > v->true_ext[1]) w = v->true_ext[1] - gc;
      if (w > 0) {
        mt_ckpt_box *last = bx->n ? &bx->b[bx->n - 1] : NULL;
        int full_row = c == 0 && piece_end == L1 && col_block == L1;
        if (last && full_row && last->full_rows && last->start[1] == gc && last->count[1] == w &&
            last->start[0] + last->count[0] == gr) {
          last->count[0]++; /* whole local rows stack into one block, contiguous in memory */
        } else {
          mt_ckpt_box b = {.start = {gr, gc}, .count = {1, w},
                           .local_off = (size_t)(r * L1 + c), .full_rows = full_row};
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
