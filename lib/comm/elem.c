/* What a collective needs of its element type (core.h's mt_dtype): the MPI
 * datatype, the MPI reduction, the host's own sums (the bf16 sum, and the
 * ring of mt_reduce_scatter_dim), the bytes counted per call, and MPI's
 * int counts. */
#include "comm/comm_internal.h"

#include <limits.h>

MPI_Datatype mt_comm_mpi_type(mt_dtype t) {
  switch (t) {
  case MT_DT_F32: return MPI_FLOAT;
  case MT_DT_F64: return MPI_DOUBLE;
  case MT_DT_BF16: return MPI_UINT16_T; /* moved as bits; summed by mt_comm_bf16_sum_op */
  case MT_DT_I32: return MPI_INT32_T;
  }
  mt_die("comm: element type %d unknown", (int)t);
}

/* a + b elementwise for a type with C arithmetic */
#define ADD_AS(T)                                         \
  do {                                                    \
    T *d_ = dst;                                          \
    const T *a_ = a, *b_ = b;                             \
    for (size_t i = 0; i < n; i++) d_[i] = a_[i] + b_[i]; \
  } while (0)

void mt_comm_add(mt_dtype t, void *dst, const void *a, const void *b, size_t n) {
  switch (t) {
  case MT_DT_F32: ADD_AS(float); return;
  case MT_DT_F64: ADD_AS(double); return;
  case MT_DT_I32: ADD_AS(int32_t); return;
  case MT_DT_BF16: {
    mt_bf16 *d = dst;
    const mt_bf16 *x = a, *y = b;
    for (size_t i = 0; i < n; i++)
      d[i] = mt_bf16_from_f32(mt_bf16_to_f32(x[i]) + mt_bf16_to_f32(y[i]));
    return;
  }
  }
  mt_die("comm: no sum for element type %d", (int)t);
}

/* The bf16 sum as an MPI reduction: inout[i] = round(in[i] + inout[i]) */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  mt_comm_add(MT_DT_BF16, inout, in, inout, (size_t)*len);
}

MPI_Op mt_comm_bf16_sum_op(void) {
  static MPI_Op op = MPI_OP_NULL;
  if (op == MPI_OP_NULL) MT_MPI_CHECK(MPI_Op_create(bf16_sum, 1, &op));
  return op;
}

MPI_Op mt_comm_mpi_op(mt_dtype t, mt_redop op) {
  if (op == MT_RED_SUM) return t == MT_DT_BF16 ? mt_comm_bf16_sum_op() : MPI_SUM;
  if (t == MT_DT_BF16) mt_die("comm: no maximum over bf16 elements");
  return MPI_MAX;
}

int mt_comm_count_of(size_t n) {
  if (n > (size_t)INT_MAX) mt_die("collective of %zu elements exceeds the MPI int count", n);
  return (int)n;
}

size_t mt_comm_sum_counts(const int *counts, int n) {
  size_t s = 0;
  for (int i = 0; i < n; i++) s += (size_t)counts[i];
  return s;
}

void mt_comm_int_parts(const size_t *counts, int n, int *c, int *d, size_t *total) {
  size_t off = 0;
  for (int r = 0; r < n; r++) {
    c[r] = mt_comm_count_of(counts[r]);
    d[r] = mt_comm_count_of(off);
    off += counts[r];
  }
  *total = off;
}

/* ------------------------------------------------------------------ */
/* bytes on the wire, per rank (the ring algorithms' figures)          */

double mt_bytes_allreduce(size_t total_bytes, int n) {
  return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * (double)total_bytes;
}
double mt_bytes_reduce_scatter(size_t total_bytes, int n) {
  return n <= 1 ? 0.0 : (double)(n - 1) / n * (double)total_bytes;
}
double mt_bytes_allgather(size_t total_bytes, int n) {
  return mt_bytes_reduce_scatter(total_bytes, n);
}
double mt_bytes_alltoall(size_t total_bytes, int n) {
  return mt_bytes_reduce_scatter(total_bytes, n);
}

double mt_bytes_alltoallv(const size_t *send_counts, int n, int rank, size_t elem_bytes) {
  double b = 0.0;
  for (int r = 0; r < n; r++)
    if (r != rank) b += (double)send_counts[r] * (double)elem_bytes;
  return b;
}
