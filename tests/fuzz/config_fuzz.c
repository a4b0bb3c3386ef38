/* libFuzzer target for the configuration loader (apps/scripts/fuzz-config.sh
 * builds and runs it; not part of the suite). The first byte picks what the
 * rest is: an INI file (even), or "section.key=value" overrides, one per
 * line (odd). Beyond the sanitizers' findings it checks two promises of
 * mt_config_load: an error is one line of text, and a configuration it
 * accepts survives mt_config_write_ini -> mt_config_load unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static void check_error(const mt_err *e) {
  if (!e->failed) return;
  if (!e->msg[0] || strchr(e->msg, '\n')) {
    fprintf(stderr, "fuzz: an error message that is not one line: '%s'\n", e->msg);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
  if (size < 1 || size > 1 << 16) return 0;
  mt_config cfg;
  mt_err e = {0};
  int rc;
  if (data[0] % 2 == 0) { /* an INI file */
    char path[] = "/tmp/mt_fuzz_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 0;
    if (write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) {
      close(fd);
      unlink(path);
      return 0;
    }
    close(fd);
    rc = mt_config_load(&cfg, path, 0, NULL, &e);
    unlink(path);
  } else { /* overrides, one per line */
    char *text = malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    char *over[16];
    int n = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line && n < 16;
         line = strtok_r(NULL, "\n", &save))
      over[n++] = line;
    rc = mt_config_load(&cfg, NULL, n, over, &e);
    free(text);
  }
  check_error(&e);
  if (rc != 0) return 0;
  /* accepted: written out and read back, the same configuration */
  char path[] = "/tmp/mt_fuzz_ini_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return 0;
  FILE *f = fdopen(fd, "w");
  mt_config_write_ini(&cfg, f);
  fclose(f);
  mt_config again;
  mt_err e2 = {0};
  if (mt_config_load(&again, path, 0, NULL, &e2) != 0) {
    fprintf(stderr, "fuzz: an accepted configuration does not load back: %s\n", e2.msg);
    abort();
  }
  unlink(path);
  if (memcmp(&cfg, &again, sizeof cfg) != 0) {
    fprintf(stderr, "fuzz: an accepted configuration changed when written out and read back\n");
    abort();
  }
  return 0;
}
