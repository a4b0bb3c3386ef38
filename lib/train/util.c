/* Small pieces the train phases share: output files and JSON objects. */
#include "train/train_internal.h"

#include <errno.h>
#include <string.h>

void mt_train_gather_f64(mt_group *g, const double *mine, size_t n, double *all) {
  memset(all, 0, (size_t)g->size * n * sizeof(double));
  memcpy(all + (size_t)g->rank * n, mine, n * sizeof(double));
  mt_allreduce(g, all, (size_t)g->size * n, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
}

FILE *mt_train_open_out(const char *dir, const char *name, const char *mode) {
  char path[2 * MT_CFG_STR_MAX];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, mode);
  if (!f) mt_die("cannot write %s: %s", path, strerror(errno));
  return f;
}

