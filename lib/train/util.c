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

cJSON *mt_train_add_layout(cJSON *parent, const char *key, const mt_config *cfg, int world) {
  cJSON *lay = cJSON_AddObjectToObject(parent, key);
  cJSON_AddNumberToObject(lay, "world", world);
  cJSON_AddNumberToObject(lay, "dp", cfg->dp);
  cJSON_AddNumberToObject(lay, "tp", cfg->tp);
  cJSON_AddNumberToObject(lay, "pp", cfg->pp);
  cJSON_AddNumberToObject(lay, "cp", cfg->cp);
  if (cfg->cp > 1) cJSON_AddStringToObject(lay, "cp_mode", cfg->cp_mode);
  cJSON_AddNumberToObject(lay, "zero", cfg->zero);
  cJSON_AddBoolToObject(lay, "sp", cfg->sp);
  if (cfg->moe_experts > 0) { /* the folded mesh of the MoE blocks */
    cJSON_AddNumberToObject(lay, "ep", cfg->ep);
    cJSON_AddNumberToObject(lay, "etp", cfg->etp);
    cJSON_AddNumberToObject(lay, "edp", cfg->tp * cfg->cp * cfg->dp / (cfg->etp * cfg->ep));
  }
  return lay;
}

cJSON *mt_train_add_mem(cJSON *parent, const char *key, const double *bytes) {
  cJSON *mem = cJSON_AddObjectToObject(parent, key);
  for (int c = 0; c < MT_MEM_NCAT; c++)
    cJSON_AddNumberToObject(mem, mt_mem_cat_name((mt_mem_cat)c), bytes[c]);
  return mem;
}
