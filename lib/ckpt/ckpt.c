/* Universal HDF5 checkpoints: save (shared file, collective hyperslab writes),
 * atomic commit, resolve, load with resharding, checksum verification. */
#include "ckpt/ckpt_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static const char *g_group_paths[MT_CKPT_NGROUPS] = {"model", "optim/exp_avg",
                                                     "optim/exp_avg_sq"};
const char *mt_ckpt_group_path(int group) { return g_group_paths[group]; }

/* ------------------------------------------------------------------ */
/* small file-system helpers                                           */

static int fsync_path(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

static int write_file_durable(const char *path, const char *text) {
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return -1;
  size_t n = strlen(text);
  int ok = fwrite(text, 1, n, f) == n;
  ok = fflush(f) == 0 && ok;
  ok = fsync(fileno(f)) == 0 && ok;
  ok = fclose(f) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) return -1;
  return 0;
}

static int remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (!d) return unlink(path);
  struct dirent *de;
  char child[1024];
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(child, sizeof child, "%s/%s", path, de->d_name);
    struct stat st;
    if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(child);
    else unlink(child);
  }
  closedir(d);
  return rmdir(path);
}

static long long file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

static int mkdir_p(const char *path) {
  char tmp[1024];
  snprintf(tmp, sizeof tmp, "%s", path);
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* parse "step_<N>" (and nothing else) */
static int parse_step_dir(const char *name, int64_t *step) {
  if (strncmp(name, "step_", 5) != 0 || !name[5]) return 0;
  char *end = NULL;
  long long v = strtoll(name + 5, &end, 10);
  if (*end != '\0' || v < 0) return 0;
  *step = v;
  return 1;
}

static void test_crash_point(const char *opt, const char *phase, int rank) {
  if (rank == 0 && opt && strcmp(opt, phase) == 0) {
    fprintf(stderr, "[rank 0] ckpt.test_crash: killing rank 0 at phase '%s'\n", phase);
    fflush(stderr);
    raise(SIGKILL);
  }
}

/* ------------------------------------------------------------------ */
/* HDF5 helpers                                                        */

static int attr_i64(hid_t obj, const char *name, int64_t v) {
  hid_t s = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(obj, name, H5T_NATIVE_INT64, s, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT64, &v);
  if (a >= 0) H5Aclose(a);
  H5Sclose(s);
  return rc < 0 ? -1 : 0;
}

static int attr_i64v(hid_t obj, const char *name, const int64_t *v, int n) {
  hsize_t dims[1] = {(hsize_t)n};
  hid_t s = H5Screate_simple(1, dims, NULL);
  hid_t a = H5Acreate2(obj, name, H5T_NATIVE_INT64, s, H5P_DEFAULT, H5P_DEFAULT);
  herr_t rc = a < 0 ? -1 : H5Awrite(a, H5T_NATIVE_INT64, v);
  if (a >= 0) H5Aclose(a);
  H5Sclose(s);
  return rc < 0 ? -1 : 0;
}

static int attr_str(hid_t obj, const char *name, const char *v) {
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
static hid_t select_boxes(hid_t space, const mt_ckpt_boxes *bx) {
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

static hid_t mem_space(size_t n) {
  hsize_t dims[1] = {n ? (hsize_t)n : 1};
  hid_t s = H5Screate_simple(1, dims, NULL);
  if (!n) H5Sselect_none(s);
  return s;
}

/* copy the boxes' elements from a shard (mem = the shard's local element 0)
 * into staging, in canonical order; to_shard reverses the direction */
static void gather_boxes(float *staging, float *shard, const mt_ckpt_boxes *bx, int64_t L1,
                         int to_shard) {
  size_t k = 0;
  for (int i = 0; i < bx->n; i++) {
    const mt_ckpt_box *b = &bx->b[i];
    for (int64_t r = 0; r < b->count[0]; r++) {
      float *src = shard + b->local_off + (size_t)(r * L1);
      size_t w = (size_t)b->count[1];
      if (to_shard) memcpy(src, staging + k, w * sizeof(float));
      else memcpy(staging + k, src, w * sizeof(float));
      k += w;
    }
  }
}

static uint64_t box_hash(const float *data, size_t n) { return XXH64(data, n * sizeof(float), 0); }

/* The checksum of one box of the canonical tensor, read independently. */
static int hash_box_in_file(hid_t dset, const int64_t *row, float *buf, uint64_t *h) {
  mt_ckpt_boxes bx = {0};
  mt_ckpt_box b = {{row[MT_IX_START0], row[MT_IX_START1]}, {row[MT_IX_COUNT0], row[MT_IX_COUNT1]}, 0, 0};
  bx.b = &b;
  bx.n = 1;
  bx.cap = 1;
  size_t n = (size_t)(b.count[0] * b.count[1]);
  hid_t fs = H5Dget_space(dset);
  select_boxes(fs, &bx);
  hid_t ms = mem_space(n);
  herr_t rc = H5Dread(dset, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
  H5Sclose(ms);
  H5Sclose(fs);
  if (rc < 0) return -1;
  *h = box_hash(buf, n);
  return 0;
}

static void dataset_path(char *out, size_t len, int group, const char *name) {
  snprintf(out, len, "/%s/%s", g_group_paths[group], name);
}

static hid_t fapl_mpio(MPI_Comm comm) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL);
  H5Pset_alignment(fapl, 65536, 1048576);
  H5Pset_coll_metadata_write(fapl, 1);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
  return fapl;
}

/* ------------------------------------------------------------------ */
/* what a rank writes                                                  */

/* Does this rank write its shard of t at all? Replicated state is written
 * once: by tp rank 0 for tensors replicated over tp, by cp rank 0 always,
 * by the owning pipeline stage only (a stage's copy, pp_copy, is not). */
static int writes_tensor(const mt_tensor *t, const mt_mesh *mesh) {
  if (mesh->cp_rank != 0) return 0;
  if (t->pp_stage >= 0 && t->pp_stage != mesh->pp_rank) return 0;
  if ((t->tp.kind == MT_PLACE_REPLICATED || mesh->tp == 1) && mesh->tp_rank != 0) return 0;
  return 1;
}

/* Ranges of st intersected with tensor t: boxes, and the memory of each
 * piece. Several ranges may touch one tensor; boxes are appended per range. */
typedef struct {
  mt_ckpt_boxes boxes;  /* all boxes, canonical order within each range */
  float **piece_mem;    /* per box: memory of the box's first element */
  int piece_cap;
  size_t volume;
} tensor_sel;

static void tensor_sel_build(tensor_sel *s, const mt_tensor *t, const mt_ckpt_view_t *v,
                             const mt_flat_range *ranges, int n_ranges) {
  s->boxes.n = 0;
  s->volume = 0;
  mt_ckpt_boxes part = {0};
  size_t t0 = t->offset, t1 = t->offset + t->numel_local;
  for (int i = 0; i < n_ranges; i++) {
    size_t r0 = ranges[i].begin, r1 = ranges[i].begin + ranges[i].len;
    size_t lo = r0 > t0 ? r0 : t0, hi = r1 < t1 ? r1 : t1;
    if (lo >= hi) continue;
    mt_ckpt_boxes_for_range(v, lo - t0, hi - t0, &part);
    for (int j = 0; j < part.n; j++) {
      if (s->boxes.n == s->boxes.cap) {
        s->boxes.cap = s->boxes.cap ? 2 * s->boxes.cap : 16;
        s->boxes.b = realloc(s->boxes.b, (size_t)s->boxes.cap * sizeof *s->boxes.b);
        s->piece_mem = realloc(s->piece_mem, (size_t)s->boxes.cap * sizeof *s->piece_mem);
        if (!s->boxes.b || !s->piece_mem) mt_die("out of memory (checkpoint selection)");
      }
      mt_ckpt_box b = part.b[j];
      /* memory of the box: the range's memory shifted to the box's local offset */
      s->piece_mem[s->boxes.n] = ranges[i].mem + (t0 + b.local_off - r0);
      b.local_off = 0;
      s->boxes.b[s->boxes.n++] = b;
      s->volume += (size_t)(b.count[0] * b.count[1]);
    }
  }
  free(part.b);
}

/* The selection's data lies end to end in memory already (whole local rows,
 * one range): then no staging copy is needed. Returns that memory or NULL. */
static float *sel_contiguous(const tensor_sel *s, int64_t L1) {
  if (s->boxes.n == 0) return NULL;
  float *next = s->piece_mem[0];
  for (int i = 0; i < s->boxes.n; i++) {
    const mt_ckpt_box *b = &s->boxes.b[i];
    if (s->piece_mem[i] != next || (b->count[0] > 1 && b->count[1] != L1)) return NULL;
    next += b->count[0] * b->count[1];
  }
  return s->piece_mem[0];
}

static void tensor_sel_free(tensor_sel *s) {
  free(s->boxes.b);
  free(s->piece_mem);
}

/* staging <-> memory for a selection whose pieces have their own memory */
static void sel_copy(tensor_sel *s, float *staging, int64_t L1, int to_mem) {
  size_t k = 0;
  for (int i = 0; i < s->boxes.n; i++) {
    mt_ckpt_boxes one = {&s->boxes.b[i], 1, 1};
    gather_boxes(staging + k, s->piece_mem[i], &one, L1, to_mem);
    k += (size_t)(s->boxes.b[i].count[0] * s->boxes.b[i].count[1]);
  }
}

/* ------------------------------------------------------------------ */
/* save                                                                */

/* Tensor data moves with independent MPI-IO by default: each rank's part of
 * a tensor is a few large contiguous boxes, and collective two-phase I/O
 * only adds synchronisation (measured: 4x slower saves, 10x slower loads at
 * 4 ranks). MT_CKPT_IO=collective restores collective transfers, e.g. for a
 * file system that wants aggregation. Metadata stays collective. */
static H5FD_mpio_xfer_t tensor_io_mode(void) {
  const char *v = getenv("MT_CKPT_IO");
  return v && !strcmp(v, "collective") ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT;
}

static uint64_t schema_hash(const mt_registry *reg) {
  XXH64_state_t *st = XXH64_createState();
  XXH64_reset(st, 0);
  for (int i = 0; i < reg->n; i++) {
    const mt_tensor *t = &reg->t[i];
    XXH64_update(st, t->name, strlen(t->name));
    XXH64_update(st, t->shape, sizeof(int64_t) * (size_t)t->ndim);
  }
  uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  return h;
}

/* Shared mode: collective writes of every rank's boxes into the canonical
 * datasets. Per-writer mode (file = this rank's own shard file): each
 * tensor this rank writes becomes a 1-D dataset of its boxes end to end. */
static int write_tensors(hid_t file, int per_writer, const mt_registry *reg, mt_mesh *mesh,
                         const mt_ckpt_state *st, const char *crash, int64_t **index_rows,
                         int *n_index) {
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  if (!per_writer) H5Pset_dxpl_mpio(dxpl, tensor_io_mode());
  tensor_sel sel = {0};
  int cap = 64, n = 0, rc = 0;
  int64_t *rows = mt_malloc((size_t)cap * MT_CKPT_INDEX_COLS * sizeof(int64_t));
  float *staging = NULL;
  size_t staging_cap = 0;
  for (int g = 0; g < MT_CKPT_NGROUPS && rc == 0; g++) {
    for (int i = 0; i < reg->n; i++) {
      if (g == 0 && i == reg->n / 2) test_crash_point(crash, "write", mesh->world_rank);
      const mt_tensor *t = &reg->t[i];
      mt_ckpt_view_t v;
      mt_ckpt_view(t, reg->tp_size, &v);
      sel.boxes.n = 0;
      sel.volume = 0;
      if (writes_tensor(t, mesh)) tensor_sel_build(&sel, t, &v, st->ranges[g], st->n_ranges[g]);
      float *data = sel_contiguous(&sel, v.local_ext[1]);
      if (!data && sel.volume > 0) {
        if (sel.volume > staging_cap) {
          free(staging);
          staging_cap = sel.volume;
          staging = mt_malloc(staging_cap * sizeof(float));
        }
        sel_copy(&sel, staging, v.local_ext[1], 0);
        data = staging;
      }
      char path[256];
      dataset_path(path, sizeof path, g, t->name);
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
        select_boxes(fs, &sel.boxes);
        hid_t ms = mem_space(sel.volume);
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
        uint64_t h = box_hash(data + k, vol);
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
  tensor_sel_free(&sel);
  H5Pclose(dxpl);
  *index_rows = rows;
  *n_index = n;
  return rc;
}

/* Element offset of each index row's data inside its writer's shard dataset:
 * a writer's rows for one tensor are consecutive, in the order it wrote them. */
static int64_t *shard_offsets(const int64_t *rows, int64_t n) {
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
static hid_t virtual_dcpl(const mt_tensor *t, int g, const int64_t *rows, const int64_t *off,
                          int64_t n, int ti) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  float fill = NAN; /* never read: a missing source is caught before any read */
  H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &fill);
  hsize_t dims[MT_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
  char src_name[256];
  dataset_path(src_name, sizeof src_name, g, t->name);
  for (int64_t j = 0; j < n; j++) {
    const int64_t *r = rows + j * MT_CKPT_INDEX_COLS;
    if (r[MT_IX_GROUP] != g || r[MT_IX_TENSOR] != ti) continue;
    hid_t vs = H5Screate_simple(t->ndim, dims, NULL);
    mt_ckpt_box b = {{r[MT_IX_START0], r[MT_IX_START1]}, {r[MT_IX_COUNT0], r[MT_IX_COUNT1]}, 0, 0};
    mt_ckpt_boxes one = {&b, 1, 1};
    select_boxes(vs, &one);
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
  int rc = attr_str(d, "tp_split", split) | attr_i64(d, "fused_blocks", t->tp.fused_blocks) |
           attr_i64v(d, "padded_shape", padded, t->ndim) | attr_str(d, "axes", axes) |
           attr_str(d, "replicated_over", t->tp.kind == MT_PLACE_SHARDED ? "dp,cp" : "dp,cp,tp") |
           attr_i64(d, "weight_decay", t->weight_decay);
  if (rc == 0 && t->tied_to[0]) rc = attr_str(d, "tied_to", t->tied_to);
  return rc;
}

/* The canonical datasets: contiguous (shared mode) or virtual over the
 * writers' shard files (rows != NULL: per-writer mode's index file). */
static int create_datasets(hid_t file, const mt_registry *reg, const int64_t *rows, int64_t n_rows) {
  hid_t gm = H5Gcreate2(file, "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t go = H5Gcreate2(file, "optim", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g1 = H5Gcreate2(go, "exp_avg", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g2 = H5Gcreate2(go, "exp_avg_sq", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  int rc = (gm < 0 || go < 0 || g1 < 0 || g2 < 0) ? -1 : 0;
  hid_t groups[MT_CKPT_NGROUPS] = {gm, g1, g2};
  int64_t *off = rows ? shard_offsets(rows, n_rows) : NULL;
  for (int g = 0; g < MT_CKPT_NGROUPS && rc == 0; g++) {
    for (int i = 0; i < reg->n && rc == 0; i++) {
      const mt_tensor *t = &reg->t[i];
      hsize_t dims[MT_MAX_DIMS];
      for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
      hid_t s = H5Screate_simple(t->ndim, dims, NULL);
      hid_t dcpl = rows ? virtual_dcpl(t, g, rows, off, n_rows, i) : H5P_DEFAULT;
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

/* a dataset every rank creates, with rows [row0, row0+nrows) written by this rank */
static int write_table_i64(hid_t file, const char *name, const int64_t *rows, int64_t total,
                           int64_t row0, int64_t nrows, int cols, hid_t dxpl) {
  hsize_t dims[2] = {(hsize_t)total, (hsize_t)cols};
  hid_t s = H5Screate_simple(2, dims, NULL);
  hid_t d = H5Dcreate2(file, name, H5T_STD_I64LE, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t start[2] = {(hsize_t)row0, 0}, count[2] = {(hsize_t)nrows, (hsize_t)cols};
  if (nrows > 0) H5Sselect_hyperslab(s, H5S_SELECT_SET, start, NULL, count, NULL);
  else H5Sselect_none(s);
  hid_t ms = mem_space((size_t)(nrows * cols));
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
static int write_strings(hid_t file, const char *name, const char *buf, size_t width, size_t n,
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
static int write_text(hid_t file, const char *name, const char *text, int rank, hid_t dxpl) {
  return write_strings(file, name, text, strlen(text) + 1, 1, rank, dxpl);
}

/* the tensor names, row i = tensor id i of the index */
static int write_names(hid_t file, const mt_registry *reg, int rank, hid_t dxpl) {
  char *buf = mt_calloc((size_t)reg->n, MT_NAME_MAX);
  for (int i = 0; i < reg->n; i++) snprintf(buf + (size_t)i * MT_NAME_MAX, MT_NAME_MAX, "%s", reg->t[i].name);
  int rc = write_strings(file, "tensors", buf, MT_NAME_MAX, (size_t)reg->n, rank, dxpl);
  free(buf);
  return rc;
}

static int write_meta_attrs(hid_t file, const mt_ckpt_meta *m) {
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", MT_CKPT_VERSION_MAJOR, MT_CKPT_VERSION_MINOR,
           MT_CKPT_VERSION_PATCH);
  struct { const char *name; int64_t v; } ints[] = {
      {"step", m->step}, {"samples", m->samples}, {"tokens", m->tokens},
      {"optimizer_step", m->optimizer_step}, {"seed", m->seed}, {"n_layer", m->n_layer},
      {"n_embd", m->n_embd}, {"n_head", m->n_head}, {"seq_len", m->seq_len},
      {"vocab", m->vocab}, {"dp", m->dp}, {"tp", m->tp}, {"pp", m->pp}, {"cp", m->cp},
      {"zero", m->zero}, {"world", m->world}};
  int rc = attr_str(file, "format", MT_CKPT_FORMAT) | attr_str(file, "version", version) |
           attr_str(file, "index_columns", MT_CKPT_INDEX_COLUMNS);
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) rc |= attr_i64(file, ints[i].name, ints[i].v);
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

/* rank 0: manifest, fsync, rename, latest, retention */
static int commit(const char *root, const char *tmpdir, const char *final_dir, int64_t step,
                  const char *mode, const char *crash, int keep, mt_err *e) {
  cJSON *o = cJSON_CreateObject();
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", MT_CKPT_VERSION_MAJOR, MT_CKPT_VERSION_MINOR,
           MT_CKPT_VERSION_PATCH);
  cJSON_AddStringToObject(o, "format", MT_CKPT_FORMAT);
  cJSON_AddStringToObject(o, "version", version);
  cJSON_AddNumberToObject(o, "step", (double)step);
  cJSON_AddStringToObject(o, "mode", mode);
  cJSON_AddNumberToObject(o, "created_unix", (double)time(NULL));
  cJSON *files = cJSON_AddArrayToObject(o, "files");
  DIR *d = opendir(tmpdir);
  struct dirent *de;
  while (d && (de = readdir(d))) {
    if (de->d_name[0] == '.' || !strcmp(de->d_name, MT_CKPT_MANIFEST)) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tmpdir, de->d_name);
    fsync_path(p);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "name", de->d_name);
    cJSON_AddNumberToObject(f, "bytes", (double)file_size(p));
    cJSON_AddItemToArray(files, f);
  }
  if (d) closedir(d);
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_MANIFEST);
  int rc = write_file_durable(path, text);
  free(text);
  if (rc != 0 || fsync_path(tmpdir) != 0) {
    mt_err_set(e, "checkpoint: cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  test_crash_point(crash, "rename", 0);
  /* a checkpoint of this step that exists already (a rerun) is replaced */
  if (file_size(final_dir) >= 0) {
    char old[1024];
    snprintf(old, sizeof old, "%s.old", tmpdir);
    if (rename(final_dir, old) == 0) remove_tree(old);
  }
  if (rename(tmpdir, final_dir) != 0 || fsync_path(root) != 0) {
    mt_err_set(e, "checkpoint: cannot rename %s to %s: %s", tmpdir, final_dir, strerror(errno));
    return -1;
  }
  test_crash_point(crash, "latest", 0);
  char latest[1024], target[64];
  snprintf(latest, sizeof latest, "%s/latest", root);
  snprintf(target, sizeof target, "step_%lld\n", (long long)step);
  if (write_file_durable(latest, target) != 0 || fsync_path(root) != 0) {
    mt_err_set(e, "checkpoint: cannot update %s: %s", latest, strerror(errno));
    return -1;
  }
  /* retention: complete checkpoints beyond the newest `keep`, and leftovers of crashed saves */
  DIR *rd = opendir(root);
  int64_t steps[4096];
  int n = 0;
  while (rd && (de = readdir(rd))) {
    int64_t s;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, de->d_name);
    if (strstr(de->d_name, ".tmp-") && strncmp(de->d_name, "step_", 5) == 0) remove_tree(p);
    else if (parse_step_dir(de->d_name, &s) && n < 4096) steps[n++] = s;
  }
  if (rd) closedir(rd);
  if (keep > 0 && n > keep) {
    for (int i = 0; i < n; i++)
      for (int j = i + 1; j < n; j++)
        if (steps[j] > steps[i]) {
          int64_t t = steps[i];
          steps[i] = steps[j];
          steps[j] = t;
        }
    for (int i = keep; i < n; i++) {
      char p[1024];
      snprintf(p, sizeof p, "%s/step_%lld", root, (long long)steps[i]);
      remove_tree(p);
    }
    fsync_path(root);
  }
  return 0;
}

/* The coordinates of every rank, gathered (rank, tp, cp, dp, pp). */
static int64_t *gather_layout(mt_mesh *mesh) {
  int64_t mine[5] = {mesh->world_rank, mesh->tp_rank, mesh->cp_rank, mesh->dp_rank, mesh->pp_rank};
  int64_t *all = mt_calloc((size_t)mesh->world_size * 5, sizeof(int64_t));
  MPI_Allgather(mine, 5, MPI_INT64_T, all, 5, MPI_INT64_T, MPI_COMM_WORLD);
  return all;
}

/* Shared mode: one file, parallel HDF5, collective writes. Returns 1 on success. */
static int save_shared(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                       mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                       mt_err *e) {
  int rank = mesh->world_rank, world = mesh->world_size;
  char file_path[1100];
  snprintf(file_path, sizeof file_path, "%s/%s", tmpdir, MT_CKPT_SHARED_FILE);
  hid_t fapl = fapl_mpio(MPI_COMM_WORLD);
  hid_t file = H5Fcreate(file_path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  int ok = file >= 0;
  int64_t *rows = NULL;
  int n_rows = 0;
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE);
  if (ok) ok = write_meta_attrs(file, meta) == 0 && create_datasets(file, reg, NULL, 0) == 0;
  if (ok) ok = write_tensors(file, 0, reg, mesh, st, opts->test_crash, &rows, &n_rows) == 0;
  if (ok) {
    int *counts = mt_calloc((size_t)world, sizeof(int));
    MPI_Allgather(&n_rows, 1, MPI_INT, counts, 1, MPI_INT, MPI_COMM_WORLD);
    int64_t total = 0, row0 = 0;
    for (int r = 0; r < world; r++) {
      if (r < rank) row0 += counts[r];
      total += counts[r];
    }
    free(counts);
    ok = write_table_i64(file, "index", rows, total, row0, n_rows, MT_CKPT_INDEX_COLS, dxpl) == 0;
    int64_t lay[5] = {rank, mesh->tp_rank, mesh->cp_rank, mesh->dp_rank, mesh->pp_rank};
    ok = ok && write_table_i64(file, "layout", lay, world, rank, 1, 5, dxpl) == 0;
    ok = ok && write_names(file, reg, rank, dxpl) == 0;
    ok = ok && write_text(file, "config", opts->config_ini ? opts->config_ini : "", rank, dxpl) == 0;
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

/* Per-writer mode: each rank that owns data writes shard-<rank>.h5 on its own
 * (no MPI-IO); rank 0 then writes index.h5, whose virtual datasets present
 * the whole tensors. Returns 1 on success. */
/* Per-writer, part 1 (no MPI, so it can run in a background thread): write
 * this rank's shard file and return its index rows. */
static int write_shard(const char *tmpdir, const mt_registry *reg, mt_mesh *mesh,
                       const mt_ckpt_state *st, const char *crash, int64_t **rows, int *n_rows,
                       mt_err *e) {
  char path[1100];
  snprintf(path, sizeof path, "%s/shard-%05d.h5", tmpdir, mesh->world_rank);
  hid_t file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
  int ok = file >= 0;
  *rows = NULL;
  *n_rows = 0;
  if (ok) ok = write_tensors(file, 1, reg, mesh, st, crash, rows, n_rows) == 0;
  if (file >= 0) {
    if (H5Fflush(file, H5F_SCOPE_LOCAL) < 0 || H5Fclose(file) < 0) ok = 0;
    if (ok && *n_rows == 0) unlink(path); /* a rank that owns nothing leaves no file */
    else if (ok) fsync_path(path);
  }
  if (!ok) mt_err_set(e, "checkpoint: writing %s failed (HDF5 error)", path);
  return ok;
}

/* Per-writer, part 2 (collective): every rank's index rows to rank 0, which
 * writes index.h5 with the virtual datasets. Returns 1 on success. */
static int finish_per_writer(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
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
    int ok = idx >= 0 && write_meta_attrs(idx, meta) == 0 && create_datasets(idx, reg, all, n) == 0 &&
             write_table_i64(idx, "index", all, n, 0, n, MT_CKPT_INDEX_COLS, H5P_DEFAULT) == 0 &&
             write_table_i64(idx, "layout", layout, world, 0, world, 5, H5P_DEFAULT) == 0 &&
             write_names(idx, reg, 0, H5P_DEFAULT) == 0 &&
             write_text(idx, "config", config_ini ? config_ini : "", 0, H5P_DEFAULT) == 0;
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
static int save_per_writer(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                           mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                           mt_err *e) {
  int64_t *rows = NULL;
  int n_rows = 0;
  write_shard(tmpdir, reg, mesh, st, opts->test_crash, &rows, &n_rows, e);
  int ok = finish_per_writer(tmpdir, meta, reg, mesh, opts->config_ini, rows, n_rows, e);
  free(rows);
  return ok;
}

/* The first half of every save (collective): agree on the schema, make the
 * temporary directory. */
static int save_begin(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                      mt_mesh *mesh, const mt_ckpt_save_opts *opts, char *tmpdir, size_t len,
                      mt_err *e) {
  int rank = mesh->world_rank;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  uint64_t h = schema_hash(reg);
  unsigned long long hmin = h, hmax = h;
  MPI_Allreduce(MPI_IN_PLACE, &hmin, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hmax, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  if (hmin != hmax) {
    mt_err_set(e, "checkpoint: ranks disagree on the tensor schema; nothing written");
    return -1;
  }
  mt_err local = {0};
  if (rank == 0) {
    snprintf(tmpdir, len, "%s/step_%lld.tmp-%ld-%d", root, (long long)meta->step,
             (long)time(NULL), (int)getpid());
    if (mkdir_p(root) != 0 || mkdir(tmpdir, 0755) != 0)
      mt_err_set(&local, "checkpoint: cannot create %s: %s", tmpdir, strerror(errno));
  }
  MPI_Bcast(tmpdir, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  test_crash_point(opts->test_crash, "create", rank);
  return 0;
}

/* The last half (collective): all wrote, rank 0 commits. */
static int save_end(const char *root, const char *tmpdir, int64_t step, const char *mode,
                    const char *crash, int keep, mt_mesh *mesh, mt_err *e) {
  mt_err local = {0};
  char final_dir[1100];
  snprintf(final_dir, sizeof final_dir, "%s/step_%lld", root, (long long)step);
  if (mesh->world_rank == 0) commit(root, tmpdir, final_dir, step, mode, crash, keep, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  return 0;
}

int mt_ckpt_save(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                 mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                 double *write_s, mt_err *e) {
  double t0 = mt_now();
  char tmpdir[1024];
  if (save_begin(root, meta, reg, mesh, opts, tmpdir, sizeof tmpdir, e) != 0) return -1;
  mt_err local = {0};
  int per_writer = strcmp(opts->mode, "per-writer") == 0;
  int ok = per_writer ? save_per_writer(tmpdir, meta, reg, mesh, st, opts, &local)
                      : save_shared(tmpdir, meta, reg, mesh, st, opts, &local);
  if (!ok && !local.failed) mt_err_set(&local, "checkpoint: writing %s failed (HDF5 error)", tmpdir);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  if (save_end(root, tmpdir, meta->step, opts->mode, opts->test_crash, opts->keep, mesh, e) != 0)
    return -1;
  if (write_s) *write_s = mt_now() - t0;
  return 0;
}

/* ------------------------------------------------------------------ */
/* asynchronous save: snapshot, then a thread writes the shard file    */

struct mt_ckpt_async {
  char root[1024], tmpdir[1024], mode[32], crash[32];
  char *config_ini;
  int keep;
  mt_ckpt_meta meta;
  const mt_registry *reg;
  mt_mesh *mesh;
  mt_flat_range *ranges[MT_CKPT_NGROUPS]; /* point into snapshot */
  mt_ckpt_state st;
  float *snapshot;
  size_t snapshot_n;
  pthread_t thread;
  atomic_int done;
  int64_t *rows;
  int n_rows;
  mt_err err;
  double t_start, t_written;
};

/* One host buffer for snapshots, kept from save to save: the copy then runs
 * at memory bandwidth instead of page-fault speed. (At most one save is in
 * flight, so one buffer is enough.) */
static float *g_snapshot;
static size_t g_snapshot_cap;
static float *snapshot_buffer(size_t n) {
  if (n > g_snapshot_cap) {
    if (g_snapshot) mt_mem_free(MT_MEM_OTHER, g_snapshot, g_snapshot_cap * sizeof(float));
    g_snapshot = mt_mem_alloc(MT_MEM_OTHER, n * sizeof(float));
    g_snapshot_cap = n;
  }
  return g_snapshot ? g_snapshot : (g_snapshot = mt_mem_alloc(MT_MEM_OTHER, sizeof(float)));
}

static void *async_writer(void *arg) {
  mt_ckpt_async *a = arg;
  write_shard(a->tmpdir, a->reg, a->mesh, &a->st, a->crash, &a->rows, &a->n_rows, &a->err);
  a->t_written = mt_now();
  atomic_store(&a->done, 1);
  return NULL;
}

mt_ckpt_async *mt_ckpt_async_begin(const char *root, const mt_ckpt_meta *meta,
                                   const mt_registry *reg, mt_mesh *mesh,
                                   const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                                   mt_err *e) {
  mt_ckpt_async *a = mt_calloc(1, sizeof *a);
  a->t_start = mt_now();
  if (save_begin(root, meta, reg, mesh, opts, a->tmpdir, sizeof a->tmpdir, e) != 0) {
    free(a);
    return NULL;
  }
  snprintf(a->root, sizeof a->root, "%s", root);
  snprintf(a->mode, sizeof a->mode, "per-writer");
  snprintf(a->crash, sizeof a->crash, "%s", opts->test_crash ? opts->test_crash : "none");
  a->config_ini = strdup(opts->config_ini ? opts->config_ini : "");
  a->keep = opts->keep;
  a->meta = *meta;
  a->reg = reg;
  a->mesh = mesh;
  /* the snapshot: this rank's ranges, copied, so training may go on */
  for (int g = 0; g < MT_CKPT_NGROUPS; g++)
    for (int i = 0; i < st->n_ranges[g]; i++) a->snapshot_n += st->ranges[g][i].len;
  a->snapshot = snapshot_buffer(a->snapshot_n);
  size_t k = 0;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    a->ranges[g] = mt_calloc((size_t)st->n_ranges[g] + 1, sizeof(mt_flat_range));
    for (int i = 0; i < st->n_ranges[g]; i++) {
      const mt_flat_range *r = &st->ranges[g][i];
      memcpy(a->snapshot + k, r->mem, r->len * sizeof(float));
      a->ranges[g][i] = (mt_flat_range){r->begin, r->len, a->snapshot + k};
      k += r->len;
    }
    a->st.ranges[g] = a->ranges[g];
    a->st.n_ranges[g] = st->n_ranges[g];
  }
  atomic_init(&a->done, 0);
  if (pthread_create(&a->thread, NULL, async_writer, a) != 0) mt_die("cannot start the checkpoint writer thread");
  return a;
}

int mt_ckpt_async_poll(mt_ckpt_async **ap, int wait, double *write_s, int64_t *step, mt_err *e) {
  mt_ckpt_async *a = *ap;
  if (!a) return 0;
  /* all ranks decide together whether the writers are done */
  int done = wait ? 1 : atomic_load(&a->done);
  MPI_Allreduce(MPI_IN_PLACE, &done, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!done) return 0;
  pthread_join(a->thread, NULL);
  mt_err local = a->err;
  finish_per_writer(a->tmpdir, &a->meta, a->reg, a->mesh, a->config_ini, a->rows, a->n_rows, &local);
  int rc = mt_err_agree(&local, MPI_COMM_WORLD) ? -1 : 0;
  if (rc == 0) rc = save_end(a->root, a->tmpdir, a->meta.step, a->mode, a->crash, a->keep, a->mesh, &local);
  if (rc != 0) *e = local;
  if (write_s) *write_s = a->t_written - a->t_start;
  if (step) *step = a->meta.step;
  free(a->rows);
  free(a->config_ini);
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) free(a->ranges[g]);
  free(a);
  *ap = NULL;
  return rc == 0 ? 1 : -1;
}

/* ------------------------------------------------------------------ */
/* resolve and manifest                                                */

int mt_ckpt_check_manifest(const char *dir, char *mode, size_t mode_len, int64_t *step,
                           mt_err *e) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, MT_CKPT_MANIFEST);
  FILE *f = fopen(path, "r");
  if (!f) {
    mt_err_set(e, "%s: no %s (not a complete checkpoint)", dir, MT_CKPT_MANIFEST);
    return -1;
  }
  fseek(f, 0, SEEK_END);
  long flen = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = mt_malloc((size_t)(flen > 0 ? flen : 0) + 1);
  size_t n = fread(buf, 1, (size_t)(flen > 0 ? flen : 0), f);
  fclose(f);
  buf[n] = '\0';
  cJSON *o = cJSON_Parse(buf);
  free(buf);
  cJSON *fmt = cJSON_GetObjectItem(o, "format"), *files = cJSON_GetObjectItem(o, "files");
  cJSON *st = cJSON_GetObjectItem(o, "step"), *md = cJSON_GetObjectItem(o, "mode");
  if (!o || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, MT_CKPT_FORMAT) != 0 ||
      !cJSON_IsArray(files) || !cJSON_IsNumber(st) || !cJSON_IsString(md)) {
    mt_err_set(e, "%s: not a meshtrain checkpoint manifest", path);
    cJSON_Delete(o);
    return -1;
  }
  cJSON *ver = cJSON_GetObjectItem(o, "version");
  int major = -1;
  if (!cJSON_IsString(ver) || sscanf(ver->valuestring, "%d", &major) != 1 || major < 0) {
    mt_err_set(e, "%s: manifest has no format version", path);
    cJSON_Delete(o);
    return -1;
  }
  if (major > MT_CKPT_VERSION_MAJOR) {
    mt_err_set(e, "%s: format version %s is newer than this meshtrain reads (%d.x)", dir,
               ver->valuestring, MT_CKPT_VERSION_MAJOR);
    cJSON_Delete(o);
    return -1;
  }
  if (step) *step = (int64_t)st->valuedouble;
  if (mode) snprintf(mode, mode_len, "%s", md->valuestring);
  int rc = 0;
  cJSON *it;
  cJSON_ArrayForEach(it, files) {
    cJSON *nm = cJSON_GetObjectItem(it, "name"), *by = cJSON_GetObjectItem(it, "bytes");
    if (!cJSON_IsString(nm) || !cJSON_IsNumber(by)) continue;
    char fp[1200];
    snprintf(fp, sizeof fp, "%s/%s", dir, nm->valuestring);
    long long have = file_size(fp);
    if (have < 0) {
      mt_err_set(e, "%s: missing file %s listed in the manifest", dir, nm->valuestring);
      rc = -1;
      break;
    }
    if (have != (long long)by->valuedouble) {
      mt_err_set(e, "%s: %s is %lld bytes, the manifest says %.0f (truncated or changed)", dir,
                 nm->valuestring, have, by->valuedouble);
      rc = -1;
      break;
    }
  }
  cJSON_Delete(o);
  return rc;
}

/* newest complete step directory under root; 0 if none */
static int newest_complete(const char *root, char *dir, size_t len) {
  DIR *d = opendir(root);
  if (!d) return 0;
  struct dirent *de;
  int64_t best = -1;
  while ((de = readdir(d))) {
    int64_t s;
    if (!parse_step_dir(de->d_name, &s) || s <= best) continue;
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", root, de->d_name);
    mt_err ignore = {0};
    if (mt_ckpt_check_manifest(p, NULL, 0, NULL, &ignore) == 0) {
      best = s;
      snprintf(dir, len, "%s", p);
    }
  }
  closedir(d);
  return best >= 0;
}

int mt_ckpt_resolve(const char *spec, const char *root, char *dir, size_t dir_len, int *found,
                    mt_err *e) {
  mt_err local = {0};
  int have = 0;
  if (mt_log_rank() == 0) {
    if (!strcmp(spec, "auto")) {
      have = newest_complete(root, dir, dir_len);
    } else {
      char mpath[1100];
      snprintf(mpath, sizeof mpath, "%s/%s", spec, MT_CKPT_MANIFEST);
      if (file_size(spec) < 0) {
        mt_err_set(&local, "train.resume: %s: no such checkpoint", spec);
      } else if (file_size(mpath) >= 0) {
        snprintf(dir, dir_len, "%s", spec);
        have = mt_ckpt_check_manifest(dir, NULL, 0, NULL, &local) == 0;
      } else if (!(have = newest_complete(spec, dir, dir_len))) {
        mt_err_set(&local, "train.resume: %s holds no complete checkpoint (no %s)", spec,
                   MT_CKPT_MANIFEST);
      }
    }
  }
  MPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Bcast(dir, (int)dir_len, MPI_CHAR, 0, MPI_COMM_WORLD);
  *found = have;
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* load                                                                */

static int check_model(const char *dir, hid_t file, const mt_ckpt_meta *expect,
                       mt_ckpt_meta *m, mt_err *e) {
  char fmt[64] = "", version[32] = "";
  if (mt_ckpt_attr_str(file, "format", fmt, sizeof fmt) != 0 || strcmp(fmt, MT_CKPT_FORMAT) != 0) {
    mt_err_set(e, "%s: not a meshtrain checkpoint (format attribute '%s')", dir, fmt);
    return -1;
  }
  int major = 0, minor = 0, patch = 0;
  if (mt_ckpt_attr_str(file, "version", version, sizeof version) != 0 ||
      sscanf(version, "%d.%d.%d", &major, &minor, &patch) != 3) {
    mt_err_set(e, "%s: unreadable format version '%s'", dir, version);
    return -1;
  }
  if (major > MT_CKPT_VERSION_MAJOR) {
    mt_err_set(e, "%s: format version %s is newer than this meshtrain reads (%d.x)", dir,
               version, MT_CKPT_VERSION_MAJOR);
    return -1;
  }
  if (mt_ckpt_read_meta(file, m) != 0) {
    mt_err_set(e, "%s: checkpoint metadata incomplete", dir);
    return -1;
  }
  struct { const char *name; int64_t have, want; } shape[] = {
      {"n_layer", m->n_layer, expect->n_layer}, {"n_embd", m->n_embd, expect->n_embd},
      {"n_head", m->n_head, expect->n_head}, {"seq_len", m->seq_len, expect->seq_len},
      {"vocab", m->vocab, expect->vocab}};
  for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++)
    if (shape[i].have != shape[i].want) {
      mt_err_set(e, "%s is a checkpoint of another model: %s = %lld there, %lld in this run",
                 dir, shape[i].name, (long long)shape[i].have, (long long)shape[i].want);
      return -1;
    }
  return 0;
}

static int check_tensor(const char *dir, hid_t file, int g, const mt_tensor *t, mt_err *e) {
  char path[256];
  dataset_path(path, sizeof path, g, t->name);
  if (H5Lexists(file, g_group_paths[g][0] == 'm' ? "model" : "optim", H5P_DEFAULT) <= 0 ||
      H5Oexists_by_name(file, path, H5P_DEFAULT) <= 0) {
    mt_err_set(e, "%s: missing tensor %s", dir, path);
    return -1;
  }
  hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
  hid_t s = d >= 0 ? H5Dget_space(d) : -1;
  hsize_t dims[MT_MAX_DIMS] = {0};
  int nd = s >= 0 ? H5Sget_simple_extent_dims(s, dims, NULL) : -1;
  if (s >= 0) H5Sclose(s);
  if (d >= 0) H5Dclose(d);
  int same = nd == t->ndim;
  for (int k = 0; same && k < nd; k++) same = (int64_t)dims[k] == t->shape[k];
  if (!same) {
    char have[64] = "", want[64] = "";
    for (int k = 0; k < nd; k++)
      snprintf(have + strlen(have), sizeof have - strlen(have), "%s%llu", k ? "," : "",
               (unsigned long long)dims[k]);
    for (int k = 0; k < t->ndim; k++)
      snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", k ? "," : "",
               (long long)t->shape[k]);
    mt_err_set(e, "%s: tensor %s has shape [%s] in the checkpoint but [%s] in the model", dir,
               path, have, want);
    return -1;
  }
  return 0;
}

/* Every rank checks the checksums of the index rows i with i % world == rank. */
static int verify_checksums(const char *dir, hid_t file, const mt_registry *reg, mt_mesh *mesh,
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
    dataset_path(path, sizeof path, g, reg->t[ti].name);
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
static int check_shard_files(const char *dir, mt_err *e) {
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
    if (file_size(shard) < 0) {
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

int mt_ckpt_load(const char *dir, const mt_registry *reg, mt_mesh *mesh, const mt_ckpt_state *st,
                 const mt_ckpt_meta *expect, int verify, mt_ckpt_meta *meta_out, mt_err *e) {
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  mt_err local = {0};
  char mode[32] = "";
  int64_t mstep = -1;
  /* every rank checks the manifest: cheap, and all then agree */
  mt_ckpt_check_manifest(dir, mode, sizeof mode, &mstep, &local);
  int per_writer = strcmp(mode, "per-writer") == 0;
  if (!local.failed && !per_writer && strcmp(mode, "shared") != 0)
    mt_err_set(&local, "%s: checkpoint mode '%s' cannot be read by this build", dir, mode);
  if (!local.failed && per_writer && mesh->world_rank == 0) check_shard_files(dir, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  /* shared: one parallel open, collective reads. per-writer: every rank opens
   * the index on its own and reads through its virtual datasets (parallel
   * HDF5 cannot read virtual datasets). */
  char file_path[1100];
  snprintf(file_path, sizeof file_path, "%s/%s", dir, per_writer ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
  hid_t fapl = per_writer ? H5Pcreate(H5P_FILE_ACCESS) : fapl_mpio(MPI_COMM_WORLD);
  hid_t file = H5Fopen(file_path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  int open_failed = file < 0;
  MPI_Allreduce(MPI_IN_PLACE, &open_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (open_failed) {
    if (file >= 0) H5Fclose(file);
    mt_err_set(&local, "%s: cannot open as HDF5 (truncated or corrupt?)", file_path);
    *e = local;
    return -1;
  }
  mt_ckpt_meta m;
  memset(&m, 0, sizeof m);
  if (check_model(dir, file, expect, &m, &local) == 0 && m.step != mstep)
    mt_err_set(&local, "%s: the file says step %lld, the manifest step %lld", dir,
               (long long)m.step, (long long)mstep);
  for (int g = 0; g < MT_CKPT_NGROUPS && !local.failed; g++)
    for (int i = 0; i < reg->n && !local.failed; i++) check_tensor(dir, file, g, &reg->t[i], &local);
  if (!local.failed && verify) verify_checksums(dir, file, reg, mesh, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    H5Fclose(file);
    *e = local;
    return -1;
  }
  /* read what this rank needs, tensor by tensor (collective) */
  hid_t dxpl = H5Pcreate(H5P_DATASET_XFER);
  if (!per_writer) H5Pset_dxpl_mpio(dxpl, tensor_io_mode());
  tensor_sel sel = {0};
  float *staging = NULL;
  size_t cap = 0;
  int ok = 1;
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    for (int i = 0; i < reg->n; i++) {
      const mt_tensor *t = &reg->t[i];
      mt_ckpt_view_t v;
      mt_ckpt_view(t, reg->tp_size, &v);
      tensor_sel_build(&sel, t, &v, st->ranges[g], st->n_ranges[g]);
      float *direct = sel_contiguous(&sel, v.local_ext[1]);
      if (!direct && sel.volume > cap) {
        free(staging);
        cap = sel.volume;
        staging = mt_malloc(cap * sizeof(float));
      }
      char path[256];
      dataset_path(path, sizeof path, g, t->name);
      hid_t d = H5Dopen2(file, path, H5P_DEFAULT);
      hid_t fs = H5Dget_space(d);
      select_boxes(fs, &sel.boxes);
      hid_t ms = mem_space(sel.volume);
      float dummy;
      float *into = direct ? direct : staging ? staging : &dummy;
      if (d < 0 || H5Dread(d, H5T_NATIVE_FLOAT, ms, fs, dxpl, into) < 0) ok = 0;
      H5Sclose(ms);
      H5Sclose(fs);
      if (d >= 0) H5Dclose(d);
      if (!direct) sel_copy(&sel, staging, v.local_ext[1], 1);
    }
  }
  free(staging);
  tensor_sel_free(&sel);
  H5Pclose(dxpl);
  H5Fclose(file);
  if (!ok) mt_err_set(&local, "%s: reading tensors failed (HDF5 error)", file_path);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  if (meta_out) *meta_out = m;
  return 0;
}
