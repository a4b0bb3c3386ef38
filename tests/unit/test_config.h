/* The configuration tests' helpers (test_config.c, test_config_enums.c):
 * temp files in g_dir, loads that must succeed or fail with one line that
 * holds given fragments, and the bytes of a key's field. Each test program
 * is one translation unit: the definitions live here, static. */
#ifndef MT_TESTS_TEST_CONFIG_H
#define MT_TESTS_TEST_CONFIG_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../check.h"
#include "core/core.h"

static char g_dir[256];
static char g_files[64][320];
static int g_nfiles = 0;

/* Write text to a new file in the temp dir; returns its path. */
static inline const char *write_file(const char *name, const char *text) {
  if (g_nfiles == 64) {
    fprintf(stderr, "test_config: too many temp files\n");
    exit(1);
  }
  char *path = g_files[g_nfiles++];
  snprintf(path, sizeof g_files[0], "%s/%s", g_dir, name);
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "test_config: cannot write %s\n", path);
    exit(1);
  }
  return path;
}

/* Load and expect success. */
static inline int load_ok(mt_config *cfg, const char *path, int n, char *const *over,
                          const char *what) {
  mt_err e = {0};
  int rc = mt_config_load(cfg, path, n, over, &e);
  if (rc != 0 || e.failed) {
    MT_FAIL("%s: expected success, got rc=%d: %s", what, rc, e.msg);
    return 1;
  }
  return 0;
}

/* Load and expect failure with a message containing every given fragment. */
static inline void load_err(const char *path, int n, char *const *over, const char *what,
                            ...) {
  mt_config cfg;
  mt_err e = {0};
  int rc = mt_config_load(&cfg, path, n, over, &e);
  if (rc == 0 || !e.failed) {
    MT_FAIL("%s: expected an error, got success", what);
    return;
  }
  if (strchr(e.msg, '\n')) MT_FAIL("%s: message is not one line: %s", what, e.msg);
  va_list ap;
  va_start(ap, what);
  for (const char *frag; (frag = va_arg(ap, const char *));)
    if (!strstr(e.msg, frag)) MT_FAIL("%s: message lacks \"%s\": %s", what, frag, e.msg);
  va_end(ap);
}

static inline void err_file(const char *text, const char *what, const char *frag1,
                            const char *frag2, const char *frag3) {
  char name[64];
  snprintf(name, sizeof name, "bad%d.ini", g_nfiles);
  const char *path = write_file(name, text);
  load_err(path, 0, NULL, what, path, frag1, frag2, frag3, (const char *)NULL);
}

static inline void err_set(const char *over, const char *what, const char *frag1,
                           const char *frag2, const char *frag3) {
  char *o[1] = {(char *)over};
  load_err(NULL, 1, o, what, "--set", frag1, frag2, frag3, (const char *)NULL);
}

/* the bytes of key k's field in mt_config: an enumerated key is an int */
static inline size_t field_size(const mt_cfg_key *k) {
  return k->choices                  ? sizeof(int)
         : k->type == MT_CFG_STRING ? MT_CFG_STR_MAX
         : k->type == MT_CFG_DOUBLE ? sizeof(double)
                                    : sizeof(int);
}

/* the temp dir (TMPDIR or /tmp), made for the program; 1 if it cannot be */
static inline int config_test_begin(const char *prog) {
  const char *tmp = getenv("TMPDIR");
  snprintf(g_dir, sizeof g_dir, "%s/mt_%s_XXXXXX", tmp && tmp[0] ? tmp : "/tmp", prog);
  if (!mkdtemp(g_dir)) {
    perror(prog);
    return 1;
  }
  return 0;
}

/* its files and dir removed; the program's exit status */
static inline int config_test_end(const char *prog) {
  for (int i = 0; i < g_nfiles; i++) unlink(g_files[i]);
  if (rmdir(g_dir) != 0) fprintf(stderr, "%s: note: could not remove %s\n", prog, g_dir);
  return mt_check_summary(prog);
}

#endif
