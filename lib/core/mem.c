/* Memory accounting: every long-lived buffer is allocated through
 * mt_mem_alloc with a category, so the memory report per rank (parameters,
 * gradients, optimizer, activations) is counted, not estimated. */
#include "core/core.h"

#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* the process's own account, and the one counting now */
static mt_mem_account g_own;
static mt_mem_account *g_acct = &g_own;
static const char *g_names[MT_MEM_NCAT] = {"params", "grads", "optimizer",
                                           "activations", "comm", "other",
                                           "gathered"};

void mt_mem_count(mt_mem_cat cat, size_t bytes) {
  g_acct->cur[cat] += bytes;
  if (g_acct->cur[cat] > g_acct->peak[cat]) g_acct->peak[cat] = g_acct->cur[cat];
}

void mt_mem_uncount(mt_mem_cat cat, size_t bytes) {
  g_acct->cur[cat] -= bytes <= g_acct->cur[cat] ? bytes : g_acct->cur[cat];
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

mt_mem_account *mt_mem_account_use(mt_mem_account *a) {
  mt_mem_account *prev = g_acct == &g_own ? NULL : g_acct;
  g_acct = a ? a : &g_own;
  return prev;
}

size_t mt_mem_current(mt_mem_cat cat) { return g_acct->cur[cat]; }
size_t mt_mem_peak(mt_mem_cat cat) { return g_acct->peak[cat]; }
const char *mt_mem_cat_name(mt_mem_cat cat) { return g_names[cat]; }

size_t mt_mem_peak_rss(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}
