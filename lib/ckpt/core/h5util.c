/* HDF5 helpers of the ckpt module: attributes, selections, property lists,
 * small tables and strings, the root attributes and their checksum.
 *
 * Writers return 0, or -1 with e set from the HDF5 error stack (where: what
 * was being written, e.g. "checkpoint step 8: rank 0 cannot write F"). */
#include "ckpt/core/ckpt_core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const char *g_group_paths[MT_CKPT_NGROUPS] = {"model", "optim/exp_avg",
                                                     "optim/exp_avg_sq"};
const char *mt_ckpt_group_path(int group) { return g_group_paths[group]; }

/* On a failed HDF5 call: describe it in e (first failure wins), then clean up. */
#define H5_TRY(cond)                 \
  do {                               \
    if (!(cond)) {                   \
      mt_ckpt_err_h5(e, "%s", where); \
      goto done;                     \
    }                                \
  } while (0)

static int put_attr(hid_t obj, const char *name, hid_t type, hid_t space, const void *v,
                    const char *where, mt_err *e) {
  int rc = -1;
  hid_t a = -1;
  H5_TRY(space >= 0 && type >= 0);
  H5_TRY((a = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT)) >= 0);
  H5_TRY(H5Awrite(a, type, v) >= 0);
  rc = 0;
done:
  if (a >= 0) H5Aclose(a);
  return rc;
}

int mt_ckpt_put_attr_i64(hid_t obj, const char *name, int64_t v, const char *where, mt_err *e) {
  hid_t s = H5Screate(H5S_SCALAR);
  int rc = put_attr(obj, name, H5T_NATIVE_INT64, s, &v, where, e);
  if (s >= 0) H5Sclose(s);
  return rc == 0 ? 0 : mt_err_pass(e);
}

int mt_ckpt_put_attr_i64v(hid_t obj, const char *name, const int64_t *v, int n, const char *where,
                          mt_err *e) {
  hsize_t dims[1] = {(hsize_t)n};
  hid_t s = H5Screate_simple(1, dims, NULL);
  int rc = put_attr(obj, name, H5T_NATIVE_INT64, s, v, where, e);
  if (s >= 0) H5Sclose(s);
  return rc == 0 ? 0 : mt_err_pass(e);
}

int mt_ckpt_put_attr_str(hid_t obj, const char *name, const char *v, const char *where,
                         mt_err *e) {
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t >= 0 && H5Tset_size(t, strlen(v) + 1) < 0) {
    H5Tclose(t);
    t = -1;
  }
  hid_t s = H5Screate(H5S_SCALAR);
  int rc = put_attr(obj, name, t, s, v, where, e);
  if (s >= 0) H5Sclose(s);
  if (t >= 0) H5Tclose(t);
  return rc == 0 ? 0 : mt_err_pass(e);
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
  size_t n = ft >= 0 && H5Tget_class(ft) == H5T_STRING && !H5Tis_variable_str(ft) ? H5Tget_size(ft)
                                                                               : 0;
  herr_t rc = -1;
  /* a fixed-length string of at most MT_CKPT_ATTR_STR_MAX bytes (sizes read
   * from a file are bounded before anything is allocated) */
  if (n > 0 && n <= MT_CKPT_ATTR_STR_MAX) {
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5Tset_size(mt, n);
    char *tmp = mt_calloc(n + 1, 1);
    rc = H5Aread(a, mt, tmp);
    snprintf(buf, len, "%s", rc < 0 ? "" : tmp);
    free(tmp);
    H5Tclose(mt);
  }
  if (ft >= 0) H5Tclose(ft);
  H5Aclose(a);
  return rc < 0 ? -1 : 0;
}

void mt_ckpt_select_rows(hid_t space, hsize_t r0, hsize_t nr, hsize_t cols) {
  mt_ckpt_box b = {.start = {(int64_t)r0, 0}, .count = {(int64_t)nr, (int64_t)cols}};
  mt_ckpt_boxes one = {.b = &b, .n = 1, .cap = 1};
  mt_ckpt_select_boxes(space, &one);
}

int mt_ckpt_select_boxes(hid_t space, const mt_ckpt_boxes *bx) {
  if (bx->n == 0) return H5Sselect_none(space) < 0 ? -1 : 0;
  int rank = H5Sget_simple_extent_ndims(space);
  hsize_t dims[MT_MAX_DIMS] = {0};
  if (rank < 1 || rank > 3 || H5Sget_simple_extent_dims(space, dims, NULL) != rank) return -1;
  int64_t d64[MT_MAX_DIMS];
  for (int d = 0; d < rank; d++) d64[d] = (int64_t)dims[d];
  int first = 1;
  for (int i = 0; i < bx->n; i++) {
    /* a box of the 2-D view as hyperslabs of the N-d dataset: the union
     * selects its elements in canonical (row-major) order */
    int64_t st[3][MT_MAX_DIMS], ct[3][MT_MAX_DIMS];
    int np = mt_ckpt_box_pieces(&bx->b[i], rank, d64, st, ct);
    for (int p = 0; p < np; p++) {
      hsize_t start[MT_MAX_DIMS], count[MT_MAX_DIMS];
      for (int d = 0; d < rank; d++) {
        start[d] = (hsize_t)st[p][d];
        count[d] = (hsize_t)ct[p][d];
      }
      if (H5Sselect_hyperslab(space, first ? H5S_SELECT_SET : H5S_SELECT_OR, start, NULL, count,
                              NULL) < 0)
        return -1;
      first = 0;
    }
  }
  return 0;
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
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  return fapl;
}

hid_t mt_ckpt_fapl_serial(void) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
  /* no file locks: a checkpoint's files are written once, by one process
   * each, and renamed into place; and many parallel file systems have no
   * flock (HDF5 then fails to open unless told to go without) */
  H5Pset_file_locking(fapl, 0, 1);
#endif
  return fapl;
}

hid_t mt_ckpt_fapl_create(long long from, long long align) {
  hid_t fapl = mt_ckpt_fapl_serial();
  H5Pset_alignment(fapl, (hsize_t)from, (hsize_t)align);
  /* the 1.8 format and up: dense attribute storage, no 64 KiB header limit */
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  return fapl;
}

/* Tensor data is read with independent MPI-IO by default: each rank's part
 * of a tensor is a few large contiguous boxes, and collective two-phase I/O
 * only adds synchronisation (measured: 10x slower loads at 4 ranks).
 * MT_CKPT_IO=collective makes loads use collective transfers, e.g. for a file
 * system that wants aggregation. (Saves never use MPI-IO: see
 * write_shared.c.) */
H5FD_mpio_xfer_t mt_ckpt_tensor_io_mode(void) {
  const char *v = getenv("MT_CKPT_IO");
  return v && !strcmp(v, "collective") ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT;
}

int mt_ckpt_write_table_i64(hid_t file, const char *name, const int64_t *rows, int64_t nrows,
                            int cols, const char *where, mt_err *e) {
  int rc = -1;
  hsize_t dims[2] = {(hsize_t)nrows, (hsize_t)cols};
  hid_t s = H5Screate_simple(2, dims, NULL), d = -1;
  H5_TRY(s >= 0);
  H5_TRY((d = H5Dcreate2(file, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0);
  H5_TRY(nrows == 0 || H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0);
  rc = 0;
done:
  if (d >= 0) H5Dclose(d);
  if (s >= 0) H5Sclose(s);
  return rc;
}

int mt_ckpt_read_moe_bias(hid_t file, float **bias, int64_t *rows, int64_t *E, const char *where,
                          mt_err *e) {
  *bias = NULL;
  *rows = *E = 0;
  htri_t has = H5Lexists(file, MT_CKPT_MOE_BIAS, H5P_DEFAULT);
  if (has == 0) return 0;
  int rc = -1;
  hid_t d = -1, s = -1;
  hsize_t dims[2] = {0, 0};
  H5_TRY(has > 0);
  H5_TRY((d = H5Dopen2(file, MT_CKPT_MOE_BIAS, H5P_DEFAULT)) >= 0);
  H5_TRY((s = H5Dget_space(d)) >= 0);
  if (H5Sget_simple_extent_ndims(s) != 2 || H5Sget_simple_extent_dims(s, dims, NULL) != 2 ||
      dims[0] > (1u << 20) || dims[1] > (1u << 20)) {
    mt_err_set(e, "%s: %s is not a (MoE blocks, experts) table", where, MT_CKPT_MOE_BIAS);
    goto done;
  }
  *bias = mt_calloc((size_t)(dims[0] * dims[1]) + 1, sizeof(float));
  H5_TRY(dims[0] * dims[1] == 0 ||
         H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, *bias) >= 0);
  *rows = (int64_t)dims[0];
  *E = (int64_t)dims[1];
  rc = 1;
done:
  if (rc < 0) {
    free(*bias);
    *bias = NULL;
  }
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  return rc;
}

char *mt_ckpt_read_config_text(hid_t file, int64_t limit) {
  hid_t d = H5Lexists(file, "config", H5P_DEFAULT) > 0 ? H5Dopen2(file, "config", H5P_DEFAULT) : -1;
  hid_t t = d >= 0 ? H5Dget_type(d) : -1;
  size_t n = t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) == 0 ? H5Tget_size(t)
                                                                                  : 0;
  char *text = NULL;
  if (n > 0 && (int64_t)n <= limit) { /* bounded before allocating */
    text = mt_calloc(n + 1, 1);
    if (H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, text) < 0) text[0] = '\0';
  }
  if (t >= 0) H5Tclose(t);
  if (d >= 0) H5Dclose(d);
  H5Eclear2(H5E_DEFAULT);
  return text;
}

int mt_ckpt_write_strings(hid_t file, const char *name, const char *buf, size_t width, size_t n,
                          const char *where, mt_err *e) {
  int rc = -1;
  hid_t t = H5Tcopy(H5T_C_S1), s = -1, d = -1;
  hsize_t dims[1] = {(hsize_t)n};
  H5_TRY(t >= 0 && H5Tset_size(t, width) >= 0);
  H5_TRY((s = H5Screate_simple(1, dims, NULL)) >= 0);
  H5_TRY((d = H5Dcreate2(file, name, t, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0);
  H5_TRY(H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
  rc = 0;
done:
  if (d >= 0) H5Dclose(d);
  if (s >= 0) H5Sclose(s);
  if (t >= 0) H5Tclose(t);
  return rc;
}

int mt_ckpt_write_text(hid_t file, const char *name, const char *text, const char *where,
                       mt_err *e) {
  MT_TRY(e, mt_ckpt_write_strings(file, name, text, strlen(text) + 1, 1, where, e));
  return 0;
}

int mt_ckpt_write_names(hid_t file, const mt_registry *reg, const char *where, mt_err *e) {
  char *buf = calloc((size_t)reg->n + 1, MT_NAME_MAX);
  if (!buf) {
    mt_err_set(e, "%s: out of memory", where);
    return -1;
  }
  for (int i = 0; i < reg->n; i++)
    snprintf(buf + (size_t)i * MT_NAME_MAX, MT_NAME_MAX, "%s", reg->t[i].name);
  int rc = mt_ckpt_write_strings(file, "tensors", buf, MT_NAME_MAX, (size_t)reg->n, where, e);
  free(buf);
  return rc == 0 ? 0 : mt_err_pass(e);
}

/* The root attributes as integers, in SCHEMA.md's order. */
#define META_FIELDS(m)                                                                           \
  {"step", &(m)->step}, {"samples", &(m)->samples}, {"tokens", &(m)->tokens},                    \
      {"optimizer_step", &(m)->optimizer_step}, {"seed", &(m)->seed},                            \
      {"n_layer", &(m)->n_layer}, {"n_embd", &(m)->n_embd}, {"n_head", &(m)->n_head},            \
      {"seq_len", &(m)->seq_len}, {"vocab", &(m)->vocab}, {"dp", &(m)->dp}, {"tp", &(m)->tp},    \
      {"pp", &(m)->pp}, {"cp", &(m)->cp}, {"zero", &(m)->zero}, {"world", &(m)->world}

/* ... and those format 1.2 added: the MoE shape and the folded mesh */
#define META_FIELDS_1_2(m)                                                                       \
  {"moe_experts", &(m)->moe_experts}, {"moe_topk", &(m)->moe_topk},                              \
      {"moe_every", &(m)->moe_every}, {"moe_ffn", &(m)->moe_ffn},                                \
      {"moe_shared", &(m)->moe_shared}, {"ep", &(m)->ep}, {"etp", &(m)->etp}

/* ... and those format 1.4 added: the architecture */
#define META_FIELDS_1_4(m)                                                                       \
  {"arch", &(m)->arch}, {"n_kv_head", &(m)->n_kv_head}, {"ffn", &(m)->ffn},                      \
      {"tied", &(m)->tied}, {"bias", &(m)->bias}

typedef struct {
  const char *name;
  int64_t *v;
} meta_field;

void mt_ckpt_meta_arch_defaults(mt_ckpt_meta *m) {
  if (m->arch != 0) return;
  m->arch = 1;
  m->n_kv_head = m->n_head;
  m->ffn = 4 * m->n_embd;
  m->tied = m->bias = 1;
}

/* a model other than the GPT-2 its sizes describe: the 1.4 fields count */
static int arch_counts(const mt_ckpt_meta *m) {
  return m->arch != 1 || m->n_kv_head != m->n_head || m->ffn != 4 * m->n_embd || m->tied != 1 ||
         m->bias != 1;
}

/* does version (MAJOR.MINOR.PATCH) carry the 1.2 root attributes? */
static int has_1_2(const char *version) {
  int major = 0, minor = 0, patch = 0;
  if (mt_ckpt_parse_version(version, &major, &minor, &patch) != 0) return 0;
  return major > 1 || (major == 1 && minor >= 2);
}

int mt_ckpt_meta_has_moe(const char *version) { return has_1_2(version); }

uint64_t mt_ckpt_meta_hash(const mt_ckpt_meta *m, const char *version, int64_t groups) {
  mt_ckpt_meta copy = *m;
  mt_ckpt_meta_arch_defaults(&copy);
  meta_field f[] = {META_FIELDS(&copy)}, f12[] = {META_FIELDS_1_2(&copy)};
  meta_field f14[] = {META_FIELDS_1_4(&copy)};
  char text[2048];
  size_t n = (size_t)snprintf(text, sizeof text, "format=%s\nversion=%s\n", MT_CKPT_FORMAT,
                              version);
  for (size_t i = 0; i < sizeof f / sizeof f[0] && n < sizeof text; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "%s=%lld\n", f[i].name, (long long)*f[i].v);
  /* the MoE fields (1.2) count only in a MoE checkpoint, and groups (1.2)
   * is left out: readers of 1.1 still read a 1.2 checkpoint of a dense model
   * in float32 with every group. An edited groups is caught by the coverage
   * check (3 without /optim boxes) or by train.resume (1); an edited
   * moe_experts changes which fields count. */
  (void)groups;
  for (size_t i = 0; has_1_2(version) && copy.moe_experts > 0 && i < sizeof f12 / sizeof f12[0] &&
                     n < sizeof text;
       i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "%s=%lld\n", f12[i].name,
                          (long long)*f12[i].v);
  /* the router's scores only where they are not a softmax's (1.4) */
  if (copy.moe_router != 0 && n < sizeof text)
    n += (size_t)snprintf(text + n, sizeof text - n, "moe_router=%lld\n",
                          (long long)copy.moe_router);
  /* the optimizer (1.4) likewise only where it is not AdamW */
  if (copy.optimizer != 0 && n < sizeof text)
    n += (size_t)snprintf(text + n, sizeof text - n, "optimizer=%lld\n",
                          (long long)copy.optimizer);
  /* the residual stream (1.4) likewise only where it is the ladder */
  if (copy.residual != 0 && n < sizeof text)
    n += (size_t)snprintf(text + n, sizeof text - n, "residual=%lld\n",
                          (long long)copy.residual);
  /* the architecture (1.4) likewise only where it is not GPT-2's */
  for (size_t i = 0; arch_counts(&copy) && i < sizeof f14 / sizeof f14[0] && n < sizeof text; i++)
    n += (size_t)snprintf(text + n, sizeof text - n, "%s=%lld\n", f14[i].name,
                          (long long)*f14[i].v);
  return XXH64(text, n < sizeof text ? n : sizeof text - 1, 0);
}

int mt_ckpt_write_meta_attrs(hid_t file, const mt_ckpt_meta *m, int groups, const char *where,
                             mt_err *e) {
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", MT_CKPT_VERSION_MAJOR, MT_CKPT_VERSION_MINOR,
           MT_CKPT_VERSION_PATCH);
  mt_ckpt_meta copy = *m;
  mt_ckpt_meta_arch_defaults(&copy);
  meta_field f[] = {META_FIELDS(&copy)}, f14[] = {META_FIELDS_1_4(&copy)};
  MT_TRY(e, mt_ckpt_put_attr_str(file, "format", MT_CKPT_FORMAT, where, e));
  MT_TRY(e, mt_ckpt_put_attr_str(file, "version", version, where, e));
  MT_TRY(e, mt_ckpt_put_attr_str(file, "index_columns", MT_CKPT_INDEX_COLUMNS, where, e));
  meta_field f12[] = {META_FIELDS_1_2(&copy)};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    MT_TRY(e, mt_ckpt_put_attr_i64(file, f[i].name, *f[i].v, where, e));
  for (size_t i = 0; i < sizeof f12 / sizeof f12[0]; i++)
    MT_TRY(e, mt_ckpt_put_attr_i64(file, f12[i].name, *f12[i].v, where, e));
  for (size_t i = 0; i < sizeof f14 / sizeof f14[0]; i++)
    MT_TRY(e, mt_ckpt_put_attr_i64(file, f14[i].name, *f14[i].v, where, e));
  if (copy.moe_router != 0)
    MT_TRY(e, mt_ckpt_put_attr_i64(file, "moe_router", copy.moe_router, where, e));
  if (copy.optimizer != 0)
    MT_TRY(e, mt_ckpt_put_attr_i64(file, "optimizer", copy.optimizer, where, e));
  if (copy.residual != 0)
    MT_TRY(e, mt_ckpt_put_attr_i64(file, "residual", copy.residual, where, e));
  if (copy.data_hash != 0)
    MT_TRY(e, mt_ckpt_put_attr_i64(file, "data_hash", copy.data_hash, where, e));
  MT_TRY(e, mt_ckpt_put_attr_i64(file, "groups", groups, where, e));
  uint64_t h = mt_ckpt_meta_hash(&copy, version, groups);
  int64_t hv;
  memcpy(&hv, &h, sizeof hv);
  MT_TRY(e, mt_ckpt_put_attr_i64(file, "meta_xxh64", hv, where, e));
  return 0;
}

int mt_ckpt_read_meta(hid_t file, mt_ckpt_meta *m) {
  meta_field f[] = {META_FIELDS(m)}, f12[] = {META_FIELDS_1_2(m)};
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (mt_ckpt_attr_i64(file, f[i].name, f[i].v) != 0) return -1;
  /* before 1.2: a dense model written without the folded mesh */
  m->moe_experts = m->moe_topk = m->moe_every = m->moe_ffn = m->moe_shared = 0;
  m->ep = m->etp = 1;
  int found = 0;
  for (size_t i = 0; i < sizeof f12 / sizeof f12[0]; i++)
    found += mt_ckpt_attr_i64(file, f12[i].name, f12[i].v) == 0;
  /* 1.4: the architecture, all of it or none (before 1.4: GPT-2's) */
  meta_field f14[] = {META_FIELDS_1_4(m)};
  int found14 = 0;
  m->arch = 0;
  for (size_t i = 0; i < sizeof f14 / sizeof f14[0]; i++)
    found14 += mt_ckpt_attr_i64(file, f14[i].name, f14[i].v) == 0;
  if (found14 == 0) m->arch = 0;
  else if (found14 != (int)(sizeof f14 / sizeof f14[0]) || m->arch < 1 || m->arch > 2) return -2;
  mt_ckpt_meta_arch_defaults(m);
  /* 1.4, optional: a router other than a softmax */
  m->moe_router = 0;
  if (mt_ckpt_attr_i64(file, "moe_router", &m->moe_router) == 0 &&
      (m->moe_router < 0 || m->moe_router > 1))
    return -2;
  /* 1.4, optional: an optimizer other than AdamW */
  m->optimizer = 0;
  if (mt_ckpt_attr_i64(file, "optimizer", &m->optimizer) == 0 &&
      (m->optimizer < 0 || m->optimizer > 1))
    return -2;
  /* 1.4, optional: a residual stream other than the standard one */
  m->residual = 0;
  if (mt_ckpt_attr_i64(file, "residual", &m->residual) == 0 &&
      (m->residual < 0 || m->residual > 1))
    return -2;
  /* optional, informative: the training data's hash */
  m->data_hash = 0;
  if (mt_ckpt_attr_i64(file, "data_hash", &m->data_hash) != 0) m->data_hash = 0;
  /* 1.3, optional: the layout a conversion wrote for */
  m->target_tp = m->target_pp = 0;
  if (mt_ckpt_attr_i64(file, "target_tp", &m->target_tp) != 0 ||
      mt_ckpt_attr_i64(file, "target_pp", &m->target_pp) != 0 || m->target_tp < 1 ||
      m->target_pp < 1 || m->target_tp > 1 << 20 || m->target_pp > 1 << 20)
    m->target_tp = m->target_pp = 0;
  m->target_ep = m->target_etp = 0;
  if (m->target_tp > 0 && (mt_ckpt_attr_i64(file, "target_ep", &m->target_ep) != 0 ||
                           mt_ckpt_attr_i64(file, "target_etp", &m->target_etp) != 0 ||
                           m->target_ep < 1 || m->target_etp < 1 || m->target_ep > 1 << 20 ||
                           m->target_etp > 1 << 20))
    m->target_ep = m->target_etp = 0;
  return found == 0 ? 0 : found == (int)(sizeof f12 / sizeof f12[0]) ? 1 : -2;
}

/* ------------------------------------------------------------------ */
/* stored element types                                                */

hid_t mt_ckpt_h5_type(int dtype) {
  hid_t t = H5Tcopy(H5T_IEEE_F32LE);
  if (dtype == MT_DT_BF16 && t >= 0) {
    /* bfloat16: the upper half of an IEEE float32 (1 sign, 8 exponent, 7
     * mantissa bits, bias 127), little-endian */
    if (H5Tset_fields(t, 15, 7, 8, 0, 7) < 0 || H5Tset_ebias(t, 127) < 0 ||
        H5Tset_precision(t, 16) < 0 || H5Tset_size(t, 2) < 0) {
      H5Tclose(t);
      return -1;
    }
  }
  return t;
}

int mt_ckpt_dtype_of(hid_t type) {
  if (type < 0 || H5Tget_class(type) != H5T_FLOAT || H5Tget_order(type) != H5T_ORDER_LE) return -1;
  size_t spos, epos, esize, mpos, msize;
  if (H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize) < 0) return -1;
  size_t size = H5Tget_size(type);
  if (size == 4 && spos == 31 && epos == 23 && esize == 8 && mpos == 0 && msize == 23 &&
      H5Tget_ebias(type) == 127)
    return MT_DT_F32;
  if (size == 2 && spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 &&
      H5Tget_ebias(type) == 127)
    return MT_DT_BF16;
  return -1;
}
