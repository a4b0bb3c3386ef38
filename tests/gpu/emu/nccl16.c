/* gpu-emu: comm's 16-bit calls on device buffers over NCCL (nccl.c on the
 * emulated NCCL, whose bf16 reductions add in fp32 and round each partial
 * sum to bf16 as NCCL's do) against the same calls on host buffers (MPI,
 * comm's own bf16 sum). For each of the nine calls, at N = 1000 (equal
 * parts on 2 and 4 ranks) and 1001 (uneven: nccl.c's padded parts), and
 * along a dim with outer 1 and outer > 1 (its rank-major copies):
 *   - the call went to NCCL, none was staged through the host;
 *   - the group counted the host call's bytes;
 *   - the result has the host call's bits. Values are k/4 below 16 on
 *     every rank, so every partial sum over at most 4 ranks is a multiple
 *     of 1/4 below 64 (8 significant bits): exact in bf16 in NCCL's order
 *     and in MPI's alike. On 2 ranks an all-reduce of values whose sum
 *     rounds is compared bit for bit too (one addition: no order), which
 *     checks the rounding itself (to nearest even).
 * The mesh is one tp group of all ranks, one emulated GPU each.
 *
 *   mpirun -n 2|4 gpu_emu_nccl16        (no GPU: "SKIP: ..." and exit 77) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "kernels/kernels.h"

#include "../../check.h"

static const mt_ops *D;
static mt_group *G;

/* what the last host call counted, and what the last device call did */
static double g_host_bytes, g_dev_bytes;
static long g_dev_direct, g_dev_staged;

#define HOST(call)                            \
  do {                                        \
    double b0_ = G->bytes;                    \
    call;                                     \
    g_host_bytes = G->bytes - b0_;            \
  } while (0)
#define DEV(call)                                                     \
  do {                                                                \
    double b0_ = G->bytes;                                            \
    long d0_ = G->device_direct, s0_ = G->device_staged;              \
    call;                                                             \
    g_dev_bytes = G->bytes - b0_;                                     \
    g_dev_direct = G->device_direct - d0_;                            \
    g_dev_staged = G->device_staged - s0_;                            \
  } while (0)

static void fill16(uint16_t *x, size_t n, int rank, int salt) {
  for (size_t i = 0; i < n; i++)
    x[i] = mt_bf16_from_f32((float)((rank + 1) * 0.5 + (double)((i * 7 + (size_t)salt) % 41) * 0.25));
}

/* a device copy of n elements of h (at least one element allocated) */
static uint16_t *up(const uint16_t *h, size_t n) {
  uint16_t *d = D->alloc(MT_MEM_COMM, (n + 1) * sizeof(uint16_t));
  if (n) D->upload(d, h, n * sizeof(uint16_t));
  D->sync(); /* h is read now: the host call changes it next */
  return d;
}

static void down_free(uint16_t *host_dst, uint16_t *d, size_t n, size_t alloc_n) {
  if (n) D->download(host_dst, d, n * sizeof(uint16_t));
  D->free(MT_MEM_COMM, d, (alloc_n + 1) * sizeof(uint16_t));
}

/* the device call's n result elements (dev, freed; alloc_n allocated)
 * against the host call's */
static void check(const char *what, const uint16_t *host, uint16_t *dev, size_t n,
                  size_t alloc_n) {
  uint16_t *got = calloc(n + 1, sizeof(uint16_t));
  down_free(got, dev, n, alloc_n);
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += got[i] != host[i];
  MT_CHECK(bad == 0, "%s: %zu of %zu elements differ from the host path's", what, bad, n);
  MT_CHECK(g_dev_direct == 1 && g_dev_staged == 0, "%s: %ld calls over NCCL, %ld staged", what,
           g_dev_direct, g_dev_staged);
  MT_CHECK(g_dev_bytes == g_host_bytes, "%s: %g bytes counted, the host call %g", what,
           g_dev_bytes, g_host_bytes);
  free(got);
}

static void run(size_t N, int salt) {
  const int r = G->rank, n = G->size;
  const size_t cap = N * (size_t)n;
  uint16_t *h = calloc(cap, 2), *h2 = calloc(cap, 2), *x = calloc(cap, 2);
  uint16_t *d, *d2;
  int *counts = calloc((size_t)n, sizeof(int)), *displs = calloc((size_t)n, sizeof(int));
  for (int q = 0, off = 0; q < n; q++) {
    counts[q] = (int)(N / (size_t)n) + (q < (int)(N % (size_t)n));
    displs[q] = off;
    off += counts[q];
  }
  char what[96];
  mt_request rq;

  fill16(h, N, r, salt);
  d = up(h, N);
  HOST(mt_allreduce(G, h, N, MT_DT_BF16, MT_RED_SUM, MT_LOC_HOST));
  DEV(mt_allreduce(G, d, N, MT_DT_BF16, MT_RED_SUM, MT_LOC_DEVICE));
  snprintf(what, sizeof what, "allreduce bf16 N=%zu", N);
  check(what, h, d, N, N);

  fill16(h, N, r, salt + 1);
  d = up(h, N);
  HOST(mt_iallreduce(G, h, N, MT_DT_BF16, MT_RED_SUM, MT_LOC_HOST, &rq); mt_wait(&rq));
  DEV(mt_iallreduce(G, d, N, MT_DT_BF16, MT_RED_SUM, MT_LOC_DEVICE, &rq); mt_wait(&rq));
  snprintf(what, sizeof what, "iallreduce bf16 N=%zu", N);
  check(what, h, d, N, N);

  fill16(h, N, r, salt + 2);
  d = up(h, N), d2 = up(h2, (size_t)counts[r]);
  HOST(mt_ireduce_scatter(G, h, h2, counts, MT_DT_BF16, MT_LOC_HOST, &rq); mt_wait(&rq));
  DEV(mt_ireduce_scatter(G, d, d2, counts, MT_DT_BF16, MT_LOC_DEVICE, &rq); mt_wait(&rq));
  snprintf(what, sizeof what, "ireduce_scatter bf16 N=%zu", N);
  down_free(x, d, 0, N);
  check(what, h2, d2, (size_t)counts[r], (size_t)counts[r]);

  fill16(h, N, r, salt + 3);
  d = up(h, N);
  HOST(mt_allgatherv(G, NULL, h, counts, displs, MT_DT_BF16, MT_LOC_HOST));
  DEV(mt_allgatherv(G, NULL, d, counts, displs, MT_DT_BF16, MT_LOC_DEVICE));
  snprintf(what, sizeof what, "allgatherv in place u16 N=%zu", N);
  check(what, h, d, N, N);

  fill16(h2, (size_t)counts[r], r, salt + 4);
  d2 = up(h2, (size_t)counts[r]), d = up(h, N);
  HOST(mt_iallgatherv(G, h2, h, counts, displs, MT_DT_BF16, MT_LOC_HOST, &rq); mt_wait(&rq));
  DEV(mt_iallgatherv(G, d2, d, counts, displs, MT_DT_BF16, MT_LOC_DEVICE, &rq); mt_wait(&rq));
  snprintf(what, sizeof what, "iallgatherv u16 N=%zu", N);
  down_free(x, d2, 0, (size_t)counts[r]);
  check(what, h, d, N, N);

  for (size_t outer = 1; outer <= 4; outer += 3) {
    const size_t inner = 25, part = outer * inner, all = part * (size_t)n;
    uint16_t *scratch = calloc(2 * part, 2);
    fill16(h, all, r, salt + 5);
    d = up(h, all), d2 = up(h2, part);
    HOST(mt_reduce_scatter_dim(G, h, h2, outer, inner, scratch, MT_DT_BF16, MT_LOC_HOST));
    DEV(mt_reduce_scatter_dim(G, d, d2, outer, inner, NULL, MT_DT_BF16, MT_LOC_DEVICE));
    snprintf(what, sizeof what, "reduce_scatter_dim bf16 outer=%zu", outer);
    down_free(x, d, 0, all);
    check(what, h2, d2, part, part);
    fill16(h2, part, r, salt + 6);
    d2 = up(h2, part), d = up(h, all);
    HOST(mt_allgather_dim(G, h2, h, outer, inner, MT_DT_BF16, MT_LOC_HOST));
    DEV(mt_allgather_dim(G, d2, d, outer, inner, MT_DT_BF16, MT_LOC_DEVICE));
    snprintf(what, sizeof what, "allgather_dim u16 outer=%zu", outer);
    down_free(x, d2, 0, part);
    check(what, h, d, all, all);
    free(scratch);
  }

  for (size_t outer = 1; outer <= 3; outer += 2) {
    const size_t inner = 12, all = outer * inner * (size_t)n;
    fill16(h, all, r, salt + 7);
    d = up(h, all), d2 = up(h2, all);
    HOST(mt_alltoall_dim(G, h, h2, outer, inner, 2 * outer, inner / 2, MT_DT_BF16, MT_LOC_HOST));
    DEV(mt_alltoall_dim(G, d, d2, outer, inner, 2 * outer, inner / 2, MT_DT_BF16, MT_LOC_DEVICE));
    snprintf(what, sizeof what, "alltoall_dim u16 outer=%zu", outer);
    down_free(x, d, 0, all);
    check(what, h2, d2, all, all);
  }

  /* variable parts, some empty: r sends q ((r + 2q) % 5) * 3 elements */
  size_t *sc = calloc(2 * (size_t)n, sizeof(size_t)), *rc = sc + n, st = 0, rt = 0;
  for (int q = 0; q < n; q++) {
    sc[q] = (size_t)((r + 2 * q) % 5) * 3;
    rc[q] = (size_t)((q + 2 * r) % 5) * 3;
    st += sc[q], rt += rc[q];
  }
  fill16(h, st, r, salt + 8);
  d = up(h, st), d2 = up(h2, rt);
  HOST(mt_alltoallv(G, h, sc, h2, rc, MT_DT_BF16, MT_LOC_HOST));
  DEV(mt_alltoallv(G, d, sc, d2, rc, MT_DT_BF16, MT_LOC_DEVICE));
  down_free(x, d, 0, st);
  check("alltoallv u16", h2, d2, rt, rt);
  free(sc);

  /* on 2 ranks, sums that round: one addition per element, no order */
  if (n == 2) {
    for (size_t i = 0; i < N; i++)
      h[i] = mt_bf16_from_f32((float)(1.0 + (double)((i + 3 * (size_t)r) % 127 + 1) / 128.0));
    d = up(h, N);
    HOST(mt_allreduce(G, h, N, MT_DT_BF16, MT_RED_SUM, MT_LOC_HOST));
    DEV(mt_allreduce(G, d, N, MT_DT_BF16, MT_RED_SUM, MT_LOC_DEVICE));
    snprintf(what, sizeof what, "allreduce bf16 N=%zu, sums rounded", N);
    check(what, h, d, N, N);
  }
  free(h), free(h2), free(x), free(counts), free(displs);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int world = 1, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  mt_log_init(rank);
  mt_check_set_rank(rank);
  char why[256] = "";
  int n_gpu = mt_cuda_device_count(why, sizeof why);
  int skip = n_gpu < 1;
  MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (skip) {
    if (rank == 0) printf("SKIP: no GPU visible: %s\n", why);
    MPI_Finalize();
    return 77;
  }
  mt_mesh mesh;
  mt_err e = {0};
  if (mt_mesh_create(&mesh, world, 1, 1, 1, &e) != 0) {
    fprintf(stderr, "%s\n", e.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int dev = mt_device_for_local_rank(mesh.node.rank, mesh.node.size, n_gpu, NULL);
  if (mt_cuda_init(dev, MT_PRECISION_BF16, &e) != 0) {
    fprintf(stderr, "%s\n", e.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  D = mt_ops_cuda();
  mt_comm_device_copy copy = {D->download, D->upload};
  mt_comm_set_device_copy(&copy);
  mt_cuda_info info;
  mt_cuda_get_info(&info);
  /* the tp group over NCCL; waits order compute after the call (the
   * default of a training run) */
  mt_comm_nccl_opts no = {.device_id = info.uuid, .compute_stream = mt_cuda_stream(),
                          .host_wait = 0, .groups = 1u << MT_G_TP, .p2p = 0};
  if (mt_comm_nccl_init(&mesh, &no, &e) != 0) {
    fprintf(stderr, "%s\n", e.msg);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  G = &mesh.tp_g;
  MT_CHECK(!strcmp(mt_group_device_path(G), "nccl"), "tp's device path: %s (want nccl)",
           mt_group_device_path(G));
  run(1000, 0);
  run(1001, 5);
  MT_CHECK(!strcmp(mt_group_device_traffic(G), "nccl") && G->device_staged == 0,
           "tp's device traffic: %s, %ld calls staged", mt_group_device_traffic(G),
           G->device_staged);

  int failed = *mt_check_failures();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%s: %d ranks, %ld device calls over NCCL, %ld staged; NCCL workspace peak %zu bytes\n",
           failed ? "FAIL" : "ok", world, G->device_direct, G->device_staged,
           mt_comm_nccl_workspace_peak());
  mt_comm_nccl_destroy(&mesh);
  mt_comm_set_device_copy(NULL);
  mt_cuda_shutdown();
  mt_mesh_destroy(&mesh);
  MPI_Finalize();
  return failed ? 1 : 0;
}
