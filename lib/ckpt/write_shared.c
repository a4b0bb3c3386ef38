/* Shared mode: one file, parallel HDF5 (MPI-IO). */
#include "ckpt/ckpt_internal.h"

#include <stdio.h>
#include <stdlib.h>

/* Shared mode: one file, parallel HDF5, collective writes. Returns 1 on success. */
int mt_ckpt_save_shared(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                        mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                        mt_err *e) {
  int rank = mesh->world_rank, world = mesh->world_size;
  char file_path[1100];
  snprintf(file_path, sizeof file_path, "%s/%s", tmpdir, MT_CKPT_SHARED_FILE);
  hid_t fapl = mt_ckpt_fapl_mpio(MPI_COMM_WORLD);
  hid_t file = H5Fcreate(file_path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  int ok = file >= 0;
  int64_t *rows = NULL;
  int n_rows = 0;
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  if (ok)
    ok = mt_ckpt_write_meta_attrs(file, meta) == 0 && mt_ckpt_create_datasets(file, reg, NULL, 0) == 0;
  if (ok) ok = mt_ckpt_write_tensors(file, 0, reg, mesh, st, opts->test_crash, &rows, &n_rows) == 0;
  if (ok) {
    int *counts = mt_calloc((size_t)world, sizeof(int));
    MPI_Allgather(&n_rows, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
    int64_t total = 0, row0 = 0;
    for (int r = 0; r < world; r++) {
      if (r < rank) row0 += counts[r];
      total += counts[r];
    }
    free(counts);
    ok = mt_ckpt_write_table_i64(file, "index", rows, total, row0, n_rows, MT_CKPT_INDEX_COLS,
                                 dxpl) == 0;
    int64_t lay[5] = {rank, mesh->tp_rank, mesh->cp_rank, mesh->dp_rank, mesh->pp_rank};
    ok = ok && mt_ckpt_write_table_i64(file, "layout", lay, world, rank, 1, 5, dxpl) == 0;
    ok = ok && mt_ckpt_write_names(file, reg, rank, dxpl) == 0;
    const char *ini = opts->config_ini ? opts->config_ini : "";
    ok = ok && mt_ckpt_write_text(file, "config", ini, rank, dxpl) == 0;
  }
  H5Pclose(dxpl);
  free(rows);
  if (file >= 0) {
    if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0) ok = 0; /* MPI_File_sync: durable on every rank */
    if (H5Fclose(file) < 0) ok = 0;
  }
  if (!ok) mt_err_set(e, "checkpoint: writing %s failed (HDF5 error)", file_path);
  return ok;
}
