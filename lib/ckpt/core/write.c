/* What both on-disk modes write: the index rows of every rank's boxes with
 * their checksums, and the file that rank 0 writes alone (root attributes,
 * the canonical datasets with their attributes, the index, the layout, the
 * tensor names, the configuration): ckpt.h5 in shared mode, index.h5 in
 * per-writer mode. That file is made as h5file.c says: HDF5 lays out every
 * dataset (contiguous, allocated, never filled) and writes only metadata;
 * the tables' bytes are written with pwrite afterwards, like the tensors'.
 * Nothing here aborts or is collective unless it says so. */
#include "ckpt/core/ckpt_core.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
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

int mt_ckpt_gather_rows(const mt_ckpt_rows *mine, int64_t **all, int64_t *n_all, mt_err *e) {
  int64_t n = 0;
  int rc = mt_ckpt_gather_i64(mine->rows, (int64_t)mine->n * MT_CKPT_INDEX_COLS, all, &n, e);
  *n_all = n / MT_CKPT_INDEX_COLS;
  return rc == 0 ? 0 : mt_err_pass(e);
}

int mt_ckpt_gather_layout(const mt_mesh *mesh, int64_t **all, mt_err *e) {
  int64_t mine[5] = {mesh->world_rank, mesh->tp_rank, mesh->cp_rank, mesh->dp_rank, mesh->pp_rank};
  int64_t n = 0;
  MT_TRY(e, mt_ckpt_gather_i64(mine, 5, all, &n, e));
  return 0;
}

int64_t *mt_ckpt_shard_offsets(const int64_t *rows, int64_t n) {
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
hid_t mt_ckpt_virtual_dcpl(const mt_tensor *t, int g, const int64_t *rows, const int64_t *off,
                           int64_t n, int ti, const char *where, mt_err *e) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  float fill = NAN; /* never read: a missing source is caught before any read */
  int ok = dcpl >= 0 && H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &fill) >= 0;
  hsize_t dims[MT_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
  char src_name[256];
  mt_ckpt_dataset_path(src_name, sizeof src_name, g, t->name);
  int64_t d64[MT_MAX_DIMS];
  for (int d = 0; d < t->ndim; d++) d64[d] = t->shape[d];
  for (int64_t j = 0; j < n && ok; j++) {
    const int64_t *r = rows + j * MT_CKPT_INDEX_COLS;
    if (r[MT_IX_GROUP] != g || r[MT_IX_TENSOR] != ti) continue;
    mt_ckpt_box b = {.start = {r[MT_IX_START0], r[MT_IX_START1]},
                     .count = {r[MT_IX_COUNT0], r[MT_IX_COUNT1]}};
    char file_name[64];
    snprintf(file_name, sizeof file_name, "shard-%05lld.h5", (long long)r[MT_IX_WRITER]);
    /* each regular piece of the box (an expert tensor's box may span
     * experts) maps to its consecutive range of the shard's 1-D array */
    int64_t st[3][MT_MAX_DIMS], ct[3][MT_MAX_DIMS];
    int np = mt_ckpt_box_pieces(&b, t->ndim, d64, st, ct);
    hsize_t start = (hsize_t)off[j];
    for (int p = 0; p < np && ok; p++) {
      hsize_t vstart[MT_MAX_DIMS], vcount[MT_MAX_DIMS], vol = 1;
      for (int d = 0; d < t->ndim; d++) {
        vstart[d] = (hsize_t)st[p][d];
        vcount[d] = (hsize_t)ct[p][d];
        vol *= vcount[d];
      }
      hsize_t src_dims[1] = {H5S_UNLIMITED};
      hsize_t cur[1] = {start + vol};
      hid_t vs = H5Screate_simple(t->ndim, dims, NULL);
      hid_t ss = H5Screate_simple(1, cur, src_dims);
      ok = vs >= 0 && ss >= 0 &&
           H5Sselect_hyperslab(vs, H5S_SELECT_SET, vstart, NULL, vcount, NULL) >= 0 &&
           H5Sselect_hyperslab(ss, H5S_SELECT_SET, &start, NULL, &vol, NULL) >= 0 &&
           H5Pset_virtual(dcpl, vs, file_name, src_name, ss) >= 0;
      if (!ok) mt_ckpt_err_h5(e, "%s", where);
      if (ss >= 0) H5Sclose(ss);
      if (vs >= 0) H5Sclose(vs);
      start += vol;
    }
  }
  if (!ok) {
    mt_ckpt_err_h5(e, "%s", where); /* no-op when the loop said it already */
    if (dcpl >= 0) H5Pclose(dcpl);
    return -1;
  }
  return dcpl;
}

static const char *split_name(mt_placement p) {
  static const char *dims[MT_MAX_DIMS] = {"dim0", "dim1", "dim2", "dim3"};
  return p.kind == MT_PLACE_SHARDED && p.dim >= 0 && p.dim < MT_MAX_DIMS ? dims[p.dim]
                                                                         : "replicated";
}

/* experts: how the folded mesh splits them (global expert ids along dim 0) */
static int expert_attrs(hid_t d, const mt_tensor *t, const char *where, mt_err *e) {
  const char *replicated_over = t->etp.kind == MT_PLACE_SHARDED ? "edp" : "edp,etp";
  MT_TRY(e, mt_ckpt_put_attr_str(d, "ep_split", split_name(t->ep), where, e));
  MT_TRY(e, mt_ckpt_put_attr_str(d, "etp_split", split_name(t->etp), where, e));
  MT_TRY(e, mt_ckpt_put_attr_str(d, "replicated_over", replicated_over, where, e));
  return 0;
}

/* the labels of t's axes: the registry's (the model names them where they
 * mean more than their shape: vocab, position), else from its shape */
static const char *axes_of(const mt_tensor *t) {
  if (t->axes[0]) return t->axes;
  if (t->group == MT_GROUP_EDP) return t->ndim == 3 ? "expert,out,in" : "expert,out";
  return t->ndim == 2 ? "out,in" : "channel";
}

static int tensor_attrs(hid_t d, const mt_tensor *t, const char *where, mt_err *e) {
  /* how runtimes split it; the data itself is the whole logical tensor */
  int64_t padded[MT_MAX_DIMS];
  for (int k = 0; k < t->ndim; k++) padded[k] = t->padded[k];
  int expert = t->group == MT_GROUP_EDP;
  const char *split = expert ? "replicated" : split_name(t->tp);
  const char *replicated_over = t->tp.kind == MT_PLACE_SHARDED ? "dp,cp" : "dp,cp,tp";
  MT_TRY(e, mt_ckpt_put_attr_str(d, "tp_split", split, where, e) != 0 ||
                mt_ckpt_put_attr_i64(d, "fused_blocks",
                                     expert ? t->etp.fused_blocks : t->tp.fused_blocks, where,
                                     e) != 0 ||
                mt_ckpt_put_attr_i64v(d, "padded_shape", padded, t->ndim, where, e) != 0 ||
                mt_ckpt_put_attr_str(d, "axes", axes_of(t), where, e) != 0 ||
                (!expert &&
                 mt_ckpt_put_attr_str(d, "replicated_over", replicated_over, where, e) != 0) ||
                mt_ckpt_put_attr_i64(d, "weight_decay", t->weight_decay, where, e) != 0);
  if (expert) MT_TRY(e, expert_attrs(d, t, where, e));
  else if (t->tied_to[0]) MT_TRY(e, mt_ckpt_put_attr_str(d, "tied_to", t->tied_to, where, e));
  return 0;
}

/* a 2-D int64 table, a 1-D table of fixed strings: their datasets */
static hid_t table_i64(mt_ckpt_main *m, const char *name, int64_t rows, int64_t cols,
                       int64_t *off, const char *where, mt_err *e) {
  int64_t dims[2] = {rows, cols};
  return mt_ckpt_h5out_dataset(&m->out, m->out.file, name, H5T_STD_I64LE, 2, dims, H5P_DEFAULT,
                               off, where, e);
}

static hid_t table_str(mt_ckpt_main *m, const char *name, int64_t n, size_t width, int64_t *off,
                       const char *where, mt_err *e) {
  hid_t t = H5Tcopy(H5T_C_S1), d = -1;
  if (t >= 0 && H5Tset_size(t, width) >= 0)
    d = mt_ckpt_h5out_dataset(&m->out, m->out.file, name, t, 1, &n, H5P_DEFAULT, off, where, e);
  else mt_ckpt_err_h5(e, "%s", where);
  if (t >= 0) H5Tclose(t);
  return d;
}

/* datasets of at least this many alignments are aligned: a small model's
 * file is then about its tensors' bytes, not a MiB per tensor */
#define ALIGN_FROM 16

/* The canonical datasets: contiguous with their space allocated and their
 * offsets kept (shared mode: every rank writes its boxes there), or virtual
 * over the writers' shard files (per-writer mode's index file; rows: the
 * whole index). */
static int create_datasets(mt_ckpt_main *m, const mt_registry *reg, const int64_t *rows,
                           int64_t n_rows, int shared, const mt_ckpt_file_opts *fo,
                           const char *where, mt_err *e) {
  hid_t file = m->out.file;
  hid_t groups[MT_CKPT_NGROUPS] = {-1, -1, -1}, optim = -1, types[MT_CKPT_NGROUPS] = {-1, -1, -1};
  int rc = -1;
  int64_t *shard_off = shared ? NULL : mt_ckpt_shard_offsets(rows, n_rows);
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
    /* in the order asked for: it is the order of the data in the file */
    int slot = fo->order ? fo->order[k] : k, g = slot / reg->n, i = slot % reg->n;
    const mt_tensor *t = &reg->t[i];
    hid_t d = -1;
    if (shared) {
      d = mt_ckpt_h5out_dataset(&m->out, groups[g], t->name, types[g], t->ndim, t->shape,
                                H5P_DEFAULT, &m->offsets[(size_t)g * (size_t)reg->n + (size_t)i],
                                where, e);
    } else {
      hsize_t dims[MT_MAX_DIMS];
      for (int q = 0; q < t->ndim; q++) dims[q] = (hsize_t)t->shape[q];
      hid_t s = H5Screate_simple(t->ndim, dims, NULL);
      hid_t dcpl = mt_ckpt_virtual_dcpl(t, g, rows, shard_off, n_rows, i, where, e);
      if (s >= 0 && dcpl >= 0)
        d = H5Dcreate2(groups[g], t->name, types[g], s, H5P_DEFAULT, dcpl, H5P_DEFAULT);
      if (d < 0 && dcpl >= 0) mt_ckpt_err_h5(e, "%s", where);
      if (dcpl >= 0) H5Pclose(dcpl);
      if (s >= 0) H5Sclose(s);
    }
    int ok = d >= 0 && tensor_attrs(d, t, where, e) == 0;
    if (d >= 0 && H5Dclose(d) < 0 && ok) {
      mt_ckpt_err_h5(e, "%s", where);
      ok = 0;
    }
    if (!ok) {
      rc = mt_err_pass(e);
      goto done;
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

/* the stripe unit of ckpt.io_hints (striping_unit), or 0 */
static long long hinted_stripe(MPI_Info info) {
  if (info == MPI_INFO_NULL) return 0;
  char unit[64];
  int found = 0;
  if (MPI_Info_get(info, "striping_unit", (int)sizeof unit - 1, unit, &found) != MPI_SUCCESS)
    found = 0;
  long long su = found ? atoll(unit) : 0;
  return su >= 65536 && su <= (1LL << 30) ? su : 0;
}

int mt_ckpt_main_create(mt_ckpt_main *m, const char *path, const mt_ckpt_meta *meta,
                        const mt_registry *reg, const int64_t *rows, int64_t n_rows, int world,
                        const char *config_ini, int shared, const mt_ckpt_file_opts *fo,
                        mt_err *e) {
  static const mt_ckpt_file_opts training = {
      .groups = MT_CKPT_NGROUPS, .dtype = {MT_DT_F32, MT_DT_F32, MT_DT_F32}, .order = NULL};
  if (!fo) fo = &training;
  memset(m, 0, sizeof *m);
  m->out.file = -1;
  m->out.fd = -1;
  m->out.ballast.fd = -1;
  m->n_rows = n_rows;
  m->world = world;
  m->n_tensors = reg->n;
  m->config_bytes = (int64_t)strlen(config_ini ? config_ini : "") + 1;
  snprintf(m->where, sizeof m->where, "checkpoint step %lld: rank 0 cannot write %s",
           (long long)meta->step, path);
  const char *where = m->where;
  /* the alignment: the stripe of the hints, else 1 MiB */
  MPI_Info info = shared ? mt_ckpt_io_info() : MPI_INFO_NULL;
  long long align = hinted_stripe(info);
  if (align == 0) align = 1 << 20;
  /* the file's size, at most: data, tables, alignment, metadata */
  long long data = 0, aligned = 0;
  /* the MoE routing bias of aux-loss-free balancing, (MoE blocks, experts)
   * float32, when the run has one: a fifth table */
  if (meta->moe_bias && meta->moe_bias_rows > 0 && meta->moe_experts > 0) {
    m->moe_bias_n = meta->moe_bias_rows * meta->moe_experts;
    m->moe_bias = mt_malloc((size_t)m->moe_bias_n * sizeof(float));
    memcpy(m->moe_bias, meta->moe_bias, (size_t)m->moe_bias_n * sizeof(float));
  }
  long long table[5] = {n_rows * MT_CKPT_INDEX_COLS * 8LL, 40LL * world,
                        (long long)reg->n * MT_NAME_MAX, m->config_bytes,
                        m->moe_bias_n * 4LL};
  for (int k = 0; k < 5; k++) {
    data += table[k];
    aligned += table[k] >= ALIGN_FROM * align;
  }
  for (int g = 0; shared && g < fo->groups; g++)
    for (int i = 0; i < reg->n; i++) {
      long long b =
          (long long)mt_tensor_numel(&reg->t[i]) * (long long)mt_dtype_bytes(fo->dtype[g]);
      data += b;
      aligned += b >= ALIGN_FROM * align;
    }
  long long metadata = mt_ckpt_metadata_bytes((long long)fo->groups * reg->n + 5,
                                              shared ? 0 : n_rows, 0);
  long long bound = data + aligned * align + metadata;
  int exists = 0;
  if (info != MPI_INFO_NULL) {
    /* the shared file is made by MPI-IO first, so the striping hints
     * (striping_factor, striping_unit) take effect where the file system
     * has them (Lustre); HDF5 then lays it out */
    MPI_File fh;
    int err = mt_ckpt_fault("create");
    int rc = err ? MPI_SUCCESS
                 : MPI_File_open(MPI_COMM_SELF, path,
                                 MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY, info, &fh);
    if (!err && rc == MPI_SUCCESS) rc = MPI_File_close(&fh);
    int freed = MPI_Info_free(&info);
    if (rc == MPI_SUCCESS) rc = freed;
    if (err) {
      mt_ckpt_err_sys(e, err, "%s", where);
      free(m->moe_bias);
      m->moe_bias = NULL;
      return -1;
    }
    if (rc != MPI_SUCCESS) {
      char msg[MPI_MAX_ERROR_STRING];
      mt_err_runtime(e, "%s: %s (MPI-IO, with ckpt.io_hints)", where, mt_mpi_strerror(rc, msg));
      free(m->moe_bias);
      m->moe_bias = NULL;
      return -1;
    }
    exists = 1;
  }
  m->offsets = mt_calloc((size_t)MT_CKPT_NGROUPS * (size_t)reg->n + 1, sizeof(int64_t));
  hid_t fapl = mt_ckpt_fapl_create(ALIGN_FROM * align, align);
  int rc = mt_ckpt_h5out_create(&m->out, path, bound, metadata, fapl, exists, where, e);
  H5Pclose(fapl);
  if (rc != 0) {
    free(m->moe_bias);
    m->moe_bias = NULL;
    return mt_err_pass(e);
  }
  hid_t d[5] = {-1, -1, -1, -1, -1};
  if (mt_ckpt_write_meta_attrs(m->out.file, meta, fo->groups, where, e) == 0 &&
      (fo->target_tp <= 0 ||
       (mt_ckpt_put_attr_i64(m->out.file, "target_tp", fo->target_tp, where, e) == 0 &&
        mt_ckpt_put_attr_i64(m->out.file, "target_pp", fo->target_pp, where, e) == 0)) &&
      (fo->target_tp <= 0 || fo->target_ep <= 0 ||
       (mt_ckpt_put_attr_i64(m->out.file, "target_ep", fo->target_ep, where, e) == 0 &&
        mt_ckpt_put_attr_i64(m->out.file, "target_etp", fo->target_etp, where, e) == 0)) &&
      create_datasets(m, reg, rows, n_rows, shared, fo, where, e) == 0 &&
      (d[0] = table_i64(m, "index", n_rows, MT_CKPT_INDEX_COLS, &m->table_off[0], where, e)) >= 0 &&
      (d[1] = table_i64(m, "layout", world, 5, &m->table_off[1], where, e)) >= 0 &&
      (d[2] = table_str(m, "tensors", reg->n, MT_NAME_MAX, &m->table_off[2], where, e)) >= 0 &&
      (d[3] = table_str(m, "config", 1, (size_t)m->config_bytes, &m->table_off[3], where, e)) >= 0 &&
      (!m->moe_bias ||
       (d[4] = mt_ckpt_h5out_dataset(&m->out, m->out.file, MT_CKPT_MOE_BIAS, H5T_IEEE_F32LE, 2,
                                     (const int64_t[2]){meta->moe_bias_rows, meta->moe_experts},
                                     H5P_DEFAULT, &m->table_off[4], where, e)) >= 0)) {
  }
  for (int k = 0; k < 5; k++)
    if (d[k] >= 0 && H5Dclose(d[k]) < 0) mt_ckpt_err_h5(e, "%s", where);
  /* closed in any case: reserve, then the metadata */
  if (mt_ckpt_h5out_close(&m->out, where, e) != 0) {
    mt_ckpt_h5out_finish(&m->out, 0, where, e);
    free(m->moe_bias);
    m->moe_bias = NULL;
    return mt_err_pass(e);
  }
  return 0;
}

int mt_ckpt_main_put_tables(mt_ckpt_main *m, const int64_t *layout, const mt_registry *reg,
                            const char *config_ini, mt_err *e) {
  char *names = mt_calloc((size_t)reg->n + 1, MT_NAME_MAX);
  for (int i = 0; i < reg->n; i++)
    snprintf(names + (size_t)i * MT_NAME_MAX, MT_NAME_MAX, "%s", reg->t[i].name);
  const char *cfg = config_ini ? config_ini : "";
  int rc = 0;
  if (mt_ckpt_pwrite_full(m->out.fd, layout, (size_t)m->world * 5 * sizeof(int64_t),
                          m->table_off[1], "index") != 0 ||
      mt_ckpt_pwrite_full(m->out.fd, names, (size_t)reg->n * MT_NAME_MAX, m->table_off[2],
                          "index") != 0 ||
      mt_ckpt_pwrite_full(m->out.fd, cfg, (size_t)m->config_bytes, m->table_off[3], "index") != 0 ||
      /* float32 little-endian on disk, as the tables: the hosts we build for */
      (m->moe_bias && mt_ckpt_pwrite_full(m->out.fd, m->moe_bias,
                                          (size_t)m->moe_bias_n * sizeof(float),
                                          m->table_off[4], "index") != 0)) {
    mt_ckpt_err_sys(e, errno, "%s", m->where);
    rc = -1;
  }
  free(names);
  return rc;
}

int mt_ckpt_main_put_index(mt_ckpt_main *m, const int64_t *rows, mt_err *e) {
  if (mt_ckpt_pwrite_full(m->out.fd, rows, (size_t)m->n_rows * MT_CKPT_INDEX_COLS * sizeof(int64_t),
                          m->table_off[0], "index") != 0) {
    mt_ckpt_err_sys(e, errno, "%s", m->where);
    return -1;
  }
  return 0;
}

int mt_ckpt_main_finish(mt_ckpt_main *m, int sync, mt_err *e) {
  int rc = mt_ckpt_h5out_finish(&m->out, sync, m->where, e);
  free(m->offsets);
  m->offsets = NULL;
  free(m->moe_bias);
  m->moe_bias = NULL;
  return rc == 0 ? 0 : mt_err_pass(e);
}
