/* An LD_PRELOAD shim that counts the OpenMP (libgomp) fork-joins and
 * barriers of a process: GOMP_parallel (a region: a fork and its closing
 * barrier), GOMP_barrier (an explicit or implied barrier, one call per
 * thread) and GOMP_loop_end (a worksharing loop's closing barrier, per
 * thread). At exit it appends one line to $OMP_COUNT_OUT. Built and used by
 * apps/scripts/bench-omp-count.sh. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

static long g_parallel, g_barrier, g_loop_end;

typedef void (*parallel_fn)(void (*)(void *), void *, unsigned, unsigned);
typedef void (*void_fn)(void);

#define REAL(name, type)                                                                          \
  static type real_##name;                                                                        \
  if (!real_##name) real_##name = (type)dlsym(RTLD_NEXT, #name)

void GOMP_parallel(void (*fn)(void *), void *data, unsigned threads, unsigned flags) {
  REAL(GOMP_parallel, parallel_fn);
  __atomic_add_fetch(&g_parallel, 1, __ATOMIC_RELAXED);
  real_GOMP_parallel(fn, data, threads, flags);
}

void GOMP_barrier(void) {
  REAL(GOMP_barrier, void_fn);
  __atomic_add_fetch(&g_barrier, 1, __ATOMIC_RELAXED);
  real_GOMP_barrier();
}

void GOMP_loop_end(void) {
  REAL(GOMP_loop_end, void_fn);
  __atomic_add_fetch(&g_loop_end, 1, __ATOMIC_RELAXED);
  real_GOMP_loop_end();
}

__attribute__((destructor)) static void report(void) {
  const char *path = getenv("OMP_COUNT_OUT");
  FILE *f = path ? fopen(path, "a") : NULL;
  if (!f) return;
  fprintf(f, "parallel %ld barrier %ld loop_end %ld\n", g_parallel, g_barrier, g_loop_end);
  fclose(f);
}
