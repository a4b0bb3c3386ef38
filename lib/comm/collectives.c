/* The blocking collectives on whole buffers and on parts: all-reduce,
 * reduce-scatter and all-gather of the registry's parts (dp, ZeRO, tp),
 * their packed forms (MoE's etp rows), the exchanges of fixed blocks
 * (the loss and the summary's figures, MoE routing counts) and of
 * variable parts (MoE dispatch). Each is written once over the element
 * type: its MPI datatype, size and reduction come from t (elem.c). */
#include "comm/comm_internal.h"

#include <stdlib.h>

void mt_allreduce(mt_group *g, void *buf, size_t n, mt_dtype t, mt_redop op, mt_loc loc) {
  const size_t nb = n * mt_dtype_bytes(t);
  const double bytes = mt_bytes_allreduce(nb, g->size);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_REDUCE, .bytes = bytes, .loc = loc) || g->size == 1)
    return;
  const int fl = MT_FLIGHT_BEGIN(g, "allreduce", -1, MT_FLIGHT_NEW, bytes);
  if (mt_comm_goes_direct(g, loc)) {
    MT_DIRECT_BLOCKING(g, bytes, d_->allreduce(g, buf, n, t, op));
    mt_flight_end(fl);
    return;
  }
  const MPI_Datatype type = mt_comm_mpi_type(t);
  const MPI_Op mop = mt_comm_mpi_op(t, op);
  const int cnt = mt_comm_count_of(n);
  double t0 = mt_now();
  mt_comm_staged x = mt_comm_stage(g, loc, buf, nb, buf, nb, 0);
  MPI_Request q;
  MT_MPI_CHECK(
      MT_COMM_BLOCKING(&q, MPI_Iallreduce(MPI_IN_PLACE, x.recv, cnt, type, mop, g->comm, &q),
                       MPI_Allreduce(MPI_IN_PLACE, x.recv, cnt, type, mop, g->comm)));
  mt_comm_unstage(&x, buf, nb);
  mt_comm_count(g, t0, bytes);
  mt_flight_end(fl);
}

void mt_reduce_scatter(mt_group *g, const void *send, void *recv, const int *counts, mt_dtype t,
                       mt_loc loc) {
  const size_t es = mt_dtype_bytes(t), total = mt_comm_sum_counts(counts, g->size);
  const size_t mine = (size_t)counts[g->rank];
  const double bytes = mt_bytes_reduce_scatter(total * es, g->size);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_SCATTER, .bytes = bytes, .loc = loc)) return;
  if (g->size == 1) {
    mt_comm_local_copy(recv, send, mine * es, loc);
    return;
  }
  const int fl = MT_FLIGHT_BEGIN(g, "reduce_scatter", -1, MT_FLIGHT_NEW, bytes);
  if (mt_comm_goes_direct(g, loc)) {
    MT_DIRECT_BLOCKING(g, bytes, d_->reduce_scatter(g, send, recv, counts, t));
    mt_flight_end(fl);
    return;
  }
  const MPI_Datatype type = mt_comm_mpi_type(t);
  const MPI_Op mop = mt_comm_mpi_op(t, MT_RED_SUM);
  double t0 = mt_now();
  mt_comm_staged x = mt_comm_stage(g, loc, send, total * es, recv, mine * es, 0);
  MPI_Request q;
  MT_MPI_CHECK(
      MT_COMM_BLOCKING(&q, MPI_Ireduce_scatter(x.send, x.recv, counts, type, mop, g->comm, &q),
                       MPI_Reduce_scatter(x.send, x.recv, counts, type, mop, g->comm)));
  mt_comm_unstage(&x, recv, mine * es);
  mt_comm_count(g, t0, bytes);
  mt_flight_end(fl);
}

void mt_allgatherv(mt_group *g, const void *send, void *recv, const int *counts,
                   const int *displs, mt_dtype t, mt_loc loc) {
  const size_t es = mt_dtype_bytes(t), total = mt_comm_sum_counts(counts, g->size);
  const size_t mine = (size_t)counts[g->rank];
  const double bytes = mt_bytes_allgather(total * es, g->size);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc)) return;
  if (g->size == 1) {
    if (send) mt_comm_local_copy((char *)recv + (size_t)displs[0] * es, send, mine * es, loc);
    return;
  }
  const int fl = MT_FLIGHT_BEGIN(g, "allgatherv", -1, MT_FLIGHT_NEW, bytes);
  if (mt_comm_goes_direct(g, loc)) {
    MT_DIRECT_BLOCKING(g, bytes, d_->allgatherv(g, send, recv, counts, displs, t));
    mt_flight_end(fl);
    return;
  }
  const MPI_Datatype type = mt_comm_mpi_type(t);
  double t0 = mt_now();
  /* in place (send NULL): the whole buffer is read and written */
  mt_comm_staged x = send ? mt_comm_stage(g, loc, send, mine * es, recv, total * es, 0)
                          : mt_comm_stage(g, loc, recv, total * es, recv, total * es, 0);
  const void *s = send ? x.send : MPI_IN_PLACE;
  const int sn = send ? counts[g->rank] : 0;
  const MPI_Datatype st = send ? type : MPI_DATATYPE_NULL;
  MPI_Request q;
  MT_MPI_CHECK(
      MT_COMM_BLOCKING(&q, MPI_Iallgatherv(s, sn, st, x.recv, counts, displs, type, g->comm, &q),
                       MPI_Allgatherv(s, sn, st, x.recv, counts, displs, type, g->comm)));
  mt_comm_unstage(&x, recv, total * es);
  mt_comm_count(g, t0, bytes);
  mt_flight_end(fl);
}

/* ------------------------------------------------------------------ */
/* the packed forms: size_t counts, parts end to end                   */

/* The int form on the counts and displacements of parts laid end to end
 * (a group of one on MPI only copies: nothing to convert). */
static void packed(int gather, mt_group *g, const void *send, void *recv, const size_t *counts,
                   mt_dtype t, mt_loc loc) {
  const int n = g->size;
  if (n == 1 && g->backend == MT_COMM_MPI) {
    mt_comm_local_copy(recv, send, counts[0] * mt_dtype_bytes(t), loc);
    return;
  }
  int *c = mt_malloc(2 * (size_t)n * sizeof(int));
  size_t total;
  mt_comm_int_parts(counts, n, c, c + n, &total);
  if (gather) mt_allgatherv(g, send, recv, c, c + n, t, loc);
  else mt_reduce_scatter(g, send, recv, c, t, loc);
  free(c);
}

void mt_reduce_scatter_packed(mt_group *g, const void *send, void *recv, const size_t *counts,
                              mt_dtype t, mt_loc loc) {
  packed(0, g, send, recv, counts, t, loc);
}

void mt_allgatherv_packed(mt_group *g, const void *send, void *recv, const size_t *counts,
                          mt_dtype t, mt_loc loc) {
  packed(1, g, send, recv, counts, t, loc);
}

/* ------------------------------------------------------------------ */
/* fixed blocks: gather, all-gather, all-to-all                        */

/* An exchange of fixed blocks of cnt elements per rank on host views
 * (MPI_Gather to root, MPI_Allgather or MPI_Alltoall): its MPI code. */
typedef int (*block_call)(mt_group *g, const void *send, void *recv, int cnt, MPI_Datatype type,
                          int root);

/* issue's exchange of send_bytes -> recv_bytes (n elements a block) on
 * host views of the buffers, timed and counted */
static void exchange_blocks(const char *op, mt_group *g, const void *send, size_t send_bytes,
                            void *recv, size_t recv_bytes, size_t n, mt_dtype t, int root,
                            mt_loc loc, double bytes, block_call issue) {
  const int fl = MT_FLIGHT_BEGIN(g, op, -1, MT_FLIGHT_NEW, bytes);
  double t0 = mt_now();
  mt_comm_staged x = mt_comm_stage(g, loc, send, send_bytes, recv, recv_bytes, 0);
  MT_MPI_CHECK(issue(g, x.send, x.recv, mt_comm_count_of(n), mt_comm_mpi_type(t), root));
  mt_comm_unstage(&x, recv, recv_bytes);
  mt_comm_count(g, t0, bytes);
  mt_flight_end(fl);
}

static int gather_call(mt_group *g, const void *s, void *r, int cnt, MPI_Datatype type,
                       int root) {
  return MPI_Gather(s, cnt, type, r, cnt, type, root, g->comm);
}

static int allgather_call(mt_group *g, const void *s, void *r, int cnt, MPI_Datatype type,
                          int root) {
  (void)root;
  MPI_Request q;
  return MT_COMM_BLOCKING(&q, MPI_Iallgather(s, cnt, type, r, cnt, type, g->comm, &q),
                          MPI_Allgather(s, cnt, type, r, cnt, type, g->comm));
}

static int alltoall_call(mt_group *g, const void *s, void *r, int cnt, MPI_Datatype type,
                         int root) {
  (void)root;
  MPI_Request q;
  return MT_COMM_BLOCKING(&q, MPI_Ialltoall(s, cnt, type, r, cnt, type, g->comm, &q),
                          MPI_Alltoall(s, cnt, type, r, cnt, type, g->comm));
}

void mt_gather(mt_group *g, const void *send, void *recv, size_t n, mt_dtype t, int root,
               mt_loc loc) {
  const size_t nb = n * mt_dtype_bytes(t), size = (size_t)g->size;
  const int at_root = g->rank == root;
  const double bytes = at_root ? 0.0 : (double)nb;
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc, .send = send,
                       .recv = at_root ? recv : NULL, .n = n, .elem = mt_dtype_bytes(t)))
    return;
  if (g->size == 1) {
    mt_comm_local_copy(recv, send, nb, loc);
    return;
  }
  exchange_blocks("gather", g, send, nb, at_root ? recv : NULL, at_root ? size * nb : 0, n, t,
                  root, loc, bytes, gather_call);
}

void mt_allgather(mt_group *g, const void *send, void *recv, size_t n, mt_dtype t, mt_loc loc) {
  const size_t nb = n * mt_dtype_bytes(t), size = (size_t)g->size;
  const double bytes = mt_bytes_allgather(size * nb, g->size);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc, .send = send,
                       .recv = recv, .n = n, .elem = mt_dtype_bytes(t)))
    return;
  if (g->size == 1) {
    mt_comm_local_copy(recv, send, nb, loc);
    return;
  }
  exchange_blocks("allgather", g, send, nb, recv, size * nb, n, t, 0, loc, bytes, allgather_call);
}

void mt_alltoall(mt_group *g, const void *send, void *recv, size_t n, mt_dtype t, mt_loc loc) {
  const size_t nb = n * mt_dtype_bytes(t), size = (size_t)g->size;
  const double bytes = (double)(g->size - 1) * (double)nb;
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_ALLTOALL, .bytes = bytes, .loc = loc, .send = send,
                       .recv = recv, .n = n, .elem = mt_dtype_bytes(t)))
    return;
  if (g->size == 1) {
    mt_comm_local_copy(recv, send, nb, loc);
    return;
  }
  exchange_blocks("alltoall", g, send, size * nb, recv, size * nb, n, t, 0, loc, bytes,
                  alltoall_call);
}

/* ------------------------------------------------------------------ */
/* all-to-all of variable parts (MoE dispatch and combine)             */

void mt_alltoallv(mt_group *g, const void *send, const size_t *send_counts, void *recv,
                  const size_t *recv_counts, mt_dtype t, mt_loc loc) {
  const int n = g->size;
  const size_t es = mt_dtype_bytes(t);
  const double bytes = mt_bytes_alltoallv(send_counts, n, g->rank, es);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_ALLTOALL, .bytes = bytes, .loc = loc)) return;
  if (n == 1) {
    mt_comm_local_copy(recv, send, send_counts[0] * es, loc);
    return;
  }
  const int fl = MT_FLIGHT_BEGIN(g, "alltoallv", -1, MT_FLIGHT_NEW, bytes);
  if (mt_comm_goes_direct(g, loc)) {
    MT_DIRECT_BLOCKING(g, bytes, d_->alltoallv(g, send, send_counts, recv, recv_counts, t));
    mt_flight_end(fl);
    return;
  }
  const MPI_Datatype type = mt_comm_mpi_type(t);
  double t0 = mt_now();
  int *sc = mt_malloc(4 * (size_t)n * sizeof(int)), *sd = sc + n, *rc = sc + 2 * n;
  int *rd = sc + 3 * n;
  size_t st, rt;
  mt_comm_int_parts(send_counts, n, sc, sd, &st);
  mt_comm_int_parts(recv_counts, n, rc, rd, &rt);
  mt_comm_staged x = mt_comm_stage(g, loc, send, st * es, recv, rt * es, 0);
  MPI_Request q;
  MT_MPI_CHECK(MT_COMM_BLOCKING(
      &q, MPI_Ialltoallv(x.send, sc, sd, type, x.recv, rc, rd, type, g->comm, &q),
      MPI_Alltoallv(x.send, sc, sd, type, x.recv, rc, rd, type, g->comm)));
  mt_comm_unstage(&x, recv, rt * es);
  free(sc);
  mt_comm_count(g, t0, bytes);
  mt_flight_end(fl);
}
