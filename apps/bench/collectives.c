/* meshbench allreduce | allgather | reduce-scatter | alltoall | sendrecv |
 * collectives: the collectives over a mesh group, nccl-tests style (under
 * mpirun/srun): MPI on host buffers, or (--device cuda) device buffers
 * through comm's NCCL path. */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench/bench.h"
#include "comm/comm.h"
#include "core/core.h"
#include "kernels/kernels.h"
#include "model/model.h"

static const char *g_prog = "meshbench";

/* ------------------------------------------------------------------ */
/* collectives                                                         */

/* nccl-tests conventions. "size" S is the largest buffer a rank holds:
 *   allreduce       S in, S out (in place)            busbw = algbw * 2(n-1)/n
 *   allgather       S/n in, S out (in place)          busbw = algbw * (n-1)/n
 *   reduce-scatter  S in, S/n out                     busbw = algbw * (n-1)/n
 *   alltoall        S in (S/n per peer), S out        busbw = algbw * (n-1)/n
 *   sendrecv        S to rank+1, S from rank-1 (ring) busbw = algbw
 * algbw = S / time. time is the mean per call of the slowest rank over --iters
 * calls after --warmup calls. allreduce, allgather and reduce-scatter go
 * through lib/comm (the calls meshtrain makes); alltoall and sendrecv, which
 * meshtrain does not issue yet, call MPI directly. The correctness check is
 * one more call on freshly filled buffers of small integers (exact in fp32
 * for any summation order), every element compared. */
typedef enum { COLL_ALLREDUCE, COLL_ALLGATHER, COLL_REDUCE_SCATTER, COLL_ALLTOALL, COLL_SENDRECV } coll_kind;
static const char *g_coll_names[] = {"allreduce", "allgather", "reduce-scatter", "alltoall",
                                     "sendrecv"};
static const char *g_coll_redop[] = {"sum", "none", "sum", "none", "none"};
#define N_COLL 5

typedef struct {
  int rank, ranks;       /* in the benchmarked group */
  int world_rank, nodes; /* nodes: distinct shared-memory domains of the world */
  long long min_bytes, max_bytes;
  long long *sizes; /* explicit --sizes, or NULL */
  int n_sizes;
  int factor, iters, warmup, check;
  const char *json_path, *group_name;
  int group_given;
  int mesh[4]; /* tp cp dp pp, 0 = fill with dp */
  int on_gpu;  /* --device cuda: buffers in GPU memory, through comm's device path */
} coll_opts;

static int g_coll_rank0 = 1; /* prints only on world rank 0 once MPI is up */
static int g_coll_fault = 0; /* --fault: rank 0 corrupts one element (tests the check) */

/* "meshbench: error: ..." from world rank 0, then every rank leaves with 2 */
static void __attribute__((format(printf, 1, 2), noreturn)) coll_usage_error(const char *fmt,
                                                                             ...) {
  if (g_coll_rank0) {
    va_list ap;
    va_start(ap, fmt);
    mt_bench_vusage(g_prog, "allreduce", fmt, ap);
    va_end(ap);
  }
  MT_MPI_CHECK(MPI_Finalize());
  exit(MT_EXIT_BADINPUT);
}

/* "64M", "1K", "4096", "1G" (binary multiples) -> bytes, or a usage error */
static long long parse_bytes(const char *opt, const char *text) {
  char *end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  long long mult = 1;
  if (end && *end) {
    char c = (char)(*end == 'k' ? 'K' : *end == 'm' ? 'M' : *end == 'g' ? 'G' : *end);
    mult = c == 'K' ? 1LL << 10 : c == 'M' ? 1LL << 20 : c == 'G' ? 1LL << 30 : 0;
    if (mult && (end[1] == '\0' || ((end[1] == 'B' || end[1] == 'i') && end[2] == '\0') ||
                 (end[1] == 'i' && end[2] == 'B' && end[3] == '\0')))
      end += strlen(end);
  }
  if (errno || end == text || *end != '\0' || !mult || v < 1 || v * (double)mult > 16.0 * (1LL << 30))
    coll_usage_error("%s expects a size in bytes between 1 and 16G (suffix K, M, G), got '%s'",
                     opt, text);
  return (long long)(v * (double)mult);
}

static void coll_help(FILE *f, const char *name) {
  fprintf(f,
          "usage: mpirun -n N %s %s [options]   (also: srun ... %s %s)\n"
          "Times MPI %s over a mesh group at sizes from --min-bytes to --max-bytes, nccl-tests\n"
          "style: size, count, type, redop, time, algbw, busbw (busbw factors: allreduce\n"
          "2(n-1)/n; allgather, reduce-scatter, alltoall (n-1)/n; sendrecv 1) and #wrong, the\n"
          "elements a correctness check found wrong. Subcommands allreduce, allgather,\n"
          "reduce-scatter, alltoall, sendrecv; `collectives` runs all five.\n"
          "  --min-bytes S   smallest size (default 1K; suffixes K M G)\n"
          "  --max-bytes S   largest size (default 64M)\n"
          "  --factor F      size multiplier between rows (default 2)\n"
          "  --sizes LIST    exact sizes instead, comma separated (e.g. 1M,16M,64M)\n"
          "  --iters N       timed calls per size (default 20)\n"
          "  --warmup N      untimed calls before them (default 5)\n"
          "  --check 0|1     run the correctness check (default 1)\n"
          "  --mesh AXES     mesh shape, e.g. tp=2,dp=4 (default dp = all ranks)\n"
          "  --group NAME    world | tp | cp | dp | pp: the group to time (default world)\n"
          "  --json FILE     rank 0 appends one JSON line per size\n"
          "  --device D      cpu (host buffers, MPI; default) or cuda (GPU buffers, one GPU\n"
          "                  per rank by node-local rank: NCCL where each rank of the group\n"
          "                  has its own GPU, else staged through host MPI; the group\n"
          "                  defaults to dp; alltoall is host-only)\n"
          "  --fault         testing: corrupt one element on rank 0 before each check\n"
          "Exit code 3 if any element was wrong.\n",
          g_prog, name, g_prog, name, name);
}

/* the options into o (a bad one: a usage error, every rank exits 2); *help
 * set when --help was asked (printed) */
static void coll_parse(int argc, char **argv, coll_opts *o, int *help) {
  *help = 0;
  *o = (coll_opts){.min_bytes = 1024, .max_bytes = 64LL << 20, .factor = 2, .iters = 20,
                   .warmup = 5, .check = 1, .group_name = "world"};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      if (g_coll_rank0) coll_help(stdout, argv[0]);
      *help = 1;
      return;
    }
    if (!strcmp(a, "--fault")) { /* testing only: shows that a wrong result is caught */
      g_coll_fault = 1;
      continue;
    }
    if (i + 1 >= argc) coll_usage_error("%s: unknown option or missing value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--min-bytes")) {
      o->min_bytes = parse_bytes(a, v);
    } else if (!strcmp(a, "--max-bytes")) {
      o->max_bytes = parse_bytes(a, v);
    } else if (!strcmp(a, "--factor") || !strcmp(a, "--iters") || !strcmp(a, "--warmup") ||
               !strcmp(a, "--check")) {
      char *end = NULL;
      errno = 0;
      long n = strtol(v, &end, 10);
      int is_check = !strcmp(a, "--check"), is_warm = !strcmp(a, "--warmup");
      long lo = is_check || is_warm ? 0 : !strcmp(a, "--factor") ? 2 : 1;
      long hi = is_check ? 1 : 1000000;
      if (errno || end == v || *end || n < lo || n > hi)
        coll_usage_error("%s expects an integer between %ld and %ld, got '%s'", a, lo, hi, v);
      *(!strcmp(a, "--factor") ? &o->factor : !strcmp(a, "--iters") ? &o->iters
        : is_warm                ? &o->warmup
                                 : &o->check) = (int)n;
    } else if (!strcmp(a, "--sizes")) {
      free(o->sizes);
      o->sizes = mt_malloc((strlen(v) / 2 + 2) * sizeof(long long));
      o->n_sizes = 0;
      char *copy = strdup(v), *save = NULL;
      for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
        o->sizes[o->n_sizes++] = parse_bytes(a, t);
      free(copy);
      if (!o->n_sizes) coll_usage_error("--sizes: no sizes in '%s'", v);
    } else if (!strcmp(a, "--json")) {
      o->json_path = v;
    } else if (!strcmp(a, "--group")) {
      if (strcmp(v, "world") && strcmp(v, "tp") && strcmp(v, "cp") && strcmp(v, "dp") &&
          strcmp(v, "pp"))
        coll_usage_error("--group: unknown group '%s' (world|tp|cp|dp|pp)", v);
      o->group_name = v;
      o->group_given = 1;
    } else if (!strcmp(a, "--device")) {
      if (strcmp(v, "cpu") && strcmp(v, "cuda"))
        coll_usage_error("--device: '%s' is not cpu or cuda", v);
      o->on_gpu = !strcmp(v, "cuda");
    } else if (!strcmp(a, "--mesh")) {
      char *copy = strdup(v), *save = NULL;
      for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        static const char *axes[] = {"tp", "cp", "dp", "pp"};
        int ax = -1, n = 0, used = 0;
        for (int k = 0; k < 4; k++)
          if (!strncmp(t, axes[k], 2) && t[2] == '=') ax = k;
        if (ax < 0 || sscanf(t + 3, "%d%n", &n, &used) != 1 || t[3 + used] || n < 1)
          coll_usage_error("--mesh: '%s' is not AXIS=N with AXIS in tp, cp, dp, pp", t);
        o->mesh[ax] = n;
      }
      free(copy);
    } else {
      coll_usage_error("unknown option '%s'", a);
    }
  }
  if (o->min_bytes > o->max_bytes)
    coll_usage_error("--min-bytes %lld is larger than --max-bytes %lld", o->min_bytes,
                     o->max_bytes);
}

/* sum over r = 0..n-1 of (base + r) mod m, in O(m) */
static double mod_sum(long long base, int n, int m) {
  double s = (double)(n / m) * (m * (m - 1) / 2);
  for (int r = 0; r < n % m; r++) s += (double)((base + r) % m);
  return s;
}

/* the per-rank element counts of one size: total elements (multiple of n
 * for the chunked kinds) and the chunk each rank owns */
static size_t coll_count(coll_kind k, long long bytes, int n) {
  size_t count = (size_t)bytes / sizeof(float);
  if (k == COLL_ALLGATHER || k == COLL_REDUCE_SCATTER || k == COLL_ALLTOALL)
    count -= count % (size_t)n;
  return count;
}

typedef struct {
  mt_group *g;
  float *send, *recv;   /* where the calls work: host, or GPU memory */
  float *hsend, *hrecv; /* host copies for the check (the same as send, recv on the host) */
  const mt_ops *dev;    /* the GPU backend, or NULL */
  int *counts, *displs; /* per rank of the group */
} coll_bufs;

/* one call on `count` elements */
static void coll_call(coll_kind k, coll_bufs *b, size_t count) {
  int n = b->g->size, r = b->g->rank;
  size_t chunk = count / (size_t)n;
  mt_loc loc = b->dev ? MT_LOC_DEVICE : MT_LOC_HOST;
  for (int i = 0; i < n; i++) b->counts[i] = (int)chunk, b->displs[i] = (int)(chunk * (size_t)i);
  switch (k) {
  case COLL_ALLREDUCE:
    mt_allreduce(b->g, b->recv, count, MT_DT_F32, MT_RED_SUM, loc);
    break;
  case COLL_ALLGATHER:
    mt_allgatherv(b->g, NULL, b->recv, b->counts, b->displs, MT_DT_F32, loc);
    break;
  case COLL_REDUCE_SCATTER:
    mt_reduce_scatter(b->g, b->send, b->recv, b->counts, MT_DT_F32, loc);
    break;
  case COLL_ALLTOALL:
    MT_MPI_CHECK(MPI_Alltoall(b->send, (int)chunk, MPI_FLOAT, b->recv, (int)chunk, MPI_FLOAT,
                              b->g->comm));
    break;
  case COLL_SENDRECV:
    if (b->dev) { /* the pipeline's point-to-point path (NCCL channels in a pp group) */
      mt_request rs, rr;
      mt_irecv(b->g, b->recv, count, MT_DT_F32, (r + n - 1) % n, MT_TAG_PP_ACT, loc, &rr);
      mt_isend(b->g, b->send, count, MT_DT_F32, (r + 1) % n, MT_TAG_PP_ACT, loc, &rs);
      mt_wait(&rr);
      mt_wait(&rs);
      break;
    }
    MT_MPI_CHECK(MPI_Sendrecv(b->send, (int)count, MPI_FLOAT, (r + 1) % n, 0, b->recv, (int)count,
                              MPI_FLOAT, (r + n - 1) % n, 0, b->g->comm, MPI_STATUS_IGNORE));
    break;
  }
  if (b->dev) b->dev->sync(); /* a device call is finished when the data is there */
}

/* fill the inputs with small integers, run one call, count wrong elements */
static long long coll_check(coll_kind k, coll_bufs *b, size_t count) {
  int n = b->g->size, r = b->g->rank;
  size_t chunk = count / (size_t)n;
  float *in = k == COLL_ALLREDUCE || k == COLL_ALLGATHER ? b->hrecv : b->hsend;
  for (size_t i = 0; i < count; i++) b->hrecv[i] = -1.0f;
  switch (k) {
  case COLL_ALLREDUCE:
    for (size_t i = 0; i < count; i++) in[i] = (float)((r + (long long)i) % 17);
    break;
  case COLL_ALLGATHER: /* own chunk only, in place */
    for (size_t i = 0; i < chunk; i++) in[chunk * r + i] = (float)((r * 7 + (long long)i) % 251);
    break;
  case COLL_REDUCE_SCATTER:
    for (size_t i = 0; i < count; i++) in[i] = (float)((r + (long long)i) % 17);
    break;
  case COLL_ALLTOALL:
    for (int j = 0; j < n; j++)
      for (size_t i = 0; i < chunk; i++)
        in[chunk * j + i] = (float)((r * 31LL + j * 7LL + (long long)i) % 251);
    break;
  case COLL_SENDRECV:
    for (size_t i = 0; i < count; i++) in[i] = (float)((r * 13LL + (long long)i) % 251);
    break;
  }
  if (b->dev) {
    b->dev->upload(b->send, b->hsend, count * sizeof(float));
    b->dev->upload(b->recv, b->hrecv, count * sizeof(float));
  }
  coll_call(k, b, count);
  if (b->dev) b->dev->download(b->hrecv, b->recv, count * sizeof(float));
  if (g_coll_fault && r == 0) b->hrecv[0] += 1.0f;
  long long wrong = 0;
  size_t out_n = k == COLL_REDUCE_SCATTER ? chunk : count;
  for (size_t i = 0; i < out_n; i++) {
    double want = 0.0;
    switch (k) {
    case COLL_ALLREDUCE: want = mod_sum((long long)i, n, 17); break;
    case COLL_ALLGATHER: want = (double)(((long long)(i / chunk) * 7 + (long long)(i % chunk)) % 251); break;
    case COLL_REDUCE_SCATTER: want = mod_sum((long long)(chunk * r + i), n, 17); break;
    case COLL_ALLTOALL:
      want = (double)(((long long)(i / chunk) * 31 + r * 7LL + (long long)(i % chunk)) % 251);
      break;
    case COLL_SENDRECV: want = (double)((((r + n - 1) % n) * 13LL + (long long)i) % 251); break;
    }
    wrong += (double)b->hrecv[i] != want;
  }
  MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, b->g->comm));
  return wrong;
}

static double coll_bus_factor(coll_kind k, int n) {
  switch (k) {
  case COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
  case COLL_ALLGATHER:
  case COLL_REDUCE_SCATTER:
  case COLL_ALLTOALL: return (double)(n - 1) / n;
  case COLL_SENDRECV: return 1.0;
  }
  return 1.0;
}

/* the sizes to run: --sizes, or min * factor^i up to max */
static int coll_sizes(const coll_opts *o, long long **out) {
  if (o->sizes) {
    *out = mt_malloc((size_t)o->n_sizes * sizeof(long long));
    memcpy(*out, o->sizes, (size_t)o->n_sizes * sizeof(long long));
    return o->n_sizes;
  }
  int n = 0;
  for (long long s = o->min_bytes; s <= o->max_bytes; s *= o->factor) n++;
  *out = mt_malloc((size_t)n * sizeof(long long));
  n = 0;
  for (long long s = o->min_bytes; s <= o->max_bytes; s *= o->factor) (*out)[n++] = s;
  return n;
}

/* one kind over all sizes; returns the wrong elements found */
static long long coll_run(coll_kind k, const coll_opts *o, mt_group *g, FILE *json) {
  long long *sizes = NULL;
  int n_sizes = coll_sizes(o, &sizes);
  long long max_size = 0;
  for (int i = 0; i < n_sizes; i++) max_size = sizes[i] > max_size ? sizes[i] : max_size;
  size_t max_count = (size_t)max_size / sizeof(float) + 1;
  int print = g_coll_rank0;
  if (o->on_gpu && k == COLL_ALLTOALL) {
    if (print) printf("#\n# alltoall: skipped with --device cuda (meshtrain issues none)\n");
    free(sizes);
    return 0;
  }
  coll_bufs b = {.g = g, .send = NULL, .recv = NULL, .hsend = mt_malloc(max_count * sizeof(float)),
                 .hrecv = mt_malloc(max_count * sizeof(float)),
                 .dev = o->on_gpu ? mt_ops_cuda() : NULL,
                 .counts = mt_malloc((size_t)g->size * sizeof(int)),
                 .displs = mt_malloc((size_t)g->size * sizeof(int))};
  memset(b.hsend, 0, max_count * sizeof(float)); /* touch every page before timing */
  memset(b.hrecv, 0, max_count * sizeof(float));
  if (b.dev) { /* zeroed GPU memory */
    b.send = b.dev->alloc(MT_MEM_COMM, max_count * sizeof(float));
    b.recv = b.dev->alloc(MT_MEM_COMM, max_count * sizeof(float));
  } else {
    b.send = b.hsend;
    b.recv = b.hrecv;
  }
  if (print) {
    printf("#\n# %s: %d ranks in group %s (%d world ranks, %d nodes), float, %d warmup + %d "
           "timed calls per size, time = slowest rank's mean, buffers %s\n#\n",
           g_coll_names[k], g->size, o->group_name, o->mesh[0] * o->mesh[1] * o->mesh[2] * o->mesh[3],
           o->nodes, o->warmup, o->iters,
           o->on_gpu ? (!strcmp(mt_group_device_path(g), "staged") ? "on the GPU, staged through "
                                                                      "host MPI"
                                                                    : "on the GPU, NCCL")
                     : "on the host, MPI");
    printf("# %12s %12s %6s %6s %10s %9s %9s %7s\n", "size", "count", "type", "redop", "time",
           "algbw", "busbw", "#wrong");
    printf("# %12s %12s %6s %6s %10s %9s %9s %7s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
           "(GB/s)", "");
  }
  long long wrong_total = 0;
  double busbw_sum = 0.0, busbw_peak = 0.0;
  long long peak_size = 0;
  int rows = 0;
  for (int s = 0; s < n_sizes; s++) {
    size_t count = coll_count(k, sizes[s], g->size);
    long long bytes = (long long)(count * sizeof(float));
    if (count == 0) {
      if (print)
        printf("  %12lld %12s  (skipped: smaller than one float per rank)\n", sizes[s], "-");
      continue;
    }
    if (b.dev) b.dev->zero(MT_DT_F32, b.recv, count); /* zeros: in-place sums stay finite */
    else memset(b.recv, 0, count * sizeof(float));
    for (int it = 0; it < o->warmup; it++) coll_call(k, &b, count);
    MT_MPI_CHECK(MPI_Barrier(g->comm));
    double t0 = mt_now();
    for (int it = 0; it < o->iters; it++) coll_call(k, &b, count);
    double elapsed = mt_now() - t0;
    MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, g->comm));
    double time_s = elapsed / o->iters;
    long long wrong = o->check ? coll_check(k, &b, count) : -1;
    double algbw = (double)bytes / time_s * 1e-9, busbw = algbw * coll_bus_factor(k, g->size);
    wrong_total += wrong > 0 ? wrong : 0;
    busbw_sum += busbw, rows++;
    if (busbw > busbw_peak) busbw_peak = busbw, peak_size = bytes;
    if (print) {
      char wrong_text[32];
      snprintf(wrong_text, sizeof wrong_text, wrong < 0 ? "N/A" : "%lld", wrong);
      printf("  %12lld %12zu %6s %6s %10.2f %9.3f %9.3f %7s\n", bytes, count, "float",
             g_coll_redop[k], time_s * 1e6, algbw, busbw, wrong_text);
      fflush(stdout);
    }
    if (json) {
      cJSON *row = cJSON_CreateObject();
      cJSON_AddStringToObject(row, "bench", g_coll_names[k]);
      cJSON_AddStringToObject(row, "group", o->group_name);
      cJSON_AddNumberToObject(row, "ranks", g->size);
      cJSON_AddNumberToObject(row, "world", o->mesh[0] * o->mesh[1] * o->mesh[2] * o->mesh[3]);
      cJSON_AddNumberToObject(row, "nodes", o->nodes);
      cJSON_AddNumberToObject(row, "bytes", (double)bytes);
      cJSON_AddNumberToObject(row, "count", (double)count);
      cJSON_AddStringToObject(row, "dtype", "float");
      cJSON_AddStringToObject(row, "redop", g_coll_redop[k]);
      cJSON_AddStringToObject(row, "device", o->on_gpu ? "cuda" : "cpu");
      cJSON_AddStringToObject(row, "path", o->on_gpu ? mt_group_device_path(g) : "mpi");
      cJSON_AddNumberToObject(row, "iters", o->iters);
      cJSON_AddNumberToObject(row, "time_us", time_s * 1e6);
      cJSON_AddNumberToObject(row, "algbw_gbs", algbw);
      cJSON_AddNumberToObject(row, "busbw_gbs", busbw);
      cJSON_AddNumberToObject(row, "bus_factor", coll_bus_factor(k, g->size));
      cJSON_AddNumberToObject(row, "wrong", (double)wrong);
      char *line = cJSON_PrintUnformatted(row);
      fprintf(json, "%s\n", line);
      cJSON_free(line);
      cJSON_Delete(row);
    }
  }
  if (print)
    printf("# %s: %s, avg busbw %.3f GB/s over %d sizes, peak %.3f GB/s at %lld B\n",
           g_coll_names[k], wrong_total ? "WRONG RESULTS" : "0 wrong", rows ? busbw_sum / rows : 0.0,
           rows, busbw_peak, peak_size);
  if (b.dev) {
    b.dev->free(MT_MEM_COMM, b.send, max_count * sizeof(float));
    b.dev->free(MT_MEM_COMM, b.recv, max_count * sizeof(float));
  }
  free(b.hsend), free(b.hrecv), free(b.counts), free(b.displs), free(sizes);
  return wrong_total;
}

/* meshbench <kind>|collectives [options] under mpirun or srun */
int mt_bench_collectives(int argc, char **argv) {
  int initialized = 0;
  MT_MPI_CHECK(MPI_Initialized(&initialized));
  if (!initialized) mt_mpi_init(&argc, &argv, MPI_THREAD_SINGLE);
  int world_rank = 0, world_size = 1;
  MT_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world_size));
  mt_log_init(world_rank);
  g_coll_rank0 = world_rank == 0;
  coll_opts o;
  int help = 0;
  coll_parse(argc, argv, &o, &help);
  if (help) {
    MT_MPI_CHECK(MPI_Finalize());
    return MT_EXIT_OK;
  }
  o.world_rank = world_rank;
  /* the mesh: unnamed axes are 1, dp fills the rest unless given */
  int inner = 1;
  for (int a = 0; a < 4; a++)
    if (a != 2) inner *= o.mesh[a] ? o.mesh[a] : 1;
  for (int a = 0; a < 4; a++)
    if (a != 2 && !o.mesh[a]) o.mesh[a] = 1;
  if (!o.mesh[2]) {
    if (world_size % inner)
      coll_usage_error("--mesh: tp*cp*pp = %d does not divide the %d ranks", inner, world_size);
    o.mesh[2] = world_size / inner;
  }
  mt_mesh mesh;
  mt_err e = {0};
  mt_mesh_create(&mesh, o.mesh[0], o.mesh[1], o.mesh[2], o.mesh[3], &e);
  if (mt_err_agree(&e, MPI_COMM_WORLD)) coll_usage_error("--mesh: %s", e.msg);
  if (o.on_gpu) {
    /* one GPU per rank by node-local rank; comm's device paths as in training */
    char why[256] = "";
    int n_gpu = mt_cuda_device_count(why, sizeof why), shared = 0;
    int dev = mt_device_for_local_rank(mesh.node.rank, mesh.node.size, n_gpu, &shared);
    mt_err ge = {0};
    if (dev < 0) mt_err_set(&ge, "--device cuda: no GPU is usable: %s", why);
    else mt_cuda_init(dev, MT_PRECISION_FP32, &ge);
    if (mt_err_agree(&ge, MPI_COMM_WORLD)) coll_usage_error("%s", ge.msg);
    static mt_comm_device_copy copy;
    copy.to_host = mt_ops_cuda()->download;
    copy.to_device = mt_ops_cuda()->upload;
    mt_comm_set_device_copy(&copy);
    mt_cuda_info info;
    mt_cuda_get_info(&info);
    mt_comm_nccl_opts no = {.device_id = info.uuid, .compute_stream = mt_cuda_stream(),
                            .host_wait = 1}; /* every group, no point-to-point */
    if (mt_comm_nccl_init(&mesh, &no, &ge) != 0 || mt_err_agree(&ge, MPI_COMM_WORLD))
      coll_usage_error("--device cuda: %s", ge.msg);
    if (!o.group_given) o.group_name = "dp";
  }
  mt_group *g = !strcmp(o.group_name, "tp")   ? &mesh.tp_g
                : !strcmp(o.group_name, "cp") ? &mesh.cp_g
                : !strcmp(o.group_name, "dp") ? &mesh.dp_g
                : !strcmp(o.group_name, "pp") ? &mesh.pp_g
                                              : &mesh.world;
  /* nodes = shared-memory domains (on a cluster, the hosts of the job) */
  int leader = mesh.node.rank == 0;
  MT_MPI_CHECK(MPI_Allreduce(&leader, &o.nodes, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));

  FILE *json = NULL;
  mt_err je = {0};
  if (o.json_path && world_rank == 0 && !(json = fopen(o.json_path, "a")))
    mt_err_set(&je, "--json %s: cannot open for appending: %s", o.json_path, strerror(errno));
  if (mt_err_agree(&je, MPI_COMM_WORLD)) coll_usage_error("%s", je.msg);

  long long wrong = 0;
  int all = !strcmp(argv[0], "collectives");
  for (int k = 0; k < N_COLL; k++)
    if (all || !strcmp(argv[0], g_coll_names[k])) wrong += coll_run((coll_kind)k, &o, g, json);
  int rc = MT_EXIT_OK;
  if (json && fclose(json) != 0) {
    fprintf(stderr, "%s: error: writing %s failed\n", g_prog, o.json_path);
    rc = MT_EXIT_RUNTIME;
  }
  if (wrong) {
    if (world_rank == 0) fprintf(stderr, "%s: error: %lld wrong elements\n", g_prog, wrong);
    rc = MT_EXIT_RUNTIME;
  }
  free(o.sizes);
  if (o.on_gpu) {
    mt_comm_nccl_destroy(&mesh);
    mt_comm_set_device_copy(NULL);
    mt_cuda_shutdown();
  }
  mt_mesh_destroy(&mesh);
  MT_MPI_CHECK(MPI_Finalize());
  return rc;
}

/* ------------------------------------------------------------------ */
/* dispatcher                                                          */

/* meshbench info: what this process would compute with (used by the scripts
 * to detect an OpenBLAS that fell back to generic kernels). */
