/* NCCL for device buffers: comm's direct backend (path.c).
 *
 * Communicators. Every group of the mesh's table (mesh.c: tp, cp, dp, pp,
 * dp_cp, and after the fold etp, ep, edp) with more than one rank and a
 * distinct GPU per rank gets one, made from the group's MPI communicator
 * (rank 0's unique id broadcast over it). Groups with the same ranks in the
 * same order (dp and dp_cp at cp = 1, edp and dp_cp at etp = tp, ...) share
 * one communicator and its stream. Point-to-point (the pipeline's and the
 * context-parallel ring's) has a two-rank communicator per neighbour, tag
 * and direction, each with its stream: NCCL pairs sends with receives by
 * order on a communicator, and messages of different tags between the same
 * ranks may be received in another order than sent (an interleaved
 * schedule on two stages), so each tag keeps its own order, as MPI's tags
 * do; and a send waiting for its receiver never holds up a receive from
 * that rank, as it would on a stream or communicator both share. All
 * communicators are created inside one NCCL group: no rank waits on a
 * communicator its peers create later. Any failure while setting up frees
 * (aborts) what was made.
 *
 * Streams and ordering. A call makes its communicator's stream wait for the
 * compute stream's work so far (an event), queues the NCCL operation and
 * records a "done" event; a wait makes the compute stream wait for that
 * event, and with host_wait also blocks the host until it has passed. The
 * device time of every call comes from an event pair around it, added to
 * its group's seconds once the pair has completed.
 *
 * Point-to-point cannot deadlock by the order it is issued in: every
 * (neighbour, tag, direction) is a queue of its own, matched in order by
 * the one queue it pairs with. Calls are also held back and issued together,
 * as one ncclGroupStart/End, when the host next needs one of them (a wait
 * or a poll) or is about to block in comm: a pipeline stage that sends an
 * activation and then waits for a gradient issues {send, receive} as one
 * group, as its neighbour issues {send the gradient, receive the next
 * activation}, so the two pair up even where the GPU can hold few NCCL
 * kernels at once (tests/gpu/emu runs layouts with a limited number).
 *
 * Layouts NCCL has no call for are built with device copies into
 * stream-ordered workspace (cudaMallocAsync, kept in the pool between
 * calls): parts of unequal size padded to the largest (the registry's dp
 * buckets differ by at most one element), the (outer, size, inner) layouts
 * of sequence parallelism and Ulysses made rank-major and back, and the
 * all-to-alls as grouped sends and receives. Collectives take comm's element
 * type (fp32, fp64, bf16, int32: ncclFloat, ncclDouble, ncclBfloat16,
 * ncclInt32), so workspace and offsets are counted in bytes; point-to-point
 * too. */
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

/* set-up: a failure becomes e's message (the caller tears down) */
#define CU_TRY(e, call)                                                           \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      mt_err_runtime((e), "%s failed: %s", #call, cudaGetErrorString(e_));        \
      return -1;                                                                  \
    }                                                                             \
  } while (0)
#define NC_TRY(e, call)                                                           \
  do {                                                                            \
    ncclResult_t r_ = (call);                                                     \
    if (r_ != ncclSuccess) {                                                      \
      mt_err_runtime((e), "NCCL: %s failed: %s (%s)", #call, ncclGetErrorString(r_), \
                     ncclGetLastError(NULL));                                     \
      return -1;                                                                  \
    }                                                                             \
  } while (0)

enum { ID_LEN = 48, MAX_LINKS = 8 };

typedef struct channel {
  ncclComm_t comm;
  cudaStream_t stream;
  struct channel *next; /* every channel, once (teardown) */
} channel;

typedef struct {
  int peer, tag;
  channel *out, *in; /* this rank -> peer, peer -> this rank: the sender is NCCL rank 0 */
} link;

typedef struct {
  mt_group *g;
  channel *coll;               /* the group's collectives (NULL: staged) */
  int n_links;
  link links[MAX_LINKS];
  int n_pending;               /* held back calls, in order */
  struct pending *pending;
  int cap_pending;
  int members_n;               /* the group's world ranks (sharing a channel) */
  int *members;
} group_state;

typedef struct handle {
  cudaEvent_t done;
  int held;                    /* a held-back point-to-point call not issued yet */
  struct handle *next;         /* free list */
} handle;


/* an event pair around a call whose device time is not yet added */
typedef struct timing {
  cudaEvent_t start, end;
  mt_group *g;
  struct timing *next;
} timing;

typedef struct pending {
  int send, link;
  void *buf;
  size_t n;
  mt_dtype dt;
  handle *h;
  struct timing *t;
} pending;

static struct {
  int up, host_wait;
  cudaStream_t compute;
  cudaEvent_t ready; /* recorded on the compute stream before each call */
  handle *free_handles;
  timing *running, *free_timings;
  channel *channels;
  group_state *states[16];
  int n_states;
  size_t ws_cur, ws_peak;
} g_nc;

int mt_comm_nccl_built(void) { return 1; }
size_t mt_comm_nccl_workspace_peak(void) { return g_nc.ws_peak; }

/* ------------------------------------------------------------------ */
/* device time                                                         */

static timing *timing_begin(mt_group *g, cudaStream_t s) {
  timing *t = g_nc.free_timings;
  if (t) {
    g_nc.free_timings = t->next;
  } else {
    t = mt_calloc(1, sizeof *t);
    CU(cudaEventCreate(&t->start));
    CU(cudaEventCreate(&t->end));
  }
  t->g = g;
  CU(cudaEventRecord(t->start, s));
  return t;
}

static void timing_end(timing *t, cudaStream_t s) {
  CU(cudaEventRecord(t->end, s));
  t->next = g_nc.running;
  g_nc.running = t;
}

/* every completed pair's time to its group */
static void harvest(void) {
  timing **p = &g_nc.running;
  while (*p) {
    timing *t = *p;
    cudaError_t e = cudaEventQuery(t->end);
    if (e == cudaErrorNotReady) {
      p = &t->next;
      continue;
    }
    CU(e);
    float ms = 0.0f;
    CU(cudaEventElapsedTime(&ms, t->start, t->end));
    t->g->seconds += ms * 1e-3;
    *p = t->next;
    t->next = g_nc.free_timings;
    g_nc.free_timings = t;
  }
}

/* ------------------------------------------------------------------ */
/* ordering                                                            */

/* s waits for the compute queued so far */
static void after_compute(cudaStream_t s) {
  CU(cudaEventRecord(g_nc.ready, g_nc.compute));
  CU(cudaStreamWaitEvent(s, g_nc.ready, 0));
}

static handle *handle_new(void) {
  handle *h = g_nc.free_handles;
  if (h) {
    g_nc.free_handles = h->next;
  } else {
    h = mt_calloc(1, sizeof *h);
    CU(cudaEventCreateWithFlags(&h->done, cudaEventDisableTiming));
  }
  h->held = 0;
  return h;
}

static handle *finish_on(cudaStream_t s) {
  handle *h = handle_new();
  CU(cudaEventRecord(h->done, s));
  return h;
}

static void release(handle *h) {
  CU(cudaStreamWaitEvent(g_nc.compute, h->done, 0));
  h->next = g_nc.free_handles;
  g_nc.free_handles = h;
}

static group_state *state(const mt_group *g) { return g->direct_state; }

/* NCCL's element type for comm's (bf16 sums add in fp32 and round each
 * partial sum to bf16: the host bf16 sum's meaning) */
static ncclDataType_t nc_type(mt_dtype t) {
  switch (t) {
  case MT_DT_F32: return ncclFloat;
  case MT_DT_F64: return ncclDouble;
  case MT_DT_BF16: return ncclBfloat16;
  case MT_DT_I32: return ncclInt32;
  }
  mt_die("NCCL: element type %d unknown", (int)t);
}

/* The held-back point-to-point calls of every group, all as one NCCL group
 * call, each on its link's stream for its direction. */
/* the channel a pending send or receive goes over */
static channel *pending_channel(group_state *st, const pending *q) {
  link *l = &st->links[q->link];
  return q->send ? l->out : l->in;
}

static void nc_flush(void) {
  int any = 0;
  for (int i = 0; i < g_nc.n_states; i++) any |= g_nc.states[i]->n_pending > 0;
  if (!any) return;
  /* the streams wait for compute (a receive buffer may still be read by
   * it), and each call has its event pair */
  for (int i = 0; i < g_nc.n_states; i++) {
    group_state *st = g_nc.states[i];
    for (int k = 0; k < st->n_pending; k++) {
      pending *q = &st->pending[k];
      cudaStream_t s = pending_channel(st, q)->stream;
      after_compute(s);
      q->t = timing_begin(st->g, s);
    }
  }
  NC(ncclGroupStart());
  for (int i = 0; i < g_nc.n_states; i++) {
    group_state *st = g_nc.states[i];
    for (int k = 0; k < st->n_pending; k++) {
      pending *q = &st->pending[k];
      channel *c = pending_channel(st, q);
      if (q->send) NC(ncclSend(q->buf, q->n, nc_type(q->dt), 1, c->comm, c->stream));
      else NC(ncclRecv(q->buf, q->n, nc_type(q->dt), 0, c->comm, c->stream));
    }
  }
  NC(ncclGroupEnd());
  for (int i = 0; i < g_nc.n_states; i++) {
    group_state *st = g_nc.states[i];
    for (int k = 0; k < st->n_pending; k++) {
      pending *q = &st->pending[k];
      cudaStream_t s = pending_channel(st, q)->stream;
      timing_end(q->t, s);
      CU(cudaEventRecord(q->h->done, s));
      q->h->held = 0;
    }
    st->n_pending = 0;
  }
}

static int nc_done(void *hv) {
  handle *h = hv;
  harvest();
  if (h->held) nc_flush();
  cudaError_t e = cudaEventQuery(h->done);
  if (e == cudaErrorNotReady) return 0;
  CU(e);
  release(h);
  return 1;
}

static void nc_wait(void *hv) {
  handle *h = hv;
  /* what is held goes out before the host blocks (a peer may need it) */
  if (h->held || g_nc.host_wait) nc_flush();
  if (g_nc.host_wait) CU(cudaEventSynchronize(h->done));
  release(h);
  harvest();
}

static void nc_quiesce(void) {
  if (g_nc.host_wait) CU(cudaStreamSynchronize(g_nc.compute));
}

/* the host waits in MPI: the device may go on (an emulated one only now) */
static void nc_idle(void) {
  harvest();
  cudaError_t e = cudaStreamQuery(g_nc.compute);
  if (e != cudaErrorNotReady) CU(e);
}

/* stream-ordered device workspace of `bytes` on s */
static char *ws_get(size_t bytes, cudaStream_t s) {
  void *p = NULL;
  CU(cudaMallocAsync(&p, bytes ? bytes : 1, s));
  g_nc.ws_cur += bytes;
  if (g_nc.ws_cur > g_nc.ws_peak) g_nc.ws_peak = g_nc.ws_cur;
  return p;
}

static void ws_put(char *p, size_t bytes, cudaStream_t s) {
  CU(cudaFreeAsync(p, s));
  g_nc.ws_cur -= bytes;
}

/* a collective's channel, its stream made to wait for compute and its
 * timing begun */
static channel *coll_begin(mt_group *g, timing **t) {
  harvest();
  channel *c = state(g)->coll;
  after_compute(c->stream);
  *t = timing_begin(g, c->stream);
  return c;
}

static handle *coll_end(channel *c, timing *t) {
  timing_end(t, c->stream);
  return finish_on(c->stream);
}

/* ------------------------------------------------------------------ */
/* collectives                                                         */


static void *nc_allreduce(mt_group *g, void *buf, size_t n, mt_dtype dt, mt_redop op) {
  timing *t;
  channel *c = coll_begin(g, &t);
  NC(ncclAllReduce(buf, buf, n, nc_type(dt), op == MT_RED_MAX ? ncclMax : ncclSum, c->comm,
                   c->stream));
  return coll_end(c, t);
}

/* device-to-device 2D copy on the stream ctx (bytes) */
static void copy2d(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                   size_t width, size_t rows) {
  CU(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice,
                       (cudaStream_t)ctx));
}

/* device-to-device copy of `bytes` on s (none for 0) */
static void copy(void *dst, const void *src, size_t bytes, cudaStream_t s) {
  if (bytes) CU(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
}

static void *nc_reduce_scatter(mt_group *g, const void *send, void *recv, const int *counts,
                               mt_dtype dt) {
  timing *t;
  channel *c = coll_begin(g, &t);
  int n = g->size;
  size_t eq = mt_parts_equal(counts, NULL, n), es = mt_dtype_bytes(dt);
  if (eq) {
    NC(ncclReduceScatter(send, recv, eq, nc_type(dt), ncclSum, c->comm, c->stream));
    return coll_end(c, t);
  }
  /* unequal parts: padded to the largest, zeros in the padding; the sum of
   * this rank's padded part after them (bytes: n pitches and one) */
  size_t pitch = mt_parts_largest(counts, n), ws_bytes = ((size_t)n + 1) * pitch * es;
  int *displs = mt_malloc((size_t)n * sizeof(int));
  for (int q = 0, off = 0; q < n; q++) displs[q] = off, off += counts[q];
  char *ws = ws_get(ws_bytes, c->stream), *sum = ws + (size_t)n * pitch * es;
  CU(cudaMemsetAsync(ws, 0, (size_t)n * pitch * es, c->stream));
  mt_copy_parts((void *)send, ws, pitch, counts, displs, n, es, 1, copy2d, c->stream);
  NC(ncclReduceScatter(ws, sum, pitch, nc_type(dt), ncclSum, c->comm, c->stream));
  copy(recv, sum, (size_t)counts[g->rank] * es, c->stream);
  ws_put(ws, ws_bytes, c->stream);
  free(displs);
  return coll_end(c, t);
}

static void *nc_allgatherv(mt_group *g, const void *send, void *recv, const int *counts,
                           const int *displs, mt_dtype dt) {
  timing *t;
  channel *c = coll_begin(g, &t);
  int n = g->size, r = g->rank;
  size_t eq = mt_parts_equal(counts, displs, n), es = mt_dtype_bytes(dt);
  if (eq) {
    /* in place: this rank's part already sits at r * eq */
    NC(ncclAllGather(send ? send : (char *)recv + (size_t)r * eq * es, recv, eq, nc_type(dt),
                     c->comm, c->stream));
    return coll_end(c, t);
  }
  size_t pitch = mt_parts_largest(counts, n), ws_bytes = (size_t)n * pitch * es;
  char *ws = ws_get(ws_bytes, c->stream), *slot = ws + (size_t)r * pitch * es;
  const void *mine = send ? send : (char *)recv + (size_t)displs[r] * es;
  copy(slot, mine, (size_t)counts[r] * es, c->stream);
  NC(ncclAllGather(slot, ws, pitch, nc_type(dt), c->comm, c->stream));
  mt_copy_parts(recv, ws, pitch, counts, displs, n, es, 0, copy2d, c->stream);
  ws_put(ws, ws_bytes, c->stream);
  return coll_end(c, t);
}

static void *nc_allgather_dim(mt_group *g, const void *send, void *recv, size_t outer,
                              size_t inner, mt_dtype dt) {
  timing *t;
  channel *c = coll_begin(g, &t);
  size_t n = outer * inner, es = mt_dtype_bytes(dt);
  if (outer == 1) {
    NC(ncclAllGather(send, recv, n, nc_type(dt), c->comm, c->stream));
    return coll_end(c, t);
  }
  size_t ws_bytes = (size_t)g->size * n * es;
  char *ws = ws_get(ws_bytes, c->stream);
  NC(ncclAllGather(send, ws, n, nc_type(dt), c->comm, c->stream));
  mt_permute_dim(recv, ws, outer, inner, g->size, es, 0, copy2d, c->stream);
  ws_put(ws, ws_bytes, c->stream);
  return coll_end(c, t);
}

static void *nc_reduce_scatter_dim(mt_group *g, const void *send, void *recv, size_t outer,
                                   size_t inner, mt_dtype dt) {
  timing *t;
  channel *c = coll_begin(g, &t);
  size_t n = outer * inner, es = mt_dtype_bytes(dt);
  if (outer == 1) {
    NC(ncclReduceScatter(send, recv, n, nc_type(dt), ncclSum, c->comm, c->stream));
    return coll_end(c, t);
  }
  size_t ws_bytes = (size_t)g->size * n * es;
  char *ws = ws_get(ws_bytes, c->stream);
  mt_permute_dim((void *)send, ws, outer, inner, g->size, es, 1, copy2d, c->stream);
  NC(ncclReduceScatter(ws, recv, n, nc_type(dt), ncclSum, c->comm, c->stream));
  ws_put(ws, ws_bytes, c->stream);
  return coll_end(c, t);
}

/* parts laid end to end (counts and offsets in elements of es bytes): send
 * part q to rank q, receive part q from it (own part copied), as one NCCL
 * group on the group's channel */
static void exchange(mt_group *g, channel *c, const void *send, const size_t *scount,
                     const size_t *soff, void *recv, const size_t *rcount, const size_t *roff,
                     mt_dtype dt) {
  const int n = g->size, me = g->rank;
  const size_t es = mt_dtype_bytes(dt);
  const char *s = send;
  char *r = recv;
  if (scount[me] != rcount[me])
    mt_die("an all-to-all's own part: %zu elements sent, %zu received", scount[me], rcount[me]);
  copy(r + roff[me] * es, s + soff[me] * es, scount[me] * es, c->stream);
  NC(ncclGroupStart());
  for (int q = 0; q < n; q++) {
    if (q == me) continue;
    if (scount[q]) NC(ncclSend(s + soff[q] * es, scount[q], nc_type(dt), q, c->comm, c->stream));
    if (rcount[q]) NC(ncclRecv(r + roff[q] * es, rcount[q], nc_type(dt), q, c->comm, c->stream));
  }
  NC(ncclGroupEnd());
}

static void *nc_alltoallv(mt_group *g, const void *send, const size_t *send_counts, void *recv,
                          const size_t *recv_counts, mt_dtype dt) {
  timing *t;
  channel *c = coll_begin(g, &t);
  const int n = g->size;
  size_t *so = mt_malloc(2 * (size_t)n * sizeof(size_t)), *ro = so + n;
  for (int q = 0, a = 0, b = 0; q < n; q++) {
    so[q] = (size_t)a, ro[q] = (size_t)b;
    a += (int)send_counts[q], b += (int)recv_counts[q];
  }
  exchange(g, c, send, send_counts, so, recv, recv_counts, ro, dt);
  free(so);
  return coll_end(c, t);
}

/* send viewed (s_outer, size, s_inner), recv (r_outer, size, r_inner):
 * blocks made rank-major, exchanged, and laid out again */
static void *nc_alltoall_dim(mt_group *g, const void *send, void *recv, size_t s_outer,
                             size_t s_inner, size_t r_outer, size_t r_inner, mt_dtype dt) {
  timing *t;
  channel *c = coll_begin(g, &t);
  const int n = g->size;
  const size_t es = mt_dtype_bytes(dt), blk = s_outer * s_inner, ws_bytes = (size_t)n * blk * es;
  char *ws_s = NULL, *ws_r = NULL;
  const void *s = send;
  void *r = recv;
  if (s_outer > 1) {
    ws_s = ws_get(ws_bytes, c->stream);
    mt_permute_dim((void *)send, ws_s, s_outer, s_inner, n, es, 1, copy2d, c->stream);
    s = ws_s;
  }
  if (r_outer > 1) r = ws_r = ws_get(ws_bytes, c->stream);
  size_t *cnt = mt_malloc(2 * (size_t)n * sizeof(size_t)), *off = cnt + n;
  for (int q = 0; q < n; q++) cnt[q] = blk, off[q] = (size_t)q * blk;
  exchange(g, c, s, cnt, off, r, cnt, off, dt);
  free(cnt);
  if (ws_r) {
    mt_permute_dim(recv, ws_r, r_outer, r_inner, n, es, 0, copy2d, c->stream);
    ws_put(ws_r, ws_bytes, c->stream);
  }
  if (ws_s) ws_put(ws_s, ws_bytes, c->stream);
  return coll_end(c, t);
}

/* ------------------------------------------------------------------ */
/* point-to-point                                                      */

static int link_index(const group_state *st, int peer, int tag) {
  for (int l = 0; l < st->n_links; l++)
    if (st->links[l].peer == peer && st->links[l].tag == tag) return l;
  return -1;
}

static int nc_p2p_ok(const mt_group *g, int peer, int tag) {
  const group_state *st = state(g);
  return st && link_index(st, peer, tag) >= 0;
}

static void *hold(mt_group *g, int send, void *buf, size_t n, mt_dtype t, int peer, int tag) {
  harvest();
  group_state *st = state(g);
  if (st->n_pending == st->cap_pending) {
    st->cap_pending = st->cap_pending ? 2 * st->cap_pending : 8;
    st->pending = realloc(st->pending, (size_t)st->cap_pending * sizeof(pending));
    if (!st->pending) mt_die("out of memory (point-to-point calls held back)");
  }
  handle *h = handle_new();
  h->held = 1;
  st->pending[st->n_pending++] = (pending){send, link_index(st, peer, tag), buf, n, t, h, NULL};
  return h;
}

static void *nc_send(mt_group *g, const void *buf, size_t n, mt_dtype t, int peer, int tag) {
  return hold(g, 1, (void *)buf, n, t, peer, tag);
}

static void *nc_recv(mt_group *g, void *buf, size_t n, mt_dtype t, int peer, int tag) {
  return hold(g, 0, buf, n, t, peer, tag);
}

static const mt_comm_direct g_nccl_direct = {
    .name = "nccl",
    .allreduce = nc_allreduce,
    .reduce_scatter = nc_reduce_scatter,
    .allgatherv = nc_allgatherv,
    .allgather_dim = nc_allgather_dim,
    .reduce_scatter_dim = nc_reduce_scatter_dim,
    .alltoallv = nc_alltoallv,
    .alltoall_dim = nc_alltoall_dim,
    .send = nc_send,
    .recv = nc_recv,
    .p2p_ok = nc_p2p_ok,
    .done = nc_done,
    .wait = nc_wait,
    .quiesce = nc_quiesce,
    .flush = nc_flush,
    .idle = nc_idle,
};

/* ------------------------------------------------------------------ */
/* set-up and teardown                                                 */

/* Everything made so far goes: communicators destroyed (aborted after a
 * failure, when a peer may never join), streams, events, state. */
static void teardown(int failed) {
  if (g_nc.compute) cudaStreamSynchronize(g_nc.compute);
  for (channel *c = g_nc.channels; c; c = c->next)
    if (c->stream && !failed) cudaStreamSynchronize(c->stream);
  for (int i = 0; i < g_nc.n_states; i++) {
    group_state *st = g_nc.states[i];
    for (int k = 0; k < st->n_pending; k++) free(st->pending[k].h);
    free(st->pending);
    free(st->members);
    st->g->direct_state = NULL;
    st->g->direct = 0;
    free(st);
  }
  g_nc.n_states = 0;
  while (g_nc.channels) {
    channel *c = g_nc.channels;
    g_nc.channels = c->next;
    if (c->comm) (failed ? ncclCommAbort : ncclCommDestroy)(c->comm);
    if (c->stream) cudaStreamDestroy(c->stream);
    free(c);
  }
  mt_comm_set_direct(NULL);
  while (g_nc.free_handles) {
    handle *h = g_nc.free_handles;
    g_nc.free_handles = h->next;
    cudaEventDestroy(h->done);
    free(h);
  }
  harvest();
  timing *lists[2] = {g_nc.running, g_nc.free_timings};
  for (int l = 0; l < 2; l++)
    while (lists[l]) {
      timing *t = lists[l];
      lists[l] = t->next;
      cudaEventDestroy(t->start);
      cudaEventDestroy(t->end);
      free(t);
    }
  if (g_nc.ready) cudaEventDestroy(g_nc.ready);
  cudaGetLastError();
  memset(&g_nc, 0, sizeof g_nc);
}

void mt_comm_nccl_destroy(mt_mesh *m) {
  (void)m; /* every group's state is the backend's own */
  if (g_nc.up) teardown(0);
}

static channel *channel_new(void) {
  channel *c = mt_calloc(1, sizeof *c);
  c->next = g_nc.channels;
  g_nc.channels = c;
  return c;
}

/* a new state for g (its member list, from the mesh's table) */
static group_state *state_new(mt_mesh *m, mt_group *g, const mt_group_desc *d) {
  group_state *st = mt_calloc(1, sizeof *st);
  st->g = g;
  st->members = mt_malloc((size_t)m->world_size * sizeof(int));
  mt_mesh_dims dims = mt_mesh_dims_of(m);
  st->members_n = mt_mesh_group_members(&dims, d, m->world_rank, st->members);
  g->direct_state = st;
  g_nc.states[g_nc.n_states++] = st;
  return st;
}

/* an earlier group with the same ranks in the same order and a channel */
static channel *same_ranks(const group_state *st) {
  for (int i = 0; i < g_nc.n_states; i++) {
    const group_state *o = g_nc.states[i];
    if (o != st && o->coll && o->members_n == st->members_n &&
        !memcmp(o->members, st->members, (size_t)st->members_n * sizeof(int)))
      return o->coll;
  }
  return NULL;
}

static int init(mt_mesh *m, const mt_comm_nccl_opts *o, mt_err *e) {
  g_nc.compute = (cudaStream_t)o->compute_stream;
  g_nc.host_wait = o->host_wait;
  g_nc.up = 1;
  CU_TRY(e, cudaEventCreateWithFlags(&g_nc.ready, cudaEventDisableTiming));
  /* freed workspace stays in the pool for the next call */
  {
    int dev = 0;
    cudaMemPool_t pool;
    uint64_t keep = UINT64_MAX;
    CU_TRY(e, cudaGetDevice(&dev));
    if (cudaDeviceGetDefaultMemPool(&pool, dev) == cudaSuccess)
      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    cudaGetLastError();
  }
  char my_id[ID_LEN];
  memset(my_id, 0, sizeof my_id);
  snprintf(my_id, sizeof my_id, "%s", o->device_id ? o->device_id : "");

  /* the groups: which get a communicator (distinct GPUs), which share one */
  int n_desc;
  const mt_group_desc *descs = mt_mesh_groups(&n_desc);
  ncclUniqueId coll_id[16];
  channel *todo[16];
  int ranks[16], sizes[16], n_todo = 0;
  char *ids = mt_malloc((size_t)m->world_size * ID_LEN);
  for (int i = 0; i < n_desc; i++) {
    mt_group *g = mt_mesh_group(m, &descs[i]);
    if (!g || g->size < 2) continue;
    int peers[MAX_LINKS], tags[MAX_LINKS];
    int coll = !o->groups || (o->groups & (1u << descs[i].id));
    int links = mt_comm_p2p_links(g->name, g->size, g->rank, o->p2p, peers, tags);
    if (!coll && !links) continue; /* no device traffic goes over it */
    MT_MPI_TRY(e, MPI_Allgather(my_id, ID_LEN, MPI_CHAR, ids, ID_LEN, MPI_CHAR, g->comm));
    int distinct = mt_comm_ids_distinct(ids, g->size, ID_LEN);
    group_state *st = state_new(m, g, &descs[i]);
    if (!coll || !distinct) continue;
    channel *shared = same_ranks(st);
    if (shared) {
      st->coll = shared;
      continue;
    }
    st->coll = channel_new();
    if (g->rank == 0) NC_TRY(e, ncclGetUniqueId(&coll_id[n_todo]));
    MT_MPI_TRY(e, MPI_Bcast(&coll_id[n_todo], sizeof coll_id[n_todo], MPI_BYTE, 0, g->comm));
    todo[n_todo] = st->coll;
    ranks[n_todo] = g->rank;
    sizes[n_todo] = g->size;
    n_todo++;
  }
  /* point-to-point: per ring neighbour with its own GPU and per tag, the
   * lower group rank makes the pair's id and sends it to the higher */
  ncclUniqueId p2p_id[16][MAX_LINKS][2]; /* out, in */
  MPI_Request reqs[16 * MAX_LINKS * 2];
  int n_req = 0;
  for (int i = 0; i < g_nc.n_states; i++) {
    group_state *st = g_nc.states[i];
    mt_group *g = st->g;
    MT_MPI_TRY(e, MPI_Allgather(my_id, ID_LEN, MPI_CHAR, ids, ID_LEN, MPI_CHAR, g->comm));
    int peers[MAX_LINKS], tags[MAX_LINKS];
    int n_links = mt_comm_p2p_links(g->name, g->size, g->rank, o->p2p, peers, tags);
    for (int k = 0; k < n_links; k++) {
      if (!strncmp(ids + (size_t)peers[k] * ID_LEN, my_id, ID_LEN)) continue; /* shares my GPU */
      link *l = &st->links[st->n_links];
      l->peer = peers[k];
      l->tag = tags[k];
      l->out = channel_new();
      l->in = channel_new();
      /* the sender of a direction makes its id and sends it to the receiver */
      ncclUniqueId *out = &p2p_id[i][st->n_links][0], *in = &p2p_id[i][st->n_links][1];
      NC_TRY(e, ncclGetUniqueId(out));
      MT_MPI_TRY(e, MPI_Isend(out, sizeof *out, MPI_BYTE, l->peer, 1000 + l->tag, g->comm,
                              &reqs[n_req++]));
      MT_MPI_TRY(e, MPI_Irecv(in, sizeof *in, MPI_BYTE, l->peer, 1000 + l->tag, g->comm,
                              &reqs[n_req++]));
      st->n_links++;
    }
  }
  free(ids);
  MT_MPI_TRY(e, MPI_Waitall(n_req, reqs, MPI_STATUSES_IGNORE));
  /* every communicator in one group call: no ordering between them */
  NC_TRY(e, ncclGroupStart());
  for (int k = 0; k < n_todo; k++)
    NC_TRY(e, ncclCommInitRank(&todo[k]->comm, sizes[k], coll_id[k], ranks[k]));
  for (int i = 0; i < g_nc.n_states; i++) {
    group_state *st = g_nc.states[i];
    for (int l = 0; l < st->n_links; l++) {
      NC_TRY(e, ncclCommInitRank(&st->links[l].out->comm, 2, p2p_id[i][l][0], 0));
      NC_TRY(e, ncclCommInitRank(&st->links[l].in->comm, 2, p2p_id[i][l][1], 1));
    }
  }
  NC_TRY(e, ncclGroupEnd());
  for (channel *c = g_nc.channels; c; c = c->next)
    CU_TRY(e, cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  for (int i = 0; i < g_nc.n_states; i++) {
    group_state *st = g_nc.states[i];
    /* collectives go direct with a communicator; point-to-point wherever
     * p2p_ok finds a link */
    st->g->direct = st->coll != NULL;
  }
  mt_comm_set_direct(&g_nccl_direct);
  return 0;
}

int mt_comm_nccl_init(mt_mesh *m, const mt_comm_nccl_opts *o, mt_err *e) {
  if (init(m, o, e) == 0) return 0;
  teardown(1);
  mt_err_pass_at(e, __FILE__, __LINE__);
  return -1;
}
