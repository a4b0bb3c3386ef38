/* Memory accounting: every long-lived buffer is allocated through
 * mt_mem_alloc with a category, so the memory report per rank (parameters,
 * gradients, optimizer, activations) is counted, not estimated. */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static size_t g_cur[MT_MEM_NCAT], g_peak[MT_MEM_NCAT];
static const char *g_names[MT_MEM_NCAT] = {"params", "grads", "optimizer",
                                           "activations", "comm", "other",
                                           "gathered"};

void mt_mem_count(mt_mem_cat cat, size_t bytes) {
  g_cur[cat] += bytes;
  if (g_cur[cat] > g_peak[cat]) g_peak[cat] = g_cur[cat];
}

void mt_mem_uncount(mt_mem_cat cat, size_t bytes) {
  g_cur[cat] -= bytes <= g_cur[cat] ? bytes : g_cur[cat];
}

void *mt_mem_alloc(mt_mem_cat cat, size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void *p = NULL;
  if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0 || !p)
    mt_die("out of memory allocating %zu bytes of %s", bytes, g_names[cat]);
  memset(p, 0, rounded ? rounded : 64);
  mt_mem_count(cat, bytes);
  return p;
}

void mt_mem_free(mt_mem_cat cat, void *p, size_t bytes) {
  if (!p) return;
  free(p);
  mt_mem_uncount(cat, bytes);
}

size_t mt_mem_current(mt_mem_cat cat) { return g_cur[cat]; }
size_t mt_mem_peak(mt_mem_cat cat) { return g_peak[cat]; }
const char *mt_mem_cat_name(mt_mem_cat cat) { return g_names[cat]; }

size_t mt_mem_peak_rss(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}
