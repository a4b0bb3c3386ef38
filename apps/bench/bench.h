/* meshbench's subcommands, one file each (apps/bench/): each takes its
 * argv (argv[0] the subcommand's name), prints its rows and summary line,
 * appends JSON lines where asked, and returns the exit code (0, 2 bad input,
 * 3 a wrong result or a runtime failure). */
#ifndef MT_BENCH_H
#define MT_BENCH_H

#include <stdarg.h>

int mt_bench_gemm(int argc, char **argv);        /* gemm.c */
int mt_bench_gemm_bf16(int argc, char **argv);   /* gemm_bf16.c */
int mt_bench_attention(int argc, char **argv);   /* attention.c */
int mt_bench_collectives(int argc, char **argv); /* collectives.c: every collective */
int mt_bench_ckpt(int argc, char **argv);        /* ckpt.c (leaves MPI initialised) */
int mt_bench_stream(int argc, char **argv);      /* stream.c */
int mt_bench_data(int argc, char **argv);        /* data.c */
int mt_bench_info(int argc, char **argv);        /* devices.c */
int mt_bench_devices(int argc, char **argv);     /* devices.c */

/* root (freed) as one line appended to path: 0, or MT_EXIT_RUNTIME with
 * "prog: error: cannot append to path: why" on stderr (util.c) */
/* "prog: error: what 'value' (see prog --help)" on stderr, exit 2 */
void __attribute__((noreturn)) mt_bench_bad(const char *prog, const char *what,
                                            const char *value);
/* "prog: error: <fmt with ap> (see prog[ sub] --help)" on stderr: the
 * line of a usage error (sub: the subcommand whose help to see, or NULL) */
void mt_bench_vusage(const char *prog, const char *sub, const char *fmt, va_list ap);
/* text as a whole number from 1 to max, else mt_bench_bad naming opt */
int mt_bench_int(const char *prog, const char *opt, const char *text, long max);

/* The matmuls of one training step of GPT-2's five linear layers (qkv,
 * attn_proj, fc, fc_proj, and the lm head: the tied embedding (Vp,C), no
 * bias), each in the three forms the kernels call (row-major), for
 * out (N,OC) = inp (N,C) w^T:
 *   NT  forward          out (M=N,  N=OC) = inp  (N,C)  * w^T (C,OC)   K = C
 *   NN  backward dinp    dinp(M=N,  N=C)  += dout(N,OC) * w   (OC,C)   K = OC
 *   TN  backward dw      dw  (M=OC, N=C)  += dout^T(OC,N) * inp (N,C)  K = N
 * (gemm.c, gemm_bf16.c; util.c) */
typedef enum { MT_BENCH_NT, MT_BENCH_NN, MT_BENCH_TN } mt_bench_form;
extern const char *const mt_bench_form_names[3]; /* "NT", "NN", "TN" */
extern const char *const mt_bench_role_names[3]; /* "fwd", "bwd_dinp", "bwd_dw" */
#define MT_BENCH_GPT_GEMMS 15
typedef struct {
  const char *layer;
  mt_bench_form form;
  int m, n, k;
  int count; /* calls per step (per micro-batch of `tokens` rows) */
  int bias;  /* the forward adds a bias */
} mt_bench_matmul;
/* the MT_BENCH_GPT_GEMMS matmuls of a model of width C, L layers and a
 * padded vocabulary of Vp, on `tokens` rows */
void mt_bench_gpt_gemms(int C, int L, int Vp, int tokens, mt_bench_matmul *out);

struct cJSON;
/* a new JSON object describing one matmul shape: layer, role, form, m, n,
 * k, count (the benchmark adds its figures) */
struct cJSON *mt_bench_matmul_json(const char *layer, mt_bench_form form, int m, int n, int k,
                                   int count);
int mt_bench_json_append(const char *prog, const char *path, struct cJSON *root);

/* --cold (util.c): on allocates the flush buffer and says so on stdout,
 * flush reads it before a timed call (nothing while off), off frees it */
void mt_bench_cold_on(void);
void mt_bench_cold_flush(void);
void mt_bench_cold_off(void);

#endif
