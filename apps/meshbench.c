/* meshbench: the measurements meshreport turns into baselines and ratios.
 *
 *   meshbench <subcommand> [options]      meshbench --help
 *
 * Each subcommand prints one row per case (nccl-tests style), a summary line,
 * and appends one JSON line to --json FILE. Subcommands today:
 *   gemm   GFLOP/s at the shapes of one GPT training step: cblas_sgemm, or
 *          (--device cuda) the CUDA backend's cuBLASLt matmuls, fp32 or bf16
 *   attention  causal attention alone: block kernels against the T x T reference
 *   allreduce, allgather, reduce-scatter, alltoall, sendrecv, collectives
 *          collectives over a mesh group, nccl-tests style (under mpirun/srun):
 *          MPI on host buffers, or (--device cuda) device buffers through
 *          comm's NCCL path
 *   devices  the GPUs this process sees (or why none)
 * (ckpt, ... slot into g_commands below). gemm is one process and never calls
 * MPI, so it runs with or without mpirun. */
#include "comm/comm.h"
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

/* ---- gemm on the GPU: the CUDA backend's own matmuls (the op table) ----
 *   NT  matmul_forward(out, inp, w, bias)     out (m,n) = A (m,k) B^T, B stored (n,k)
 *   NN  matmul_backward(dinp, -, -, dout, w)  C (m,n) += A (m,k) B (k,n)
 *   TN  matmul_backward(-, dw, -, dout, inp)  C (m,n) += A^T B, A stored (k,m), B (k,n)
 * Time per shape: the median over three batches of reps calls between two
 * synchronisations (a GPU call is queued, not finished, when it returns). */
static void gemm_run_gpu(const mt_ops *o, const gemm_case *g, const float *A, const float *B,
                         float *Cm, const float *bias) {
  switch (g->form) {
  case GEMM_NT: o->matmul_forward(Cm, A, B, g->beta != 0.0f ? bias : NULL, g->m, g->k, g->n); break;
  case GEMM_NN: o->matmul_backward(Cm, NULL, NULL, A, NULL, B, g->m, g->n, g->k); break;
  case GEMM_TN: o->matmul_backward(NULL, Cm, NULL, A, B, NULL, g->k, g->n, g->m); break;
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
  o->zero(dC, (size_t)g->m * g->n);
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
  const char *model = "small", *json_path = NULL, *device = "cpu", *precision = "fp32";
  int tokens = 2048, threads = 0, reps = 5, gpu = 0, n_layer = 0, n_embd = 0, vocab = 0;
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
  if (strcmp(model, "custom") == 0 || mt_model_preset(model, &shape) != 0)
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
    for (int i = 0; i < n; i++) gemm_measure(&cases[i], A, B, Cm, reps);
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
    cJSON_AddStringToObject(root, "device", device);
    cJSON_AddStringToObject(root, "precision", precision);
    cJSON_AddNumberToObject(root, "tolerance", tol);
    if (on_gpu) {
      cJSON_AddStringToObject(root, "gpu", ginfo.name);
      cJSON_AddStringToObject(root, "gemm_path", ginfo.gemm_path);
    }
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
  if (on_gpu) mt_cuda_shutdown();
  return rc;
}

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
    fprintf(stderr, "%s: error: ", g_prog);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see %s allreduce --help)\n", g_prog);
  }
  MPI_Finalize();
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

static int coll_parse(int argc, char **argv, coll_opts *o) {
  *o = (coll_opts){.min_bytes = 1024, .max_bytes = 64LL << 20, .factor = 2, .iters = 20,
                   .warmup = 5, .check = 1, .group_name = "world"};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      if (g_coll_rank0) coll_help(stdout, argv[0]);
      return 1;
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
  return 0;
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
    mt_allreduce_sum_f32(b->g, b->recv, count, loc);
    break;
  case COLL_ALLGATHER:
    mt_allgatherv_inplace_f32(b->g, b->recv, b->counts, b->displs, loc);
    break;
  case COLL_REDUCE_SCATTER:
    mt_reduce_scatter_sum_f32(b->g, b->send, b->recv, b->counts, loc);
    break;
  case COLL_ALLTOALL:
    MT_MPI_CHECK(MPI_Alltoall(b->send, (int)chunk, MPI_FLOAT, b->recv, (int)chunk, MPI_FLOAT,
                              b->g->comm));
    break;
  case COLL_SENDRECV:
    if (b->dev) { /* the pipeline's point-to-point path (NCCL channels in a pp group) */
      mt_request rs, rr;
      mt_irecv_f32(b->g, b->recv, count, (r + n - 1) % n, MT_TAG_PP_ACT, loc, &rr);
      mt_isend_f32(b->g, b->send, count, (r + 1) % n, MT_TAG_PP_ACT, loc, &rs);
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
  coll_bufs b = {g, NULL, NULL, mt_malloc(max_count * sizeof(float)),
                 mt_malloc(max_count * sizeof(float)), o->on_gpu ? mt_ops_cuda() : NULL,
                 mt_malloc((size_t)g->size * sizeof(int)), mt_malloc((size_t)g->size * sizeof(int))};
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
    if (b.dev) b.dev->zero(b.recv, count); /* zeros: in-place sums stay finite */
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
static int bench_collectives(int argc, char **argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) MPI_Init(&argc, &argv);
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  mt_log_init(world_rank);
  g_coll_rank0 = world_rank == 0;
  coll_opts o;
  if (coll_parse(argc, argv, &o)) {
    MPI_Finalize();
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
  MPI_Finalize();
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

/* meshbench devices: the GPUs this process sees, or why none (the GPU tests
 * ask it before they run; exit 0 either way) */
static int bench_devices(int argc, char **argv) {
  (void)argc;
  (void)argv;
  char why[256] = "";
  int n = mt_cuda_device_count(why, sizeof why);
  printf("cuda_built %d\nnccl_built %d\ngpus %d\n", mt_cuda_built(), mt_comm_nccl_built(), n);
  if (n == 0) printf("reason %s\n", why);
  for (int i = 0; i < n; i++) {
    mt_err e = {0};
    mt_cuda_info info;
    if (mt_cuda_init(i, MT_PRECISION_FP32, &e) == 0 && mt_cuda_get_info(&info) == 0)
      printf("gpu %d %s (compute capability %d.%d, %d SMs, %.1f GiB, %s)\n", i, info.name,
             info.sm_major, info.sm_minor, info.sm_count, info.total_bytes / 1073741824.0,
             info.uuid);
    else
      printf("gpu %d unusable: %s\n", i, e.msg);
    mt_cuda_shutdown();
  }
  return MT_EXIT_OK;
}

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv); /* argv[0] is the subcommand */
  const char *summary;
} bench_command;

/* in bench_ckpt.c */
int mt_bench_ckpt(int argc, char **argv);
static int bench_ckpt(int argc, char **argv) {
  int rc = mt_bench_ckpt(argc, argv);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
  return rc;
}

/* in bench_stream.c, bench_attention.c */
int mt_bench_stream(int argc, char **argv);
int mt_bench_attention(int argc, char **argv);

static const bench_command g_commands[] = {
    {"gemm", bench_gemm, "matmul GFLOP/s at the shapes of one GPT training step (CPU or GPU)"},
    {"attention", mt_bench_attention,
     "causal attention fwd+bwd time and memory: block kernels vs the T x T reference"},
    {"devices", bench_devices, "the GPUs this process sees (or why none)"},
    {"info", bench_info, "the BLAS kernels and thread count this process uses"},
    {"allreduce", bench_collectives, "MPI allreduce (sum) time, algbw, busbw, #wrong by size"},
    {"allgather", bench_collectives, "MPI allgather (in place) time, algbw, busbw, #wrong by size"},
    {"reduce-scatter", bench_collectives, "MPI reduce-scatter (sum) time, algbw, busbw, #wrong"},
    {"alltoall", bench_collectives, "MPI alltoall time, algbw, busbw, #wrong by size"},
    {"sendrecv", bench_collectives, "ring send/recv (p2p) time, algbw, busbw, #wrong by size"},
    {"collectives", bench_collectives, "all five collectives above, one after another"},
    {"ckpt", bench_ckpt, "checkpoint save/load GB/s (both modes) against raw POSIX I/O"},
    {"stream", mt_bench_stream, "memory bandwidth of elementwise work (triad) on this rank"},
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
