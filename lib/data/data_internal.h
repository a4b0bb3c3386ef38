/* Shared by the files of lib/data (not part of its API). */
#ifndef MT_DATA_INTERNAL_H
#define MT_DATA_INTERNAL_H

#include "data/data.h"

#include <string.h>

/* does file name s end with suffix (".bin")? */
static inline int mt_data_has_suffix(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* guard.c: reads of a token file's mapping that survive the file being cut
 * short under the run. install: the SIGBUS handler (once; a SIGBUS outside
 * a guarded read goes on to the handler that was there before). guarded:
 * fn(arg) under the guard: 0, or -1 when reading ds's mapping faulted (the
 * mapping is then marked, and mt_dataset_check reports it). */
void mt_data_guard_install(void);
/* the guard's slot for a mapping (taken now if new; -1 when all are taken:
 * said once, the mapping read unguarded); forget: the mapping's slot free */
int mt_data_guard_slot(const void *map, size_t bytes);
void mt_data_guard_forget(const void *map);
int mt_data_guarded(const mt_dataset *ds, void (*fn)(void *), void *arg);

#endif
