/* bf16 matrix products on the CPU: bf16 operands, fp32 accumulation, one
 * rounding per stored bf16 element. Two paths, chosen once per process:
 *
 *  "onednn"  oneDNN's matmul primitive (bf16 x bf16, fp32 accumulate; the
 *            += of a backward product is its "sum" post-op, applied in fp32
 *            before the one rounding). Built when CMake finds oneDNN
 *            (MT_HAVE_DNNL); chosen when the CPU has AMX-BF16, where it runs
 *            on the tile units, or AVX512-BF16 with a full-rate vdpbf16ps
 *            (measured at start: at least 1.5x the fp32 FMA flops).
 *  "sgemm"   the operands converted to fp32 in blocks of rows and multiplied
 *            by OpenBLAS sgemm; each fp32 result rounded once. A bf16 x bf16
 *            product is exact in fp32 (8 + 8 significant bits), so this path
 *            computes exactly what a bf16 GEMM with fp32 accumulation does;
 *            only the order of the fp32 additions is sgemm's.
 *
 * Why the rate decides on AVX512-BF16 CPUs without AMX: measured on a Xeon
 * (family 6 model 207) with avx512_bf16 and no AMX exposed, vdpbf16ps retires one
 * every two cycles (zmm: 64 flops per two cycles) against two fp32 FMAs
 * per cycle (zmm: 64 flops per cycle), so a bf16 dot-product GEMM peaks at
 * half of sgemm; oneDNN 2.6's bf16 matmul reached 75-85 GFLOP/s per core
 * against sgemm's 135-145 and this path's 110-130 at the model's shapes
 * (apps/scripts/bench-bf16.sh prints them side by side). On an AMD EPYC
 * (Zen 4) vdpbf16ps ran at 2.02x the zmm FMA flops, and at gpt2-124m's
 * shapes on 2 threads oneDNN's bf16 matmul reached 690 GFLOP/s against
 * OpenBLAS's sgemm at 204 (its Haswell kernels there) and this path's 178.
 *
 * Forms (row-major; the three products of a linear layer):
 *   NT  out  (M=N,  N=OC) = inp  (N,C)  w^T, w stored (OC,C)       K = C
 *   NN  dinp (M=N,  N=C)  = dout (N,OC) w,   w stored (OC,C)       K = OC
 *   TN  dw   (M=OC, N=C)  = dout^T inp, dout stored (N,OC)          K = N
 *
 * Determinism: for a fixed thread count the same bits on every run (oneDNN
 * and OpenBLAS split work by thread count, never by timing; the tiles of
 * the sgemm path are fixed by the shape, see sgemm_path). */
#define _DEFAULT_SOURCE /* syscall() for arch_prctl */
#include "kernels/cpu/cpu_internal.h"

#include <cblas.h>
#include <cpuid.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef MT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* ------------------------------------------------------------------ */
/* the CPU's bf16 instructions                                          */

/* Linux hands AMX tile data to a process only after it asks (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XTILEDATA, feature 18); oneDNN asks too. */
#define MT_ARCH_REQ_XCOMP_PERM 0x1023
#define MT_XFEATURE_XTILEDATA 18

static int detect_bf16_level(void) {
  unsigned a, b, c, d;
  if (!__builtin_cpu_supports("avx512f") || __get_cpuid_max(0, NULL) < 7) return 0;
  __cpuid_count(7, 1, a, b, c, d);
  int avx512_bf16 = (a >> 5) & 1;
  __cpuid_count(7, 0, a, b, c, d);
  int amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
  int amx = 0;
  if (amx_bf16 && amx_tile) {
    /* the OS must save the tile state (XCR0 bits 17, 18) and grant it */
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if (((lo >> 17) & 3) == 3 &&
        syscall(SYS_arch_prctl, MT_ARCH_REQ_XCOMP_PERM, MT_XFEATURE_XTILEDATA) == 0)
      amx = 1;
  }
  return amx ? 2 : avx512_bf16 ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* instruction throughput on one core                                  */

/* 24 independent accumulators (enough to cover either instruction's
 * latency), iters iterations, this thread's CPU time (another job on the
 * machine takes cores, not this thread's cycles): zmm vfmadd231ps (16
 * multiply-adds = 32 flops each) against zmm vdpbf16ps (32 bf16 products
 * summed pairwise into 16 fp32 = 64 flops each). */
static double thread_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define PEAK_REGS ".irp r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23\n"
#define PEAK_CLOBBER                                                                              \
  "rcx", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",          \
      "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",            \
      "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm30", "xmm31"

/* One probe: 24 x iters of INSN on zmm0-23 (FLOPS each), GFLOP/s. Target
 * attributes: the registers zmm16-31 exist only for AVX-512 code; a build
 * without -march=native (the sanitizer build) still compiles these. */
#define PEAK_PROBE(name, tgt, insn, flops)                                                        \
  __attribute__((target(tgt))) static double name(long iters) {                                   \
    double t0 = thread_seconds();                                                                 \
    __asm__ volatile("mov %0, %%rcx\n vxorps %%zmm30, %%zmm30, %%zmm30\n"                         \
                     "vxorps %%zmm31, %%zmm31, %%zmm31\n"                                         \
                     "1:\n" PEAK_REGS insn " %%zmm30, %%zmm31, %%zmm\\r\n .endr\n"                \
                     "dec %%rcx\n jnz 1b\n"                                                       \
                     :                                                                            \
                     : "r"(iters)                                                                 \
                     : PEAK_CLOBBER);                                                             \
    return iters * 24.0 * (flops) / (thread_seconds() - t0) * 1e-9;                               \
  }
/* zmm vfmadd231ps: 16 multiply-adds; vdpbf16ps: 32 bf16 products summed pairwise */
PEAK_PROBE(peak_fma_gflops, "avx512f", "vfmadd231ps", 32)
PEAK_PROBE(peak_dpbf16_gflops, "avx512f,avx512bf16", "vdpbf16ps", 64)

/* AMX: tdpbf16ps multiplies a 16 x 32 bf16 tile by a 32 x 16 one into a
 * 16 x 16 fp32 tile, 2 x 16 x 16 x 32 = 16,384 flops. Four accumulators
 * (tmm0-3) over two A tiles (tmm4-5) and two B tiles (tmm6-7), every tile 16
 * rows of 64 bytes (palette 1): four independent products per iteration,
 * enough to hide the instruction's latency behind its issue interval. The
 * tiles hold zeros: the rate does not depend on the values. Written in
 * assembly (binutils knows the mnemonics; no -mamx flags needed), run only
 * where detect_bf16_level() found AMX and the OS granted the tile state. */
typedef struct {
  unsigned char palette, start_row, reserved[14];
  unsigned short colsb[16];
  unsigned char rows[16];
} amx_tilecfg;

static double peak_amx_gflops(long iters) {
  amx_tilecfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  double t0 = thread_seconds();
  __asm__ volatile("ldtilecfg (%1)\n"
                   "tilezero %%tmm0\n tilezero %%tmm1\n tilezero %%tmm2\n tilezero %%tmm3\n"
                   "tilezero %%tmm4\n tilezero %%tmm5\n tilezero %%tmm6\n tilezero %%tmm7\n"
                   "mov %0, %%rcx\n"
                   "2:\n"
                   "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n"
                   "tdpbf16ps %%tmm7, %%tmm4, %%tmm1\n"
                   "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n"
                   "tdpbf16ps %%tmm7, %%tmm5, %%tmm3\n"
                   "dec %%rcx\n jnz 2b\n"
                   "tilerelease\n"
                   :
                   : "r"(iters), "r"(&cfg)
                   : "rcx", "memory");
  return iters * 4.0 * 16384.0 / (thread_seconds() - t0) * 1e-9;
}

double mt_cpu_amx_peak(long iters) {
  if (mt_cpu_bf16_level() < 2) return 0.0;
  double best = 0.0;
  for (int r = 0; r < 3; r++) { /* the best of three */
    double a = peak_amx_gflops(iters);
    best = a > best ? a : best;
  }
  return best;
}

void mt_cpu_bf16_peaks(double *fma, double *dp, long iters) {
  *fma = *dp = 0.0;
  if (!__builtin_cpu_supports("avx512f")) return;
  int bf16 = detect_bf16_level() >= 1;
  for (int r = 0; r < 3; r++) { /* the best of three */
    double f = peak_fma_gflops(iters), d = bf16 ? peak_dpbf16_gflops(iters) : 0.0;
    *fma = f > *fma ? f : *fma;
    *dp = d > *dp ? d : *dp;
  }
}

/* ------------------------------------------------------------------ */
/* the path                                                            */

typedef enum { PATH_SGEMM = 0, PATH_ONEDNN = 1 } gemm_path;

/* vdpbf16ps flops over FMA flops from which oneDNN is the default (the
 * two CPUs measured: 1.0 and 2.0) */
#define MT_BF16_DP_FULL_RATE 1.5

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static int g_level;
static double g_dp_ratio; /* vdpbf16ps flops over zmm FMA flops, one core (level 1) */
static gemm_path g_path;
static char g_note[384];

static int dnnl_built(void) {
#ifdef MT_HAVE_DNNL
  return 1;
#else
  return 0;
#endif
}

/* the path for a request ("auto", "onednn", "sgemm"), and the note that says why */
static gemm_path choose(const char *want) {
  const char *cpu = g_level == 2   ? "AMX-BF16"
                    : g_level == 1 ? "AVX512-BF16 without AMX"
                                   : "no bf16 instructions (avx512_bf16, amx_bf16)";
  if (want && !strcasecmp(want, "onednn") && dnnl_built()) {
    snprintf(g_note, sizeof g_note, "bf16 matmuls: oneDNN (MT_BF16_GEMM=onednn; CPU: %s)", cpu);
    return PATH_ONEDNN;
  }
  if (want && !strcasecmp(want, "sgemm")) {
    snprintf(g_note, sizeof g_note,
             "bf16 matmuls: converted to fp32, OpenBLAS sgemm (MT_BF16_GEMM=sgemm; CPU: %s)", cpu);
    return PATH_SGEMM;
  }
  if (g_level == 2 && dnnl_built()) {
    snprintf(g_note, sizeof g_note, "bf16 matmuls: oneDNN on AMX-BF16");
    return PATH_ONEDNN;
  }
  if (g_level == 1 && dnnl_built() && g_dp_ratio >= MT_BF16_DP_FULL_RATE) {
    snprintf(g_note, sizeof g_note,
             "bf16 matmuls: oneDNN on AVX512-BF16 (vdpbf16ps at %.2fx the fp32 FMA rate of "
             "this core)", g_dp_ratio);
    return PATH_ONEDNN;
  }
  char l1[128];
  snprintf(l1, sizeof l1,
           dnnl_built() ? "this CPU has AVX512-BF16 without AMX, vdpbf16ps at %.2fx the fp32 FMA "
                          "rate: sgemm is faster"
                        : "this CPU has AVX512-BF16 but this build has no oneDNN",
           g_dp_ratio);
  const char *why = g_level == 2   ? "this build has no oneDNN"
                    : g_level == 1 ? l1
                                   : "this CPU has no bf16 instructions";
  /* a request that could not be honoured says so */
  const char *ignored = !want || !*want || !strcasecmp(want, "auto") ? NULL
                        : !strcasecmp(want, "onednn")                 ? "oneDNN is not in this build"
                                                                      : "not auto, onednn or sgemm";
  if (ignored)
    snprintf(g_note, sizeof g_note,
             "bf16 matmuls: converted to fp32, OpenBLAS sgemm (%s; MT_BF16_GEMM=%.32s ignored: %s)",
             why, want, ignored);
  else
    snprintf(g_note, sizeof g_note, "bf16 matmuls: converted to fp32, OpenBLAS sgemm (%s)", why);
  return PATH_SGEMM;
}

static void init_once(void) {
  g_level = detect_bf16_level();
  /* AVX512-BF16 without AMX: the dot product's rate decides (measured, a
   * few ms). Full rate (AMD Zen 4: 2.0x the FMA flops) makes oneDNN's bf16
   * matmul 3.4x OpenBLAS's sgemm; half rate (the Xeon above: 1.0x) makes it
   * slower than sgemm */
  if (g_level == 1 && dnnl_built()) {
    double fma, dp;
    mt_cpu_bf16_peaks(&fma, &dp, 200000L);
    g_dp_ratio = fma > 0 ? dp / fma : 0.0;
  }
  g_path = choose(getenv("MT_BF16_GEMM"));
}

int mt_cpu_bf16_level(void) {
  pthread_once(&g_once, init_once);
  return g_level;
}

const char *mt_bf16_gemm_path(void) {
  pthread_once(&g_once, init_once);
  return g_path == PATH_ONEDNN ? "onednn" : "sgemm";
}

const char *mt_bf16_gemm_note(void) {
  pthread_once(&g_once, init_once);
  return g_note;
}

int mt_bf16_gemm_select(const char *name) {
  pthread_once(&g_once, init_once);
  if (!name || (strcasecmp(name, "auto") && strcasecmp(name, "sgemm") &&
                strcasecmp(name, "onednn")))
    return -1;
  if (!strcasecmp(name, "onednn") && !dnnl_built()) return -1;
  /* "auto": back to the process's default, which MT_BF16_GEMM may set */
  g_path = choose(strcasecmp(name, "auto") ? name : getenv("MT_BF16_GEMM"));
  return 0;
}

/* ------------------------------------------------------------------ */
/* the sgemm path                                                      */

/* C is cut into tiles of MB x NB, and the depth k into blocks of KB. A
 * tile is computed by one thread: for each depth block it converts the
 * block of A (MB x KB) and of B (KB x NB) it needs into fp32 buffers of its
 * own and adds their product into an fp32 tile with one single-threaded
 * sgemm (the first block writes the tile when nothing is to be added);
 * then the tile is rounded into bf16 C once, or (TN, fp32 C) the sgemms
 * went straight into C. Threads take whole tiles, and an element's sum
 * depends only on the depth blocks (fixed by k), not on which tile or
 * thread computed it: the same bits at any thread count (test_bf16 checks
 * 1 thread against 2). With fewer tiles than threads the rows are cut
 * finer; failing that (a small product), the tiles run in turn on one
 * thread: OpenBLAS's own threads do not keep the bits of one thread (seen
 * with its Haswell kernels on an AMD EPYC with AVX512-BF16, OpenBLAS
 * 0.3.21: test_bf16's 64 x 48 x 96 product differed at 2 threads).
 *
 * Why tiles this size: sgemm packs its operands on every call, B's block
 * once per call and A's once per call, so a call must be large in m and n
 * for the packing (memory bound) to vanish next to 2 MB NB KB flops;
 * cutting the depth keeps the converted blocks bounded (the LM head's
 * depth is the vocabulary in dinp, the tokens in dw) at the price of one
 * read and write of the fp32 tile per depth block. 1024 x 1024 x 1024:
 * 4 MiB per buffer, three per thread. */
#define MT_GEMM_TILE 1024

static int g_mb = MT_GEMM_TILE, g_nb = MT_GEMM_TILE, g_kb = MT_GEMM_TILE;

void mt_cpu_gemm_bf16_set_block(int mb, int nb, int kb) {
  g_mb = mb > 0 ? mb : MT_GEMM_TILE;
  g_nb = nb > 0 ? nb : MT_GEMM_TILE;
  g_kb = kb > 0 ? kb : MT_GEMM_TILE;
}

/* Per-thread scratch that grows to the largest request and is kept (a
 * fresh malloc of megabytes per call would fault its pages in every time);
 * outside the mt_mem categories, at most 3 x 4 MiB per thread. Slot 0: A
 * block, 1: B block, 2: C tile. */
static _Thread_local float *g_scratch[3];
static _Thread_local size_t g_scratch_n[3];

static float *scratch(int slot, size_t n) {
  if (n > g_scratch_n[slot]) {
    free(g_scratch[slot]);
    g_scratch[slot] = malloc(n * sizeof(float));
    if (!g_scratch[slot]) mt_die("bf16 gemm: out of memory for %zu floats of scratch", n);
    g_scratch_n[slot] = n;
  }
  return g_scratch[slot];
}

/* dst (rows, n) = each row the bf16 row src (n), in fp32 */
static void rows_to_f32(float *dst, const mt_bf16 *src, int rows, int n) {
  if (rows <= 0) return;
  mt_bf16_to_f32_serial(dst, src, (size_t)n);
  for (int r = 1; r < rows; r++) memcpy(dst + (size_t)r * n, dst, (size_t)n * sizeof(float));
}

/* dst (rows, cols) fp32 contiguous = src rows of ld elements, bf16 */
static void load_block(float *dst, const mt_bf16 *src, size_t ld, int rows, int cols) {
  for (int r = 0; r < rows; r++)
    mt_bf16_to_f32_serial(dst + (size_t)r * cols, src + (size_t)r * ld, (size_t)cols);
}

typedef struct {
  int form, m, n, k;
  const mt_bf16 *A, *B, *bias;
  mt_bf16 *Cb;
  float *Cf;
  int accumulate;
} gemm_args;

/* the tile of rows [i0, i0+rows) and columns [j0, j0+cols) */
static void sgemm_tile(const gemm_args *g, int i0, int rows, int j0, int cols) {
  const int m = g->m, n = g->n, k = g->k, KB = g_kb < k ? g_kb : k;
  float *At = scratch(0, (size_t)rows * KB), *Bt = scratch(1, (size_t)KB * cols);
  /* the fp32 tile: C itself (TN), or a buffer rounded into bf16 C at the end */
  float *Ct = g->Cf ? g->Cf + (size_t)i0 * n + j0 : scratch(2, (size_t)rows * cols);
  const int ldc = g->Cf ? n : cols;
  int has_c = g->accumulate; /* whether Ct holds something to add to */
  mt_bf16 *Cbt = g->Cb ? g->Cb + (size_t)i0 * n + j0 : NULL;
  if (Cbt && g->accumulate) {
    load_block(Ct, Cbt, (size_t)n, rows, cols);
  } else if (Cbt && g->bias) { /* as matmul_forward: the bias first, then the product */
    rows_to_f32(Ct, g->bias + j0, rows, cols);
    has_c = 1;
  }
  for (int p0 = 0; p0 < k; p0 += KB) {
    const int depth = k - p0 < KB ? k - p0 : KB;
    /* A block as (rows, depth): NT, NN from A (m, k) rows; TN from A
     * stored (k, m) as (depth, rows), multiplied transposed */
    if (g->form == MT_GEMM_TN)
      load_block(At, g->A + (size_t)p0 * m + i0, (size_t)m, depth, rows);
    else
      load_block(At, g->A + (size_t)i0 * k + p0, (size_t)k, rows, depth);
    /* B block: NT from B stored (n, k) as (cols, depth), transposed; NN,
     * TN from B (k, n) as (depth, cols) */
    if (g->form == MT_GEMM_NT)
      load_block(Bt, g->B + (size_t)j0 * k + p0, (size_t)k, cols, depth);
    else
      load_block(Bt, g->B + (size_t)p0 * n + j0, (size_t)n, depth, cols);
    const float beta = has_c || p0 > 0 ? 1.0f : 0.0f;
    if (g->form == MT_GEMM_NT)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, depth, 1.0f, At, depth, Bt,
                  depth, beta, Ct, ldc);
    else if (g->form == MT_GEMM_NN)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, cols, depth, 1.0f, At, depth,
                  Bt, cols, beta, Ct, ldc);
    else
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, cols, depth, 1.0f, At, rows, Bt,
                  cols, beta, Ct, ldc);
  }
  if (Cbt)
    for (int r = 0; r < rows; r++)
      mt_bf16_from_f32_serial(Cbt + (size_t)r * n, Ct + (size_t)r * cols, (size_t)cols);
}

static void sgemm_path(const gemm_args *g) {
  const int threads = omp_in_parallel() ? 1 : mt_kernels_threads();
  int MB = g_mb < g->m ? g_mb : g->m;
  const int NB = g_nb < g->n ? g_nb : g->n, nt = (g->n + NB - 1) / NB;
  /* fewer tiles than threads: cut the rows finer (not below 128), so the
   * conversions run on every thread too. An element's sum does not depend
   * on where the tiles end (only the depth blocks order it). */
  if (threads > 1 && ((g->m + MB - 1) / MB) * nt < threads) {
    int want = (threads + nt - 1) / nt, rows = (g->m + want - 1) / want;
    rows = (rows + 15) / 16 * 16;
    if (rows >= 128 && rows < MB) MB = rows;
  }
  const int mt = (g->m + MB - 1) / MB, tiles = mt * nt;
  if (threads > 1 && tiles >= threads) {
    int blas, team = mt_cpu_blas_serial_begin(&blas);
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
    for (int t = 0; t < tiles; t++) {
      int i0 = (t / nt) * MB, j0 = (t % nt) * NB;
      sgemm_tile(g, i0, g->m - i0 < MB ? g->m - i0 : MB, j0, g->n - j0 < NB ? g->n - j0 : NB);
    }
    mt_cpu_blas_serial_end(blas);
  } else {
    int blas;
    mt_cpu_blas_serial_begin(&blas);
    for (int t = 0; t < tiles; t++) {
      int i0 = (t / nt) * MB, j0 = (t % nt) * NB;
      sgemm_tile(g, i0, g->m - i0 < MB ? g->m - i0 : MB, j0, g->n - j0 < NB ? g->n - j0 : NB);
    }
    mt_cpu_blas_serial_end(blas);
  }
}

/* ------------------------------------------------------------------ */
/* the oneDNN path                                                     */

#ifdef MT_HAVE_DNNL
/* Primitives cached by shape: creating one JIT-compiles its kernels
 * (milliseconds), a training step runs the same dozen shapes again and
 * again. m < 0 in a key: M given at execution (DNNL_RUNTIME_DIM_VAL), for
 * the grouped GEMM whose row counts change every step. */
typedef struct {
  int form, m, n, k, out_f32, accumulate, has_bias;
  dnnl_primitive_t prim;
} dnnl_entry;

#define MT_DNNL_CACHE 64
static dnnl_entry g_cache[MT_DNNL_CACHE];
static int g_cache_n, g_cache_next;
static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static dnnl_engine_t g_engine;

#define DNNL_TRY(call)                                                                   \
  do {                                                                                   \
    dnnl_status_t st_ = (call);                                                          \
    if (st_ != dnnl_success) mt_die("oneDNN: %s failed (status %d)", #call, (int)st_);            \
  } while (0)

/* the three memory descriptors of a product; m may be DNNL_RUNTIME_DIM_VAL */
static void onednn_mds(int form, dnnl_dim_t m, int n, int k, int out_f32, dnnl_memory_desc_t *a,
                     dnnl_memory_desc_t *b, dnnl_memory_desc_t *c) {
  dnnl_dims_t ad = {m, k}, bd = {k, n}, cd = {m, n};
  /* A (m,k): row-major, or (TN) stored (k,m); B (k,n): row-major, or (NT) stored (n,k) */
  dnnl_dims_t as = {form == MT_GEMM_TN ? 1 : k, form == MT_GEMM_TN ? m : 1};
  dnnl_dims_t bs = {form == MT_GEMM_NT ? 1 : n, form == MT_GEMM_NT ? k : 1};
  dnnl_dims_t cs = {n, 1};
  DNNL_TRY(dnnl_memory_desc_init_by_strides(a, 2, ad, dnnl_bf16, as));
  DNNL_TRY(dnnl_memory_desc_init_by_strides(b, 2, bd, dnnl_bf16, bs));
  DNNL_TRY(dnnl_memory_desc_init_by_strides(c, 2, cd, out_f32 ? dnnl_f32 : dnnl_bf16, cs));
}

static dnnl_primitive_t onednn_primitive(int form, int m, int n, int k, int out_f32, int accumulate,
                                 int has_bias) {
  pthread_mutex_lock(&g_cache_lock);
  for (int i = 0; i < g_cache_n; i++) {
    dnnl_entry *e = &g_cache[i];
    if (e->form == form && e->m == m && e->n == n && e->k == k && e->out_f32 == out_f32 &&
        e->accumulate == accumulate && e->has_bias == has_bias) {
      pthread_mutex_unlock(&g_cache_lock);
      return e->prim;
    }
  }
  if (!g_engine) DNNL_TRY(dnnl_engine_create(&g_engine, dnnl_cpu, 0));
  dnnl_memory_desc_t a, b, c, bias;
  onednn_mds(form, m < 0 ? DNNL_RUNTIME_DIM_VAL : m, n, k, out_f32, &a, &b, &c);
  if (has_bias) {
    dnnl_dims_t bd = {1, n};
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&bias, 2, bd, dnnl_bf16, dnnl_ab));
  }
  dnnl_matmul_desc_t md;
  DNNL_TRY(dnnl_matmul_desc_init(&md, &a, &b, has_bias ? &bias : NULL, &c));
  dnnl_primitive_attr_t attr;
  DNNL_TRY(dnnl_primitive_attr_create(&attr));
  if (accumulate) { /* dst = dst + product, in fp32, then one rounding */
    dnnl_post_ops_t po;
    DNNL_TRY(dnnl_post_ops_create(&po));
    DNNL_TRY(dnnl_post_ops_append_sum(po, 1.0f));
    DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, po));
    dnnl_post_ops_destroy(po);
  }
  dnnl_primitive_desc_t pd;
  DNNL_TRY(dnnl_primitive_desc_create(&pd, &md, attr, g_engine, NULL));
  dnnl_primitive_t prim;
  DNNL_TRY(dnnl_primitive_create(&prim, pd));
  dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  /* a full cache replaces its entries in turn */
  int slot = g_cache_n < MT_DNNL_CACHE ? g_cache_n++ : g_cache_next++ % MT_DNNL_CACHE;
  if (g_cache[slot].prim) dnnl_primitive_destroy(g_cache[slot].prim);
  g_cache[slot] = (dnnl_entry){.form = form, .m = m, .n = n, .k = k, .out_f32 = out_f32,
                               .accumulate = accumulate, .has_bias = has_bias, .prim = prim};
  pthread_mutex_unlock(&g_cache_lock);
  return prim;
}

/* One product on oneDNN. Inside an OpenMP parallel region (the grouped
 * GEMM's threads) oneDNN runs on the calling thread alone. */
static void onednn_matmul(int form, int m, int n, int k, const mt_bf16 *A, const mt_bf16 *B,
                      const mt_bf16 *bias, void *C, int out_f32, int accumulate,
                      int runtime_m) {
  dnnl_primitive_t prim =
      onednn_primitive(form, runtime_m ? -1 : m, n, k, out_f32, accumulate, bias != NULL);
  dnnl_memory_desc_t a, b, c, bmd;
  onednn_mds(form, m, n, k, out_f32, &a, &b, &c);
  dnnl_memory_t am, bm, cm, biasm = NULL;
  DNNL_TRY(dnnl_memory_create(&am, &a, g_engine, (void *)A));
  DNNL_TRY(dnnl_memory_create(&bm, &b, g_engine, (void *)B));
  DNNL_TRY(dnnl_memory_create(&cm, &c, g_engine, C));
  dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}};
  int nargs = 3;
  if (bias) {
    dnnl_dims_t bd = {1, n};
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&bmd, 2, bd, dnnl_bf16, dnnl_ab));
    DNNL_TRY(dnnl_memory_create(&biasm, &bmd, g_engine, (void *)bias));
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, biasm};
  }
  /* one stream per call: cheap, and safe from several threads at once */
  dnnl_stream_t stream;
  DNNL_TRY(dnnl_stream_create(&stream, g_engine, dnnl_stream_default_flags));
  DNNL_TRY(dnnl_primitive_execute(prim, stream, nargs, args));
  DNNL_TRY(dnnl_stream_wait(stream));
  dnnl_stream_destroy(stream);
  dnnl_memory_destroy(am), dnnl_memory_destroy(bm), dnnl_memory_destroy(cm);
  if (biasm) dnnl_memory_destroy(biasm);
}
#endif

/* ------------------------------------------------------------------ */

void mt_cpu_gemm_bf16(int form, int m, int n, int k, const mt_bf16 *A, const mt_bf16 *B,
                      const mt_bf16 *bias, mt_bf16 *Cb, float *Cf, int accumulate,
                      int runtime_m) {
  pthread_once(&g_once, init_once);
  if (m <= 0 || n <= 0) return;
  if (k <= 0) { /* an empty sum: C keeps its value (+=) or becomes the bias or 0 */
    if (accumulate) return;
    if (Cf) memset(Cf, 0, (size_t)m * n * sizeof(float));
    if (Cb) {
      if (bias)
        for (int i = 0; i < m; i++) memcpy(Cb + (size_t)i * n, bias, (size_t)n * sizeof(mt_bf16));
      else
        memset(Cb, 0, (size_t)m * n * sizeof(mt_bf16));
    }
    return;
  }
#ifdef MT_HAVE_DNNL
  if (g_path == PATH_ONEDNN) {
    onednn_matmul(form, m, n, k, A, B, bias, Cf ? (void *)Cf : (void *)Cb, Cf != NULL, accumulate,
              runtime_m);
    return;
  }
#else
  (void)runtime_m;
#endif
  gemm_args g = {.form = form, .m = m, .n = n, .k = k, .A = A, .B = B, .bias = bias, .Cb = Cb,
                 .Cf = Cf, .accumulate = accumulate};
  sgemm_path(&g);
}
