/* HDF5 helpers of the ckpt module: attributes, selections, property lists,
 * small tables and strings, the root attributes. */
#include "ckpt/ckpt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *g_group_paths[MT_CKPT_NGROUPS] = {"model", "optim/exp_avg",
                                                     "optim/exp_avg_sq"};
const char *mt_ckpt_group_path(int group) { return g_group_paths[group]; }

int mt_ckpt_put_attr_i64(hid_t obj, const char *name, int64_t v) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_NATIVE_INT64, s, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT64, &v);
  if (a >= 0) H5Aclose(a);
  H5Sclose(s);
  return rc < 0 ? -1 : 0;
}

int mt_ckpt_put_attr_i64v(hid_t obj, const char *name, const int64_t *v, int n) {
  hsize_t dims[1] = {(hsize_t)n};
  hid_t s = H5Screate_simple(1, dims, NULL);
  hid_t a = H5Acreate2(obj, name, H5T_NATIVE_INT64, s, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT64, v);
  if (a >= 0) H5Aclose(a);
  H5Sclose(s);
  return rc < 0 ? -1 : 0;
}

int mt_ckpt_put_attr_str(hid_t obj, const char *name, const char *v) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, strlen(v) + 1);
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, t, s, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = a < 0 ? -1 : H5Awrite(a, t, v);
  if (a >= 0) H5Aclose(a);
  H5Sclose(s);
  H5Tclose(t);
  return rc < 0 ? -1 : 0;
}

int mt_ckpt_attr_i64(hid_t obj, const char *name, int64_t *v) {
  if (H5Aexists(obj, name) <= 0) return -1;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return -1;
  herr_t rc = H5Aread(a, H5T_NATIVE_INT64, v);
  H5Aclose(a);
  return rc < 0 ? -1 : 0;
}

int mt_ckpt_attr_str(hid_t obj, const char *name, char *buf, size_t len) {
  if (H5Aexists(obj, name) <= 0) return -1;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
  if (a < 0) return -1;
  hid_t ft = H5Aget_type(a);
  size_t n = H5Tget_size(ft);
  hid_t mt = H5Tcopy(H5T_C_S1);
  H5Tset_size(mt, n);
  char *tmp = mt_calloc(n + 1, 1);
  herr_t rc = H5Aread(a, mt, tmp);
  snprintf(buf, len, "%s", tmp);
  free(tmp);
  H5Tclose(mt);
  H5Tclose(ft);
  H5Aclose(a);
  return rc < 0 ? -1 : 0;
}

void mt_ckpt_select_rows(hid_t space, hsize_t r0, hsize_t nr, hsize_t cols) {
  hsize_t start[2] = {r0, 0}, count[2] = {nr, cols};
  if (H5Sget_simple_extent_ndims(space) == 1) { /* a vector is one row */
    start[0] = 0;
    count[0] = cols;
  }
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
}

/* a dataspace with the boxes selected (or none) */
hid_t mt_ckpt_select_boxes(hid_t space, const mt_ckpt_boxes *bx) {
  if (bx->n == 0) {
    H5Sselect_none(space);
    return space;
  }
  int rank = H5Sget_simple_extent_ndims(space);
  for (int i = 0; i < bx->n; i++) {
    hsize_t start[2], count[2];
    if (rank == 2) {
      start[0] = (hsize_t)bx->b[i].start[0];
      start[1] = (hsize_t)bx->b[i].start[1];
      count[0] = (hsize_t)bx->b[i].count[0];
      count[1] = (hsize_t)bx->b[i].count[1];
    } else { /* a vector: the box's row is row 0 */
      start[0] = (hsize_t)bx->b[i].start[1];
      count[0] = (hsize_t)bx->b[i].count[1];
    }
    H5Sselect_hyperslab(space, i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL, count, NULL);
  }
  return space;
}

hid_t mt_ckpt_mem_space(size_t n) {
  hsize_t dims[1] = {n ? (hsize_t)n : 1};
  hid_t s = H5Screate_simple(1, dims, NULL);
  if (!n) H5Sselect_none(s);
  return s;
}

void mt_ckpt_dataset_path(char *out, size_t len, int group, const char *name) {
  snprintf(out, len, "/%s/%s", g_group_paths[group], name);
}

hid_t mt_ckpt_fapl_mpio(MPI_Comm comm) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
  H5Pset_alignment(fapl, 65536, 1048576);
  H5Pset_coll_metadata_write(fapl, 1);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  return fapl;
}

/* Tensor data moves with independent MPI-IO by default: each rank's part of
 * a tensor is a few large contiguous boxes, and collective two-phase I/O
 * only adds synchronisation (measured: 4x slower saves, 10x slower loads at
 * 4 ranks). MT_CKPT_IO=collective restores collective transfers, e.g. for a
 * file system that wants aggregation. Metadata stays collective. */
H5FD_mpio_xfer_t mt_ckpt_tensor_io_mode(void) {
  const char *v = getenv("MT_CKPT_IO");
  return v && !strcmp(v, "collective") ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT;
}

/* a dataset every rank creates, with rows [row0, row0+nrows) written by this rank */
int mt_ckpt_write_table_i64(hid_t file, const char *name, const int64_t *rows, int64_t total,
                            int64_t row0, int64_t nrows, int cols, hid_t dxpl) {
  hsize_t dims[2] = {(hsize_t)total, (hsize_t)cols};
  hid_t s = H5Screate_simple(2, dims, NULL);
  hid_t d = H5Dcreate2(file, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t start[2] = {(hsize_t)row0, 0}, count[2] = {(hsize_t)nrows, (hsize_t)cols};
  if (nrows > 0) H5Sselect_hyperslab(s, H5S_SELECT_SET, start, NULL, count, NULL);
  else H5Sselect_none(s);
  hid_t ms = mt_ckpt_mem_space((size_t)(nrows * cols));
  int64_t dummy = 0;
  herr_t rc = d < 0 ? -1 : H5Dwrite(d, H5T_NATIVE_INT64, ms, s, dxpl, nrows ? rows : &dummy);
  H5Sclose(ms);
  H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  return rc < 0 || d < 0 ? -1 : 0;
}

/* a string written by rank 0 into a 1-element dataset */
/* n fixed-length strings of width bytes each, written by rank 0 (every rank
 * takes part in the collective create and write) */
int mt_ckpt_write_strings(hid_t file, const char *name, const char *buf, size_t width, size_t n,
                          int rank, hid_t dxpl) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, width);
  hsize_t dims[1] = {(hsize_t)n};
  hid_t s = H5Screate_simple(1, dims, NULL);
  hid_t d = H5Dcreate2(file, name, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t ms = H5Screate_simple(1, dims, NULL);
  if (rank != 0) {
    H5Sselect_none(s);
    H5Sselect_none(ms);
  }
  herr_t rc = d < 0 ? -1 : H5Dwrite(d, t, ms, s, dxpl, buf);
  H5Sclose(ms);
  H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  H5Tclose(t);
  return rc < 0 || d < 0 ? -1 : 0;
}

/* a text (the resolved configuration) as one string */
int mt_ckpt_write_text(hid_t file, const char *name, const char *text, int rank, hid_t dxpl) {
  return mt_ckpt_write_strings(file, name, text, strlen(text) + 1, 1, rank, dxpl);
}

/* the tensor names, row i = tensor id i of the index */
int mt_ckpt_write_names(hid_t file, const mt_registry *reg, int rank, hid_t dxpl) {
  char *buf = mt_calloc((size_t)reg->n, MT_NAME_MAX);
  for (int i = 0; i < reg->n; i++) snprintf(buf + (size_t)i * MT_NAME_MAX, MT_NAME_MAX, "%s", reg->t[i].name);
  int rc = mt_ckpt_write_strings(file, "tensors", buf, MT_NAME_MAX, (size_t)reg->n, rank, dxpl);
  free(buf);
  return rc;
}

int mt_ckpt_write_meta_attrs(hid_t file, const mt_ckpt_meta *m) {
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", MT_CKPT_VERSION_MAJOR, MT_CKPT_VERSION_MINOR,
           MT_CKPT_VERSION_PATCH);
  struct { const char *name; int64_t v; } ints[] = {
      {"step", m->step}, {"samples", m->samples}, {"tokens", m->tokens},
      {"optimizer_step", m->optimizer_step}, {"seed", m->seed}, {"n_layer", m->n_layer},
      {"n_embd", m->n_embd}, {"n_head", m->n_head}, {"seq_len", m->seq_len},
      {"vocab", m->vocab}, {"dp", m->dp}, {"tp", m->tp}, {"pp", m->pp}, {"cp", m->cp},
      {"zero", m->zero}, {"world", m->world}};
  int rc = mt_ckpt_put_attr_str(file, "format", MT_CKPT_FORMAT) |
           mt_ckpt_put_attr_str(file, "version", version) |
           mt_ckpt_put_attr_str(file, "index_columns", MT_CKPT_INDEX_COLUMNS);
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    rc |= mt_ckpt_put_attr_i64(file, ints[i].name, ints[i].v);
  return rc;
}

int mt_ckpt_read_meta(hid_t file, mt_ckpt_meta *m) {
  struct { const char *name; int64_t *v; } ints[] = {
      {"step", &m->step}, {"samples", &m->samples}, {"tokens", &m->tokens},
      {"optimizer_step", &m->optimizer_step}, {"seed", &m->seed}, {"n_layer", &m->n_layer},
      {"n_embd", &m->n_embd}, {"n_head", &m->n_head}, {"seq_len", &m->seq_len},
      {"vocab", &m->vocab}, {"dp", &m->dp}, {"tp", &m->tp}, {"pp", &m->pp}, {"cp", &m->cp},
      {"zero", &m->zero}, {"world", &m->world}};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    if (mt_ckpt_attr_i64(file, ints[i].name, ints[i].v) != 0) return -1;
  return 0;
}
