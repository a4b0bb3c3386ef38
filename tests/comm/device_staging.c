/* comm with device buffers: a stand-in device backend (its "device memory"
 * is host memory the test poisons on the host side, and every copy to or
 * from it goes through copy functions that count) registers its copy
 * functions; every collective and point-to-point call handed MT_LOC_DEVICE
 * buffers must give the same results as with host buffers, move data only
 * through those functions, and count the same bytes on the group. A call
 * that read device memory directly would still work here, so the test also
 * checks that each device call made copies in both directions it needs.
 * Also the 16-bit all-to-all (host buffers) against the f32 one, every
 * 16-bit call on device buffers against its host form, and the exchanges
 * of fixed blocks (int32 all-gather and all-to-all, fp64 gather).
 * Run on 2 and 4 ranks (device_staging.sh). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_check.h"

static long g_to_host, g_to_device;
static void to_host(void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
  g_to_host++;
}
static void to_device(void *dst, const void *src, size_t bytes) {
  memcpy(dst, src, bytes);
  g_to_device++;
}

static void fill(float *x, size_t n, int rank, int salt) {
  for (size_t i = 0; i < n; i++) x[i] = (float)((rank + 1) * 0.5 + (double)i * 0.25 + salt);
}

int main(int argc, char **argv) {
  mt_mesh mesh;
  comm_test_start(&argc, &argv, &mesh);
  mt_group *g = &mesh.dp_g;
  const int r = g->rank, n = g->size;
  const size_t N = 1000;
  mt_comm_device_copy dev = {to_host, to_device};
  float *h = calloc(N * n, sizeof(float)), *d = calloc(N * n, sizeof(float));
  float *h2 = calloc(N * n, sizeof(float)), *d2 = calloc(N * n, sizeof(float));
  int *counts = calloc((size_t)n, sizeof(int)), *displs = calloc((size_t)n, sizeof(int));
  parts(N, n, counts, displs);
  /* a device buffer without registered copy functions is refused (not tested: it dies) */
  mt_comm_set_device_copy(&dev);

  /* all-reduce */
  fill_both(h, d, N, r, 0);
  double b0 = g->bytes;
  mt_allreduce(g, h, N, MT_DT_F32, MT_RED_SUM, MT_LOC_HOST);
  double host_bytes = g->bytes - b0;
  long th = g_to_host, td = g_to_device;
  mt_allreduce(g, d, N, MT_DT_F32, MT_RED_SUM, MT_LOC_DEVICE);
  MT_CHECK(same(h, d, N), "allreduce: device result differs");
  MT_CHECK(g->bytes - b0 == 2 * host_bytes, "allreduce: bytes %g, host %g", g->bytes - b0 - host_bytes,
        host_bytes);
  MT_CHECK(g_to_host > th && g_to_device > td, "allreduce: no staging copies");

  /* reduce-scatter */
  fill_both(h, d, N, r, 1);
  mt_reduce_scatter(g, h, h2, counts, MT_DT_F32, MT_LOC_HOST);
  mt_reduce_scatter(g, d, d2, counts, MT_DT_F32, MT_LOC_DEVICE);
  MT_CHECK(same(h2, d2, (size_t)counts[r]), "reduce-scatter: device result differs");

  /* all-gather in place */
  fill_both(h, d, N, r, 2);
  mt_allgatherv(g, NULL, h, counts, displs, MT_DT_F32, MT_LOC_HOST);
  mt_allgatherv(g, NULL, d, counts, displs, MT_DT_F32, MT_LOC_DEVICE);
  MT_CHECK(same(h, d, N), "allgatherv: device result differs");

  /* non-blocking: all-reduce, reduce-scatter, all-gather */
  mt_request rq;
  fill_both(h, d, N, r, 3);
  mt_iallreduce(g, h, N, MT_DT_F32, MT_RED_SUM, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  mt_iallreduce(g, d, N, MT_DT_F32, MT_RED_SUM, MT_LOC_DEVICE, &rq);
  mt_wait(&rq);
  MT_CHECK(same(h, d, N), "iallreduce: device result differs");
  fill_both(h, d, N, r, 4);
  mt_ireduce_scatter(g, h, h2, counts, MT_DT_F32, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  mt_ireduce_scatter(g, d, d2, counts, MT_DT_F32, MT_LOC_DEVICE, &rq);
  mt_wait(&rq);
  MT_CHECK(same(h2, d2, (size_t)counts[r]), "ireduce_scatter: device result differs");
  fill_both(h2, d2, (size_t)counts[r], r, 5);
  mt_iallgatherv(g, h2, h, counts, displs, MT_DT_F32, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  mt_iallgatherv(g, d2, d, counts, displs, MT_DT_F32, MT_LOC_DEVICE, &rq);
  mt_wait(&rq);
  MT_CHECK(same(h, d, N), "iallgatherv: device result differs");

  /* along a dim (sequence parallelism): outer 4, inner 25 per rank */
  const size_t outer = 4, inner = 25;
  float *scratch = calloc(2 * outer * inner, sizeof(float));
  fill_both(h, d, outer * inner * n, r, 6);
  mt_reduce_scatter_dim(g, h, h2, outer, inner, scratch, MT_DT_F32, MT_LOC_HOST);
  mt_reduce_scatter_dim(g, d, d2, outer, inner, scratch, MT_DT_F32, MT_LOC_DEVICE);
  MT_CHECK(same(h2, d2, outer * inner), "reduce_scatter_dim: device result differs");
  fill_both(h2, d2, outer * inner, r, 7);
  mt_allgather_dim(g, h2, h, outer, inner, MT_DT_F32, MT_LOC_HOST);
  mt_allgather_dim(g, d2, d, outer, inner, MT_DT_F32, MT_LOC_DEVICE);
  MT_CHECK(same(h, d, outer * inner * n), "allgather_dim: device result differs");
  /* Ulysses' all-to-all on 16-bit elements (bf16 as bits; host memory
   * only): the elements the f32 form moves, half its bytes counted */
  {
    const size_t ao = 3, ai = 12, tot = ao * ai * (size_t)n;
    uint16_t *us = calloc(2 * tot, sizeof(uint16_t)), *ur = us + tot;
    for (size_t i = 0; i < tot; i++) {
      us[i] = (uint16_t)(r * 4096 + (int)i);
      h2[i] = (float)us[i];
    }
    double f0 = g->bytes;
    mt_alltoall_dim(g, h2, h, ao, ai, 2 * ao, ai / 2, MT_DT_F32, MT_LOC_HOST);
    double u0 = g->bytes;
    mt_alltoall_dim(g, us, ur, ao, ai, 2 * ao, ai / 2, MT_DT_BF16, MT_LOC_HOST);
    int ok = 1;
    for (size_t i = 0; i < tot; i++) ok &= (float)ur[i] == h[i];
    MT_CHECK(ok, "alltoall_dim bf16: the elements differ from the f32 all-to-all's");
    MT_CHECK(2 * (g->bytes - u0) == u0 - f0, "alltoall_dim bf16: bytes %g, f32 %g", g->bytes - u0,
             u0 - f0);
    free(us);
  }

  /* every 16-bit call on device buffers: the host result bit for bit, the
   * same bytes counted, and copies made both ways */
  {
    const size_t outer16 = 3, inner16 = 10, M = N * (size_t)n;
    uint16_t *hs = calloc(4 * M, sizeof(uint16_t)), *hr = hs + M, *ds = hs + 2 * M, *dr = hs + 3 * M;
    mt_bf16 *scr = calloc(2 * outer16 * inner16, sizeof(mt_bf16));
    size_t *sc = calloc(2 * (size_t)n, sizeof(size_t)), *rc = sc + n;
    for (int q = 0; q < n; q++) { /* rank a sends (a + b) % 3 + 1 elements to rank b */
      sc[q] = (size_t)((r + q) % 3 + 1);
      rc[q] = sc[q];
    }
    for (int call = 0; call < 9; call++) {
      for (size_t i = 0; i < M; i++) { /* bf16 values (sums stay finite), recv poisoned */
        hs[i] = ds[i] = mt_bf16_from_f32((float)(0.37 * (r + 1) + 0.011 * (double)i));
        hr[i] = dr[i] = 0x7fc1;
      }
      memcpy(hr + displs[r], hs, (size_t)counts[r] * sizeof(uint16_t)); /* in place: own part */
      memcpy(dr + displs[r], ds, (size_t)counts[r] * sizeof(uint16_t));
      double c0 = g->bytes;
      long ch = 0, cd = 0, dbytes = 0;
      for (int dev_side = 0; dev_side < 2; dev_side++) {
        uint16_t *s = dev_side ? ds : hs, *o = dev_side ? dr : hr;
        mt_loc loc = dev_side ? MT_LOC_DEVICE : MT_LOC_HOST;
        if (dev_side) {
          dbytes = (long)(g->bytes - c0);
          ch = g_to_host;
          cd = g_to_device;
        }
        mt_request q16;
        switch (call) {
        case 0: mt_allgatherv(g, NULL, o, counts, displs, MT_DT_BF16, loc); break;
        case 1:
          mt_iallgatherv(g, s, o, counts, displs, MT_DT_BF16, loc, &q16);
          mt_wait(&q16);
          break;
        case 2: mt_alltoallv(g, s, sc, o, rc, MT_DT_BF16, loc); break;
        case 3: mt_allreduce(g, s, N, MT_DT_BF16, MT_RED_SUM, loc); o = s; break;
        case 4:
          mt_iallreduce(g, s, N, MT_DT_BF16, MT_RED_SUM, loc, &q16);
          mt_wait(&q16);
          o = s;
          break;
        case 5:
          mt_ireduce_scatter(g, s, o, counts, MT_DT_BF16, loc, &q16);
          mt_wait(&q16);
          break;
        case 6: mt_allgather_dim(g, s, o, outer16, inner16, MT_DT_BF16, loc); break;
        case 7: mt_alltoall_dim(g, s, o, outer16, inner16 * n, outer16 * n, inner16, MT_DT_BF16,
                                loc); break;
        case 8: mt_reduce_scatter_dim(g, s, o, outer16, inner16, scr, MT_DT_BF16, loc); break;
        }
      }
      const uint16_t *hres = call == 3 || call == 4 ? hs : hr, *dres = call == 3 || call == 4 ? ds : dr;
      MT_CHECK(memcmp(hres, dres, M * sizeof(uint16_t)) == 0, "16-bit call %d: device result differs",
               call);
      MT_CHECK(g->bytes - c0 == 2 * (double)dbytes, "16-bit call %d: bytes %g, host %ld", call,
               g->bytes - c0 - (double)dbytes, dbytes);
      MT_CHECK(n == 1 || (g_to_host > ch && g_to_device > cd), "16-bit call %d: no staging copies",
               call);
    }
    free(hs);
    free(scr);
    free(sc);
  }

  /* fixed blocks of int32 (MoE routing counts) and of fp64 (the summary's
   * gather): host values against the expected ones, device buffers against
   * the host call, the same bytes counted */
  {
    const size_t k = 3, M = k * (size_t)n;
    int *hs = calloc(4 * M, sizeof(int)), *hr = hs + M, *ds = hs + 2 * M, *dr = hs + 3 * M;
    for (int call = 0; call < 2; call++) {
      for (size_t i = 0; i < M; i++) hs[i] = ds[i] = 1000 * r + (int)i, hr[i] = dr[i] = -1;
      double c0 = g->bytes;
      if (call == 0) mt_allgather(g, hs, hr, k, MT_DT_I32, MT_LOC_HOST);
      else mt_alltoall(g, hs, hr, k, MT_DT_I32, MT_LOC_HOST);
      double hb = g->bytes - c0;
      long h0 = g_to_host, d0 = g_to_device;
      if (call == 0) mt_allgather(g, ds, dr, k, MT_DT_I32, MT_LOC_DEVICE);
      else mt_alltoall(g, ds, dr, k, MT_DT_I32, MT_LOC_DEVICE);
      int ok = 1; /* block q of recv: rank q's block (all-gather: 0, all-to-all: r) */
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < k; i++)
          ok &= hr[(size_t)q * k + i] == 1000 * q + (int)((call ? (size_t)r * k : 0) + i);
      const char *name = call ? "alltoall i32" : "allgather i32";
      MT_CHECK(ok, "%s: wrong values", name);
      MT_CHECK(!memcmp(hr, dr, M * sizeof(int)), "%s: device result differs", name);
      const double want = call ? (double)(n - 1) * (double)(k * sizeof(int))
                               : mt_bytes_allgather(M * sizeof(int), n);
      MT_CHECK(hb == want && g->bytes - c0 == 2 * hb, "%s: bytes %g (want %g), device %g", name,
               hb, want, g->bytes - c0 - hb);
      MT_CHECK(n == 1 || (g_to_host > h0 && g_to_device > d0), "%s: no staging copies", name);
    }
    double mine[2] = {r + 0.5, -r}, *all_h = calloc(4 * (size_t)n, sizeof(double));
    double *all_d = all_h + 2 * n;
    mt_gather(g, mine, all_h, 2, MT_DT_F64, 0, MT_LOC_HOST);
    mt_gather(g, mine, all_d, 2, MT_DT_F64, 0, MT_LOC_DEVICE);
    if (r == 0) {
      int ok = 1;
      for (int q = 0; q < n; q++) ok &= all_h[2 * q] == q + 0.5 && all_h[2 * q + 1] == -q;
      MT_CHECK(ok, "gather f64: wrong values");
      MT_CHECK(!memcmp(all_h, all_d, (size_t)n * 2 * sizeof(double)),
               "gather f64: device result differs");
    }
    free(all_h);
    free(hs);
  }

  /* point-to-point ring: send to the next, receive from the previous */
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  fill_both(h2, d2, N, r, 8);
  mt_request s1, r1;
  mt_irecv(g, h, N, MT_DT_F32, prev, 5, MT_LOC_HOST, &r1);
  mt_isend(g, h2, N, MT_DT_F32, next, 5, MT_LOC_HOST, &s1);
  mt_wait(&r1);
  mt_wait(&s1);
  mt_irecv(g, d, N, MT_DT_F32, prev, 6, MT_LOC_DEVICE, &r1);
  mt_isend(g, d2, N, MT_DT_F32, next, 6, MT_LOC_DEVICE, &s1);
  mt_wait(&r1);
  mt_wait(&s1);
  MT_CHECK(same(h, d, N), "isend/irecv: device result differs");
  /* exchange with a partner (ranks in pairs) */
  int partner = n == 1 ? 0 : (r ^ 1) < n ? r ^ 1 : r;
  mt_sendrecv(g, h2, h, N, MT_DT_F32, partner, 7, MT_LOC_HOST);
  mt_sendrecv(g, d2, d, N, MT_DT_F32, partner, 7, MT_LOC_DEVICE);
  MT_CHECK(same(h, d, N), "sendrecv: device result differs");

  MT_CHECK(mt_comm_staged_calls() > 0, "no call was staged");
  int failed = *mt_check_failures();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (r == 0)
    printf("%s: %d ranks, %ld collective/p2p calls staged through the host, %ld copies to "
           "host, %ld to device\n", failed ? "FAIL" : "ok", n, mt_comm_staged_calls(), g_to_host,
           g_to_device);
  free(h); free(d); free(h2); free(d2); free(counts); free(displs); free(scratch);
  mt_mesh_destroy(&mesh);
  MPI_Finalize();
  return failed;
}
