/* Shared mode: one file, ckpt.h5, that every rank writes into.
 *
 * No HDF5 or MPI-IO call in a save is collective. Parallel HDF5 hangs when
 * an I/O error hits one rank inside a collective call (a flush or a close
 * splits the ranks between a barrier and a broadcast), so:
 *   1. every rank lists its boxes;
 *   2. rank 0 alone lays the file out (h5file.c: its whole size tried and
 *      its blocks reserved first, so a full disk or a file-size limit shows
 *      there, on one rank; HDF5 writes only metadata) and writes the
 *      layout, names and configuration tables;
 *   3. all agree; rank 0 sends every dataset's file offset;
 *   4. every rank writes its boxes there with pwrite, a piece at a time, the
 *      checksum of each piece taken (and its values checked to be finite)
 *      just before it is written: one pass over the memory;
 *   5. all agree; rank 0 gathers the checksums and writes the index; every
 *      rank fsyncs and closes its descriptor (both checked), and all agree
 *      once more. An error is a return code on that rank, agreed by the
 *      caller before anything else.
 * The file is a plain HDF5 file: a parallel or serial reader sees the same. */
#define _GNU_SOURCE             /* sync_file_range */
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

#include "ckpt/core/ckpt_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static atomic_llong g_check_ns; /* see mt_ckpt_last_check_seconds */

void mt_ckpt_check_time_reset(void) { atomic_store(&g_check_ns, 0); }
void mt_ckpt_check_time_add(double seconds) {
  atomic_fetch_add(&g_check_ns, (long long)(seconds * 1e9));
}
double mt_ckpt_last_check_seconds(void) { return 1e-9 * (double)atomic_load(&g_check_ns); }

size_t mt_ckpt_hash_scan(void *hs, const float *p, size_t n) {
  /* 256 KiB at a time: the scan reads what the hash just brought into the
   * cache, so it costs instructions, not a second pass over memory */
  enum { SUB = (256 << 10) / sizeof(float) };
  size_t bad = 0;
  double scan_s = 0.0;
  for (size_t a = 0; a < n; a += SUB) {
    size_t k = n - a < SUB ? n - a : SUB;
    if (hs) XXH64_update(hs, p + a, k * sizeof(float));
    double t0 = mt_now();
    bad += mt_ckpt_count_nonfinite(p + a, k);
    scan_s += mt_now() - t0;
  }
  mt_ckpt_check_time_add(scan_s);
  return bad;
}

int mt_ckpt_write_floats(int fd, const float *p, size_t n, int64_t off, void *hs,
                         size_t *nonfinite) {
  size_t per = MT_CKPT_PIECE_BYTES / sizeof(float);
  while (n > 0) {
    size_t k = n < per ? n : per;
    if (nonfinite) *nonfinite += mt_ckpt_hash_scan(hs, p, k);
    else if (hs) XXH64_update(hs, p, k * sizeof(float));
    if (mt_ckpt_pwrite_full(fd, p, k * sizeof(float), off, "write") != 0) return -1;
#ifdef SYNC_FILE_RANGE_WRITE
    /* errors here come back from fsync; where it is not supported, fsync does all */
    sync_file_range(fd, (off_t)off, (off_t)(k * sizeof(float)), SYNC_FILE_RANGE_WRITE);
#endif
    p += k;
    n -= k;
    off += (int64_t)(k * sizeof(float));
  }
  return 0;
}

void mt_ckpt_err_nonfinite(mt_err *e, int64_t step, int rank, size_t count, const char *path) {
  mt_err_runtime(e, "checkpoint step %lld: rank %d: %zu NaN or Inf values in %s: not saved "
                    "(meshckpt verify and train.resume refuse values that are not finite)",
                 (long long)step, rank, count, path);
}

/* This rank's boxes into the file at the dataset offsets from rank 0: one
 * write per row of a box (one per box where the box is whole rows in memory
 * and in the file), each box's checksum into its index row. */
static int write_boxes(int fd, const char *path, const mt_registry *reg, mt_mesh *mesh,
                       const mt_ckpt_state *st, const int64_t *offsets, int64_t step,
                       mt_ckpt_crash crash, mt_ckpt_rows *rows, mt_err *e) {
  mt_ckpt_walk w;
  mt_ckpt_walk_begin(&w, reg, mesh, st, 1);
  int rc = 0, more, k = 0;
  char where[1300] = "";
  while (rc == 0 && (more = mt_ckpt_walk_next(&w)) != 0) {
    if (more < 0) {
      mt_err_runtime(e, "checkpoint step %lld: rank %d: out of memory listing its boxes",
                     (long long)step, mesh->world_rank);
      rc = -1;
      break;
    }
    if (w.g == 0 && w.i == reg->n / 2)
      mt_ckpt_test_crash_point(crash, MT_CKPT_CRASH_WRITE, mesh->world_rank);
    int64_t base = offsets[(size_t)w.g * (size_t)reg->n + (size_t)w.i];
    int64_t cols = w.v.true_ext[1], L1 = w.v.local_ext[1];
    size_t nonfinite = 0;
    for (int b = 0; b < w.sel.boxes.n && rc == 0; b++) {
      const mt_ckpt_box *bx = &w.sel.boxes.b[b];
      const float *mem = w.sel.piece_mem[b];
      int64_t first = base + (int64_t)sizeof(float) * (bx->start[0] * cols + bx->start[1]);
      XXH64_state_t hs; /* the box's rows one after the other, as the index says */
      XXH64_reset(&hs, 0);
      if (bx->count[0] == 1 || (bx->count[1] == cols && L1 == cols)) {
        rc = mt_ckpt_write_floats(fd, mem, (size_t)(bx->count[0] * bx->count[1]), first, &hs,
                                  &nonfinite);
      } else {
        for (int64_t r = 0; r < bx->count[0] && rc == 0; r++)
          rc = mt_ckpt_write_floats(fd, mem + r * L1, (size_t)bx->count[1],
                                    first + (int64_t)sizeof(float) * r * cols, &hs, &nonfinite);
      }
      if (rc != 0) {
        mt_ckpt_err_sys(e, errno, "checkpoint step %lld: rank %d cannot write %s", (long long)step,
                        mesh->world_rank, path);
      } else if (k >= rows->n) { /* the walk gives the boxes plan_rows gave */
        mt_err_runtime(e, "checkpoint step %lld: rank %d: its boxes changed during the save",
                       (long long)step, mesh->world_rank);
        rc = -1;
      } else {
        uint64_t h = XXH64_digest(&hs);
        memcpy(&rows->rows[(size_t)k++ * MT_CKPT_INDEX_COLS + MT_IX_XXH64], &h, sizeof h);
      }
    }
    if (rc == 0 && nonfinite) {
      mt_ckpt_dataset_path(where, sizeof where, w.g, w.t->name);
      mt_ckpt_err_nonfinite(e, step, mesh->world_rank, nonfinite, where);
      rc = -1;
    }
  }
  mt_ckpt_walk_end(&w);
  return rc;
}

int mt_ckpt_save_shared(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                        mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                        const mt_ckpt_file_opts *fo, mt_ckpt_written *w, mt_err *e) {
  int rank = mesh->world_rank;
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_SHARED_FILE);
  mt_err local = {0};
  mt_ckpt_rows mine = {0};
  mt_ckpt_plan_rows(reg, mesh, st, 0, &mine, &local);
  if (mt_ckpt_agree(&local)) {
    free(mine.rows);
    *e = local;
    return mt_err_pass(e);
  }
  /* 2. rank 0 lays the file out and writes the tables but the index */
  int64_t *all = NULL, n_all = 0, *layout = NULL;
  mt_ckpt_gather_rows(&mine, &all, &n_all, &local);
  mt_ckpt_gather_layout(mesh, &layout, &local);
  size_t n_off = (size_t)MT_CKPT_NGROUPS * (size_t)reg->n;
  int64_t *offsets = mt_calloc(n_off + 1, sizeof(int64_t));
  mt_ckpt_main m;
  int have_main = 0;
  if (rank == 0 && !local.failed &&
      mt_ckpt_main_create(&m, path, meta, reg, all, n_all, mesh->world_size, opts->config_ini, 1,
                          fo, &local) == 0) {
    have_main = 1;
    memcpy(offsets, m.offsets, n_off * sizeof(int64_t));
    mt_ckpt_main_put_tables(&m, layout, reg, opts->config_ini, &local);
  }
  free(layout);
  /* 3. agree, then every rank learns where each dataset starts */
  if (mt_ckpt_agree(&local) || mt_ckpt_bcast(offsets, (int64_t)(n_off * sizeof(int64_t)), &local) != 0) {
    if (have_main) mt_ckpt_main_finish(&m, 0, &local);
    free(all);
    free(offsets);
    free(mine.rows);
    *e = local;
    return mt_err_pass(e);
  }
  /* 4. the tensor data. The ranks agree once more before the index and the
   * fsync, so that after an error on one rank the others do not wait for
   * their own data to reach the disk. */
  int err = 0, fd = -1, writes = mine.n > 0;
  if (writes) {
    err = mt_ckpt_fault("create");
    if (!err && (fd = open(path, O_WRONLY)) < 0) err = errno;
    if (err)
      mt_ckpt_err_sys(&local, err, "checkpoint step %lld: rank %d cannot write %s",
                      (long long)meta->step, rank, path);
    else
      write_boxes(fd, path, reg, mesh, st, offsets, meta->step, opts->test_crash, &mine, &local);
  }
  int64_t failed = local.failed;
  mt_ckpt_allreduce_i64(&failed, 1, MPI_MAX, &local);
  /* 5. the checksums to rank 0, which writes the index; then every rank's
   * data to disk */
  if (!failed) {
    free(all);
    all = NULL;
    mt_ckpt_gather_rows(&mine, &all, &n_all, &local);
    if (have_main && !local.failed) mt_ckpt_main_put_index(&m, all, &local);
  }
  if (fd >= 0) {
    if (!failed && !local.failed && (err = mt_ckpt_fault("sync")) == 0 && fsync(fd) != 0)
      err = errno;
    if (mt_ckpt_close_fd(fd) != 0 && !err) err = errno;
    if (err && !failed)
      mt_ckpt_err_sys(&local, err, "checkpoint step %lld: rank %d cannot write %s",
                      (long long)meta->step, rank, path);
  }
  if (have_main) mt_ckpt_main_finish(&m, !failed && !local.failed, &local);
  if (rank == 0 && !failed && !local.failed)
    mt_ckpt_written_keep(w, &all, n_all, reg, fo);
  free(all);
  free(offsets);
  free(mine.rows);
  if (local.failed) {
    *e = local;
    return mt_err_pass(e);
  }
  return 0;
}
