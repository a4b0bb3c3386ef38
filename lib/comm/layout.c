/* Layouts for device collectives that NCCL has no call for, as copies: the
 * parts of an uneven reduce-scatter or all-gather padded to one size, and
 * sequence parallelism's (outer, size, inner) blocks made rank-major. The
 * copies go through a caller's 2D copy (cudaMemcpy2DAsync in nccl.c, memcpy
 * in the tests), so the arithmetic is tested without a GPU. Elements of
 * any size: counts, displacements and pitches in elements here, bytes in
 * the 2D copy. */
#include "comm/comm.h"

size_t mt_parts_equal(const int *counts, const int *displs, int n) {
  for (int q = 0; q < n; q++)
    if (counts[q] != counts[0] || (displs && displs[q] != q * counts[0])) return 0;
  return n > 0 ? (size_t)counts[0] : 0;
}

size_t mt_parts_largest(const int *counts, int n) {
  size_t m = 0;
  for (int q = 0; q < n; q++) m = (size_t)counts[q] > m ? (size_t)counts[q] : m;
  return m;
}

/* Runs of parts that have one size and follow each other move as one 2D
 * copy (the registry's buckets: at most two runs). */
void mt_copy_parts(void *parts, void *padded, size_t pitch, const int *counts,
                   const int *displs, int n, size_t elem, int to_padded, mt_copy2d_fn copy2d,
                   void *ctx) {
  int q = 0;
  while (q < n) {
    int q1 = q + 1;
    while (q1 < n && counts[q1] == counts[q] && displs[q1] == displs[q1 - 1] + counts[q]) q1++;
    size_t c = (size_t)counts[q] * elem, rows = (size_t)(q1 - q), pb = pitch * elem;
    if (c) {
      char *p = (char *)parts + (size_t)displs[q] * elem, *d = (char *)padded + (size_t)q * pb;
      if (to_padded) copy2d(ctx, d, pb, p, c, c, rows);
      else copy2d(ctx, p, c, d, pb, c, rows);
    }
    q = q1;
  }
}

void mt_permute_dim(void *strided, void *rank_major, size_t outer, size_t inner, int size,
                    size_t elem, int to_rank_major, mt_copy2d_fn copy2d, void *ctx) {
  size_t block = outer * inner * elem, row = inner * elem, sp = (size_t)size * row;
  for (int q = 0; q < size; q++) {
    char *a = (char *)strided + (size_t)q * row, *b = (char *)rank_major + (size_t)q * block;
    if (to_rank_major) copy2d(ctx, b, row, a, sp, row, outer);
    else copy2d(ctx, a, sp, b, row, row, outer);
  }
}
