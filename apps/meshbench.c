/* meshbench: the measurements meshreport turns into baselines and ratios.
 *
 *   meshbench <subcommand> [options]      meshbench --help
 *
 * Each subcommand prints one row per case (nccl-tests style), a summary line,
 * and appends one JSON line to --json FILE. Subcommands today:
 *   gemm   cblas_sgemm GFLOP/s at the shapes of one GPT training step
 * (allreduce, ckpt, ... slot into g_commands below). gemm is one process and
 * never calls MPI, so it runs with or without mpirun. */
#include "core/core.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include <cblas.h>
#include <cjson/cJSON.h>
#include <errno.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *g_prog = "meshbench";

/* "meshbench: error: ..." on stderr and exit 2 (bad input) */
static void __attribute__((format(printf, 1, 2), noreturn)) usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: error: ", g_prog);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (see %s --help)\n", g_prog);
  exit(MT_EXIT_BADINPUT);
}

/* a positive int option value, or a usage error naming the option */
static int parse_positive_int(const char *opt, const char *text) {
  char *end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno || end == text || *end != '\0' || v <= 0 || v > 1000000000L)
    usage_error("%s expects a positive integer, got '%s'", opt, text);
  return (int)v;
}

/* the value following argv[*i], or a usage error */
static const char *option_value(int argc, char **argv, int *i) {
  if (*i + 1 >= argc) usage_error("%s needs a value", argv[*i]);
  return argv[++*i];
}

/* ------------------------------------------------------------------ */
/* gemm                                                                */

/* How the kernels call cblas_sgemm (row-major), out (N,OC) = inp (N,C) w^T:
 *   NT  forward          out (M=N,  N=OC) = inp  (N,C)  * w^T (C,OC)   K = C
 *   NN  backward dinp    dinp(M=N,  N=C)  += dout(N,OC) * w   (OC,C)   K = OC
 *   TN  backward dw      dw  (M=OC, N=C)  += dout^T(OC,N) * inp (N,C)  K = N */
typedef enum { GEMM_NT, GEMM_NN, GEMM_TN } gemm_form;
static const char *g_form_names[] = {"NT", "NN", "TN"};
static const char *g_role_names[] = {"fwd", "bwd_dinp", "bwd_dw"};

typedef struct {
  const char *layer; /* qkv, attn_proj, fc, fc_proj, lm_head */
  gemm_form form;
  int m, n, k;
  int count;  /* calls per training step (per micro-batch of --tokens rows) */
  float beta; /* as the kernels call it: 1 when accumulating or adding a bias */
  double time_s, gflops, max_rel_err;
} gemm_case;

#define GEMM_MAX_CASES 15

/* The five linear layers of GPT-2 (count = calls per step), each in its three
 * forms. The lm head is the tied embedding (Vp,C) without bias. */
static int gemm_cases_for(const mt_model_shape *s, int tokens, gemm_case *cases) {
  int C = s->n_embd, L = s->n_layer;
  struct {
    const char *name;
    int in, out, count, has_bias;
  } layers[] = {{"qkv", C, 3 * C, L, 1},
                {"attn_proj", C, C, L, 1},
                {"fc", C, 4 * C, L, 1},
                {"fc_proj", 4 * C, C, L, 1},
                {"lm_head", C, s->vocab_padded, 1, 0}};
  int n = 0;
  for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
    int in = layers[i].in, out = layers[i].out, count = layers[i].count;
    cases[n++] = (gemm_case){layers[i].name, GEMM_NT, tokens, out, in, count,
                             layers[i].has_bias ? 1.0f : 0.0f, 0, 0, 0};
    cases[n++] = (gemm_case){layers[i].name, GEMM_NN, tokens, in, out, count, 1.0f, 0, 0, 0};
    cases[n++] = (gemm_case){layers[i].name, GEMM_TN, out, in, tokens, count, 1.0f, 0, 0, 0};
  }
  return n;
}

/* op(A) is (m,k), op(B) is (k,n), C is (m,n), all row-major and contiguous in
 * the layout the kernels use (see gemm_form). */
static void gemm_run(const gemm_case *g, const float *A, const float *B, float *Cm, float beta) {
  int m = g->m, n = g->n, k = g->k;
  switch (g->form) {
  case GEMM_NT: /* A (m,k), B stored (n,k) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, A, k, B, k, beta, Cm, n);
    break;
  case GEMM_NN: /* A (m,k), B (k,n) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, A, k, B, n, beta, Cm,
                n);
    break;
  case GEMM_TN: /* A stored (k,m), B (k,n) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, 1.0f, A, m, B, n, beta, Cm, n);
    break;
  }
}

/* the (i,j) entry of op(A) op(B) in double, from the stored layouts */
static double gemm_entry(const gemm_case *g, const float *A, const float *B, int i, int j,
                         double *abs_sum) {
  double s = 0.0, a_s = 0.0;
  for (int p = 0; p < g->k; p++) {
    double a = g->form == GEMM_TN ? A[(size_t)p * g->m + i] : A[(size_t)i * g->k + p];
    double b = g->form == GEMM_NT ? B[(size_t)j * g->k + p] : B[(size_t)p * g->n + j];
    s += a * b;
    a_s += fabs(a * b);
  }
  *abs_sum = a_s;
  return s;
}

/* OpenBLAS picks its kernels from cpuid at load time; a CPU it does not know
 * (0.3.21 on recent Xeons) falls back to SSE3 "Prescott" kernels, several
 * times slower. OPENBLAS_CORETYPE, read before main, is the only cure. */
static void warn_if_blas_fallback(const char *core) {
  static const char *avx2_cores[] = {"Haswell", "Zen", "SkylakeX", "Cooperlake",
                                     "SapphireRapids", "Excavator"};
  if (!__builtin_cpu_supports("avx2")) return;
  for (size_t i = 0; i < sizeof avx2_cores / sizeof avx2_cores[0]; i++)
    if (!strcasecmp(core, avx2_cores[i])) return;
  fprintf(stderr,
          "%s: warning: OpenBLAS uses its '%s' kernels on a CPU with AVX2%s; sgemm will be "
          "several times slower. Export OPENBLAS_CORETYPE=%s before starting.\n",
          g_prog, core, __builtin_cpu_supports("avx512f") ? " and AVX-512" : "",
          __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Times reps calls (after one warm-up) and keeps the median; then one call
 * with beta = 0 is checked at 16 sampled entries against a double dot
 * product, error relative to sum |a*b| (fp32 rounding: ~1e-7 to 1e-6). */
static void gemm_measure(gemm_case *g, const float *A, const float *B, float *Cm, int reps) {
  double *times = mt_malloc((size_t)reps * sizeof(double));
  gemm_run(g, A, B, Cm, g->beta);
  for (int r = 0; r < reps; r++) {
    double t0 = mt_now();
    gemm_run(g, A, B, Cm, g->beta);
    times[r] = mt_now() - t0;
  }
  qsort(times, (size_t)reps, sizeof(double), compare_double);
  g->time_s = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
  g->gflops = 2.0 * g->m * (double)g->n * g->k / g->time_s * 1e-9;
  free(times);

  gemm_run(g, A, B, Cm, 0.0f);
  g->max_rel_err = 0.0;
  for (int s = 0; s < 16; s++) {
    int i = (int)(((long long)s * 7919) % g->m), j = (int)(((long long)s * 104729) % g->n);
    double abs_sum = 0.0, want = gemm_entry(g, A, B, i, j, &abs_sum);
    double err = fabs((double)Cm[(size_t)i * g->n + j] - want) / (abs_sum > 0 ? abs_sum : 1.0);
    if (err > g->max_rel_err || isnan(err)) g->max_rel_err = isnan(err) ? INFINITY : err;
  }
}

static void gemm_help(FILE *f) {
  fprintf(f,
          "usage: %s gemm [options]\n"
          "Measures cblas_sgemm at the shapes one GPT training step runs (qkv, attn_proj,\n"
          "fc, fc_proj, lm_head; each as forward NT, backward-dinp NN, backward-dW TN).\n"
          "Time per shape is the median of --reps calls after one warm-up.\n"
          "  --model NAME    tiny | small | gpt2-124m (default small)\n"
          "  --tokens N      rows per gemm, i.e. tokens per micro-batch (default 2048)\n"
          "  --threads N     BLAS/OpenMP threads (default: as the environment sets)\n"
          "  --reps N        timed calls per shape (default 5)\n"
          "  --json FILE     append one JSON line with every figure\n"
          "  --help          this text\n"
          "gflops_weighted = flops / time of one step's worth of these gemms (each shape\n"
          "counted as often as a step calls it); %%peak compares each shape with the\n"
          "fastest shape of the same run.\n",
          g_prog);
}

static cJSON *gemm_json(const char *model, const char *blas_core, int threads, int tokens,
                        int reps, const gemm_case *cases, int n, double step_flop,
                        double step_time, const gemm_case *peak) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "bench", "gemm");
  cJSON_AddStringToObject(root, "model", model);
  cJSON_AddNumberToObject(root, "threads", threads);
  cJSON_AddStringToObject(root, "blas_core", blas_core);
  cJSON_AddNumberToObject(root, "tokens", tokens);
  cJSON_AddNumberToObject(root, "reps", reps);
  cJSON *shapes = cJSON_AddArrayToObject(root, "shapes");
  for (int i = 0; i < n; i++) {
    const gemm_case *g = &cases[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "layer", g->layer);
    cJSON_AddStringToObject(o, "role", g_role_names[g->form]);
    cJSON_AddStringToObject(o, "form", g_form_names[g->form]);
    cJSON_AddNumberToObject(o, "m", g->m);
    cJSON_AddNumberToObject(o, "n", g->n);
    cJSON_AddNumberToObject(o, "k", g->k);
    cJSON_AddNumberToObject(o, "count", g->count);
    cJSON_AddNumberToObject(o, "time_s", g->time_s);
    cJSON_AddNumberToObject(o, "gflops", g->gflops);
    cJSON_AddNumberToObject(o, "max_rel_err", g->max_rel_err);
    cJSON_AddItemToArray(shapes, o);
  }
  cJSON_AddNumberToObject(root, "step_gflop", step_flop * 1e-9);
  cJSON_AddNumberToObject(root, "step_time_s", step_time);
  cJSON_AddNumberToObject(root, "gflops_weighted", step_flop / step_time * 1e-9);
  cJSON_AddNumberToObject(root, "gflops_peak_shape", peak->gflops);
  char peak_name[64];
  snprintf(peak_name, sizeof peak_name, "%s %s", peak->layer, g_role_names[peak->form]);
  cJSON_AddStringToObject(root, "peak_shape", peak_name);
  return root;
}

static int bench_gemm(int argc, char **argv) {
  const char *model = "small", *json_path = NULL;
  int tokens = 2048, threads = 0, reps = 5;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      gemm_help(stdout);
      return MT_EXIT_OK;
    } else if (!strcmp(a, "--model")) {
      model = option_value(argc, argv, &i);
    } else if (!strcmp(a, "--tokens")) {
      tokens = parse_positive_int(a, option_value(argc, argv, &i));
    } else if (!strcmp(a, "--threads")) {
      threads = parse_positive_int(a, option_value(argc, argv, &i));
    } else if (!strcmp(a, "--reps")) {
      reps = parse_positive_int(a, option_value(argc, argv, &i));
    } else if (!strcmp(a, "--json")) {
      json_path = option_value(argc, argv, &i);
    } else {
      usage_error("gemm: unknown option '%s'", a);
    }
  }
  mt_model_shape shape;
  if (strcmp(model, "custom") == 0 || mt_model_preset(model, &shape) != 0)
    usage_error("--model: unknown model '%s' (tiny|small|gpt2-124m)", model);
  mt_kernels_set_threads(threads); /* 0: leave as the environment set it */
  int blas_threads = openblas_get_num_threads();
  const char *blas_core = mt_kernels_blas_core();
  warn_if_blas_fallback(blas_core);

  gemm_case cases[GEMM_MAX_CASES];
  int n = gemm_cases_for(&shape, tokens, cases);
  /* one buffer per operand, big enough for every case; random in [-1,1) */
  size_t a_max = 0, b_max = 0, c_max = 0;
  for (int i = 0; i < n; i++) {
    size_t m = (size_t)cases[i].m, nn = (size_t)cases[i].n, k = (size_t)cases[i].k;
    a_max = m * k > a_max ? m * k : a_max;
    b_max = k * nn > b_max ? k * nn : b_max;
    c_max = m * nn > c_max ? m * nn : c_max;
  }
  float *A = mt_malloc(a_max * sizeof(float)), *B = mt_malloc(b_max * sizeof(float));
  float *Cm = mt_malloc(c_max * sizeof(float));
  uint64_t state = 12345;
  for (size_t i = 0; i < a_max; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    A[i] = (float)((state >> 40) * (2.0 / 16777216.0) - 1.0);
  }
  for (size_t i = 0; i < b_max; i++) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    B[i] = (float)((state >> 40) * (2.0 / 16777216.0) - 1.0);
  }
  memset(Cm, 0, c_max * sizeof(float));

  printf("# meshbench gemm: model %s (n_layer %d, n_embd %d, vocab %d padded %d), tokens %d, "
         "threads %d, reps %d (median), OpenBLAS core %s\n",
         model, shape.n_layer, shape.n_embd, shape.vocab, shape.vocab_padded, tokens,
         blas_threads, reps, blas_core);
  for (int i = 0; i < n; i++) gemm_measure(&cases[i], A, B, Cm, reps);

  const gemm_case *peak = &cases[0];
  double step_flop = 0.0, step_time = 0.0;
  for (int i = 0; i < n; i++) {
    if (cases[i].gflops > peak->gflops) peak = &cases[i];
    step_flop += cases[i].count * 2.0 * cases[i].m * (double)cases[i].n * cases[i].k;
    step_time += cases[i].count * cases[i].time_s;
  }
  printf("# %-10s %-8s %-4s %7s %7s %7s %5s %10s %9s %6s %8s\n", "layer", "role", "form", "M",
         "N", "K", "count", "time(ms)", "GFLOP/s", "%peak", "maxerr");
  int wrong = 0;
  for (int i = 0; i < n; i++) {
    const gemm_case *g = &cases[i];
    wrong += g->max_rel_err > 1e-5;
    printf("  %-10s %-8s %-4s %7d %7d %7d %5d %10.3f %9.1f %6.1f %8.1e\n", g->layer,
           g_role_names[g->form], g_form_names[g->form], g->m, g->n, g->k, g->count,
           g->time_s * 1e3, g->gflops, 100.0 * g->gflops / peak->gflops, g->max_rel_err);
  }
  double weighted = step_flop / step_time * 1e-9;
  printf("# step: %.2f GFLOP in %.2f ms = %.1f GFLOP/s weighted (%.0f%% of peak shape %s %s "
         "%.1f GFLOP/s), %d wrong\n",
         step_flop * 1e-9, step_time * 1e3, weighted, 100.0 * weighted / peak->gflops,
         peak->layer, g_role_names[peak->form], peak->gflops, wrong);

  int rc = wrong ? MT_EXIT_RUNTIME : MT_EXIT_OK;
  if (json_path) {
    cJSON *root = gemm_json(model, blas_core, blas_threads, tokens, reps, cases, n, step_flop,
                            step_time, peak);
    char *line = cJSON_PrintUnformatted(root);
    FILE *f = fopen(json_path, "a");
    if (!f || !line || fprintf(f, "%s\n", line) < 0 || fclose(f) != 0) {
      fprintf(stderr, "%s: error: cannot append to %s: %s\n", g_prog, json_path,
              strerror(errno));
      rc = MT_EXIT_RUNTIME;
    }
    cJSON_free(line);
    cJSON_Delete(root);
  }
  if (wrong) fprintf(stderr, "%s: error: %d gemm shape(s) gave wrong results\n", g_prog, wrong);
  free(A), free(B), free(Cm);
  return rc;
}

/* ------------------------------------------------------------------ */
/* dispatcher                                                          */

/* meshbench info: what this process would compute with (used by the scripts
 * to detect an OpenBLAS that fell back to generic kernels). */
static int bench_info(int argc, char **argv) {
  (void)argc;
  (void)argv;
  printf("blas_core %s\nthreads %d\n", mt_kernels_blas_core(), mt_kernels_threads());
  return MT_EXIT_OK;
}

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv); /* argv[0] is the subcommand */
  const char *summary;
} bench_command;

static const bench_command g_commands[] = {
    {"gemm", bench_gemm, "cblas_sgemm GFLOP/s at the shapes of one GPT training step"},
    {"info", bench_info, "the BLAS kernels and thread count this process uses"},
};
#define N_COMMANDS ((int)(sizeof g_commands / sizeof g_commands[0]))

static void main_help(FILE *f) {
  fprintf(f, "usage: %s <subcommand> [options]   (%s <subcommand> --help for its options)\n",
          g_prog, g_prog);
  fprintf(f, "subcommands:\n");
  for (int i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-10s %s\n", g_commands[i].name, g_commands[i].summary);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    main_help(stderr);
    return MT_EXIT_BADINPUT;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    main_help(stdout);
    return MT_EXIT_OK;
  }
  for (int i = 0; i < N_COMMANDS; i++)
    if (!strcmp(argv[1], g_commands[i].name)) return g_commands[i].run(argc - 1, argv + 1);
  usage_error("unknown subcommand '%s'", argv[1]);
}
