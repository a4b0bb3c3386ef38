/* mt_ckpt_convert: rewrite a checkpoint, streaming, on any number of ranks.
 *
 * The output is planned first, the same on every rank: its boxes (index
 * rows) and their writers, either the source's own (no layout hint) or the
 * tensor-parallel shards of a target layout (one box per shard and fused
 * block, written by the target rank that loads it). Then each rank converts
 * its share (per-writer: whole shard files, so each file has one writer;
 * shared: a byte-balanced slice of the boxes, pwritten into ckpt.h5 at the
 * offsets rank 0 created): rows of a box are read from the source through
 * the index (mt_ckpt_reader), converted (float32 <-> bfloat16) and written,
 * at most opts->buffer_bytes of tensor data in memory at a time, the box's
 * checksum computed on the way. Rank 0 writes the index last (shared:
 * rewritten in place once every rank's checksums are in; per-writer: the
 * index file). The result is committed like a training save (temporary
 * directory, every rank agrees, manifest, fsync, rename). */
#define _GNU_SOURCE /* sync_file_range */
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

#include "ckpt/ckpt_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

uint16_t mt_ckpt_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN stays NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
  return (uint16_t)(u >> 16);
}

/* ------------------------------------------------------------------ */
/* the plan                                                            */

typedef struct {
  mt_ckpt_rows rows;  /* the output index, writer by writer (shard order) */
  int world;          /* writers 0..world-1 */
  int64_t *layout;    /* [world][5] */
} out_plan;

/* the registry of the checkpoint's own tensors (tp = 1), with the
 * placement attributes a conversion keeps */
static int source_registry(const mt_ckpt_source *s, mt_registry *reg, mt_err *e) {
  mt_registry_init(reg, 1, 0);
  for (int i = 0; i < s->tt.n; i++) {
    const mt_ckpt_tensor_attrs *a = &s->tt.attrs[i];
    int nd = s->tt.nd[i];
    int64_t shape[MT_MAX_DIMS], padded[MT_MAX_DIMS];
    for (int k = 0; k < nd; k++) {
      shape[k] = s->tt.dims[i][k];
      padded[k] = a->padded[k] >= shape[k] ? a->padded[k] : shape[k];
    }
    mt_placement p = a->tp_sharded ? mt_sharded(a->tp_dim, a->fused_blocks) : mt_replicated();
    int idx = mt_registry_add(reg, s->tt.names[i], nd, shape, padded, p, a->weight_decay);
    mt_tensor *t = &reg->t[idx];
    snprintf(t->tied_to, sizeof t->tied_to, "%s", a->tied_to);
    /* a unit each: experts and dense tensors may alternate, and a conversion
     * reduces no gradients over units */
    t->layer = i;
    if (a->expert) { /* its splits on the folded mesh, kept in the output */
      t->group = MT_GROUP_EDP;
      if (a->ep_dim >= 0) t->ep = mt_sharded(a->ep_dim, 1);
      if (a->etp_dim >= 0) t->etp = mt_sharded(a->etp_dim, 1);
    }
  }
  mt_err why = {0};
  if (mt_registry_finalize(reg, &why) != 0) {
    mt_err_set(e, "%s: its tensors do not form a registry: %s", s->dir, why.msg);
    return -1;
  }
  return 0;
}

/* the source's boxes, groups < groups, in the source's index order (which is
 * writer by writer) */
static int plan_as_source(const mt_ckpt_source *s, int groups, const int64_t *src_layout,
                          int src_world, out_plan *p) {
  int64_t max_w = -1;
  for (int64_t j = 0; j < s->n_rows; j++) {
    const int64_t *r = s->rows + j * MT_CKPT_INDEX_COLS;
    if (r[MT_IX_GROUP] >= groups) continue;
    mt_ckpt_box b = {{r[MT_IX_START0], r[MT_IX_START1]}, {r[MT_IX_COUNT0], r[MT_IX_COUNT1]}, 0, 0};
    if (mt_ckpt_append_row(&p->rows, (int)r[MT_IX_GROUP], (int)r[MT_IX_TENSOR],
                           (int)r[MT_IX_WRITER], &b, 0) != 0)
      return -1;
    if (r[MT_IX_WRITER] > max_w) max_w = r[MT_IX_WRITER];
  }
  p->world = (int)(max_w + 1 > src_world ? max_w + 1 : src_world);
  p->layout = mt_calloc((size_t)p->world * 5 + 1, sizeof(int64_t));
  for (int w = 0; w < p->world; w++) {
    p->layout[w * 5] = w;
    if (w < src_world) memcpy(&p->layout[w * 5], &src_layout[w * 5], 5 * sizeof(int64_t));
  }
  return 0;
}

static int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }

int mt_ckpt_target_stage_ranks(int tp, int ep, int etp) {
  tp = tp > 0 ? tp : 1;
  int f = (ep > 0 ? ep : 1) * (etp > 0 ? etp : 1);
  return tp / gcd(tp, f) * f;
}

int mt_ckpt_target_ranks(int tp, int pp, int ep, int etp) {
  return mt_ckpt_target_stage_ranks(tp, ep, etp) * (pp > 0 ? pp : 1);
}

/* The target layout's shards: writer w = pp stage * n + place q in the
 * stage (the rank order tp, cp, dp, pp with cp = 1: tp rank q % tp, dp
 * rank q / tp; q folded into etp, ep, edp for the experts) writes, of each
 * tensor its stage owns: a dense tensor's tp shard on dp rank 0 (a box per
 * fused block; padding rows left out; a tensor replicated over tp on tp
 * rank 0), an expert tensor's ep x etp shard on edp rank 0. */
static int plan_target(const mt_ckpt_source *s, const mt_ckpt_convert_opts *o, int groups,
                       out_plan *p, mt_err *e) {
  int T = o->target_tp, P = o->target_pp;
  int ep = o->target_ep > 0 ? o->target_ep : 1, etp = o->target_etp > 0 ? o->target_etp : 1;
  int n = mt_ckpt_target_stage_ranks(T, ep, etp);
  p->world = n * P;
  p->layout = mt_calloc((size_t)p->world * 5 + 1, sizeof(int64_t));
  mt_ckpt_boxes bx = {0};
  int rc = 0;
  for (int w = 0; w < p->world && rc == 0; w++) {
    const mt_registry *reg = &o->targets[w];
    int q = w % n, stage = w / n, tp_rank = q % T, dp_rank = q / T;
    int etp_rank, ep_rank, edp_rank;
    mt_mesh_fold_coords(q, etp, ep, &etp_rank, &ep_rank, &edp_rank);
    int64_t coords[5] = {w, tp_rank, 0, dp_rank, stage};
    memcpy(&p->layout[w * 5], coords, sizeof coords);
    for (int g = 0; g < groups && rc == 0; g++)
      for (int i = 0; i < reg->n && rc == 0; i++) {
        const mt_tensor *t = &reg->t[i];
        int owner = t->pp_stage < 0 ? 0 : t->pp_stage;
        int sharded = t->tp.kind == MT_PLACE_SHARDED && T > 1;
        int writes = t->group == MT_GROUP_EDP ? edp_rank == 0
                                              : dp_rank == 0 && (sharded || tp_rank == 0);
        if (owner != stage || !writes) continue;
        int ti = -1;
        for (int k = 0; k < s->tt.n && ti < 0; k++)
          if (!strcmp(s->tt.names[k], t->name)) ti = k;
        if (ti < 0) {
          mt_err_set(e, "the target layout has tensor %s, which %s does not", t->name, s->dir);
          rc = -1;
          break;
        }
        mt_ckpt_view_t v;
        mt_ckpt_view(t, T, &v);
        if (mt_ckpt_boxes_for_range(&v, 0, (size_t)(v.local_ext[0] * v.local_ext[1]), &bx) != 0) {
          rc = -1;
          break;
        }
        for (int b = 0; b < bx.n && rc == 0; b++)
          rc = mt_ckpt_append_row(&p->rows, g, ti, w, &bx.b[b], 0);
      }
  }
  free(bx.b);
  if (rc != 0 && !e->failed) mt_err_set(e, "out of memory planning the conversion");
  return rc;
}

/* ------------------------------------------------------------------ */
/* streaming one box                                                   */

typedef struct {
  mt_ckpt_reader *rd;
  const mt_ckpt_source *src;
  float *in;           /* canonical floats of the rows being converted */
  void *out;           /* the same in the output type */
  size_t elems;        /* capacity of both, elements */
  double bytes_read, bytes_written;
} streamer;

static int read_region(streamer *st, int g, int ti, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                       mt_err *e) {
  return mt_ckpt_read_region(st->rd, g, ti, r0, nr, c0, nc, st->in, &st->bytes_read, e);
}

/* The output box of row `row`: converted piece by piece (row blocks of
 * whole rows, or pieces of one row when a row is wider than the buffer);
 * each piece goes to sink(ctx, element offset within the box, bytes, n).
 * Returns 0 with the box's checksum in *hash, or -1 (e set). */
typedef int (*sink_fn)(void *ctx, int64_t box_elem, const void *data, size_t n, mt_err *e);

static int convert_box(streamer *st, const int64_t *row, int out_dtype, sink_fn sink, void *ctx,
                       uint64_t *hash, mt_err *e) {
  int g = (int)row[MT_IX_GROUP], ti = (int)row[MT_IX_TENSOR];
  int64_t R = row[MT_IX_COUNT0], C = row[MT_IX_COUNT1];
  int64_t per = (int64_t)st->elems / C; /* whole rows per piece */
  size_t es = mt_ckpt_dtype_size(out_dtype);
  XXH64_state_t hs;
  XXH64_reset(&hs, 0);
  for (int64_t r0 = 0; r0 < R; r0 += per > 0 ? per : 1) {
    int64_t nr = per > 0 ? (R - r0 < per ? R - r0 : per) : 1;
    int64_t step = per > 0 ? C : (int64_t)st->elems;
    for (int64_t c0 = 0; c0 < C; c0 += step) {
      int64_t nc = per > 0 ? C : (C - c0 < step ? C - c0 : step);
      if (read_region(st, g, ti, row[MT_IX_START0] + r0, nr, row[MT_IX_START1] + c0, nc, e) != 0)
        return -1;
      size_t n = (size_t)(nr * nc);
      const void *data = st->in;
      if (out_dtype == MT_CKPT_BF16) {
        uint16_t *h = st->out;
        for (size_t k = 0; k < n; k++) h[k] = mt_ckpt_to_bf16(st->in[k]);
        data = h;
      }
      XXH64_update(&hs, data, n * es);
      if (sink(ctx, r0 * C + c0, data, n, e) != 0) return -1;
      st->bytes_written += (double)(n * es);
    }
  }
  *hash = XXH64_digest(&hs);
  return 0;
}

/* ------------------------------------------------------------------ */
/* sinks                                                               */

/* shared: pwrite into ckpt.h5 at the dataset's offset */
typedef struct {
  int fd;
  int64_t base; /* the dataset's first byte */
  int64_t cols; /* the tensor's columns (canonical) */
  const int64_t *row;
  size_t es;
  int fd_err;
} shared_sink;

static int pwrite_all(int fd, const void *buf, size_t bytes, int64_t off) {
  const char *p = buf;
  while (bytes > 0) {
    int err = mt_ckpt_fault("write");
    if (err) {
      errno = err;
      return -1;
    }
    ssize_t k = pwrite(fd, p, bytes, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = EIO;
      return -1;
    }
#ifdef SYNC_FILE_RANGE_WRITE
    /* start writing it back now, so the final fsync has less to wait for */
    sync_file_range(fd, (off_t)off, (off_t)k, SYNC_FILE_RANGE_WRITE);
#endif
    p += k;
    off += k;
    bytes -= (size_t)k;
  }
  return 0;
}

static int shared_put(void *ctx, int64_t box_elem, const void *data, size_t n, mt_err *e) {
  shared_sink *s = ctx;
  (void)e;
  int64_t W = s->row[MT_IX_COUNT1];
  const char *p = data;
  /* the piece is whole rows of the box, or a part of one row */
  while (n > 0) {
    int64_t r = box_elem / W, c = box_elem % W;
    size_t run = (size_t)(W - c) < n ? (size_t)(W - c) : n;
    int64_t off = s->base + (int64_t)s->es * ((s->row[MT_IX_START0] + r) * s->cols +
                                              s->row[MT_IX_START1] + c);
    /* whole rows of the dataset lie end to end: one write */
    if (c == 0 && W == s->cols) run = n;
    if (pwrite_all(s->fd, p, run * s->es, off) != 0) {
      s->fd_err = errno;
      return -1;
    }
    p += run * s->es;
    box_elem += (int64_t)run;
    n -= run;
  }
  return 0;
}

/* per-writer: into the shard's 1-D dataset of this (group, tensor) */
typedef struct {
  hid_t dset, mtype;
  int64_t first; /* the box's first element in the dataset */
} shard_sink;

static int shard_put(void *ctx, int64_t box_elem, const void *data, size_t n, mt_err *e) {
  shard_sink *s = ctx;
  hid_t fs = H5Dget_space(s->dset);
  hsize_t start = (hsize_t)(s->first + box_elem), cnt = (hsize_t)n;
  hid_t ms = H5Screate_simple(1, &cnt, NULL);
  int ok = fs >= 0 && ms >= 0 &&
           H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &cnt, NULL) >= 0 &&
           H5Dwrite(s->dset, s->mtype, ms, fs, H5P_DEFAULT, data) >= 0;
  if (!ok) mt_ckpt_err_h5(e, "cannot write a shard");
  int err = ok ? mt_ckpt_fault("write") : 0;
  if (err) {
    mt_ckpt_err_sys(e, err, "cannot write a shard");
    ok = 0;
  }
  if (ms >= 0) H5Sclose(ms);
  if (fs >= 0) H5Sclose(fs);
  return ok ? 0 : -1;
}

/* ------------------------------------------------------------------ */
/* writers                                                             */

/* One shard file: writer w's boxes (rows [j0, j1) of the plan, consecutive),
 * each (group, tensor) a 1-D dataset of its boxes end to end. Fills in the
 * rows' checksums. */
static int write_shard(streamer *st, const char *tmpdir, out_plan *p, int64_t j0, int64_t j1,
                       const int *dtype, const char *crash, int rank, mt_err *e) {
  int64_t *rows = p->rows.rows;
  int w = (int)rows[j0 * MT_CKPT_INDEX_COLS + MT_IX_WRITER];
  char path[1100];
  snprintf(path, sizeof path, "%s/shard-%05d.h5", tmpdir, w);
  int err = mt_ckpt_fault("create");
  if (err) {
    mt_ckpt_err_sys(e, err, "convert: rank %d cannot write %s", rank, path);
    return -1;
  }
  hid_t fapl = mt_ckpt_fapl_serial();
  hid_t file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
  if (file < 0) mt_ckpt_err_h5(e, "convert: rank %d cannot write %s", rank, path);
  H5Pclose(fapl);
  if (file < 0) return -1;
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  int ok = 1;
  for (int64_t a = j0; a < j1 && ok;) {
    /* the run of rows of one (group, tensor) */
    int64_t b = a, vol = 0;
    const int64_t *ra = rows + a * MT_CKPT_INDEX_COLS;
    while (b < j1 && rows[b * MT_CKPT_INDEX_COLS + MT_IX_GROUP] == ra[MT_IX_GROUP] &&
           rows[b * MT_CKPT_INDEX_COLS + MT_IX_TENSOR] == ra[MT_IX_TENSOR]) {
      vol += rows[b * MT_CKPT_INDEX_COLS + MT_IX_COUNT0] * rows[b * MT_CKPT_INDEX_COLS + MT_IX_COUNT1];
      b++;
    }
    int g = (int)ra[MT_IX_GROUP];
    char dpath[256];
    mt_ckpt_dataset_path(dpath, sizeof dpath, g, st->src->tt.names[ra[MT_IX_TENSOR]]);
    hsize_t n1 = (hsize_t)vol;
    hid_t fs = H5Screate_simple(1, &n1, NULL), ft = mt_ckpt_h5_type(dtype[g]);
    hid_t d = fs >= 0 && ft >= 0 ? H5Dcreate2(file, dpath, ft, fs, lcpl, H5P_DEFAULT, H5P_DEFAULT) : -1;
    if (d < 0) {
      mt_ckpt_err_h5(e, "convert: rank %d cannot write %s", rank, path);
      ok = 0;
    }
    shard_sink sk = {d, dtype[g] == MT_CKPT_BF16 ? ft : H5T_NATIVE_FLOAT, 0};
    for (int64_t j = a; j < b && ok; j++) {
      int64_t *row = rows + j * MT_CKPT_INDEX_COLS;
      uint64_t h;
      if (convert_box(st, row, dtype[g], shard_put, &sk, &h, e) != 0) {
        ok = 0;
        break;
      }
      memcpy(&row[MT_IX_XXH64], &h, sizeof h);
      sk.first += row[MT_IX_COUNT0] * row[MT_IX_COUNT1];
      if (j == (j0 + j1) / 2) mt_ckpt_test_crash_point(crash, "write", rank);
    }
    if (d >= 0) H5Dclose(d);
    if (ft >= 0) H5Tclose(ft);
    if (fs >= 0) H5Sclose(fs);
    a = b;
  }
  H5Pclose(lcpl);
  if (H5Fclose(file) < 0 && ok) {
    mt_ckpt_err_h5(e, "convert: rank %d cannot write %s", rank, path);
    ok = 0;
  }
  if (ok && mt_ckpt_fsync_path(path) != 0) {
    mt_ckpt_err_sys(e, errno, "convert: rank %d cannot write %s", rank, path);
    ok = 0;
  }
  return ok ? 0 : -1;
}

/* rank 0: the index of the shared file, now with every checksum */
static int rewrite_index(const char *path, const int64_t *rows, int64_t n, mt_err *e) {
  hid_t fapl = mt_ckpt_fapl_serial();
  hid_t f = H5Fopen(path, H5F_ACC_RDWR, fapl);
  H5Pclose(fapl);
  hid_t d = f >= 0 ? H5Dopen2(f, "index", H5P_DEFAULT) : -1;
  int ok = d >= 0 && (n == 0 || H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0);
  if (!ok) mt_ckpt_err_h5(e, "convert: rank 0 cannot write the index of %s", path);
  if (d >= 0) H5Dclose(d);
  if (f >= 0 && H5Fclose(f) < 0 && ok) {
    mt_ckpt_err_h5(e, "convert: rank 0 cannot write the index of %s", path);
    ok = 0;
  }
  if (ok && mt_ckpt_fsync_path(path) != 0) {
    mt_ckpt_err_sys(e, errno, "convert: rank 0 cannot write %s", path);
    ok = 0;
  }
  return ok ? 0 : -1;
}

/* rank 0 reads the source's configuration text and layout table; every rank
 * gets them */
static void source_extras(const mt_ckpt_source *s, char **config, int64_t **layout, int *world,
                          float **moe_bias, int64_t *moe_rows) {
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int64_t sizes[2] = {0, 0};
  *config = NULL;
  *layout = NULL;
  *moe_bias = NULL;
  *moe_rows = 0;
  if (rank == 0) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", s->dir, s->per_writer ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
    hid_t fapl = mt_ckpt_fapl_serial();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    hid_t d = f >= 0 ? H5Dopen2(f, "config", H5P_DEFAULT) : -1;
    hid_t t = d >= 0 ? H5Dget_type(d) : -1;
    size_t n = t >= 0 && H5Tget_class(t) == H5T_STRING && H5Tis_variable_str(t) == 0 ? H5Tget_size(t) : 0;
    if (n > 0 && (int64_t)n <= s->man.total_bytes) { /* bounded before allocating */
      *config = mt_calloc(n + 1, 1);
      if (H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, *config) < 0) (*config)[0] = '\0';
      sizes[0] = (int64_t)n + 1;
    }
    if (t >= 0) H5Tclose(t);
    if (d >= 0) H5Dclose(d);
    d = f >= 0 ? H5Dopen2(f, "layout", H5P_DEFAULT) : -1;
    hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t dims[2] = {0, 0};
    if (sp >= 0 && H5Sget_simple_extent_ndims(sp) == 2 && H5Sget_simple_extent_dims(sp, dims, NULL) == 2 &&
        dims[1] == 5 && (int64_t)dims[0] * 40 <= s->man.total_bytes && dims[0] < (1u << 30)) {
      *layout = mt_calloc((size_t)dims[0] * 5 + 1, sizeof(int64_t));
      if (H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, *layout) >= 0) sizes[1] = (int64_t)dims[0];
    }
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    /* the MoE routing bias goes along as it is (rank 0 writes the main
     * file): it belongs to the model's blocks, not to a layout */
    mt_err ignore = {0};
    int64_t bias_E = 0;
    if (f >= 0 && mt_ckpt_read_moe_bias(f, moe_bias, moe_rows, &bias_E, "convert", &ignore) > 0 &&
        bias_E != s->meta.moe_experts) {
      free(*moe_bias);
      *moe_bias = NULL;
      *moe_rows = 0;
    }
    if (f >= 0) H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
  }
  MPI_Bcast(sizes, 2, MPI_INT64_T, 0, MPI_COMM_WORLD);
  if (rank != 0) {
    *config = sizes[0] ? mt_calloc((size_t)sizes[0], 1) : NULL;
    *layout = mt_calloc((size_t)sizes[1] * 5 + 1, sizeof(int64_t));
  }
  if (sizes[0]) MPI_Bcast(*config, (int)sizes[0], MPI_CHAR, 0, MPI_COMM_WORLD);
  if (!*layout) *layout = mt_calloc(1, sizeof(int64_t));
  if (sizes[1]) MPI_Bcast(*layout, (int)(sizes[1] * 5), MPI_INT64_T, 0, MPI_COMM_WORLD);
  *world = (int)sizes[1];
}

static double peak_rss_bytes(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss * 1024.0; /* Linux: KiB */
}

int mt_ckpt_convert(const char *src_dir, const char *dst_root, const mt_ckpt_convert_opts *o,
                    mt_ckpt_convert_stats *stats, mt_err *e) {
  double t0 = mt_now();
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  mt_ckpt_writer_wait();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  mt_err local = {0};
  mt_ckpt_fault_init(rank, -1, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  mt_ckpt_source src;
  if (mt_ckpt_source_open(src_dir, &src, NULL, NULL, &local) != 0) {
    *e = local;
    return -1;
  }
  if (src.problems)
    mt_err_set(&local, "%s: %ld problem(s) in its index (meshckpt verify names them)", src_dir,
               src.problems);
  /* what the output holds */
  int groups = o->params_only ? 1 : src.tt.groups;
  int dtype[MT_CKPT_NGROUPS];
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    int want = g == 0 ? o->param_dtype : o->optim_dtype;
    dtype[g] = want >= 0 ? want : g < src.tt.groups ? src.tt.dtype[(size_t)g * (size_t)src.tt.n] : MT_CKPT_F32;
  }
  if (o->target_tp > 0 && (o->target_pp < 1 || !o->targets))
    mt_err_set(&local, "convert: a target layout needs tp, pp and their registries");
  mt_registry reg;
  memset(&reg, 0, sizeof reg);
  if (!local.failed) source_registry(&src, &reg, &local);
  char *config = NULL;
  int64_t *src_layout = NULL;
  int src_world = 0;
  float *moe_bias = NULL;
  int64_t moe_bias_rows = 0;
  source_extras(&src, &config, &src_layout, &src_world, &moe_bias, &moe_bias_rows);
  mt_ckpt_meta dst_meta = src.meta; /* what the main file says: the source's, and its bias */
  dst_meta.moe_bias = moe_bias;
  dst_meta.moe_bias_rows = moe_bias_rows;
  out_plan plan;
  memset(&plan, 0, sizeof plan);
  if (!local.failed) {
    if (o->target_tp > 0) plan_target(&src, o, groups, &plan, &local);
    else if (plan_as_source(&src, groups, src_layout, src_world, &plan) != 0)
      mt_err_set(&local, "out of memory planning the conversion");
  }
  mt_ckpt_reader rd;
  memset(&rd, 0, sizeof rd);
  int have_reader = 0;
  if (!mt_err_agree(&local, MPI_COMM_WORLD)) have_reader = mt_ckpt_reader_open(&rd, &src, &local) == 0;
  mt_mesh mesh;
  memset(&mesh, 0, sizeof mesh);
  mesh.world_rank = rank;
  mesh.world_size = size;
  char tmpdir[1024] = "";
  mt_ckpt_save_opts sopts = {o->mode, 0, o->test_crash ? o->test_crash : "none", config};
  int begun = 0;
  if (!mt_err_agree(&local, MPI_COMM_WORLD))
    begun = mt_ckpt_save_begin(dst_root, &src.meta, &reg, &mesh, &sopts, tmpdir, sizeof tmpdir,
                               &local) == 0;
  /* the memory bound: the float buffer and the output buffer, a tenth of
   * the budget each for bf16 staging in the reader */
  streamer st = {&rd, &src, NULL, NULL, 0, 0, 0};
  size_t budget = o->buffer_bytes > (1u << 20) ? o->buffer_bytes : (1u << 20);
  st.elems = budget / 10; /* 4 (float) + 4 (output) + 2 (reader staging) bytes per element */
  int per_writer = strcmp(o->mode, "per-writer") == 0;
  int64_t n_rows = plan.rows.n, *rows = plan.rows.rows;
  if (begun) {
    st.in = mt_malloc(st.elems * sizeof(float));
    st.out = mt_malloc(st.elems * sizeof(float));
    if (per_writer) {
      /* whole shards to ranks, largest first onto the least loaded rank */
      int W = plan.world;
      double *bytes = mt_calloc((size_t)W + 1, sizeof(double)), *load = mt_calloc((size_t)size, sizeof(double));
      int64_t *j0 = mt_calloc((size_t)W + 1, sizeof(int64_t)), *j1 = mt_calloc((size_t)W + 1, sizeof(int64_t));
      int *owner = mt_calloc((size_t)W + 1, sizeof(int)), *byb = mt_calloc((size_t)W + 1, sizeof(int));
      for (int w = 0; w < W; w++) j0[w] = -1;
      for (int64_t j = 0; j < n_rows; j++) {
        const int64_t *r = rows + j * MT_CKPT_INDEX_COLS;
        int w = (int)r[MT_IX_WRITER];
        if (j0[w] < 0) j0[w] = j;
        j1[w] = j + 1;
        bytes[w] += (double)(r[MT_IX_COUNT0] * r[MT_IX_COUNT1]);
      }
      for (int w = 0; w < W; w++) byb[w] = w;
      for (int a = 1; a < W; a++) /* by bytes, largest first (insertion sort: W is small) */
        for (int b = a; b > 0 && bytes[byb[b]] > bytes[byb[b - 1]]; b--) {
          int t = byb[b];
          byb[b] = byb[b - 1];
          byb[b - 1] = t;
        }
      for (int k = 0; k < W; k++) {
        int best = 0;
        for (int q = 1; q < size; q++)
          if (load[q] < load[best]) best = q;
        owner[byb[k]] = best;
        load[best] += bytes[byb[k]];
      }
      for (int w = 0; w < W && !local.failed; w++)
        if (owner[w] == rank && j0[w] >= 0)
          write_shard(&st, tmpdir, &plan, j0[w], j1[w], dtype, sopts.test_crash, rank, &local);
      free(bytes);
      free(load);
      free(j0);
      free(j1);
      free(owner);
      free(byb);
    } else {
      /* rank 0 lays out ckpt.h5 (every dataset contiguous, space reserved) */
      char path[1100];
      snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_SHARED_FILE);
      size_t n_off = (size_t)MT_CKPT_NGROUPS * (size_t)reg.n;
      int64_t *offsets = mt_calloc(n_off + 1, sizeof(int64_t));
      int *order = NULL;
      mt_ckpt_file_opts fo = {groups, {dtype[0], dtype[1], dtype[2]}, NULL};
      if (o->target_pp > 1) {
        /* a stage's datasets together, stage by stage: each stage reads one extent */
        order = mt_calloc((size_t)(groups * reg.n) + 1, sizeof(int));
        int k = 0;
        const int per_stage = mt_ckpt_target_stage_ranks(o->target_tp, o->target_ep, o->target_etp);
        for (int stage = 0; stage < o->target_pp; stage++)
          for (int g = 0; g < groups; g++)
            for (int i = 0; i < reg.n; i++) {
              int ti = mt_registry_find(&o->targets[stage * per_stage], reg.t[i].name);
              int ps = ti >= 0 ? o->targets[stage * per_stage].t[ti].pp_stage : 0;
              if ((ps < 0 ? 0 : ps) == stage) order[k++] = g * reg.n + i;
            }
        fo.order = k == groups * reg.n ? order : NULL;
      }
      if (rank == 0 &&
          mt_ckpt_write_main_file(path, &dst_meta, &reg, rows, n_rows, plan.layout, plan.world,
                                  config, offsets, &fo, &local) == 0) {
        int fd = open(path, O_WRONLY);
        if (fd < 0 || mt_ckpt_reserve(fd, mt_ckpt_file_size(path), 0) != 0)
          mt_ckpt_err_sys(&local, errno, "convert: rank 0 cannot reserve the space of %s", path);
        if (fd >= 0) close(fd);
      }
      free(order);
      if (!mt_err_agree(&local, MPI_COMM_WORLD)) {
        MPI_Bcast(offsets, (int)n_off, MPI_INT64_T, 0, MPI_COMM_WORLD);
        /* this rank's slice of the boxes, by bytes */
        double total = 0, acc = 0;
        for (int64_t j = 0; j < n_rows; j++)
          total += (double)(rows[j * MT_CKPT_INDEX_COLS + MT_IX_COUNT0] * rows[j * MT_CKPT_INDEX_COLS + MT_IX_COUNT1]);
        int err = mt_ckpt_fault("create"), fd = -1;
        if (!err && (fd = open(path, O_WRONLY)) < 0) err = errno;
        int64_t done = 0, mine = 0;
        for (int64_t j = 0; j < n_rows; j++) {
          int64_t *row = rows + j * MT_CKPT_INDEX_COLS;
          double v = (double)(row[MT_IX_COUNT0] * row[MT_IX_COUNT1]);
          int who = total > 0 ? (int)((acc + v / 2) / total * size) : 0;
          acc += v;
          if ((who >= size ? size - 1 : who) != rank) {
            memset(&row[MT_IX_XXH64], 0, sizeof(int64_t)); /* summed over the ranks below */
            continue;
          }
          mine++;
          if (err || local.failed) continue;
          int g = (int)row[MT_IX_GROUP];
          shared_sink sk = {fd, offsets[(size_t)g * (size_t)reg.n + (size_t)row[MT_IX_TENSOR]],
                            src.tt.ext[(size_t)row[MT_IX_TENSOR]][1], row,
                            mt_ckpt_dtype_size(dtype[g]), 0};
          uint64_t h;
          if (convert_box(&st, row, dtype[g], shared_put, &sk, &h, &local) != 0) {
            if (sk.fd_err) err = sk.fd_err;
            continue;
          }
          memcpy(&row[MT_IX_XXH64], &h, sizeof h);
          if (++done == mine / 2 + 1) mt_ckpt_test_crash_point(sopts.test_crash, "write", rank);
        }
        if (!err && fd >= 0 && !local.failed && (err = mt_ckpt_fault("sync")) == 0 && fsync(fd) != 0)
          err = errno;
        if (fd >= 0 && close(fd) != 0 && !err) err = errno;
        if (err)
          mt_ckpt_err_sys(&local, err, "convert: rank %d cannot write %s", rank, path);
        /* every box's checksum from the rank that wrote it (the others hold 0) */
        int64_t *hashes = mt_calloc((size_t)n_rows + 1, sizeof(int64_t));
        for (int64_t j = 0; j < n_rows; j++) hashes[j] = rows[j * MT_CKPT_INDEX_COLS + MT_IX_XXH64];
        for (int64_t a = 0; a < n_rows; a += 1 << 26) {
          int n = n_rows - a > (1 << 26) ? 1 << 26 : (int)(n_rows - a);
          MPI_Allreduce(MPI_IN_PLACE, hashes + a, n, MPI_INT64_T, MPI_BXOR, MPI_COMM_WORLD);
        }
        for (int64_t j = 0; j < n_rows; j++) rows[j * MT_CKPT_INDEX_COLS + MT_IX_XXH64] = hashes[j];
        free(hashes);
        if (!mt_err_agree(&local, MPI_COMM_WORLD) && rank == 0)
          rewrite_index(path, rows, n_rows, &local);
      }
      free(offsets);
    }
  }
  if (begun && per_writer) {
    /* every writer's checksums to rank 0, which writes the index file */
    int64_t *hashes = mt_calloc((size_t)n_rows + 1, sizeof(int64_t));
    for (int64_t j = 0; j < n_rows; j++) hashes[j] = rows[j * MT_CKPT_INDEX_COLS + MT_IX_XXH64];
    for (int64_t a = 0; a < n_rows; a += 1 << 26) {
      int n = n_rows - a > (1 << 26) ? 1 << 26 : (int)(n_rows - a);
      MPI_Allreduce(MPI_IN_PLACE, hashes + a, n, MPI_INT64_T, MPI_BXOR, MPI_COMM_WORLD);
    }
    for (int64_t j = 0; j < n_rows; j++) rows[j * MT_CKPT_INDEX_COLS + MT_IX_XXH64] = hashes[j];
    free(hashes);
    if (!mt_err_agree(&local, MPI_COMM_WORLD) && rank == 0) {
      char path[1100];
      snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_INDEX_FILE);
      mt_ckpt_file_opts fo = {groups, {dtype[0], dtype[1], dtype[2]}, NULL};
      if (mt_ckpt_write_main_file(path, &dst_meta, &reg, rows, n_rows, plan.layout, plan.world,
                                  config, NULL, &fo, &local) == 0 &&
          mt_ckpt_fsync_path(path) != 0)
        mt_ckpt_err_sys(&local, errno, "convert: rank 0 cannot write %s", path);
    }
  }
  double bytes[2] = {st.bytes_read, st.bytes_written};
  MPI_Allreduce(MPI_IN_PLACE, bytes, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  int rc = 0;
  if (begun) {
    if (mt_err_agree(&local, MPI_COMM_WORLD)) {
      mt_ckpt_save_abandon(tmpdir, &mesh);
      rc = -1;
    } else {
      rc = mt_ckpt_save_end(dst_root, tmpdir, src.meta.step, o->mode, sopts.test_crash, 0, &mesh,
                            &local);
    }
  } else {
    rc = -1;
  }
  if (rc != 0) *e = local;
  if (stats) {
    memset(stats, 0, sizeof *stats);
    stats->step = src.meta.step;
    stats->bytes_read = bytes[0];
    stats->bytes_written = bytes[1];
    stats->seconds = mt_now() - t0;
    stats->boxes = n_rows;
    stats->groups = groups;
    stats->param_dtype = dtype[0];
    stats->optim_dtype = dtype[1];
    double rss = peak_rss_bytes();
    MPI_Allreduce(&rss, &stats->peak_rss_max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    stats->buffer_bytes = (double)budget;
  }
  free(st.in);
  free(st.out);
  if (have_reader) mt_ckpt_reader_close(&rd);
  free(plan.rows.rows);
  free(plan.layout);
  free(config);
  free(moe_bias);
  free(src_layout);
  if (reg.t) mt_registry_free(&reg);
  mt_ckpt_source_close(&src);
  return rc;
}
