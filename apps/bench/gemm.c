/* meshbench gemm: matmul GFLOP/s at the shapes of one GPT training step,
 * cblas_sgemm or (--device cuda) the CUDA backend's cuBLASLt matmuls. One
 * process, no MPI. */
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

static void __attribute__((format(printf, 1, 2), noreturn)) usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  mt_bench_vusage(g_prog, NULL, fmt, ap);
  va_end(ap);
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

/* the forms of cblas_sgemm the kernels call: bench.h's mt_bench_form */

typedef struct {
  const char *layer; /* qkv, attn_proj, fc, fc_proj, lm_head */
  mt_bench_form form;
  int m, n, k;
  int count;  /* calls per training step (per micro-batch of --tokens rows) */
  float beta; /* as the kernels call it: 1 when accumulating or adding a bias */
  double time_s, gflops, max_rel_err;
} gemm_case;

#define GEMM_MAX_CASES MT_BENCH_GPT_GEMMS

/* bench.h's matmuls of a GPT-2 step; beta 0 only for the forward of the lm
 * head (no bias) */
static int gemm_cases_for(const mt_model_shape *s, int tokens, gemm_case *cases) {
  mt_bench_matmul g[MT_BENCH_GPT_GEMMS];
  mt_bench_gpt_gemms(s->n_embd, s->n_layer, s->vocab_padded, tokens, g);
  for (int i = 0; i < MT_BENCH_GPT_GEMMS; i++)
    cases[i] = (gemm_case){g[i].layer, g[i].form, g[i].m, g[i].n, g[i].k, g[i].count,
                           g[i].form != MT_BENCH_NT || g[i].bias ? 1.0f : 0.0f, 0, 0, 0};
  return MT_BENCH_GPT_GEMMS;
}

/* op(A) is (m,k), op(B) is (k,n), C is (m,n), all row-major and contiguous in
 * the layout the kernels use (see mt_bench_form). */
static void gemm_run(const gemm_case *g, const float *A, const float *B, float *Cm, float beta) {
  int m = g->m, n = g->n, k = g->k;
  switch (g->form) {
  case MT_BENCH_NT: /* A (m,k), B stored (n,k) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, A, k, B, k, beta, Cm, n);
    break;
  case MT_BENCH_NN: /* A (m,k), B (k,n) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, A, k, B, n, beta, Cm,
                n);
    break;
  case MT_BENCH_TN: /* A stored (k,m), B (k,n) */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, 1.0f, A, m, B, n, beta, Cm, n);
    break;
  }
}

/* the (i,j) entry of op(A) op(B) in double, from the stored layouts */
static double gemm_entry(const gemm_case *g, const float *A, const float *B, int i, int j,
                         double *abs_sum) {
  double s = 0.0, a_s = 0.0;
  for (int p = 0; p < g->k; p++) {
    double a = g->form == MT_BENCH_TN ? A[(size_t)p * g->m + i] : A[(size_t)i * g->k + p];
    double b = g->form == MT_BENCH_NT ? B[(size_t)j * g->k + p] : B[(size_t)p * g->n + j];
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
    mt_bench_cold_flush();
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

/* ---- gemm on the GPU: the CUDA backend's own matmuls (the op table) ----
 *   NT  matmul_forward(out, inp, w, bias)     out (m,n) = A (m,k) B^T, B stored (n,k)
 *   NN  matmul_backward(dinp, -, -, dout, w)  C (m,n) += A (m,k) B (k,n)
 *   TN  matmul_backward(-, dw, -, dout, inp)  C (m,n) += A^T B, A stored (k,m), B (k,n)
 * Time per shape: the median over three batches of reps calls between two
 * synchronisations (a GPU call is queued, not finished, when it returns). */
static void gemm_run_gpu(const mt_ops *o, const gemm_case *g, const float *A, const float *B,
                         float *Cm, const float *bias) {
  switch (g->form) {
  case MT_BENCH_NT:
    o->matmul_forward(MT_DT_F32, Cm, A, B, g->beta != 0.0f ? bias : NULL, g->m, g->k, g->n);
    break;
  case MT_BENCH_NN: o->matmul_backward(MT_DT_F32, Cm, NULL, NULL, A, NULL, B, g->m, g->n, g->k); break;
  case MT_BENCH_TN: o->matmul_backward(MT_DT_F32, NULL, Cm, NULL, A, B, NULL, g->k, g->n, g->m); break;
  }
}

static void gemm_measure_gpu(const mt_ops *o, gemm_case *g, const float *dA, const float *dB,
                             float *dC, const float *dbias, const float *hA, const float *hB,
                             float *hC, int reps) {
  double times[3];
  gemm_run_gpu(o, g, dA, dB, dC, dbias);
  o->sync();
  for (int b = 0; b < 3; b++) {
    double t0 = mt_now();
    for (int r = 0; r < reps; r++) gemm_run_gpu(o, g, dA, dB, dC, dbias);
    o->sync();
    times[b] = (mt_now() - t0) / reps;
  }
  qsort(times, 3, sizeof(double), compare_double);
  g->time_s = times[1];
  g->gflops = 2.0 * g->m * (double)g->n * g->k / g->time_s * 1e-9;
  /* the check: C zeroed, one call (forward without bias), 16 entries */
  o->zero(MT_DT_F32, dC, (size_t)g->m * g->n);
  gemm_case plain = *g;
  plain.beta = 0.0f;
  gemm_run_gpu(o, &plain, dA, dB, dC, NULL);
  o->download(hC, dC, (size_t)g->m * g->n * sizeof(float));
  g->max_rel_err = 0.0;
  for (int s = 0; s < 16; s++) {
    int i = (int)(((long long)s * 7919) % g->m), j = (int)(((long long)s * 104729) % g->n);
    double abs_sum = 0.0, want = gemm_entry(g, hA, hB, i, j, &abs_sum);
    double err = fabs((double)hC[(size_t)i * g->n + j] - want) / (abs_sum > 0 ? abs_sum : 1.0);
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
          "  --n-layer N, --n-embd N, --vocab N   override the preset's shape\n"
          "  --tokens N      rows per gemm, i.e. tokens per micro-batch (default 2048)\n"
          "  --threads N     BLAS/OpenMP threads (default: as the environment sets)\n"
          "  --reps N        timed calls per shape (default 5)\n"
          "  --cold          cpu: flush the caches before every timed call (operands from\n"
          "                  memory, as in a training step; default: warm, in cache)\n"
          "  --device D      cpu (cblas_sgemm, default) or cuda (the CUDA backend's\n"
          "                  cuBLASLt products; MT_CUDA_BF16_GEMM=fast for the\n"
          "                  in-library bf16 rounding)\n"
          "  --precision P   fp32 (default) or bf16 (cuda: bf16 operands, fp32 sums)\n"
          "  --gpu N         which visible GPU (default 0)\n"
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
    cJSON *o = mt_bench_matmul_json(g->layer, g->form, g->m, g->n, g->k, g->count);
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
  snprintf(peak_name, sizeof peak_name, "%s %s", peak->layer, mt_bench_role_names[peak->form]);
  cJSON_AddStringToObject(root, "peak_shape", peak_name);
  return root;
}

int mt_bench_gemm(int argc, char **argv) {
  const char *model = "small", *json_path = NULL, *device = "cpu", *precision = "fp32";
  int tokens = 2048, threads = 0, reps = 5, gpu = 0, n_layer = 0, n_embd = 0, vocab = 0;
  int cold = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      gemm_help(stdout);
      return MT_EXIT_OK;
    } else if (!strcmp(a, "--model")) {
      model = option_value(argc, argv, &i);
    } else if (!strcmp(a, "--tokens")) {
      tokens = parse_positive_int(a, option_value(argc, argv, &i));
    } else if (!strcmp(a, "--n-layer")) {
      n_layer = parse_positive_int(a, option_value(argc, argv, &i));
    } else if (!strcmp(a, "--n-embd")) {
      n_embd = parse_positive_int(a, option_value(argc, argv, &i));
    } else if (!strcmp(a, "--vocab")) {
      vocab = parse_positive_int(a, option_value(argc, argv, &i));
    } else if (!strcmp(a, "--threads")) {
      threads = parse_positive_int(a, option_value(argc, argv, &i));
    } else if (!strcmp(a, "--reps")) {
      reps = parse_positive_int(a, option_value(argc, argv, &i));
    } else if (!strcmp(a, "--json")) {
      json_path = option_value(argc, argv, &i);
    } else if (!strcmp(a, "--cold")) {
      cold = 1;
    } else if (!strcmp(a, "--device")) {
      device = option_value(argc, argv, &i);
      if (strcmp(device, "cpu") && strcmp(device, "cuda"))
        usage_error("--device: '%s' is not cpu or cuda", device);
    } else if (!strcmp(a, "--precision")) {
      precision = option_value(argc, argv, &i);
      if (strcmp(precision, "fp32") && strcmp(precision, "bf16"))
        usage_error("--precision: '%s' is not fp32 or bf16", precision);
    } else if (!strcmp(a, "--gpu")) {
      gpu = atoi(option_value(argc, argv, &i));
    } else {
      usage_error("gemm: unknown option '%s'", a);
    }
  }
  int on_gpu = !strcmp(device, "cuda");
  if (!on_gpu && strcmp(precision, "fp32"))
    usage_error("--precision bf16 needs --device cuda (cblas_sgemm is fp32)");
  const mt_ops *gops = NULL;
  mt_cuda_info ginfo;
  memset(&ginfo, 0, sizeof ginfo);
  if (on_gpu) {
    mt_err ge = {0};
    if (mt_cuda_init(gpu, strcmp(precision, "bf16") ? MT_PRECISION_FP32 : MT_PRECISION_BF16,
                     &ge) != 0) {
      fprintf(stderr, "%s: error: --device cuda: %s\n", g_prog, ge.msg);
      return MT_EXIT_BADINPUT;
    }
    gops = mt_ops_cuda();
    mt_cuda_get_info(&ginfo);
  }
  const double tol = on_gpu && !strcmp(precision, "bf16") ? 1e-2 : 1e-5;
  mt_model_shape shape;
  const int preset = mt_config_enum_parse("model.preset", model);
  if (preset < 0 || preset == MT_PRESET_CUSTOM || mt_model_preset((mt_preset)preset, &shape) != 0)
    usage_error("--model: unknown model '%s' (tiny|small|gpt2-124m)", model);
  if (n_layer) shape.n_layer = n_layer;
  if (n_embd) shape.n_embd = n_embd;
  if (vocab) {
    shape.vocab = vocab;
    shape.vocab_padded = mt_model_pad_vocab(vocab, 1);
  }
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

  if (on_gpu) {
    printf("# meshbench gemm: model %s (n_layer %d, n_embd %d, vocab %d padded %d), tokens %d, "
           "reps %d per batch (median of 3), GPU %d %s, precision %s (matmuls %s)\n",
           model, shape.n_layer, shape.n_embd, shape.vocab, shape.vocab_padded, tokens, reps,
           gpu, ginfo.name, precision, ginfo.gemm_path);
    float *dA = gops->alloc(MT_MEM_OTHER, a_max * sizeof(float));
    float *dB = gops->alloc(MT_MEM_OTHER, b_max * sizeof(float));
    float *dC = gops->alloc(MT_MEM_OTHER, c_max * sizeof(float));
    size_t bias_n = b_max > c_max ? b_max : c_max; /* as long as any output row */
    float *dbias = gops->alloc(MT_MEM_OTHER, bias_n * sizeof(float));
    gops->upload(dA, A, a_max * sizeof(float));
    gops->upload(dB, B, b_max * sizeof(float));
    gops->upload(dbias, B, (bias_n < b_max ? bias_n : b_max) * sizeof(float));
    for (int i = 0; i < n; i++) gemm_measure_gpu(gops, &cases[i], dA, dB, dC, dbias, A, B, Cm, reps);
    gops->free(MT_MEM_OTHER, dA, a_max * sizeof(float));
    gops->free(MT_MEM_OTHER, dB, b_max * sizeof(float));
    gops->free(MT_MEM_OTHER, dC, c_max * sizeof(float));
    gops->free(MT_MEM_OTHER, dbias, bias_n * sizeof(float));
  } else {
    printf("# meshbench gemm: model %s (n_layer %d, n_embd %d, vocab %d padded %d), tokens %d, "
           "threads %d, reps %d (median), OpenBLAS core %s\n",
           model, shape.n_layer, shape.n_embd, shape.vocab, shape.vocab_padded, tokens,
           blas_threads, reps, blas_core);
    if (cold) mt_bench_cold_on();
    for (int i = 0; i < n; i++) gemm_measure(&cases[i], A, B, Cm, reps);
    mt_bench_cold_off();
  }

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
    wrong += !(g->max_rel_err <= tol);
    printf("  %-10s %-8s %-4s %7d %7d %7d %5d %10.3f %9.1f %6.1f %8.1e\n", g->layer,
           mt_bench_role_names[g->form], mt_bench_form_names[g->form], g->m, g->n, g->k, g->count,
           g->time_s * 1e3, g->gflops, 100.0 * g->gflops / peak->gflops, g->max_rel_err);
  }
  double weighted = step_flop / step_time * 1e-9;
  printf("# step: %.2f GFLOP in %.2f ms = %.1f GFLOP/s weighted (%.0f%% of peak shape %s %s "
         "%.1f GFLOP/s), %d wrong\n",
         step_flop * 1e-9, step_time * 1e3, weighted, 100.0 * weighted / peak->gflops,
         peak->layer, mt_bench_role_names[peak->form], peak->gflops, wrong);

  int rc = wrong ? MT_EXIT_RUNTIME : MT_EXIT_OK;
  if (json_path) {
    cJSON *root = gemm_json(model, blas_core, blas_threads, tokens, reps, cases, n, step_flop,
                            step_time, peak);
    cJSON_AddStringToObject(root, "device", device);
    cJSON_AddStringToObject(root, "precision", precision);
    cJSON_AddBoolToObject(root, "cold", cold && !on_gpu);
    cJSON_AddNumberToObject(root, "tolerance", tol);
    if (on_gpu) {
      cJSON_AddStringToObject(root, "gpu", ginfo.name);
      cJSON_AddStringToObject(root, "gemm_path", ginfo.gemm_path);
    }
    if (mt_bench_json_append(g_prog, json_path, root) != MT_EXIT_OK) rc = MT_EXIT_RUNTIME;
  }
  if (wrong) fprintf(stderr, "%s: error: %d gemm shape(s) gave wrong results\n", g_prog, wrong);
  free(A), free(B), free(Cm);
  if (on_gpu) mt_cuda_shutdown();
  return rc;
}
