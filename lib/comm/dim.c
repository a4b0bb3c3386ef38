/* Collectives along one dim of a row-major tensor viewed as (outer, size,
 * inner): sequence parallelism's all-gather and reduce-scatter, Ulysses'
 * all-to-all. On the host path a rank's slice is an MPI vector datatype
 * (no packing); the reduce-scatter is comm's own ring, summing in the
 * element type (mt_comm_add: a bf16 sum rounds each addition). Device
 * buffers go to the direct backend or are staged whole. */
#include "comm/comm_internal.h"

#include <stdlib.h>

/* One block of the middle dim of an (outer, size, inner) view of elements
 * of t: outer runs of inner elements, size x inner apart, resized so that
 * block r starts r x inner elements in (one element of this type per peer
 * in MPI_Alltoall and MPI_Allgather). */
static MPI_Datatype block_type(size_t outer, size_t inner, size_t size, mt_dtype t) {
  MPI_Datatype strided, block;
  MT_MPI_CHECK(MPI_Type_vector(mt_comm_count_of(outer), mt_comm_count_of(inner),
                               mt_comm_count_of(size * inner), mt_comm_mpi_type(t), &strided));
  MT_MPI_CHECK(MPI_Type_create_resized(strided, 0, (MPI_Aint)(inner * mt_dtype_bytes(t)), &block));
  MT_MPI_CHECK(MPI_Type_commit(&block));
  MT_MPI_CHECK(MPI_Type_free(&strided));
  return block;
}

void mt_allgather_dim(mt_group *g, const void *send, void *recv, size_t outer, size_t inner,
                      mt_dtype t, mt_loc loc) {
  const size_t n = outer * inner, size = (size_t)g->size, es = mt_dtype_bytes(t);
  const double bytes = mt_bytes_allgather(size * n * es, g->size);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc)) return;
  if (g->size == 1) {
    mt_comm_local_copy(recv, send, n * es, loc);
    return;
  }
  if (mt_comm_goes_direct(g, loc)) {
    MT_DIRECT_BLOCKING(g, bytes, d_->allgather_dim(g, send, recv, outer, inner, t));
    return;
  }
  const MPI_Datatype type = mt_comm_mpi_type(t);
  const int cnt = mt_comm_count_of(n);
  double t0 = mt_now();
  mt_comm_staged x = mt_comm_stage(g, loc, send, n * es, recv, size * n * es, 0);
  /* one rank's slice inside recv (contiguous at outer = 1) */
  MPI_Datatype slice = outer == 1 ? type : block_type(outer, inner, size, t);
  const int rcnt = outer == 1 ? cnt : 1;
  MPI_Request q;
  MT_MPI_CHECK(MT_COMM_BLOCKING(
      &q, MPI_Iallgather(x.send, cnt, type, x.recv, rcnt, slice, g->comm, &q),
      MPI_Allgather(x.send, cnt, type, x.recv, rcnt, slice, g->comm)));
  if (outer != 1) MT_MPI_CHECK(MPI_Type_free(&slice));
  mt_comm_unstage(&x, recv, size * n * es);
  mt_comm_count(g, t0, bytes);
}

/* A ring: size-1 steps; at step s rank r sends its running sum of block
 * (r-s-1) mod size to rank r+1 and receives the running sum of block
 * (r-s-2) from rank r-1, to which it adds its own part; after the last step
 * it holds the whole sum of block r. Each rank sends (size-1)/size of the
 * tensor, the figure counted. The blocks are strided in send, so the first
 * step sends with a vector datatype and the running sums are contiguous: no
 * packing. (Open MPI's MPI_Reduce_scatter_block, a reduce then a scatter for
 * few ranks, took 2-3x the time of this on 2 ranks at 3 MB.) The sums are
 * comm's own arithmetic on host memory: a device buffer is staged whole.
 * scratch: 2 x outer x inner elements. */
static void reduce_scatter_ring(mt_group *g, const char *send, char *recv, size_t outer,
                                size_t inner, char *scratch, mt_dtype t) {
  const size_t n = outer * inner, size = (size_t)g->size, es = mt_dtype_bytes(t);
  const int r = g->rank, next = (r + 1) % g->size, prev = (r + g->size - 1) % g->size;
  const MPI_Datatype type = mt_comm_mpi_type(t);
  const int cnt = mt_comm_count_of(n);
  MPI_Datatype block;
  MT_MPI_CHECK(MPI_Type_vector(mt_comm_count_of(outer), mt_comm_count_of(inner),
                               mt_comm_count_of(size * inner), type, &block));
  MT_MPI_CHECK(MPI_Type_commit(&block));
  char *sum_out = scratch, *sum_in = scratch + n * es; /* running sums, (outer, inner) each */
  for (int s = 0; s < g->size - 1; s++) {
    size_t b_recv = (size_t)((r - s - 2 + 2 * g->size) % g->size);
    MPI_Request q[2];
    MT_MPI_CHECK(MPI_Irecv(sum_in, cnt, type, prev, 0, g->comm, &q[0]));
    if (s == 0) {
      size_t b_send = (size_t)((r - 1 + g->size) % g->size);
      MT_MPI_CHECK(MPI_Isend(send + b_send * inner * es, 1, block, next, 0, g->comm, &q[1]));
    } else {
      MT_MPI_CHECK(MPI_Isend(sum_out, cnt, type, next, 0, g->comm, &q[1]));
    }
    MT_MPI_CHECK(mt_comm_wait_request(&q[0], MPI_STATUS_IGNORE));
    MT_MPI_CHECK(mt_comm_wait_request(&q[1], MPI_STATUS_IGNORE));
    char *dst = s == g->size - 2 ? recv : sum_out; /* the last step: b_recv == r */
    for (size_t o = 0; o < outer; o++) /* dst row o = received sum + this rank's part */
      mt_comm_add(t, dst + o * inner * es, sum_in + o * inner * es,
                  send + (o * size + b_recv) * inner * es, inner);
  }
  MT_MPI_CHECK(MPI_Type_free(&block));
}

void mt_reduce_scatter_dim(mt_group *g, const void *send, void *recv, size_t outer,
                           size_t inner, void *scratch, mt_dtype t, mt_loc loc) {
  const size_t n = outer * inner, size = (size_t)g->size, es = mt_dtype_bytes(t);
  const double bytes = mt_bytes_reduce_scatter(size * n * es, g->size);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_SCATTER, .bytes = bytes, .loc = loc)) return;
  if (g->size == 1) {
    mt_comm_local_copy(recv, send, n * es, loc);
    return;
  }
  if (mt_comm_goes_direct(g, loc)) { /* no scratch: the backend reduces */
    MT_DIRECT_BLOCKING(g, bytes, d_->reduce_scatter_dim(g, send, recv, outer, inner, t));
    return;
  }
  if (loc == MT_LOC_HOST && !scratch) mt_die("mt_reduce_scatter_dim needs a scratch buffer");
  double t0 = mt_now();
  /* a device buffer's ring sums in host scratch after the staged buffers */
  mt_comm_staged x = mt_comm_stage(g, loc, send, size * n * es, recv, n * es,
                                   loc == MT_LOC_HOST ? 0 : 2 * n * es);
  reduce_scatter_ring(g, x.send, x.recv, outer, inner, loc == MT_LOC_HOST ? scratch : x.extra, t);
  mt_comm_unstage(&x, recv, n * es);
  mt_comm_count(g, t0, bytes);
}

void mt_alltoall_dim(mt_group *g, const void *send, void *recv, size_t s_outer, size_t s_inner,
                     size_t r_outer, size_t r_inner, mt_dtype t, mt_loc loc) {
  const size_t size = (size_t)g->size, n = size * s_outer * s_inner, es = mt_dtype_bytes(t);
  if (s_outer * s_inner != r_outer * r_inner)
    mt_die("mt_alltoall_dim: blocks of %zu x %zu and %zu x %zu elements differ", s_outer,
           s_inner, r_outer, r_inner);
  const double bytes = mt_bytes_alltoall(n * es, g->size);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_ALLTOALL, .bytes = bytes, .loc = loc)) return;
  if (g->size == 1) { /* one block: the views are the same buffer layout */
    mt_comm_local_copy(recv, send, n * es, loc);
    return;
  }
  if (mt_comm_goes_direct(g, loc)) {
    MT_DIRECT_BLOCKING(g, bytes, d_->alltoall_dim(g, send, recv, s_outer, s_inner, r_outer,
                                                  r_inner, t));
    return;
  }
  double t0 = mt_now();
  mt_comm_staged x = mt_comm_stage(g, loc, send, n * es, recv, n * es, 0);
  MPI_Datatype st = block_type(s_outer, s_inner, size, t);
  MPI_Datatype rt = block_type(r_outer, r_inner, size, t);
  MPI_Request q;
  MT_MPI_CHECK(MT_COMM_BLOCKING(&q, MPI_Ialltoall(x.send, 1, st, x.recv, 1, rt, g->comm, &q),
                                MPI_Alltoall(x.send, 1, st, x.recv, 1, rt, g->comm)));
  MT_MPI_CHECK(MPI_Type_free(&st));
  MT_MPI_CHECK(MPI_Type_free(&rt));
  mt_comm_unstage(&x, recv, n * es);
  mt_comm_count(g, t0, bytes);
}
