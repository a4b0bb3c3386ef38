/* The planner's C tests: a configuration from a model's settings and a
 * layout's, as meshplan's --set would give them. */
#ifndef MT_TESTS_PLAN_CONFIG_H
#define MT_TESTS_PLAN_CONFIG_H

#include <stdio.h>
#include <string.h>

#include "core/core.h"

#define N_OF(a) (int)(sizeof(a) / sizeof((a)[0]))

/* a config: the model's n_model "key=value" settings, then the layout's
 * (space-separated) */
static inline int plan_config_load(mt_config *cfg, const char **model, int n_model,
                                   const char *layout, mt_err *e) {
  char *over[48], buf[512];
  int n = 0;
  for (int i = 0; i < n_model && n < 48; i++) over[n++] = (char *)model[i];
  snprintf(buf, sizeof buf, "%s", layout);
  for (char *tok = strtok(buf, " "); tok && n < 48; tok = strtok(NULL, " ")) over[n++] = tok;
  return mt_config_load(cfg, NULL, n, over, e);
}

#endif
