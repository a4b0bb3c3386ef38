/* Per-writer mode: one shard file per writing rank (no MPI-IO), and an
 * index file whose virtual datasets present the whole tensors. */
#define _GNU_SOURCE /* sync_file_range */
#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Element offset of each index row's data inside its writer's shard dataset:
 * a writer's rows for one tensor are consecutive, in the order it wrote them. */
int64_t *mt_ckpt_shard_offsets(const int64_t *rows, int64_t n) {
  int64_t *off = mt_calloc((size_t)n + 1, sizeof(int64_t));
  for (int64_t j = 1; j < n; j++) {
    const int64_t *a = rows + (j - 1) * MT_CKPT_INDEX_COLS, *b = rows + j * MT_CKPT_INDEX_COLS;
    int same = a[MT_IX_WRITER] == b[MT_IX_WRITER] && a[MT_IX_GROUP] == b[MT_IX_GROUP] &&
               a[MT_IX_TENSOR] == b[MT_IX_TENSOR];
    off[j] = same ? off[j - 1] + a[MT_IX_COUNT0] * a[MT_IX_COUNT1] : 0;
  }
  return off;
}

/* A virtual dataset's creation list: each written box maps to its range in
 * the writer's shard-<rank>.h5, /<group>/<name>, a 1-D array. */
hid_t mt_ckpt_virtual_dcpl(const mt_tensor *t, int g, const int64_t *rows, const int64_t *off,
                           int64_t n, int ti, const char *where, mt_err *e) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  float fill = NAN; /* never read: a missing source is caught before any read */
  int ok = dcpl >= 0 && H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &fill) >= 0;
  hsize_t dims[MT_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
  char src_name[256];
  mt_ckpt_dataset_path(src_name, sizeof src_name, g, t->name);
  int64_t d64[MT_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) d64[d] = t->shape[d];
  for (int64_t j = 0; j < n && ok; j++) {
    const int64_t *r = rows + j * MT_CKPT_INDEX_COLS;
    if (r[MT_IX_GROUP] != g || r[MT_IX_TENSOR] != ti) continue;
    mt_ckpt_box b = {{r[MT_IX_START0], r[MT_IX_START1]}, {r[MT_IX_COUNT0], r[MT_IX_COUNT1]}, 0, 0};
    char file_name[64];
    snprintf(file_name, sizeof file_name, "shard-%05lld.h5", (long long)r[MT_IX_WRITER]);
    /* each regular piece of the box (an expert tensor's box may span
     * experts) maps to its consecutive range of the shard's 1-D array */
    int64_t st[3][MT_MAX_DIMS], ct[3][MT_MAX_DIMS];
    int np = mt_ckpt_box_pieces(&b, t->ndim, d64, st, ct);
    hsize_t start = (hsize_t)off[j];
    for (int p = 0; p < np && ok; p++) {
      hsize_t vstart[MT_MAX_DIMS], vcount[MT_MAX_DIMS], vol = 1;
      for (int d = 0; d < t->ndim; d++) {
        vstart[d] = (hsize_t)st[p][d];
        vcount[d] = (hsize_t)ct[p][d];
        vol *= vcount[d];
      }
      hsize_t src_dims[1] = {H5S_UNLIMITED};
      hsize_t cur[1] = {start + vol};
      hid_t vs = H5Screate_simple(t->ndim, dims, NULL);
      hid_t ss = H5Screate_simple(1, cur, src_dims);
      ok = vs >= 0 && ss >= 0 &&
           H5Sselect_hyperslab(vs, H5S_SELECT_SET, vstart, NULL, vcount, NULL) >= 0 &&
           H5Sselect_hyperslab(ss, H5S_SELECT_SET, &start, NULL, &vol, NULL) >= 0 &&
           H5Pset_virtual(dcpl, vs, file_name, src_name, ss) >= 0;
      if (!ok) mt_ckpt_err_h5(e, "%s", where);
      if (ss >= 0) H5Sclose(ss);
      if (vs >= 0) H5Sclose(vs);
      start += vol;
    }
  }
  if (!ok) {
    mt_ckpt_err_h5(e, "%s", where); /* no-op when the loop said it already */
    if (dcpl >= 0) H5Pclose(dcpl);
    return -1;
  }
  return dcpl;
}

/* This rank's boxes of every tensor it writes, each tensor a 1-D dataset of
 * its boxes end to end, and one index row per box with the checksum of its
 * data. Runs in the background writer: no MPI, no abort (errors in e). */
/* A dataset's data in pieces of at most this many floats, the disk's
 * writeback of each started as soon as it is written (the final fsync then
 * has little left to wait for). */
#define PIECE_FLOATS ((hsize_t)2 << 20)

static int write_pieces(hid_t d, hid_t fs, const float *data, hsize_t n, int fd) {
  for (hsize_t start = 0; start < n; start += PIECE_FLOATS) {
    hsize_t cnt = n - start < PIECE_FLOATS ? n - start : PIECE_FLOATS;
    hid_t ms = H5Screate_simple(1, &cnt, NULL);
    int ok = ms >= 0 && H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &cnt, NULL) >= 0 &&
             H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, data + start) >= 0;
    if (ms >= 0) H5Sclose(ms);
    if (!ok) return -1;
#ifdef SYNC_FILE_RANGE_WRITE
    if (fd >= 0) sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE); /* errors: fsync reports them */
#endif
  }
  return 0;
}

static int write_tensors(hid_t file, int fd, const mt_registry *reg, mt_mesh *mesh,
                         const mt_ckpt_state *st, const char *crash, mt_ckpt_rows *out,
                         const char *where, mt_err *e) {
  mt_ckpt_walk w;
  mt_ckpt_walk_begin(&w, reg, mesh, st, 1);
  float *staging = NULL;
  size_t staging_cap = 0;
  int rc = 0, more;
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  if (lcpl < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0) {
    mt_ckpt_err_h5(e, "%s", where);
    rc = -1;
  }
  while (rc == 0 && (more = mt_ckpt_walk_next(&w)) != 0) {
    if (more < 0) {
      mt_err_set(e, "%s: out of memory", where);
      rc = -1;
      break;
    }
    if (w.g == 0 && w.i == reg->n / 2) mt_ckpt_test_crash_point(crash, "write", mesh->world_rank);
    if (w.sel.volume == 0) continue;
    float *data = mt_ckpt_sel_contiguous(&w.sel, w.v.local_ext[1]);
    if (!data) {
      if (w.sel.volume > staging_cap) {
        free(staging);
        staging_cap = w.sel.volume;
        if (!(staging = malloc(staging_cap * sizeof(float)))) {
          mt_err_set(e, "%s: out of memory", where);
          rc = -1;
          break;
        }
      }
      mt_ckpt_sel_copy(&w.sel, staging, w.v.local_ext[1], 0);
      data = staging;
    }
    char path[256];
    mt_ckpt_dataset_path(path, sizeof path, w.g, w.t->name);
    hsize_t n1 = (hsize_t)w.sel.volume;
    hid_t fs = H5Screate_simple(1, &n1, NULL), d = -1;
    if (fs >= 0) d = H5Dcreate2(file, path, H5T_IEEE_F32LE, fs, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0 || write_pieces(d, fs, data, n1, fd) != 0) {
      mt_ckpt_err_h5(e, "%s", where);
      rc = -1;
    } else {
      int err = mt_ckpt_fault("write");
      if (err) {
        mt_ckpt_err_sys(e, err, "%s", where);
        rc = -1;
      }
    }
    if (d >= 0) H5Dclose(d);
    if (fs >= 0) H5Sclose(fs);
    size_t k = 0;
    for (int b = 0; b < w.sel.boxes.n && rc == 0; b++) {
      const mt_ckpt_box *bx = &w.sel.boxes.b[b];
      size_t vol = (size_t)(bx->count[0] * bx->count[1]);
      if (mt_ckpt_append_row(out, w.g, w.i, mesh->world_rank, bx, mt_ckpt_box_hash(data + k, vol)) != 0) {
        mt_err_set(e, "%s: out of memory", where);
        rc = -1;
      }
      k += vol;
    }
  }
  if (lcpl >= 0) H5Pclose(lcpl);
  free(staging);
  mt_ckpt_walk_end(&w);
  return rc;
}

int mt_ckpt_write_shard(const char *tmpdir, const mt_registry *reg, mt_mesh *mesh,
                        const mt_ckpt_state *st, const char *crash, int64_t step,
                        mt_ckpt_rows *rows, mt_err *e) {
  char path[1100], where[1300];
  snprintf(path, sizeof path, "%s/shard-%05d.h5", tmpdir, mesh->world_rank);
  snprintf(where, sizeof where, "checkpoint step %lld: rank %d cannot write %s", (long long)step,
           mesh->world_rank, path);
  rows->n = 0;
  int err = mt_ckpt_fault("create");
  if (err) {
    mt_ckpt_err_sys(e, err, "%s", where);
    return 0;
  }
  /* The shard's whole size (data and metadata) is reserved in the file itself
   * before HDF5 writes into it: the ranks writing their shards at the same
   * time cannot take that space, so neither H5Dwrite nor H5Fclose meets a
   * full disk. A small ballast covers closing the file if even the
   * reservation fails. */
  long long bytes = 0, datasets = 0;
  mt_ckpt_walk w;
  mt_ckpt_walk_begin(&w, reg, mesh, st, 1);
  int more;
  while ((more = mt_ckpt_walk_next(&w)) == 1) {
    bytes += 4LL * (long long)w.sel.volume;
    datasets += w.sel.volume > 0;
  }
  mt_ckpt_walk_end(&w);
  bytes += mt_ckpt_metadata_bytes(datasets, 0, 0);
  mt_ckpt_ballast ballast;
  if (more < 0 || mt_ckpt_ballast_take(&ballast, tmpdir, mesh->world_rank, 64 << 10) != 0) {
    mt_ckpt_err_sys(e, more < 0 ? ENOMEM : errno, "%s", where);
    return 0;
  }
  hid_t fapl = mt_ckpt_fapl_serial();
  hid_t file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
  if (file < 0) mt_ckpt_err_h5(e, "%s", where); /* before any other HDF5 call clears the stack */
  H5Pclose(fapl);
  if (file < 0) {
    mt_ckpt_ballast_release(&ballast);
    return 0;
  }
  int fd = open(path, O_WRONLY);
  int ok = fd >= 0 && mt_ckpt_reserve(fd, bytes, 1) == 0;
  if (!ok) mt_ckpt_err_sys(e, errno, "%s", where);
  mt_ckpt_ballast_release(&ballast);
  if (ok) ok = write_tensors(file, fd, reg, mesh, st, crash, rows, where, e) == 0;
  if (H5Fclose(file) < 0 && ok) {
    mt_ckpt_err_h5(e, "%s", where);
    ok = 0;
  }
  struct stat sb; /* give back the part of the reservation the file did not use */
  if (fd >= 0 && fstat(fd, &sb) == 0) (void)!ftruncate(fd, sb.st_size);
  if (fd >= 0) close(fd);
  if (ok && rows->n == 0) {
    unlink(path); /* a rank that owns nothing leaves no file */
  } else if (ok && mt_ckpt_fsync_path(path) != 0) {
    mt_ckpt_err_sys(e, errno, "%s", where);
    ok = 0;
  }
  return ok;
}

int mt_ckpt_finish_per_writer(const char *tmpdir, const mt_ckpt_meta *meta,
                              const mt_registry *reg, mt_mesh *mesh, const char *config_ini,
                              const mt_ckpt_rows *rows, const mt_ckpt_file_opts *fo, mt_err *e) {
  int64_t *all = NULL, n_all = 0;
  mt_ckpt_gather_rows(rows, mesh, &all, &n_all, e);
  int64_t *layout = mt_ckpt_gather_layout(mesh);
  if (!mt_err_agree(e, MPI_COMM_WORLD) && mesh->world_rank == 0) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_INDEX_FILE);
    if (mt_ckpt_write_main_file(path, meta, reg, all, n_all, layout, mesh->world_size, config_ini,
                                NULL, fo, e) == 0 &&
        mt_ckpt_fsync_path(path) != 0)
      mt_ckpt_err_sys(e, errno, "checkpoint step %lld: rank 0 cannot write %s",
                      (long long)meta->step, path);
  }
  free(all);
  free(layout);
  return !e->failed;
}

int mt_ckpt_save_per_writer(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                            mt_mesh *mesh, const mt_ckpt_state *st,
                            const mt_ckpt_save_opts *opts, const mt_ckpt_file_opts *fo,
                            mt_err *e) {
  mt_ckpt_rows rows = {0};
  mt_ckpt_write_shard(tmpdir, reg, mesh, st, opts->test_crash, meta->step, &rows, e);
  int ok = mt_ckpt_finish_per_writer(tmpdir, meta, reg, mesh, opts->config_ini, &rows, fo, e);
  free(rows.rows);
  return ok;
}
