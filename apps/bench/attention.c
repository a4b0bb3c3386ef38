/* meshbench attention: causal self-attention alone, forward + backward, the
 * block kernels (attn_forward / attn_backward: online softmax, LSE kept)
 * against the reference kernels that keep the T x T probabilities
 * (attention_forward / attention_backward), at the same shapes in one run.
 *
 *   meshbench attention [--model small] [--seq 256,1024,4096] [--tokens 8192]
 *                       [--threads N] [--reps 3] [--precision fp32|bf16] [--json FILE]
 *
 * Each T runs B = tokens / T sequences (the same tokens per call at every
 * T, so the work grows with T). Per kernel: the median time of forward +
 * backward, the FLOP/s of the model's count for attention (6 B T^2 C per
 * forward + backward, the causal half of 12 B T^2 C, as the training FLOP
 * model counts it) and the bytes the kernel needs besides q|k|v, out and
 * their gradients: the reference T x T probabilities and their gradients
 * (2 B NH T^2 floats), the block kernels the rows' LSE (B NH T floats) plus
 * what their threads allocate (per-thread blocks, counted as the process's
 * peak RSS growth). A column compares the outputs of the two. Under
 * --precision bf16 the block kernels run on bf16 q|k|v, out and gradients
 * (as a bf16 run calls them: fp32 sums, LSE in fp32), the reference stays
 * fp32, and the outputs agree to bf16's rounding. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench/bench.h"
#include "core/core.h"
#include "kernels/kernels.h"
#include "model/model.h"


static const char *g_prog = "meshbench attention";

static void usage(FILE *f) {
  fprintf(f,
          "usage: meshbench attention [options]\n"
          "Causal attention forward + backward: the block kernels (online softmax, LSE)\n"
          "against the reference kernels that keep T x T probabilities.\n"
          "  --model NAME    tiny | small | gpt2-124m: width and heads (default small)\n"
          "  --seq LIST      sequence lengths, comma-separated (default 256,1024,4096)\n"
          "  --tokens N      tokens per call, B = N / T sequences (default 8192)\n"
          "  --threads N     OpenMP/BLAS threads (default: as the environment sets)\n"
          "  --reps N        timed forward+backward per kernel, median (default 3)\n"
          "  --kernels LIST  old,new (default both; old needs 2 B NH T^2 floats)\n"
          "  --precision P   fp32 (default) or bf16: the block kernels' operands\n"
          "  --json FILE     append one JSON line with every figure\n");
}

static long peak_rss_kib(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

static float *buffer(size_t n, unsigned seed) {
  float *x = malloc((n ? n : 1) * sizeof(float));
  if (!x) {
    fprintf(stderr, "%s: error: out of memory (%zu floats)\n", g_prog, n);
    exit(MT_EXIT_RUNTIME);
  }
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (float)((s >> 40) * (2.0 / 16777216.0) - 1.0);
  }
  return x;
}

typedef struct {
  int T, B;
  double time_s[2], gflops[2], extra_bytes[2];
  double max_rel_diff; /* outputs of the two kernels */
  int ran[2];
} att_row;

int mt_bench_attention(int argc, char **argv) {
  const char *model = "small", *seq = "256,1024,4096", *json_path = NULL, *kernels = "old,new";
  const char *precision = "fp32";
  int tokens = 8192, threads = 0, reps = 3;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return MT_EXIT_OK;
    }
    if (!v) mt_bench_bad(g_prog, "missing value for", a);
    if (!strcmp(a, "--model")) model = v;
    else if (!strcmp(a, "--seq")) seq = v;
    else if (!strcmp(a, "--tokens")) tokens = mt_bench_int(g_prog, a, v, 1000000000L);
    else if (!strcmp(a, "--threads")) threads = mt_bench_int(g_prog, a, v, 1000000000L);
    else if (!strcmp(a, "--reps")) reps = mt_bench_int(g_prog, a, v, 1000000000L);
    else if (!strcmp(a, "--kernels")) kernels = v;
    else if (!strcmp(a, "--json")) json_path = v;
    else if (!strcmp(a, "--precision")) {
      if (strcmp(v, "fp32") && strcmp(v, "bf16"))
        mt_bench_bad(g_prog, "--precision: not fp32 or bf16:", v);
      precision = v;
    }
    else mt_bench_bad(g_prog, "unknown option", a);
    i++;
  }
  mt_model_shape shape;
  const int preset = mt_config_enum_parse("model.preset", model);
  if (preset < 0 || preset == MT_PRESET_CUSTOM || mt_model_preset((mt_preset)preset, &shape) != 0)
    mt_bench_bad(g_prog, "--model: unknown model", model);
  int want[2] = {strstr(kernels, "old") != NULL, strstr(kernels, "new") != NULL};
  mt_kernels_set_threads(threads);
  const mt_ops *ops = mt_ops_cpu();
  const int C = shape.n_embd, NH = shape.n_head, hs = C / NH;
  const mt_dtype dt = strcmp(precision, "bf16") ? MT_DT_F32 : MT_DT_BF16;
  const size_t es = mt_dtype_bytes(dt);
  att_row rows[16];
  int n_rows = 0;
  for (const char *p = seq; *p && n_rows < 16;) {
    char *end;
    long T = strtol(p, &end, 10);
    if (end == p || T < 1 || T > tokens) mt_bench_bad(g_prog, "--seq: bad length in", seq);
    rows[n_rows++] = (att_row){(int)T, tokens / (int)T, {0, 0}, {0, 0}, {0, 0}, 0, {0, 0}};
    p = *end == ',' ? end + 1 : end;
  }
  printf("# meshbench attention: model %s (C %d, %d heads of %d), %d tokens per call, %d "
         "threads, reps %d (median), block kernels in %s, OpenBLAS core %s\n",
         model, C, NH, hs, tokens, mt_kernels_threads(), reps, precision, mt_kernels_blas_core());
  printf("# %6s %4s | %-9s %10s %8s %12s | %-9s %10s %8s %12s | %7s %9s\n", "T", "B", "reference",
         "time(ms)", "GFLOP/s", "extra MiB", "blocks", "time(ms)", "GFLOP/s", "extra MiB",
         "speedup", "max diff");
  for (int r = 0; r < n_rows; r++) {
    att_row *row = &rows[r];
    const int T = row->T, B = row->B;
    const size_t n_qkv = (size_t)B * T * 3 * C, n_out = (size_t)B * T * C;
    const size_t n_att = (size_t)B * NH * T * T, n_lse = (size_t)B * NH * T;
    const double flop = 6.0 * B * (double)T * T * C;
    float *qkv = buffer(n_qkv, 1), *dout = buffer(n_out, 2), *dqkv = buffer(n_qkv, 3);
    float *out[2] = {buffer(n_out, 4), buffer(n_out, 5)};
    double *times = malloc((size_t)reps * sizeof(double));
    for (int k = 0; k < 2; k++) {
      if (!want[k]) continue;
      long rss0 = peak_rss_kib();
      float *att = NULL, *datt = NULL, *lse = NULL;
      if (k == 0) {
        att = malloc(n_att * sizeof(float));
        datt = malloc(n_att * sizeof(float));
        if (!att || !datt) {
          fprintf(stderr, "%s: error: the reference kernel needs %.1f GiB at T = %d\n", g_prog,
                  2.0 * n_att * 4 / 1073741824.0, T);
          return MT_EXIT_RUNTIME;
        }
      } else {
        lse = buffer(n_lse, 6);
      }
      /* the block kernels' operands in their precision (fp32: the buffers themselves) */
      void *bq = qkv, *bo = out[1], *bd = dout, *bdq = dqkv;
      if (k == 1 && dt != MT_DT_F32) {
        bq = mt_malloc(n_qkv * es), bo = mt_malloc(n_out * es);
        bd = mt_malloc(n_out * es), bdq = mt_malloc(n_qkv * es);
        ops->convert(bq, dt, qkv, MT_DT_F32, n_qkv);
        ops->convert(bd, dt, dout, MT_DT_F32, n_out);
        memset(bo, 0, n_out * es), memset(bdq, 0, n_qkv * es);
        rss0 = peak_rss_kib(); /* the kernels' own growth, beyond these */
      }
      char *q8 = bq, *dq8 = bdq; /* k and v: C elements after q in each row */
      mt_attn_block a = {.B = B, .NH = NH, .hs = hs, .Tq = T, .Tk = T, .q_pos0 = 0, .k_pos0 = 0,
                         .causal = 1, .q_bs = (size_t)T * 3 * C, .q_rs = 3 * (size_t)C,
                         .k_bs = (size_t)T * 3 * C, .k_rs = 3 * (size_t)C,
                         .v_bs = (size_t)T * 3 * C, .v_rs = 3 * (size_t)C,
                         .o_bs = (size_t)T * C, .o_rs = (size_t)C, .l_bs = (size_t)NH * T,
                         .l_hs = (size_t)T};
      for (int rep = -1; rep < reps; rep++) { /* rep -1: warm-up (first touch of the buffers) */
        double t0 = mt_now();
        if (k == 0) {
          ops->attention_forward(out[0], att, qkv, B, T, C, NH);
          ops->attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH);
        } else {
          ops->attn_forward(dt, &a, bo, lse, q8, q8 + C * es, q8 + 2 * C * es);
          ops->attn_backward(dt, &a, bdq, dq8 + C * es, dq8 + 2 * C * es, bd, bo, lse, q8,
                             q8 + C * es, q8 + 2 * C * es);
        }
        if (rep >= 0) times[rep] = mt_now() - t0;
      }
      row->time_s[k] = mt_median(times, reps);
      row->gflops[k] = flop / row->time_s[k] * 1e-9;
      /* the kernel's own buffers, and what its threads allocated beyond them */
      double own = k == 0 ? 2.0 * n_att * sizeof(float) : (double)n_lse * sizeof(float);
      long grew = peak_rss_kib() - rss0;
      double threads_bytes = k == 1 && grew * 1024.0 > own ? grew * 1024.0 - own : 0.0;
      row->extra_bytes[k] = own + threads_bytes;
      row->ran[k] = 1;
      if (bo != out[1]) { /* back to fp32, to compare */
        ops->convert(out[1], MT_DT_F32, bo, dt, n_out);
        free(bq), free(bo), free(bd), free(bdq);
      }
      free(att), free(datt), free(lse);
    }
    if (row->ran[0] && row->ran[1]) {
      double diff = 0.0, scale = 0.0;
      for (size_t i = 0; i < n_out; i++) {
        double d = fabs((double)out[0][i] - out[1][i]);
        diff = isnan(d) || d > diff ? d : diff;
        scale = fmax(scale, fabs(out[0][i]));
      }
      row->max_rel_diff = diff / (scale > 0 ? scale : 1.0);
    }
    printf("  %6d %4d | %-9s %10.2f %8.1f %12.2f | %-9s %10.2f %8.1f %12.2f | %7.2f %9.1e\n", T,
           B, "", row->time_s[0] * 1e3, row->gflops[0], row->extra_bytes[0] / 1048576.0, "",
           row->time_s[1] * 1e3, row->gflops[1], row->extra_bytes[1] / 1048576.0,
           row->ran[0] && row->ran[1] ? row->time_s[0] / row->time_s[1] : 0.0, row->max_rel_diff);
    free(qkv), free(dout), free(dqkv), free(out[0]), free(out[1]), free(times);
  }
  /* bf16 operands: q, k, v and the output each rounded once (2^-9 relative) */
  const double tol = dt == MT_DT_F32 ? 1e-4 : 2e-2;
  int wrong = 0;
  for (int r = 0; r < n_rows; r++) wrong += !(rows[r].max_rel_diff <= tol);
  printf("# extra: bytes beyond q|k|v, out and gradients (reference: T x T probabilities and "
         "their gradients; blocks: LSE and per-thread blocks); %d wrong\n", wrong);
  int rc = wrong ? MT_EXIT_RUNTIME : MT_EXIT_OK;
  if (json_path) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "attention");
    cJSON_AddStringToObject(root, "model", model);
    cJSON_AddStringToObject(root, "precision", precision);
    cJSON_AddNumberToObject(root, "n_embd", C);
    cJSON_AddNumberToObject(root, "n_head", NH);
    cJSON_AddNumberToObject(root, "threads", mt_kernels_threads());
    cJSON_AddNumberToObject(root, "tokens", tokens);
    cJSON_AddStringToObject(root, "blas_core", mt_kernels_blas_core());
    cJSON *arr = cJSON_AddArrayToObject(root, "rows");
    for (int r = 0; r < n_rows; r++) {
      cJSON *o = cJSON_CreateObject();
      cJSON_AddNumberToObject(o, "T", rows[r].T);
      cJSON_AddNumberToObject(o, "B", rows[r].B);
      const char *names[2] = {"reference", "blocks"};
      for (int k = 0; k < 2; k++) {
        if (!rows[r].ran[k]) continue;
        cJSON *x = cJSON_AddObjectToObject(o, names[k]);
        cJSON_AddNumberToObject(x, "time_s", rows[r].time_s[k]);
        cJSON_AddNumberToObject(x, "gflops", rows[r].gflops[k]);
        cJSON_AddNumberToObject(x, "extra_bytes", rows[r].extra_bytes[k]);
      }
      cJSON_AddNumberToObject(o, "max_rel_diff", rows[r].max_rel_diff);
      cJSON_AddItemToArray(arr, o);
    }
    if (mt_bench_json_append(g_prog, json_path, root) != MT_EXIT_OK) rc = MT_EXIT_RUNTIME;
  }
  return rc;
}
