/* mt_ckpt_save: the collective protocol around the two writers (agree on
 * the schema, make the temporary directory, write, agree, check, commit).
 *
 * A commit is a promise: rank 0 renames the temporary directory into place
 * only after every rank's files are written, synced and closed with every
 * return checked (the writers), and after the checkpoint passed what
 * `meshckpt verify` checks before it reads any data: the manifest (every
 * file there, of its size), the root attributes and their checksum, the
 * tensor table against the tensors written, the index read back from the
 * file and equal to the one written (so every box's checksum is the one of
 * the bytes handed to the file), every tensor covered once, every writer's
 * shard present (and, per writer, opened again and of the size written).
 * The data's checksums and its finiteness were taken from the very bytes
 * written. Older checkpoints are deleted only after the new one is
 * committed and its manifest checked again under its final name. */
#include "ckpt/core/ckpt_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

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

void mt_ckpt_written_free(mt_ckpt_written *w) {
  free(w->rows);
  memset(w, 0, sizeof *w);
}

void mt_ckpt_written_keep(mt_ckpt_written *w, int64_t **rows, int64_t n_rows,
                          const mt_registry *reg, const mt_ckpt_file_opts *fo) {
  w->rows = *rows;
  w->n_rows = n_rows;
  w->reg = reg;
  w->groups = fo ? fo->groups : MT_CKPT_NGROUPS;
  *rows = NULL;
}

int mt_ckpt_save_begin(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                       mt_mesh *mesh, const mt_ckpt_save_opts *opts, char *tmpdir, size_t len,
                       mt_err *e) {
  int rank = mesh->world_rank;
  mt_ckpt_ignore_sigxfsz();
  mt_ckpt_check_time_reset();
  mt_err local = {0};
  mt_ckpt_fault_init(rank, meta->step, &local);
  uint64_t h = schema_hash(reg);
  int64_t hv[2];
  memcpy(&hv[0], &h, sizeof h);
  hv[1] = ~hv[0]; /* the min of ~h is ~(the max of h): both in one reduction */
  mt_ckpt_allreduce_i64(hv, 2, MPI_MIN, &local);
  if (!local.failed && hv[0] != ~hv[1])
    mt_err_set(&local, "checkpoint: ranks disagree on the tensor schema; nothing written");
  if (opts->mode != MT_CKPT_MODE_SHARED && opts->mode != MT_CKPT_MODE_PER_WRITER)
    mt_err_set(&local, "checkpoint: mode '%s' is not shared or per-writer",
               mt_ckpt_mode_name(opts->mode));
  memset(tmpdir, 0, len);
  if (rank == 0 && !local.failed) {
    snprintf(tmpdir, len, "%s/step_%lld.tmp-%ld-%d", root, (long long)meta->step,
             (long)time(NULL), (int)getpid());
    int err = mt_ckpt_fault("create");
    if (err || mt_ckpt_mkdir_p(root) != 0 || mkdir(tmpdir, 0755) != 0)
      mt_ckpt_err_sys(&local, err ? err : errno, "checkpoint step %lld: rank 0 cannot create %s",
                      (long long)meta->step, tmpdir);
  }
  mt_ckpt_bcast(tmpdir, (int64_t)len, &local);
  if (mt_ckpt_agree(&local)) {
    *e = local;
    return mt_err_pass(e);
  }
  mt_ckpt_test_crash_point(opts->test_crash, MT_CKPT_CRASH_CREATE, rank);
  return 0;
}

void mt_ckpt_save_abandon(const char *tmpdir, mt_mesh *mesh) {
  /* every rank has agreed that the save failed, so no one writes there any more */
  if (mesh->world_rank == 0 && tmpdir[0]) mt_ckpt_remove_tree(tmpdir);
}

/* The check before the commit (rank 0): dir holds what w says was written,
 * and meshckpt verify would accept it without reading data again. */
static int check_written(const char *dir, int64_t step, const mt_ckpt_written *w, mt_err *e) {
  mt_ckpt_source s;
  mt_err why = {0};
  mt_ckpt_trace_suspend(1);
  mt_ckpt_source_read_light(dir, &s, &why);
  mt_ckpt_trace_suspend(0);
  const mt_registry *reg = w->reg;
  if (!why.failed && s.problems) mt_err_set(&why, "%ld problem(s) in its index", s.problems);
  if (!why.failed && s.meta.step != step)
    mt_err_set(&why, "the file says step %lld", (long long)s.meta.step);
  if (!why.failed && (s.tt.n != reg->n || s.tt.groups != w->groups))
    mt_err_set(&why, "%d tensors in %d groups read back, %d in %d written", s.tt.n, s.tt.groups,
               reg->n, w->groups);
  for (int i = 0; !why.failed && i < reg->n; i++) {
    const mt_tensor *t = &reg->t[i];
    int same = !strcmp(s.tt.names[i], t->name) && s.tt.nd[i] == t->ndim;
    for (int d = 0; same && d < t->ndim; d++) same = s.tt.dims[i][d] == t->shape[d];
    if (!same) mt_err_set(&why, "tensor %d reads back as %s, not %s of the shape written", i,
                          s.tt.names[i], t->name);
  }
  if (!why.failed &&
      (s.n_rows != w->n_rows ||
       memcmp(s.rows, w->rows, (size_t)w->n_rows * MT_CKPT_INDEX_COLS * sizeof(int64_t)) != 0))
    mt_err_set(&why, "its index reads back as %lld boxes other than the %lld written",
               (long long)s.n_rows, (long long)w->n_rows);
  mt_ckpt_source_close(&s);
  if (why.failed)
    mt_err_runtime(e, "checkpoint step %lld: not committed: %s fails the check before the "
                      "commit: %s", (long long)step, dir, why.msg);
  return e->failed ? -1 : 0;
}

/* rank 0: manifest, check, fsync, rename tmpdir to final_dir, `latest`,
 * the manifest checked again, retention */
static int commit(const char *root, const char *tmpdir, const char *final_dir, int64_t step,
                  mt_ckpt_mode mode, mt_ckpt_crash crash, int keep, const mt_ckpt_written *w,
                  mt_err *e) {
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_MANIFEST);
  if (mt_ckpt_write_manifest(tmpdir, step, mode) != 0) {
    mt_ckpt_err_sys(e, errno, "checkpoint step %lld: cannot write %s", (long long)step, path);
    return -1;
  }
  double t0 = mt_now();
  int checked = check_written(tmpdir, step, w, e);
  mt_ckpt_check_time_add(mt_now() - t0);
  if (checked != 0) return mt_err_pass(e);
  if (mt_ckpt_fsync_path(tmpdir) != 0) {
    mt_ckpt_err_sys(e, errno, "checkpoint step %lld: cannot sync %s", (long long)step, tmpdir);
    return -1;
  }
  mt_ckpt_test_crash_point(crash, MT_CKPT_CRASH_RENAME, 0);
  if (mt_ckpt_install(root, tmpdir, final_dir) != 0 || mt_ckpt_fsync_path(root) != 0) {
    mt_ckpt_err_sys(e, errno, "checkpoint step %lld: cannot rename %s to %s", (long long)step,
                    tmpdir, final_dir);
    return -1;
  }
  mt_ckpt_test_crash_point(crash, MT_CKPT_CRASH_LATEST, 0);
  char latest[1100], target[64];
  snprintf(latest, sizeof latest, "%s/latest", root);
  snprintf(target, sizeof target, "step_%lld\n", (long long)step);
  if (mt_ckpt_write_file_durable(latest, target) != 0 || mt_ckpt_fsync_path(root) != 0) {
    mt_ckpt_err_sys(e, errno, "checkpoint step %lld is complete, but %s cannot be updated",
                    (long long)step, latest);
    return -1;
  }
  /* retention only for a checkpoint that is complete under its final name */
  mt_ckpt_manifest man;
  mt_err again = {0};
  if (mt_ckpt_check_manifest(final_dir, &man, &again) != 0) {
    mt_err_runtime(e, "checkpoint step %lld: %s (older checkpoints kept)", (long long)step,
                   again.msg);
    return -1;
  }
  mt_ckpt_retention(root, keep);
  mt_ckpt_fsync_path(root);
  return 0;
}

int mt_ckpt_save_end(const char *root, const char *tmpdir, int64_t step, mt_ckpt_mode mode,
                     mt_ckpt_crash crash, int keep, mt_mesh *mesh, const mt_ckpt_written *w,
                     mt_err *e) {
  mt_err local = {0};
  char final_dir[1100];
  snprintf(final_dir, sizeof final_dir, "%s/step_%lld", root, (long long)step);
  if (mesh->world_rank == 0) commit(root, tmpdir, final_dir, step, mode, crash, keep, w, &local);
  if (mt_ckpt_agree(&local)) {
    mt_ckpt_save_abandon(tmpdir, mesh); /* gone already if the rename happened */
    *e = local;
    return mt_err_pass(e);
  }
  return 0;
}

/* the save itself, inside the caller's HDF5 scope */
static int save_scoped(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                       mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                       const mt_ckpt_file_opts *fo, char *tmpdir, size_t len, mt_err *e) {
  MT_TRY(e, mt_ckpt_save_begin(root, meta, reg, mesh, opts, tmpdir, len, e));
  mt_err local = {0};
  mt_ckpt_written w = {0};
  if (opts->mode == MT_CKPT_MODE_PER_WRITER)
    mt_ckpt_save_per_writer(tmpdir, meta, reg, mesh, st, opts, fo, &w, &local);
  else
    mt_ckpt_save_shared(tmpdir, meta, reg, mesh, st, opts, fo, &w, &local);
  int rc = 0;
  if (mt_ckpt_agree(&local)) {
    mt_ckpt_save_abandon(tmpdir, mesh);
    *e = local;
    rc = mt_err_pass(e);
  } else if (mt_ckpt_save_end(root, tmpdir, meta->step, opts->mode, opts->test_crash, opts->keep,
                              mesh, &w, e) != 0) {
    rc = mt_err_pass(e);
  }
  mt_ckpt_written_free(&w);
  return rc;
}

int mt_ckpt_save_with(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                      mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                      const mt_ckpt_file_opts *fo, double *write_s, mt_err *e) {
  double t0 = mt_now();
  char tmpdir[1024];
  mt_ckpt_h5_scope scope;
  mt_ckpt_h5_scope_begin(&scope);
  int rc = save_scoped(root, meta, reg, mesh, st, opts, fo, tmpdir, sizeof tmpdir, e);
  mt_ckpt_h5_scope_end(&scope);
  if (rc != 0) return mt_err_pass(e);
  if (write_s) *write_s = mt_now() - t0;
  return 0;
}

int mt_ckpt_save(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                 mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                 double *write_s, mt_err *e) {
  MT_TRY(e, mt_ckpt_save_with(root, meta, reg, mesh, st, opts, NULL, write_s, e));
  return 0;
}
