/* An HDF5 file of the checkpoint, made so that no HDF5 call can fail on a
 * full disk or a file-size limit.
 *
 * HDF5 1.10 cannot recover from a failed H5Fclose: the file's identifier
 * stays half-destroyed and the process crashes when the library shuts down
 * (in MPI_Finalize or at exit), so the rank dies with a segfault instead of
 * reporting the error. A file HDF5 cannot extend to its allocated size (the
 * file-size limit, RLIMIT_FSIZE) or whose metadata finds the disk full
 * fails exactly there. So every file of a checkpoint is made in this order:
 *
 *   1. the whole file's size (an upper bound: data, alignment, metadata) is
 *      tried first on an empty file with ftruncate, which the kernel refuses
 *      with EFBIG beyond the file-size limit or the file system's largest
 *      file: no HDF5 object exists yet, the error is an ordinary one;
 *   2. a ballast file holds the space the metadata needs at close, from
 *      before HDF5 makes the file until the reservation below;
 *   3. HDF5 makes the file and every dataset contiguous, its space allocated
 *      at creation and never filled (HDF5 writes no data at all);
 *   4. the ballast is given back and the file's blocks [0, bound) are
 *      reserved (fallocate, keeping the size): a full disk shows here, on
 *      this rank, as ENOSPC (and the ballast's space is there for 5);
 *   5. H5Fclose writes the metadata into reserved blocks;
 *   6. the caller writes every dataset's bytes with pwrite at the offsets
 *      HDF5 chose (every return checked; a short write continued), then
 *      fsync and close, both checked.
 * After a failure at 4 or before the data, the file is still closed cleanly
 * (5 cannot fail: the size was tried, the metadata space held). */
#include "ckpt/core/ckpt_core.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* the size tried first: the file-size limit and the file system's largest
 * file refuse it here, with EFBIG */
static int try_size(const char *path, long long bound, int exists) {
  int fd = open(path, O_WRONLY | O_CREAT | (exists ? 0 : O_EXCL), 0644);
  if (fd < 0) return -1;
  int err = 0;
  if (mt_ckpt_check_file_size(bound) != 0 || ftruncate(fd, (off_t)bound) != 0) err = errno;
  if (ftruncate(fd, 0) != 0 && !err) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (err) {
    if (!exists) unlink(path);
    errno = err;
    return -1;
  }
  return 0;
}

int mt_ckpt_h5out_create(mt_ckpt_h5out *o, const char *path, long long bound,
                         long long metadata_bytes, hid_t fapl, int exists, const char *where,
                         mt_err *e) {
  memset(o, 0, sizeof *o);
  o->file = -1;
  o->fd = -1;
  o->ballast.fd = -1;
  snprintf(o->path, sizeof o->path, "%s", path);
  o->bound = bound;
  int err = mt_ckpt_fault("create");
  if (!err && try_size(path, bound, exists) != 0) err = errno;
  if (err == EFBIG) {
    long long limit = mt_ckpt_file_size_limit();
    char why[160] = "";
    if (limit >= 0)
      snprintf(why, sizeof why, " (the file-size limit, ulimit -f, is %lld bytes; this file "
               "takes up to %lld)", limit, bound);
    mt_err_runtime(e, "%s: %s%s", where, strerror(EFBIG), why);
    return -1;
  }
  if (err) {
    mt_ckpt_err_sys(e, err, "%s", where);
    return -1;
  }
  char dir[1100];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = '\0';
  const char *base = slash ? slash + 1 : path;
  if (mt_ckpt_ballast_take(&o->ballast, slash ? dir : ".", base, metadata_bytes) != 0) {
    mt_ckpt_err_sys(e, errno, "%s", where);
    unlink(path);
    return -1;
  }
  o->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (o->file < 0) {
    mt_ckpt_err_h5(e, "%s", where);
    mt_ckpt_ballast_release(&o->ballast);
    unlink(path);
    return -1;
  }
  return 0;
}

hid_t mt_ckpt_h5out_dataset(mt_ckpt_h5out *o, hid_t loc, const char *name, hid_t type, int ndim,
                            const int64_t *dims, hid_t lcpl, int64_t *offset, const char *where,
                            mt_err *e) {
  hsize_t d[MT_MAX_DIMS];
  for (int k = 0; k < ndim; k++) d[k] = (hsize_t)dims[k];
  hid_t s = H5Screate_simple(ndim, d, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE), ds = -1;
  /* contiguous, the space allocated now and never filled: every byte is
   * written by us, with pwrite, after H5Fclose */
  if (s >= 0 && dcpl >= 0 && H5Pset_layout(dcpl, H5D_CONTIGUOUS) >= 0 &&
      H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY) >= 0 &&
      H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) >= 0)
    ds = H5Dcreate2(loc, name, type, s, lcpl, dcpl, H5P_DEFAULT);
  *offset = -1;
  if (ds >= 0) {
    haddr_t a = H5Dget_offset(ds);
    if (a == HADDR_UNDEF) {
      H5Dclose(ds);
      ds = -1;
    } else {
      *offset = (int64_t)a;
    }
  }
  if (ds < 0) mt_ckpt_err_h5(e, "%s", where);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (s >= 0) H5Sclose(s);
  (void)o;
  return ds;
}

int mt_ckpt_h5out_close(mt_ckpt_h5out *o, const char *where, mt_err *e) {
  if (o->file < 0) return e->failed ? -1 : 0;
  /* 4. the blocks of the whole file, metadata included, before HDF5 writes
   * anything into it (keeping the size: HDF5 extends the file itself at
   * close). The ballast goes first: the reservation covers what it held,
   * and after a failed reservation its space is there for the metadata. */
  mt_ckpt_ballast_release(&o->ballast);
  if (!e->failed) {
    int err = 0;
    o->fd = open(o->path, O_WRONLY);
    if (o->fd < 0 || mt_ckpt_reserve(o->fd, o->bound, 1) != 0) err = errno;
    if (err) {
      mt_ckpt_err_sys(e, err, "%s", where);
      struct stat sb; /* what a failed reservation took beyond the end goes back */
      if (o->fd >= 0 && fstat(o->fd, &sb) == 0) (void)!ftruncate(o->fd, sb.st_size);
    }
  }
  /* 5. the metadata */
  if (H5Fclose(o->file) < 0) mt_ckpt_err_h5(e, "%s", where);
  o->file = -1;
  return e->failed ? -1 : 0;
}

int mt_ckpt_h5out_finish(mt_ckpt_h5out *o, int sync, const char *where, mt_err *e) {
  int err = 0;
  if (o->fd >= 0) {
    if (sync && !e->failed && (err = mt_ckpt_fault("sync")) == 0 && fsync(o->fd) != 0) err = errno;
    /* the reserved blocks beyond the file's end go back (ftruncate to the
     * same size) */
    struct stat sb;
    if (fstat(o->fd, &sb) == 0 && ftruncate(o->fd, sb.st_size) != 0 && !err && !e->failed)
      err = errno;
    if (mt_ckpt_close_fd(o->fd) != 0 && !err && !e->failed) err = errno;
    o->fd = -1;
  }
  if (err) mt_ckpt_err_sys(e, err, "%s", where);
  mt_ckpt_ballast_release(&o->ballast);
  return e->failed ? -1 : 0;
}
