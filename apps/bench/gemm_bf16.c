/* meshbench gemm-bf16: the op table's bf16 matmuls beside fp32 sgemm at
 * the shapes of one GPT training step, in the same run.
 *
 *   meshbench gemm-bf16 [--model small] [--tokens 1024] [--threads N]
 *                       [--reps 7] [--paths sgemm,onednn] [--cold] [--json FILE]
 *
 * For each linear layer (qkv, attn_proj, fc, fc_proj, lm_head) and each of
 * its products (forward NT out = inp w^T; backward NN dinp += dout w;
 * backward TN dw += dout^T inp), columns:
 *   fp32    cblas_sgemm on fp32 operands (the fp32 model's matmul; the
 *           baseline);
 *   sgemm   the bf16 op on the "sgemm" path: bf16 operands converted to
 *           fp32 in blocks, sgemm, results rounded (conversions included);
 *   onednn  the bf16 op on oneDNN's matmul (bf16 x bf16, fp32 accumulation;
 *           only in a build with oneDNN).
 * The paths run in turn within each repetition (a load that comes and goes
 * hits them alike); time = the median of --reps after one warm-up, wall
 * clock, or with --clock cpu the process's CPU time divided by the threads
 * (on a machine other jobs share: the time the threads ran, not the time
 * they waited for a core; idle waits inside a product are not counted);
 * --cold flushes the caches before each timed call (cold.c). GFLOP/s =
 * 2 M N K / time; "x fp32" = a path's GFLOP/s over fp32's.
 * A summary line weights each shape by its calls per step. The result of
 * each bf16 path is checked at 16 entries against a double product of the
 * same bf16 values (relative to sum |a b|; fp32 accumulation and one bf16
 * rounding: below 2^-8 + k 2^-23). */
#include <cblas.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "kernels/kernels.h"
#include "model/model.h"

#include "bench/bench.h"

static const char *g_prog = "meshbench gemm-bf16";

#define N_PATHS 3 /* fp32, sgemm, onednn */
static const char *g_path[N_PATHS] = {"fp32", "sgemm", "onednn"};

typedef struct {
  const char *layer;
  mt_bench_form form;
  int m, n, k, count, bias;
  double time_s[N_PATHS], gflops[N_PATHS], err[N_PATHS];
} bcase;

static void usage(FILE *f) {
  fprintf(f,
          "usage: meshbench gemm-bf16 [options]\n"
          "bf16 matmuls (the op table on bf16) beside fp32 sgemm at the shapes of one GPT step.\n"
          "  --model NAME    tiny | small | gpt2-124m (default small)\n"
          "  --tokens N      rows per product: micro-batch x sequence (default 1024)\n"
          "  --threads N     OpenMP/BLAS threads (default: as the environment sets)\n"
          "  --reps N        timed calls per shape and path, median (default 7)\n"
          "  --paths LIST    bf16 paths to time: sgemm,onednn (default: those built)\n"
          "  --clock C       wall (default) or cpu: process CPU time / threads (for a\n"
          "                  machine other jobs share)\n"
          "  --cold          flush the caches before every timed call (operands from\n"
          "                  memory, as a training step finds its weights)\n"
          "  --peak          first print the zmm FMA, vdpbf16ps and AMX peaks of one core,\n"
          "                  and each shape's rate as a fraction of its path's limit\n"
          "  --json FILE     append one JSON line with every figure\n");
}

static int g_cpu_clock = 0;

/* ---- --peak: instruction throughput on one core (mt_cpu_bf16_peaks,
 * mt_cpu_amx_peak), and the limit of each path: its instruction's peak
 * times the threads (fp32 and the sgemm path: the FMA; oneDNN: AMX's
 * tdpbf16ps where the CPU has it, else vdpbf16ps). 0: unknown. ---- */
static void peaks_and_limits(int threads, double limit[N_PATHS]) {
  for (int p = 0; p < N_PATHS; p++) limit[p] = 0.0;
  if (!__builtin_cpu_supports("avx512f")) {
    printf("# peak: no AVX-512 on this CPU, nothing to compare\n");
    return;
  }
  double fma = 0, dp = 0, amx = mt_cpu_amx_peak(2000000L);
  mt_cpu_bf16_peaks(&fma, &dp, 20000000L);
  printf("# peak on one core (thread CPU time): zmm fp32 FMA %.1f GFLOP/s", fma);
  if (mt_cpu_bf16_level() >= 1)
    printf(", zmm vdpbf16ps %.1f GFLOP/s (%.2fx the FMA peak)", dp, dp / fma);
  else
    printf(", no AVX512-BF16");
  if (amx > 0) printf(", AMX tdpbf16ps %.1f GFLOP/s (%.2fx the FMA peak)", amx, amx / fma);
  printf("\n");
  limit[0] = limit[1] = fma * threads;
  limit[2] = (amx > 0 ? amx : dp > 0 ? dp : fma) * threads;
  printf("# limits at %d threads (peak x threads): fp32 %.1f, sgemm path %.1f, oneDNN %.1f "
         "GFLOP/s (%s); the lim columns: each path's GFLOP/s over its limit\n",
         threads, limit[0], limit[1], limit[2],
         amx > 0 ? "AMX" : dp > 0 ? "vdpbf16ps" : "FMA");
}

/* seconds: wall clock, or the process's CPU time per thread (--clock cpu) */
static double now(void) {
  if (!g_cpu_clock) return mt_now();
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ((double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec) / mt_kernels_threads();
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* the operands of every case, fp32 and bf16 copies of the same values */
typedef struct {
  float *A, *B, *Cf, *bias;
  mt_bf16 *Ab, *Bb, *Cb, *biasb;
} operands;

static void run_fp32(const bcase *g, operands *o) {
  int m = g->m, n = g->n, k = g->k;
  if (g->form == MT_BENCH_NT)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, o->A, k, o->B, k,
                g->bias ? 1.0f : 0.0f, o->Cf, n);
  else if (g->form == MT_BENCH_NN)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, o->A, k, o->B, n, 1.0f,
                o->Cf, n);
  else
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, n, k, 1.0f, o->A, m, o->B, n, 1.0f,
                o->Cf, n);
}

/* the bf16 op as the model calls it: forward (N=m, C=k, OC=n), backward
 * dinp (N=m, C=n, OC=k), backward dw (N=k, C=n, OC=m) */
static void run_bf16(const mt_ops *ops, const bcase *g, operands *o) {
  if (g->form == MT_BENCH_NT)
    ops->matmul_forward(MT_DT_BF16, o->Cb, o->Ab, o->Bb, g->bias ? o->biasb : NULL, g->m, g->k,
                        g->n);
  else if (g->form == MT_BENCH_NN)
    ops->matmul_backward(MT_DT_BF16, o->Cb, NULL, NULL, o->Ab, NULL, o->Bb, g->m, g->n, g->k);
  else
    ops->matmul_backward(MT_DT_BF16, NULL, o->Cf, NULL, o->Ab, o->Bb, NULL, g->k, g->n, g->m);
}

/* error of 16 entries of a fresh bf16 result (C zeroed, no bias) against a
 * double product of the same bf16 values, relative to sum |a b| */
static double check_bf16(const mt_ops *ops, const bcase *g, operands *o) {
  bcase plain = *g;
  plain.bias = 0;
  size_t mn = (size_t)g->m * g->n;
  memset(o->Cb, 0, mn * sizeof(mt_bf16));
  memset(o->Cf, 0, mn * sizeof(float));
  run_bf16(ops, &plain, o);
  double worst = 0.0;
  for (int s = 0; s < 16; s++) {
    int i = (int)(((long long)s * 7919) % g->m), j = (int)(((long long)s * 104729) % g->n);
    double sum = 0.0, abs_sum = 0.0;
    for (int p = 0; p < g->k; p++) {
      double a = mt_bf16_to_f32(g->form == MT_BENCH_TN ? o->Ab[(size_t)p * g->m + i]
                                                   : o->Ab[(size_t)i * g->k + p]);
      double b = mt_bf16_to_f32(g->form == MT_BENCH_NT ? o->Bb[(size_t)j * g->k + p]
                                                   : o->Bb[(size_t)p * g->n + j]);
      sum += a * b;
      abs_sum += fabs(a * b);
    }
    double got = g->form == MT_BENCH_TN ? o->Cf[(size_t)i * g->n + j]
                                    : mt_bf16_to_f32(o->Cb[(size_t)i * g->n + j]);
    double e = fabs(got - sum) / (abs_sum > 0 ? abs_sum : 1.0);
    worst = isnan(e) || isnan(worst) ? NAN : e > worst ? e : worst;
  }
  return worst;
}

int mt_bench_gemm_bf16(int argc, char **argv) {
  const char *model = "small", *json_path = NULL, *paths = NULL;
  int tokens = 1024, threads = 0, reps = 7, peak = 0, cold = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return MT_EXIT_OK;
    }
    if (!strcmp(a, "--peak") || !strcmp(a, "--cold")) {
      *(a[2] == 'p' ? &peak : &cold) = 1;
      continue;
    }
    if (i + 1 >= argc) mt_bench_bad(g_prog, "option without a value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--model")) model = v;
    else if (!strcmp(a, "--tokens")) tokens = mt_bench_int(g_prog, a, v, 100000000L);
    else if (!strcmp(a, "--threads")) threads = mt_bench_int(g_prog, a, v, 100000000L);
    else if (!strcmp(a, "--reps")) reps = mt_bench_int(g_prog, a, v, 100000000L);
    else if (!strcmp(a, "--paths")) paths = v;
    else if (!strcmp(a, "--json")) json_path = v;
    else if (!strcmp(a, "--clock")) {
      if (strcmp(v, "wall") && strcmp(v, "cpu"))
        mt_bench_bad(g_prog, "--clock: not wall or cpu", v);
      g_cpu_clock = !strcmp(v, "cpu");
    }
    else mt_bench_bad(g_prog, "unknown option", a);
  }
  mt_model_shape s;
  const int preset = mt_config_enum_parse("model.preset", model);
  if (preset < 0 || preset == MT_PRESET_CUSTOM || mt_model_preset((mt_preset)preset, &s) != 0)
    mt_bench_bad(g_prog, "--model: unknown model (tiny|small|gpt2-124m)", model);
  mt_kernels_set_threads(threads);
  int use[N_PATHS] = {1, 0, 0};
  const char *want = paths ? paths : "sgemm,onednn";
  char list[64];
  snprintf(list, sizeof list, "%s", want);
  for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int p = !strcmp(t, "sgemm") ? 1 : !strcmp(t, "onednn") ? 2 : -1;
    if (p < 0) mt_bench_bad(g_prog, "--paths: unknown path", t);
    if (mt_bf16_gemm_select(t) != 0) {
      if (paths) mt_bench_bad(g_prog, "--paths: not in this build", t);
      continue; /* the default list: what the build has */
    }
    use[p] = 1;
  }
  mt_bf16_gemm_select("auto");
  const char *auto_path = mt_bf16_gemm_path();
  const mt_ops *ops = mt_ops_cpu();

  mt_bench_matmul shapes[MT_BENCH_GPT_GEMMS];
  mt_bench_gpt_gemms(s.n_embd, s.n_layer, s.vocab_padded, tokens, shapes);
  bcase cases[MT_BENCH_GPT_GEMMS];
  const int nc = MT_BENCH_GPT_GEMMS;
  size_t a_max = 0, b_max = 0, c_max = 0;
  for (int i = 0; i < nc; i++) {
    const mt_bench_matmul *g = &shapes[i];
    cases[i] = (bcase){.layer = g->layer, .form = g->form, .m = g->m, .n = g->n, .k = g->k,
                       .count = g->count, .bias = g->bias};
  }
  for (int i = 0; i < nc; i++) {
    size_t m = (size_t)cases[i].m, n = (size_t)cases[i].n, k = (size_t)cases[i].k;
    a_max = m * k > a_max ? m * k : a_max;
    b_max = k * n > b_max ? k * n : b_max;
    c_max = m * n > c_max ? m * n : c_max;
  }
  size_t bias_n = c_max; /* longer than any output row */
  operands o = {.A = mt_malloc(a_max * 4), .B = mt_malloc(b_max * 4), .Cf = mt_malloc(c_max * 4),
                .bias = mt_malloc(bias_n * 4), .Ab = mt_malloc(a_max * 2),
                .Bb = mt_malloc(b_max * 2), .Cb = mt_malloc(c_max * 2),
                .biasb = mt_malloc(bias_n * 2)};
  uint64_t state = 12345;
  float *fills[] = {o.A, o.B, o.bias};
  mt_bf16 *fillb[] = {o.Ab, o.Bb, o.biasb};
  size_t fill_n[] = {a_max, b_max, bias_n};
  for (int f = 0; f < 3; f++)
    for (size_t i = 0; i < fill_n[f]; i++) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      fillb[f][i] = mt_bf16_from_f32((float)((state >> 40) * (2.0 / 16777216.0) - 1.0));
      fills[f][i] = mt_bf16_to_f32(fillb[f][i]);
    }
  memset(o.Cf, 0, c_max * 4);
  memset(o.Cb, 0, c_max * 2);

  printf("# meshbench gemm-bf16: model %s (n_layer %d, n_embd %d, vocab padded %d), tokens %d, "
         "threads %d, reps %d (median, %s), OpenBLAS core %s\n",
         model, s.n_layer, s.n_embd, s.vocab_padded, tokens, mt_kernels_threads(), reps,
         g_cpu_clock ? "CPU time per thread" : "wall clock",
         mt_kernels_blas_core());
  printf("# CPU bf16 level %d (0 none, 1 AVX512-BF16, 2 AMX-BF16); %s\n", mt_cpu_bf16_level(),
         mt_bf16_gemm_note());
  double limit[N_PATHS] = {0};
  if (peak) peaks_and_limits(mt_kernels_threads(), limit);
  double *t = mt_malloc((size_t)reps * N_PATHS * sizeof(double));
  if (cold) mt_bench_cold_on();
  for (int i = 0; i < nc; i++) {
    bcase *g = &cases[i];
    for (int r = -1; r < reps; r++) /* r = -1: warm-up */
      for (int p = 0; p < N_PATHS; p++) {
        if (!use[p]) continue;
        if (p) mt_bf16_gemm_select(g_path[p]);
        mt_bench_cold_flush();
        double t0 = now();
        if (p == 0) run_fp32(g, &o);
        else run_bf16(ops, g, &o);
        if (r >= 0) t[(size_t)p * reps + r] = now() - t0;
      }
    for (int p = 0; p < N_PATHS; p++) {
      if (!use[p]) continue;
      qsort(t + (size_t)p * reps, (size_t)reps, sizeof(double), compare_double);
      double *tp = t + (size_t)p * reps;
      g->time_s[p] = reps % 2 ? tp[reps / 2] : 0.5 * (tp[reps / 2 - 1] + tp[reps / 2]);
      g->gflops[p] = 2.0 * g->m * (double)g->n * g->k / g->time_s[p] * 1e-9;
      if (p) {
        mt_bf16_gemm_select(g_path[p]);
        g->err[p] = check_bf16(ops, g, &o);
      }
    }
  }
  mt_bf16_gemm_select("auto");
  mt_bench_cold_off();
  free(t);

  printf("# %-10s %-8s %-4s %6s %6s %6s %5s | %8s %8s %8s | %7s %7s | %8s", "layer", "role",
         "form", "M", "N", "K", "count", "fp32", "sgemm", "onednn", "sg/fp32", "dn/fp32",
         "maxerr");
  if (peak) printf(" | %6s %6s %6s", "fp/lim", "sg/lim", "dn/lim");
  printf("\n");
  double step_flop = 0.0, step_time[N_PATHS] = {0};
  int wrong = 0;
  for (int i = 0; i < nc; i++) {
    const bcase *g = &cases[i];
    double flop = 2.0 * g->m * (double)g->n * g->k, err = 0.0;
    step_flop += g->count * flop;
    for (int p = 0; p < N_PATHS; p++) {
      if (!use[p]) continue;
      step_time[p] += g->count * g->time_s[p];
      if (p) { /* one bf16 rounding + fp32 sums of k + 1 terms, in any order */
        double tol = 1.0 / 256 + 2.0 * (g->k + 2) / 16777216.0;
        wrong += !(g->err[p] <= tol);
        err = isnan(g->err[p]) || g->err[p] > err ? g->err[p] : err;
      }
    }
    printf("  %-10s %-8s %-4s %6d %6d %6d %5d | %8.1f %8.1f %8.1f | %7.2f %7.2f | %8.1e",
           g->layer, mt_bench_role_names[g->form], mt_bench_form_names[g->form], g->m, g->n, g->k, g->count, g->gflops[0],
           use[1] ? g->gflops[1] : NAN, use[2] ? g->gflops[2] : NAN,
           use[1] ? g->gflops[1] / g->gflops[0] : NAN, use[2] ? g->gflops[2] / g->gflops[0] : NAN,
           err);
    if (peak)
      for (int p = 0; p < N_PATHS; p++)
        printf(" %s%6.2f", p ? "" : "| ", use[p] && limit[p] > 0 ? g->gflops[p] / limit[p] : NAN);
    printf("\n");
  }
  printf("# step (weighted by calls): fp32 %.1f GFLOP/s", step_flop / step_time[0] * 1e-9);
  for (int p = 1; p < N_PATHS; p++)
    if (use[p])
      printf(", bf16 %s %.1f GFLOP/s (%.2fx fp32)", g_path[p], step_flop / step_time[p] * 1e-9,
             step_time[0] / step_time[p]);
  if (peak)
    for (int p = 0; p < N_PATHS; p++)
      if (use[p] && limit[p] > 0)
        printf("%s%s %.2f", p ? ", " : "; of the limit: ", g_path[p],
               step_flop / step_time[p] * 1e-9 / limit[p]);
  printf("; default path here: %s; %d wrong\n", auto_path, wrong);

  int rc = wrong ? MT_EXIT_RUNTIME : MT_EXIT_OK;
  if (json_path) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "gemm-bf16");
    cJSON_AddStringToObject(root, "model", model);
    cJSON_AddNumberToObject(root, "tokens", tokens);
    cJSON_AddNumberToObject(root, "threads", mt_kernels_threads());
    cJSON_AddNumberToObject(root, "reps", reps);
    cJSON_AddStringToObject(root, "clock", g_cpu_clock ? "cpu" : "wall");
    cJSON_AddBoolToObject(root, "cold", cold);
    cJSON_AddStringToObject(root, "blas_core", mt_kernels_blas_core());
    cJSON_AddNumberToObject(root, "cpu_bf16_level", mt_cpu_bf16_level());
    cJSON_AddStringToObject(root, "default_path", auto_path);
    cJSON *arr = cJSON_AddArrayToObject(root, "shapes");
    for (int i = 0; i < nc; i++) {
      const bcase *g = &cases[i];
      cJSON *c = mt_bench_matmul_json(g->layer, g->form, g->m, g->n, g->k, g->count);
      for (int p = 0; p < N_PATHS; p++) {
        if (!use[p]) continue;
        char key[32];
        snprintf(key, sizeof key, "gflops_%s", g_path[p]);
        cJSON_AddNumberToObject(c, key, g->gflops[p]);
        if (limit[p] > 0) {
          snprintf(key, sizeof key, "of_limit_%s", g_path[p]);
          cJSON_AddNumberToObject(c, key, g->gflops[p] / limit[p]);
        }
        if (p) {
          snprintf(key, sizeof key, "max_rel_err_%s", g_path[p]);
          cJSON_AddNumberToObject(c, key, g->err[p]);
        }
      }
      cJSON_AddItemToArray(arr, c);
    }
    for (int p = 0; p < N_PATHS; p++) {
      if (!use[p]) continue;
      char key[40];
      snprintf(key, sizeof key, "step_gflops_%s", g_path[p]);
      cJSON_AddNumberToObject(root, key, step_flop / step_time[p] * 1e-9);
      if (limit[p] > 0) {
        snprintf(key, sizeof key, "limit_gflops_%s", g_path[p]);
        cJSON_AddNumberToObject(root, key, limit[p]);
      }
    }
    if (mt_bench_json_append(g_prog, json_path, root) != MT_EXIT_OK) rc = MT_EXIT_RUNTIME;
  }
  if (wrong) fprintf(stderr, "%s: error: %d shape(s) gave wrong bf16 results\n", g_prog, wrong);
  free(o.A), free(o.B), free(o.Cf), free(o.bias), free(o.Ab), free(o.Bb), free(o.Cb), free(o.biasb);
  return rc;
}
