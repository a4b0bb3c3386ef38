/* The file-system side of a checkpoint: directories, durable writes, the
 * commit (manifest, fsync, rename, `latest`), retention, and the manifest
 * check a loader makes. See the commit protocol in SCHEMA.md. */
#include "ckpt/ckpt_internal.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int mt_ckpt_fsync_path(const char *path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

int mt_ckpt_write_file_durable(const char *path, const char *text) {
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
int mt_ckpt_parse_step_dir(const char *name, int64_t *step) {
  if (strncmp(name, "step_", 5) != 0 || !name[5]) return 0;
  char *end = NULL;
  long long v = strtoll(name + 5, &end, 10);
  if (*end != '\0' || v < 0) return 0;
  *step = v;
  return 1;
}

void mt_ckpt_test_crash_point(const char *opt, const char *phase, int rank) {
  if (rank == 0 && opt && strcmp(opt, phase) == 0) {
    fprintf(stderr, "[rank 0] ckpt.test_crash: killing rank 0 at phase '%s'\n", phase);
    fflush(stderr);
    raise(SIGKILL);
  }
}

/* rank 0: manifest, fsync, rename, latest, retention */
int mt_ckpt_commit(const char *root, const char *tmpdir, const char *final_dir, int64_t step,
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
    mt_ckpt_fsync_path(p);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "name", de->d_name);
    cJSON_AddNumberToObject(f, "bytes", (double)mt_ckpt_file_size(p));
    cJSON_AddItemToArray(files, f);
  }
  if (d) closedir(d);
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", tmpdir, MT_CKPT_MANIFEST);
  int rc = mt_ckpt_write_file_durable(path, text);
  free(text);
  if (rc != 0 || mt_ckpt_fsync_path(tmpdir) != 0) {
    mt_err_set(e, "checkpoint: cannot write %s: %s", path, strerror(errno));
    return -1;
  }
  mt_ckpt_test_crash_point(crash, "rename", 0);
  /* a checkpoint of this step that exists already (a rerun) is replaced */
  if (mt_ckpt_file_size(final_dir) >= 0) {
    char old[1024];
    snprintf(old, sizeof old, "%s.old", tmpdir);
    if (rename(final_dir, old) == 0) mt_ckpt_remove_tree(old);
  }
  if (rename(tmpdir, final_dir) != 0 || mt_ckpt_fsync_path(root) != 0) {
    mt_err_set(e, "checkpoint: cannot rename %s to %s: %s", tmpdir, final_dir, strerror(errno));
    return -1;
  }
  mt_ckpt_test_crash_point(crash, "latest", 0);
  char latest[1024], target[64];
  snprintf(latest, sizeof latest, "%s/latest", root);
  snprintf(target, sizeof target, "step_%lld\n", (long long)step);
  if (mt_ckpt_write_file_durable(latest, target) != 0 || mt_ckpt_fsync_path(root) != 0) {
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
    if (strstr(de->d_name, ".tmp-") && strncmp(de->d_name, "step_", 5) == 0) mt_ckpt_remove_tree(p);
    else if (mt_ckpt_parse_step_dir(de->d_name, &s) && n < 4096) steps[n++] = s;
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
      mt_ckpt_remove_tree(p);
    }
    mt_ckpt_fsync_path(root);
  }
  return 0;
}

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
  }
  cJSON_Delete(o);
  return rc;
}
