/* Thread placement: does each rank have a CPU for every compute thread?
 *
 * A launcher decides where a rank may run (its affinity mask): `mpirun -n 1`
 * and `-n 2` bind each rank to one core, Slurm to the CPUs of its task. The
 * OpenMP and BLAS thread pools do not look at the mask when OMP_NUM_THREADS
 * or train.threads asks for more, so T threads squeezed onto C < T CPUs run
 * at C-thread speed (measured in docs/parallelism.md: 2 threads bound to one
 * core are no faster than 1). Nothing fails; the run is just slow. So at start each
 * rank compares its mask with its threads, the ranks of a node agree on one
 * verdict, and rank 0 prints one line per node that is short of CPUs. */
#define _GNU_SOURCE
#include "core/core.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* masks                                                               */

int mt_cpu_mask_self(mt_cpu_mask *m) {
  memset(m, 0, sizeof *m);
  cpu_set_t *set = CPU_ALLOC(MT_CPU_MASK_BITS);
  if (!set) return 1;
  size_t bytes = CPU_ALLOC_SIZE(MT_CPU_MASK_BITS);
  CPU_ZERO_S(bytes, set);
  int rc = sched_getaffinity(0, bytes, set);
  if (rc == 0)
    for (int c = 0; c < MT_CPU_MASK_BITS; c++)
      if (CPU_ISSET_S((size_t)c, bytes, set)) m->bits[c / 64] |= 1ull << (c % 64);
  CPU_FREE(set);
  return rc == 0 ? 0 : 1;
}

int mt_cpu_mask_parse(const char *list, mt_cpu_mask *m) {
  memset(m, 0, sizeof *m);
  const char *p = list;
  if (!p || !*p) return 1;
  for (;;) {
    char *end;
    long a = strtol(p, &end, 10), b = a;
    if (end == p || a < 0 || a >= MT_CPU_MASK_BITS) return 1;
    p = end;
    if (*p == '-') {
      b = strtol(++p, &end, 10);
      if (end == p || b < a || b >= MT_CPU_MASK_BITS) return 1;
      p = end;
    }
    for (long c = a; c <= b; c++) m->bits[c / 64] |= 1ull << (c % 64);
    if (*p == '\0') return 0;
    if (*p++ != ',') return 1;
  }
}

int mt_cpu_mask_count(const mt_cpu_mask *m) {
  int n = 0;
  for (int i = 0; i < MT_CPU_MASK_BITS / 64; i++) n += __builtin_popcountll(m->bits[i]);
  return n;
}

void mt_cpu_mask_format(const mt_cpu_mask *m, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int c = 0; c < MT_CPU_MASK_BITS; c++) {
    if (!(m->bits[c / 64] >> (c % 64) & 1)) continue;
    int e = c;
    while (e + 1 < MT_CPU_MASK_BITS && (m->bits[(e + 1) / 64] >> ((e + 1) % 64) & 1)) e++;
    char part[32];
    int n = e > c ? snprintf(part, sizeof part, "%s%d-%d", used ? "," : "", c, e)
                  : snprintf(part, sizeof part, "%s%d", used ? "," : "", c);
    if (used + (size_t)n + 4 >= size) { /* keep room for "..." */
      if (used + 4 <= size) snprintf(buf + used, size - used, "...");
      return;
    }
    memcpy(buf + used, part, (size_t)n + 1);
    used += (size_t)n;
    c = e;
  }
}

/* ------------------------------------------------------------------ */
/* one rank                                                            */

int mt_affinity_verdict(int threads, int cpus, char *msg, size_t size) {
  if (msg && size) msg[0] = '\0';
  if (cpus <= 0 || threads <= cpus) return 0;
  if (msg && size)
    snprintf(msg, size,
             "%d compute threads but an affinity mask of %d CPU%s: the threads share %s and run "
             "at %d-thread speed; give the rank %d cores (mpirun --bind-to none, or --map-by "
             "slot:PE=%d; Slurm: --cpus-per-task=%d) or set train.threads = %d",
             threads, cpus, cpus == 1 ? "" : "s", cpus == 1 ? "it" : "them", cpus, threads,
             threads, threads, cpus);
  return 1;
}

/* ------------------------------------------------------------------ */
/* every node, collectively                                            */

/* What a node leader sends to rank 0 about its node. */
typedef struct {
  int ranks;        /* ranks on the node */
  int short_ranks;  /* ranks with more threads than CPUs in their mask */
  int worst_rank;   /* world rank of the rank with the fewest CPUs per thread */
  int worst_threads, worst_cpus;
  int sum_threads;  /* compute threads of all the node's ranks */
  int union_cpus;   /* CPUs in the union of their masks */
  char host[64];
  char worst_cpu_list[96];
} node_verdict;

int mt_affinity_check(MPI_Comm comm, int threads, const mt_cpu_mask *mask, const char *prog,
                      char *lines, size_t size) {
  if (lines && size) lines[0] = '\0';
  int rank, nranks;
  MT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MT_MPI_CHECK(MPI_Comm_size(comm, &nranks));
  mt_cpu_mask own;
  if (!mask) {
    if (mt_cpu_mask_self(&own) != 0) memset(&own, 0, sizeof own); /* unknown: no verdict */
    mask = &own;
  }
  int cpus = mt_cpu_mask_count(mask);
  if (threads < 1) threads = 1;

  /* the node's ranks: worst CPUs-per-thread ratio, total threads, union of masks */
  MPI_Comm node;
  MT_MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
  int node_rank, node_size;
  MT_MPI_CHECK(MPI_Comm_rank(node, &node_rank));
  MT_MPI_CHECK(MPI_Comm_size(node, &node_size));
  int is_short = mt_affinity_verdict(threads, cpus, NULL, 0);
  /* the rank whose threads get the smallest share of a CPU (CPUs per thread) */
  struct { double share; int rank; } me = {cpus > 0 ? (double)cpus / threads : 1e30, rank}, worst;
  MT_MPI_CHECK(MPI_Allreduce(&me, &worst, 1, MPI_DOUBLE_INT, MPI_MINLOC, node));
  int counts[2] = {is_short, threads}, sums[2];
  MT_MPI_CHECK(MPI_Allreduce(counts, sums, 2, MPI_INT, MPI_SUM, node));
  mt_cpu_mask all;
  MT_MPI_CHECK(MPI_Allreduce(mask->bits, all.bits, MT_CPU_MASK_BITS / 64, MPI_UINT64_T, MPI_BOR,
                             node));
  node_verdict v;
  memset(&v, 0, sizeof v);
  v.ranks = node_size;
  v.short_ranks = sums[0];
  v.sum_threads = sums[1];
  v.union_cpus = mt_cpu_mask_count(&all);
  v.worst_rank = worst.rank;
  /* the worst rank's figures, to the node leader */
  int pack[2] = {threads, cpus};
  char list[sizeof v.worst_cpu_list];
  mt_cpu_mask_format(mask, list, sizeof list);
  int worst_node_rank = 0, mine_is_worst = rank == worst.rank ? node_rank : node_size;
  MT_MPI_CHECK(MPI_Allreduce(&mine_is_worst, &worst_node_rank, 1, MPI_INT, MPI_MIN, node));
  MT_MPI_CHECK(MPI_Bcast(pack, 2, MPI_INT, worst_node_rank, node));
  MT_MPI_CHECK(MPI_Bcast(list, (int)sizeof list, MPI_CHAR, worst_node_rank, node));
  v.worst_threads = pack[0];
  v.worst_cpus = pack[1];
  memcpy(v.worst_cpu_list, list, sizeof list);
  int len = 0;
  char host[MPI_MAX_PROCESSOR_NAME];
  MT_MPI_CHECK(MPI_Get_processor_name(host, &len));
  snprintf(v.host, sizeof v.host, "%.*s", (int)sizeof v.host - 1, host);
  /* a CPU count of 0 means the mask could not be read: no verdict */
  int flagged = v.union_cpus > 0 && (v.short_ranks > 0 || v.sum_threads > v.union_cpus);

  /* node leaders to rank 0 of comm (rank 0 is a node leader: it has node rank 0) */
  MPI_Comm leaders;
  MT_MPI_CHECK(MPI_Comm_split(comm, node_rank == 0 ? 0 : MPI_UNDEFINED, rank, &leaders));
  int n_flagged = 0;
  if (leaders != MPI_COMM_NULL) {
    int lrank, nleaders;
    MT_MPI_CHECK(MPI_Comm_rank(leaders, &lrank));
    MT_MPI_CHECK(MPI_Comm_size(leaders, &nleaders));
    node_verdict *all_v = lrank == 0 ? mt_calloc((size_t)nleaders, sizeof *all_v) : NULL;
    MT_MPI_CHECK(MPI_Gather(&v, (int)sizeof v, MPI_BYTE, all_v, (int)sizeof v, MPI_BYTE, 0,
                            leaders));
    int mine = flagged;
    MT_MPI_CHECK(MPI_Allreduce(&mine, &n_flagged, 1, MPI_INT, MPI_SUM, leaders));
    if (lrank == 0 && lines && size) {
      /* one line per node short of CPUs; past MAX_LINES, one line counting the rest */
      enum { MAX_LINES = 16 };
      size_t used = 0;
      int shown = 0;
      for (int i = 0; i < nleaders; i++) {
        const node_verdict *n = &all_v[i];
        if (!(n->union_cpus > 0 && (n->short_ranks > 0 || n->sum_threads > n->union_cpus)))
          continue;
        if (shown == MAX_LINES) {
          snprintf(lines + used, size - used,
                   "%s: warning: ... and %d more node%s like these\n", prog, n_flagged - shown,
                   n_flagged - shown == 1 ? "" : "s");
          break;
        }
        char why[640];
        if (n->short_ranks > 0) {
          char detail[360];
          mt_affinity_verdict(n->worst_threads, n->worst_cpus, detail, sizeof detail);
          snprintf(why, sizeof why, "rank %d (CPUs %s; %d of the node's %d ranks alike) has %s",
                   n->worst_rank, n->worst_cpu_list, n->short_ranks, n->ranks, detail);
        } else if (n->ranks <= n->union_cpus) { /* fewer threads per rank would fit */
          snprintf(why, sizeof why,
                   "%d ranks run %d compute threads together on %d CPU%s: threads share "
                   "cores; use at most %d threads per rank (train.threads = %d)",
                   n->ranks, n->sum_threads, n->union_cpus, n->union_cpus == 1 ? "" : "s",
                   n->union_cpus / n->ranks, n->union_cpus / n->ranks);
        } else { /* more ranks than CPUs, whatever the threads */
          snprintf(why, sizeof why,
                   "%d ranks run %d compute threads together on %d CPU%s: more ranks than "
                   "CPUs, they take turns; launch at most %d rank%s on this node",
                   n->ranks, n->sum_threads, n->union_cpus, n->union_cpus == 1 ? "" : "s",
                   n->union_cpus, n->union_cpus == 1 ? "" : "s");
        }
        int w = snprintf(lines + used, size - used, "%s: warning: node %s: %s\n", prog, n->host,
                         why);
        if (w < 0 || (size_t)w >= size - used) {
          lines[used] = '\0'; /* no room for this line: keep whole lines only */
          break;
        }
        used += (size_t)w;
        shown++;
      }
    }
    free(all_v);
    MT_MPI_CHECK(MPI_Comm_free(&leaders));
  }
  /* every rank learns the count (the leaders hold it) */
  MT_MPI_CHECK(MPI_Bcast(&n_flagged, 1, MPI_INT, 0, node));
  MT_MPI_CHECK(MPI_Comm_free(&node));
  return n_flagged;
}
