/* meshbench stream: memory bandwidth of elementwise work on this rank's
 * threads, the figure the cost model (meshplan) prices a layer's LayerNorm,
 * GELU, residual and softmax traffic with.
 *
 *   meshbench stream [--mib N] [--threads N] [--reps N] [--json FILE]
 *
 * Three arrays of N MiB each; the triad a[i] = b[i] + s * c[i] (12 bytes a
 * float moved: two reads, one write), OpenMP over the range as the CPU
 * kernels do, the median of --reps passes after a warm-up. GB/s = 1e9 B/s. */
#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "core/core.h"
#include "kernels/kernels.h"


static int positive(const char *opt, const char *v, int lo, int hi) {
  char *end = NULL;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || *end || x < lo || x > hi) {
    fprintf(stderr, "meshbench stream: %s expects an integer in %d..%d, got '%s'\n", opt, lo, hi,
            v ? v : "");
    exit(MT_EXIT_BADINPUT);
  }
  return (int)x;
}

int mt_bench_stream(int argc, char **argv) {
  int mib = 64, threads = 0, reps = 7;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help")) {
      printf("usage: meshbench stream [--mib N] [--threads N] [--reps N] [--json FILE]\n"
             "Memory bandwidth of the triad a = b + s*c over three N-MiB arrays (default 64)\n"
             "on this rank's threads (default: as the environment sets), median of --reps\n"
             "(default 7) passes; --json appends one line.\n");
      return MT_EXIT_OK;
    } else if (!strcmp(a, "--mib")) {
      mib = positive(a, v, 1, 65536), i++;
    } else if (!strcmp(a, "--threads")) {
      threads = positive(a, v, 1, 4096), i++;
    } else if (!strcmp(a, "--reps")) {
      reps = positive(a, v, 1, 1000), i++;
    } else if (!strcmp(a, "--json") && v) {
      json = v, i++;
    } else {
      fprintf(stderr, "meshbench stream: unknown option '%s' (see --help)\n", a);
      return MT_EXIT_BADINPUT;
    }
  }
  if (threads > 0) mt_kernels_set_threads(threads);
  size_t n = (size_t)mib * 1048576 / sizeof(float);
  float *a = mt_malloc(n * sizeof(float)), *b = mt_malloc(n * sizeof(float)),
        *c = mt_malloc(n * sizeof(float));
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; i++) { /* first touch by the threads that use it */
    a[i] = 0.0f;
    b[i] = (float)(i & 1023);
    c[i] = 1.0f;
  }
  double *t = mt_malloc((size_t)(reps + 1) * sizeof(double));
  for (int r = 0; r <= reps; r++) {
    double t0 = mt_now();
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = b[i] + 0.5f * c[i];
    t[r] = mt_now() - t0;
  }
  double med = mt_median(t + 1, reps); /* pass 0 was the warm-up */
  double gbs = 12.0 * (double)n / med * 1e-9;
  int check = a[n - 1] == b[n - 1] + 0.5f * c[n - 1];
  printf("# stream triad: %d MiB x 3, %d threads, median of %d: %.4f s, %.2f GB/s%s\n", mib,
         mt_kernels_threads(), reps, med, gbs, check ? "" : " (WRONG RESULT)");
  if (json) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "bench", "stream");
    cJSON_AddNumberToObject(o, "mib", mib);
    cJSON_AddNumberToObject(o, "threads", mt_kernels_threads());
    cJSON_AddNumberToObject(o, "time_s", med);
    cJSON_AddNumberToObject(o, "gbs", gbs);
    if (mt_bench_json_append("meshbench stream", json, o) != MT_EXIT_OK) return MT_EXIT_RUNTIME;
  }
  free(a);
  free(b);
  free(c);
  free(t);
  return check ? MT_EXIT_OK : MT_EXIT_RUNTIME;
}
