/* What both on-disk modes write: the index rows of every rank's boxes with
 * their checksums, and the file that rank 0 writes alone (root attributes,
 * the canonical datasets with their attributes, the index, the layout, the
 * tensor names, the configuration): ckpt.h5 in shared mode, index.h5 in
 * per-writer mode. Nothing here aborts or is collective unless it says so. */
#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_ckpt_append_row(mt_ckpt_rows *r, int g, int ti, int writer, const mt_ckpt_box *b,
                       uint64_t h) {
  if (r->n == r->cap) {
    int cap = r->cap ? 2 * r->cap : 64;
    int64_t *grown = realloc(r->rows, (size_t)cap * MT_CKPT_INDEX_COLS * sizeof(int64_t));
    if (!grown) return -1;
    r->rows = grown;
    r->cap = cap;
  }
  int64_t *row = r->rows + (size_t)r->n++ * MT_CKPT_INDEX_COLS;
  row[MT_IX_GROUP] = g;
  row[MT_IX_TENSOR] = ti;
  row[MT_IX_WRITER] = writer;
  row[MT_IX_START0] = b->start[0];
  row[MT_IX_START1] = b->start[1];
  row[MT_IX_COUNT0] = b->count[0];
  row[MT_IX_COUNT1] = b->count[1];
  memcpy(&row[MT_IX_XXH64], &h, sizeof h);
  return 0;
}

int mt_ckpt_plan_rows(const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                      int with_hash, mt_ckpt_rows *out, mt_err *e) {
  mt_ckpt_walk w;
  mt_ckpt_walk_begin(&w, reg, mesh, st, 1);
  int rc;
  while ((rc = mt_ckpt_walk_next(&w)) == 1) {
    for (int b = 0; b < w.sel.boxes.n && rc == 1; b++) {
      const mt_ckpt_box *bx = &w.sel.boxes.b[b];
      uint64_t h = with_hash ? mt_ckpt_box_hash_mem(w.sel.piece_mem[b], bx, w.v.local_ext[1]) : 0;
      if (mt_ckpt_append_row(out, w.g, w.i, mesh->world_rank, bx, h) != 0) rc = -1;
    }
    if (rc != 1) break;
  }
  mt_ckpt_walk_end(&w);
  if (rc < 0) mt_err_set(e, "checkpoint: rank %d: out of memory listing its boxes", mesh->world_rank);
  return rc < 0 ? -1 : 0;
}

int mt_ckpt_gather_rows(const mt_ckpt_rows *mine, mt_mesh *mesh, int64_t **all, int64_t *n_all,
                        mt_err *e) {
  int rank = mesh->world_rank, world = mesh->world_size;
  int count = mine->n * MT_CKPT_INDEX_COLS;
  int *counts = rank == 0 ? mt_calloc((size_t)world, sizeof(int)) : NULL;
  int *displs = rank == 0 ? mt_calloc((size_t)world, sizeof(int)) : NULL;
  MPI_Gather(&count, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
  int64_t total = 0;
  int too_many = 0;
  for (int r = 0; rank == 0 && r < world; r++) {
    displs[r] = (int)total;
    total += counts[r];
    if (total > INT_MAX) too_many = 1; /* MPI counts are int */
  }
  MPI_Bcast(&too_many, 1, MPI_INT, 0, MPI_COMM_WORLD);
  *all = NULL;
  *n_all = 0;
  if (too_many) {
    mt_err_set(e, "checkpoint: the index has more than %d entries", INT_MAX);
  } else {
    if (rank == 0) *all = mt_malloc((size_t)total * sizeof(int64_t) + 8);
    MPI_Gatherv(mine->rows, count, MPI_INT64_T, *all, counts, displs, MPI_INT64_T, 0,
                MPI_COMM_WORLD);
    *n_all = total / MT_CKPT_INDEX_COLS;
  }
  free(counts);
  free(displs);
  return too_many ? -1 : 0;
}

int64_t *mt_ckpt_gather_layout(mt_mesh *mesh) {
  int64_t mine[5] = {mesh->world_rank, mesh->tp_rank, mesh->cp_rank, mesh->dp_rank, mesh->pp_rank};
  int64_t *all = mesh->world_rank == 0 ? mt_calloc((size_t)mesh->world_size * 5, sizeof(int64_t))
                                       : NULL;
  MPI_Gather(mine, 5, MPI_INT64_T, all, 5, MPI_INT64_T, 0, MPI_COMM_WORLD);
  return all;
}

static const char *split_name(mt_placement p) {
  static const char *dims[MT_MAX_DIMS] = {"dim0", "dim1", "dim2", "dim3"};
  return p.kind == MT_PLACE_SHARDED && p.dim >= 0 && p.dim < MT_MAX_DIMS ? dims[p.dim]
                                                                         : "replicated";
}

/* experts: how the folded mesh splits them (global expert ids along dim 0) */
static int expert_attrs(hid_t d, const mt_tensor *t, const char *where, mt_err *e) {
  const char *axes = t->ndim == 3 ? "expert,out,in" : "expert,out";
  const char *replicated_over = t->etp.kind == MT_PLACE_SHARDED ? "edp" : "edp,etp";
  return mt_ckpt_put_attr_str(d, "ep_split", split_name(t->ep), where, e) != 0 ||
                 mt_ckpt_put_attr_str(d, "etp_split", split_name(t->etp), where, e) != 0 ||
                 mt_ckpt_put_attr_str(d, "axes", axes, where, e) != 0 ||
                 mt_ckpt_put_attr_str(d, "replicated_over", replicated_over, where, e) != 0
             ? -1
             : 0;
}

static int tensor_attrs(hid_t d, const mt_tensor *t, const char *where, mt_err *e) {
  /* how runtimes split it; the data itself is the whole logical tensor */
  const char *split = split_name(t->tp);
  int64_t padded[MT_MAX_DIMS];
  for (int k = 0; k < t->ndim; k++) padded[k] = t->padded[k];
  if (t->group == MT_GROUP_EDP)
    return mt_ckpt_put_attr_str(d, "tp_split", "replicated", where, e) != 0 ||
                   mt_ckpt_put_attr_i64(d, "fused_blocks", 1, where, e) != 0 ||
                   mt_ckpt_put_attr_i64v(d, "padded_shape", padded, t->ndim, where, e) != 0 ||
                   mt_ckpt_put_attr_i64(d, "weight_decay", t->weight_decay, where, e) != 0 ||
                   expert_attrs(d, t, where, e) != 0
               ? -1
               : 0;
  const char *axes = !strcmp(t->name, "wte.weight")   ? "vocab,embd"
                     : !strcmp(t->name, "wpe.weight") ? "position,embd"
                     : t->ndim == 2                   ? "out,in"
                                                      : "channel";
  const char *replicated_over = t->tp.kind == MT_PLACE_SHARDED ? "dp,cp" : "dp,cp,tp";
  if (mt_ckpt_put_attr_str(d, "tp_split", split, where, e) != 0 ||
      mt_ckpt_put_attr_i64(d, "fused_blocks", t->tp.fused_blocks, where, e) != 0 ||
      mt_ckpt_put_attr_i64v(d, "padded_shape", padded, t->ndim, where, e) != 0 ||
      mt_ckpt_put_attr_str(d, "axes", axes, where, e) != 0 ||
      mt_ckpt_put_attr_str(d, "replicated_over", replicated_over, where, e) != 0 ||
      mt_ckpt_put_attr_i64(d, "weight_decay", t->weight_decay, where, e) != 0)
    return -1;
  if (t->tied_to[0]) return mt_ckpt_put_attr_str(d, "tied_to", t->tied_to, where, e);
  return 0;
}

/* The canonical datasets: contiguous with their space allocated now and
 * their file offsets returned (offsets != NULL: shared mode, where every
 * rank then writes its boxes there), or virtual over the writers' shard
 * files (per-writer mode's index file; rows: the whole index). */
static int create_datasets(hid_t file, const mt_registry *reg, const int64_t *rows,
                           int64_t n_rows, int64_t *offsets, const mt_ckpt_file_opts *fo,
                           const char *where, mt_err *e) {
  hid_t groups[MT_CKPT_NGROUPS] = {-1, -1, -1}, optim = -1, types[MT_CKPT_NGROUPS] = {-1, -1, -1};
  int rc = -1;
  int64_t *shard_off = offsets ? NULL : mt_ckpt_shard_offsets(rows, n_rows);
  int ng = fo->groups;
  for (int g = 0; g < ng; g++)
    if ((types[g] = mt_ckpt_h5_type(fo->dtype[g])) < 0) {
      mt_ckpt_err_h5(e, "%s", where);
      goto done;
    }
  if ((groups[0] = H5Gcreate2(file, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0 ||
      (ng > 1 && (optim = H5Gcreate2(file, "optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0) ||
      (ng > 1 && (groups[1] = H5Gcreate2(optim, "exp_avg", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0) ||
      (ng > 1 && (groups[2] = H5Gcreate2(optim, "exp_avg_sq", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0)) {
    mt_ckpt_err_h5(e, "%s", where);
    goto done;
  }
  for (int k = 0; k < ng * reg->n; k++) {
    {
      /* in the order asked for: it is the order of the data in the file */
      int slot = fo->order ? fo->order[k] : k, g = slot / reg->n, i = slot % reg->n;
      const mt_tensor *t = &reg->t[i];
      hsize_t dims[MT_MAX_DIMS];
      for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
      hid_t s = H5Screate_simple(t->ndim, dims, NULL), dcpl = -1, d = -1;
      if (offsets) {
        /* space now, never filled: every element is written by its owner */
        dcpl = H5Pcreate(H5P_DATASET_CREATE);
        if (dcpl >= 0 && (H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) < 0 ||
                          H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0)) {
          H5Pclose(dcpl);
          dcpl = -1;
        }
      } else {
        dcpl = mt_ckpt_virtual_dcpl(t, g, rows, shard_off, n_rows, i, where, e);
        if (dcpl < 0) {
          if (s >= 0) H5Sclose(s);
          goto done;
        }
      }
      if (s >= 0 && dcpl >= 0)
        d = H5Dcreate2(groups[g], t->name, types[g], s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      int ok = d >= 0;
      if (ok && offsets) {
        haddr_t a = H5Dget_offset(d);
        ok = a != HADDR_UNDEF;
        offsets[(size_t)g * (size_t)reg->n + (size_t)i] = (int64_t)a;
      }
      if (!ok) mt_ckpt_err_h5(e, "%s", where);
      else ok = tensor_attrs(d, t, where, e) == 0;
      if (d >= 0) H5Dclose(d);
      if (dcpl >= 0) H5Pclose(dcpl);
      if (s >= 0) H5Sclose(s);
      if (!ok) goto done;
    }
  }
  rc = 0;
done:
  free(shard_off);
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    if (groups[g] >= 0) H5Gclose(groups[g]);
    if (types[g] >= 0) H5Tclose(types[g]);
  }
  if (optim >= 0) H5Gclose(optim);
  return rc;
}

/* where the index's data starts in the file (a writer that fills in the
 * checksums later writes them there) */
static int index_offset(hid_t file, int64_t *off, const char *where, mt_err *e) {
  hid_t d = H5Dopen2(file, "index", H5P_DEFAULT);
  haddr_t a = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
  if (d >= 0) H5Dclose(d);
  if (a == HADDR_UNDEF) {
    mt_ckpt_err_h5(e, "%s", where);
    return -1;
  }
  *off = (int64_t)a;
  return 0;
}

/* the MoE routing bias of aux-loss-free balancing, (MoE blocks, experts)
 * float32, when the run has one */
static int write_moe_bias(hid_t file, const mt_ckpt_meta *meta, const char *where, mt_err *e) {
  if (!meta->moe_bias || meta->moe_bias_rows <= 0 || meta->moe_experts <= 0) return 0;
  int rc = -1;
  hsize_t dims[2] = {(hsize_t)meta->moe_bias_rows, (hsize_t)meta->moe_experts};
  hid_t s = H5Screate_simple(2, dims, NULL), d = -1;
  if (s >= 0)
    d = H5Dcreate2(file, MT_CKPT_MOE_BIAS, H5T_IEEE_F32LE, s, H5P_DEFAULT, H5P_DEFAULT,
                   H5P_DEFAULT);
  if (d >= 0 && H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, meta->moe_bias) >= 0)
    rc = 0;
  else
    mt_ckpt_err_h5(e, "%s", where);
  if (d >= 0) H5Dclose(d);
  if (s >= 0) H5Sclose(s);
  return rc;
}

int mt_ckpt_write_main_file(const char *path, const mt_ckpt_meta *meta, const mt_registry *reg,
                            const int64_t *rows, int64_t n_rows, const int64_t *layout, int world,
                            const char *config_ini, int64_t *offsets,
                            const mt_ckpt_file_opts *fo, mt_err *e) {
  static const mt_ckpt_file_opts training = {MT_CKPT_NGROUPS, {MT_CKPT_F32, MT_CKPT_F32, MT_CKPT_F32},
                                             NULL};
  if (!fo) fo = &training;
  char where[1200];
  snprintf(where, sizeof where, "checkpoint step %lld: rank 0 cannot write %s",
           (long long)meta->step, path);
  int err = mt_ckpt_fault("create");
  if (err) {
    mt_ckpt_err_sys(e, err, "%s", where);
    return -1;
  }
  char dir[1100];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  long long small = n_rows * MT_CKPT_INDEX_COLS * 8 + (long long)reg->n * MT_NAME_MAX +
                    (config_ini ? (long long)strlen(config_ini) : 0) + 40LL * world;
  mt_ckpt_ballast ballast;
  if (mt_ckpt_ballast_take(&ballast, slash ? dir : ".", 0,
                           mt_ckpt_metadata_bytes(MT_CKPT_NGROUPS * (long long)reg->n, n_rows,
                                                  small)) != 0) {
    mt_ckpt_err_sys(e, errno, "%s", where);
    return -1;
  }
  hid_t fapl = mt_ckpt_fapl_create();
  unsigned create_flags = H5F_ACC_EXCL;
  MPI_Info info = offsets ? mt_ckpt_io_info() : MPI_INFO_NULL;
  if (info != MPI_INFO_NULL) {
    /* the shared file is made by MPI-IO first, so the striping hints
     * (striping_factor, striping_unit) take effect where the file system
     * has them (Lustre); HDF5 then writes into it. Datasets are aligned on
     * the stripe. */
    char unit[64];
    int found = 0;
    MPI_Info_get(info, "striping_unit", (int)sizeof unit - 1, unit, &found);
    long long su = found ? atoll(unit) : 0;
    if (su >= 65536 && su <= (1LL << 30)) H5Pset_alignment(fapl, 65536, (hsize_t)su);
    MPI_File fh;
    int rc = MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY,
                           info, &fh);
    MPI_Info_free(&info);
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(rc, msg, &len);
      mt_err_set(e, "%s: %s (MPI-IO, with ckpt.io_hints)", where, msg);
      H5Pclose(fapl);
      mt_ckpt_ballast_release(&ballast);
      return -1;
    }
    MPI_File_close(&fh);
    create_flags = H5F_ACC_TRUNC; /* ours, made just now in our temporary directory */
  }
  hid_t file = H5Fcreate(path, create_flags, H5P_DEFAULT, fapl);
  if (file < 0) mt_ckpt_err_h5(e, "%s", where); /* before any other HDF5 call clears the stack */
  H5Pclose(fapl);
  if (file < 0) {
    mt_ckpt_ballast_release(&ballast);
    return -1;
  }
  int ok = mt_ckpt_write_meta_attrs(file, meta, fo->groups, where, e) == 0 &&
           create_datasets(file, reg, rows, n_rows, offsets, fo, where, e) == 0 &&
           mt_ckpt_write_table_i64(file, "index", rows, n_rows, MT_CKPT_INDEX_COLS, where, e) == 0 &&
           (!offsets || index_offset(file, &offsets[MT_CKPT_NGROUPS * (size_t)reg->n], where, e) == 0) &&
           mt_ckpt_write_table_i64(file, "layout", layout, world, 5, where, e) == 0 &&
           mt_ckpt_write_names(file, reg, where, e) == 0 &&
           mt_ckpt_write_text(file, "config", config_ini ? config_ini : "", where, e) == 0 &&
           write_moe_bias(file, meta, where, e) == 0;
  if (ok && (err = mt_ckpt_fault("write")) != 0) {
    mt_ckpt_err_sys(e, err, "%s", where);
    ok = 0;
  }
  mt_ckpt_ballast_release(&ballast); /* the metadata reaches the file in H5Fclose */
  if (H5Fclose(file) < 0 && ok) {
    mt_ckpt_err_h5(e, "%s", where);
    ok = 0;
  }
  return ok ? 0 : -1;
}
