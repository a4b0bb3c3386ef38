/* Collectives over mesh groups, with byte and time counters. Host buffers go
 * to MPI directly; device buffers go to the direct backend (NCCL) on the
 * groups it serves, and are otherwise staged through host copies made with
 * the device backend's copy functions. Each group counts how its device
 * calls travelled. With a direct backend registered, every place the host
 * blocks first lets the backend issue what it holds back, and waits in MPI
 * poll, letting the device progress meanwhile (see mt_comm_direct). */
#include "comm/comm_internal.h"

#include <limits.h>
#include <sched.h>
#include <stdlib.h>
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

double mt_bytes_alltoall(size_t total_bytes, int n) {
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

/* ------------------------------------------------------------------ */
/* device buffers: staged through host copies                          */

static mt_comm_device_copy g_dev;
static int g_have_dev;
static long g_staged;

void mt_comm_set_device_copy(const mt_comm_device_copy *c) {
  g_have_dev = c != NULL;
  if (c) g_dev = *c;
}

long mt_comm_staged_calls(void) { return g_staged; }

/* A host view of a device buffer of `bytes`: a malloc'ed copy (filled from
 * the device when fill), or buf itself for host memory. */
static void *stage(mt_loc loc, const void *buf, size_t bytes, int fill) {
  if (loc == MT_LOC_HOST) return (void *)buf;
  if (!g_have_dev) mt_die("a device buffer was handed to comm, but no device backend registered "
                          "its copy functions");
  void *h = mt_malloc(bytes ? bytes : 1);
  if (fill && bytes) g_dev.to_host(h, buf, bytes);
  g_staged++;
  return h;
}

/* one device-buffer call of g that goes through host staging */
static void staged_call(mt_group *g, mt_loc loc) {
  if (loc == MT_LOC_DEVICE) g->device_staged++;
}

/* Ends a staging: the host copy goes back to dev (when back) and is freed. */
static void unstage(mt_loc loc, void *dev, void *host, size_t bytes, int back) {
  if (loc == MT_LOC_HOST) return;
  if (back && bytes) g_dev.to_device(dev, host, bytes);
  free(host);
}

/* dst = src, n floats, both where loc says (a group of one) */
static void local_copy(float *dst, const float *src, size_t n, mt_loc loc) {
  if (dst == src || n == 0) return;
  if (loc == MT_LOC_HOST) {
    memcpy(dst, src, n * sizeof(float));
    return;
  }
  float *h = stage(loc, src, n * sizeof(float), 1);
  unstage(loc, dst, h, n * sizeof(float), 1);
}

static void tally(mt_group *g, double t0, double bytes) {
  g->seconds += mt_now() - t0;
  g->bytes += bytes;
  g->calls++;
}

/* a collective's time, bytes and call (and its span in the timeline) */
static void count(mt_group *g, double t0, double bytes) {
  if (mt_trace_on()) mt_trace_span(g->name, "collective", MT_TRACK_COLL, t0, mt_now(), -1, -1);
  tally(g, t0, bytes);
}

/* a point-to-point call's: a send's span on the point-to-point track */
static void count_p2p(mt_group *g, double t0, double bytes) {
  if (mt_trace_on() && bytes > 0) mt_trace_span(g->name, "send", MT_TRACK_P2P, t0, mt_now(), -1, -1);
  tally(g, t0, bytes);
}

/* ------------------------------------------------------------------ */
/* waiting in MPI                                                      */

static const mt_comm_direct *g_direct;

/* Before the host blocks: what the direct backend holds back goes out
 * (a peer may be waiting for it). */
static void before_block(void) {
  if (g_direct && g_direct->flush) g_direct->flush();
}

/* Waits for r; with a direct backend the wait polls and lets the device
 * progress (work a peer needs may be queued behind communication). */
static int wait_request(MPI_Request *r, MPI_Status *st) {
  before_block();
  if (!g_direct || !g_direct->idle) return MPI_Wait(r, st);
  for (;;) {
    int done = 0, rc = MPI_Test(r, &done, st);
    if (rc != MPI_SUCCESS || done) return rc;
    g_direct->idle();
    sched_yield(); /* ranks may share cores */
  }
}

/* whether blocking calls go as non-blocking ones and a polling wait: with a
 * direct backend (which first issues what it holds back); plain MPI
 * blocking calls otherwise (their tuned algorithms) */
static int polling(void) {
  before_block();
  return g_direct && g_direct->idle;
}

/* a non-blocking MPI call (rc, with its request) turned blocking */
static int blocking(int rc, MPI_Request *r) {
  return rc != MPI_SUCCESS ? rc : wait_request(r, MPI_STATUS_IGNORE);
}

/* ------------------------------------------------------------------ */
/* device buffers: the direct backend                                  */

static mt_comm_direct g_direct_copy;
static long g_direct_calls;

void mt_comm_set_direct(const mt_comm_direct *d) {
  if (d) g_direct_copy = *d;
  g_direct = d ? &g_direct_copy : NULL;
}

long mt_comm_direct_calls(void) { return g_direct_calls; }

const char *mt_group_device_path(const mt_group *g) {
  return g_direct && g->direct ? g_direct->name : "staged";
}

const char *mt_group_device_traffic(const mt_group *g) {
  if (!g->device_direct && !g->device_staged) return "none";
  if (!g->device_staged) return g_direct ? g_direct->name : "direct";
  return g->device_direct ? "mixed" : "staged";
}

int mt_comm_ids_distinct(const char *ids, int n, size_t id_len) {
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++)
      if (strncmp(ids + (size_t)a * id_len, ids + (size_t)b * id_len, id_len) == 0) return 0;
  return 1;
}

/* does this call go to the direct backend? */
static int direct(const mt_group *g, mt_loc loc) {
  return loc == MT_LOC_DEVICE && g_direct && g->direct;
}

/* bytes and calls of a direct call (its seconds come from the backend) */
static void count_direct(mt_group *g, double bytes) {
  g->bytes += bytes;
  g->calls++;
  g->device_direct++;
  g_direct_calls++;
}

/* A blocking direct call: queued compute first, then the call and its wait
 * (the backend issues what it holds back where its wait blocks the host). */
#define DIRECT_BLOCKING(g, bytes, call)      \
  do {                                      \
    g_direct->quiesce();                    \
    void *dh_ = (call);                     \
    g_direct->wait(dh_);                    \
    count_direct((g), (bytes));             \
  } while (0)

/* A non-blocking direct call: launched, finished by mt_wait or mt_progress. */
#define DIRECT_START(g, r, bytes, call)      \
  do {                                      \
    (r)->direct = (call);                   \
    (r)->active = 1;                        \
    count_direct((g), (bytes));             \
  } while (0)

/* A group of another backend (count.c) takes the call as a description:
 * kind, the bytes every backend counts, integer buffers. */
#define OTHER_BACKEND(g, ...)                                                \
  ((g)->backend != MT_COMM_MPI && mt_comm_backend_call((g), &(mt_coll){__VA_ARGS__}))

/* ------------------------------------------------------------------ */
/* all-reduce                                                          */

static void allreduce(mt_group *g, void *buf, size_t n, MPI_Datatype type, size_t elem,
                      MPI_Op op, mt_loc loc) {
  const double bytes = mt_bytes_allreduce(n * elem, g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_REDUCE, .bytes = bytes, .loc = loc) || g->size == 1) return;
  if (direct(g, loc)) {
    DIRECT_BLOCKING(g, bytes,
                    g_direct->allreduce(g, buf, n, type == MPI_DOUBLE ? MT_DT_F64 : MT_DT_F32,
                                        op == MPI_MAX ? MT_RED_MAX : MT_RED_SUM));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  void *h = stage(loc, buf, n * elem, 1);
  MPI_Request q;
  MT_MPI_CHECK(
      polling() ? blocking(MPI_Iallreduce(MPI_IN_PLACE, h, as_count(n), type, op, g->comm, &q), &q)
                : MPI_Allreduce(MPI_IN_PLACE, h, as_count(n), type, op, g->comm));
  unstage(loc, buf, h, n * elem, 1);
  count(g, t0, bytes);
}

void mt_allreduce_sum_f32(mt_group *g, float *buf, size_t n, mt_loc loc) {
  allreduce(g, buf, n, MPI_FLOAT, sizeof(float), MPI_SUM, loc);
}

void mt_allreduce_sum_f64(mt_group *g, double *buf, size_t n, mt_loc loc) {
  allreduce(g, buf, n, MPI_DOUBLE, sizeof(double), MPI_SUM, loc);
}

void mt_allreduce_max_f64(mt_group *g, double *buf, size_t n, mt_loc loc) {
  allreduce(g, buf, n, MPI_DOUBLE, sizeof(double), MPI_MAX, loc);
}

void mt_allreduce_max_f32(mt_group *g, float *buf, size_t n, mt_loc loc) {
  allreduce(g, buf, n, MPI_FLOAT, sizeof(float), MPI_MAX, loc);
}

/* ------------------------------------------------------------------ */
/* along one dim (sequence parallelism)                                */

static void allgather_dim_host(mt_group *g, const float *send, float *recv, size_t outer,
                               size_t inner) {
  size_t n = outer * inner, size = (size_t)g->size;
  MPI_Request q;
  if (outer == 1) {
    MT_MPI_CHECK(polling() ? blocking(MPI_Iallgather(send, as_count(n), MPI_FLOAT, recv,
                                                     as_count(n), MPI_FLOAT, g->comm, &q),
                                      &q)
                           : MPI_Allgather(send, as_count(n), MPI_FLOAT, recv, as_count(n),
                                           MPI_FLOAT, g->comm));
    return;
  }
  /* one rank's slice inside recv: outer runs of inner floats, size*inner
   * apart; resized so that rank r's slice starts r*inner floats in */
  MPI_Datatype strided, slice;
  MT_MPI_CHECK(MPI_Type_vector(as_count(outer), as_count(inner), as_count(size * inner),
                               MPI_FLOAT, &strided));
  MT_MPI_CHECK(MPI_Type_create_resized(strided, 0, (MPI_Aint)(inner * sizeof(float)), &slice));
  MT_MPI_CHECK(MPI_Type_commit(&slice));
  MT_MPI_CHECK(
      polling()
          ? blocking(MPI_Iallgather(send, as_count(n), MPI_FLOAT, recv, 1, slice, g->comm, &q), &q)
          : MPI_Allgather(send, as_count(n), MPI_FLOAT, recv, 1, slice, g->comm));
  MPI_Type_free(&slice);
  MPI_Type_free(&strided);
}

void mt_allgather_dim_f32(mt_group *g, const float *send, float *recv, size_t outer,
                          size_t inner, mt_loc loc) {
  size_t n = outer * inner, size = (size_t)g->size;
  const double bytes = mt_bytes_allgather(size * n * sizeof(float), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc)) return;
  if (g->size == 1) {
    local_copy(recv, send, n, loc);
    return;
  }
  if (direct(g, loc)) {
    DIRECT_BLOCKING(g, bytes,
                    g_direct->allgather_dim(g, send, recv, outer, inner, MT_DT_F32));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  float *hs = stage(loc, send, n * sizeof(float), 1);
  float *hr = stage(loc, recv, size * n * sizeof(float), 0);
  allgather_dim_host(g, hs, hr, outer, inner);
  unstage(loc, (void *)send, hs, 0, 0);
  unstage(loc, recv, hr, size * n * sizeof(float), 1);
  count(g, t0, bytes);
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
 * few ranks, took 2-3x the time of this on 2 ranks at 3 MB.) The sums are
 * comm's own arithmetic on host memory: a device buffer is staged whole. */
static void reduce_scatter_dim_host(mt_group *g, const float *send, float *recv, size_t outer,
                                    size_t inner, float *scratch) {
  size_t n = outer * inner, size = (size_t)g->size;
  int r = g->rank, next = (r + 1) % g->size, prev = (r + g->size - 1) % g->size;
  MPI_Datatype block;
  MT_MPI_CHECK(MPI_Type_vector(as_count(outer), as_count(inner), as_count(size * inner),
                               MPI_FLOAT, &block));
  MT_MPI_CHECK(MPI_Type_commit(&block));
  float *sum_out = scratch, *sum_in = scratch + n; /* running sums, (outer, inner) each */
  for (int s = 0; s < g->size - 1; s++) {
    size_t b_recv = (size_t)((r - s - 2 + 2 * g->size) % g->size);
    MPI_Request q[2];
    MT_MPI_CHECK(MPI_Irecv(sum_in, as_count(n), MPI_FLOAT, prev, 0, g->comm, &q[0]));
    if (s == 0) {
      size_t b_send = (size_t)((r - 1 + g->size) % g->size);
      MT_MPI_CHECK(MPI_Isend(send + b_send * inner, 1, block, next, 0, g->comm, &q[1]));
    } else {
      MT_MPI_CHECK(MPI_Isend(sum_out, as_count(n), MPI_FLOAT, next, 0, g->comm, &q[1]));
    }
    MT_MPI_CHECK(wait_request(&q[0], MPI_STATUS_IGNORE));
    MT_MPI_CHECK(wait_request(&q[1], MPI_STATUS_IGNORE));
    int last = s == g->size - 2; /* then b_recv == r */
    add_block(last ? recv : sum_out, sum_in, send, outer, inner, size, b_recv);
  }
  MPI_Type_free(&block);
}

void mt_reduce_scatter_dim_f32(mt_group *g, const float *send, float *recv, size_t outer,
                               size_t inner, float *scratch, mt_loc loc) {
  size_t n = outer * inner, size = (size_t)g->size;
  const double bytes = mt_bytes_reduce_scatter(size * n * sizeof(float), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_SCATTER, .bytes = bytes, .loc = loc)) return;
  if (g->size == 1) {
    local_copy(recv, send, n, loc);
    return;
  }
  if (!scratch) mt_die("mt_reduce_scatter_dim_f32 needs a scratch buffer");
  if (direct(g, loc)) {
    DIRECT_BLOCKING(g, bytes,
                    g_direct->reduce_scatter_dim(g, send, recv, outer, inner, MT_DT_F32));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  float *hs = stage(loc, send, size * n * sizeof(float), 1);
  float *hr = stage(loc, recv, n * sizeof(float), 0);
  float *hscratch = loc == MT_LOC_HOST ? scratch : mt_malloc(2 * n * sizeof(float));
  reduce_scatter_dim_host(g, hs, hr, outer, inner, hscratch);
  if (loc != MT_LOC_HOST) free(hscratch);
  unstage(loc, (void *)send, hs, 0, 0);
  unstage(loc, recv, hr, n * sizeof(float), 1);
  count(g, t0, bytes);
}

/* One block of the middle dim of an (outer, size, inner) view: outer runs of
 * inner elements (elem, es bytes each), size*inner apart, resized so that
 * block r starts r*inner elements in (one element of this type per peer in
 * MPI_Alltoall and MPI_Allgather). */
static MPI_Datatype block_type(size_t outer, size_t inner, size_t size, MPI_Datatype elem,
                               size_t es) {
  MPI_Datatype strided, block;
  MT_MPI_CHECK(MPI_Type_vector(as_count(outer), as_count(inner), as_count(size * inner), elem,
                               &strided));
  MT_MPI_CHECK(MPI_Type_create_resized(strided, 0, (MPI_Aint)(inner * es), &block));
  MT_MPI_CHECK(MPI_Type_commit(&block));
  MPI_Type_free(&strided);
  return block;
}

void mt_alltoall_dim_f32(mt_group *g, const float *send, float *recv, size_t s_outer,
                         size_t s_inner, size_t r_outer, size_t r_inner, mt_loc loc) {
  size_t size = (size_t)g->size, n = size * s_outer * s_inner;
  if (s_outer * s_inner != r_outer * r_inner)
    mt_die("mt_alltoall_dim_f32: blocks of %zu x %zu and %zu x %zu floats differ", s_outer,
           s_inner, r_outer, r_inner);
  const double bytes = mt_bytes_alltoall(n * sizeof(float), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_ALLTOALL, .bytes = bytes, .loc = loc)) return;
  if (g->size == 1) { /* one block: the views are the same buffer layout */
    local_copy(recv, send, n, loc);
    return;
  }
  if (direct(g, loc)) {
    DIRECT_BLOCKING(g, mt_bytes_alltoall(n * sizeof(float), g->size),
                    g_direct->alltoall_dim(g, send, recv, s_outer, s_inner, r_outer, r_inner,
                                            MT_DT_F32));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  float *hs = stage(loc, send, n * sizeof(float), 1);
  float *hr = stage(loc, recv, n * sizeof(float), 0);
  MPI_Datatype st = block_type(s_outer, s_inner, size, MPI_FLOAT, sizeof(float));
  MPI_Datatype rt = block_type(r_outer, r_inner, size, MPI_FLOAT, sizeof(float));
  MPI_Request q;
  MT_MPI_CHECK(polling() ? blocking(MPI_Ialltoall(hs, 1, st, hr, 1, rt, g->comm, &q), &q)
                         : MPI_Alltoall(hs, 1, st, hr, 1, rt, g->comm));
  MPI_Type_free(&st);
  MPI_Type_free(&rt);
  unstage(loc, (void *)send, hs, 0, 0);
  unstage(loc, recv, hr, n * sizeof(float), 1);
  count(g, t0, bytes);
}

/* ------------------------------------------------------------------ */
/* reduce-scatter and all-gather over variable parts (dp, ZeRO)        */

void mt_reduce_scatter_sum_f32(mt_group *g, const float *send, float *recv, const int *counts,
                               mt_loc loc) {
  size_t total = sum_counts(counts, g->size), mine = (size_t)counts[g->rank];
  const double bytes = mt_bytes_reduce_scatter(total * sizeof(float), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_SCATTER, .bytes = bytes, .loc = loc)) return;
  if (g->size == 1) {
    local_copy(recv, send, mine, loc);
    return;
  }
  if (direct(g, loc)) {
    DIRECT_BLOCKING(g, bytes, g_direct->reduce_scatter(g, send, recv, counts, MT_DT_F32));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  float *hs = stage(loc, send, total * sizeof(float), 1);
  float *hr = stage(loc, recv, mine * sizeof(float), 0);
  MPI_Request q;
  MT_MPI_CHECK(
      polling() ? blocking(MPI_Ireduce_scatter(hs, hr, counts, MPI_FLOAT, MPI_SUM, g->comm, &q), &q)
                : MPI_Reduce_scatter(hs, hr, counts, MPI_FLOAT, MPI_SUM, g->comm));
  unstage(loc, (void *)send, hs, 0, 0);
  unstage(loc, recv, hr, mine * sizeof(float), 1);
  count(g, t0, bytes);
}

void mt_allgatherv_inplace_f32(mt_group *g, float *buf, const int *counts, const int *displs,
                               mt_loc loc) {
  size_t total = sum_counts(counts, g->size);
  const double bytes = mt_bytes_allgather(total * sizeof(float), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc) || g->size == 1) return;
  if (direct(g, loc)) {
    DIRECT_BLOCKING(g, bytes, g_direct->allgatherv(g, NULL, buf, counts, displs, MT_DT_F32));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  float *h = stage(loc, buf, total * sizeof(float), 1);
  MPI_Request q;
  MT_MPI_CHECK(polling() ? blocking(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, counts,
                                                    displs, MPI_FLOAT, g->comm, &q),
                                    &q)
                         : MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, h, counts, displs,
                                          MPI_FLOAT, g->comm));
  unstage(loc, buf, h, total * sizeof(float), 1);
  count(g, t0, bytes);
}

/* ------------------------------------------------------------------ */
/* integers, all-to-all and variable parts (MoE dispatch)              */

void mt_gather_f64(mt_group *g, const double *mine, size_t n, double *all, int root) {
  const double bytes = g->rank == root ? 0.0 : (double)n * sizeof(double);
  if (OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = MT_LOC_HOST)) {
    if (g->rank == root) /* a count-only group: this rank's figures in every slot */
      for (int r = 0; r < g->size; r++) memcpy(all + (size_t)r * n, mine, n * sizeof(double));
    return;
  }
  if (g->size == 1) {
    memcpy(all, mine, n * sizeof(double));
    return;
  }
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Gather(mine, as_count(n), MPI_DOUBLE, all, as_count(n), MPI_DOUBLE, root,
                          g->comm));
  count(g, t0, bytes);
}

void mt_allgather_i32(mt_group *g, const int *send, int *recv, size_t n) {
  const double bytes = mt_bytes_allgather((size_t)g->size * n * sizeof(int), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_GATHER_I32, .bytes = bytes, .send = send, .recv = recv,
                    .n = n))
    return;
  if (g->size == 1) {
    if (recv != send && n) memcpy(recv, send, n * sizeof(int));
    return;
  }
  double t0 = mt_now();
  MPI_Request q;
  MT_MPI_CHECK(
      polling() ? blocking(MPI_Iallgather(send, as_count(n), MPI_INT, recv, as_count(n), MPI_INT,
                                          g->comm, &q),
                           &q)
                : MPI_Allgather(send, as_count(n), MPI_INT, recv, as_count(n), MPI_INT, g->comm));
  count(g, t0, bytes);
}

void mt_alltoall_i32(mt_group *g, const int *send, int *recv, size_t n) {
  const double bytes = (double)(g->size - 1) * (double)(n * sizeof(int));
  if (OTHER_BACKEND(g, .kind = MT_COLL_ALLTOALL_I32, .bytes = bytes, .send = send, .recv = recv,
                    .n = n))
    return;
  if (g->size == 1) {
    if (recv != send && n) memcpy(recv, send, n * sizeof(int));
    return;
  }
  double t0 = mt_now();
  MPI_Request q;
  MT_MPI_CHECK(polling()
                   ? blocking(MPI_Ialltoall(send, as_count(n), MPI_INT, recv, as_count(n), MPI_INT,
                                            g->comm, &q),
                              &q)
                   : MPI_Alltoall(send, as_count(n), MPI_INT, recv, as_count(n), MPI_INT, g->comm));
  count(g, t0, bytes);
}

double mt_bytes_alltoallv(const size_t *send_counts, int n, int rank, size_t elem_bytes) {
  double b = 0.0;
  for (int r = 0; r < n; r++)
    if (r != rank) b += (double)send_counts[r] * (double)elem_bytes;
  return b;
}

/* int counts and displacements of parts laid end to end (a part beyond
 * the MPI int count is a fatal error) */
static void int_parts(const size_t *counts, int n, int *c, int *d, size_t *total) {
  size_t off = 0;
  for (int r = 0; r < n; r++) {
    c[r] = as_count(counts[r]);
    d[r] = as_count(off);
    off += counts[r];
  }
  *total = off;
}

void mt_alltoallv_f32(mt_group *g, const float *send, const size_t *send_counts, float *recv,
                      const size_t *recv_counts, mt_loc loc) {
  int n = g->size;
  const double bytes = mt_bytes_alltoallv(send_counts, n, g->rank, sizeof(float));
  if (OTHER_BACKEND(g, .kind = MT_COLL_ALLTOALL, .bytes = bytes, .loc = loc)) return;
  if (n == 1) {
    local_copy(recv, send, send_counts[0], loc);
    return;
  }
  if (direct(g, loc)) {
    DIRECT_BLOCKING(g, mt_bytes_alltoallv(send_counts, n, g->rank, sizeof(float)),
                    g_direct->alltoallv(g, send, send_counts, recv, recv_counts, MT_DT_F32));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  int *sc = mt_malloc(4 * (size_t)n * sizeof(int)), *sd = sc + n, *rc = sc + 2 * n, *rd = sc + 3 * n;
  size_t st, rt;
  int_parts(send_counts, n, sc, sd, &st);
  int_parts(recv_counts, n, rc, rd, &rt);
  float *hs = stage(loc, send, st * sizeof(float), 1);
  float *hr = stage(loc, recv, rt * sizeof(float), 0);
  MPI_Request q;
  MT_MPI_CHECK(
      polling()
          ? blocking(MPI_Ialltoallv(hs, sc, sd, MPI_FLOAT, hr, rc, rd, MPI_FLOAT, g->comm, &q), &q)
          : MPI_Alltoallv(hs, sc, sd, MPI_FLOAT, hr, rc, rd, MPI_FLOAT, g->comm));
  unstage(loc, (void *)send, hs, 0, 0);
  unstage(loc, recv, hr, rt * sizeof(float), 1);
  free(sc);
  count(g, t0, bytes);
}

void mt_allgatherv_f32(mt_group *g, const float *send, float *recv, const size_t *counts,
                       mt_loc loc) {
  int n = g->size;
  size_t total = 0;
  for (int r = 0; r < n; r++) total += counts[r];
  const double bytes = mt_bytes_allgather(total * sizeof(float), n);
  if (OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc)) return;
  if (n == 1) {
    local_copy(recv, send, counts[0], loc);
    return;
  }
  int *c = mt_malloc(2 * (size_t)n * sizeof(int)), *d = c + n;
  int_parts(counts, n, c, d, &total);
  if (direct(g, loc)) {
    DIRECT_BLOCKING(g, mt_bytes_allgather(total * sizeof(float), n),
                    g_direct->allgatherv(g, send, recv, c, d, MT_DT_F32));
    free(c);
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  size_t mine = counts[g->rank];
  float *hs = stage(loc, send, mine * sizeof(float), 1);
  float *hr = stage(loc, recv, total * sizeof(float), 0);
  MPI_Request q;
  MT_MPI_CHECK(polling() ? blocking(MPI_Iallgatherv(hs, c[g->rank], MPI_FLOAT, hr, c, d, MPI_FLOAT,
                                                    g->comm, &q),
                                    &q)
                         : MPI_Allgatherv(hs, c[g->rank], MPI_FLOAT, hr, c, d, MPI_FLOAT, g->comm));
  unstage(loc, (void *)send, hs, 0, 0);
  unstage(loc, recv, hr, total * sizeof(float), 1);
  free(c);
  count(g, t0, bytes);
}

void mt_reduce_scatterv_f32(mt_group *g, const float *send, float *recv, const size_t *counts,
                            mt_loc loc) {
  int n = g->size;
  if (n == 1 && g->backend == MT_COMM_MPI) {
    local_copy(recv, send, counts[0], loc);
    return;
  }
  int *c = mt_malloc(2 * (size_t)n * sizeof(int));
  size_t total;
  int_parts(counts, n, c, c + n, &total);
  mt_reduce_scatter_sum_f32(g, send, recv, c, loc);
  free(c);
}

/* ------------------------------------------------------------------ */
/* non-blocking                                                        */

static void req_init(mt_request *r, mt_group *g) {
  memset(r, 0, sizeof *r);
  r->g = g;
}

/* When the request finishes: bytes at back (inside the staging block host)
 * go to dev, and the block is freed. dev NULL: only the free. */
static void req_stage(mt_request *r, mt_loc loc, void *host, void *back, void *dev,
                      size_t bytes) {
  if (loc == MT_LOC_HOST) return;
  r->host = host;
  r->back = back;
  r->dev_dst = dev;
  r->bytes = bytes;
}

static void req_finish(mt_request *r) {
  if (r->host) {
    if (r->dev_dst && r->bytes) g_dev.to_device(r->dev_dst, r->back, r->bytes);
    free(r->host);
    r->host = NULL;
  }
  r->active = 0;
}

void mt_iallreduce_sum_f32(mt_group *g, float *buf, size_t n, mt_loc loc, mt_request *r) {
  req_init(r, g);
  const double bytes = mt_bytes_allreduce(n * sizeof(float), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_REDUCE, .bytes = bytes, .loc = loc, .req = r) ||
      g->size == 1)
    return;
  if (direct(g, loc)) {
    DIRECT_START(g, r, bytes, g_direct->allreduce(g, buf, n, MT_DT_F32, MT_RED_SUM));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  float *h = stage(loc, buf, n * sizeof(float), 1);
  MT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, h, as_count(n), MPI_FLOAT, MPI_SUM, g->comm,
                              &r->req));
  req_stage(r, loc, h, h, buf, n * sizeof(float));
  count(g, t0, bytes);
  r->active = 1;
}

void mt_ireduce_scatter_sum_f32(mt_group *g, const float *send, float *recv,
                                const int *counts, mt_loc loc, mt_request *r) {
  req_init(r, g);
  if (g->size == 1) {
    mt_reduce_scatter_sum_f32(g, send, recv, counts, loc);
    return;
  }
  size_t total = sum_counts(counts, g->size), mine = (size_t)counts[g->rank];
  const double bytes = mt_bytes_reduce_scatter(total * sizeof(float), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_SCATTER, .bytes = bytes, .loc = loc, .req = r)) return;
  if (direct(g, loc)) {
    DIRECT_START(g, r, bytes, g_direct->reduce_scatter(g, send, recv, counts, MT_DT_F32));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  /* the send side must outlive the call: send and recv staged in one host block */
  float *h = NULL, *hs = (float *)send, *hr = recv;
  if (loc != MT_LOC_HOST) {
    h = stage(loc, NULL, (total + mine) * sizeof(float), 0);
    g_dev.to_host(h, send, total * sizeof(float));
    hs = h;
    hr = h + total;
  }
  MT_MPI_CHECK(MPI_Ireduce_scatter(hs, hr, counts, MPI_FLOAT, MPI_SUM, g->comm, &r->req));
  req_stage(r, loc, h, hr, recv, mine * sizeof(float));
  count(g, t0, bytes);
  r->active = 1;
}

void mt_iallgatherv_f32(mt_group *g, const float *send, float *recv, const int *counts,
                        const int *displs, mt_loc loc, mt_request *r) {
  req_init(r, g);
  size_t total = sum_counts(counts, g->size), mine = (size_t)counts[g->rank];
  const double bytes = mt_bytes_allgather(total * sizeof(float), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc, .req = r)) return;
  if (g->size > 1 && direct(g, loc)) {
    DIRECT_START(g, r, bytes, g_direct->allgatherv(g, send, recv, counts, displs, MT_DT_F32));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  float *h = NULL, *hs = (float *)send, *hr = recv;
  if (loc != MT_LOC_HOST) {
    h = stage(loc, NULL, (total + mine) * sizeof(float), 0);
    g_dev.to_host(h + total, send, mine * sizeof(float));
    hs = h + total;
    hr = h;
  }
  if (g->size == 1) {
    memcpy(hr + displs[0], hs, mine * sizeof(float));
    if (h) {
      g_dev.to_device(recv, h, total * sizeof(float));
      free(h);
    }
    return;
  }
  MT_MPI_CHECK(MPI_Iallgatherv(hs, as_count(mine), MPI_FLOAT, hr, counts, displs, MPI_FLOAT,
                               g->comm, &r->req));
  req_stage(r, loc, h, h, recv, total * sizeof(float));
  count(g, t0, bytes);
  r->active = 1;
}

/* 16-bit elements (bf16 moved as bits, or summed with each addition
 * rounded): the MPI path on host memory. Device buffers of a group the
 * direct backend serves go to it (elements MT_DT_BF16), as the fp32 calls'
 * do; on other groups they go through one host block that holds the send
 * side (copied from the device) and the receive side (copied from the
 * device too where the call reads it: in place), the host form runs on it,
 * and the receive side goes back. A non-blocking call copies back in
 * mt_wait. */
typedef struct {
  uint16_t *block, *send, *recv;
} u16_staged;

static u16_staged u16_stage(mt_group *g, const void *send, size_t send_n, const void *recv,
                            size_t recv_n, size_t extra_n) {
  staged_call(g, MT_LOC_DEVICE);
  u16_staged x;
  int in_place = send == recv;
  x.block = stage(MT_LOC_DEVICE, NULL, (send_n + (in_place ? 0 : recv_n) + extra_n) * 2, 0);
  x.send = x.block;
  x.recv = in_place ? x.block : x.block + send_n;
  if (send_n) g_dev.to_host(x.send, send, send_n * 2);
  return x;
}

/* blocking: the receive side back to the device, the block freed */
static void u16_unstage(const u16_staged *x, void *recv, size_t recv_n) {
  if (recv_n) g_dev.to_device(recv, x->recv, recv_n * 2);
  free(x->block);
}

/* non-blocking: the same when the request finishes (at once for a call the
 * host form completed, a group of one) */
static void u16_unstage_later(const u16_staged *x, mt_request *r, void *recv, size_t recv_n) {
  req_stage(r, MT_LOC_DEVICE, x->block, x->recv, recv, recv_n * 2);
  if (!r->active) req_finish(r);
}

void mt_allgatherv_inplace_u16(mt_group *g, uint16_t *buf, const int *counts, const int *displs,
                               mt_loc loc) {
  size_t total = sum_counts(counts, g->size);
  const double bytes = mt_bytes_allgather(total * sizeof(uint16_t), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc) || g->size == 1) return;
  if (direct(g, loc)) {
    DIRECT_BLOCKING(g, bytes, g_direct->allgatherv(g, NULL, buf, counts, displs, MT_DT_BF16));
    return;
  }
  if (loc == MT_LOC_DEVICE) {
    u16_staged x = u16_stage(g, buf, total, buf, total, 0);
    mt_allgatherv_inplace_u16(g, x.recv, counts, displs, MT_LOC_HOST);
    u16_unstage(&x, buf, total);
    return;
  }
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs,
                              MPI_UINT16_T, g->comm));
  count(g, t0, bytes);
}

void mt_iallgatherv_u16(mt_group *g, const uint16_t *send, uint16_t *recv, const int *counts,
                        const int *displs, mt_loc loc, mt_request *r) {
  req_init(r, g);
  size_t total = sum_counts(counts, g->size), mine = (size_t)counts[g->rank];
  const double bytes = mt_bytes_allgather(total * sizeof(uint16_t), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc, .req = r)) return;
  if (g->size > 1 && direct(g, loc)) {
    DIRECT_START(g, r, bytes, g_direct->allgatherv(g, send, recv, counts, displs, MT_DT_BF16));
    return;
  }
  if (loc == MT_LOC_DEVICE) {
    u16_staged x = u16_stage(g, send, mine, recv, total, 0);
    mt_iallgatherv_u16(g, x.send, x.recv, counts, displs, MT_LOC_HOST, r);
    u16_unstage_later(&x, r, recv, total);
    return;
  }
  if (g->size == 1) {
    memcpy(recv + displs[0], send, mine * sizeof(uint16_t));
    return;
  }
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Iallgatherv(send, as_count(mine), MPI_UINT16_T, recv, counts, displs,
                               MPI_UINT16_T, g->comm, &r->req));
  count(g, t0, bytes);
  r->active = 1;
}

void mt_alltoallv_u16(mt_group *g, const uint16_t *send, const size_t *send_counts,
                      uint16_t *recv, const size_t *recv_counts, mt_loc loc) {
  int n = g->size;
  const double bytes = mt_bytes_alltoallv(send_counts, n, g->rank, sizeof(uint16_t));
  if (OTHER_BACKEND(g, .kind = MT_COLL_ALLTOALL, .bytes = bytes, .loc = loc)) return;
  if (n > 1 && direct(g, loc)) {
    DIRECT_BLOCKING(g, bytes,
                    g_direct->alltoallv(g, send, send_counts, recv, recv_counts, MT_DT_BF16));
    return;
  }
  if (loc == MT_LOC_DEVICE) {
    size_t st = 0, rt = 0;
    for (int q = 0; q < n; q++) {
      st += send_counts[q];
      rt += recv_counts[q];
    }
    u16_staged x = u16_stage(g, send, st, recv, rt, 0);
    mt_alltoallv_u16(g, x.send, send_counts, x.recv, recv_counts, MT_LOC_HOST);
    u16_unstage(&x, recv, rt);
    return;
  }
  if (n == 1) {
    if (recv != send) memcpy(recv, send, send_counts[0] * sizeof(uint16_t));
    return;
  }
  double t0 = mt_now();
  int *sc = mt_malloc(4 * (size_t)n * sizeof(int)), *sd = sc + n, *rc = sc + 2 * n;
  int *rd = sc + 3 * n;
  size_t st, rt;
  int_parts(send_counts, n, sc, sd, &st);
  int_parts(recv_counts, n, rc, rd, &rt);
  MT_MPI_CHECK(MPI_Alltoallv(send, sc, sd, MPI_UINT16_T, recv, rc, rd, MPI_UINT16_T, g->comm));
  free(sc);
  count(g, t0, bytes);
}

/* The bf16 sum as an MPI reduction: inout[i] = round(in[i] + inout[i]) */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
  (void)type;
  const mt_bf16 *a = in;
  mt_bf16 *b = inout;
  for (int i = 0; i < *len; i++)
    b[i] = mt_bf16_from_f32(mt_bf16_to_f32(a[i]) + mt_bf16_to_f32(b[i]));
}

MPI_Op mt_comm_bf16_sum_op(void) {
  static MPI_Op op = MPI_OP_NULL;
  if (op == MPI_OP_NULL) MT_MPI_CHECK(MPI_Op_create(bf16_sum, 1, &op));
  return op;
}

void mt_allreduce_sum_bf16(mt_group *g, mt_bf16 *buf, size_t n, mt_loc loc) {
  const double bytes = mt_bytes_allreduce(n * sizeof(mt_bf16), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_REDUCE, .bytes = bytes, .loc = loc) || g->size == 1) return;
  if (direct(g, loc)) {
    DIRECT_BLOCKING(g, bytes, g_direct->allreduce(g, buf, n, MT_DT_BF16, MT_RED_SUM));
    return;
  }
  if (loc == MT_LOC_DEVICE) {
    u16_staged x = u16_stage(g, buf, n, buf, n, 0);
    mt_allreduce_sum_bf16(g, x.recv, n, MT_LOC_HOST);
    u16_unstage(&x, buf, n);
    return;
  }
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, as_count(n), MPI_UINT16_T, mt_comm_bf16_sum_op(), g->comm));
  count(g, t0, bytes);
}

/* the dp engine's gradient reductions in bf16 (parallel.grad_reduce_dtype):
 * non-blocking, each addition of two ranks' parts rounded to bf16 */
void mt_iallreduce_sum_bf16(mt_group *g, mt_bf16 *buf, size_t n, mt_loc loc, mt_request *r) {
  req_init(r, g);
  const double bytes = mt_bytes_allreduce(n * sizeof(mt_bf16), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_REDUCE, .bytes = bytes, .loc = loc, .req = r) ||
      g->size == 1)
    return;
  if (direct(g, loc)) {
    DIRECT_START(g, r, bytes, g_direct->allreduce(g, buf, n, MT_DT_BF16, MT_RED_SUM));
    return;
  }
  if (loc == MT_LOC_DEVICE) {
    u16_staged x = u16_stage(g, buf, n, buf, n, 0);
    mt_iallreduce_sum_bf16(g, x.recv, n, MT_LOC_HOST, r);
    u16_unstage_later(&x, r, buf, n);
    return;
  }
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, as_count(n), MPI_UINT16_T, mt_comm_bf16_sum_op(),
                              g->comm, &r->req));
  count(g, t0, bytes);
  r->active = 1;
}

void mt_ireduce_scatter_sum_bf16(mt_group *g, const mt_bf16 *send, mt_bf16 *recv,
                                 const int *counts, mt_loc loc, mt_request *r) {
  req_init(r, g);
  size_t total = sum_counts(counts, g->size);
  const double bytes = mt_bytes_reduce_scatter(total * sizeof(mt_bf16), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_SCATTER, .bytes = bytes, .loc = loc, .req = r)) return;
  if (g->size > 1 && direct(g, loc)) {
    DIRECT_START(g, r, bytes, g_direct->reduce_scatter(g, send, recv, counts, MT_DT_BF16));
    return;
  }
  if (loc == MT_LOC_DEVICE) {
    size_t mine = (size_t)counts[g->rank];
    u16_staged x = u16_stage(g, send, total, recv, mine, 0);
    mt_ireduce_scatter_sum_bf16(g, x.send, x.recv, counts, MT_LOC_HOST, r);
    u16_unstage_later(&x, r, recv, mine);
    return;
  }
  if (g->size == 1) {
    if (recv != send) memcpy(recv, send, (size_t)counts[0] * sizeof(mt_bf16));
    return;
  }
  double t0 = mt_now();
  MT_MPI_CHECK(MPI_Ireduce_scatter(send, recv, counts, MPI_UINT16_T, mt_comm_bf16_sum_op(), g->comm,
                                   &r->req));
  count(g, t0, bytes);
  r->active = 1;
}

void mt_allgather_dim_u16(mt_group *g, const uint16_t *send, uint16_t *recv, size_t outer,
                          size_t inner, mt_loc loc) {
  size_t n = outer * inner, size = (size_t)g->size;
  const double bytes = mt_bytes_allgather(size * n * sizeof(uint16_t), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_GATHER, .bytes = bytes, .loc = loc)) return;
  if (g->size > 1 && direct(g, loc)) {
    DIRECT_BLOCKING(g, bytes, g_direct->allgather_dim(g, send, recv, outer, inner, MT_DT_BF16));
    return;
  }
  if (loc == MT_LOC_DEVICE) {
    u16_staged x = u16_stage(g, send, n, recv, size * n, 0);
    mt_allgather_dim_u16(g, x.send, x.recv, outer, inner, MT_LOC_HOST);
    u16_unstage(&x, recv, size * n);
    return;
  }
  if (g->size == 1) {
    if (recv != send) memcpy(recv, send, n * sizeof(uint16_t));
    return;
  }
  double t0 = mt_now();
  /* one rank's slice inside recv, as allgather_dim_host lays it out */
  MPI_Datatype slice = block_type(outer, inner, size, MPI_UINT16_T, sizeof(uint16_t));
  MT_MPI_CHECK(MPI_Allgather(send, as_count(n), MPI_UINT16_T, recv, 1, slice, g->comm));
  MPI_Type_free(&slice);
  count(g, t0, bytes);
}

void mt_alltoall_dim_u16(mt_group *g, const uint16_t *send, uint16_t *recv, size_t s_outer,
                         size_t s_inner, size_t r_outer, size_t r_inner, mt_loc loc) {
  size_t size = (size_t)g->size, n = size * s_outer * s_inner;
  if (s_outer * s_inner != r_outer * r_inner)
    mt_die("mt_alltoall_dim_u16: blocks of %zu x %zu and %zu x %zu elements differ", s_outer,
           s_inner, r_outer, r_inner);
  const double bytes = mt_bytes_alltoall(n * sizeof(uint16_t), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_ALLTOALL, .bytes = bytes, .loc = loc)) return;
  if (g->size > 1 && direct(g, loc)) {
    DIRECT_BLOCKING(g, bytes, g_direct->alltoall_dim(g, send, recv, s_outer, s_inner, r_outer,
                                                     r_inner, MT_DT_BF16));
    return;
  }
  if (loc == MT_LOC_DEVICE) {
    u16_staged x = u16_stage(g, send, n, recv, n, 0);
    mt_alltoall_dim_u16(g, x.send, x.recv, s_outer, s_inner, r_outer, r_inner, MT_LOC_HOST);
    u16_unstage(&x, recv, n);
    return;
  }
  if (g->size == 1) { /* one block: the views are the same buffer layout */
    if (recv != send) memcpy(recv, send, n * sizeof(uint16_t));
    return;
  }
  double t0 = mt_now();
  MPI_Datatype st = block_type(s_outer, s_inner, size, MPI_UINT16_T, sizeof(uint16_t));
  MPI_Datatype rt = block_type(r_outer, r_inner, size, MPI_UINT16_T, sizeof(uint16_t));
  MT_MPI_CHECK(MPI_Alltoall(send, 1, st, recv, 1, rt, g->comm));
  MPI_Type_free(&st);
  MPI_Type_free(&rt);
  count(g, t0, bytes);
}

/* the ring of reduce_scatter_dim_host on bf16: each addition rounded */
void mt_reduce_scatter_dim_bf16(mt_group *g, const mt_bf16 *send, mt_bf16 *recv, size_t outer,
                                size_t inner, mt_bf16 *scratch, mt_loc loc) {
  size_t n = outer * inner, size = (size_t)g->size;
  const double bytes = mt_bytes_reduce_scatter(size * n * sizeof(mt_bf16), g->size);
  if (OTHER_BACKEND(g, .kind = MT_COLL_SCATTER, .bytes = bytes, .loc = loc)) return;
  if (g->size > 1 && direct(g, loc)) { /* no scratch: the backend reduces */
    DIRECT_BLOCKING(g, bytes,
                    g_direct->reduce_scatter_dim(g, send, recv, outer, inner, MT_DT_BF16));
    return;
  }
  if (loc == MT_LOC_DEVICE) { /* the ring's scratch on the host too */
    u16_staged x = u16_stage(g, send, size * n, recv, n, 2 * n);
    mt_reduce_scatter_dim_bf16(g, x.send, x.recv, outer, inner, x.recv + n, MT_LOC_HOST);
    u16_unstage(&x, recv, n);
    return;
  }
  if (g->size == 1) {
    if (recv != send) memcpy(recv, send, n * sizeof(mt_bf16));
    return;
  }
  double t0 = mt_now();
  int r = g->rank, next = (r + 1) % g->size, prev = (r + g->size - 1) % g->size;
  MPI_Datatype block;
  MT_MPI_CHECK(MPI_Type_vector(as_count(outer), as_count(inner), as_count(size * inner),
                               MPI_UINT16_T, &block));
  MT_MPI_CHECK(MPI_Type_commit(&block));
  mt_bf16 *sum_out = scratch, *sum_in = scratch + n;
  for (int s = 0; s < g->size - 1; s++) {
    size_t b_recv = (size_t)((r - s - 2 + 2 * g->size) % g->size);
    if (s == 0) {
      size_t b_send = (size_t)((r - 1 + g->size) % g->size);
      MT_MPI_CHECK(MPI_Sendrecv(send + b_send * inner, 1, block, next, 0, sum_in, as_count(n),
                                MPI_UINT16_T, prev, 0, g->comm, MPI_STATUS_IGNORE));
    } else {
      MT_MPI_CHECK(MPI_Sendrecv(sum_out, as_count(n), MPI_UINT16_T, next, 0, sum_in, as_count(n),
                                MPI_UINT16_T, prev, 0, g->comm, MPI_STATUS_IGNORE));
    }
    mt_bf16 *dst = s == g->size - 2 ? recv : sum_out; /* the last step: b_recv == r */
    for (size_t o = 0; o < outer; o++) {
      const mt_bf16 *x = sum_in + o * inner, *y = send + (o * size + b_recv) * inner;
      mt_bf16 *d = dst + o * inner;
      for (size_t i = 0; i < inner; i++)
        d[i] = mt_bf16_from_f32(mt_bf16_to_f32(x[i]) + mt_bf16_to_f32(y[i]));
    }
  }
  MPI_Type_free(&block);
  count(g, t0, bytes);
}

void mt_wait(mt_request *r) {
  if (!r->active) return;
  if (r->vbuf) {
    mt_comm_virtual_wait(r);
    return;
  }
  if (r->direct) {
    g_direct->quiesce();
    g_direct->wait(r->direct);
    r->direct = NULL;
    r->active = 0;
    return;
  }
  double t0 = mt_now();
  MT_MPI_CHECK(wait_request(&r->req, MPI_STATUS_IGNORE));
  r->g->seconds += mt_now() - t0;
  req_finish(r);
}

void mt_progress(mt_request *r) {
  if (!r->active) return;
  if (r->vbuf) {
    mt_comm_virtual_progress(r);
    return;
  }
  if (r->direct) {
    if (g_direct->done(r->direct)) {
      r->direct = NULL;
      r->active = 0;
    }
    return;
  }
  int done = 0;
  MT_MPI_CHECK(MPI_Test(&r->req, &done, MPI_STATUS_IGNORE));
  if (done) req_finish(r);
}

/* ------------------------------------------------------------------ */
/* point-to-point (pipeline stages)                                    */

/* point-to-point goes direct when the backend has a channel for (peer, tag)
 * (its own communicators: also in a group whose collectives are staged) */
int mt_group_p2p_direct(const mt_group *g, int peer, int tag) {
  return g_direct && g->direct_state && g_direct->p2p_ok(g, peer, tag);
}

static int direct_p2p(const mt_group *g, int peer, int tag, mt_loc loc) {
  return loc == MT_LOC_DEVICE && mt_group_p2p_direct(g, peer, tag);
}

void mt_isend_f32(mt_group *g, const float *buf, size_t n, int peer, int tag, mt_loc loc,
                  mt_request *r) {
  req_init(r, g);
  const double bytes = (double)n * sizeof(float);
  if (OTHER_BACKEND(g, .kind = MT_COLL_SEND, .bytes = bytes, .loc = loc, .peer = peer, .tag = tag,
                    .req = r))
    return;
  if (direct_p2p(g, peer, tag, loc)) {
    DIRECT_START(g, r, bytes, g_direct->send(g, buf, n, peer, tag));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  float *h = stage(loc, buf, n * sizeof(float), 1);
  MT_MPI_CHECK(MPI_Isend(h, as_count(n), MPI_FLOAT, peer, tag, g->comm, &r->req));
  req_stage(r, loc, h, NULL, NULL, 0); /* freed at the wait, nothing goes back */
  r->active = 1;
  count_p2p(g, t0, bytes);
}

void mt_irecv_f32(mt_group *g, float *buf, size_t n, int peer, int tag, mt_loc loc,
                  mt_request *r) {
  req_init(r, g);
  if (OTHER_BACKEND(g, .kind = MT_COLL_RECV, .bytes = 0.0, .loc = loc, .peer = peer, .tag = tag,
                    .req = r))
    return;
  if (direct_p2p(g, peer, tag, loc)) {
    DIRECT_START(g, r, 0.0, g_direct->recv(g, buf, n, peer, tag));
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  float *h = stage(loc, buf, n * sizeof(float), 0);
  MT_MPI_CHECK(MPI_Irecv(h, as_count(n), MPI_FLOAT, peer, tag, g->comm, &r->req));
  req_stage(r, loc, h, h, buf, n * sizeof(float));
  r->active = 1;
  count_p2p(g, t0, 0.0);
}

void mt_sendrecv_f32(mt_group *g, const float *send, float *recv, size_t n, int peer, int tag,
                     mt_loc loc) {
  const double bytes = (double)n * sizeof(float);
  if (OTHER_BACKEND(g, .kind = MT_COLL_SENDRECV, .bytes = bytes, .loc = loc, .peer = peer,
                    .tag = tag))
    return;
  if (direct_p2p(g, peer, tag, loc)) {
    /* both directions issued together (the backend pairs them in one group) */
    g_direct->quiesce();
    void *hr = g_direct->recv(g, recv, n, peer, tag);
    void *hs = g_direct->send(g, send, n, peer, tag);
    g_direct->wait(hs);
    g_direct->wait(hr);
    count_direct(g, bytes);
    g->device_direct++; /* two device calls */
    g_direct_calls++;
    return;
  }
  double t0 = mt_now();
  staged_call(g, loc);
  float *hs = stage(loc, send, n * sizeof(float), 1);
  float *hr = stage(loc, recv, n * sizeof(float), 0);
  MPI_Request q[2];
  MT_MPI_CHECK(MPI_Irecv(hr, as_count(n), MPI_FLOAT, peer, tag, g->comm, &q[0]));
  MT_MPI_CHECK(MPI_Isend(hs, as_count(n), MPI_FLOAT, peer, tag, g->comm, &q[1]));
  MT_MPI_CHECK(wait_request(&q[0], MPI_STATUS_IGNORE));
  MT_MPI_CHECK(wait_request(&q[1], MPI_STATUS_IGNORE));
  unstage(loc, (void *)send, hs, 0, 0);
  unstage(loc, recv, hr, n * sizeof(float), 1);
  count_p2p(g, t0, bytes);
}
