/* Non-blocking collectives (the dp engine's bucketed gradient reductions,
 * ZeRO's parameter gathers) and the end of every request: mt_wait and
 * mt_progress. A device buffer's staging block lives as long as its
 * request; what the call received goes back to the device when the
 * request finishes. */
#include "comm/comm_internal.h"

#include <stdlib.h>
#include <string.h>

void mt_comm_req_init(mt_request *r, mt_group *g) {
  memset(r, 0, sizeof *r);
  r->g = g;
}

void mt_comm_req_flight(mt_request *r, const char *op, int peer, double bytes) {
  const int h = MT_FLIGHT_BEGIN(r->g, op, peer, peer < 0 ? MT_FLIGHT_NEW : 0, bytes);
  r->fl_op = h < 0 ? NULL : op;
  r->fl_peer = peer;
  r->fl_call = mt_flight_call(h);
  mt_flight_end(h);
}

void mt_comm_req_stage(mt_request *r, const mt_comm_staged *x, void *recv, size_t recv_bytes) {
  if (!x->block) return;
  r->host = x->block;
  r->back = x->recv;
  r->dev_dst = recv;
  r->bytes = recv_bytes;
}

static void req_finish(mt_request *r) {
  if (r->host) {
    if (r->dev_dst) mt_comm_to_device(r->dev_dst, r->back, r->bytes);
    free(r->host);
    r->host = NULL;
  }
  r->active = 0;
}

/* a non-blocking MPI call on staging x started: r finishes it */
static void started(mt_request *r, const mt_comm_staged *x, void *recv, size_t recv_bytes,
                    double t0, double bytes) {
  r->active = 1;
  mt_comm_req_stage(r, x, recv, recv_bytes);
  mt_comm_count(r->g, t0, bytes);
}

void mt_iallreduce(mt_group *g, void *buf, size_t n, mt_dtype t, mt_redop op, mt_loc loc,
                   mt_request *r) {
  mt_comm_req_init(r, g);
  const size_t nb = n * mt_dtype_bytes(t);
  const double bytes = mt_bytes_allreduce(nb, g->size);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_REDUCE, .bytes = bytes, .loc = loc, .req = r) ||
      g->size == 1)
    return;
  mt_comm_req_flight(r, "iallreduce", -1, bytes);
  if (mt_comm_goes_direct(g, loc)) {
    MT_DIRECT_START(g, r, bytes, d_->allreduce(g, buf, n, t, op));
    return;
  }
  const MPI_Op mop = mt_comm_mpi_op(t, op);
  double t0 = mt_now();
  mt_comm_staged x = mt_comm_stage(g, loc, buf, nb, buf, nb, 0);
  MT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, x.recv, mt_comm_count_of(n), mt_comm_mpi_type(t), mop,
                              g->comm, &r->req));
  started(r, &x, buf, nb, t0, bytes);
}

void mt_ireduce_scatter(mt_group *g, const void *send, void *recv, const int *counts,
                        mt_dtype t, mt_loc loc, mt_request *r) {
  mt_comm_req_init(r, g);
  const size_t es = mt_dtype_bytes(t), total = mt_comm_sum_counts(counts, g->size);
  const size_t mine = (size_t)counts[g->rank];
  const double bytes = mt_bytes_reduce_scatter(total * es, g->size);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_SCATTER, .bytes = bytes, .loc = loc, .req = r)) return;
  if (g->size == 1) {
    mt_comm_local_copy(recv, send, mine * es, loc);
    return;
  }
  mt_comm_req_flight(r, "ireduce_scatter", -1, bytes);
  if (mt_comm_goes_direct(g, loc)) {
    MT_DIRECT_START(g, r, bytes, d_->reduce_scatter(g, send, recv, counts, t));
    return;
  }
  const MPI_Op mop = mt_comm_mpi_op(t, MT_RED_SUM);
  double t0 = mt_now();
  /* the send side must outlive the call: staged with recv in one block */
  mt_comm_staged x = mt_comm_stage(g, loc, send, total * es, recv, mine * es, 0);
  MT_MPI_CHECK(MPI_Ireduce_scatter(x.send, x.recv, counts, mt_comm_mpi_type(t), mop, g->comm,
                                   &r->req));
  started(r, &x, recv, mine * es, t0, bytes);
}

void mt_iallgatherv(mt_group *g, const void *send, void *recv, const int *counts,
                    const int *displs, mt_dtype t, mt_loc loc, mt_request *r) {
  mt_comm_req_init(r, g);
  const size_t es = mt_dtype_bytes(t), total = mt_comm_sum_counts(counts, g->size);
  const size_t mine = (size_t)counts[g->rank];
  const double bytes = mt_bytes_allgather(total * es, g->size);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc, .req = r)) return;
  if (g->size == 1) {
    if (send) mt_comm_local_copy((char *)recv + (size_t)displs[0] * es, send, mine * es, loc);
    return;
  }
  mt_comm_req_flight(r, "iallgatherv", -1, bytes);
  if (mt_comm_goes_direct(g, loc)) {
    MT_DIRECT_START(g, r, bytes, d_->allgatherv(g, send, recv, counts, displs, t));
    return;
  }
  const MPI_Datatype type = mt_comm_mpi_type(t);
  double t0 = mt_now();
  /* in place (send NULL): the whole buffer is read and written */
  mt_comm_staged x = send ? mt_comm_stage(g, loc, send, mine * es, recv, total * es, 0)
                          : mt_comm_stage(g, loc, recv, total * es, recv, total * es, 0);
  MT_MPI_CHECK(MPI_Iallgatherv(send ? x.send : MPI_IN_PLACE, send ? counts[g->rank] : 0,
                               send ? type : MPI_DATATYPE_NULL, x.recv, counts, displs, type,
                               g->comm, &r->req));
  started(r, &x, recv, total * es, t0, bytes);
}

/* ------------------------------------------------------------------ */
/* the end of a request                                                */

static void wait_active(mt_request *r) {
  if (r->vbuf) {
    mt_comm_virtual_wait(r);
    return;
  }
  if (r->direct) {
    const mt_comm_direct *d = mt_comm_direct_backend();
    d->quiesce();
    d->wait(r->direct);
    r->direct = NULL;
    r->active = 0;
    return;
  }
  double t0 = mt_now();
  MT_MPI_CHECK(mt_comm_wait_request(&r->req, MPI_STATUS_IGNORE));
  r->g->seconds += mt_now() - t0;
  req_finish(r);
}

/* the flight recorder's name of the wait for a call (static strings) */
static const char *wait_name(const char *op) {
  static const char *const names[][2] = {{"iallreduce", "wait iallreduce"},
                                         {"ireduce_scatter", "wait ireduce_scatter"},
                                         {"iallgatherv", "wait iallgatherv"},
                                         {"send", "wait send"},
                                         {"recv", "wait recv"}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(op, names[i][0]) == 0) return names[i][1];
  return "wait";
}

void mt_wait(mt_request *r) {
  if (r->rec_id) mt_comm_rec_wait(r);
  if (!r->active) return;
  const int fl =
      r->fl_op ? MT_FLIGHT_BEGIN(r->g, wait_name(r->fl_op), r->fl_peer, r->fl_call, 0.0) : -1;
  wait_active(r);
  mt_flight_end(fl);
}

void mt_progress(mt_request *r) {
  if (!r->active) return;
  if (r->vbuf) {
    mt_comm_virtual_progress(r);
    return;
  }
  if (r->direct) {
    if (mt_comm_direct_backend()->done(r->direct)) {
      r->direct = NULL;
      r->active = 0;
    }
    return;
  }
  int done = 0;
  MT_MPI_CHECK(MPI_Test(&r->req, &done, MPI_STATUS_IGNORE));
  if (done) req_finish(r);
}
