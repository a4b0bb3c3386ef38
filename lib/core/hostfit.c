/* Whether this machine can start N MPI ranks at once (the virtual device
 * runs hundreds of ranks on one host).
 *
 * What a rank costs the host was measured here, Open MPI 4.1 on Debian, a
 * virtual 7B at 16 to 512 ranks on one machine (proportional set size summed
 * over the ranks, sampled every 0.5 s): 6.6, 6.0, 6.7, 7.0 and 7.6 MiB a rank
 * at 16, 64, 128, 256 and 512 ranks, about 6.4 MiB plus 2.4 KiB for each
 * peer; 3 threads a rank (main, MPI's progress and PMIx threads); mpirun holds
 * about 3.1 descriptors a rank; Open MPI's shared-memory transport touched
 * 72 to 111 KiB of /dev/shm a rank. The defaults below round these up. A
 * launch past any of the limits fails in ways that are hard to read (the
 * OOM killer takes a rank or mpirun, a bus error in /dev/shm, "Too many open
 * files" from the launcher, fork refused), often after minutes of start-up. */
#include "core/core.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

void mt_host_rank_cost_default(mt_host_rank_cost *c) {
  c->rank_bytes = 7.0 * 1048576.0;
  c->peer_bytes = 3.0 * 1024.0;
  c->launcher_bytes = 64.0 * 1048576.0;
  c->threads = 3;
  c->launcher_fds = 4;
  c->shm_bytes = 256.0 * 1024.0;
}

/* the first number after "key" in a file of "key value" lines; 0 when absent */
static double file_key(const char *path, const char *fmt) {
  FILE *f = fopen(path, "r");
  double v = 0;
  if (!f) return 0;
  char line[256];
  while (fgets(line, sizeof line, f))
    if (sscanf(line, fmt, &v) == 1) break;
  fclose(f);
  return v;
}

static double rlimit_soft(int resource) {
  struct rlimit r;
  if (getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 0;
  return (double)r.rlim_cur;
}

int mt_host_limits_read(const char *root, mt_host_limits *out) {
  memset(out, 0, sizeof *out);
  if (!root) root = "";
  int rc = mt_mem_limit_node(root, &out->mem);
  char path[1024];
  /* threads now: the 4th field of loadavg, "running/total" scheduling entities */
  snprintf(path, sizeof path, "%s/proc/loadavg", root);
  FILE *f = fopen(path, "r");
  if (f) {
    double a, b, c, run, total;
    if (fscanf(f, "%lf %lf %lf %lf/%lf", &a, &b, &c, &run, &total) == 5) out->threads_now = total;
    fclose(f);
  }
  snprintf(path, sizeof path, "%s/proc/sys/kernel/threads-max", root);
  out->threads_max = file_key(path, "%lf");
  /* (the kernel does not hold root to ulimit -u) */
  out->nproc = geteuid() == 0 ? 0 : rlimit_soft(RLIMIT_NPROC);
  out->nofile = rlimit_soft(RLIMIT_NOFILE);
  snprintf(path, sizeof path, "%s/dev/shm", root);
  struct statvfs s;
  if (statvfs(path, &s) == 0) out->shm_free = (double)s.f_bavail * (double)s.f_frsize;
  return rc;
}

double mt_host_ranks_bytes(int n, const mt_host_rank_cost *c) {
  return c->launcher_bytes + (double)n * (c->rank_bytes + c->peer_bytes * (double)n);
}

#define MARGIN 0.9 /* of the memory: a tenth for what else runs here */

/* The first limit n ranks exceed, in the order the messages name them */
enum { FIT, MEM, NPROC, THREADS_MAX, NOFILE, SHM };
static int exceeded(int n, const mt_host_rank_cost *c, const mt_host_limits *l) {
  const double threads = (double)n * c->threads;
  if (l->mem.bytes > 0 && mt_host_ranks_bytes(n, c) > MARGIN * l->mem.bytes) return MEM;
  if (l->nproc > 0 && threads > l->nproc - l->threads_now) return NPROC;
  if (l->threads_max > 0 && threads > l->threads_max - l->threads_now) return THREADS_MAX;
  if (l->nofile > 0 && (double)n * c->launcher_fds + 64 > l->nofile) return NOFILE;
  if (l->shm_free > 0 && (double)n * c->shm_bytes > l->shm_free) return SHM;
  return FIT;
}

/* the most ranks below n that fit every limit, by bisection (each limit's
 * need grows with the ranks) */
static int most_ranks(int n, const mt_host_rank_cost *c, const mt_host_limits *l) {
  int lo = 0, hi = n;
  while (lo < hi) {
    int mid = lo + (hi - lo + 1) / 2;
    if (exceeded(mid, c, l) == FIT) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/* bytes as GiB, or MiB below one GiB */
static const char *human(double b, char *buf) {
  if (b >= 1073741824.0) snprintf(buf, 32, "%.1f GiB", b / 1073741824.0);
  else snprintf(buf, 32, "%.0f MiB", b / 1048576.0);
  return buf;
}

int mt_host_fit(int ranks, const mt_host_rank_cost *c, const mt_host_limits *l, char *why,
                size_t size) {
  const double MiB = 1048576.0, threads = (double)ranks * c->threads;
  int limit = exceeded(ranks, c, l);
  if (why && size) why[0] = '\0';
  if (limit == FIT) return 0;
  if (!why || !size) return -1;
  char what[320], b1[32], b2[32], b3[32];
  switch (limit) {
  case MEM:
    snprintf(what, sizeof what,
             "they need about %s of host memory (%.1f MiB a rank with %d peers, and the "
             "launcher), %.0f%% of the %s usable (%s) is %s",
             human(mt_host_ranks_bytes(ranks, c), b1),
             (c->rank_bytes + c->peer_bytes * ranks) / MiB, ranks - 1, 100 * MARGIN,
             human(l->mem.bytes, b2), l->mem.source, human(MARGIN * l->mem.bytes, b3));
    break;
  case NPROC:
    snprintf(what, sizeof what,
             "they run about %.0f threads (%d a rank), and the process limit (ulimit -u %.0f) "
             "leaves %.0f with %.0f running",
             threads, c->threads, l->nproc, l->nproc - l->threads_now, l->threads_now);
    break;
  case THREADS_MAX:
    snprintf(what, sizeof what,
             "they run about %.0f threads (%d a rank), and the kernel's threads-max %.0f "
             "leaves %.0f",
             threads, c->threads, l->threads_max, l->threads_max - l->threads_now);
    break;
  case NOFILE:
    snprintf(what, sizeof what,
             "the launcher holds about %d open files a rank (%.0f), more than ulimit -n %.0f "
             "(raise it with ulimit -n)",
             c->launcher_fds, (double)ranks * c->launcher_fds + 64, l->nofile);
    break;
  default: /* SHM */
    snprintf(what, sizeof what,
             "MPI's shared-memory segments need about %.0f MiB of /dev/shm (%.0f KiB a rank) "
             "and %.0f MiB is free (a container's default is 64 MiB: docker run --shm-size)",
             (double)ranks * c->shm_bytes / MiB, c->shm_bytes / 1024, l->shm_free / MiB);
  }
  snprintf(why, size, "%d ranks do not fit this machine: %s; at most %d ranks fit here", ranks,
           what, most_ranks(ranks, c, l));
  return -1;
}

double mt_host_self_bytes(void) {
  /* proportional set size: shared pages split between the processes that map them */
  double kb = file_key("/proc/self/smaps_rollup", "Pss: %lf kB");
  if (kb <= 0) kb = file_key("/proc/self/status", "VmRSS: %lf kB");
  return kb * 1024.0;
}
