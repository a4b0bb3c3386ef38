/* A token file read defensively: the file is memory-mapped, and a file cut
 * short while mapped (rewritten in place, truncated by a cleanup job) turns
 * the next read beyond its new end into SIGBUS, which would kill the rank
 * with no word. Reads of a mapping go through mt_data_guarded: a SIGBUS at
 * an address inside a dataset's mapping returns from the read with an
 * error instead, the mapping is marked, and the training loop's check
 * between steps (mt_dataset_check, agreed over the ranks) ends the run with
 * one line naming the file. A SIGBUS anywhere else is passed on to the
 * handler that was installed before (or the default: the process dies as
 * it would have). */
#include "data/data_internal.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* the mappings of the open token files: a run's shards, training and
 * validation (a mapping beyond these is read unguarded: a file cut short
 * under the run then kills the rank with SIGBUS, as before the guard) */
enum { MAX_MAPS = 4096 };
static struct {
  const void *map;
  size_t bytes;
  volatile sig_atomic_t faulted;
} g_maps[MAX_MAPS];

static _Thread_local sigjmp_buf *g_jump; /* set while this thread reads under the guard */
static _Thread_local int g_slot;        /* the mapping it reads */
static struct sigaction g_previous;
static int g_installed;

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
  const char *a = si ? (const char *)si->si_addr : NULL;
  if (g_jump && g_slot >= 0) {
    const char *m = g_maps[g_slot].map;
    if (a && m && a >= m && a < m + g_maps[g_slot].bytes) {
      g_maps[g_slot].faulted = 1;
      siglongjmp(*g_jump, 1);
    }
  }
  /* not a read of ours: what would have happened without us */
  if (g_previous.sa_flags & SA_SIGINFO) {
    g_previous.sa_sigaction(sig, si, uc);
  } else if (g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != SIG_DFL) {
    g_previous.sa_handler(sig);
  } else {
    signal(sig, SIG_DFL);
    raise(sig);
  }
}

void mt_data_guard_install(void) {
  if (g_installed) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &g_previous) == 0) g_installed = 1;
}

__attribute__((noinline)) static int slot_of(const void *map, size_t bytes) {
  int free_slot = -1;
  for (int i = 0; i < MAX_MAPS; i++) {
    if (g_maps[i].map == map) return i;
    if (!g_maps[i].map && free_slot < 0) free_slot = i;
  }
  if (free_slot >= 0) {
    g_maps[free_slot].map = map;
    g_maps[free_slot].bytes = bytes;
    g_maps[free_slot].faulted = 0;
  } else {
    static int said;
    if (!said++)
      mt_info0("meshtrain: note: more than %d token files are mapped; those beyond are read "
               "without the guard against files cut short under the run (one would end the rank "
               "with SIGBUS)", MAX_MAPS);
  }
  return free_slot;
}

int mt_data_guard_slot(const void *map, size_t bytes) { return slot_of(map, bytes); }

int mt_data_guarded(const mt_dataset *ds, void (*fn)(void *), void *arg) {
  sigjmp_buf jump;
  /* the slot found at open, else a search (kept across the jump) */
  volatile int slot = ds->guard_slot >= 0 && ds->guard_slot < MAX_MAPS &&
                              g_maps[ds->guard_slot].map == ds->map
                          ? ds->guard_slot
                          : slot_of(ds->map, ds->map_bytes);
  if (slot >= 0 && g_maps[slot].faulted) return -1; /* no second try at a cut file */
  if (sigsetjmp(jump, 1) != 0) { /* a SIGBUS in this mapping, from the handler */
    g_jump = NULL;
    return -1;
  }
  g_slot = slot;
  g_jump = &jump;
  fn(arg);
  g_jump = NULL;
  return 0;
}

void mt_data_guard_forget(const void *map) {
  for (int i = 0; i < MAX_MAPS; i++)
    if (g_maps[i].map == map) g_maps[i].map = NULL;
}

int mt_dataset_check(const mt_dataset *ds, mt_err *e) {
  if (!ds->map) return 0;
  const char *what = NULL;
  char detail[160] = "";
  struct stat st;
  int slot = slot_of(ds->map, ds->map_bytes);
  if (slot >= 0 && g_maps[slot].faulted) {
    what = "was cut short under the run (reading its mapping failed: SIGBUS)";
  } else if (stat(ds->path, &st) != 0) {
    what = "is gone";
    snprintf(detail, sizeof detail, " (%s)", strerror(errno));
  } else if ((uint64_t)st.st_dev != ds->dev || (uint64_t)st.st_ino != ds->ino) {
    what = "was replaced by another file under the run";
  } else if ((int64_t)st.st_size != ds->file_bytes) {
    what = "changed size under the run";
    snprintf(detail, sizeof detail, " (%lld bytes when opened, %lld now)",
             (long long)ds->file_bytes, (long long)st.st_size);
  } else if ((int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec != ds->mtime_ns) {
    what = "was modified under the run (its modification time changed)";
  }
  if (!what) return 0;
  mt_err_runtime(e, "%s %s%s: the run stops before training on it; its newest checkpoint is "
                    "the last one saved (resume once the file is back as it was)",
                 ds->path, what, detail);
  return -1;
}
