/* The file-system side of a checkpoint: directories, durable writes, the
 * commit (manifest, fsync, rename, `latest`), retention, and the manifest
 * check a loader makes. See the commit protocol in SCHEMA.md.
 *
 * The helpers return 0, or -1 with errno set (also when the fault switch,
 * MT_CKPT_FAULT, makes them fail). */
#define _GNU_SOURCE /* renameat2 (RENAME_EXCHANGE), fallocate */
#include "ckpt/core/ckpt_core.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* the largest MANIFEST.json read (bytes): a manifest lists a few files per rank */
#define MANIFEST_MAX_BYTES (64 << 20)

static int fail_with(int err) {
  errno = err;
  return -1;
}

int mt_ckpt_fsync_path(const char *path) {
  int err = mt_ckpt_fault("sync");
  if (err) return fail_with(err);
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  err = errno;
  close(fd);
  return rc == 0 ? 0 : fail_with(err);
}

int mt_ckpt_pwrite_full(int fd, const void *buf, size_t bytes, int64_t off, const char *op) {
  const char *p = buf;
  while (bytes > 0) {
    size_t n = bytes;
    int err = mt_ckpt_fault_write(op, &n);
    if (err) return fail_with(err);
    ssize_t k = pwrite(fd, p, n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -1;
    if (k == 0) return fail_with(EIO); /* no progress, no error: never loop forever */
    /* a short write is no error: the rest goes in the next call, which
     * reports what stopped this one (ENOSPC, EFBIG) */
    p += k;
    off += k;
    bytes -= (size_t)k;
  }
  return 0;
}

int mt_ckpt_close_fd(int fd) {
  int rc = close(fd), err = rc != 0 ? errno : mt_ckpt_fault("close");
  return err ? fail_with(err) : 0;
}

int mt_ckpt_check_file_size(long long bytes) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
      (unsigned long long)bytes > (unsigned long long)rl.rlim_cur)
    return fail_with(EFBIG);
  return 0;
}

long long mt_ckpt_file_size_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1;
  return (long long)rl.rlim_cur;
}

void mt_ckpt_ignore_sigxfsz(void) {
  struct sigaction old;
  if (sigaction(SIGXFSZ, NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
      !(old.sa_flags & SA_SIGINFO)) {
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGXFSZ, &ign, NULL);
  }
}

int mt_ckpt_write_file_durable(const char *path, const char *text) {
  char tmp[1100];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int err = mt_ckpt_fault("create");
  if (err) return fail_with(err);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return -1;
  if (mt_ckpt_pwrite_full(fd, text, strlen(text), 0, "write") != 0) err = errno;
  if (!err) err = mt_ckpt_fault("sync");
  if (!err && fsync(fd) != 0) err = errno;
  if (mt_ckpt_close_fd(fd) != 0 && !err) err = errno;
  if (!err) err = mt_ckpt_fault("rename");
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) {
    unlink(tmp);
    return fail_with(err);
  }
  return 0;
}

int mt_ckpt_remove_tree(const char *path) {
  DIR *d = opendir(path);
  if (!d) return unlink(path);
  struct dirent *de;
  char child[1024];
  while ((de = readdir(d))) {
    if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
    snprintf(child, sizeof child, "%s/%s", path, de->d_name);
    struct stat st;
    if (lstat(child, &st) == 0 && S_ISDIR(st.st_mode)) mt_ckpt_remove_tree(child);
    else unlink(child);
  }
  closedir(d);
  return rmdir(path);
}

long long mt_ckpt_file_size(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

int mt_ckpt_mkdir_p(const char *path) {
  char tmp[1100];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
    errno = ENAMETOOLONG; /* not a shorter directory than asked for */
    return -1;
  }
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(tmp, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int mt_ckpt_reserve(int fd, long long bytes, int keep_size) {
  int err = mt_ckpt_fault("write");
  if (err) return fail_with(err);
  /* Linux fallocate, not posix_fallocate: where a file system cannot reserve
   * space, glibc's fallback would write the whole file; then skip instead */
  if (bytes > 0 && fallocate(fd, keep_size ? FALLOC_FL_KEEP_SIZE : 0, 0, (off_t)bytes) != 0 &&
      errno != EOPNOTSUPP && errno != ENOSYS)
    return -1;
  return 0;
}

/* A full disk must show as an error of our own calls or of H5Dwrite, never
 * inside H5Fclose: a close that fails while flushing metadata leaves HDF5
 * 1.10 with a half-closed file that crashes the process at MPI_Finalize.
 * So the space that close needs is held in a ballast file beside the file
 * before HDF5 makes it, and given back just before H5Fclose. */
int mt_ckpt_ballast_take(mt_ckpt_ballast *b, const char *dir, const char *tag, long long bytes) {
  snprintf(b->path, sizeof b->path, "%s/.ballast-%s", dir, tag);
  b->fd = open(b->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (b->fd < 0) return -1;
  if (fallocate(b->fd, 0, 0, (off_t)bytes) != 0 && errno != EOPNOTSUPP && errno != ENOSYS) {
    int err = errno;
    mt_ckpt_ballast_release(b);
    return fail_with(err);
  }
  return 0;
}

void mt_ckpt_ballast_release(mt_ckpt_ballast *b) {
  if (b->fd < 0) return;
  close(b->fd);
  unlink(b->path);
  b->fd = -1;
}

int mt_ckpt_parse_step_dir(const char *name, int64_t *step) {
  if (strncmp(name, "step_", 5) != 0 || !name[5]) return 0;
  char *end = NULL;
  long long v = strtoll(name + 5, &end, 10);
  if (*end != '\0' || v < 0) return 0;
  *step = v;
  return 1;
}

void mt_ckpt_test_crash_point(mt_ckpt_crash opt, mt_ckpt_crash phase, int rank) {
  if (rank == 0 && opt != MT_CKPT_CRASH_NONE && opt == phase) {
    fprintf(stderr, "[rank 0] ckpt.test_crash: killing rank 0 at phase '%s'\n",
            mt_ckpt_crash_name(phase));
    fflush(stderr);
    raise(SIGKILL);
  }
}

/* ------------------------------------------------------------------ */
/* commit and retention (rank 0)                                       */

/* Move path out of sight (a name no loader takes, in the same directory),
 * then delete it: a kill in the middle leaves a `.trash-*` that the next
 * retention removes, never a half-deleted step_<N>/. */
static void discard(const char *root, const char *path) {
  char trash[1200];
  const char *base = strrchr(path, '/');
  snprintf(trash, sizeof trash, "%s/.trash-%s-%d", root, base ? base + 1 : path, (int)getpid());
  if (rename(path, trash) != 0) {
    if (errno != ENOENT) mt_warn("checkpoint retention: cannot move %s aside: %s", path, strerror(errno));
    return;
  }
  mt_ckpt_fsync_path(root);
  if (mt_ckpt_remove_tree(trash) != 0)
    mt_warn("checkpoint retention: cannot delete %s: %s", trash, strerror(errno));
}

/* Replace final_dir by tmpdir in one step where the file system can swap two
 * names (the old checkpoint then sits under tmpdir's name, a name no loader
 * takes); else move the old one aside first. */
int mt_ckpt_install(const char *root, const char *tmpdir, const char *final_dir) {
  int err = mt_ckpt_fault("rename");
  if (err) return fail_with(err);
  if (mt_ckpt_file_size(final_dir) < 0) return rename(tmpdir, final_dir);
#ifdef SYS_renameat2
  if (syscall(SYS_renameat2, AT_FDCWD, tmpdir, AT_FDCWD, final_dir, RENAME_EXCHANGE) == 0) {
    discard(root, tmpdir);
    return 0;
  }
#endif
  discard(root, final_dir);
  return rename(tmpdir, final_dir);
}

/* complete checkpoints beyond the newest `keep`, leftovers of crashed saves
 * (*.tmp-*) and of interrupted deletions (.trash-*) */
void mt_ckpt_retention(const char *root, int keep) {
  DIR *rd = opendir(root);
  if (!rd) return;
  int64_t *steps = NULL;
  int n = 0, cap = 0;
  struct dirent *de;
  while ((de = readdir(rd))) {
    int64_t s;
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", root, de->d_name);
    if (!strncmp(de->d_name, ".trash-", 7)) {
      mt_ckpt_remove_tree(p);
    } else if (strstr(de->d_name, ".tmp-") && strncmp(de->d_name, "step_", 5) == 0) {
      discard(root, p);
    } else if (mt_ckpt_parse_step_dir(de->d_name, &s)) {
      if (n == cap) {
        int64_t *grown = realloc(steps, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *steps);
        if (!grown) break;
        steps = grown;
      }
      steps[n++] = s;
    }
  }
  closedir(rd);
  if (keep > 0 && n > keep) {
    /* newest first */
    for (int i = 1; i < n; i++)
      for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
        int64_t t = steps[j];
        steps[j] = steps[j - 1];
        steps[j - 1] = t;
      }
    for (int i = keep; i < n; i++) {
      char p[1200];
      snprintf(p, sizeof p, "%s/step_%lld", root, (long long)steps[i]);
      discard(root, p);
    }
  }
  free(steps);
}

int mt_ckpt_write_manifest(const char *tmpdir, int64_t step, mt_ckpt_mode mode) {
  cJSON *o = cJSON_CreateObject();
  char version[32];
  snprintf(version, sizeof version, "%d.%d.%d", MT_CKPT_VERSION_MAJOR, MT_CKPT_VERSION_MINOR,
           MT_CKPT_VERSION_PATCH);
  cJSON_AddStringToObject(o, "format", MT_CKPT_FORMAT);
  cJSON_AddStringToObject(o, "version", version);
  cJSON_AddNumberToObject(o, "step", (double)step);
  cJSON_AddStringToObject(o, "mode", mt_ckpt_mode_name(mode));
  cJSON_AddNumberToObject(o, "created_unix", (double)time(NULL));
  cJSON *files = cJSON_AddArrayToObject(o, "files");
  DIR *d = opendir(tmpdir);
  if (!d) {
    int err = errno;
    cJSON_Delete(o);
    return fail_with(err);
  }
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.' || !strcmp(de->d_name, MT_CKPT_MANIFEST)) continue;
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", tmpdir, de->d_name);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "name", de->d_name);
    cJSON_AddNumberToObject(f, "bytes", (double)mt_ckpt_file_size(p));
    cJSON_AddItemToArray(files, f);
  }
  closedir(d);
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_MANIFEST);
  int rc = mt_ckpt_write_file_durable(path, text);
  free(text);
  return rc;
}

/* ------------------------------------------------------------------ */
/* reading a manifest                                                  */

int mt_ckpt_parse_version(const char *text, int *major, int *minor, int *patch) {
  char tail;
  return sscanf(text, "%d.%d.%d%c", major, minor, patch, &tail) == 3 && *major >= 0 &&
                 *minor >= 0 && *patch >= 0
             ? 0
             : -1;
}

int mt_ckpt_check_version(const char *where, const char *version, mt_err *e) {
  int major, minor, patch;
  if (mt_ckpt_parse_version(version, &major, &minor, &patch) != 0) {
    mt_err_set(e, "%s: unreadable format version '%s'", where, version);
    return -1;
  }
  if (major > MT_CKPT_VERSION_MAJOR) {
    mt_err_set(e, "%s: format version %s is newer than this meshtrain reads (%d.x)", where,
               version, MT_CKPT_VERSION_MAJOR);
    return -1;
  }
  if (major < MT_CKPT_VERSION_MAJOR) { /* no older format exists */
    mt_err_set(e, "%s: format version %s is older than any this meshtrain reads (%d.x)", where,
               version, MT_CKPT_VERSION_MAJOR);
    return -1;
  }
  return 0;
}

int mt_ckpt_check_manifest(const char *dir, mt_ckpt_manifest *m, mt_err *e) {
  memset(m, 0, sizeof *m);
  char path[1100];
  snprintf(path, sizeof path, "%s/%s", dir, MT_CKPT_MANIFEST);
  long long flen = mt_ckpt_file_size(path);
  FILE *f = flen >= 0 ? fopen(path, "r") : NULL;
  if (!f) {
    mt_err_set(e, "%s: no %s (not a complete checkpoint)", dir, MT_CKPT_MANIFEST);
    return -1;
  }
  if (flen > MANIFEST_MAX_BYTES) {
    fclose(f);
    mt_err_set(e, "%s: %lld bytes, more than a manifest can be", path, flen);
    return -1;
  }
  char *buf = mt_malloc((size_t)flen + 1);
  size_t n = fread(buf, 1, (size_t)flen, f);
  fclose(f);
  buf[n] = '\0';
  cJSON *o = cJSON_Parse(buf);
  free(buf);
  cJSON *fmt = cJSON_GetObjectItem(o, "format"), *files = cJSON_GetObjectItem(o, "files");
  cJSON *st = cJSON_GetObjectItem(o, "step"), *md = cJSON_GetObjectItem(o, "mode");
  cJSON *ver = cJSON_GetObjectItem(o, "version");
  int rc = -1;
  if (!o || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, MT_CKPT_FORMAT) != 0 ||
      !cJSON_IsArray(files) || !cJSON_IsNumber(st) || !cJSON_IsString(md)) {
    mt_err_set(e, "%s: not a meshtrain checkpoint manifest", path);
  } else if (!cJSON_IsString(ver)) {
    mt_err_set(e, "%s: manifest has no format version", path);
  } else if (mt_ckpt_check_version(dir, ver->valuestring, e) != 0) {
    rc = mt_err_pass(e);
  } else if (st->valuedouble < 0 || st->valuedouble > 9e15 ||
             st->valuedouble != (double)(int64_t)st->valuedouble) {
    mt_err_set(e, "%s: step %g is not a step number", path, st->valuedouble);
  } else if (strcmp(md->valuestring, "shared") != 0 && strcmp(md->valuestring, "per-writer") != 0) {
    mt_err_set(e, "%s: checkpoint mode '%s' cannot be read by this build (shared|per-writer)", dir,
               md->valuestring);
  } else if (cJSON_GetArraySize(files) == 0) {
    mt_err_set(e, "%s: the manifest lists no files", dir);
  } else {
    rc = 0;
  }
  if (rc != 0) {
    cJSON_Delete(o);
    return -1;
  }
  m->step = (int64_t)st->valuedouble;
  m->mode = strcmp(md->valuestring, "shared") == 0 ? MT_CKPT_MODE_SHARED : MT_CKPT_MODE_PER_WRITER;
  snprintf(m->version, sizeof m->version, "%s", ver->valuestring);
  const char *main_file = m->mode == MT_CKPT_MODE_SHARED ? MT_CKPT_SHARED_FILE : MT_CKPT_INDEX_FILE;
  int has_main = 0;
  cJSON *it;
  cJSON_ArrayForEach(it, files) {
    cJSON *nm = cJSON_GetObjectItem(it, "name"), *by = cJSON_GetObjectItem(it, "bytes");
    if (!cJSON_IsString(nm) || !cJSON_IsNumber(by) || !nm->valuestring[0] ||
        strchr(nm->valuestring, '/') || nm->valuestring[0] == '.' || by->valuedouble < 0) {
      mt_err_set(e, "%s: the manifest has a malformed file entry", dir);
      rc = -1;
      break;
    }
    char fp[1200];
    snprintf(fp, sizeof fp, "%s/%s", dir, nm->valuestring);
    long long have = mt_ckpt_file_size(fp);
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
    has_main |= strcmp(nm->valuestring, main_file) == 0;
    m->total_bytes += have;
    m->n_files++;
  }
  if (rc == 0 && !has_main) {
    mt_err_set(e, "%s: the manifest of a %s checkpoint does not list %s", dir,
               mt_ckpt_mode_name(m->mode), main_file);
    rc = -1;
  }
  cJSON_Delete(o);
  return rc;
}

long long mt_ckpt_metadata_bytes(long long datasets, long long boxes, long long small_bytes) {
  /* measured (HDF5 1.10): about 0.3 KiB per plain dataset, 0.5 KiB with our
   * attributes, 0.2 KiB per virtual mapping; twice that and more here, and
   * a base for the superblock and the groups */
  return (16LL << 10) + 1024LL * datasets + 1024LL * boxes + 2 * small_bytes;
}
