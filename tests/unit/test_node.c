/* What this node lets a rank use, with the machine replaced by the test:
 *   - CPU masks: parse, count, format;
 *   - the thread-placement verdict of one rank (threads vs CPUs in its mask)
 *     and the collective check over the ranks of a node, with masks given
 *     here: one warning line naming the node, the rank and the fix, or none;
 *   - the usable memory of the node: MemAvailable, cgroup v2 memory.max and
 *     v1 memory.limit_in_bytes (the smallest along the cgroup path, "max"
 *     and v1's "unlimited" ignored), SLURM_MEM_PER_NODE and
 *     SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE: the smallest wins and is named.
 * The /proc and /sys files live under a temp directory given as the root. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../check.h"
#include "core/core.h"

/* ------------------------------------------------------------------ */
/* CPU placement                                                       */

static void test_masks(void) {
  mt_cpu_mask m;
  char buf[64];
  MT_CHECK(mt_cpu_mask_parse("0-3,8", &m) == 0 && mt_cpu_mask_count(&m) == 5, "parse 0-3,8");
  mt_cpu_mask_format(&m, buf, sizeof buf);
  MT_CHECK(strcmp(buf, "0-3,8") == 0, "format: '%s'", buf);
  MT_CHECK(mt_cpu_mask_parse("4095", &m) == 0 && mt_cpu_mask_count(&m) == 1, "parse 4095");
  const char *bad[] = {"", "x", "3-1", "0,", "4096", "-1", "1-", "0 1"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    MT_CHECK(mt_cpu_mask_parse(bad[i], &m) != 0, "parse '%s' should fail", bad[i]);
  /* every other CPU of 0..199: the text is cut with "...", never overflows */
  memset(&m, 0, sizeof m);
  for (int c = 0; c < 200; c += 2) m.bits[c / 64] |= 1ull << (c % 64);
  mt_cpu_mask_format(&m, buf, 16);
  MT_CHECK(strlen(buf) < 16 && strstr(buf, "..."), "cut format: '%s'", buf);
  mt_cpu_mask self;
  MT_CHECK(mt_cpu_mask_self(&self) == 0 && mt_cpu_mask_count(&self) >= 1,
           "this process's own mask is readable and not empty");
}

static void test_verdict(void) {
  char msg[400];
  MT_CHECK(mt_affinity_verdict(2, 1, msg, sizeof msg) == 1, "2 threads on 1 CPU");
  const char *want[] = {"2 compute threads", "affinity mask of 1 CPU", "1-thread speed",
                        "mpirun --bind-to none", "--map-by slot:PE=2", "--cpus-per-task=2",
                        "train.threads = 1"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    MT_CHECK(strstr(msg, want[i]), "verdict lacks '%s': %s", want[i], msg);
  MT_CHECK(!strchr(msg, '\n'), "verdict is not one line: %s", msg);
  MT_CHECK(mt_affinity_verdict(8, 4, msg, sizeof msg) == 1 && strstr(msg, "4-thread speed") &&
               strstr(msg, "slot:PE=8"),
           "8 on 4: %s", msg);
  MT_CHECK(mt_affinity_verdict(1, 1, msg, sizeof msg) == 0 && msg[0] == '\0', "1 on 1: '%s'", msg);
  MT_CHECK(mt_affinity_verdict(4, 16, msg, sizeof msg) == 0 && msg[0] == '\0', "4 on 16");
  MT_CHECK(mt_affinity_verdict(4, 0, msg, sizeof msg) == 0, "unknown mask: no verdict");
  MT_CHECK(mt_affinity_verdict(4, 1, NULL, 0) == 1, "verdict without a message buffer");
}

/* the collective check, on the ranks of this test (one node) */
static void test_check(MPI_Comm comm) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  char lines[4096];
  mt_cpu_mask one, four;
  mt_cpu_mask_parse("0", &one);
  mt_cpu_mask_parse("0-3", &four);

  /* every rank bound to one CPU with 2 threads: one line for the node */
  int n = mt_affinity_check(comm, 2, &one, "prog", lines, sizeof lines);
  MT_CHECK(n == 1, "1 CPU x 2 threads: %d nodes flagged", n);
  if (rank == 0) {
    char want[128];
    snprintf(want, sizeof want, "rank 0 (CPUs 0; %d of the node's %d ranks alike) has 2 compute "
                                "threads but an affinity mask of 1 CPU", size, size);
    MT_CHECK(strncmp(lines, "prog: warning: node ", 20) == 0 && strstr(lines, want) &&
                 strstr(lines, "--bind-to none"),
             "1 CPU x 2 threads: '%s'", lines);
    int nl = 0;
    for (char *p = lines; *p; p++) nl += *p == '\n';
    MT_CHECK(nl == 1 && lines[strlen(lines) - 1] == '\n', "expected one line, got %d: '%s'", nl,
             lines);
  } else {
    MT_CHECK(lines[0] == '\0', "rank %d got lines: '%s'", rank, lines);
  }

  /* enough CPUs for each rank and for all of them together: silence */
  n = mt_affinity_check(comm, 1, &one, "prog", lines, sizeof lines);
  MT_CHECK(n == (size > 1), "1 CPU x 1 thread on %d ranks: %d flagged", size, n);
  if (size == 1) MT_CHECK(lines[0] == '\0', "1 CPU x 1 thread: '%s'", lines);
  n = mt_affinity_check(comm, 4, &four, "prog", lines, sizeof lines);
  MT_CHECK(n == (size > 1), "4 CPUs x 4 threads on %d ranks: %d flagged", size, n);
  if (size == 1) MT_CHECK(lines[0] == '\0', "4 CPUs x 4 threads: '%s'", lines);
  /* four CPUs, eight threads */
  n = mt_affinity_check(comm, 8, &four, "prog", lines, sizeof lines);
  MT_CHECK(n == 1 && (rank != 0 || strstr(lines, "affinity mask of 4 CPUs")), "4 x 8: %d '%s'", n,
           lines);
  /* an unreadable (empty) mask gives no verdict */
  mt_cpu_mask none;
  memset(&none, 0, sizeof none);
  MT_CHECK(mt_affinity_check(comm, 8, &none, "prog", lines, sizeof lines) == 0 && lines[0] == '\0',
           "empty mask: '%s'", lines);
  /* a small buffer holds whole lines only */
  n = mt_affinity_check(comm, 2, &one, "prog", lines, 40);
  MT_CHECK(n == 1 && (rank != 0 || lines[0] == '\0'), "40-byte buffer: '%s'", lines);
  /* with the process's own mask: runs, and agrees with the verdict of one rank */
  mt_cpu_mask self;
  mt_cpu_mask_self(&self);
  int cpus = mt_cpu_mask_count(&self);
  n = mt_affinity_check(comm, 2 * cpus, NULL, "prog", lines, sizeof lines);
  MT_CHECK(n == 1, "own mask, 2x its %d CPUs as threads: %d flagged", cpus, n);
}

/* the node's ranks together (run with 2+ ranks: mpi.node_check): ranks with
 * one CPU each, but the same CPU; ranks whose threads fit each mask alone */
static void test_check_shared_cpu(MPI_Comm comm) {
  int size;
  MPI_Comm_size(comm, &size);
  if (size < 2) return;
  char lines[4096];
  mt_cpu_mask one;
  mt_cpu_mask_parse("0", &one);
  int rank;
  MPI_Comm_rank(comm, &rank);
  int n = mt_affinity_check(comm, 1, &one, "prog", lines, sizeof lines);
  char want[256];
  snprintf(want, sizeof want, "%d ranks run %d compute threads together on 1 CPU: more ranks "
           "than CPUs, they take turns; launch at most 1 rank on this node", size, size);
  MT_CHECK(n == 1 && (rank != 0 || strstr(lines, want)), "%d ranks on CPU 0: '%s'", size, lines);
  /* each rank alone fits its 2*size CPUs, all together do not: fewer threads */
  mt_cpu_mask wide;
  char list[16];
  snprintf(list, sizeof list, "0-%d", 2 * size - 1);
  mt_cpu_mask_parse(list, &wide);
  n = mt_affinity_check(comm, 2 * size, &wide, "prog", lines, sizeof lines);
  snprintf(want, sizeof want, "%d ranks run %d compute threads together on %d CPUs: threads "
           "share cores; use at most 2 threads per rank (train.threads = 2)", size,
           2 * size * size, 2 * size);
  MT_CHECK(n == 1 && (rank != 0 || strstr(lines, want)), "%d ranks x %d threads on %d CPUs: '%s'",
           size, 2 * size, 2 * size, lines);
}

/* ------------------------------------------------------------------ */
/* memory limit                                                        */

static char g_root[256];

static void put(const char *rel, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", g_root, rel);
  /* mkdir -p of the parent */
  for (char *p = path + strlen(g_root) + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      mkdir(path, 0700);
      *p = '/';
    }
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "test_node: cannot write %s\n", path);
    exit(1);
  }
}

static void expect_limit(const char *what, double bytes, const char *source) {
  mt_mem_limit m;
  int rc = mt_mem_limit_node(g_root, &m);
  MT_CHECK(rc == 0 && m.bytes == bytes && strcmp(m.source, source) == 0,
           "%s: rc %d, %.0f bytes from '%s', expected %.0f from '%s'", what, rc, m.bytes, m.source,
           bytes, source);
}

static void test_mem_limit(void) {
  const double GiB = 1073741824.0, MiB = 1048576.0;
  unsetenv("SLURM_MEM_PER_NODE");
  unsetenv("SLURM_MEM_PER_CPU");
  unsetenv("SLURM_CPUS_ON_NODE");

  mt_mem_limit m;
  MT_CHECK(mt_mem_limit_node(g_root, &m) != 0 && m.bytes == 0 && m.source[0] == '\0',
           "nothing readable: %.0f '%s'", m.bytes, m.source);

  put("proc/meminfo", "MemTotal:       16000000 kB\nMemFree:         9000000 kB\n"
                      "MemAvailable:    8388608 kB\n");
  expect_limit("meminfo only", 8 * GiB, "MemAvailable");

  /* cgroup v2: the job's limit two levels up; the step's "max" does not count */
  put("proc/self/cgroup", "0::/system.slice/job_42/step_0\n");
  put("sys/fs/cgroup/system.slice/job_42/step_0/memory.max", "max\n");
  put("sys/fs/cgroup/system.slice/job_42/memory.max", "4294967296\n");
  put("sys/fs/cgroup/system.slice/memory.max", "max\n");
  expect_limit("cgroup v2", 4 * GiB, "cgroup memory.max");
  /* a limit above MemAvailable does not apply */
  put("sys/fs/cgroup/system.slice/job_42/memory.max", "17179869184\n");
  expect_limit("cgroup v2 above MemAvailable", 8 * GiB, "MemAvailable");

  /* a container without a cgroup namespace: the host's path does not exist
   * here, the limit is at the mount (the container's own group) */
  put("proc/self/cgroup", "0::/docker/0123abcd\n");
  put("sys/fs/cgroup/memory.max", "2147483648\n");
  expect_limit("cgroup v2 at the mount", 2 * GiB, "cgroup memory.max");

  /* cgroup v1: the memory controller's line; "unlimited" (2^63 - 4096) is no limit */
  put("proc/self/cgroup", "9:name=systemd:/\n5:cpuacct,memory:/slurm/uid_0/job_7\n3:cpuset:/\n");
  put("sys/fs/cgroup/memory/slurm/uid_0/job_7/memory.limit_in_bytes", "9223372036854771712\n");
  put("sys/fs/cgroup/memory/slurm/memory.limit_in_bytes", "3221225472\n");
  expect_limit("cgroup v1", 3 * GiB, "cgroup memory.limit_in_bytes");

  /* Slurm, MB: per node, and per CPU x CPUs on the node */
  setenv("SLURM_MEM_PER_NODE", "1024", 1);
  expect_limit("SLURM_MEM_PER_NODE", 1 * GiB, "SLURM_MEM_PER_NODE");
  setenv("SLURM_MEM_PER_NODE", "0", 1); /* --mem=0: the whole node, no figure */
  expect_limit("SLURM_MEM_PER_NODE=0", 3 * GiB, "cgroup memory.limit_in_bytes");
  setenv("SLURM_MEM_PER_NODE", "12G", 1); /* not a number of MB: ignored */
  expect_limit("SLURM_MEM_PER_NODE=12G", 3 * GiB, "cgroup memory.limit_in_bytes");
  unsetenv("SLURM_MEM_PER_NODE");
  setenv("SLURM_MEM_PER_CPU", "100", 1);
  expect_limit("SLURM_MEM_PER_CPU without CPUs", 3 * GiB, "cgroup memory.limit_in_bytes");
  setenv("SLURM_CPUS_ON_NODE", "4", 1);
  expect_limit("SLURM_MEM_PER_CPU", 400 * MiB, "SLURM_MEM_PER_CPU x 4 CPUs");
  unsetenv("SLURM_MEM_PER_CPU");
  unsetenv("SLURM_CPUS_ON_NODE");

  /* this machine: some figure, from some source */
  MT_CHECK(mt_mem_limit_node("", &m) == 0 && m.bytes > 0 && m.source[0], "this machine: %.0f '%s'",
           m.bytes, m.source);
}

/* mt_host_fit: each limit refuses in one line naming it, with the most ranks
 * that fit, and that many do fit */
static void test_host_fit(void) {
  const double MiB = 1048576.0, GiB = 1073741824.0;
  mt_host_rank_cost c = {.rank_bytes = 8 * MiB, .peer_bytes = 4096, .launcher_bytes = 64 * MiB,
                         .threads = 3, .launcher_fds = 4, .shm_bytes = 256 * 1024};
  mt_host_limits l = {.threads_now = 1000, .threads_max = 100000, .nproc = 50000,
                      .nofile = 20000, .shm_free = 8 * GiB};
  l.mem.bytes = 16 * GiB;
  snprintf(l.mem.source, sizeof l.mem.source, "MemAvailable");
  char why[512];
  /* 512 ranks: 64 MiB + 512 x (8 MiB + 2 MiB) = 5.06 GiB */
  MT_CHECK(mt_host_ranks_bytes(512, &c) == 64 * MiB + 512 * (8 * MiB + 512 * 4096.0), "bytes");
  MT_CHECK(mt_host_fit(512, &c, &l, why, sizeof why) == 0 && why[0] == '\0', "512 fit: %s", why);
  struct {
    const char *what;
    int ranks;
    mt_host_limits lim;
    const char *needle;
  } cases[] = {
      {"memory", 2048, l, "of host memory"},
      {"ulimit -u", 512, l, "ulimit -u 1500"},
      {"threads-max", 512, l, "threads-max 2000"},
      {"ulimit -n", 512, l, "ulimit -n 1000"},
      {"/dev/shm", 512, l, "/dev/shm"},
  };
  cases[1].lim.nproc = 1500;
  cases[2].lim.threads_max = 2000;
  cases[3].lim.nofile = 1000;
  cases[4].lim.shm_free = 64 * MiB;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int rc = mt_host_fit(cases[i].ranks, &c, &cases[i].lim, why, sizeof why);
    MT_CHECK(rc != 0 && strstr(why, "ranks do not fit this machine") && strstr(why, cases[i].needle) &&
                 !strchr(why, '\n'),
             "%s: rc %d, '%s'", cases[i].what, rc, why);
    const char *at = strstr(why, "at most ");
    int most = at ? atoi(at + 8) : -1;
    MT_CHECK(most > 0 && most < cases[i].ranks &&
                 mt_host_fit(most, &c, &cases[i].lim, NULL, 0) == 0 &&
                 mt_host_fit(most + 1, &c, &cases[i].lim, NULL, 0) != 0,
             "%s: the offered %d ranks fit and one more does not", cases[i].what, most);
  }
  /* no figure: no refusal on that account */
  mt_host_limits none;
  memset(&none, 0, sizeof none);
  MT_CHECK(mt_host_fit(100000, &c, &none, why, sizeof why) == 0, "no limits known: %s", why);
  /* the fake root: loadavg's running/total, threads-max, meminfo */
  put("proc/loadavg", "0.50 0.40 0.30 2/345 6789\n");
  put("proc/sys/kernel/threads-max", "4096\n");
  mt_host_limits r;
  mt_host_limits_read(g_root, &r);
  MT_CHECK(r.threads_now == 345 && r.threads_max == 4096 && r.mem.bytes > 0, "read: %.0f %.0f %.0f",
           r.threads_now, r.threads_max, r.mem.bytes);
  MT_CHECK(mt_host_self_bytes() > 1 * MiB, "this process: %.0f bytes", mt_host_self_bytes());
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mt_log_init(rank);
  test_masks();
  test_verdict();
  test_check(MPI_COMM_WORLD);
  test_check_shared_cpu(MPI_COMM_WORLD);
  if (rank == 0) {
    const char *tmp = getenv("TMPDIR");
    snprintf(g_root, sizeof g_root, "%s/mt_test_node_XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(g_root)) {
      perror("test_node: mkdtemp");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    test_mem_limit();
    test_host_fit();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_root);
    if (system(cmd) != 0) fprintf(stderr, "test_node: note: could not remove %s\n", g_root);
  }
  int fails = 0;
  MPI_Allreduce(mt_check_failures(), &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int rc = mt_check_report("test_node", fails, rank == 0);
  MPI_Finalize();
  return rc;
}
