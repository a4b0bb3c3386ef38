/* Collectives over mesh groups, with byte and time counters. */
#include "comm/comm.h"

#include <limits.h>
#include <string.h>

double mt_bytes_allreduce(size_t total_bytes, int n) {
  return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * (double)total_bytes;
}
double mt_bytes_reduce_scatter(size_t total_bytes, int n) {
  return n <= 1 ? 0.0 : (double)(n - 1) / n * (double)total_bytes;
}
double mt_bytes_allgather(size_t total_bytes, int n) {
  return mt_bytes_reduce_scatter(total_bytes, n);
}

static int as_count(size_t n) {
  if (n > (size_t)INT_MAX) mt_die("collective of %zu elements exceeds the MPI int count", n);
  return (int)n;
}

static size_t sum_counts(const int *counts, int n) {
  size_t s = 0;
  for (int i = 0; i < n; i++) s += (size_t)counts[i];
  return s;
}

void mt_allreduce_sum_f32(mt_group *g, float *buf, size_t n) {
  if (g->size == 1) return;
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, as_count(n), MPI_FLOAT, MPI_SUM, g->comm));
  g->seconds += mt_now() - t0;
  g->bytes += mt_bytes_allreduce(n * sizeof(float), g->size);
  g->calls++;
}

void mt_allreduce_sum_f64(mt_group *g, double *buf, size_t n) {
  if (g->size == 1) return;
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, as_count(n), MPI_DOUBLE, MPI_SUM, g->comm));
  g->seconds += mt_now() - t0;
  g->bytes += mt_bytes_allreduce(n * sizeof(double), g->size);
  g->calls++;
}

void mt_allreduce_max_f64(mt_group *g, double *buf, size_t n) {
  if (g->size == 1) return;
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, as_count(n), MPI_DOUBLE, MPI_MAX, g->comm));
  g->seconds += mt_now() - t0;
  g->bytes += mt_bytes_allreduce(n * sizeof(double), g->size);
  g->calls++;
}

void mt_allreduce_max_f32(mt_group *g, float *buf, size_t n) {
  if (g->size == 1) return;
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, as_count(n), MPI_FLOAT, MPI_MAX, g->comm));
  g->seconds += mt_now() - t0;
  g->bytes += mt_bytes_allreduce(n * sizeof(float), g->size);
  g->calls++;
}

void mt_allgather_dim_f32(mt_group *g, const float *send, float *recv, size_t outer,
                          size_t inner) {
  size_t n = outer * inner, size = (size_t)g->size;
  if (g->size == 1) {
    if (recv != send) memcpy(recv, send, n * sizeof(float));
    return;
  }
  double t0 = mt_now();
  if (outer == 1) {
    MT_MPI_CHECK(MPI_Allgather(send, as_count(n), MPI_FLOAT, recv, as_count(n), MPI_FLOAT,
                               g->comm));
  } else {
    /* one rank's slice inside recv: outer runs of inner floats, size*inner
     * apart; resized so that rank r's slice starts r*inner floats in */
    MPI_Datatype strided, slice;
    MT_MPI_CHECK(MPI_Type_vector(as_count(outer), as_count(inner), as_count(size * inner),
                                 MPI_FLOAT, &strided));
    MT_MPI_CHECK(MPI_Type_create_resized(strided, 0, (MPI_Aint)(inner * sizeof(float)), &slice));
    MT_MPI_CHECK(MPI_Type_commit(&slice));
    MT_MPI_CHECK(MPI_Allgather(send, as_count(n), MPI_FLOAT, recv, 1, slice, g->comm));
    MPI_Type_free(&slice);
    MPI_Type_free(&strided);
  }
  g->seconds += mt_now() - t0;
  g->bytes += mt_bytes_allgather(size * n * sizeof(float), g->size);
  g->calls++;
}

/* dst[o*inner + i] = a[o*inner + i] + block k of src (outer, size, inner) */
static void add_block(float *dst, const float *a, const float *src, size_t outer, size_t inner,
                      size_t size, size_t k) {
  for (size_t o = 0; o < outer; o++) {
    const float *x = a + o * inner, *y = src + (o * size + k) * inner;
    float *d = dst + o * inner;
    for (size_t i = 0; i < inner; i++) d[i] = x[i] + y[i];
  }
}

/* A ring: size-1 steps; at step s rank r sends its running sum of block
 * (r-s-1) mod size to rank r+1 and receives the running sum of block
 * (r-s-2) from rank r-1, to which it adds its own part; after the last step
 * it holds the whole sum of block r. Each rank sends (size-1)/size of the
 * tensor, the figure counted. The blocks are strided in send, so the first
 * step sends with a vector datatype and the running sums are contiguous: no
 * packing. (Open MPI's MPI_Reduce_scatter_block, a reduce then a scatter for
 * few ranks, took 2-3x the time of this on 2 ranks at 3 MB.) */
void mt_reduce_scatter_dim_f32(mt_group *g, const float *send, float *recv, size_t outer,
                               size_t inner, float *scratch) {
  size_t n = outer * inner, size = (size_t)g->size;
  if (g->size == 1) {
    if (recv != send) memcpy(recv, send, n * sizeof(float));
    return;
  }
  if (!scratch) mt_die("mt_reduce_scatter_dim_f32 needs a scratch buffer");
  double t0 = mt_now();
  int r = g->rank, next = (r + 1) % g->size, prev = (r + g->size - 1) % g->size;
  MPI_Datatype block;
  MT_MPI_CHECK(MPI_Type_vector(as_count(outer), as_count(inner), as_count(size * inner),
                               MPI_FLOAT, &block));
  MT_MPI_CHECK(MPI_Type_commit(&block));
  float *sum_out = scratch, *sum_in = scratch + n; /* running sums, (outer, inner) each */
  for (int s = 0; s < g->size - 1; s++) {
    size_t b_recv = (size_t)((r - s - 2 + 2 * g->size) % g->size);
    if (s == 0) {
      size_t b_send = (size_t)((r - 1 + g->size) % g->size);
      MT_MPI_CHECK(MPI_Sendrecv(send + b_send * inner, 1, block, next, 0, sum_in, as_count(n),
                                MPI_FLOAT, prev, 0, g->comm, MPI_STATUS_IGNORE));
    } else {
      MT_MPI_CHECK(MPI_Sendrecv(sum_out, as_count(n), MPI_FLOAT, next, 0, sum_in, as_count(n),
                                MPI_FLOAT, prev, 0, g->comm, MPI_STATUS_IGNORE));
    }
    int last = s == g->size - 2; /* then b_recv == r */
    add_block(last ? recv : sum_out, sum_in, send, outer, inner, size, b_recv);
  }
  MPI_Type_free(&block);
  g->seconds += mt_now() - t0;
  g->bytes += mt_bytes_reduce_scatter(size * n * sizeof(float), g->size);
  g->calls++;
}

void mt_reduce_scatter_sum_f32(mt_group *g, const float *send, float *recv, const int *counts) {
  if (g->size == 1) {
    for (int i = 0; i < counts[0]; i++) recv[i] = send[i];
    return;
  }
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, g->comm));
  g->seconds += mt_now() - t0;
  g->bytes += mt_bytes_reduce_scatter(sum_counts(counts, g->size) * sizeof(float), g->size);
  g->calls++;
}

void mt_allgatherv_inplace_f32(mt_group *g, float *buf, const int *counts, const int *displs) {
  if (g->size == 1) return;
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs,
                              MPI_FLOAT, g->comm));
  g->seconds += mt_now() - t0;
  g->bytes += mt_bytes_allgather(sum_counts(counts, g->size) * sizeof(float), g->size);
  g->calls++;
}

void mt_iallreduce_sum_f32(mt_group *g, float *buf, size_t n, mt_request *r) {
  r->g = g;
  r->active = 0;
  if (g->size == 1) return;
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, as_count(n), MPI_FLOAT, MPI_SUM, g->comm,
                              &r->req));
  g->seconds += mt_now() - t0;
  g->bytes += mt_bytes_allreduce(n * sizeof(float), g->size);
  g->calls++;
  r->active = 1;
}

void mt_ireduce_scatter_sum_f32(mt_group *g, const float *send, float *recv,
                                const int *counts, mt_request *r) {
  r->g = g;
  r->active = 0;
  if (g->size == 1) {
    for (int i = 0; i < counts[0]; i++) recv[i] = send[i];
    return;
  }
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Ireduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, g->comm, &r->req));
  g->seconds += mt_now() - t0;
  g->bytes += mt_bytes_reduce_scatter(sum_counts(counts, g->size) * sizeof(float), g->size);
  g->calls++;
  r->active = 1;
}

void mt_wait(mt_request *r) {
  if (!r->active) return;
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Wait(&r->req, MPI_STATUS_IGNORE));
  r->g->seconds += mt_now() - t0;
  r->active = 0;
}

void mt_progress(mt_request *r) {
  if (!r->active) return;
  int done = 0;
  MT_MPI_CHECK(MPI_Test(&r->req, &done, MPI_STATUS_IGNORE));
  if (done) r->active = 0;
}

/* ------------------------------------------------------------------ */
/* point-to-point (pipeline stages)                                    */

void mt_isend_f32(mt_group *g, const float *buf, size_t n, int peer, int tag, mt_request *r) {
  double t0 = mt_now();
  r->g = g;
  MT_MPI_CHECK(MPI_Isend(buf, as_count(n), MPI_FLOAT, peer, tag, g->comm, &r->req));
  r->active = 1;
  g->seconds += mt_now() - t0;
  g->bytes += (double)n * sizeof(float);
  g->calls++;
}

void mt_irecv_f32(mt_group *g, float *buf, size_t n, int peer, int tag, mt_request *r) {
  double t0 = mt_now();
  r->g = g;
  MT_MPI_CHECK(MPI_Irecv(buf, as_count(n), MPI_FLOAT, peer, tag, g->comm, &r->req));
  r->active = 1;
  g->seconds += mt_now() - t0;
  g->calls++;
}

void mt_sendrecv_f32(mt_group *g, const float *send, float *recv, size_t n, int peer, int tag) {
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Sendrecv(send, as_count(n), MPI_FLOAT, peer, tag, recv, as_count(n),
                            MPI_FLOAT, peer, tag, g->comm, MPI_STATUS_IGNORE));
  g->seconds += mt_now() - t0;
  g->bytes += (double)n * sizeof(float);
  g->calls++;
}
