/* Small pieces the train phases share: output files and JSON objects. */
#include "train/train_internal.h"

#include <errno.h>
#include <string.h>

FILE *mt_train_open_out(const char *dir, const char *name, const char *mode) {
  char path[2 * MT_CFG_STR_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, mode);
  if (!f) mt_die("cannot write %s: %s", path, strerror(errno));
  return f;
}

