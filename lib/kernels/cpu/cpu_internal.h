/* Functions shared between the CPU backend's files (not public). */
#ifndef MT_KERNELS_CPU_INTERNAL_H
#define MT_KERNELS_CPU_INTERNAL_H

#include <stddef.h>

#include "kernels/kernels.h"

/* The per-type bodies of every op over the storage type (typed.h): for
 * each op of MT_OPS_TYPED (and _SUMS), mt_cpu_<op>_f32 and mt_cpu_<op>_bf16
 * with the table's parameters after t. ops_cpu.c puts one member in front
 * of each pair that picks by t. */
#define MT_CPU_DECLARE_TYPED_(name, params, args)                                          \
  void mt_cpu_##name##_f32(MT_OPS_UNPAREN params);                                         \
  void mt_cpu_##name##_bf16(MT_OPS_UNPAREN params);
#define MT_CPU_DECLARE_SUMS_(name, params, args)                                           \
  double mt_cpu_##name##_f32(MT_OPS_UNPAREN params);                                       \
  double mt_cpu_##name##_bf16(MT_OPS_UNPAREN params);
MT_OPS_TYPED(MT_CPU_DECLARE_TYPED_)
MT_OPS_TYPED_SUMS(MT_CPU_DECLARE_SUMS_)
#undef MT_CPU_DECLARE_TYPED_
#undef MT_CPU_DECLARE_SUMS_

/* The ops of fixed types (MT_OPS_FIXED): mt_cpu_<op> */
#define MT_CPU_DECLARE_FIXED_(name, optional, params, args) void mt_cpu_##name params;
MT_OPS_FIXED(MT_CPU_DECLARE_FIXED_)
#undef MT_CPU_DECLARE_FIXED_

/* Columns (channels) per task when a sum over rows is split by column: wide
 * enough for contiguous, vectorised rows, narrow enough to spread over
 * threads; each column owned by one thread, rows in order (the same bits at
 * any thread count). */
#define MT_COL_BLOCK 64

/* Clears and copies of more than MT_PAR_MIN elements are split over the
 * threads in contiguous pieces: one core does not saturate the memory
 * bandwidth, and a serial memset left the other threads idle. */
#define MT_PAR_MIN ((size_t)1 << 16)

static inline int mt_min_int(int a, int b) { return a < b ? a : b; }

/* The OpenBLAS pool size is global: set it to 1 for a parallel region whose
 * threads each call sgemm (*blas_threads: the size to restore), and back.
 * Returns the team size the region must ask for with num_threads(): an
 * OpenMP OpenBLAS changes OpenMP's default along with its pool. */
int mt_cpu_blas_serial_begin(int *blas_threads);
void mt_cpu_blas_serial_end(int blas_threads);

/* Row loops of the softmaxes, vectorised (rows_cpu.c: a polynomial exp,
 * relative error below 2e-7; arguments below -87 give exp(-87)). The inputs
 * must be finite. y may alias x. */
float mt_cpu_exp(float x);                             /* one value */
float mt_cpu_row_max(const float *x, int n);           /* max of x[0..n), n >= 1 */
/* y[i] = exp(x[i] - shift) for i < n; returns their sum (float, or double) */
float mt_cpu_row_exp(float *y, const float *x, int n, float shift);
double mt_cpu_row_exp_f64(float *y, const float *x, int n, float shift);

/* ---- the bf16 GEMM engine (gemm_bf16.c) ---- */

/* The three products of a linear layer (gemm_bf16.c says which is which) */
enum { MT_GEMM_NT = 0, MT_GEMM_NN = 1, MT_GEMM_TN = 2 };

/* C (m,n) = op(A) op(B) on bf16 A, B with fp32 accumulation.
 * NT, NN: into bf16 Cb (Cf NULL): Cb = round(product + bias) (bias (n) or
 * NULL), or with accumulate Cb = round(Cb + product) (bias unused).
 * TN: into fp32 Cf (Cb NULL, bias NULL): Cf = product, or Cf += product.
 * runtime_m: the row count changes from call to call (grouped GEMM), so a
 * cached oneDNN primitive should not be specialised to it. */
void mt_cpu_gemm_bf16(int form, int m, int n, int k, const mt_bf16 *A, const mt_bf16 *B,
                      const mt_bf16 *bias, mt_bf16 *Cb, float *Cf, int accumulate,
                      int runtime_m);

/* The sgemm path's tile: rows, columns and depth block (0: the default,
 * 1024). Tests make them small to run several tiles on small shapes. */
void mt_cpu_gemm_bf16_set_block(int mb, int nb, int kb);

/* Conversions of n elements on the calling thread alone (inside parallel
 * regions); the same bits as the scalar mt_bf16_from_f32 / _to_f32. */
void mt_bf16_from_f32_serial(mt_bf16 *dst, const float *src, size_t n);
void mt_bf16_to_f32_serial(float *dst, const mt_bf16 *src, size_t n);

/* ---- bf16 dot products on AVX512-BF16 (dot_bf16.c), for attention's
 * products: of bf16 rows, or of fp32 intermediates rounded to bf16 once ---- */

/* the dot-product path for a head size: the process's bf16 matmuls run on
 * oneDNN because the CPU has AVX512-BF16 at full rate (or AMX), and hs is
 * even */
int mt_cpu_dot_bf16_usable(int hs);
/* columns of a microkernel tile; packed rows are padded to a multiple */
#define MT_DOT_NC 32
static inline int mt_dot_round_nc(int n) { return (n + MT_DOT_NC - 1) / MT_DOT_NC * MT_DOT_NC; }
/* Bp (np x ldp words) = the bf16 rows B (cols x 2 np, row stride ldb) in
 * pair-major order: Bp[p][c] = the 32-bit word of B[c][2p], B[c][2p+1];
 * columns cols .. mt_dot_round_nc(cols) - 1 are zero. */
void mt_cpu_dot_pack_pairs(uint32_t *Bp, size_t ldp, const mt_bf16 *B, size_t ldb, int cols,
                           int np);
/* the same layout from a row-major operand B (n x cols, row stride ldb)
 * whose rows are the depth: Bp[p][c] = the word of B[2p][c], B[2p+1][c]
 * (p < (n + 1) / 2; for an odd n the last pair's second half is 0) */
void mt_cpu_dot_pack_rows(uint32_t *Bp, size_t ldp, const mt_bf16 *B, size_t ldb, int n,
                          int cols);
/* A (rows x n, row stride lda) = X (fp32, row stride ldx) rounded to bf16
 * (the bits of mt_bf16_from_f32); for an odd n A[r][n] = 0, so the rows
 * hold whole pairs */
void mt_cpu_dot_round_rows(mt_bf16 *A, size_t lda, const float *X, size_t ldx, int rows, int n);
/* S[r][c] = alpha sum_d A[r][d] B[c][d] (r < rows, c < cols, d < 2 np) for
 * bf16 rows A (row stride lda, 2 np readable elements a row) and B packed
 * by mt_cpu_dot_pack_pairs or _rows (Bp, ldp >= mt_dot_round_nc(cols));
 * fp32 S (row stride lds); add: S[r][c] += that instead. */
void mt_cpu_dot_nt_bf16(float *S, int lds, const mt_bf16 *A, size_t lda, int rows,
                        const uint32_t *Bp, size_t ldp, int cols, int np, float alpha, int add);
/* the same with A packed by mt_cpu_dot_pack_rows (Ap, lda >= rows): A's
 * row r is the packed column r, S = alpha X^T B for the X that was packed */
void mt_cpu_dot_tn_bf16(float *S, int lds, const uint32_t *Ap, size_t lda, int rows,
                        const uint32_t *Bp, size_t ldp, int cols, int np, float alpha, int add);

/* n bytes (64-byte aligned) of this thread's scratch slot `slot` (0 ..
 * MT_CPU_SCRATCH_SLOTS-1), grown to the largest request and kept between
 * calls (freed when the thread exits); contents undefined */
#define MT_CPU_SCRATCH_SLOTS 16
void *mt_cpu_scratch(int slot, size_t bytes);

#endif
