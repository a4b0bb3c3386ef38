/* The memory a job may use on this node.
 *
 * MemAvailable is what the node has free; a batch job usually gets less: the
 * cgroup its processes run in (Slurm's task/cgroup plugin, a container)
 * caps them at memory.max, and Slurm states the job's share in
 * SLURM_MEM_PER_NODE or SLURM_MEM_PER_CPU. The memory check before
 * allocation compares with the smallest, so a run that the job's limit would
 * kill (OOM) is refused with a message naming that limit instead. */
#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A limit at or above this (2^60 bytes) means "no limit": cgroup v1 writes
 * 9223372036854771712 for an unlimited group. */
#define NO_LIMIT 1152921504606846976.0

static void take(mt_mem_limit *out, double bytes, const char *source) {
  if (!(bytes > 0) || bytes >= NO_LIMIT) return;
  if (out->bytes == 0 || bytes < out->bytes) {
    out->bytes = bytes;
    snprintf(out->source, sizeof out->source, "%s", source);
  }
}

/* "12345\n" -> 12345; "max" or anything else -> 0 */
static double read_number_file(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  char buf[64] = "";
  double v = 0;
  if (fgets(buf, sizeof buf, f)) {
    char *end;
    errno = 0;
    unsigned long long x = strtoull(buf, &end, 10);
    if (!errno && end != buf && (*end == '\n' || *end == '\0')) v = (double)x;
  }
  fclose(f);
  return v;
}

/* a decimal environment variable in MB, as bytes (0 when unset or malformed) */
static double env_mb(const char *name) {
  const char *s = getenv(name);
  if (!s || !*s) return 0;
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end) return 0;
  return (double)v * 1048576.0;
}

/* The smallest limit file along dir = <mount><path> and each parent up to the
 * mount itself. A container without a cgroup namespace shows the host's path
 * in /proc/self/cgroup; those directories do not exist, the walk then ends
 * at the mount, which is the container's own group. */
static void walk_cgroup(const char *mount, const char *path, const char *file, const char *source,
                        mt_mem_limit *out) {
  char dir[1024];
  if ((size_t)snprintf(dir, sizeof dir, "%s%s", mount, path) >= sizeof dir) return;
  size_t mount_len = strlen(mount);
  for (;;) {
    size_t n = strlen(dir);
    while (n > mount_len && dir[n - 1] == '/') dir[--n] = '\0';
    char f[1100];
    snprintf(f, sizeof f, "%s/%s", dir, file);
    take(out, read_number_file(f), source);
    if (n <= mount_len) break;
    char *slash = strrchr(dir + mount_len, '/');
    if (!slash) break;
    *slash = '\0';
  }
}

int mt_mem_limit_node(const char *root, mt_mem_limit *out) {
  memset(out, 0, sizeof *out);
  if (!root) root = "";
  char path[1024];

  /* MemAvailable, kB */
  snprintf(path, sizeof path, "%s/proc/meminfo", root);
  FILE *f = fopen(path, "r");
  if (f) {
    char line[256];
    double kb = 0;
    while (fgets(line, sizeof line, f))
      if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    fclose(f);
    take(out, kb * 1024.0, "MemAvailable");
  }

  /* cgroups: "0::/path" (v2) and "N:...memory...:/path" (v1) */
  snprintf(path, sizeof path, "%s/proc/self/cgroup", root);
  f = fopen(path, "r");
  if (f) {
    char line[1024];
    while (fgets(line, sizeof line, f)) {
      line[strcspn(line, "\n")] = '\0';
      char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
      if (!c2) continue;
      *c1 = *c2 = '\0';
      const char *controllers = c1 + 1, *cg = c2 + 1;
      char mount[1024];
      if (strcmp(line, "0") == 0 && controllers[0] == '\0') {
        snprintf(mount, sizeof mount, "%s/sys/fs/cgroup", root);
        walk_cgroup(mount, cg, "memory.max", "cgroup memory.max", out);
      } else {
        /* v1: the memory controller, alone or listed with others */
        char list[256];
        snprintf(list, sizeof list, ",%s,", controllers);
        if (!strstr(list, ",memory,")) continue;
        snprintf(mount, sizeof mount, "%s/sys/fs/cgroup/memory", root);
        walk_cgroup(mount, cg, "memory.limit_in_bytes", "cgroup memory.limit_in_bytes", out);
      }
    }
    fclose(f);
  }

  /* Slurm: the job's memory on this node, MB */
  take(out, env_mb("SLURM_MEM_PER_NODE"), "SLURM_MEM_PER_NODE");
  double per_cpu = env_mb("SLURM_MEM_PER_CPU");
  const char *cpus_s = getenv("SLURM_CPUS_ON_NODE");
  long cpus = cpus_s ? strtol(cpus_s, NULL, 10) : 0;
  if (per_cpu > 0 && cpus > 0) {
    char source[96];
    snprintf(source, sizeof source, "SLURM_MEM_PER_CPU x %ld CPUs", cpus);
    take(out, per_cpu * (double)cpus, source);
  }
  return out->bytes > 0 ? 0 : 1;
}
