/* Checksums and shard files: the checks that need the data, shared by the
 * loader and meshckpt. */
#include "ckpt/ckpt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

uint64_t mt_ckpt_box_hash(const float *data, size_t n) { return XXH64(data, n * sizeof(float), 0); }

/* The checksum of one box of the canonical tensor, read independently. */
static int hash_box_in_file(hid_t dset, const int64_t *row, float *buf, uint64_t *h) {
  mt_ckpt_boxes bx = {0};
  mt_ckpt_box b = {{row[MT_IX_START0], row[MT_IX_START1]}, {row[MT_IX_COUNT0], row[MT_IX_COUNT1]}, 0, 0};
  bx.b = &b;
  bx.n = 1;
  bx.cap = 1;
  size_t n = (size_t)(b.count[0] * b.count[1]);
  hid_t fs = H5Dget_space(dset);
  mt_ckpt_select_boxes(fs, &bx);
  hid_t ms = mt_ckpt_mem_space(n);
  herr_t rc = H5Dread(dset, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
  H5Sclose(ms);
  H5Sclose(fs);
  if (rc < 0) return -1;
  *h = mt_ckpt_box_hash(buf, n);
  return 0;
}

/* Every rank checks the checksums of the index rows i with i % world == rank. */
int mt_ckpt_verify_checksums(const char *dir, hid_t file, const mt_registry *reg, mt_mesh *mesh,
                             mt_err *e) {
  hid_t d = H5Dopen2(file, "index", H5P_DEFAULT);
  if (d < 0) {
    mt_err_set(e, "%s: no index dataset", dir);
    return -1;
  }
  hid_t s = H5Dget_space(d);
  hsize_t dims[2];
  H5Sget_simple_extent_dims(s, dims, NULL);
  H5Sclose(s);
  int64_t *rows = mt_malloc((size_t)(dims[0] * dims[1]) * sizeof(int64_t) + 8);
  herr_t rc = H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows);
  H5Dclose(d);
  if (rc < 0 || dims[1] != MT_CKPT_INDEX_COLS) {
    free(rows);
    mt_err_set(e, "%s: unreadable index", dir);
    return -1;
  }
  float *buf = NULL;
  size_t cap = 0;
  for (hsize_t i = (hsize_t)mesh->world_rank; i < dims[0] && !e->failed; i += (hsize_t)mesh->world_size) {
    const int64_t *row = rows + i * MT_CKPT_INDEX_COLS;
    int g = (int)row[MT_IX_GROUP], ti = (int)row[MT_IX_TENSOR];
    if (g < 0 || g >= MT_CKPT_NGROUPS || ti < 0 || ti >= reg->n) {
      mt_err_set(e, "%s: index row %llu names no tensor", dir, (unsigned long long)i);
      break;
    }
    size_t n = (size_t)(row[MT_IX_COUNT0] * row[MT_IX_COUNT1]);
    if (n > cap) {
      free(buf);
      cap = n;
      buf = mt_malloc(cap * sizeof(float));
    }
    char path[256];
    mt_ckpt_dataset_path(path, sizeof path, g, reg->t[ti].name);
    hid_t ds = H5Dopen2(file, path, H5P_DEFAULT);
    uint64_t h = 0, want;
    memcpy(&want, &row[MT_IX_XXH64], sizeof want);
    if (ds < 0 || hash_box_in_file(ds, row, buf, &h) != 0)
      mt_err_set(e, "%s: cannot read %s box [%lld:%lld, %lld:%lld]", dir, path,
                 (long long)row[MT_IX_START0], (long long)(row[MT_IX_START0] + row[MT_IX_COUNT0]),
                 (long long)row[MT_IX_START1], (long long)(row[MT_IX_START1] + row[MT_IX_COUNT1]));
    else if (h != want)
      mt_err_set(e, "%s: checksum mismatch in %s box [%lld:%lld, %lld:%lld] written by rank %lld "
                 "(corrupt data)", dir, path,
                 (long long)row[MT_IX_START0], (long long)(row[MT_IX_START0] + row[MT_IX_COUNT0]),
                 (long long)row[MT_IX_START1], (long long)(row[MT_IX_START1] + row[MT_IX_COUNT1]),
                 (long long)row[MT_IX_WRITER]);
    if (ds >= 0) H5Dclose(ds);
  }
  free(buf);
  free(rows);
  return e->failed ? -1 : 0;
}

/* Per-writer: every shard file the index maps must exist and be HDF5 (a
 * virtual dataset whose source is missing reads fill values, silently). */
int mt_ckpt_check_shard_files(const char *dir, mt_err *e) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", dir, MT_CKPT_INDEX_FILE);
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) {
    mt_err_set(e, "%s: cannot open as HDF5 (truncated or corrupt?)", path);
    return -1;
  }
  hid_t d = H5Dopen2(f, "index", H5P_DEFAULT);
  hid_t s = d >= 0 ? H5Dget_space(d) : -1;
  hsize_t dims[2] = {0, 0};
  if (s >= 0) H5Sget_simple_extent_dims(s, dims, NULL);
  int64_t *rows = mt_malloc((size_t)(dims[0] * dims[1]) * sizeof(int64_t) + 8);
  int rc = d < 0 || dims[1] != MT_CKPT_INDEX_COLS ||
           H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) < 0;
  if (rc) mt_err_set(e, "%s: unreadable index", path);
  for (hsize_t i = 0; !rc && i < dims[0]; i++) {
    int64_t w = rows[i * MT_CKPT_INDEX_COLS + MT_IX_WRITER];
    if (i > 0 && rows[(i - 1) * MT_CKPT_INDEX_COLS + MT_IX_WRITER] == w) continue;
    char shard[1200];
    snprintf(shard, sizeof shard, "%s/shard-%05lld.h5", dir, (long long)w);
    if (mt_ckpt_file_size(shard) < 0) {
      mt_err_set(e, "%s: shard file shard-%05lld.h5 of writer rank %lld is missing", dir,
                 (long long)w, (long long)w);
      rc = 1;
    } else if (H5Fis_hdf5(shard) <= 0) {
      mt_err_set(e, "%s: shard-%05lld.h5 is not an HDF5 file", dir, (long long)w);
      rc = 1;
    }
  }
  free(rows);
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  return rc ? -1 : 0;
}
