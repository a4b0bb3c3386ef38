/* comm's direct path for device buffers (what NCCL serves on a GPU), with
 * a stand-in direct backend: its "device memory" is host memory, and it
 * moves data as nccl.c does (equal parts straight through; uneven parts
 * padded with mt_copy_parts; sequence-parallel blocks made rank-major with
 * mt_permute_dim), with MPI in place of NCCL. Checks, on 2 and 4 ranks:
 *   - every device-buffer call of a group marked direct goes to the backend
 *     (and never through host staging), and of an unmarked group through
 *     staging (never to the backend): the dispatch;
 *   - results equal the host path's, for equal and uneven parts and for
 *     the strided (outer > 1) layouts: the layout helpers nccl.c uses;
 *   - bytes and calls counted on the group as on the host path;
 *   - non-blocking requests finish through mt_wait and through mt_progress;
 *     the backend's quiesce runs before every timed wait;
 *   - point-to-point goes direct only for the (peer, tag) channels the
 *     backend has (here: the pipeline's tags), others are staged;
 *   - the all-to-alls (along a dim, of variable parts) and the all-gather of
 *     variable parts go direct too, and each group counts how its device
 *     calls travelled;
 *   - the nine 16-bit calls (bf16 on the backend's element type MT_DT_BF16)
 *     the same way: see run_group16.
 * Values are small multiples of 1/4, so every sum is exact in any order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_check.h"

/* ------------------------------------------------------------------ */
/* the stand-in device backend                                         */

static void to_host(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void to_device(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void copy2d(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                   size_t width, size_t rows) {
  (void)ctx;
  for (size_t r = 0; r < rows; r++)
    memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
}

typedef struct {
  MPI_Request req; /* MPI_REQUEST_NULL: finished at launch */
} handle;

static long g_quiesce, g_waits;

static void *finished(void) {
  handle *h = calloc(1, sizeof *h);
  h->req = MPI_REQUEST_NULL;
  return h;
}

/* the element type's MPI type (bf16 moves as 16-bit words) and its sum */
static MPI_Datatype mpi_type(mt_dtype t) {
  return t == MT_DT_F64 ? MPI_DOUBLE : t == MT_DT_BF16 ? MPI_UINT16_T : MPI_FLOAT;
}
static MPI_Op mpi_sum(mt_dtype t) { /* NCCL's bf16 sum: comm's host one */
  return t == MT_DT_BF16 ? mt_comm_bf16_sum_op() : MPI_SUM;
}

static void *sa_allreduce(mt_group *g, void *buf, size_t n, mt_dtype t, mt_redop op) {
  MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(t), op == MT_RED_MAX ? MPI_MAX : mpi_sum(t),
                g->comm);
  return finished();
}

static void *sa_reduce_scatter(mt_group *g, const void *send, void *recv, const int *counts,
                               mt_dtype t) {
  int n = g->size;
  size_t eq = mt_parts_equal(counts, NULL, n), es = mt_dtype_bytes(t);
  if (eq) {
    MPI_Reduce_scatter_block(send, recv, (int)eq, mpi_type(t), mpi_sum(t), g->comm);
    return finished();
  }
  size_t pitch = mt_parts_largest(counts, n);
  int *displs = malloc((size_t)n * sizeof(int));
  for (int q = 0, off = 0; q < n; q++) displs[q] = off, off += counts[q];
  char *ws = calloc((size_t)n * pitch + pitch, es), *sum = ws + (size_t)n * pitch * es;
  mt_copy_parts((void *)send, ws, pitch, counts, displs, n, es, 1, copy2d, NULL);
  MPI_Reduce_scatter_block(ws, sum, (int)pitch, mpi_type(t), mpi_sum(t), g->comm);
  memcpy(recv, sum, (size_t)counts[g->rank] * es);
  free(ws);
  free(displs);
  return finished();
}

static void *sa_allgatherv(mt_group *g, const void *send, void *recv, const int *counts,
                           const int *displs, mt_dtype t) {
  int n = g->size, r = g->rank;
  size_t eq = mt_parts_equal(counts, displs, n), es = mt_dtype_bytes(t);
  MPI_Datatype mt = mpi_type(t);
  if (eq) {
    if (send) MPI_Allgather(send, (int)eq, mt, recv, (int)eq, mt, g->comm);
    else MPI_Allgather(MPI_IN_PLACE, 0, mt, recv, (int)eq, mt, g->comm);
    return finished();
  }
  size_t pitch = mt_parts_largest(counts, n);
  char *ws = calloc((size_t)n * pitch, es);
  memcpy(ws + (size_t)r * pitch * es, send ? send : (const char *)recv + (size_t)displs[r] * es,
         (size_t)counts[r] * es);
  MPI_Allgather(MPI_IN_PLACE, 0, mt, ws, (int)pitch, mt, g->comm);
  mt_copy_parts(recv, ws, pitch, counts, displs, n, es, 0, copy2d, NULL);
  free(ws);
  return finished();
}

static void *sa_allgather_dim(mt_group *g, const void *send, void *recv, size_t outer,
                              size_t inner, mt_dtype t) {
  size_t n = outer * inner, es = mt_dtype_bytes(t);
  if (outer == 1) {
    MPI_Allgather(send, (int)n, mpi_type(t), recv, (int)n, mpi_type(t), g->comm);
    return finished();
  }
  void *ws = calloc((size_t)g->size * n, es);
  MPI_Allgather(send, (int)n, mpi_type(t), ws, (int)n, mpi_type(t), g->comm);
  mt_permute_dim(recv, ws, outer, inner, g->size, es, 0, copy2d, NULL);
  free(ws);
  return finished();
}

static void *sa_reduce_scatter_dim(mt_group *g, const void *send, void *recv, size_t outer,
                                   size_t inner, mt_dtype t) {
  size_t n = outer * inner, es = mt_dtype_bytes(t);
  if (outer == 1) {
    MPI_Reduce_scatter_block(send, recv, (int)n, mpi_type(t), mpi_sum(t), g->comm);
    return finished();
  }
  void *ws = calloc((size_t)g->size * n, es);
  mt_permute_dim((void *)send, ws, outer, inner, g->size, es, 1, copy2d, NULL);
  MPI_Reduce_scatter_block(ws, recv, (int)n, mpi_type(t), mpi_sum(t), g->comm);
  free(ws);
  return finished();
}

static void *sa_alltoallv(mt_group *g, const void *send, const size_t *send_counts, void *recv,
                          const size_t *recv_counts, mt_dtype t) {
  int n = g->size, *c = calloc(4 * (size_t)n, sizeof(int)), *sd = c + n, *rc = c + 2 * n,
      *rd = c + 3 * n;
  for (int q = 0, a = 0, b = 0; q < n; q++) {
    c[q] = (int)send_counts[q], sd[q] = a, a += c[q];
    rc[q] = (int)recv_counts[q], rd[q] = b, b += rc[q];
  }
  MPI_Alltoallv(send, c, sd, mpi_type(t), recv, rc, rd, mpi_type(t), g->comm);
  free(c);
  return finished();
}

/* as nccl.c: blocks made rank-major, exchanged, laid out again */
static void *sa_alltoall_dim(mt_group *g, const void *send, void *recv, size_t s_outer,
                             size_t s_inner, size_t r_outer, size_t r_inner, mt_dtype t) {
  int n = g->size;
  size_t blk = s_outer * s_inner, es = mt_dtype_bytes(t);
  char *ws = calloc(2 * (size_t)n * blk, es), *wr = ws + (size_t)n * blk * es;
  mt_permute_dim((void *)send, ws, s_outer, s_inner, n, es, 1, copy2d, NULL);
  MPI_Alltoall(ws, (int)blk, mpi_type(t), wr, (int)blk, mpi_type(t), g->comm);
  mt_permute_dim(recv, wr, r_outer, r_inner, n, es, 0, copy2d, NULL);
  free(ws);
  return finished();
}

static void *sa_send(mt_group *g, const void *buf, size_t n, mt_dtype t, int peer, int tag) {
  handle *h = calloc(1, sizeof *h);
  MPI_Isend(buf, (int)n, mpi_type(t), peer, tag, g->comm, &h->req);
  return h;
}

static void *sa_recv(mt_group *g, void *buf, size_t n, mt_dtype t, int peer, int tag) {
  handle *h = calloc(1, sizeof *h);
  MPI_Irecv(buf, (int)n, mpi_type(t), peer, tag, g->comm, &h->req);
  return h;
}

/* channels for the pipeline's tags only */
static int sa_p2p_ok(const mt_group *g, int peer, int tag) {
  (void)g, (void)peer;
  return tag == MT_TAG_PP_ACT || tag == MT_TAG_PP_GRAD || tag == MT_TAG_PP_TIED;
}

static int sa_done(void *hv) {
  handle *h = hv;
  int done = 0;
  MPI_Test(&h->req, &done, MPI_STATUS_IGNORE);
  if (done) free(h);
  return done;
}

static void sa_wait(void *hv) {
  handle *h = hv;
  MPI_Wait(&h->req, MPI_STATUS_IGNORE);
  free(h);
  g_waits++;
}

static void sa_quiesce(void) { g_quiesce++; }

static long g_flushes;
static void sa_flush(void) { g_flushes++; }

static const mt_comm_direct g_standin = {
    .name = "stand-in",
    .allreduce = sa_allreduce,
    .reduce_scatter = sa_reduce_scatter,
    .allgatherv = sa_allgatherv,
    .allgather_dim = sa_allgather_dim,
    .reduce_scatter_dim = sa_reduce_scatter_dim,
    .alltoallv = sa_alltoallv,
    .alltoall_dim = sa_alltoall_dim,
    .send = sa_send,
    .recv = sa_recv,
    .p2p_ok = sa_p2p_ok,
    .done = sa_done,
    .wait = sa_wait,
    .quiesce = sa_quiesce,
    .flush = sa_flush,
    .idle = NULL};

/* ------------------------------------------------------------------ */

static void fill(float *x, size_t n, int rank, int salt) {
  for (size_t i = 0; i < n; i++) x[i] = (float)((rank + 1) * 0.5 + (double)(i % 97) * 0.25 + salt);
}

/* one check of a call on host buffers against the same call on "device"
 * buffers of group g: expect_direct says which path the device call must
 * take */
typedef struct {
  long direct, staged;
  double bytes;
  long calls;
} snap;
static snap take(const mt_group *g) {
  snap s = {mt_comm_direct_calls(), mt_comm_staged_calls(), g->bytes, g->calls};
  return s;
}
static void expect_path(const char *what, const mt_group *g, snap before, int expect_direct,
                        long n_calls) {
  long d = mt_comm_direct_calls() - before.direct, s = mt_comm_staged_calls() - before.staged;
  if (expect_direct)
    MT_CHECK(d == n_calls && s == 0, "%s on %s: %ld direct, %ld staged calls (want %ld direct)",
          what, g->name, d, s, n_calls);
  else
    MT_CHECK(d == 0 && s > 0, "%s on %s: %ld direct, %ld staged calls (want staged)", what, g->name,
          d, s);
}

static void run_group(mt_group *g, int expect_direct, size_t N, int salt) {
  const int r = g->rank, n = g->size;
  float *h = calloc(N * n, sizeof(float)), *d = calloc(N * n, sizeof(float));
  float *h2 = calloc(N * n, sizeof(float)), *d2 = calloc(N * n, sizeof(float));
  int *counts = calloc((size_t)n, sizeof(int)), *displs = calloc((size_t)n, sizeof(int));
  parts(N, n, counts, displs);
  char what[96];
  snap s;
  double hb;

  /* all-reduce f32 sum, f32 max, f64 sum */
  fill_both(h, d, N, r, salt);
  s = take(g);
  mt_allreduce(g, h, N, MT_DT_F32, MT_RED_SUM, MT_LOC_HOST);
  hb = g->bytes - s.bytes;
  s = take(g);
  mt_allreduce(g, d, N, MT_DT_F32, MT_RED_SUM, MT_LOC_DEVICE);
  snprintf(what, sizeof what, "allreduce sum N=%zu", N);
  expect_path(what, g, s, expect_direct, 1);
  MT_CHECK(same(h, d, N), "%s: device result differs", what);
  MT_CHECK(g->bytes - s.bytes == hb && g->calls - s.calls == 1, "%s: bytes %g (host %g), calls %ld",
        what, g->bytes - s.bytes, hb, g->calls - s.calls);
  fill_both(h, d, N, r, salt + 1);
  mt_allreduce(g, h, N, MT_DT_F32, MT_RED_MAX, MT_LOC_HOST);
  mt_allreduce(g, d, N, MT_DT_F32, MT_RED_MAX, MT_LOC_DEVICE);
  MT_CHECK(same(h, d, N), "allreduce max: device result differs");
  double hd[3] = {r + 0.25, 2.0 * r, -1.0}, dd[3];
  memcpy(dd, hd, sizeof hd);
  mt_allreduce(g, hd, 3, MT_DT_F64, MT_RED_SUM, MT_LOC_HOST);
  mt_allreduce(g, dd, 3, MT_DT_F64, MT_RED_SUM, MT_LOC_DEVICE);
  MT_CHECK(!memcmp(hd, dd, sizeof hd), "allreduce f64: device result differs");

  /* reduce-scatter and in-place all-gather over the registry's parts */
  fill_both(h, d, N, r, salt + 2);
  s = take(g);
  mt_reduce_scatter(g, h, h2, counts, MT_DT_F32, MT_LOC_HOST);
  hb = g->bytes - s.bytes;
  s = take(g);
  mt_reduce_scatter(g, d, d2, counts, MT_DT_F32, MT_LOC_DEVICE);
  snprintf(what, sizeof what, "reduce-scatter N=%zu (%s parts)", N,
           N % (size_t)n ? "uneven" : "equal");
  expect_path(what, g, s, expect_direct, 1);
  MT_CHECK(same(h2, d2, (size_t)counts[r]), "%s: device result differs", what);
  MT_CHECK(g->bytes - s.bytes == hb, "%s: bytes %g, host %g", what, g->bytes - s.bytes, hb);
  fill_both(h, d, N, r, salt + 3);
  s = take(g);
  mt_allgatherv(g, NULL, h, counts, displs, MT_DT_F32, MT_LOC_HOST);
  mt_allgatherv(g, NULL, d, counts, displs, MT_DT_F32, MT_LOC_DEVICE);
  snprintf(what, sizeof what, "allgatherv in place N=%zu", N);
  MT_CHECK(same(h, d, N), "%s: device result differs", what);

  /* non-blocking: finished by mt_wait (all-reduce, reduce-scatter) and by
   * mt_progress (all-gather) */
  mt_request rq;
  fill_both(h, d, N, r, salt + 4);
  mt_iallreduce(g, h, N, MT_DT_F32, MT_RED_SUM, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  long q0 = g_quiesce, w0 = g_waits;
  s = take(g);
  mt_iallreduce(g, d, N, MT_DT_F32, MT_RED_SUM, MT_LOC_DEVICE, &rq);
  mt_wait(&rq);
  expect_path("iallreduce", g, s, expect_direct, 1);
  MT_CHECK(same(h, d, N), "iallreduce: device result differs");
  if (expect_direct)
    MT_CHECK(g_quiesce > q0 && g_waits == w0 + 1, "iallreduce: quiesce %ld, waits %ld",
          g_quiesce - q0, g_waits - w0);
  MT_CHECK(!rq.active, "iallreduce: request still active after mt_wait");
  fill_both(h, d, N, r, salt + 5);
  mt_ireduce_scatter(g, h, h2, counts, MT_DT_F32, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  mt_ireduce_scatter(g, d, d2, counts, MT_DT_F32, MT_LOC_DEVICE, &rq);
  mt_wait(&rq);
  MT_CHECK(same(h2, d2, (size_t)counts[r]), "ireduce_scatter: device result differs");
  fill_both(h2, d2, (size_t)counts[r], r, salt + 6);
  mt_iallgatherv(g, h2, h, counts, displs, MT_DT_F32, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  mt_iallgatherv(g, d2, d, counts, displs, MT_DT_F32, MT_LOC_DEVICE, &rq);
  for (int spin = 0; rq.active && spin < 1000000; spin++) mt_progress(&rq);
  MT_CHECK(!rq.active, "iallgatherv: mt_progress never finished the request");
  MT_CHECK(same(h, d, N), "iallgatherv: device result differs");

  /* along a dim: outer 1 (contiguous) and outer 4 (strided) */
  for (size_t outer = 1; outer <= 4; outer += 3) {
    const size_t inner = 25;
    float *scratch = calloc(2 * outer * inner, sizeof(float));
    fill_both(h, d, outer * inner * n, r, salt + 7);
    s = take(g);
    mt_reduce_scatter_dim(g, h, h2, outer, inner, scratch, MT_DT_F32, MT_LOC_HOST);
    hb = g->bytes - s.bytes;
    s = take(g);
    mt_reduce_scatter_dim(g, d, d2, outer, inner, scratch, MT_DT_F32, MT_LOC_DEVICE);
    snprintf(what, sizeof what, "reduce_scatter_dim outer=%zu", outer);
    expect_path(what, g, s, expect_direct, 1);
    MT_CHECK(same(h2, d2, outer * inner), "%s: device result differs", what);
    MT_CHECK(g->bytes - s.bytes == hb, "%s: bytes %g, host %g", what, g->bytes - s.bytes, hb);
    fill_both(h2, d2, outer * inner, r, salt + 8);
    mt_allgather_dim(g, h2, h, outer, inner, MT_DT_F32, MT_LOC_HOST);
    mt_allgather_dim(g, d2, d, outer, inner, MT_DT_F32, MT_LOC_DEVICE);
    MT_CHECK(same(h, d, outer * inner * n), "allgather_dim outer=%zu: device result differs", outer);
    free(scratch);
  }

  /* all-to-all along a dim (Ulysses): (outer, size, inner) both ways */
  for (size_t outer = 1; outer <= 3; outer += 2) {
    const size_t inner = 12, blk = outer * inner, tot = blk * (size_t)n;
    fill_both(h, d, tot, r, salt + 9);
    mt_alltoall_dim(g, h, h2, outer, inner, 2 * outer, inner / 2, MT_DT_F32, MT_LOC_HOST);
    long dev0 = g->device_direct + g->device_staged;
    s = take(g);
    mt_alltoall_dim(g, d, d2, outer, inner, 2 * outer, inner / 2, MT_DT_F32, MT_LOC_DEVICE);
    snprintf(what, sizeof what, "alltoall_dim outer=%zu", outer);
    expect_path(what, g, s, expect_direct, 1);
    MT_CHECK(same(h2, d2, tot), "%s: device result differs", what);
    MT_CHECK(g->device_direct + g->device_staged == dev0 + 1 &&
                 (expect_direct ? g->device_staged : g->device_direct) == 0,
             "%s: the group counted %ld direct, %ld staged device calls", what, g->device_direct,
             g->device_staged);
  }
  /* all-to-all and all-gather of variable parts (MoE dispatch, etp) */
  {
    size_t *sc = calloc(3 * (size_t)n, sizeof(size_t)), *rc = sc + n, *gc = sc + 2 * n;
    size_t st = 0, rt = 0, gt = 0;
    for (int q = 0; q < n; q++) {
      sc[q] = (size_t)((r + 2 * q) % 5) * 3; /* what r sends q; q sends r (q + 2r) % 5 * 3 */
      rc[q] = (size_t)((q + 2 * r) % 5) * 3;
      gc[q] = (size_t)(q + 1) * 7;
      st += sc[q], rt += rc[q], gt += gc[q];
    }
    fill_both(h, d, st, r, salt + 10);
    mt_alltoallv(g, h, sc, h2, rc, MT_DT_F32, MT_LOC_HOST);
    s = take(g);
    mt_alltoallv(g, d, sc, d2, rc, MT_DT_F32, MT_LOC_DEVICE);
    expect_path("alltoallv", g, s, expect_direct, 1);
    MT_CHECK(same(h2, d2, rt), "alltoallv: device result differs");
    fill_both(h, d, gc[r], r, salt + 11);
    mt_allgatherv_packed(g, h, h2, gc, MT_DT_F32, MT_LOC_HOST);
    s = take(g);
    mt_allgatherv_packed(g, d, d2, gc, MT_DT_F32, MT_LOC_DEVICE);
    expect_path("allgatherv (variable parts)", g, s, expect_direct, 1);
    MT_CHECK(same(h2, d2, gt), "allgatherv (variable parts): device result differs");
    free(sc);
  }
  free(h), free(d), free(h2), free(d2), free(counts), free(displs);
}

/* ---- the 16-bit calls (bf16 activations, bf16 gradient reductions) ----
 * Each of the nine on "device" buffers against the same call on host
 * buffers: the path (direct on a direct group, never staged; staged
 * elsewhere), the bytes and calls counted, and the result compared bit for
 * bit. Moves carry bits, so their bits must agree. The sums add values
 * k/4 below 16 (fill16): over at most 4 ranks every partial sum is a
 * multiple of 1/4 below 64, 8 significant bits, exact in bf16, so the
 * stand-in's reduction order (MPI_Reduce_scatter_block over padded or
 * rank-major blocks, as nccl.c's NCCL calls) cannot change a bit of what
 * the host path's (MPI_Reduce_scatter, the ring of the dim form) gives.
 * The all-reduce also runs on values whose sums round (fill16_rounded):
 * there the stand-in reduces as the host path does (MPI_Allreduce with the
 * same bf16 sum), so the bits must still agree, and a backend that summed
 * anything but bf16 (fp32 words, no rounding) would not. */

static void fill16(uint16_t *x, size_t n, int rank, int salt) {
  for (size_t i = 0; i < n; i++)
    x[i] = mt_bf16_from_f32((float)((rank + 1) * 0.5 + (double)((i * 7 + (size_t)salt) % 41) * 0.25));
}

/* 8 significant bits each, whose sums need more: rounded in every order */
static void fill16_rounded(uint16_t *x, size_t n, int rank) {
  for (size_t i = 0; i < n; i++)
    x[i] = mt_bf16_from_f32((float)(1.0 + (double)((i + 3 * (size_t)rank) % 127 + 1) / 128.0) *
                            (float)(1 << (i % 3)));
}

/* the device call after snapshot s against the host call (its result and
 * the bytes it counted, hb) */
static void check16(const char *what, const mt_group *g, snap s, double hb, int expect_direct,
                    const uint16_t *host, const uint16_t *dev, size_t n) {
  expect_path(what, g, s, expect_direct, 1);
  MT_CHECK(!memcmp(host, dev, n * sizeof(uint16_t)), "%s: device result differs", what);
  MT_CHECK(g->bytes - s.bytes == hb && g->calls - s.calls == 1,
           "%s: bytes %g (host %g), calls %ld", what, g->bytes - s.bytes, hb, g->calls - s.calls);
}

static void run_group16(mt_group *g, int expect_direct, size_t N, int salt) {
  const int r = g->rank, n = g->size;
  const size_t cap = N * (size_t)n;
  uint16_t *h = calloc(cap, 2), *d = calloc(cap, 2), *h2 = calloc(cap, 2), *d2 = calloc(cap, 2);
  int *counts = calloc((size_t)n, sizeof(int)), *displs = calloc((size_t)n, sizeof(int));
  parts(N, n, counts, displs);
  const char *shape = N % (size_t)n ? "uneven" : "equal";
  char what[96];
  snap s;
  double hb;
  mt_request rq;

  /* all-reduce: exact sums, then rounded ones */
  for (int exact = 1; exact >= 0; exact--) {
    if (exact) fill16(h, N, r, salt);
    else fill16_rounded(h, N, r);
    memcpy(d, h, N * 2);
    s = take(g);
    mt_allreduce(g, h, N, MT_DT_BF16, MT_RED_SUM, MT_LOC_HOST);
    hb = g->bytes - s.bytes;
    s = take(g);
    mt_allreduce(g, d, N, MT_DT_BF16, MT_RED_SUM, MT_LOC_DEVICE);
    snprintf(what, sizeof what, "allreduce bf16 N=%zu (%s sums)", N, exact ? "exact" : "rounded");
    check16(what, g, s, hb, expect_direct, h, d, N);
  }

  /* non-blocking all-reduce and reduce-scatter (the dp engine's), by mt_wait */
  fill16(h, N, r, salt + 1);
  memcpy(d, h, N * 2);
  s = take(g);
  mt_iallreduce(g, h, N, MT_DT_BF16, MT_RED_SUM, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  hb = g->bytes - s.bytes;
  long q0 = g_quiesce, w0 = g_waits;
  s = take(g);
  mt_iallreduce(g, d, N, MT_DT_BF16, MT_RED_SUM, MT_LOC_DEVICE, &rq);
  mt_wait(&rq);
  snprintf(what, sizeof what, "iallreduce bf16 N=%zu", N);
  check16(what, g, s, hb, expect_direct, h, d, N);
  MT_CHECK(!rq.active, "%s: request still active after mt_wait", what);
  if (expect_direct)
    MT_CHECK(g_quiesce > q0 && g_waits == w0 + 1, "%s: quiesce %ld, waits %ld", what,
             g_quiesce - q0, g_waits - w0);
  fill16(h, N, r, salt + 2);
  memcpy(d, h, N * 2);
  s = take(g);
  mt_ireduce_scatter(g, h, h2, counts, MT_DT_BF16, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  hb = g->bytes - s.bytes;
  s = take(g);
  mt_ireduce_scatter(g, d, d2, counts, MT_DT_BF16, MT_LOC_DEVICE, &rq);
  mt_wait(&rq);
  snprintf(what, sizeof what, "ireduce_scatter bf16 N=%zu (%s parts)", N, shape);
  check16(what, g, s, hb, expect_direct, h2, d2, (size_t)counts[r]);

  /* all-gathers of the registry's parts: in place, and non-blocking
   * finished by mt_progress */
  fill16(h, N, r, salt + 3);
  memcpy(d, h, N * 2);
  s = take(g);
  mt_allgatherv(g, NULL, h, counts, displs, MT_DT_BF16, MT_LOC_HOST);
  hb = g->bytes - s.bytes;
  s = take(g);
  mt_allgatherv(g, NULL, d, counts, displs, MT_DT_BF16, MT_LOC_DEVICE);
  snprintf(what, sizeof what, "allgatherv in place u16 N=%zu (%s parts)", N, shape);
  check16(what, g, s, hb, expect_direct, h, d, N);
  fill16(h2, (size_t)counts[r], r, salt + 4);
  memcpy(d2, h2, (size_t)counts[r] * 2);
  s = take(g);
  mt_iallgatherv(g, h2, h, counts, displs, MT_DT_BF16, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  hb = g->bytes - s.bytes;
  s = take(g);
  mt_iallgatherv(g, d2, d, counts, displs, MT_DT_BF16, MT_LOC_DEVICE, &rq);
  for (int spin = 0; rq.active && spin < 1000000; spin++) mt_progress(&rq);
  snprintf(what, sizeof what, "iallgatherv u16 N=%zu (%s parts)", N, shape);
  MT_CHECK(!rq.active, "%s: mt_progress never finished the request", what);
  check16(what, g, s, hb, expect_direct, h, d, N);

  /* along a dim (sequence parallelism): outer 1 (contiguous), 4 (strided) */
  for (size_t outer = 1; outer <= 4; outer += 3) {
    const size_t inner = 25, part = outer * inner;
    uint16_t *scratch = calloc(2 * part, 2);
    fill16(h, part * n, r, salt + 5);
    memcpy(d, h, part * n * 2);
    s = take(g);
    mt_reduce_scatter_dim(g, h, h2, outer, inner, scratch, MT_DT_BF16, MT_LOC_HOST);
    hb = g->bytes - s.bytes;
    s = take(g);
    mt_reduce_scatter_dim(g, d, d2, outer, inner, scratch, MT_DT_BF16, MT_LOC_DEVICE);
    snprintf(what, sizeof what, "reduce_scatter_dim bf16 outer=%zu", outer);
    check16(what, g, s, hb, expect_direct, h2, d2, part);
    fill16(h2, part, r, salt + 6);
    memcpy(d2, h2, part * 2);
    s = take(g);
    mt_allgather_dim(g, h2, h, outer, inner, MT_DT_BF16, MT_LOC_HOST);
    hb = g->bytes - s.bytes;
    s = take(g);
    mt_allgather_dim(g, d2, d, outer, inner, MT_DT_BF16, MT_LOC_DEVICE);
    snprintf(what, sizeof what, "allgather_dim u16 outer=%zu", outer);
    check16(what, g, s, hb, expect_direct, h, d, part * n);
    free(scratch);
  }

  /* all-to-all along a dim (Ulysses): (outer, size, inner) both ways */
  for (size_t outer = 1; outer <= 3; outer += 2) {
    const size_t inner = 12, tot = outer * inner * (size_t)n;
    fill16(h, tot, r, salt + 7);
    memcpy(d, h, tot * 2);
    s = take(g);
    mt_alltoall_dim(g, h, h2, outer, inner, 2 * outer, inner / 2, MT_DT_BF16, MT_LOC_HOST);
    hb = g->bytes - s.bytes;
    s = take(g);
    mt_alltoall_dim(g, d, d2, outer, inner, 2 * outer, inner / 2, MT_DT_BF16, MT_LOC_DEVICE);
    snprintf(what, sizeof what, "alltoall_dim u16 outer=%zu", outer);
    check16(what, g, s, hb, expect_direct, h2, d2, tot);
  }

  /* all-to-all of variable parts (MoE dispatch), some of them empty */
  size_t *sc = calloc(2 * (size_t)n, sizeof(size_t)), *rc = sc + n, st = 0, rt = 0;
  for (int q = 0; q < n; q++) {
    sc[q] = (size_t)((r + 2 * q) % 5) * 3; /* what r sends q; q sends r (q + 2r) % 5 * 3 */
    rc[q] = (size_t)((q + 2 * r) % 5) * 3;
    st += sc[q], rt += rc[q];
  }
  fill16(h, st, r, salt + 8);
  memcpy(d, h, st * 2);
  s = take(g);
  mt_alltoallv(g, h, sc, h2, rc, MT_DT_BF16, MT_LOC_HOST);
  hb = g->bytes - s.bytes;
  s = take(g);
  mt_alltoallv(g, d, sc, d2, rc, MT_DT_BF16, MT_LOC_DEVICE);
  check16("alltoallv u16", g, s, hb, expect_direct, h2, d2, rt);
  free(sc);
  free(h), free(d), free(h2), free(d2), free(counts), free(displs);
}

/* point-to-point on g: pipeline tags direct when g has backend state,
 * another tag always staged */
static void run_p2p(mt_group *g, int has_channels) {
  const int r = g->rank, n = g->size;
  const size_t N = 777;
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  float *h = calloc(N, sizeof(float)), *d = calloc(N, sizeof(float));
  float *h2 = calloc(N, sizeof(float)), *d2 = calloc(N, sizeof(float));
  const int tags[2] = {MT_TAG_PP_ACT, 5};
  for (int k = 0; k < 2; k++) {
    mt_request s1, r1;
    fill_both(h2, d2, N, r, 20 + k);
    mt_irecv(g, h, N, MT_DT_F32, prev, tags[k], MT_LOC_HOST, &r1);
    mt_isend(g, h2, N, MT_DT_F32, next, tags[k], MT_LOC_HOST, &s1);
    mt_wait(&r1);
    mt_wait(&s1);
    snap s = take(g);
    mt_irecv(g, d, N, MT_DT_F32, prev, tags[k], MT_LOC_DEVICE, &r1);
    mt_isend(g, d2, N, MT_DT_F32, next, tags[k], MT_LOC_DEVICE, &s1);
    for (int spin = 0; r1.active && spin < 1000000; spin++) mt_progress(&r1);
    mt_wait(&r1);
    mt_wait(&s1);
    char what[64];
    snprintf(what, sizeof what, "isend/irecv tag %d", tags[k]);
    expect_path(what, g, s, has_channels && k == 0, 2);
    MT_CHECK(same(h, d, N), "%s: device result differs", what);
    MT_CHECK(g->bytes - s.bytes == (double)N * sizeof(float) && g->calls - s.calls == 2,
          "%s: bytes %g, calls %ld", what, g->bytes - s.bytes, g->calls - s.calls);
  }
  /* exchange in pairs (tied gradients) */
  int partner = n == 1 ? 0 : (r ^ 1) < n ? r ^ 1 : r;
  fill_both(h2, d2, N, r, 30);
  mt_sendrecv(g, h2, h, N, MT_DT_F32, partner, MT_TAG_PP_TIED, MT_LOC_HOST);
  snap s = take(g);
  mt_sendrecv(g, d2, d, N, MT_DT_F32, partner, MT_TAG_PP_TIED, MT_LOC_DEVICE);
  expect_path("sendrecv", g, s, has_channels, 2);
  MT_CHECK(same(h, d, N), "sendrecv: device result differs");
  free(h), free(d), free(h2), free(d2);
}

int main(int argc, char **argv) {
  mt_mesh mesh;
  int world = comm_test_start(&argc, &argv, &mesh);
  mt_comm_device_copy dev = {to_host, to_device};
  mt_comm_set_device_copy(&dev);
  mt_comm_set_direct(&g_standin);
  /* dp: its own "GPU" per rank (direct); world: as if ranks shared one
   * (staged). Backend state on dp only: point-to-point channels there. */
  static int dp_state;
  mesh.dp_g.direct = 1;
  mesh.dp_g.direct_state = &dp_state;
  MT_CHECK(!strcmp(mt_group_device_path(&mesh.dp_g), "stand-in") &&
            !strcmp(mt_group_device_path(&mesh.world), "staged"),
        "device paths: dp %s, world %s", mt_group_device_path(&mesh.dp_g),
        mt_group_device_path(&mesh.world));
  const size_t sizes[2] = {1000, 1001}; /* equal parts on 2 and 4 ranks, then uneven */
  for (int k = 0; k < 2; k++) {
    run_group(&mesh.dp_g, 1, sizes[k], 10 * k);
    run_group(&mesh.world, 0, sizes[k], 10 * k + 3);
    run_group16(&mesh.dp_g, 1, sizes[k], 10 * k);
    run_group16(&mesh.world, 0, sizes[k], 10 * k + 3);
  }
  run_p2p(&mesh.dp_g, 1);
  run_p2p(&mesh.world, 0);
  /* distinct device identifiers (nccl.c's test for a group) */
  char ids[3][48] = {"GPU-a", "GPU-b", "GPU-a"};
  MT_CHECK(mt_comm_ids_distinct(&ids[0][0], 2, 48) && !mt_comm_ids_distinct(&ids[0][0], 3, 48),
        "mt_comm_ids_distinct");
  mt_comm_set_direct(NULL);
  MT_CHECK(!strcmp(mt_group_device_path(&mesh.dp_g), "staged"), "no backend: dp not staged");

  int failed = *mt_check_failures();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (mesh.world.rank == 0)
    printf("%s: %d ranks, %ld calls direct, %ld staged, %ld quiesce\n", failed ? "FAIL" : "ok",
           world, mt_comm_direct_calls(), mt_comm_staged_calls(), g_quiesce);
  mesh.dp_g.direct_state = NULL;
  mt_mesh_destroy(&mesh);
  MPI_Finalize();
  return failed;
}
