/* meshreport's shared pieces (report.h). */
#include "report/report.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void mt_report_die(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: error: ", PROG);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(code);
}

char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 4096, n = 0;
  char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
    n += got;
    if (n + 1 == cap) {
      char *bigger = realloc(buf, cap * 2);
      if (!bigger) free(buf);
      buf = bigger, cap *= 2;
    }
  }
  fclose(f);
  if (buf) buf[n] = '\0';
  return buf;
}

cJSON *read_json(const char *path) {
  char *text = read_text(path);
  if (!text) return NULL;
  cJSON *j = cJSON_Parse(text);
  free(text);
  return j;
}

double num_or(const cJSON *o, const char *key, double fallback) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : fallback;
}

void fmt_into(char *dst, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(dst, cap, fmt, ap);
  va_end(ap);
}

void take_run_dir(const char *cmd, const char *a, const char **run) {
  if (a[0] == '-' && a[1])
    die_input("%s: unknown option '%s' (see %s %s --help)", cmd, a, PROG, cmd);
  if (*run) die_input("%s: one run directory, got '%s' and '%s'", cmd, *run, a);
  *run = a;
}

void need_run_dir(const char *cmd, const char *run) {
  if (!run) die_input("%s: no run directory given (see %s %s --help)", cmd, PROG, cmd);
}

void copy_str(char *dst, size_t cap, const char *src) { fmt_into(dst, cap, "%s", src ? src : ""); }

void fmt_num(char *buf, size_t cap, double v, const char *fmt) {
  if (isnan(v))
    snprintf(buf, cap, "-");
  else
    snprintf(buf, cap, fmt, v);
}

void plural(char *buf, size_t cap, int n, const char *what) {
  fmt_into(buf, cap, "%d %s%s", n, what, n == 1 ? "" : "s");
}

void csv_num(FILE *f, double v) {
  if (isnan(v))
    fputs(",", f);
  else
    fprintf(f, ",%.9g", v);
}

void path_join(char *out, const char *a, const char *b) {
  int n = b[0] == '/' || !a[0] ? snprintf(out, PATH_LEN, "%s", b)
                               : snprintf(out, PATH_LEN, "%s/%s", a, b);
  if (n < 0 || n >= PATH_LEN) die_input("path too long: %s/%s", a, b);
}

int is_dir(const char *p) {
  struct stat st;
  return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

FILE *open_out(const char *dir, const char *name, char *path) {
  path_join(path, dir, name);
  FILE *f = fopen(path, "w");
  if (!f) die_runtime("cannot write %s: %s", path, strerror(errno));
  return f;
}

void close_out(FILE *f, const char *path) {
  if (ferror(f) || fclose(f) != 0) die_runtime("writing %s failed", path);
}

int run_gnuplot(const char *dir, const char *script, char *why, size_t why_cap) {
  if (system("command -v gnuplot >/dev/null 2>&1") != 0) {
    const char *get = getenv("MODULEPATH") || getenv("MODULESHOME") || getenv("LMOD_CMD")
                          ? "module load gnuplot"
                      : access("/etc/debian_version", F_OK) == 0 ? "apt-get install gnuplot-nox"
                                                                 : "install gnuplot";
    snprintf(why, why_cap, "gnuplot not found: the plot script and its data are written; to "
                           "draw them: %s, then cd %s && gnuplot %s", get, dir, script);
    return -1;
  }
  char cmd[PATH_LEN * 2 + 64];
  snprintf(cmd, sizeof cmd, "cd '%s' && gnuplot '%s' > gnuplot.log 2>&1", dir, script);
  if (system(cmd) != 0) {
    snprintf(why, why_cap, "gnuplot failed (see %s/gnuplot.log)", dir);
    return -1;
  }
  return 0;
}
