/* mt_ckpt_save: the collective protocol around the two writers (agree on
 * the schema, make the temporary directory, write, agree, commit). */
#include "ckpt/ckpt_internal.h"

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

int mt_ckpt_save_begin(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                       mt_mesh *mesh, const mt_ckpt_save_opts *opts, char *tmpdir, size_t len,
                       mt_err *e) {
  int rank = mesh->world_rank;
  mt_ckpt_writer_wait(); /* HDF5 is used by one thread at a time */
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  mt_err local = {0};
  mt_ckpt_fault_init(rank, meta->step, &local);
  uint64_t h = schema_hash(reg);
  unsigned long long hmin = h, hmax = h;
  MPI_Allreduce(MPI_IN_PLACE, &hmin, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hmax, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  if (hmin != hmax)
    mt_err_set(&local, "checkpoint: ranks disagree on the tensor schema; nothing written");
  if (strcmp(opts->mode, "shared") != 0 && strcmp(opts->mode, "per-writer") != 0)
    mt_err_set(&local, "checkpoint: mode '%s' is not shared or per-writer", opts->mode);
  memset(tmpdir, 0, len);
  if (rank == 0 && !local.failed) {
    snprintf(tmpdir, len, "%s/step_%lld.tmp-%ld-%d", root, (long long)meta->step,
             (long)time(NULL), (int)getpid());
    int err = mt_ckpt_fault("create");
    if (err || mt_ckpt_mkdir_p(root) != 0 || mkdir(tmpdir, 0755) != 0)
      mt_ckpt_err_sys(&local, err ? err : errno, "checkpoint step %lld: rank 0 cannot create %s",
                      (long long)meta->step, tmpdir);
  }
  MPI_Bcast(tmpdir, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    *e = local;
    return -1;
  }
  mt_ckpt_test_crash_point(opts->test_crash, "create", rank);
  return 0;
}

void mt_ckpt_save_abandon(const char *tmpdir, mt_mesh *mesh) {
  /* every rank has agreed that the save failed, so no one writes there any more */
  if (mesh->world_rank == 0 && tmpdir[0]) mt_ckpt_remove_tree(tmpdir);
}

int mt_ckpt_save_end(const char *root, const char *tmpdir, int64_t step, const char *mode,
                     const char *crash, int keep, mt_mesh *mesh, mt_err *e) {
  mt_err local = {0};
  char final_dir[1100];
  snprintf(final_dir, sizeof final_dir, "%s/step_%lld", root, (long long)step);
  if (mesh->world_rank == 0)
    mt_ckpt_commit(root, tmpdir, final_dir, step, mode, crash, keep, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    mt_ckpt_save_abandon(tmpdir, mesh); /* gone already if the rename happened */
    *e = local;
    return -1;
  }
  return 0;
}

int mt_ckpt_save(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                 mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                 double *write_s, mt_err *e) {
  return mt_ckpt_save_with(root, meta, reg, mesh, st, opts, NULL, write_s, e);
}

int mt_ckpt_save_with(const char *root, const mt_ckpt_meta *meta, const mt_registry *reg,
                      mt_mesh *mesh, const mt_ckpt_state *st, const mt_ckpt_save_opts *opts,
                      const mt_ckpt_file_opts *fo, double *write_s, mt_err *e) {
  double t0 = mt_now();
  char tmpdir[1024];
  if (mt_ckpt_save_begin(root, meta, reg, mesh, opts, tmpdir, sizeof tmpdir, e) != 0) return -1;
  mt_err local = {0};
  if (strcmp(opts->mode, "per-writer") == 0)
    mt_ckpt_save_per_writer(tmpdir, meta, reg, mesh, st, opts, fo, &local);
  else
    mt_ckpt_save_shared(tmpdir, meta, reg, mesh, st, opts, fo, &local);
  if (mt_err_agree(&local, MPI_COMM_WORLD)) {
    mt_ckpt_save_abandon(tmpdir, mesh);
    *e = local;
    return -1;
  }
  if (mt_ckpt_save_end(root, tmpdir, meta->step, opts->mode, opts->test_crash, opts->keep, mesh,
                       e) != 0)
    return -1;
  if (write_s) *write_s = mt_now() - t0;
  return 0;
}
