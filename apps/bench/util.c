/* What meshbench's subcommands share (bench.h): the JSON line appended to
 * --json FILE, and --cold for the matmul benchmarks (gemm.c, gemm_bf16.c):
 * before each timed call the caches are flushed by reading a buffer larger
 * than any last-level cache, so the operands come from memory as a
 * training step's weights and most activations do (the previous ops
 * evicted them); without it every call after the warm-up finds them in
 * cache. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "core/core.h"

const char *const mt_bench_form_names[3] = {"NT", "NN", "TN"};
const char *const mt_bench_role_names[3] = {"fwd", "bwd_dinp", "bwd_dw"};

void mt_bench_gpt_gemms(int C, int L, int Vp, int tokens, mt_bench_matmul *out) {
  const struct {
    const char *name;
    int in, out, count, bias;
  } layers[] = {{"qkv", C, 3 * C, L, 1},
                {"attn_proj", C, C, L, 1},
                {"fc", C, 4 * C, L, 1},
                {"fc_proj", 4 * C, C, L, 1},
                {"lm_head", C, Vp, 1, 0}};
  int n = 0;
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
    const char *name = layers[i].name;
    int in = layers[i].in, o = layers[i].out, count = layers[i].count;
    out[n++] = (mt_bench_matmul){name, MT_BENCH_NT, tokens, o, in, count, layers[i].bias};
    out[n++] = (mt_bench_matmul){name, MT_BENCH_NN, tokens, in, o, count, 0};
    out[n++] = (mt_bench_matmul){name, MT_BENCH_TN, o, in, tokens, count, 0};
  }
}

cJSON *mt_bench_matmul_json(const char *layer, mt_bench_form form, int m, int n, int k,
                            int count) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "layer", layer);
  cJSON_AddStringToObject(o, "role", mt_bench_role_names[form]);
  cJSON_AddStringToObject(o, "form", mt_bench_form_names[form]);
  cJSON_AddNumberToObject(o, "m", m);
  cJSON_AddNumberToObject(o, "n", n);
  cJSON_AddNumberToObject(o, "k", k);
  cJSON_AddNumberToObject(o, "count", count);
  return o;
}

static float *g_flush;
static size_t g_flush_n;

void mt_bench_cold_on(void) {
  g_flush_n = (size_t)64 << 20; /* 256 MiB: beyond the last-level cache of any CPU this runs on */
  g_flush = mt_malloc(g_flush_n * sizeof(float));
  for (size_t i = 0; i < g_flush_n; i++) g_flush[i] = (float)(i & 7);
  printf("# cold: the caches are flushed (256 MiB read) before every timed call\n");
}

void mt_bench_cold_flush(void) {
  if (!g_flush) return;
  volatile float sink = 0.0f;
  float s = 0.0f;
  for (size_t i = 0; i < g_flush_n; i += 16) s += g_flush[i]; /* a float per 64-byte line */
  sink = s;
  (void)sink;
}

void mt_bench_cold_off(void) {
  free(g_flush);
  g_flush = NULL;
}

int mt_bench_json_append(const char *prog, const char *path, cJSON *root) {
  int rc = MT_EXIT_OK;
  char *line = cJSON_PrintUnformatted(root);
  FILE *f = line ? fopen(path, "a") : NULL;
  if (!f || fprintf(f, "%s\n", line) < 0 || fclose(f) != 0) {
    fprintf(stderr, "%s: error: cannot append to %s: %s\n", prog, path, strerror(errno));
    rc = MT_EXIT_RUNTIME;
  }
  cJSON_free(line);
  cJSON_Delete(root);
  return rc;
}

void mt_bench_bad(const char *prog, const char *what, const char *value) {
  fprintf(stderr, "%s: error: %s '%s' (see %s --help)\n", prog, what, value, prog);
  exit(MT_EXIT_BADINPUT);
}

void mt_bench_vusage(const char *prog, const char *sub, const char *fmt, va_list ap) {
  fprintf(stderr, "%s: error: ", prog);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, " (see %s%s%s --help)\n", prog, sub ? " " : "", sub ? sub : "");
}

int mt_bench_int(const char *prog, const char *opt, const char *text, long max) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end || v <= 0 || v > max) mt_bench_bad(prog, opt, text);
  return (int)v;
}
