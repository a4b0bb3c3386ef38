/* Per-writer mode: one shard file per writing rank (no MPI-IO, so it can be
 * written in the background), and an index file whose virtual datasets
 * present the whole tensors.
 *
 * A shard is made as h5file.c says: its whole size tried first (the
 * file-size limit refuses it there, with EFBIG, before HDF5 holds anything),
 * its blocks reserved (a full disk shows there), HDF5 lays out one 1-D
 * dataset per tensor this rank writes and writes only metadata, then the
 * data goes in with pwrite, hashed and checked to be finite on the way, and
 * the file is synced, closed and opened again to check it holds what was
 * meant. Every return is checked; nothing of HDF5 is open on an error
 * path. */
#define _GNU_SOURCE             /* sync_file_range */
#define XXH_STATIC_LINKING_ONLY /* XXH64_state_t on the stack */
#include <xxhash.h>

#include "ckpt/core/ckpt_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The bytes of one shard dataset, written front to back: contiguous memory
 * straight from the state, rows of a strided box gathered into a buffer
 * first (one write per buffer, not per row). */
typedef struct {
  int fd;
  int64_t pos;  /* file offset of buf[0] (or of the next direct write) */
  float *buf;
  size_t fill, cap; /* floats */
  size_t nonfinite;
  int failed;       /* errno of the first failed write, or 0 */
} stream;

static void stream_flush(stream *s) {
  if (s->fill == 0 || s->failed) return;
  /* hashed and scanned when put */
  if (mt_ckpt_write_floats(s->fd, s->buf, s->fill, s->pos, NULL, NULL) != 0) s->failed = errno;
  s->pos += (int64_t)(s->fill * sizeof(float));
  s->fill = 0;
}

/* n floats of one box row (or of whole rows), hashed into hs */
static void stream_put(stream *s, const float *p, size_t n, XXH64_state_t *hs) {
  if (s->failed) return;
  s->nonfinite += mt_ckpt_hash_scan(hs, p, n);
  if (s->fill == 0 && n >= s->cap) { /* large and contiguous: no copy */
    if (mt_ckpt_write_floats(s->fd, p, n, s->pos, NULL, NULL) != 0) s->failed = errno;
    s->pos += (int64_t)(n * sizeof(float));
    return;
  }
  while (n > 0 && !s->failed) {
    size_t k = s->cap - s->fill < n ? s->cap - s->fill : n;
    memcpy(s->buf + s->fill, p, k * sizeof(float));
    s->fill += k;
    p += k;
    n -= k;
    if (s->fill == s->cap) stream_flush(s);
  }
}

int mt_ckpt_check_shard(const char *path, int n_sets, char (*paths)[256], const int64_t *n,
                        const int *dtype, const char *where, mt_err *e) {
  hid_t fapl = mt_ckpt_fapl_serial();
  hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  if (f < 0) {
    mt_ckpt_err_h5(e, "%s: it cannot be opened again", where);
    return -1;
  }
  for (int k = 0; k < n_sets && !e->failed; k++) {
    hid_t d = H5Dopen2(f, paths[k], H5P_DEFAULT);
    hid_t s = d >= 0 ? H5Dget_space(d) : -1, t = d >= 0 ? H5Dget_type(d) : -1;
    hsize_t len = 0;
    int ok = s >= 0 && t >= 0 && H5Sget_simple_extent_ndims(s) == 1 &&
             H5Sget_simple_extent_dims(s, &len, NULL) == 1 && (int64_t)len == n[k] &&
             mt_ckpt_dtype_of(t) == dtype[k];
    if (t >= 0) H5Tclose(t);
    if (s >= 0) H5Sclose(s);
    if (d >= 0) H5Dclose(d);
    if (!ok) {
      H5Eclear2(H5E_DEFAULT);
      mt_err_runtime(e, "%s: read back, %s is not the %lld values written", where, paths[k],
                     (long long)n[k]);
    }
  }
  if (H5Fclose(f) < 0 && !e->failed) mt_ckpt_err_h5(e, "%s", where);
  return e->failed ? -1 : 0;
}

int mt_ckpt_write_shard(const char *tmpdir, const mt_registry *reg, mt_mesh *mesh,
                        const mt_ckpt_state *st, mt_ckpt_crash crash, int64_t step,
                        mt_ckpt_rows *rows, mt_err *e) {
  char path[1100], where[1300];
  snprintf(path, sizeof path, "%s/shard-%05d.h5", tmpdir, mesh->world_rank);
  snprintf(where, sizeof where, "checkpoint step %lld: rank %d cannot write %s", (long long)step,
           mesh->world_rank, path);
  rows->n = 0;
  /* the datasets this rank writes: one per (group, tensor) it holds a part of */
  int n_sets = 0, cap = 0;
  char (*paths)[256] = NULL;
  int64_t *vol = NULL, *off = NULL;
  int *dtype = NULL;
  long long data = 0;
  mt_ckpt_walk w;
  mt_ckpt_walk_begin(&w, reg, mesh, st, 1);
  int more;
  while ((more = mt_ckpt_walk_next(&w)) == 1) {
    if (w.sel.volume == 0) continue;
    if (n_sets == cap) {
      cap = cap ? 2 * cap : 64;
      paths = realloc(paths, (size_t)cap * sizeof *paths);
      vol = realloc(vol, (size_t)cap * sizeof *vol);
      dtype = realloc(dtype, (size_t)cap * sizeof *dtype);
      if (!paths || !vol || !dtype) {
        more = -1;
        break;
      }
    }
    mt_ckpt_dataset_path(paths[n_sets], sizeof paths[n_sets], w.g, w.t->name);
    vol[n_sets] = (int64_t)w.sel.volume;
    dtype[n_sets] = MT_DT_F32;
    data += 4LL * (long long)w.sel.volume;
    n_sets++;
  }
  mt_ckpt_walk_end(&w);
  int rc = -1;
  if (more < 0) {
    mt_err_runtime(e, "%s: out of memory", where);
    goto done;
  }
  if (n_sets == 0) { /* a rank that owns nothing leaves no file */
    rc = 0;
    goto done;
  }
  off = mt_calloc((size_t)n_sets, sizeof *off);
  long long metadata = mt_ckpt_metadata_bytes(n_sets, 0, 0);
  mt_ckpt_h5out o;
  hid_t fapl = mt_ckpt_fapl_serial();
  int created = mt_ckpt_h5out_create(&o, path, data + metadata, metadata, fapl, 0, where, e);
  H5Pclose(fapl);
  if (created != 0) {
    rc = mt_err_pass(e);
    goto done;
  }
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  if (lcpl < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0) mt_ckpt_err_h5(e, "%s", where);
  for (int k = 0; k < n_sets && !e->failed; k++) {
    hid_t d = mt_ckpt_h5out_dataset(&o, o.file, paths[k], H5T_IEEE_F32LE, 1, &vol[k], lcpl,
                                    &off[k], where, e);
    if (d >= 0 && H5Dclose(d) < 0) mt_ckpt_err_h5(e, "%s", where);
  }
  if (lcpl >= 0) H5Pclose(lcpl);
  if (mt_ckpt_h5out_close(&o, where, e) == 0) {
    /* the data, in the walk's order: dataset k holds this rank's boxes of
     * its tensor end to end */
    stream s = {.fd = o.fd, .cap = MT_CKPT_PIECE_BYTES / sizeof(float)};
    s.buf = malloc(s.cap * sizeof(float));
    if (!s.buf) mt_err_runtime(e, "%s: out of memory", where);
    mt_ckpt_walk_begin(&w, reg, mesh, st, 1);
    int k = 0;
    while (!e->failed && (more = mt_ckpt_walk_next(&w)) == 1) {
      if (w.sel.volume == 0) continue;
      if (w.g == 0 && w.i >= reg->n / 2)
        mt_ckpt_test_crash_point(crash, MT_CKPT_CRASH_WRITE, mesh->world_rank);
      s.pos = off[k];
      s.nonfinite = 0;
      int64_t L1 = w.v.local_ext[1];
      for (int b = 0; b < w.sel.boxes.n && !s.failed; b++) {
        const mt_ckpt_box *bx = &w.sel.boxes.b[b];
        const float *mem = w.sel.piece_mem[b];
        XXH64_state_t hs;
        XXH64_reset(&hs, 0);
        if (bx->count[0] == 1 || bx->count[1] == L1)
          stream_put(&s, mem, (size_t)(bx->count[0] * bx->count[1]), &hs);
        else
          for (int64_t r = 0; r < bx->count[0]; r++)
            stream_put(&s, mem + r * L1, (size_t)bx->count[1], &hs);
        if (mt_ckpt_append_row(rows, w.g, w.i, mesh->world_rank, bx, XXH64_digest(&hs)) != 0)
          s.failed = ENOMEM;
      }
      stream_flush(&s);
      if (s.failed) {
        mt_ckpt_err_sys(e, s.failed, "%s", where);
      } else if (s.nonfinite) {
        mt_ckpt_err_nonfinite(e, step, mesh->world_rank, s.nonfinite, paths[k]);
      }
      k++;
    }
    mt_ckpt_walk_end(&w);
    if (more < 0 && !e->failed) mt_err_runtime(e, "%s: out of memory", where);
    free(s.buf);
  }
  mt_ckpt_h5out_finish(&o, 1, where, e);
  /* opened again: the datasets are there, of the lengths written */
  double t0 = mt_now();
  if (!e->failed) mt_ckpt_check_shard(path, n_sets, paths, vol, dtype, where, e);
  mt_ckpt_check_time_add(mt_now() - t0);
  rc = e->failed ? -1 : 0;
done:
  free(paths);
  free(vol);
  free(dtype);
  free(off);
  return rc;
}

int mt_ckpt_finish_per_writer(const char *tmpdir, const mt_ckpt_meta *meta,
                              const mt_registry *reg, mt_mesh *mesh, const char *config_ini,
                              const mt_ckpt_rows *rows, const mt_ckpt_file_opts *fo,
                              mt_ckpt_written *w, mt_err *e) {
  int64_t *all = NULL, n_all = 0, *layout = NULL;
  mt_ckpt_gather_rows(rows, &all, &n_all, e);
  mt_ckpt_gather_layout(mesh, &layout, e);
  if (!mt_ckpt_agree(e) && mesh->world_rank == 0) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_INDEX_FILE);
    mt_ckpt_main m;
    if (mt_ckpt_main_create(&m, path, meta, reg, all, n_all, mesh->world_size, config_ini, 0, fo,
                            e) == 0) {
      if (mt_ckpt_main_put_tables(&m, layout, reg, config_ini, e) == 0)
        mt_ckpt_main_put_index(&m, all, e);
      mt_ckpt_main_finish(&m, !e->failed, e);
    }
    if (!e->failed)
      mt_ckpt_written_keep(w, &all, n_all, reg, fo);
  }
  free(all);
  free(layout);
  return e->failed ? -1 : 0;
}

int mt_ckpt_save_per_writer(const char *tmpdir, const mt_ckpt_meta *meta, const mt_registry *reg,
                            mt_mesh *mesh, const mt_ckpt_state *st,
                            const mt_ckpt_save_opts *opts, const mt_ckpt_file_opts *fo,
                            mt_ckpt_written *w, mt_err *e) {
  mt_ckpt_rows rows = {0};
  mt_ckpt_write_shard(tmpdir, reg, mesh, st, opts->test_crash, meta->step, &rows, e);
  int rc = mt_ckpt_finish_per_writer(tmpdir, meta, reg, mesh, opts->config_ini, &rows, fo, w, e);
  free(rows.rows);
  return rc == 0 ? 0 : mt_err_pass(e);
}
