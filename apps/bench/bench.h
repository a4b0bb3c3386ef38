/* meshbench's subcommands, one file each (apps/bench/): each takes its
 * argv (argv[0] the subcommand's name), prints its rows and summary line,
 * appends JSON lines where asked, and returns the exit code (0, 2 bad input,
 * 3 a wrong result or a runtime failure). */
#ifndef MT_BENCH_H
#define MT_BENCH_H

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
/* text as a whole number from 1 to max, else mt_bench_bad naming opt */
int mt_bench_int(const char *prog, const char *opt, const char *text, long max);

struct cJSON;
int mt_bench_json_append(const char *prog, const char *path, struct cJSON *root);

/* --cold (util.c): on allocates the flush buffer and says so on stdout,
 * flush reads it before a timed call (nothing while off), off frees it */
void mt_bench_cold_on(void);
void mt_bench_cold_flush(void);
void mt_bench_cold_off(void);

#endif
