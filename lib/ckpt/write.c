/* Writing the canonical datasets, shared by both on-disk modes: the
 * tensors' data with their index rows, the datasets with their attributes. */
#include "ckpt/ckpt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Shared mode: collective writes of every rank's boxes into the canonical
 * datasets. Per-writer mode (file = this rank's own shard file): each
 * tensor this rank writes becomes a 1-D dataset of its boxes end to end. */
int mt_ckpt_write_tensors(hid_t file, int per_writer, const mt_registry *reg, mt_mesh *mesh,
                          const mt_ckpt_state *st, const char *crash, int64_t **index_rows,
                          int *n_index) {
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  if (!per_writer) H5Pset_dxpl_mpio(dxpl, mt_ckpt_tensor_io_mode());
  mt_ckpt_sel sel = {0};
  int cap = 64, n = 0, rc = 0;
  int64_t *rows = mt_malloc((size_t)cap * MT_CKPT_INDEX_COLS * sizeof(int64_t));
  float *staging = NULL;
  size_t staging_cap = 0;
  for (int g = 0; g < MT_CKPT_NGROUPS && rc == 0; g++) {
    for (int i = 0; i < reg->n; i++) {
      if (g == 0 && i == reg->n / 2) mt_ckpt_test_crash_point(crash, "write", mesh->world_rank);
      const mt_tensor *t = &reg->t[i];
      mt_ckpt_view_t v;
      mt_ckpt_view(t, reg->tp_size, &v);
      sel.boxes.n = 0;
      sel.volume = 0;
      if (mt_ckpt_writes_tensor(t, mesh))
        mt_ckpt_sel_build(&sel, t, &v, st->ranges[g], st->n_ranges[g]);
      float *data = mt_ckpt_sel_contiguous(&sel, v.local_ext[1]);
      if (!data && sel.volume > 0) {
        if (sel.volume > staging_cap) {
          free(staging);
          staging_cap = sel.volume;
          staging = mt_malloc(staging_cap * sizeof(float));
        }
        mt_ckpt_sel_copy(&sel, staging, v.local_ext[1], 0);
        data = staging;
      }
      char path[256];
      mt_ckpt_dataset_path(path, sizeof path, g, t->name);
      if (per_writer) {
        if (sel.volume > 0) {
          hsize_t n1 = (hsize_t)sel.volume;
          hid_t fs = H5Screate_simple(1, &n1, NULL);
          hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
          H5Pset_create_intermediate_group(lcpl, 1);
          hid_t d = H5Dcreate2(file, path, H5T_IEEE_F32LE, fs, lcpl, H5P_DEFAULT, H5P_DEFAULT);
          if (d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, dxpl, data) < 0) rc = -1;
          if (d >= 0) H5Dclose(d);
          H5Pclose(lcpl);
          H5Sclose(fs);
        }
      } else {
        hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
        hid_t fs = H5Dget_space(d);
        mt_ckpt_select_boxes(fs, &sel.boxes);
        hid_t ms = mt_ckpt_mem_space(sel.volume);
        float dummy = 0.0f;
        if (d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, dxpl, data ? data : &dummy) < 0)
          rc = -1;
        H5Sclose(ms);
        H5Sclose(fs);
        if (d >= 0) H5Dclose(d);
      }
      /* one index row per box, with the checksum of its data */
      size_t k = 0;
      for (int b = 0; b < sel.boxes.n; b++) {
        const mt_ckpt_box *bx = &sel.boxes.b[b];
        size_t vol = (size_t)(bx->count[0] * bx->count[1]);
        if (n == cap) {
          cap *= 2;
          rows = realloc(rows, (size_t)cap * MT_CKPT_INDEX_COLS * sizeof(int64_t));
          if (!rows) mt_die("out of memory (checkpoint index)");
        }
        int64_t *row = rows + (size_t)n++ * MT_CKPT_INDEX_COLS;
        uint64_t h = mt_ckpt_box_hash(data + k, vol);
        row[MT_IX_GROUP] = g;
        row[MT_IX_TENSOR] = i;
        row[MT_IX_WRITER] = mesh->world_rank;
        row[MT_IX_START0] = bx->start[0];
        row[MT_IX_START1] = bx->start[1];
        row[MT_IX_COUNT0] = bx->count[0];
        row[MT_IX_COUNT1] = bx->count[1];
        memcpy(&row[MT_IX_XXH64], &h, sizeof h);
        k += vol;
      }
    }
  }
  free(staging);
  mt_ckpt_sel_free(&sel);
  H5Pclose(dxpl);
  *index_rows = rows;
  *n_index = n;
  return rc;
}

static int tensor_attrs(hid_t d, const mt_tensor *t) {
  /* how runtimes split it; the data itself is the whole logical tensor */
  const char *split = t->tp.kind == MT_PLACE_SHARDED ? (t->tp.dim == 0 ? "dim0" : "dim1")
                                                     : "replicated";
  int64_t padded[MT_MAX_DIMS];
  for (int k = 0; k < t->ndim; k++) padded[k] = t->padded[k];
  const char *axes = !strcmp(t->name, "wte.weight")   ? "vocab,embd"
                     : !strcmp(t->name, "wpe.weight") ? "position,embd"
                     : t->ndim == 2                   ? "out,in"
                                                      : "channel";
  const char *replicated_over = t->tp.kind == MT_PLACE_SHARDED ? "dp,cp" : "dp,cp,tp";
  int rc = mt_ckpt_put_attr_str(d, "tp_split", split) |
           mt_ckpt_put_attr_i64(d, "fused_blocks", t->tp.fused_blocks) |
           mt_ckpt_put_attr_i64v(d, "padded_shape", padded, t->ndim) |
           mt_ckpt_put_attr_str(d, "axes", axes) |
           mt_ckpt_put_attr_str(d, "replicated_over", replicated_over) |
           mt_ckpt_put_attr_i64(d, "weight_decay", t->weight_decay);
  if (rc == 0 && t->tied_to[0]) rc = mt_ckpt_put_attr_str(d, "tied_to", t->tied_to);
  return rc;
}

/* The canonical datasets: contiguous (shared mode) or virtual over the
 * writers' shard files (rows != NULL: per-writer mode's index file). */
int mt_ckpt_create_datasets(hid_t file, const mt_registry *reg, const int64_t *rows,
                            int64_t n_rows) {
  hid_t gm = H5Gcreate2(file, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t go = H5Gcreate2(file, "optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g1 = H5Gcreate2(go, "exp_avg", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g2 = H5Gcreate2(go, "exp_avg_sq", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  int rc = (gm < 0 || go < 0 || g1 < 0 || g2 < 0) ? -1 : 0;
  hid_t groups[MT_CKPT_NGROUPS] = {gm, g1, g2};
  int64_t *off = rows ? mt_ckpt_shard_offsets(rows, n_rows) : NULL;
  for (int g = 0; g < MT_CKPT_NGROUPS && rc == 0; g++) {
    for (int i = 0; i < reg->n && rc == 0; i++) {
      const mt_tensor *t = &reg->t[i];
      hsize_t dims[MT_MAX_DIMS];
      for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
      hid_t s = H5Screate_simple(t->ndim, dims, NULL);
      hid_t dcpl = rows ? mt_ckpt_virtual_dcpl(t, g, rows, off, n_rows, i) : H5P_DEFAULT;
      hid_t d = H5Dcreate2(groups[g], t->name, H5T_IEEE_F32LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      if (rows) H5Pclose(dcpl);
      if (d < 0) rc = -1;
      if (rc == 0) rc = tensor_attrs(d, t);
      if (d >= 0) H5Dclose(d);
      H5Sclose(s);
    }
  }
  free(off);
  for (int g = 0; g < MT_CKPT_NGROUPS; g++)
    if (groups[g] >= 0) H5Gclose(groups[g]);
  if (go >= 0) H5Gclose(go);
  return rc;
}
