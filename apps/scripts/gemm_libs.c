/* The GEMM libraries a CPU run could use, at the matmul shapes of one GPT
 * training step, in the same run (apps/scripts/bench-gemm-libs.sh builds
 * and runs it; it is not part of meshbench because it links a second
 * oneDNN, a newer one than the build's):
 *   openblas   cblas_sgemm of the OpenBLAS it links (meshtrain's fp32 path);
 *   mkl_sgemm  oneMKL's cblas_sgemm          (dlopen of libmkl_rt.so.3);
 *   mkl_bf16   oneMKL's cblas_gemm_bf16bf16f32, fp32 output;
 *   onednn     oneDNN 3.x's matmul primitive on bf16 operands (bf16 output
 *              for the forward and input-gradient products, fp32 for the
 *              weight gradient, as meshtrain's bf16 ops write them).
 * Every product of the forward NT, backward NN and backward TN forms of
 * qkv, attn_proj, fc, fc_proj and the LM head; time = median of REPS after
 * a warm-up, the process's CPU time over the threads (the machines are
 * shared); the step's rate weights each shape by its calls. The bf16
 * results are checked at 16 entries against a double product.
 *
 *   gemm_libs [--model-dims L C V] [--tokens N] [--threads N] [--reps N] [--json FILE]
 */
#define _GNU_SOURCE
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { NT, NN, TN };
enum { P_OPENBLAS, P_MKL_SGEMM, P_MKL_BF16, P_ONEDNN, N_PATHS };
static const char *g_names[N_PATHS] = {"openblas", "mkl_sgemm", "mkl_bf16", "onednn"};
static const char *g_forms[] = {"NT", "NN", "TN"};

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *,
                         int, float, float *, int);
typedef void (*bgemm_fn)(int, int, int, int, int, int, float, const uint16_t *, int,
                         const uint16_t *, int, float, float *, int);

static int g_threads = 1;
static dnnl_engine_t g_eng;
static dnnl_stream_t g_st;

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ((double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec) / g_threads;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static uint16_t to_bf16(float f) { /* round to nearest even (finite inputs) */
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void die(const char *what) {
  fprintf(stderr, "gemm_libs: error: %s\n", what);
  exit(2);
}

typedef struct {
  dnnl_primitive_t prim;
  dnnl_memory_t mem[3];
  char impl[128];
} dnnl_case;

/* C (m x n) = op(A) op(B), A stored m x k (k x m for TN), B n x k for NT */
static void dnnl_make(dnnl_case *d, int form, int m, int n, int k, void *A, void *B, void *C) {
  dnnl_memory_desc_t a, b, c;
  dnnl_dims_t da = {m, k}, db = {k, n}, dc = {m, n};
  if (dnnl_memory_desc_create_with_tag(&a, 2, da, dnnl_bf16, form == TN ? dnnl_ba : dnnl_ab) ||
      dnnl_memory_desc_create_with_tag(&b, 2, db, dnnl_bf16, form == NT ? dnnl_ba : dnnl_ab) ||
      dnnl_memory_desc_create_with_tag(&c, 2, dc, form == TN ? dnnl_f32 : dnnl_bf16, dnnl_ab))
    die("oneDNN memory descriptors");
  dnnl_primitive_desc_t pd;
  if (dnnl_matmul_primitive_desc_create(&pd, g_eng, a, b, NULL, c, NULL) != dnnl_success)
    die("oneDNN matmul primitive descriptor");
  const char *impl = "?";
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  snprintf(d->impl, sizeof d->impl, "%s", impl);
  if (dnnl_primitive_create(&d->prim, pd) != dnnl_success) die("oneDNN matmul primitive");
  dnnl_primitive_desc_destroy(pd);
  if (dnnl_memory_create(&d->mem[0], a, g_eng, A) || dnnl_memory_create(&d->mem[1], b, g_eng, B) ||
      dnnl_memory_create(&d->mem[2], c, g_eng, C))
    die("oneDNN memory objects");
  dnnl_memory_desc_destroy(a);
  dnnl_memory_desc_destroy(b);
  dnnl_memory_desc_destroy(c);
}

static void dnnl_free(dnnl_case *d) {
  dnnl_primitive_destroy(d->prim);
  for (int i = 0; i < 3; i++) dnnl_memory_destroy(d->mem[i]);
}

/* relative error at 16 entries against a double product of the bf16 values */
static double check(int form, int m, int n, int k, const uint16_t *A, const uint16_t *B,
                    const void *C, int c_bf16) {
  double worst = 0.0;
  for (int s = 0; s < 16; s++) {
    int i = (int)(((long long)s * 7919) % m), j = (int)(((long long)s * 104729) % n);
    double sum = 0.0, abs_sum = 0.0;
    for (int p = 0; p < k; p++) {
      double a = from_bf16(form == TN ? A[(size_t)p * m + i] : A[(size_t)i * k + p]);
      double b = from_bf16(form == NT ? B[(size_t)j * k + p] : B[(size_t)p * n + j]);
      sum += a * b;
      abs_sum += fabs(a * b);
    }
    double got = c_bf16 ? from_bf16(((const uint16_t *)C)[(size_t)i * n + j])
                        : ((const float *)C)[(size_t)i * n + j];
    double e = fabs(got - sum) / (abs_sum > 0 ? abs_sum : 1.0);
    worst = isnan(e) || isnan(worst) ? NAN : e > worst ? e : worst;
  }
  return worst;
}

int main(int argc, char **argv) {
  int L = 12, C = 768, V = 50304, T = 1024, reps = 5;
  const char *json = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--model-dims") && i + 3 < argc) {
      L = atoi(argv[++i]), C = atoi(argv[++i]), V = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) T = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--threads") && i + 1 < argc) g_threads = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else
      die("usage: gemm_libs [--model-dims L C V] [--tokens N] [--threads N] [--reps N] "
          "[--json F]");
  }
  if (L < 1 || C < 1 || V < 1 || T < 1 || g_threads < 1 || reps < 1) die("sizes must be positive");
  openblas_set_num_threads(g_threads);
  void *mkl = dlopen("libmkl_rt.so.3", RTLD_NOW | RTLD_LOCAL);
  sgemm_fn mkl_sgemm = mkl ? (sgemm_fn)dlsym(mkl, "cblas_sgemm") : NULL;
  bgemm_fn mkl_bf16 = mkl ? (bgemm_fn)dlsym(mkl, "cblas_gemm_bf16bf16f32") : NULL;
  if (mkl) {
    void (*set_threads)(int) = (void (*)(int))dlsym(mkl, "MKL_Set_Num_Threads");
    if (set_threads) set_threads(g_threads);
  }
  if (dnnl_engine_create(&g_eng, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&g_st, g_eng, dnnl_stream_default_flags) != dnnl_success)
    die("no oneDNN CPU engine (a SYCL build needs its OpenCL CPU runtime: see the script)");
  const dnnl_version_t *ver = dnnl_version();

  struct {
    const char *name;
    int in, out, count;
  } layers[] = {{"qkv", C, 3 * C, L}, {"attn_proj", C, C, L}, {"fc", C, 4 * C, L},
                {"fc_proj", 4 * C, C, L}, {"lm_head", C, V, 1}};
  size_t most = 0;
  for (int l = 0; l < 5; l++) {
    size_t io = (size_t)layers[l].in * layers[l].out, ti = (size_t)T * layers[l].out;
    most = io > most ? io : most;
    most = ti > most ? ti : most;
    most = (size_t)T * layers[l].in > most ? (size_t)T * layers[l].in : most;
  }
  float *A = malloc(most * 4), *B = malloc(most * 4), *Cf = malloc(most * 4);
  uint16_t *Ab = malloc(most * 2), *Bb = malloc(most * 2), *Cb = malloc(most * 2);
  double *t = malloc(sizeof(double) * (size_t)reps);
  if (!A || !B || !Cf || !Ab || !Bb || !Cb || !t) die("out of memory");
  uint64_t state = 12345;
  for (size_t i = 0; i < most; i++) { /* bf16-exact values in both copies */
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    Ab[i] = to_bf16((float)((state >> 40) * (2.0 / 16777216.0) - 1.0));
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    Bb[i] = to_bf16((float)((state >> 40) * (2.0 / 16777216.0) - 1.0));
    A[i] = from_bf16(Ab[i]);
    B[i] = from_bf16(Bb[i]);
  }
  printf("# gemm_libs: L %d C %d V %d, tokens %d, threads %d, reps %d (median, CPU time / "
         "threads); oneDNN %d.%d.%d, oneMKL %s\n",
         L, C, V, T, g_threads, reps, ver->major, ver->minor, ver->patch,
         mkl ? "loaded" : "not found (libmkl_rt.so.3)");
  printf("# %-9s %-2s %6s %6s %6s | %9s %9s %9s %9s GFLOP/s | %7s %7s\n", "layer", "f", "M", "N",
         "K", g_names[0], g_names[1], g_names[2], g_names[3], "err_mkl", "err_dnn");
  double flop_step = 0.0, time_step[N_PATHS] = {0};
  int wrong = 0;
  char impl[128] = "";
  FILE *jf = json ? fopen(json, "a") : NULL;
  if (json && !jf) die("cannot open the --json file");
  for (int l = 0; l < 5; l++)
    for (int form = NT; form <= TN; form++) {
      int in = layers[l].in, out = layers[l].out, m, n, k;
      if (form == NT) m = T, n = out, k = in;
      else if (form == NN) m = T, n = in, k = out;
      else m = out, n = in, k = T;
      const double flop = 2.0 * m * (double)n * k;
      flop_step += flop * layers[l].count;
      dnnl_case d;
      dnnl_make(&d, form, m, n, k, Ab, Bb, form == TN ? (void *)Cf : (void *)Cb);
      snprintf(impl, sizeof impl, "%s", d.impl);
      dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, d.mem[0]}, {DNNL_ARG_WEIGHTS, d.mem[1]},
                                 {DNNL_ARG_DST, d.mem[2]}};
      const int ta = form == TN ? CblasTrans : CblasNoTrans;
      const int tb = form == NT ? CblasTrans : CblasNoTrans;
      const int lda = form == TN ? m : k, ldb = form == NT ? k : n;
      double gf[N_PATHS], err[N_PATHS] = {0};
      for (int p = 0; p < N_PATHS; p++) {
        gf[p] = NAN;
        if ((p == P_MKL_SGEMM && !mkl_sgemm) || (p == P_MKL_BF16 && !mkl_bf16)) continue;
        for (int r = -1; r < reps; r++) {
          double t0 = cpu_seconds();
          if (p == P_OPENBLAS)
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.f, A, lda, B, ldb, 0.f, Cf, n);
          else if (p == P_MKL_SGEMM)
            mkl_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.f, A, lda, B, ldb, 0.f, Cf, n);
          else if (p == P_MKL_BF16)
            mkl_bf16(CblasRowMajor, ta, tb, m, n, k, 1.f, Ab, lda, Bb, ldb, 0.f, Cf, n);
          else if (dnnl_primitive_execute(d.prim, g_st, 3, args) != dnnl_success ||
                   dnnl_stream_wait(g_st) != dnnl_success)
            die("oneDNN matmul failed");
          if (r >= 0) t[r] = cpu_seconds() - t0;
        }
        qsort(t, (size_t)reps, sizeof(double), cmp_double);
        double med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
        gf[p] = flop / med * 1e-9;
        time_step[p] += med * layers[l].count;
        if (p == P_MKL_BF16) err[p] = check(form, m, n, k, Ab, Bb, Cf, 0);
        if (p == P_ONEDNN)
          err[p] = check(form, m, n, k, Ab, Bb, form == TN ? (void *)Cf : (void *)Cb, form != TN);
        /* fp32 accumulation and one bf16 rounding of the output */
        const double tol = 1.0 / 256 + 2.0 * (k + 2) / 16777216.0;
        if (p >= P_MKL_BF16) wrong += !(err[p] <= tol);
      }
      printf("  %-9s %-2s %6d %6d %6d | %9.1f %9.1f %9.1f %9.1f         | %7.1e %7.1e\n",
             layers[l].name, g_forms[form], m, n, k, gf[0], gf[1], gf[2], gf[3], err[2], err[3]);
      if (jf)
        fprintf(jf, "{\"layer\":\"%s\",\"form\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"threads\":%d,"
                    "\"gflops_openblas\":%.2f,\"gflops_mkl_sgemm\":%.2f,\"gflops_mkl_bf16\":%.2f,"
                    "\"gflops_onednn\":%.2f}\n",
                layers[l].name, g_forms[form], m, n, k, g_threads, gf[0],
                isnan(gf[1]) ? -1.0 : gf[1], isnan(gf[2]) ? -1.0 : gf[2], gf[3]);
      dnnl_free(&d);
    }
  printf("# oneDNN implementation: %s\n# step (weighted by calls):", impl);
  for (int p = 0; p < N_PATHS; p++)
    if (time_step[p] > 0) printf(" %s %.1f", g_names[p], flop_step / time_step[p] * 1e-9);
  printf(" GFLOP/s; %d wrong\n", wrong);
  if (jf) {
    fprintf(jf, "{\"step\":true,\"threads\":%d,\"onednn_version\":\"%d.%d.%d\","
                "\"onednn_impl\":\"%s\"",
            g_threads, ver->major, ver->minor, ver->patch, impl);
    for (int p = 0; p < N_PATHS; p++)
      if (time_step[p] > 0)
        fprintf(jf, ",\"step_gflops_%s\":%.2f", g_names[p], flop_step / time_step[p] * 1e-9);
    fprintf(jf, "}\n");
    fclose(jf);
  }
  free(A), free(B), free(Cf), free(Ab), free(Bb), free(Cb), free(t);
  dnnl_stream_destroy(g_st);
  dnnl_engine_destroy(g_eng);
  return wrong ? 1 : 0;
}
