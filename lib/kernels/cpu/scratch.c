/* Per-thread scratch of the CPU kernels: slots grown to the largest request
 * and kept between calls (a fresh malloc of blocks above glibc's mmap
 * threshold faulted their pages in on every call). A pthread key's
 * destructor frees a thread's slots when it exits (an OpenMP team that
 * shrinks ends threads); the main thread's stay reachable through its
 * thread-locals until the process exits. */
#include "kernels/cpu/cpu_internal.h"

#include <pthread.h>
#include <stdlib.h>

static _Thread_local void *g_buf[MT_CPU_SCRATCH_SLOTS];
static _Thread_local size_t g_buf_n[MT_CPU_SCRATCH_SLOTS];
static pthread_key_t g_buf_key;
static pthread_once_t g_buf_once = PTHREAD_ONCE_INIT;

static void free_bufs(void *unused) {
  (void)unused;
  for (int i = 0; i < MT_CPU_SCRATCH_SLOTS; i++) {
    free(g_buf[i]);
    g_buf[i] = NULL;
    g_buf_n[i] = 0;
  }
}

static void make_buf_key(void) {
  if (pthread_key_create(&g_buf_key, free_bufs) != 0)
    mt_die("CPU kernels: no thread-specific key for the scratch");
}

void *mt_cpu_scratch(int slot, size_t n) {
  if (slot < 0 || slot >= MT_CPU_SCRATCH_SLOTS) mt_die("CPU kernels: scratch slot %d", slot);
  if (n == 0) n = 1;
  if (n > g_buf_n[slot]) {
    pthread_once(&g_buf_once, make_buf_key);
    pthread_setspecific(g_buf_key, g_buf); /* non-NULL: the destructor runs */
    free(g_buf[slot]);
    size_t sz = (n + 63) & ~(size_t)63;
    g_buf[slot] = aligned_alloc(64, sz);
    if (!g_buf[slot]) mt_die("CPU kernels: out of memory for %zu bytes of scratch", n);
    g_buf_n[slot] = sz;
  }
  return g_buf[slot];
}
