/* meshbench data: the loader's speed, the figure to hold against the
 * training's consumption (apps/scripts/bench-data.sh runs both).
 *
 *   meshbench data --blend SPEC [--T N] [--samples N] [--seed S] [--json FILE]
 *
 * Opens data.blend's sources (data.format = auto, nothing held out), then
 * reads --samples global samples (default 20000) through the blend, as the
 * training loop does (mt_blend_get: the schedule, the source's permutation,
 * the shard's window copied into int inputs and targets), once to warm the
 * page cache and once timed. One thread. Prints samples/s and tokens/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "core/core.h"
#include "data/data.h"

int mt_bench_data(int argc, char **argv) {
  const char *blend = NULL, *json = NULL;
  long T = 1024, samples = 20000;
  unsigned long long seed = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help")) {
      printf("usage: meshbench data --blend SPEC [--T N] [--samples N] [--seed S] [--json FILE]\n"
             "Samples/s and tokens/s of the blended loader over SPEC (data.blend's syntax):\n"
             "--samples windows of T+1 tokens (defaults 20000, 1024), after a warm pass.\n");
      return MT_EXIT_OK;
    } else if (!strcmp(a, "--blend") && v) {
      blend = v, i++;
    } else if (!strcmp(a, "--T") && v) {
      T = strtol(v, NULL, 10), i++;
    } else if (!strcmp(a, "--samples") && v) {
      samples = strtol(v, NULL, 10), i++;
    } else if (!strcmp(a, "--seed") && v) {
      seed = strtoull(v, NULL, 10), i++;
    } else if (!strcmp(a, "--json") && v) {
      json = v, i++;
    } else {
      fprintf(stderr, "meshbench data: unknown option '%s' (see --help)\n", a);
      return MT_EXIT_BADINPUT;
    }
  }
  if (!blend || T < 1 || T > (1 << 24) || samples < 1) {
    fprintf(stderr, "meshbench data: needs --blend SPEC, T >= 1 and samples >= 1\n");
    return MT_EXIT_BADINPUT;
  }
  mt_err e = {0};
  mt_sources ss;
  mt_blend b;
  if (mt_sources_open(&ss, "", blend, "", MT_DATA_AUTO, 0.0, &e) != 0 ||
      mt_blend_init(&b, &ss, (int)T, seed, &e) != 0) {
    fprintf(stderr, "meshbench data: error: %s\n", e.msg);
    return mt_err_exit_code(&e);
  }
  int files = 0;
  for (int i = 0; i < ss.n; i++) files += ss.src[i].n_files;
  int *buf = mt_calloc(2 * (size_t)T, sizeof *buf);
  long long check = 0;
  double secs = 0;
  for (int pass = 0; pass < 2; pass++) {
    double t0 = mt_now();
    for (long g = 0; g < samples; g++) {
      mt_blend_get(&b, (uint64_t)g, buf, buf + T);
      check += buf[g % T];
    }
    secs = mt_now() - t0;
  }
  double sps = samples / secs, tps = sps * (double)T;
  printf("# meshbench data: %d sources, %d files, %llu windows of T+1 = %ld tokens\n", ss.n,
         files, (unsigned long long)mt_blend_windows(&b), T + 1);
  printf("%12s %12s %14s %10s\n", "samples", "time_s", "tokens/s", "samples/s");
  printf("%12ld %12.4f %14.4g %10.1f\n", samples, secs, tps, sps);
  printf("# summary: loader %.4g tokens/s (checksum %lld)\n", tps, check);
  if (json) {
    FILE *f = fopen(json, "a");
    if (f) {
      fprintf(f, "{\"bench\":\"data\",\"sources\":%d,\"files\":%d,\"T\":%ld,\"samples\":%ld,"
                 "\"seconds\":%.6f,\"tokens_per_s\":%.6g,\"samples_per_s\":%.6g}\n",
              ss.n, files, T, samples, secs, tps, sps);
      fclose(f);
    }
  }
  free(buf);
  mt_blend_free(&b);
  mt_sources_close(&ss);
  return MT_EXIT_OK;
}
