/* Shared mode: one file, ckpt.h5, that every rank writes into.
 *
 * No HDF5 call in a save is collective. Parallel HDF5 hangs when an I/O
 * error hits one rank inside a collective call (a flush or a close splits
 * the ranks between a barrier and a broadcast), so:
 *   1. every rank lists its boxes;
 *   2. rank 0 alone writes the whole file but the tensor data: attributes,
 *      the canonical datasets with their space allocated (contiguous,
 *      aligned), the index (checksums still 0), the layout, the names, the
 *      configuration; then reserves the file's blocks, so a full disk shows
 *      here, on one rank;
 *   3. all agree; rank 0 sends every dataset's file offset;
 *   4. every rank writes its boxes there with pwrite, a piece at a time, the
 *      checksum of each piece taken just before it is written (one pass over
 *      the memory), the disk's writeback started behind each piece
 *      (sync_file_range) so the final fsync has little left to wait for;
 *   5. all agree; rank 0 gathers the checksums and writes them into the
 *      index; every rank fsyncs. An error is a return code on that rank,
 *      agreed by the caller before anything else.
 * The file is a plain HDF5 file: a parallel or serial reader sees the same. */
#define _GNU_SOURCE /* sync_file_range */
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int little_endian(void) {
  const uint32_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* the piece a box is written in (bytes): hashed while in cache, then written */
#define PIECE_BYTES ((size_t)8 << 20)

/* n floats from mem at byte offset off of fd, all of them, hashed into hs
 * first; the writeback of what was written is started at once */
static int pwrite_all(int fd, const float *mem, size_t n, int64_t off, XXH64_state_t *hs) {
  const char *p = (const char *)mem;
  size_t left = n * sizeof(float);
  while (left > 0) {
    size_t piece = left < PIECE_BYTES ? left : PIECE_BYTES;
    XXH64_update(hs, p, piece);
    int64_t start = off;
    size_t done = 0;
    while (done < piece) {
      int err = mt_ckpt_fault("write");
      if (err) {
        errno = err;
        return -1;
      }
      ssize_t k = pwrite(fd, p + done, piece - done, (off_t)off);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) {
        if (k == 0) errno = EIO;
        return -1;
      }
      off += k;
      done += (size_t)k;
    }
#ifdef SYNC_FILE_RANGE_WRITE
    /* errors here come back from fsync; where it is not supported, fsync does all */
    sync_file_range(fd, (off_t)start, (off_t)piece, SYNC_FILE_RANGE_WRITE);
#endif
    p += piece;
    left -= piece;
  }
  return 0;
}

/* This rank's boxes into the file: dataset offsets from rank 0, one pwrite
 * per row of a box (one per box where the box is whole rows in memory and
 * in the file). Returns 0, or -1 with errno set. */
static int write_boxes(int fd, const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                       const int64_t *offsets, const char *crash, mt_ckpt_rows *rows) {
  mt_ckpt_walk w;
  mt_ckpt_walk_begin(&w, reg, mesh, st, 1);
  int rc = 0, more, k = 0;
  while (rc == 0 && (more = mt_ckpt_walk_next(&w)) != 0) {
    if (more < 0) {
      errno = ENOMEM;
      rc = -1;
      break;
    }
    if (w.g == 0 && w.i == reg->n / 2) mt_ckpt_test_crash_point(crash, "write", mesh->world_rank);
    int64_t base = offsets[(size_t)w.g * (size_t)reg->n + (size_t)w.i];
    int64_t cols = w.v.true_ext[1], L1 = w.v.local_ext[1];
    for (int b = 0; b < w.sel.boxes.n && rc == 0; b++) {
      const mt_ckpt_box *bx = &w.sel.boxes.b[b];
      const float *mem = w.sel.piece_mem[b];
      int64_t first = base + (int64_t)sizeof(float) * (bx->start[0] * cols + bx->start[1]);
      XXH64_state_t hs; /* the box's rows one after the other, as the index says */
      XXH64_reset(&hs, 0);
      if (bx->count[0] == 1 || (bx->count[1] == cols && L1 == cols)) {
        rc = pwrite_all(fd, mem, (size_t)(bx->count[0] * bx->count[1]), first, &hs);
      } else {
        for (int64_t r = 0; r < bx->count[0] && rc == 0; r++)
          rc = pwrite_all(fd, mem + r * L1, (size_t)bx->count[1],
                          first + (int64_t)sizeof(float) * r * cols, &hs);
      }
      if (k >= rows->n) { /* the walk gives the boxes plan_rows gave */
        errno = EINVAL;
        rc = -1;
      } else {
        uint64_t h = XXH64_digest(&hs);
        memcpy(&rows->rows[(size_t)k++ * MT_CKPT_INDEX_COLS + MT_IX_XXH64], &h, sizeof h);
      }
    }
  }
  mt_ckpt_walk_end(&w);
  return rc;
}

int mt_ckpt_save_shared(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                        mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                        const mt_ckpt_file_opts *fo, mt_err *e) {
  int rank = mesh->world_rank;
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_SHARED_FILE);
  mt_err local = {0};
  if (!little_endian())
    mt_err_set(&local, "checkpoint: ckpt.mode = shared writes little-endian floats as they are in "
                       "memory; this machine is big-endian (use ckpt.mode = per-writer)");
  mt_ckpt_rows mine = {0};
  if (!local.failed) mt_ckpt_plan_rows(reg, mesh, st, 0, &mine, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    free(mine.rows);
    *e = local;
    return 0;
  }
  /* 2. rank 0 writes everything but the tensor data */
  int64_t *all = NULL, n_all = 0;
  mt_ckpt_gather_rows(&mine, mesh, &all, &n_all, &local);
  int64_t *layout = mt_ckpt_gather_layout(mesh);
  size_t n_off = (size_t)MT_CKPT_NGROUPS * (size_t)reg->n;
  int64_t *offsets = mt_calloc(n_off + 1, sizeof(int64_t));
  if (rank == 0 && !local.failed &&
      mt_ckpt_write_main_file(path, meta, reg, all, n_all, layout, mesh->world_size,
                              opts->config_ini, offsets, fo, &local) == 0) {
    int fd = open(path, O_WRONLY);
    if (fd < 0 || mt_ckpt_reserve(fd, mt_ckpt_file_size(path), 0) != 0)
      mt_ckpt_err_sys(&local, errno, "checkpoint step %lld: rank 0 cannot reserve the space of %s",
                      (long long)meta->step, path);
    if (fd >= 0) close(fd);
  }
  free(all);
  free(layout);
  /* 3. agree, then every rank learns where each dataset starts */
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    free(offsets);
    free(mine.rows);
    *e = local;
    return 0;
  }
  MPI_Bcast(offsets, (int)n_off, MPI_INT64_T, 0, MPI_COMM_WORLD);
  /* 4. the tensor data; rank 0 also syncs what it wrote alone. The ranks
   * agree once more before the fsync, so that after an error on one rank
   * the others do not wait for their own data to reach the disk. */
  int err = 0, fd = -1, writes = mine.n > 0 || rank == 0;
  if (writes) {
    err = mt_ckpt_fault("create");
    if (!err && (fd = open(path, O_WRONLY)) < 0) err = errno;
    if (!err && write_boxes(fd, reg, mesh, st, offsets, opts->test_crash, &mine) != 0) err = errno;
  }
  int any_failed = err != 0;
  MPI_Allreduce(MPI_IN_PLACE, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  /* 5. the checksums into the index (rank 0), then every rank's data to disk */
  if (!any_failed) {
    int64_t *all_rows = NULL, n_rows = 0;
    mt_err gather = {0};
    mt_ckpt_gather_rows(&mine, mesh, &all_rows, &n_rows, &gather); /* cannot fail: it did before */
    if (rank == 0 && !err) {
      XXH64_state_t unused;
      XXH64_reset(&unused, 0);
      if (pwrite_all(fd, (const float *)all_rows, (size_t)n_rows * MT_CKPT_INDEX_COLS * 2,
                     offsets[n_off], &unused) != 0)
        err = errno;
    }
    free(all_rows);
  }
  if (writes && !any_failed && !err && (err = mt_ckpt_fault("sync")) == 0 && fsync(fd) != 0) err = errno;
  if (fd >= 0 && close(fd) != 0 && !err) err = errno;
  if (err)
    mt_ckpt_err_sys(e, err, "checkpoint step %lld: rank %d cannot write %s", (long long)meta->step,
                    rank, path);
  free(offsets);
  free(mine.rows);
  return !e->failed;
}
