/* A checkpoint opened for reading at scale: one rank reads the metadata, every
 * rank reads only the data it needs. See ckpt_core.h (source.c).
 *
 * Why: a loader where every rank parses the manifest, opens the main file and
 * reads its object headers and the index (and, in per-writer mode, opens
 * every shard through the virtual datasets) sends the metadata server N
 * times the same requests: at 1,000 ranks on Lustre, a storm. Here rank 0
 * makes every check and broadcasts the result (a few MB at most: the index is
 * 64 bytes per box); a rank then opens ckpt.h5 once (MPI-IO) or just the
 * shard files holding boxes it needs, and reads through the index. */
#define _GNU_SOURCE /* qsort_r */
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

#include "ckpt/core/ckpt_core.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* open tracing and MPI-IO hints                                       */

static int g_trace_off; /* the check before a commit reads, but is no load */

void mt_ckpt_trace_suspend(int off) { g_trace_off = off; }

void mt_ckpt_trace_open(int rank, const char *path) {
  if (g_trace_off) return;
  const char *trace = getenv("MT_CKPT_TRACE_OPENS");
  if (!trace || !trace[0]) return;
  FILE *f = fopen(trace, "a"); /* one short line per open: appends do not interleave */
  if (!f) return;
  fprintf(f, "%d %s\n", rank, path);
  fclose(f);
}

#define MAX_HINTS 32
static char g_hint_key[MAX_HINTS][64], g_hint_val[MAX_HINTS][256];
static int g_n_hints;

int mt_ckpt_set_io_hints(const char *spec, mt_err *e) {
  int n = 0;
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", spec ? spec : "");
  for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    int bad = !eq || eq == kv || !eq[1] || n == MAX_HINTS || (size_t)(eq - kv) >= 64 ||
              strlen(eq + 1) >= 256;
    for (char *p = kv; !bad && p < eq; p++)
      bad = !((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_');
    for (char *p = eq ? eq + 1 : kv; !bad && *p; p++) bad = *p == ' ' || *p == '\t' || *p == '=';
    if (bad) {
      mt_err_set(e, "ckpt.io_hints: '%s' is not key=value (keys: lower case, digits, _; "
                    "e.g. striping_factor=16,cb_nodes=8)", kv);
      return -1;
    }
    *eq = '\0';
    snprintf(g_hint_key[n], sizeof g_hint_key[n], "%s", kv);
    snprintf(g_hint_val[n], sizeof g_hint_val[n], "%s", eq + 1);
    n++;
  }
  g_n_hints = n;
  return 0;
}

MPI_Info mt_ckpt_io_info(void) {
  if (g_n_hints == 0) return MPI_INFO_NULL;
  MPI_Info info;
  MT_MPI_CHECK(MPI_Info_create(&info));
  /* keys and values were checked against MPI's limits when they were set */
  for (int i = 0; i < g_n_hints; i++)
    MT_MPI_CHECK(MPI_Info_set(info, g_hint_key[i], g_hint_val[i]));
  return info;
}

/* ------------------------------------------------------------------ */
/* the source: rank 0 reads and checks, everyone gets the result       */

static int cmp_row_order(const void *a, const void *b, void *ctx) {
  const int64_t *rows = ctx;
  const int64_t *x = rows + *(const int64_t *)a * MT_CKPT_INDEX_COLS;
  const int64_t *y = rows + *(const int64_t *)b * MT_CKPT_INDEX_COLS;
  static const int key[] = {MT_IX_GROUP, MT_IX_TENSOR, MT_IX_START0, MT_IX_START1};
  for (int k = 0; k < 4; k++)
    if (x[key[k]] != y[key[k]]) return x[key[k]] < y[key[k]] ? -1 : 1;
  return 0;
}

/* rows by (group, tensor, start): each tensor's stored boxes in one range */
static void sort_rows(mt_ckpt_source *s) {
  int64_t n = s->n_rows, slots = (int64_t)s->tt.n * MT_CKPT_NGROUPS;
  s->order = mt_malloc(((size_t)n + 1) * sizeof(int64_t));
  s->first = mt_calloc((size_t)slots + 2, sizeof(int64_t));
  int64_t m = 0;
  for (int64_t j = 0; j < n; j++) {
    const int64_t *r = s->rows + j * MT_CKPT_INDEX_COLS;
    if (r[MT_IX_GROUP] >= 0 && r[MT_IX_GROUP] < s->tt.groups && r[MT_IX_TENSOR] >= 0 &&
        r[MT_IX_TENSOR] < s->tt.n)
      s->order[m++] = j; /* a row naming no tensor is left out (coverage reports it) */
  }
  qsort_r(s->order, (size_t)m, sizeof(int64_t), cmp_row_order, s->rows);
  int64_t k = 0;
  for (int64_t slot = 0; slot <= slots; slot++) {
    s->first[slot] = k;
    while (k < m) {
      const int64_t *r = s->rows + s->order[k] * MT_CKPT_INDEX_COLS;
      if (r[MT_IX_GROUP] * s->tt.n + r[MT_IX_TENSOR] != slot) break;
      k++;
    }
  }
  s->first[slots + 1] = m;
}

/* per-writer: every writer the index names has its shard among the files the
 * manifest listed (which exist, with their sizes): checked by name, without
 * opening any shard (the ranks that read one open it) */
static long check_shards_listed(mt_ckpt_source *s, mt_ckpt_report_fn report, void *ctx) {
  long problems = 0;
  int64_t *w = mt_malloc(((size_t)s->n_rows + 1) * sizeof *w);
  for (int64_t i = 0; i < s->n_rows; i++) w[i] = s->rows[i * MT_CKPT_INDEX_COLS + MT_IX_WRITER];
  int64_t last = -1;
  for (int64_t i = 0; i < s->n_rows; i++) {
    if (w[i] == last) continue; /* rows come per writer: one check per run */
    last = w[i];
    char name[64], path[1200], why[200];
    snprintf(name, sizeof name, "shard-%05lld.h5", (long long)w[i]);
    snprintf(path, sizeof path, "%s/%s", s->dir, name);
    if (mt_ckpt_file_size(path) < 0) {
      snprintf(why, sizeof why, "shard file %s of writer rank %lld is missing", name,
               (long long)w[i]);
      report(ctx, s->dir, why, NULL);
      problems++;
      break;
    }
  }
  free(w);
  return problems;
}

/* report NULL: a problem is the open's error */
static void problem_is_error(void *ctx, const char *path, const char *problem, const int64_t *row) {
  (void)row;
  mt_err_set((mt_err *)ctx, "%s: %s", path, problem);
}

static int source_read(const char *dir, mt_ckpt_source *s, mt_ckpt_report_fn report, void *ctx,
                       int want_attrs, mt_err *e);

int mt_ckpt_source_read(const char *dir, mt_ckpt_source *s, mt_ckpt_report_fn report, void *ctx,
                        mt_err *e) {
  MT_TRY(e, source_read(dir, s, report, ctx, 1, e));
  return 0;
}

int mt_ckpt_source_read_light(const char *dir, mt_ckpt_source *s, mt_err *e) {
  MT_TRY(e, source_read(dir, s, NULL, NULL, 0, e));
  return 0;
}

static int source_read(const char *dir, mt_ckpt_source *s, mt_ckpt_report_fn report, void *ctx,
                       int want_attrs, mt_err *e) {
  memset(s, 0, sizeof *s);
  snprintf(s->dir, sizeof s->dir, "%s", dir);
  if (!report) {
    report = problem_is_error;
    ctx = e;
  }
  hid_t file = -1;
  mt_ckpt_trace_open(0, MT_CKPT_MANIFEST);
  if (mt_ckpt_check_manifest(dir, &s->man, e) == 0) {
    s->per_writer = s->man.mode == MT_CKPT_MODE_PER_WRITER;
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", dir,
             s->per_writer ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
    int err = mt_ckpt_fault("open");
    hid_t fapl = mt_ckpt_fapl_serial();
    if (!err) {
      mt_ckpt_trace_open(0, path);
      file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    }
    if (err) mt_ckpt_err_read_sys(e, err, "%s: rank 0 cannot open %s", dir, path);
    else if (file < 0) mt_ckpt_err_h5_read(e, "%s: rank 0 cannot open %s as HDF5", dir, path);
    H5Pclose(fapl);
  }
  int64_t limit = s->man.total_bytes;
  int groups = MT_CKPT_NGROUPS;
  if (file >= 0 && mt_ckpt_check_meta(dir, file, &s->man, limit, &s->meta, &groups, e) == 0 &&
      mt_ckpt_read_tensors(dir, file, limit, groups, !s->per_writer, want_attrs, &s->tt, e) == 0 &&
      mt_ckpt_read_index(dir, file, limit, &s->rows, &s->n_rows, e) == 0) {
    s->problems += mt_ckpt_check_coverage(s->rows, s->n_rows, &s->tt, report, ctx);
    if (s->per_writer) s->problems += check_shards_listed(s, report, ctx);
    for (int g = 0; !s->per_writer && g < s->tt.groups; g++)
      for (int i = 0; i < s->tt.n; i++)
        if (s->tt.offset[(size_t)g * (size_t)s->tt.n + (size_t)i] < 0) {
          char path[256];
          mt_ckpt_dataset_path(path, sizeof path, g, s->tt.names[i]);
          report(ctx, path, "is not stored contiguously and uncompressed (a tool rewrote it?): "
                            "meshckpt convert writes it again", NULL);
          s->problems++;
          g = s->tt.groups;
          break;
        }
  }
  if (file >= 0 && H5Fclose(file) < 0 && !e->failed) mt_ckpt_err_h5_read(e, "%s", dir);
  return e->failed ? -1 : 0;
}

int mt_ckpt_source_open(const char *dir, mt_ckpt_source *s, mt_ckpt_report_fn report, void *ctx,
                        mt_err *e) {
  int rank = mt_ckpt_rank();
  memset(s, 0, sizeof *s);
  snprintf(s->dir, sizeof s->dir, "%s", dir);
  mt_err local = {0};
  if (!report) {
    report = problem_is_error;
    ctx = &local;
  }
  if (rank == 0) mt_ckpt_source_read(dir, s, report, ctx, &local);
  /* everything rank 0 learned, to every rank */
  int64_t head[6] = {local.failed, s->per_writer, s->tt.n, s->tt.groups, s->n_rows, s->problems};
  if (mt_ckpt_bcast(head, sizeof head, &local) == 0 && head[0] == 0 &&
      (head[4] > INT64_MAX / 64 / MT_CKPT_INDEX_COLS || head[2] > INT32_MAX / 4)) {
    mt_err_set(&local, "%s: the index is too large to share out (%lld boxes)", dir,
               (long long)head[4]);
    head[0] = 1;
  }
  if (mt_ckpt_agree(&local)) {
    *e = local;
    mt_ckpt_source_close(s);
    return mt_err_pass(e);
  }
  s->per_writer = (int)head[1];
  s->problems = head[5];
  if (rank != 0) {
    s->tt.n = (int)head[2];
    s->tt.groups = (int)head[3];
    s->n_rows = head[4];
    size_t slots = (size_t)s->tt.n * MT_CKPT_NGROUPS + 1;
    s->tt.names = mt_calloc((size_t)s->tt.n + 1, MT_NAME_MAX);
    s->tt.ext = mt_calloc(slots, 2 * sizeof(int64_t));
    s->tt.nd = mt_calloc((size_t)s->tt.n + 1, sizeof(int));
    s->tt.dims = mt_calloc((size_t)s->tt.n + 1, sizeof *s->tt.dims);
    s->tt.dtype = mt_calloc(slots, sizeof(int));
    s->tt.offset = mt_calloc(slots, sizeof(int64_t));
    s->tt.attrs = mt_calloc((size_t)s->tt.n + 1, sizeof *s->tt.attrs);
    s->rows = mt_malloc((size_t)s->n_rows * MT_CKPT_INDEX_COLS * sizeof(int64_t) + 8);
  }
  size_t slots = (size_t)s->tt.n * MT_CKPT_NGROUPS;
  if (mt_ckpt_bcast(&s->man, sizeof s->man, &local) != 0 ||
      mt_ckpt_bcast(&s->meta, sizeof s->meta, &local) != 0 ||
      mt_ckpt_bcast(s->tt.names, (int64_t)s->tt.n * MT_NAME_MAX, &local) != 0 ||
      mt_ckpt_bcast(s->tt.ext, (int64_t)slots * 2 * (int64_t)sizeof(int64_t), &local) != 0 ||
      mt_ckpt_bcast(s->tt.nd, (int64_t)s->tt.n * (int64_t)sizeof(int), &local) != 0 ||
      mt_ckpt_bcast(s->tt.dims, (int64_t)s->tt.n * (int64_t)sizeof *s->tt.dims, &local) != 0 ||
      mt_ckpt_bcast(s->tt.dtype, (int64_t)slots * (int64_t)sizeof(int), &local) != 0 ||
      mt_ckpt_bcast(s->tt.offset, (int64_t)slots * (int64_t)sizeof(int64_t), &local) != 0 ||
      mt_ckpt_bcast(s->tt.attrs, (int64_t)s->tt.n * (int64_t)sizeof *s->tt.attrs, &local) != 0 ||
      mt_ckpt_bcast(s->rows, s->n_rows * MT_CKPT_INDEX_COLS * (int64_t)sizeof(int64_t),
                    &local) != 0) {
    *e = local;
    mt_ckpt_source_close(s);
    return mt_err_pass(e);
  }
  s->shard_off = mt_ckpt_shard_offsets(s->rows, s->n_rows);
  sort_rows(s);
  return 0;
}

void mt_ckpt_source_close(mt_ckpt_source *s) {
  mt_ckpt_tensors_free(&s->tt);
  free(s->rows);
  free(s->shard_off);
  free(s->order);
  free(s->first);
  s->rows = s->shard_off = s->order = s->first = NULL;
}

/* ------------------------------------------------------------------ */
/* the reader                                                          */

int mt_ckpt_reader_open(mt_ckpt_reader *r, mt_ckpt_source *s, mt_err *e) {
  memset(r, 0, sizeof *r);
  r->src = s;
  r->rank = mt_ckpt_rank();
  if (s->per_writer) return 0; /* the shards are opened as they are read */
  mt_err local = {0};
  const char *io = getenv("MT_CKPT_IO");
  r->collective = io && !strcmp(io, "collective");
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", s->dir, MT_CKPT_SHARED_FILE);
  /* every rank can open the file: a collective open that fails on one rank
   * would leave the others waiting, so find out first */
  int err = mt_ckpt_fault("open"), fd = -1;
  if (!err && (fd = open(path, O_RDONLY)) < 0) err = errno;
  if (fd >= 0) close(fd);
  if (err) mt_ckpt_err_read_sys(&local, err, "%s: rank %d cannot open %s", s->dir, r->rank, path);
  if (mt_ckpt_agree(&local)) {
    *e = local;
    return mt_err_pass(e);
  }
  MPI_Info info = mt_ckpt_io_info();
  mt_ckpt_trace_open(r->rank, path);
  int rc = MPI_File_open(mt_ckpt_comm(), path, MPI_MODE_RDONLY, info, &r->fh);
  if (info != MPI_INFO_NULL) MT_MPI_CHECK(MPI_Info_free(&info));
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    mt_err_runtime(&local, "%s: rank %d cannot open %s with MPI-IO: %s", s->dir, r->rank, path,
                   mt_mpi_strerror(rc, msg));
  } else {
    r->fh_open = 1;
    r->opens++;
  }
  if (mt_ckpt_agree(&local)) {
    /* after a failure: the close's own result changes nothing but a line */
    if (r->fh_open && MPI_File_close(&r->fh) != MPI_SUCCESS)
      mt_warn("%s: cannot close %s after the failed open", s->dir, path);
    r->fh_open = 0;
    *e = local;
    return mt_err_pass(e);
  }
  return 0;
}

int mt_ckpt_reader_close(mt_ckpt_reader *r) {
  int rc = 0;
  for (int i = 0; i < r->n_shards; i++) rc |= H5Fclose(r->shards[i].file) < 0;
  free(r->shards);
  if (r->fh_open) rc |= MPI_File_close(&r->fh) != MPI_SUCCESS;
  free(r->staging);
  memset(r, 0, sizeof *r);
  H5Eclear2(H5E_DEFAULT);
  return rc ? -1 : 0;
}

/* at most this many shard files open at once (the oldest closes first) */
#define MAX_OPEN_SHARDS 128

void mt_ckpt_reader_drop_shard(mt_ckpt_reader *r, int64_t writer) {
  for (int i = 0; i < r->n_shards; i++)
    if (r->shards[i].writer == writer) {
      H5Fclose(r->shards[i].file);
      memmove(&r->shards[i], &r->shards[i + 1], (size_t)(r->n_shards - i - 1) * sizeof *r->shards);
      r->n_shards--;
      return;
    }
}

/* the shard file of writer w, opened on first use */
static hid_t shard_file(mt_ckpt_reader *r, int64_t w, const char *what, mt_err *e) {
  for (int i = 0; i < r->n_shards; i++)
    if (r->shards[i].writer == w) return r->shards[i].file;
  if (r->n_shards == MAX_OPEN_SHARDS) mt_ckpt_reader_drop_shard(r, r->shards[0].writer);
  char path[1200];
  snprintf(path, sizeof path, "%s/shard-%05lld.h5", r->src->dir, (long long)w);
  int err = mt_ckpt_fault("open");
  if (err) {
    mt_ckpt_err_read_sys(e, err, "%s: rank %d cannot open %s", r->src->dir, r->rank, path);
    return -1;
  }
  mt_ckpt_trace_open(r->rank, path);
  hid_t fapl = mt_ckpt_fapl_serial();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  if (f < 0) mt_ckpt_err_h5_read(e, "%s: rank %d cannot open %s", r->src->dir, r->rank, path);
  H5Pclose(fapl);
  (void)what;
  if (f < 0) return -1;
  if (r->n_shards == r->cap_shards) {
    int cap = r->cap_shards ? 2 * r->cap_shards : 8;
    void *grown = realloc(r->shards, (size_t)cap * sizeof *r->shards);
    if (!grown) {
      H5Fclose(f);
      mt_err_runtime(e, "%s: rank %d: out of memory (shard files)", r->src->dir, r->rank);
      return -1;
    }
    r->shards = grown;
    r->cap_shards = cap;
  }
  r->shards[r->n_shards].writer = w;
  r->shards[r->n_shards].file = f;
  r->n_shards++;
  r->opens++;
  return f;
}

static void *staging(mt_ckpt_reader *r, size_t bytes) {
  if (bytes > r->staging_cap) {
    free(r->staging);
    r->staging = mt_malloc(bytes);
    r->staging_cap = bytes;
  }
  return r->staging;
}

static void mpi_cause(int rc, char *out, size_t len) {
  char msg[MPI_MAX_ERROR_STRING];
  snprintf(out, len, "%s", mt_mpi_strerror(rc, msg));
}

/* bytes at off of the shared file into buf, all of them */
static int read_at(mt_ckpt_reader *r, int64_t off, void *buf, int64_t bytes, const char *what,
                   mt_err *e) {
  char *p = buf;
  while (bytes > 0) {
    int err = mt_ckpt_fault("read");
    if (err) {
      mt_ckpt_err_sys(e, err, "%s", what);
      return -1;
    }
    int n = bytes > (1 << 30) ? (1 << 30) : (int)bytes, got = 0;
    MPI_Status st;
    int rc = MPI_File_read_at(r->fh, (MPI_Offset)off, p, n, MPI_BYTE, &st);
    if (rc == MPI_SUCCESS) rc = MPI_Get_count(&st, MPI_BYTE, &got);
    if (rc != MPI_SUCCESS || got != n) {
      char cause[MPI_MAX_ERROR_STRING];
      if (rc != MPI_SUCCESS) mpi_cause(rc, cause, sizeof cause);
      else snprintf(cause, sizeof cause, "the file ends early (%d of %d bytes)", got, n);
      if (rc != MPI_SUCCESS) mt_err_runtime(e, "%s: %s", what, cause);
      else mt_err_set(e, "%s: %s", what, cause);
      return -1;
    }
    p += n;
    off += n;
    bytes -= n;
  }
  return 0;
}

/* bfloat16 -> float32: exact (the upper 16 bits of the float) */
static void widen_rows(const uint16_t *src, int64_t nr, int64_t nc, float *dst, int64_t stride) {
  for (int64_t k = 0; k < nr; k++)
    for (int64_t c = 0; c < nc; c++) {
      uint32_t u = (uint32_t)src[k * nc + c] << 16;
      memcpy(&dst[k * stride + c], &u, sizeof u);
    }
}

int mt_ckpt_reader_read(mt_ckpt_reader *r, int64_t j, int64_t r0, int64_t nr, int64_t c0,
                        int64_t nc, void *dst, int64_t stride, int as_float, const char *what,
                        mt_err *e) {
  mt_ckpt_source *s = r->src;
  const int64_t *row = s->rows + j * MT_CKPT_INDEX_COLS;
  int g = (int)row[MT_IX_GROUP], t = (int)row[MT_IX_TENSOR];
  size_t slot = (size_t)g * (size_t)s->tt.n + (size_t)t;
  int dtype = s->tt.dtype[slot];
  size_t es = mt_dtype_bytes(dtype);
  int direct = as_float && dtype == MT_DT_F32; /* the stored bytes are the floats */
  if (nr <= 0 || nc <= 0) return 0;
  if (!as_float) stride = nc;
  /* the stored bytes, contiguous rows, when they cannot go straight to dst */
  void *raw = direct || !as_float ? dst : staging(r, (size_t)(nr * nc) * es);
  if (s->per_writer) {
    hid_t f = shard_file(r, row[MT_IX_WRITER], what, e);
    if (f < 0) return mt_err_pass(e);
    char path[256];
    mt_ckpt_dataset_path(path, sizeof path, g, s->tt.names[t]);
    hid_t d = H5Dopen2(f, path, H5P_DEFAULT);
    hid_t fs = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t len = 0, W = (hsize_t)row[MT_IX_COUNT1];
    if (fs >= 0) H5Sget_simple_extent_dims(fs, &len, NULL);
    hsize_t need = (hsize_t)s->shard_off[j] + (hsize_t)(row[MT_IX_COUNT0] * row[MT_IX_COUNT1]);
    int ok = fs >= 0 && H5Sget_simple_extent_ndims(fs) == 1 && len >= need;
    if (fs >= 0 && !ok) {
      mt_err_set(e, "%s: %s in shard-%05lld.h5 is shorter than the index says", what, path,
                 (long long)row[MT_IX_WRITER]);
    } else if (!ok) {
      mt_ckpt_err_h5_read(e, "%s", what);
    }
    hid_t ms = -1, mtype = -1;
    if (ok) {
      hsize_t start = (hsize_t)s->shard_off[j] + (hsize_t)r0 * W + (hsize_t)c0;
      hsize_t hstride = W, count = (hsize_t)nr, block = (hsize_t)nc;
      if (nr == 1 || (hsize_t)nc == W) { /* one run */
        hstride = 1;
        count = 1;
        block = (hsize_t)(nr * nc);
      }
      ok = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, &hstride, &count, &block) >= 0;
      hsize_t mlen = direct ? (hsize_t)((nr - 1) * stride + nc) : (hsize_t)(nr * nc);
      ms = H5Screate_simple(1, &mlen, NULL);
      if (direct && stride != nc) {
        hsize_t m0 = 0, mst = (hsize_t)stride, mc = (hsize_t)nr, mb = (hsize_t)nc;
        ok = ok && H5Sselect_hyperslab(ms, H5S_SELECT_SET, &m0, &mst, &mc, &mb) >= 0;
      }
      mtype = direct ? H5Tcopy(H5T_NATIVE_FLOAT) : mt_ckpt_h5_type(dtype);
      int err = 0;
      ok = ok && ms >= 0 && mtype >= 0 && H5Dread(d, mtype, ms, fs, H5P_DEFAULT, raw) >= 0;
      if (!ok) mt_ckpt_err_h5_read(e, "%s", what);
      else if ((err = mt_ckpt_fault("read")) != 0) {
        mt_ckpt_err_sys(e, err, "%s", what);
        ok = 0;
      }
    }
    if (mtype >= 0) H5Tclose(mtype);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (d >= 0) H5Dclose(d);
    if (!ok) return mt_err_pass(e);
  } else {
    int64_t C = s->tt.ext[slot][1];
    int64_t base = s->tt.offset[slot] +
                   (int64_t)es * ((row[MT_IX_START0] + r0) * C + row[MT_IX_START1] + c0);
    if (nc == C && (raw != dst || stride == nc)) { /* whole rows of the dataset: one run */
      MT_TRY(e, read_at(r, base, raw, nr * nc * (int64_t)es, what, e));
    } else {
      for (int64_t k = 0; k < nr; k++) {
        char *into = (char *)raw + (size_t)(k * (raw == dst ? stride : nc)) * es;
        MT_TRY(e, read_at(r, base + k * C * (int64_t)es, into, nc * (int64_t)es, what, e));
      }
    }
  }
  if (as_float && !direct) widen_rows(raw, nr, nc, dst, stride);
  return 0;
}

int mt_ckpt_read_region(mt_ckpt_reader *rd, int g, int ti, int64_t r0, int64_t nr, int64_t c0,
                        int64_t nc, float *out, double *bytes_read, mt_err *e) {
  const mt_ckpt_source *s = rd->src;
  int64_t slot = (int64_t)g * s->tt.n + ti;
  int64_t covered = 0;
  for (int64_t q = s->first[slot]; q < s->first[slot + 1]; q++) {
    int64_t j = s->order[q];
    const int64_t *row = s->rows + j * MT_CKPT_INDEX_COLS;
    if (row[MT_IX_START0] >= r0 + nr) break; /* sorted by first row */
    int64_t a0 = row[MT_IX_START0] > r0 ? row[MT_IX_START0] : r0;
    int64_t b0 = row[MT_IX_START1] > c0 ? row[MT_IX_START1] : c0;
    int64_t a1 = row[MT_IX_START0] + row[MT_IX_COUNT0], b1 = row[MT_IX_START1] + row[MT_IX_COUNT1];
    if (a1 > r0 + nr) a1 = r0 + nr;
    if (b1 > c0 + nc) b1 = c0 + nc;
    if (a1 <= a0 || b1 <= b0) continue;
    char what[1400];
    snprintf(what, sizeof what, "%s: rank %d cannot read /%s/%s", s->dir, rd->rank,
             mt_ckpt_group_path(g), s->tt.names[ti]);
    float *dst = out + (a0 - r0) * nc + (b0 - c0);
    MT_TRY(e, mt_ckpt_reader_read(rd, j, a0 - row[MT_IX_START0], a1 - a0,
                                  b0 - row[MT_IX_START1], b1 - b0, dst, nc, 1, what, e));
    covered += (a1 - a0) * (b1 - b0);
    if (bytes_read)
      *bytes_read += (double)((a1 - a0) * (b1 - b0)) * (double)mt_dtype_bytes(s->tt.dtype[slot]);
  }
  if (covered != nr * nc) {
    mt_err_set(e, "%s: /%s/%s rows %lld..%lld are not covered by its boxes", s->dir,
               mt_ckpt_group_path(g), s->tt.names[ti], (long long)r0, (long long)(r0 + nr));
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------ */
/* the data checks                                                     */

long mt_ckpt_check_rows(mt_ckpt_reader *r, const int64_t *js, int64_t n, size_t chunk_bytes,
                        mt_ckpt_report_fn report, void *ctx, double *bytes_checked, mt_err *io) {
  mt_ckpt_source *s = r->src;
  long problems = 0;
  char *buf = mt_malloc(chunk_bytes + 64);
  for (int64_t q = 0; q < n; q++) {
    int64_t j = js[q];
    const int64_t *row = s->rows + j * MT_CKPT_INDEX_COLS;
    int64_t g = row[MT_IX_GROUP], t = row[MT_IX_TENSOR];
    if (g < 0 || g >= s->tt.groups || t < 0 || t >= s->tt.n) continue; /* coverage reports it */
    size_t slot = (size_t)g * (size_t)s->tt.n + (size_t)t;
    const int64_t *x = s->tt.ext[slot];
    if (row[MT_IX_START0] < 0 || row[MT_IX_START1] < 0 || row[MT_IX_COUNT0] < 1 ||
        row[MT_IX_COUNT1] < 1 || row[MT_IX_START0] > x[0] - row[MT_IX_COUNT0] ||
        row[MT_IX_START1] > x[1] - row[MT_IX_COUNT1])
      continue; /* outside the tensor: coverage reports it */
    char path[256], what[1300];
    mt_ckpt_dataset_path(path, sizeof path, (int)g, s->tt.names[t]);
    snprintf(what, sizeof what, "%.900s: %s: unreadable data on rank %d", s->dir, path, r->rank);
    int dtype = s->tt.dtype[slot];
    size_t es = mt_dtype_bytes(dtype);
    int64_t R = row[MT_IX_COUNT0], C = row[MT_IX_COUNT1];
    /* the box's rows in chunks of at most chunk_bytes, hashed as one stream;
     * a row wider than the chunk is read in pieces */
    int64_t cap = (int64_t)(chunk_bytes / es);
    if (cap < 1) cap = 1;
    int64_t per = cap / C;
    XXH64_state_t hs;
    XXH64_reset(&hs, 0);
    long long nonfinite = 0;
    mt_err why = {0};
    for (int64_t r0 = 0; r0 < R && !why.failed; r0 += per > 0 ? per : 1) {
      int64_t nr = per > 0 ? (R - r0 < per ? R - r0 : per) : 1;
      for (int64_t c0 = 0; c0 < C && !why.failed; c0 += per > 0 ? C : cap) {
        int64_t nc = per > 0 ? C : (C - c0 < cap ? C - c0 : cap);
        if (mt_ckpt_reader_read(r, j, r0, nr, c0, nc, buf, nc, 0, what, &why) != 0) break;
        size_t cnt = (size_t)(nr * nc);
        XXH64_update(&hs, buf, cnt * es);
        nonfinite += (long long)(dtype == MT_DT_BF16
                                     ? mt_ckpt_count_nonfinite_bf16((const uint16_t *)buf, cnt)
                                     : mt_ckpt_count_nonfinite((const float *)buf, cnt));
      }
    }
    uint64_t h = XXH64_digest(&hs), want;
    memcpy(&want, &row[MT_IX_XXH64], sizeof want);
    if (why.failed && why.code == MT_EXIT_RUNTIME) {
      /* an I/O error says nothing about the checkpoint: no verdict */
      if (!io->failed) *io = why;
      break;
    } else if (why.failed) {
      report(ctx, path, why.msg, row);
      problems++;
    } else if (h != want) {
      report(ctx, path, "checksum mismatch", row);
      problems++;
    } else if (nonfinite) {
      report(ctx, path, "NaN or Inf values", row);
      problems++;
    }
    if (bytes_checked) *bytes_checked += (double)es * (double)(R * C);
  }
  free(buf);
  return problems;
}
