/* meshbench: the measurements meshreport turns into baselines and ratios.
 *
 *   meshbench <subcommand> [options]      meshbench --help
 *
 * Each subcommand prints one row per case (nccl-tests style), a summary line,
 * and appends one JSON line to --json FILE. Subcommands today:
 *   gemm   GFLOP/s at the shapes of one GPT training step: cblas_sgemm, or
 *          (--device cuda) the CUDA backend's cuBLASLt matmuls, fp32 or bf16
 *   gemm-bf16  the CPU's bf16 matmuls beside fp32 sgemm at the same shapes
 *   attention  causal attention alone: block kernels against the T x T reference
 *   allreduce, allgather, reduce-scatter, alltoall, sendrecv, collectives
 *          collectives over a mesh group, nccl-tests style (under mpirun/srun):
 *          MPI on host buffers, or (--device cuda) device buffers through
 *          comm's NCCL path
 *   devices  the GPUs this process sees (or why none)
 * Each subcommand is one file of apps/bench/ (bench.h lists them); this
 * file only dispatches. gemm is one process and never calls MPI, so it runs
 * with or without mpirun. */
#include <stdio.h>
#include <string.h>

#include <mpi.h>

#include "bench/bench.h"
#include "core/core.h"

static const char *g_prog = "meshbench";

typedef struct {
  const char *name;
  int (*run)(int argc, char **argv); /* argv[0] is the subcommand */
  const char *summary;
} bench_command;

/* ckpt: the benchmark leaves MPI initialised; end it here */
static int bench_ckpt(int argc, char **argv) {
  int rc = mt_bench_ckpt(argc, argv);
  int init = 0, fin = 0;
  MT_MPI_CHECK(MPI_Initialized(&init));
  MT_MPI_CHECK(MPI_Finalized(&fin));
  if (init && !fin) MT_MPI_CHECK(MPI_Finalize());
  return rc;
}

static const bench_command g_commands[] = {
    {"gemm", mt_bench_gemm, "matmul GFLOP/s at the shapes of one GPT training step (CPU or GPU)"},
    {"gemm-bf16", mt_bench_gemm_bf16,
     "bf16 matmuls (CPU: converted for sgemm, oneDNN) beside fp32 sgemm at a step's shapes"},
    {"attention", mt_bench_attention,
     "causal attention fwd+bwd time and memory: block kernels vs the T x T reference"},
    {"devices", mt_bench_devices, "the GPUs this process sees (or why none)"},
    {"info", mt_bench_info, "the BLAS kernels and thread count this process uses"},
    {"allreduce", mt_bench_collectives, "MPI allreduce (sum) time, algbw, busbw, #wrong by size"},
    {"allgather", mt_bench_collectives, "MPI allgather (in place) time, algbw, busbw, #wrong by size"},
    {"reduce-scatter", mt_bench_collectives, "MPI reduce-scatter (sum) time, algbw, busbw, #wrong"},
    {"alltoall", mt_bench_collectives, "MPI alltoall time, algbw, busbw, #wrong by size"},
    {"sendrecv", mt_bench_collectives, "ring send/recv (p2p) time, algbw, busbw, #wrong by size"},
    {"collectives", mt_bench_collectives, "all five collectives above, one after another"},
    {"ckpt", bench_ckpt, "checkpoint save/load GB/s (both modes) against raw POSIX I/O"},
    {"stream", mt_bench_stream, "memory bandwidth of elementwise work (triad) on this rank"},
    {"data", mt_bench_data, "the blended loader's samples/s and tokens/s over token shards"},
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
  fprintf(stderr, "%s: error: unknown subcommand '%s' (see %s --help)\n", g_prog, argv[1], g_prog);
  return MT_EXIT_BADINPUT;
}
