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

#include "ckpt/core/ckpt_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

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
    mt_placement p = a->tp_sharded && !a->expert ? mt_sharded(a->tp_dim, a->fused_blocks)
                                                 : mt_replicated();
    int idx = mt_registry_add(reg, s->tt.names[i], nd, shape, padded, p, a->weight_decay);
    mt_tensor *t = &reg->t[idx];
    snprintf(t->tied_to, sizeof t->tied_to, "%s", a->tied_to);
    /* the labels, unless the ones of the shape (the writer derives those) */
    if (strcmp(a->axes, "out,in") && strcmp(a->axes, "channel") && strncmp(a->axes, "expert,", 7))
      mt_registry_set_axes(reg, idx, a->axes);
    /* a unit each: experts and dense tensors may alternate, and a conversion
     * reduces no gradients over units */
    t->layer = i;
    if (a->expert) { /* its splits on the folded mesh, kept in the output */
      t->group = MT_GROUP_EDP;
      if (a->ep_dim >= 0) t->ep = mt_sharded(a->ep_dim, 1);
      if (a->etp_dim >= 0) t->etp = mt_sharded(a->etp_dim, a->fused_blocks);
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
    mt_ckpt_box b = {.start = {r[MT_IX_START0], r[MT_IX_START1]},
                     .count = {r[MT_IX_COUNT0], r[MT_IX_COUNT1]}};
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
static int plan_target(const mt_ckpt_source *s, const mt_registry *src_reg,
                       const mt_ckpt_convert_opts *o, int groups, out_plan *p, mt_err *e) {
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
        /* an expert tensor replicated inside an expert (the down
         * projection's bias) or over ep: written by etp (ep) rank 0 only */
        int etp_split = t->etp.kind == MT_PLACE_SHARDED && etp > 1;
        int ep_split = t->ep.kind == MT_PLACE_SHARDED && ep > 1;
        int writes = t->group == MT_GROUP_EDP
                         ? edp_rank == 0 && (etp_split || etp_rank == 0) && (ep_split || ep_rank == 0)
                         : dp_rank == 0 && (sharded || tp_rank == 0);
        if (owner != stage || !writes) continue;
        int ti = mt_registry_find(src_reg, t->name); /* the same tensor ids as the source's */
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
  size_t nonfinite;    /* values written that are NaN or Inf */
} streamer;

/* Where a converted piece goes: the file, and where the box's element 0 and
 * its rows lie there. Shared output: the box's rows are rows of the
 * canonical dataset (cols apart); per-writer: the box end to end. */
typedef struct {
  int fd;
  int64_t base;  /* the dataset's first byte */
  int64_t first; /* per-writer: the box's first element in the shard dataset */
  int64_t cols;  /* shared: the tensor's columns (canonical); 0: per-writer */
  const int64_t *row;
  size_t es;
  int err; /* errno of a failed write */
} sink;

/* bytes at off of the sink's file, their write-back started at once so that
 * dirty pages do not pile up over a large conversion */
static int put_bytes(sink *s, const char *p, size_t bytes, int64_t off) {
  if (mt_ckpt_pwrite_full(s->fd, p, bytes, off, "write") != 0) {
    s->err = errno;
    return -1;
  }
#ifdef SYNC_FILE_RANGE_WRITE
  sync_file_range(s->fd, (off_t)off, (off_t)bytes, SYNC_FILE_RANGE_WRITE);
#endif
  return 0;
}

static int put(sink *s, int64_t box_elem, const void *data, size_t n) {
  const char *p = data;
  if (s->cols == 0) /* per-writer: consecutive */
    return put_bytes(s, p, n * s->es, s->base + (int64_t)s->es * (s->first + box_elem));
  int64_t W = s->row[MT_IX_COUNT1];
  /* the piece is whole rows of the box, or a part of one row */
  while (n > 0) {
    int64_t r = box_elem / W, c = box_elem % W;
    size_t run = (size_t)(W - c) < n ? (size_t)(W - c) : n;
    int64_t off = s->base + (int64_t)s->es * ((s->row[MT_IX_START0] + r) * s->cols +
                                              s->row[MT_IX_START1] + c);
    /* whole rows of the dataset lie end to end: one write */
    if (c == 0 && W == s->cols) run = n;
    if (put_bytes(s, p, run * s->es, off) != 0) return -1;
    p += run * s->es;
    box_elem += (int64_t)run;
    n -= run;
  }
  return 0;
}

/* The output box of row `row`: converted piece by piece (row blocks of
 * whole rows, or pieces of one row when a row is wider than the buffer),
 * each piece hashed, its values checked to be finite, then written.
 * Returns 0 with the box's checksum in *hash, or -1 (e set, or sk->err). */
static int convert_box(streamer *st, const int64_t *row, int out_dtype, sink *sk, uint64_t *hash,
                       mt_err *e) {
  int g = (int)row[MT_IX_GROUP], ti = (int)row[MT_IX_TENSOR];
  int64_t R = row[MT_IX_COUNT0], C = row[MT_IX_COUNT1];
  int64_t per = (int64_t)st->elems / C; /* whole rows per piece */
  size_t es = mt_dtype_bytes(out_dtype);
  XXH64_state_t hs;
  XXH64_reset(&hs, 0);
  for (int64_t r0 = 0; r0 < R; r0 += per > 0 ? per : 1) {
    int64_t nr = per > 0 ? (R - r0 < per ? R - r0 : per) : 1;
    int64_t step = per > 0 ? C : (int64_t)st->elems;
    for (int64_t c0 = 0; c0 < C; c0 += step) {
      int64_t nc = per > 0 ? C : (C - c0 < step ? C - c0 : step);
      MT_TRY(e, mt_ckpt_read_region(st->rd, g, ti, row[MT_IX_START0] + r0, nr,
                                    row[MT_IX_START1] + c0, nc, st->in, &st->bytes_read, e));
      size_t n = (size_t)(nr * nc);
      const void *data = st->in;
      st->nonfinite += mt_ckpt_count_nonfinite(st->in, n);
      if (out_dtype == MT_DT_BF16) {
        uint16_t *h = st->out;
        for (size_t k = 0; k < n; k++) h[k] = mt_bf16_from_f32(st->in[k]);
        data = h;
      }
      XXH64_update(&hs, data, n * es);
      if (put(sk, r0 * C + c0, data, n) != 0) return -1;
      st->bytes_written += (double)(n * es);
    }
  }
  *hash = XXH64_digest(&hs);
  return 0;
}

/* ------------------------------------------------------------------ */
/* writers                                                             */

/* One shard file: writer w's boxes (rows [j0, j1) of the plan, consecutive),
 * each (group, tensor) a 1-D dataset of its boxes end to end, laid out by
 * HDF5 and filled with pwrite (h5file.c), then opened again to check it.
 * Fills in the rows' checksums. */
static int write_shard(streamer *st, const char *tmpdir, out_plan *p, int64_t j0, int64_t j1,
                       const int *dtype, mt_ckpt_crash crash, int rank, mt_err *e) {
  int64_t *rows = p->rows.rows;
  int w = (int)rows[j0 * MT_CKPT_INDEX_COLS + MT_IX_WRITER];
  char path[1100], where[1300];
  snprintf(path, sizeof path, "%s/shard-%05d.h5", tmpdir, w);
  snprintf(where, sizeof where, "convert: rank %d cannot write %s", rank, path);
  /* its datasets: one per run of rows of one (group, tensor) */
  int n_sets = 0;
  char (*paths)[256] = mt_calloc((size_t)(j1 - j0) + 1, sizeof *paths);
  int64_t *vol = mt_calloc((size_t)(j1 - j0) + 1, sizeof *vol);
  int64_t *first_row = mt_calloc((size_t)(j1 - j0) + 1, sizeof *first_row);
  int64_t *off = mt_calloc((size_t)(j1 - j0) + 1, sizeof *off);
  int *dt = mt_calloc((size_t)(j1 - j0) + 1, sizeof *dt);
  long long data = 0;
  for (int64_t a = j0; a < j1;) {
    const int64_t *ra = rows + a * MT_CKPT_INDEX_COLS;
    int64_t b = a;
    while (b < j1 && rows[b * MT_CKPT_INDEX_COLS + MT_IX_GROUP] == ra[MT_IX_GROUP] &&
           rows[b * MT_CKPT_INDEX_COLS + MT_IX_TENSOR] == ra[MT_IX_TENSOR]) {
      vol[n_sets] += rows[b * MT_CKPT_INDEX_COLS + MT_IX_COUNT0] *
                     rows[b * MT_CKPT_INDEX_COLS + MT_IX_COUNT1];
      b++;
    }
    int g = (int)ra[MT_IX_GROUP];
    mt_ckpt_dataset_path(paths[n_sets], sizeof paths[n_sets], g,
                         st->src->tt.names[ra[MT_IX_TENSOR]]);
    dt[n_sets] = dtype[g];
    first_row[n_sets] = a;
    data += vol[n_sets] * (long long)mt_dtype_bytes(dtype[g]);
    n_sets++;
    a = b;
  }
  long long metadata = mt_ckpt_metadata_bytes(n_sets, 0, 0);
  mt_ckpt_h5out o;
  hid_t fapl = mt_ckpt_fapl_serial();
  int rc = mt_ckpt_h5out_create(&o, path, data + metadata, metadata, fapl, 0, where, e);
  H5Pclose(fapl);
  if (rc == 0) {
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (lcpl < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0) mt_ckpt_err_h5(e, "%s", where);
    for (int k = 0; k < n_sets && !e->failed; k++) {
      hid_t ft = mt_ckpt_h5_type(dt[k]);
      hid_t d = ft >= 0 ? mt_ckpt_h5out_dataset(&o, o.file, paths[k], ft, 1, &vol[k], lcpl,
                                                &off[k], where, e)
                        : -1;
      if (ft < 0) mt_ckpt_err_h5(e, "%s", where);
      if (d >= 0 && H5Dclose(d) < 0) mt_ckpt_err_h5(e, "%s", where);
      if (ft >= 0) H5Tclose(ft);
    }
    if (lcpl >= 0) H5Pclose(lcpl);
    if (mt_ckpt_h5out_close(&o, where, e) == 0) {
      for (int k = 0; k < n_sets && !e->failed; k++) {
        int64_t end = k + 1 < n_sets ? first_row[k + 1] : j1;
        sink sk = {.fd = o.fd, .base = off[k], .es = mt_dtype_bytes(dt[k])};
        for (int64_t j = first_row[k]; j < end && !e->failed; j++) {
          int64_t *row = rows + j * MT_CKPT_INDEX_COLS;
          uint64_t h;
          sk.row = row;
          if (convert_box(st, row, dt[k], &sk, &h, e) != 0) {
            if (sk.err) mt_ckpt_err_sys(e, sk.err, "%s", where);
            break;
          }
          memcpy(&row[MT_IX_XXH64], &h, sizeof h);
          sk.first += row[MT_IX_COUNT0] * row[MT_IX_COUNT1];
          if (j == (j0 + j1) / 2) mt_ckpt_test_crash_point(crash, MT_CKPT_CRASH_WRITE, rank);
        }
      }
    }
    mt_ckpt_h5out_finish(&o, 1, where, e);
    if (!e->failed) mt_ckpt_check_shard(path, n_sets, paths, vol, dt, where, e);
  }
  free(paths);
  free(vol);
  free(first_row);
  free(off);
  free(dt);
  return e->failed ? -1 : 0;
}

/* rank 0 reads the source's configuration text and layout table; every rank
 * gets them */
static int source_extras(const mt_ckpt_source *s, char **config, int64_t **layout, int *world,
                         float **moe_bias, int64_t *moe_rows, mt_err *e) {
  int64_t sizes[2] = {0, 0};
  *config = NULL;
  *layout = NULL;
  *moe_bias = NULL;
  *moe_rows = 0;
  if (mt_ckpt_rank() == 0) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", s->dir, s->per_writer ? MT_CKPT_INDEX_FILE : MT_CKPT_SHARED_FILE);
    hid_t fapl = mt_ckpt_fapl_serial();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    *config = f >= 0 ? mt_ckpt_read_config_text(f, s->man.total_bytes) : NULL;
    if (*config) sizes[0] = (int64_t)strlen(*config) + 1;
    hid_t d = f >= 0 ? H5Dopen2(f, "layout", H5P_DEFAULT) : -1;
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
  MT_TRY(e, mt_ckpt_bcast(sizes, sizeof sizes, e));
  if (mt_ckpt_rank() != 0) {
    *config = sizes[0] ? mt_calloc((size_t)sizes[0], 1) : NULL;
    *layout = mt_calloc((size_t)sizes[1] * 5 + 1, sizeof(int64_t));
  }
  if (!*layout) *layout = mt_calloc(1, sizeof(int64_t));
  *world = (int)sizes[1];
  if (sizes[0]) MT_TRY(e, mt_ckpt_bcast(*config, sizes[0], e));
  if (sizes[1]) MT_TRY(e, mt_ckpt_bcast(*layout, sizes[1] * 5 * (int64_t)sizeof(int64_t), e));
  return 0;
}

static double peak_rss_bytes(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss * 1024.0; /* Linux: KiB */
}

/* Every box's checksum from the rank that wrote it (the others hold 0). */
static int share_hashes(int64_t *rows, int64_t n_rows, mt_err *e) {
  int64_t *hashes = mt_calloc((size_t)n_rows + 1, sizeof(int64_t));
  for (int64_t j = 0; j < n_rows; j++) hashes[j] = rows[j * MT_CKPT_INDEX_COLS + MT_IX_XXH64];
  int rc = mt_ckpt_allreduce_i64(hashes, n_rows, MPI_BXOR, e);
  for (int64_t j = 0; j < n_rows; j++) rows[j * MT_CKPT_INDEX_COLS + MT_IX_XXH64] = hashes[j];
  free(hashes);
  return rc == 0 ? 0 : mt_err_pass(e);
}

/* per-writer output: whole shard files to ranks, largest first onto the
 * least loaded rank, so each file has one writer */
static void convert_per_writer(streamer *st, const char *tmpdir, out_plan *plan, const int *dtype,
                               mt_ckpt_crash crash, mt_err *e) {
  int rank = mt_ckpt_rank(), size = mt_ckpt_size();
  int64_t n_rows = plan->rows.n, *rows = plan->rows.rows;
  int W = plan->world;
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
  for (int w = 0; w < W && !e->failed; w++)
    if (owner[w] == rank && j0[w] >= 0)
      write_shard(st, tmpdir, plan, j0[w], j1[w], dtype, crash, rank, e);
  free(bytes);
  free(load);
  free(j0);
  free(j1);
  free(owner);
  free(byb);
}

/* a MoE output's folded mesh beside target_tp, target_pp: the one --target
 * gave, or the source's when it had one and --target is not given */
static void target_mesh(const mt_ckpt_convert_opts *o, const mt_ckpt_meta *meta,
                        mt_ckpt_file_opts *fo) {
  if (meta->moe_experts <= 0) return;
  fo->target_ep = o->target_tp > 0 ? (o->target_ep > 0 ? o->target_ep : 1) : (int)meta->target_ep;
  fo->target_etp = o->target_tp > 0 ? (o->target_etp > 0 ? o->target_etp : 1)
                                    : (int)meta->target_etp;
}

/* shared output: rank 0 lays out ckpt.h5; each rank writes a byte-balanced
 * slice of the boxes; rank 0 writes the index last */
static void convert_shared(streamer *st, const char *tmpdir, out_plan *plan, const int *dtype,
                           int groups, const mt_ckpt_convert_opts *o, const mt_registry *reg,
                           const mt_ckpt_meta *meta, const char *config, mt_ckpt_crash crash,
                           mt_err *e) {
  int rank = mt_ckpt_rank(), size = mt_ckpt_size();
  int64_t n_rows = plan->rows.n, *rows = plan->rows.rows;
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_SHARED_FILE);
  size_t n_off = (size_t)MT_CKPT_NGROUPS * (size_t)reg->n;
  int64_t *offsets = mt_calloc(n_off + 1, sizeof(int64_t));
  int *order = NULL;
  mt_ckpt_file_opts fo = {.groups = groups, .dtype = {dtype[0], dtype[1], dtype[2]},
                          .order = NULL,
                          .target_tp = o->target_tp > 0 ? o->target_tp : (int)meta->target_tp,
                          .target_pp = o->target_tp > 0 ? o->target_pp : (int)meta->target_pp};
  target_mesh(o, meta, &fo);
  if (o->target_pp > 1) {
    /* a stage's datasets together, stage by stage: each stage reads one extent */
    order = mt_calloc((size_t)(groups * reg->n) + 1, sizeof(int));
    int k = 0;
    const int per_stage = mt_ckpt_target_stage_ranks(o->target_tp, o->target_ep, o->target_etp);
    for (int stage = 0; stage < o->target_pp; stage++)
      for (int g = 0; g < groups; g++)
        for (int i = 0; i < reg->n; i++) {
          const mt_registry *tr = &o->targets[stage * per_stage];
          int ti = mt_registry_find(tr, reg->t[i].name);
          int ps = ti >= 0 ? tr->t[ti].pp_stage : 0;
          if ((ps < 0 ? 0 : ps) == stage) order[k++] = g * reg->n + i;
        }
    fo.order = k == groups * reg->n ? order : NULL;
  }
  mt_ckpt_main m;
  int have_main = 0;
  if (rank == 0 && mt_ckpt_main_create(&m, path, meta, reg, rows, n_rows, plan->world, config, 1,
                                       &fo, e) == 0) {
    have_main = 1;
    memcpy(offsets, m.offsets, n_off * sizeof(int64_t));
    mt_ckpt_main_put_tables(&m, plan->layout, reg, config, e);
  }
  free(order);
  if (!mt_ckpt_agree(e) && mt_ckpt_bcast(offsets, (int64_t)(n_off * sizeof(int64_t)), e) == 0) {
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
      if (err || e->failed) continue;
      int g = (int)row[MT_IX_GROUP];
      sink sk = {.fd = fd, .base = offsets[(size_t)g * (size_t)reg->n + (size_t)row[MT_IX_TENSOR]],
                 .cols = st->src->tt.ext[(size_t)row[MT_IX_TENSOR]][1], .row = row,
                 .es = mt_dtype_bytes(dtype[g])};
      uint64_t h;
      if (convert_box(st, row, dtype[g], &sk, &h, e) != 0) {
        if (sk.err) err = sk.err;
        continue;
      }
      memcpy(&row[MT_IX_XXH64], &h, sizeof h);
      if (++done == mine / 2 + 1) mt_ckpt_test_crash_point(crash, MT_CKPT_CRASH_WRITE, rank);
    }
    if (!err && fd >= 0 && !e->failed && (err = mt_ckpt_fault("sync")) == 0 && fsync(fd) != 0)
      err = errno;
    if (fd >= 0 && mt_ckpt_close_fd(fd) != 0 && !err) err = errno;
    if (err) mt_ckpt_err_sys(e, err, "convert: rank %d cannot write %s", rank, path);
    share_hashes(rows, n_rows, e);
    if (!mt_ckpt_agree(e) && have_main) mt_ckpt_main_put_index(&m, rows, e);
  }
  if (have_main) mt_ckpt_main_finish(&m, !e->failed, e);
  free(offsets);
}

static int convert_scoped(const char *src_dir, const char *dst_root,
                          const mt_ckpt_convert_opts *o, mt_ckpt_convert_stats *stats,
                          mt_err *e) {
  double t0 = mt_now();
  int rank = mt_ckpt_rank(), size = mt_ckpt_size();
  mt_err local = {0};
  mt_ckpt_fault_init(rank, -1, &local);
  if (mt_ckpt_agree(&local)) {
    *e = local;
    return mt_err_pass(e);
  }
  mt_ckpt_source src;
  if (mt_ckpt_source_open(src_dir, &src, NULL, NULL, &local) != 0) {
    *e = local;
    return mt_err_pass(e);
  }
  if (src.problems)
    mt_err_set(&local, "%s: %ld problem(s) in its index (meshckpt verify names them)", src_dir,
               src.problems);
  /* what the output holds */
  int groups = o->params_only ? 1 : src.tt.groups;
  int dtype[MT_CKPT_NGROUPS];
  for (int g = 0; g < MT_CKPT_NGROUPS; g++) {
    int want = g == 0 ? o->param_dtype : o->optim_dtype;
    dtype[g] = want >= 0           ? want
               : g < src.tt.groups ? src.tt.dtype[(size_t)g * (size_t)src.tt.n]
                                   : MT_DT_F32;
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
  source_extras(&src, &config, &src_layout, &src_world, &moe_bias, &moe_bias_rows, &local);
  mt_ckpt_meta dst_meta = src.meta; /* what the main file says: the source's, and its bias */
  dst_meta.moe_bias = moe_bias;
  dst_meta.moe_bias_rows = moe_bias_rows;
  out_plan plan;
  memset(&plan, 0, sizeof plan);
  if (!local.failed) {
    if (o->target_tp > 0) plan_target(&src, &reg, o, groups, &plan, &local);
    else if (plan_as_source(&src, groups, src_layout, src_world, &plan) != 0)
      mt_err_set(&local, "out of memory planning the conversion");
  }
  mt_ckpt_reader rd;
  memset(&rd, 0, sizeof rd);
  int have_reader = 0;
  if (!mt_ckpt_agree(&local)) have_reader = mt_ckpt_reader_open(&rd, &src, &local) == 0;
  mt_mesh mesh;
  memset(&mesh, 0, sizeof mesh);
  mesh.world_rank = rank;
  mesh.world_size = size;
  char tmpdir[1024] = "";
  mt_ckpt_save_opts sopts = {.mode = o->mode, .keep = 0,
                             .test_crash = o->test_crash,
                             .config_ini = config};
  int begun = 0;
  if (!mt_ckpt_agree(&local))
    begun = mt_ckpt_save_begin(dst_root, &src.meta, &reg, &mesh, &sopts, tmpdir, sizeof tmpdir,
                               &local) == 0;
  /* the memory bound: the float buffer and the output buffer, a tenth of
   * the budget each for bf16 staging in the reader */
  streamer st = {.rd = &rd, .src = &src};
  size_t budget = o->buffer_bytes > (1u << 20) ? o->buffer_bytes : (1u << 20);
  st.elems = budget / 10; /* 4 (float) + 4 (output) + 2 (reader staging) bytes per element */
  int per_writer = o->mode == MT_CKPT_MODE_PER_WRITER;
  int64_t n_rows = plan.rows.n, *rows = plan.rows.rows;
  if (begun) {
    st.in = mt_malloc(st.elems * sizeof(float));
    st.out = mt_malloc(st.elems * sizeof(float));
    if (per_writer) convert_per_writer(&st, tmpdir, &plan, dtype, sopts.test_crash, &local);
    else convert_shared(&st, tmpdir, &plan, dtype, groups, o, &reg, &dst_meta, config,
                        sopts.test_crash, &local);
    if (st.nonfinite && !local.failed)
      mt_err_runtime(&local, "convert: %s holds %zu NaN or Inf values: not converted (meshckpt "
                             "verify names them)", src_dir, st.nonfinite);
  }
  if (begun && per_writer) {
    /* every writer's checksums to rank 0, which writes the index file */
    share_hashes(rows, n_rows, &local);
    if (!mt_ckpt_agree(&local) && rank == 0) {
      char path[1100];
      snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_INDEX_FILE);
      mt_ckpt_file_opts fo = {
          .groups = groups, .dtype = {dtype[0], dtype[1], dtype[2]}, .order = NULL,
          .target_tp = o->target_tp > 0 ? o->target_tp : (int)src.meta.target_tp,
          .target_pp = o->target_tp > 0 ? o->target_pp : (int)src.meta.target_pp};
      target_mesh(o, &src.meta, &fo);
      mt_ckpt_main m;
      if (mt_ckpt_main_create(&m, path, &dst_meta, &reg, rows, n_rows, plan.world, config, 0, &fo,
                              &local) == 0) {
        if (mt_ckpt_main_put_tables(&m, plan.layout, &reg, config, &local) == 0)
          mt_ckpt_main_put_index(&m, rows, &local);
        mt_ckpt_main_finish(&m, !local.failed, &local);
      }
    }
  }
  double bytes[2] = {st.bytes_read, st.bytes_written};
  mt_err ignore = {0};
  mt_ckpt_allreduce_f64(bytes, 2, MPI_SUM, &ignore);
  int rc = 0;
  if (begun) {
    if (mt_ckpt_agree(&local)) {
      mt_ckpt_save_abandon(tmpdir, &mesh);
      rc = mt_err_pass(&local);
    } else {
      mt_ckpt_written w = {.rows = NULL, .n_rows = n_rows, .reg = &reg, .groups = groups};
      if (rank == 0) {
        w.rows = mt_malloc((size_t)n_rows * MT_CKPT_INDEX_COLS * sizeof(int64_t) + 8);
        memcpy(w.rows, rows, (size_t)n_rows * MT_CKPT_INDEX_COLS * sizeof(int64_t));
      }
      if (mt_ckpt_save_end(dst_root, tmpdir, src.meta.step, o->mode, sopts.test_crash, 0, &mesh,
                           &w, &local) != 0)
        rc = mt_err_pass(&local);
      mt_ckpt_written_free(&w);
    }
  } else { /* the save never began: local says why */
    rc = mt_err_pass(&local);
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
    stats->peak_rss_max = rss;
    mt_ckpt_allreduce_f64(&stats->peak_rss_max, 1, MPI_MAX, &ignore);
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

int mt_ckpt_convert(const char *src_dir, const char *dst_root, const mt_ckpt_convert_opts *o,
                    mt_ckpt_convert_stats *stats, mt_err *e) {
  MT_CKPT_RETURN_SCOPED(e, convert_scoped(src_dir, dst_root, o, stats, e));
}
