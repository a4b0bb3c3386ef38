/* Point-to-point between ranks of a group: the pipeline's activations and
 * gradients (and the tied gradients between its first and last stage),
 * the context-parallel ring's keys and values. Device buffers go to the
 * direct backend where it has a channel for the (peer, tag), and are
 * staged through the host otherwise. Bytes count on the send side. */
#include "comm/comm_internal.h"

static int direct_p2p(const mt_group *g, int peer, int tag, mt_loc loc) {
  return loc == MT_LOC_DEVICE && mt_group_p2p_direct(g, peer, tag);
}

void mt_isend(mt_group *g, const void *buf, size_t n, mt_dtype t, int peer, int tag, mt_loc loc,
              mt_request *r) {
  mt_comm_req_init(r, g);
  const size_t nb = n * mt_dtype_bytes(t);
  const double bytes = (double)nb;
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_SEND, .bytes = bytes, .loc = loc, .peer = peer,
                       .tag = tag, .req = r))
    return;
  mt_comm_req_flight(r, "send", peer, bytes);
  if (direct_p2p(g, peer, tag, loc)) {
    MT_DIRECT_START(g, r, bytes, d_->send(g, buf, n, t, peer, tag));
    return;
  }
  double t0 = mt_now();
  mt_comm_staged x = mt_comm_stage(g, loc, buf, nb, NULL, 0, 0);
  MT_MPI_CHECK(MPI_Isend(x.send, mt_comm_count_of(n), mt_comm_mpi_type(t), peer, tag, g->comm,
                         &r->req));
  mt_comm_req_stage(r, &x, NULL, 0); /* freed at the wait, nothing goes back */
  r->active = 1;
  mt_comm_count_p2p(g, t0, bytes);
}

void mt_irecv(mt_group *g, void *buf, size_t n, mt_dtype t, int peer, int tag, mt_loc loc,
              mt_request *r) {
  mt_comm_req_init(r, g);
  const size_t nb = n * mt_dtype_bytes(t);
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_RECV, .bytes = 0.0, .loc = loc, .peer = peer,
                       .tag = tag, .req = r))
    return;
  mt_comm_req_flight(r, "recv", peer, 0.0);
  if (direct_p2p(g, peer, tag, loc)) {
    MT_DIRECT_START(g, r, 0.0, d_->recv(g, buf, n, t, peer, tag));
    return;
  }
  double t0 = mt_now();
  mt_comm_staged x = mt_comm_stage(g, loc, NULL, 0, buf, nb, 0);
  MT_MPI_CHECK(MPI_Irecv(x.recv, mt_comm_count_of(n), mt_comm_mpi_type(t), peer, tag, g->comm,
                         &r->req));
  mt_comm_req_stage(r, &x, buf, nb);
  r->active = 1;
  mt_comm_count_p2p(g, t0, 0.0);
}

void mt_sendrecv(mt_group *g, const void *send, void *recv, size_t n, mt_dtype t, int peer,
                 int tag, mt_loc loc) {
  const size_t nb = n * mt_dtype_bytes(t);
  const double bytes = (double)nb;
  if (MT_OTHER_BACKEND(g, .kind = MT_COLL_SENDRECV, .bytes = bytes, .loc = loc, .peer = peer,
                       .tag = tag))
    return;
  const int fl = MT_FLIGHT_BEGIN(g, "sendrecv", peer, 0, bytes);
  if (direct_p2p(g, peer, tag, loc)) {
    /* both directions issued together (the backend pairs them in one group) */
    const mt_comm_direct *d = mt_comm_direct_backend();
    d->quiesce();
    void *hr = d->recv(g, recv, n, t, peer, tag);
    void *hs = d->send(g, send, n, t, peer, tag);
    d->wait(hs);
    d->wait(hr);
    mt_comm_count_direct(g, bytes, 2); /* two device calls */
    mt_flight_end(fl);
    return;
  }
  const MPI_Datatype type = mt_comm_mpi_type(t);
  const int cnt = mt_comm_count_of(n);
  double t0 = mt_now();
  mt_comm_staged x = mt_comm_stage(g, loc, send, nb, recv, nb, 0);
  MPI_Request q[2];
  MT_MPI_CHECK(MPI_Irecv(x.recv, cnt, type, peer, tag, g->comm, &q[0]));
  MT_MPI_CHECK(MPI_Isend(x.send, cnt, type, peer, tag, g->comm, &q[1]));
  MT_MPI_CHECK(mt_comm_wait_request(&q[0], MPI_STATUS_IGNORE));
  MT_MPI_CHECK(mt_comm_wait_request(&q[1], MPI_STATUS_IGNORE));
  mt_comm_unstage(&x, recv, nb);
  mt_comm_count_p2p(g, t0, bytes);
  mt_flight_end(fl);
}
