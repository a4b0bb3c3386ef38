/* ckpt_edit: damages a checkpoint file the way a careless tool or a flipped
 * disk block would, for the tests that check the loader and meshckpt verify
 * refuse it. Not for users.
 *
 *   ckpt_edit FILE set-attr NAME VALUE     root int64 attribute, in place
 *   ckpt_edit FILE set-str-attr NAME TEXT  root string attribute, rewritten
 *   ckpt_edit FILE delete-attr NAME        root attribute NAME removed
 *   ckpt_edit FILE rehash                  meta_xxh64 made to match the attributes
 *   ckpt_edit FILE drop-box ROW            index row ROW removed
 *   ckpt_edit FILE index-rows N            the index claims N rows (the old ones first)
 *   ckpt_edit FILE set-value DSET I VALUE  element I (flat) of DSET = VALUE (nan, inf or a
 *                                          number), and the checksum of its box made to match
 *
 * The file changes size for some edits; the test then rewrites the sizes in
 * MANIFEST.json, as a tool that "repairs" a checkpoint would. */
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "ckpt/core/ckpt_core.h"

static int fail(const char *what) {
  fprintf(stderr, "ckpt_edit: %s\n", what);
  return 1;
}

static int read_index(hid_t f, int64_t **rows, hsize_t *n) {
  hid_t d = H5Dopen2(f, "index", H5P_DEFAULT);
  if (d < 0) return -1;
  hid_t s = H5Dget_space(d);
  hsize_t dims[2];
  H5Sget_simple_extent_dims(s, dims, NULL);
  *n = dims[0];
  *rows = malloc(dims[0] * dims[1] * sizeof(int64_t) + 8);
  herr_t rc = H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, *rows);
  H5Sclose(s);
  H5Dclose(d);
  return rc < 0 ? -1 : 0;
}

/* replace /index by n_claim rows (chunked, so a huge claim takes no space),
 * the first n of them from rows */
static int write_index(hid_t f, const int64_t *rows, hsize_t n, hsize_t n_claim) {
  if (H5Ldelete(f, "index", H5P_DEFAULT) < 0) return -1;
  hsize_t dims[2] = {n_claim, MT_CKPT_INDEX_COLS}, chunk[2] = {64, MT_CKPT_INDEX_COLS};
  hid_t s = H5Screate_simple(2, dims, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 2, chunk);
  hid_t d = H5Dcreate2(f, "index", H5T_STD_I64LE, s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  hsize_t start[2] = {0, 0}, count[2] = {n, MT_CKPT_INDEX_COLS};
  H5Sselect_hyperslab(s, H5S_SELECT_SET, start, NULL, count, NULL);
  hid_t ms = H5Screate_simple(2, count, NULL);
  herr_t rc = d < 0 ? -1 : H5Dwrite(d, H5T_NATIVE_INT64, ms, s, H5P_DEFAULT, rows);
  H5Sclose(ms);
  H5Pclose(dcpl);
  H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  return rc < 0 ? -1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 3) return fail("usage: see the comment at the top of ckpt_edit.c");
  const char *path = argv[1], *cmd = argv[2];
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (f < 0) return fail("cannot open the file");
  int rc = 0;
  if (!strcmp(cmd, "set-attr") && argc == 5) {
    int64_t v = strtoll(argv[4], NULL, 10);
    hid_t a = H5Aopen(f, argv[3], H5P_DEFAULT);
    rc = a < 0 || H5Awrite(a, H5T_NATIVE_INT64, &v) < 0;
    if (a >= 0) H5Aclose(a);
  } else if (!strcmp(cmd, "set-str-attr") && argc == 5) {
    H5Adelete(f, argv[3]);
    mt_err e = {0};
    rc = mt_ckpt_put_attr_str(f, argv[3], argv[4], "ckpt_edit", &e) != 0;
  } else if (!strcmp(cmd, "delete-attr") && argc == 4) {
    rc = H5Adelete(f, argv[3]) < 0;
  } else if (!strcmp(cmd, "rehash") && argc == 3) {
    mt_ckpt_meta m;
    char version[32];
    rc = mt_ckpt_read_meta(f, &m) == -1 || mt_ckpt_attr_str(f, "version", version, sizeof version);
    int64_t groups = 3;
    mt_ckpt_attr_i64(f, "groups", &groups);
    uint64_t h = rc ? 0 : mt_ckpt_meta_hash(&m, version, groups);
    hid_t a = H5Aopen(f, "meta_xxh64", H5P_DEFAULT);
    rc = rc || a < 0 || H5Awrite(a, H5T_NATIVE_INT64, &h) < 0;
    if (a >= 0) H5Aclose(a);
  } else if ((!strcmp(cmd, "drop-box") || !strcmp(cmd, "index-rows")) && argc == 4) {
    int64_t *rows = NULL;
    hsize_t n = 0;
    hsize_t arg = (hsize_t)strtoull(argv[3], NULL, 10);
    rc = read_index(f, &rows, &n) != 0;
    if (!rc && !strcmp(cmd, "drop-box")) {
      if (arg >= n) return fail("no such index row");
      memmove(rows + arg * MT_CKPT_INDEX_COLS, rows + (arg + 1) * MT_CKPT_INDEX_COLS,
              (n - arg - 1) * MT_CKPT_INDEX_COLS * sizeof(int64_t));
      rc = write_index(f, rows, n - 1, n - 1) != 0;
    } else if (!rc) {
      rc = write_index(f, rows, n < arg ? n : arg, arg) != 0;
    }
    free(rows);
  } else if (!strcmp(cmd, "set-value") && argc == 6) {
    const char *dset = argv[3];
    int64_t at = strtoll(argv[4], NULL, 10);
    float v = !strcmp(argv[5], "nan") ? NAN : !strcmp(argv[5], "inf") ? INFINITY : strtof(argv[5], NULL);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    if (d < 0) return fail("no such dataset");
    hid_t s = H5Dget_space(d);
    hsize_t dims[2] = {1, 1};
    int nd = H5Sget_simple_extent_dims(s, dims, NULL);
    int64_t cols = (int64_t)dims[nd - 1], r = at / cols, c = at % cols;
    hsize_t start[2] = {(hsize_t)(nd == 2 ? r : c), (hsize_t)c}, one[2] = {1, 1};
    H5Sselect_hyperslab(s, H5S_SELECT_SET, start, NULL, one, NULL);
    hsize_t m1 = 1;
    hid_t ms = H5Screate_simple(1, &m1, NULL);
    rc = H5Dwrite(d, H5T_NATIVE_FLOAT, ms, s, H5P_DEFAULT, &v) < 0;
    H5Sclose(ms);
    /* the box holding it gets the checksum of its new data */
    int64_t *rows = NULL;
    hsize_t n = 0;
    rc = rc || read_index(f, &rows, &n) != 0;
    char name[MT_NAME_MAX + 64];
    int fixed = 0;
    for (hsize_t i = 0; !rc && i < n && !fixed; i++) {
      int64_t *row = rows + i * MT_CKPT_INDEX_COLS;
      hid_t td = H5Dopen2(f, "tensors", H5P_DEFAULT);
      hid_t tt = H5Tcopy(H5T_C_S1);
      H5Tset_size(tt, MT_NAME_MAX);
      hid_t ts = H5Dget_space(td);
      hsize_t k = (hsize_t)row[MT_IX_TENSOR], kk = 1;
      H5Sselect_hyperslab(ts, H5S_SELECT_SET, &k, NULL, &kk, NULL);
      hid_t tms = H5Screate_simple(1, &kk, NULL);
      char tname[MT_NAME_MAX];
      H5Dread(td, tt, tms, ts, H5P_DEFAULT, tname);
      H5Sclose(tms);
      H5Sclose(ts);
      H5Tclose(tt);
      H5Dclose(td);
      snprintf(name, sizeof name, "/%s/%s", mt_ckpt_group_path((int)row[MT_IX_GROUP]), tname);
      if (strcmp(name, dset) != 0 || r < row[MT_IX_START0] ||
          r >= row[MT_IX_START0] + row[MT_IX_COUNT0] || c < row[MT_IX_START1] ||
          c >= row[MT_IX_START1] + row[MT_IX_COUNT1])
        continue;
      size_t vol = (size_t)(row[MT_IX_COUNT0] * row[MT_IX_COUNT1]);
      float *buf = malloc(vol * sizeof(float));
      mt_ckpt_box b = {{row[MT_IX_START0], row[MT_IX_START1]}, {row[MT_IX_COUNT0], row[MT_IX_COUNT1]}, 0, 0};
      mt_ckpt_boxes bx = {&b, 1, 1};
      hid_t fs = H5Dget_space(d), bms = mt_ckpt_mem_space(vol);
      mt_ckpt_select_boxes(fs, &bx);
      rc = H5Dread(d, H5T_NATIVE_FLOAT, bms, fs, H5P_DEFAULT, buf) < 0;
      uint64_t h = XXH64(buf, vol * sizeof(float), 0);
      memcpy(&row[MT_IX_XXH64], &h, sizeof h);
      H5Sclose(bms);
      H5Sclose(fs);
      free(buf);
      fixed = 1;
    }
    if (!rc && fixed) rc = write_index(f, rows, n, n) != 0;
    if (!fixed) rc = 1;
    free(rows);
    H5Sclose(s);
    H5Dclose(d);
  } else {
    H5Fclose(f);
    return fail("unknown command or wrong arguments");
  }
  if (H5Fclose(f) < 0) rc = 1;
  return rc ? fail("edit failed") : 0;
}
