/* NCCL for device buffers: the direct backend of collectives.c.
 *
 * Communicators: one per group of the mesh (tp, cp, dp, pp) with more than
 * one rank and a distinct GPU per rank, each from the group's MPI
 * communicator (rank 0's unique id broadcast over it); and, for the
 * pipeline, one two-rank communicator per ring neighbour, direction and
 * point-to-point tag. NCCL pairs sends with receives by order on a
 * communicator, and runs a communicator's operations one after the other;
 * with a communicator (and a stream) per (sender, receiver, tag) a pending
 * send never holds up an unrelated receive, and messages pair up as MPI's
 * tags pair them. All communicators are created inside one NCCL group, so
 * no rank waits on a communicator its peers create later.
 *
 * Streams and ordering: every group (and every point-to-point channel) has
 * its own stream. A call makes that stream wait for the compute stream's
 * work so far (an event), queues the NCCL operation and records a "done"
 * event; a wait makes the compute stream wait for that event (and, with
 * host_wait, blocks the host until it has passed, after first letting the
 * queued compute finish, so the group timers count communication only).
 *
 * Layouts NCCL has no call for are built with device copies into
 * stream-ordered workspace (cudaMallocAsync, kept in the pool between
 * calls): parts of unequal size padded to the largest (the registry's dp
 * buckets differ by at most one element), and the (outer, size, inner)
 * layout of sequence parallelism permuted to rank-major and back. */
#include "comm/comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CU(call)                                                                  \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) mt_die("%s failed: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

#define NC(call)                                                                  \
  do {                                                                            \
    ncclResult_t r_ = (call);                                                     \
    if (r_ != ncclSuccess) mt_die("%s failed: %s (%s)", #call, ncclGetErrorString(r_), \
                                  ncclGetLastError(NULL));                        \
  } while (0)

enum { P2P_TAGS = 3, MAX_PEERS = 2, ID_LEN = 48 };
static const int g_tags[P2P_TAGS] = {MT_TAG_PP_ACT, MT_TAG_PP_GRAD, MT_TAG_PP_TIED};

typedef struct {
  ncclComm_t comm;
  cudaStream_t stream;
} channel;

typedef struct {
  channel coll;                          /* the group's collectives (comm NULL: none) */
  int n_peers;
  int peer[MAX_PEERS];                   /* ring neighbours with point-to-point channels */
  channel send[MAX_PEERS][P2P_TAGS];     /* this rank -> peer */
  channel recv[MAX_PEERS][P2P_TAGS];     /* peer -> this rank */
} group_state;

typedef struct handle {
  cudaEvent_t done;
  struct handle *next; /* free list */
} handle;

static struct {
  int up, host_wait;
  cudaStream_t compute;
  cudaEvent_t ready; /* recorded on the compute stream before each call */
  handle *free_handles;
  size_t ws_cur, ws_peak;
} g_nc;

int mt_comm_nccl_built(void) { return 1; }
size_t mt_comm_nccl_workspace_peak(void) { return g_nc.ws_peak; }

/* ------------------------------------------------------------------ */
/* ordering                                                            */

/* s waits for the compute queued so far */
static void after_compute(cudaStream_t s) {
  CU(cudaEventRecord(g_nc.ready, g_nc.compute));
  CU(cudaStreamWaitEvent(s, g_nc.ready, 0));
}

static handle *finish_on(cudaStream_t s) {
  handle *h = g_nc.free_handles;
  if (h) {
    g_nc.free_handles = h->next;
  } else {
    h = mt_calloc(1, sizeof *h);
    CU(cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming));
  }
  CU(cudaEventRecord(h->done, s));
  return h;
}

static void release(handle *h) {
  CU(cudaStreamWaitEvent(g_nc.compute, h->done, 0));
  h->next = g_nc.free_handles;
  g_nc.free_handles = h;
}

static int nc_done(void *hv) {
  handle *h = hv;
  cudaError_t e = cudaEventQuery(h->done);
  if (e == cudaErrorNotReady) return 0;
  CU(e);
  release(h);
  return 1;
}

static void nc_wait(void *hv) {
  handle *h = hv;
  if (g_nc.host_wait) CU(cudaEventSynchronize(h->done));
  release(h);
}

static void nc_quiesce(void) {
  if (g_nc.host_wait) CU(cudaStreamSynchronize(g_nc.compute));
}

/* stream-ordered device workspace of n floats on s */
static float *ws_get(size_t n, cudaStream_t s) {
  void *p = NULL;
  CU(cudaMallocAsync(&p, (n ? n : 1) * sizeof(float), s));
  g_nc.ws_cur += n * sizeof(float);
  if (g_nc.ws_cur > g_nc.ws_peak) g_nc.ws_peak = g_nc.ws_cur;
  return p;
}

static void ws_put(float *p, size_t n, cudaStream_t s) {
  CU(cudaFreeAsync(p, s));
  g_nc.ws_cur -= n * sizeof(float);
}

static group_state *state(const mt_group *g) { return g->direct_state; }

/* ------------------------------------------------------------------ */
/* collectives                                                         */

static void *nc_allreduce(mt_group *g, void *buf, size_t n, mt_dtype t, mt_redop op) {
  channel *c = &state(g)->coll;
  after_compute(c->stream);
  NC(ncclAllReduce(buf, buf, n, t == MT_DT_F64 ? ncclDouble : ncclFloat,
                   op == MT_RED_MAX ? ncclMax : ncclSum, c->comm, c->stream));
  return finish_on(c->stream);
}

/* device-to-device 2D copy on the stream ctx (floats) */
static void copy2d(void *ctx, float *dst, size_t dpitch, const float *src, size_t spitch,
                   size_t width, size_t rows) {
  CU(cudaMemcpy2DAsync(dst, dpitch * sizeof(float), src, spitch * sizeof(float),
                       width * sizeof(float), rows, cudaMemcpyDeviceToDevice,
                       (cudaStream_t)ctx));
}

static void *nc_reduce_scatter(mt_group *g, const float *send, float *recv, const int *counts) {
  channel *c = &state(g)->coll;
  int n = g->size;
  after_compute(c->stream);
  size_t eq = mt_parts_equal(counts, NULL, n);
  if (eq) {
    NC(ncclReduceScatter(send, recv, eq, ncclFloat, ncclSum, c->comm, c->stream));
    return finish_on(c->stream);
  }
  /* unequal parts: padded to the largest, zeros in the padding */
  size_t pitch = mt_parts_largest(counts, n);
  int *displs = mt_malloc((size_t)n * sizeof(int));
  for (int q = 0, off = 0; q < n; q++) displs[q] = off, off += counts[q];
  float *ws = ws_get((size_t)n * pitch + pitch, c->stream);
  CU(cudaMemsetAsync(ws, 0, (size_t)n * pitch * sizeof(float), c->stream));
  mt_copy_parts((float *)send, ws, pitch, counts, displs, n, 1, copy2d, c->stream);
  NC(ncclReduceScatter(ws, ws + (size_t)n * pitch, pitch, ncclFloat, ncclSum, c->comm,
                       c->stream));
  if (counts[g->rank])
    CU(cudaMemcpyAsync(recv, ws + (size_t)n * pitch, (size_t)counts[g->rank] * sizeof(float),
                       cudaMemcpyDeviceToDevice, c->stream));
  ws_put(ws, (size_t)n * pitch + pitch, c->stream);
  free(displs);
  return finish_on(c->stream);
}

static void *nc_allgatherv(mt_group *g, const float *send, float *recv, const int *counts,
                           const int *displs) {
  channel *c = &state(g)->coll;
  int n = g->size, r = g->rank;
  after_compute(c->stream);
  size_t eq = mt_parts_equal(counts, displs, n);
  if (eq) {
    /* in place: this rank's part already sits at r * eq */
    NC(ncclAllGather(send ? send : recv + (size_t)r * eq, recv, eq, ncclFloat, c->comm,
                     c->stream));
    return finish_on(c->stream);
  }
  size_t pitch = mt_parts_largest(counts, n);
  float *ws = ws_get((size_t)n * pitch, c->stream);
  const float *mine = send ? send : recv + displs[r];
  if (counts[r])
    CU(cudaMemcpyAsync(ws + (size_t)r * pitch, mine, (size_t)counts[r] * sizeof(float),
                       cudaMemcpyDeviceToDevice, c->stream));
  NC(ncclAllGather(ws + (size_t)r * pitch, ws, pitch, ncclFloat, c->comm, c->stream));
  mt_copy_parts(recv, ws, pitch, counts, displs, n, 0, copy2d, c->stream);
  ws_put(ws, (size_t)n * pitch, c->stream);
  return finish_on(c->stream);
}

static void *nc_allgather_dim(mt_group *g, const float *send, float *recv, size_t outer,
                              size_t inner) {
  channel *c = &state(g)->coll;
  size_t n = outer * inner;
  after_compute(c->stream);
  if (outer == 1) {
    NC(ncclAllGather(send, recv, n, ncclFloat, c->comm, c->stream));
    return finish_on(c->stream);
  }
  float *ws = ws_get((size_t)g->size * n, c->stream);
  NC(ncclAllGather(send, ws, n, ncclFloat, c->comm, c->stream));
  mt_permute_dim(recv, ws, outer, inner, g->size, 0, copy2d, c->stream);
  ws_put(ws, (size_t)g->size * n, c->stream);
  return finish_on(c->stream);
}

static void *nc_reduce_scatter_dim(mt_group *g, const float *send, float *recv, size_t outer,
                                   size_t inner) {
  channel *c = &state(g)->coll;
  size_t n = outer * inner;
  after_compute(c->stream);
  if (outer == 1) {
    NC(ncclReduceScatter(send, recv, n, ncclFloat, ncclSum, c->comm, c->stream));
    return finish_on(c->stream);
  }
  float *ws = ws_get((size_t)g->size * n, c->stream);
  mt_permute_dim((float *)send, ws, outer, inner, g->size, 1, copy2d, c->stream);
  NC(ncclReduceScatter(ws, recv, n, ncclFloat, ncclSum, c->comm, c->stream));
  ws_put(ws, (size_t)g->size * n, c->stream);
  return finish_on(c->stream);
}

/* ------------------------------------------------------------------ */
/* point-to-point                                                      */

static int tag_index(int tag) {
  for (int i = 0; i < P2P_TAGS; i++)
    if (g_tags[i] == tag) return i;
  return -1;
}

static int peer_index(const group_state *st, int peer) {
  for (int i = 0; i < st->n_peers; i++)
    if (st->peer[i] == peer) return i;
  return -1;
}

static int nc_p2p_ok(const mt_group *g, int peer, int tag) {
  const group_state *st = state(g);
  return st && tag_index(tag) >= 0 && peer_index(st, peer) >= 0;
}

static void *nc_send(mt_group *g, const float *buf, size_t n, int peer, int tag) {
  group_state *st = state(g);
  channel *c = &st->send[peer_index(st, peer)][tag_index(tag)];
  after_compute(c->stream);
  NC(ncclSend(buf, n, ncclFloat, 1, c->comm, c->stream)); /* the receiver is rank 1 */
  return finish_on(c->stream);
}

static void *nc_recv(mt_group *g, float *buf, size_t n, int peer, int tag) {
  group_state *st = state(g);
  channel *c = &st->recv[peer_index(st, peer)][tag_index(tag)];
  after_compute(c->stream); /* the buffer may still be read by queued compute */
  NC(ncclRecv(buf, n, ncclFloat, 0, c->comm, c->stream)); /* the sender is rank 0 */
  return finish_on(c->stream);
}

static const mt_comm_direct g_nccl_direct = {
    "nccl",     nc_allreduce, nc_reduce_scatter, nc_allgatherv, nc_allgather_dim,
    nc_reduce_scatter_dim, nc_send, nc_recv, nc_p2p_ok, nc_done, nc_wait, nc_quiesce};

/* ------------------------------------------------------------------ */
/* set-up                                                              */

static void channel_free(channel *c) {
  if (c->comm) ncclCommDestroy(c->comm);
  if (c->stream) cudaStreamDestroy(c->stream);
  c->comm = NULL;
  c->stream = NULL;
}

static void group_free(mt_group *g) {
  group_state *st = g->direct_state;
  if (!st) return;
  channel_free(&st->coll);
  for (int i = 0; i < st->n_peers; i++)
    for (int t = 0; t < P2P_TAGS; t++) {
      channel_free(&st->send[i][t]);
      channel_free(&st->recv[i][t]);
    }
  free(st);
  g->direct_state = NULL;
  g->direct = 0;
}

void mt_comm_nccl_destroy(mt_mesh *m) {
  mt_group *gs[] = {&m->tp_g, &m->cp_g, &m->dp_g, &m->pp_g};
  if (!g_nc.up) return;
  cudaStreamSynchronize(g_nc.compute);
  for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) {
    if (gs[i]->direct_state) {
      group_state *st = gs[i]->direct_state;
      if (st->coll.stream) cudaStreamSynchronize(st->coll.stream);
    }
    group_free(gs[i]);
  }
  mt_comm_set_direct(NULL);
  while (g_nc.free_handles) {
    handle *h = g_nc.free_handles;
    g_nc.free_handles = h->next;
    cudaEventDestroy(h->done);
    free(h);
  }
  cudaEventDestroy(g_nc.ready);
  memset(&g_nc, 0, sizeof g_nc);
}

static void new_stream(channel *c) {
  CU(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
}

int mt_comm_nccl_init(mt_mesh *m, const mt_comm_nccl_opts *o, mt_err *e) {
  mt_group *gs[] = {&m->tp_g, &m->cp_g, &m->dp_g, &m->pp_g};
  const int ngs = (int)(sizeof gs / sizeof gs[0]);
  g_nc.compute = (cudaStream_t)o->compute_stream;
  g_nc.host_wait = o->host_wait;
  CU(cudaEventCreateWithFlags(&g_nc.ready, cudaEventDisableTiming));
  g_nc.up = 1;
  /* freed workspace stays in the pool for the next call */
  {
    int dev = 0;
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    CU(cudaGetDevice(&dev));
    if (cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess)
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    cudaGetLastError();
  }
  char my_id[ID_LEN];
  memset(my_id, 0, sizeof my_id);
  snprintf(my_id, sizeof my_id, "%s", o->device_id ? o->device_id : "");

  /* which groups get a communicator, and their unique ids */
  ncclUniqueId coll_id[4];
  int want[4] = {0, 0, 0, 0};
  for (int i = 0; i < ngs; i++) {
    mt_group *g = gs[i];
    if (g->size < 2) continue;
    char *ids = mt_malloc((size_t)g->size * ID_LEN);
    MT_MPI_CHECK(MPI_Allgather(my_id, ID_LEN, MPI_CHAR, ids, ID_LEN, MPI_CHAR, g->comm));
    want[i] = mt_comm_ids_distinct(ids, g->size, ID_LEN);
    g->direct_state = mt_calloc(1, sizeof(group_state));
    group_state *st = g->direct_state;
    if (want[i]) {
      if (g->rank == 0) NC(ncclGetUniqueId(&coll_id[i]));
      MT_MPI_CHECK(MPI_Bcast(&coll_id[i], sizeof coll_id[i], MPI_BYTE, 0, g->comm));
    }
    /* the pipeline's ring neighbours, each with its own GPU */
    if (g == &m->pp_g) {
      int next = (g->rank + 1) % g->size, prev = (g->rank + g->size - 1) % g->size;
      int cand[2] = {next, prev};
      for (int k = 0; k < 2; k++) {
        if (k == 1 && prev == next) break;
        if (strncmp(ids + (size_t)cand[k] * ID_LEN, my_id, ID_LEN) == 0) continue;
        st->peer[st->n_peers++] = cand[k];
      }
    }
    free(ids);
  }
  /* point-to-point ids: this rank makes those of its sending channels and
   * receives those of its receiving ones from each neighbour */
  group_state *pst = m->pp_g.direct_state;
  ncclUniqueId send_id[MAX_PEERS][P2P_TAGS], recv_id[MAX_PEERS][P2P_TAGS];
  MPI_Request reqs[2 * MAX_PEERS];
  int n_req = 0;
  for (int k = 0; pst && k < pst->n_peers; k++) { /* all posted at once: no ring of waits */
    for (int t = 0; t < P2P_TAGS; t++) NC(ncclGetUniqueId(&send_id[k][t]));
    MT_MPI_CHECK(MPI_Irecv(recv_id[k], (int)sizeof recv_id[k], MPI_BYTE, pst->peer[k], 77,
                           m->pp_g.comm, &reqs[n_req++]));
    MT_MPI_CHECK(MPI_Isend(send_id[k], (int)sizeof send_id[k], MPI_BYTE, pst->peer[k], 77,
                           m->pp_g.comm, &reqs[n_req++]));
  }
  MT_MPI_CHECK(MPI_Waitall(n_req, reqs, MPI_STATUSES_IGNORE));
  /* every communicator in one group call: no ordering between them */
  NC(ncclGroupStart());
  for (int i = 0; i < ngs; i++) {
    group_state *st = gs[i]->direct_state;
    if (!st || !want[i]) continue;
    NC(ncclCommInitRank(&st->coll.comm, gs[i]->size, coll_id[i], gs[i]->rank));
  }
  for (int k = 0; pst && k < pst->n_peers; k++)
    for (int t = 0; t < P2P_TAGS; t++) {
      NC(ncclCommInitRank(&pst->send[k][t].comm, 2, send_id[k][t], 0));
      NC(ncclCommInitRank(&pst->recv[k][t].comm, 2, recv_id[k][t], 1));
    }
  ncclResult_t rc = ncclGroupEnd();
  if (rc != ncclSuccess) {
    mt_err_set(e, "NCCL: creating the communicators failed: %s (%s)", ncclGetErrorString(rc),
               ncclGetLastError(NULL));
    return -1;
  }
  for (int i = 0; i < ngs; i++) {
    mt_group *g = gs[i];
    group_state *st = g->direct_state;
    if (!st) continue;
    if (want[i]) new_stream(&st->coll);
    for (int k = 0; k < st->n_peers; k++)
      for (int t = 0; t < P2P_TAGS; t++) {
        new_stream(&st->send[k][t]);
        new_stream(&st->recv[k][t]);
      }
    /* collectives go direct with a group communicator; point-to-point
     * wherever p2p_ok finds a channel */
    g->direct = want[i];
  }
  mt_comm_set_direct(&g_nccl_direct);
  return 0;
}
