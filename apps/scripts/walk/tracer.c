/* The tracer of walk-step.sh: -finstrument-functions hooks that record the
 * distinct (caller, callee, call site) triples, as offsets from the
 * executable's load base, of one window of calls: a window starts at each
 * entry of the function at offset MT_TRACE_MARK, and MT_TRACE_PHASE (default
 * 2) picks which. Written at exit to MT_TRACE_OUT by the process whose Open
 * MPI rank is 0. Compiled without instrumentation and linked into an
 * instrumented meshtrain; not part of meshtrain. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#define NI __attribute__((no_instrument_function))
static __thread uintptr_t stk[8192];
static __thread int depth;
static uintptr_t base, mark;
static int phase, want = 2, inited;
#define HN (1 << 20)
static uintptr_t ha[HN], hb[HN], hc[HN];
static void NI init(void *fn) {
  Dl_info di;
  if (dladdr(fn, &di)) base = (uintptr_t)di.dli_fbase;
  const char *m = getenv("MT_TRACE_MARK"), *w = getenv("MT_TRACE_PHASE");
  mark = m ? strtoull(m, NULL, 0) : 0;
  if (w) want = atoi(w);
  inited = 1;
}
static void NI add(uintptr_t a, uintptr_t b, uintptr_t c) {
  uint64_t h = (a * 0x9E3779B97F4A7C15ULL) ^ (b * 0xBF58476D1CE4E5B9ULL) ^ (c * 0x94D049BB133111EBULL);
  for (uint64_t i = h % HN;; i = (i + 1) % HN) {
    if (ha[i] == a && hb[i] == b && hc[i] == c) return;
    if (!ha[i] && !hb[i]) { ha[i] = a; hb[i] = b; hc[i] = c; return; }
  }
}
void NI __cyg_profile_func_enter(void *fn, void *site) {
  if (!inited) init(fn);
  uintptr_t off = (uintptr_t)fn - base;
  if (off == mark) phase++;
  if (phase == want && depth > 0) add(stk[depth - 1] + 1, off + 1, (uintptr_t)site - base + 1);
  if (depth < 8192) stk[depth] = off;
  depth++;
}
void NI __cyg_profile_func_exit(void *fn, void *site) {
  (void)fn, (void)site;
  if (depth > 0) depth--;
}
__attribute__((destructor)) static void NI dump(void) {
  const char *r = getenv("OMPI_COMM_WORLD_RANK"), *out = getenv("MT_TRACE_OUT");
  if (!out || (r && strcmp(r, "0") != 0)) return;
  FILE *f = fopen(out, "w");
  if (!f) return;
  for (int i = 0; i < HN; i++)
    if (ha[i] || hb[i]) fprintf(f, "%lx %lx %lx\n", (unsigned long)(ha[i] - 1), (unsigned long)(hb[i] - 1), (unsigned long)(hc[i] - 1));
  fclose(f);
}
