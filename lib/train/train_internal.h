/* Shared by lib/train's files (not part of the API). */
#ifndef MT_TRAIN_INTERNAL_H
#define MT_TRAIN_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "train/train.h"

/* <dir>/<name> opened with mode, or a rank-tagged fatal error naming it */
FILE *mt_train_open_out(const char *dir, const char *name, const char *mode);
/* {"device": kind, precision, GPU, memory, comm paths} added to parent */
void mt_train_device_json(const mt_trainer *t, cJSON *parent);

#endif
