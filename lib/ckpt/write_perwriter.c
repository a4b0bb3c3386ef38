/* Per-writer mode: one shard file per writing rank (no MPI-IO), and an
 * index file whose virtual datasets present the whole tensors. */
#include "ckpt/ckpt_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
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
                           int64_t n, int ti) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  float fill = NAN; /* never read: a missing source is caught before any read */
  H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &fill);
  hsize_t dims[MT_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
  char src_name[256];
  mt_ckpt_dataset_path(src_name, sizeof src_name, g, t->name);
  for (int64_t j = 0; j < n; j++) {
    const int64_t *r = rows + j * MT_CKPT_INDEX_COLS;
    if (r[MT_IX_GROUP] != g || r[MT_IX_TENSOR] != ti) continue;
    hid_t vs = H5Screate_simple(t->ndim, dims, NULL);
    mt_ckpt_box b = {{r[MT_IX_START0], r[MT_IX_START1]}, {r[MT_IX_COUNT0], r[MT_IX_COUNT1]}, 0, 0};
    mt_ckpt_boxes one = {&b, 1, 1};
    mt_ckpt_select_boxes(vs, &one);
    hsize_t vol = (hsize_t)(b.count[0] * b.count[1]), start = (hsize_t)off[j];
    hsize_t src_dims[1] = {H5S_UNLIMITED};
    hsize_t cur[1] = {start + vol};
    hid_t ss = H5Screate_simple(1, cur, src_dims);
    H5Sselect_hyperslab(ss, H5S_SELECT_SET, &start, NULL, &vol, NULL);
    char file_name[64];
    snprintf(file_name, sizeof file_name, "shard-%05lld.h5", (long long)r[MT_IX_WRITER]);
    H5Pset_virtual(dcpl, vs, file_name, src_name, ss);
    H5Sclose(ss);
    H5Sclose(vs);
  }
  return dcpl;
}

/* The coordinates of every rank, gathered (rank, tp, cp, dp, pp). */
static int64_t *gather_layout(mt_mesh *mesh) {
  int64_t mine[5] = {mesh->world_rank, mesh->tp_rank, mesh->cp_rank, mesh->dp_rank, mesh->pp_rank};
  int64_t *all = mt_calloc((size_t)mesh->world_size * 5, sizeof(int64_t));
  MPI_Allgather(mine, 5, MPI_INT64_T, all, 5, MPI_INT64_T, MPI_COMM_WORLD);
  return all;
}

/* Per-writer, part 1 (no MPI, so it can run in a background thread): write
 * this rank's shard file and return its index rows. */
int mt_ckpt_write_shard(const char *tmpdir, const mt_registry *reg, mt_mesh *mesh,
                        const mt_ckpt_state *st, const char *crash, int64_t **rows, int *n_rows,
                        mt_err *e) {
  char path[1100];
  snprintf(path, sizeof path, "%s/shard-%05d.h5", tmpdir, mesh->world_rank);
  hid_t file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
  int ok = file >= 0;
  *rows = NULL;
  *n_rows = 0;
  if (ok) ok = mt_ckpt_write_tensors(file, 1, reg, mesh, st, crash, rows, n_rows) == 0;
  if (file >= 0) {
    if (H5Fflush(file, H5F_SCOPE_LOCAL) < 0 || H5Fclose(file) < 0) ok = 0;
    if (ok && *n_rows == 0) unlink(path); /* a rank that owns nothing leaves no file */
    else if (ok) mt_ckpt_fsync_path(path);
  }
  if (!ok) mt_err_set(e, "checkpoint: writing %s failed (HDF5 error)", path);
  return ok;
}

/* Per-writer, part 2 (collective): every rank's index rows to rank 0, which
 * writes index.h5 with the virtual datasets. Returns 1 on success. */
int mt_ckpt_finish_per_writer(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                              mt_mesh *mesh, const char *config_ini, const int64_t *rows,
                              int n_rows, mt_err *e) {
  int rank = mesh->world_rank, world = mesh->world_size;
  char path[1100];
  int *counts = mt_calloc((size_t)world, sizeof(int)), *displs = mt_calloc((size_t)world, sizeof(int));
  int mine = n_rows * MT_CKPT_INDEX_COLS;
  MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int64_t total = 0;
  for (int r = 0; r < world; r++) {
    displs[r] = (int)total;
    total += counts[r];
  }
  int64_t *all = rank == 0 ? mt_malloc((size_t)total * sizeof(int64_t) + 8) : NULL;
  MPI_Gatherv(rows, mine, MPI_INT64_T, all, counts, displs, MPI_INT64_T, 0, MPI_COMM_WORLD);
  int64_t *layout = gather_layout(mesh);
  free(counts);
  free(displs);
  if (!mt_err_agree(e, MPI_COMM_WORLD) && rank == 0) {
    int64_t n = total / MT_CKPT_INDEX_COLS;
    snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_INDEX_FILE);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
    hid_t idx = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    int ok = idx >= 0 && mt_ckpt_write_meta_attrs(idx, meta) == 0 &&
             mt_ckpt_create_datasets(idx, reg, all, n) == 0 &&
             mt_ckpt_write_table_i64(idx, "index", all, n, 0, n, MT_CKPT_INDEX_COLS,
                                     H5P_DEFAULT) == 0 &&
             mt_ckpt_write_table_i64(idx, "layout", layout, world, 0, world, 5, H5P_DEFAULT) == 0 &&
             mt_ckpt_write_names(idx, reg, 0, H5P_DEFAULT) == 0 &&
             mt_ckpt_write_text(idx, "config", config_ini ? config_ini : "", 0, H5P_DEFAULT) == 0;
    if (idx >= 0 && (H5Fflush(idx, H5F_SCOPE_LOCAL) < 0 || H5Fclose(idx) < 0)) ok = 0;
    if (!ok) mt_err_set(e, "checkpoint: writing %s failed (HDF5 error)", path);
  }
  free(all);
  free(layout);
  return !e->failed;
}

/* Per-writer mode: each rank that owns data writes shard-<rank>.h5 on its own
 * (no MPI-IO); rank 0 then writes index.h5, whose virtual datasets present
 * the whole tensors. Returns 1 on success. */
int mt_ckpt_save_per_writer(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                            mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                            mt_err *e) {
  int64_t *rows = NULL;
  int n_rows = 0;
  mt_ckpt_write_shard(tmpdir, reg, mesh, st, opts->test_crash, &rows, &n_rows, e);
  int ok = mt_ckpt_finish_per_writer(tmpdir, meta, reg, mesh, opts->config_ini, rows, n_rows, e);
  free(rows);
  return ok;
}
