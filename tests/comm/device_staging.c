/* comm with device buffers: a stand-in device backend (its "device memory"
 * is host memory the test poisons on the host side, and every copy to or
 * from it goes through copy functions that count) registers its copy
 * functions; every collective and point-to-point call handed MT_LOC_DEVICE
 * buffers must give the same results as with host buffers, move data only
 * through those functions, and count the same bytes on the group. A call
 * that read device memory directly would still work here, so the test also
 * checks that each device call made copies in both directions it needs.
 * Also the 16-bit all-to-all (host buffers) against the f32 one, and every
 * 16-bit call on device buffers against its host form.
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
  for (int q = 0, off = 0; q < n; q++) {
    counts[q] = (int)(N / (size_t)n) + (q < (int)(N % (size_t)n));
    displs[q] = off;
    off += counts[q];
  }
  /* a device buffer without registered copy functions is refused (not tested: it dies) */
  mt_comm_set_device_copy(&dev);

  /* all-reduce */
  fill(h, N, r, 0);
  memcpy(d, h, N * sizeof(float));
  double b0 = g->bytes;
  mt_allreduce_sum_f32(g, h, N, MT_LOC_HOST);
  double host_bytes = g->bytes - b0;
  long th = g_to_host, td = g_to_device;
  mt_allreduce_sum_f32(g, d, N, MT_LOC_DEVICE);
  MT_CHECK(same(h, d, N), "allreduce: device result differs");
  MT_CHECK(g->bytes - b0 == 2 * host_bytes, "allreduce: bytes %g, host %g", g->bytes - b0 - host_bytes,
        host_bytes);
  MT_CHECK(g_to_host > th && g_to_device > td, "allreduce: no staging copies");

  /* reduce-scatter */
  fill(h, N, r, 1);
  memcpy(d, h, N * sizeof(float));
  mt_reduce_scatter_sum_f32(g, h, h2, counts, MT_LOC_HOST);
  mt_reduce_scatter_sum_f32(g, d, d2, counts, MT_LOC_DEVICE);
  MT_CHECK(same(h2, d2, (size_t)counts[r]), "reduce-scatter: device result differs");

  /* all-gather in place */
  fill(h, N, r, 2);
  memcpy(d, h, N * sizeof(float));
  mt_allgatherv_inplace_f32(g, h, counts, displs, MT_LOC_HOST);
  mt_allgatherv_inplace_f32(g, d, counts, displs, MT_LOC_DEVICE);
  MT_CHECK(same(h, d, N), "allgatherv: device result differs");

  /* non-blocking: all-reduce, reduce-scatter, all-gather */
  mt_request rq;
  fill(h, N, r, 3);
  memcpy(d, h, N * sizeof(float));
  mt_iallreduce_sum_f32(g, h, N, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  mt_iallreduce_sum_f32(g, d, N, MT_LOC_DEVICE, &rq);
  mt_wait(&rq);
  MT_CHECK(same(h, d, N), "iallreduce: device result differs");
  fill(h, N, r, 4);
  memcpy(d, h, N * sizeof(float));
  mt_ireduce_scatter_sum_f32(g, h, h2, counts, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  mt_ireduce_scatter_sum_f32(g, d, d2, counts, MT_LOC_DEVICE, &rq);
  mt_wait(&rq);
  MT_CHECK(same(h2, d2, (size_t)counts[r]), "ireduce_scatter: device result differs");
  fill(h2, (size_t)counts[r], r, 5);
  memcpy(d2, h2, (size_t)counts[r] * sizeof(float));
  mt_iallgatherv_f32(g, h2, h, counts, displs, MT_LOC_HOST, &rq);
  mt_wait(&rq);
  mt_iallgatherv_f32(g, d2, d, counts, displs, MT_LOC_DEVICE, &rq);
  mt_wait(&rq);
  MT_CHECK(same(h, d, N), "iallgatherv: device result differs");

  /* along a dim (sequence parallelism): outer 4, inner 25 per rank */
  const size_t outer = 4, inner = 25;
  float *scratch = calloc(2 * outer * inner, sizeof(float));
  fill(h, outer * inner * n, r, 6);
  memcpy(d, h, outer * inner * n * sizeof(float));
  mt_reduce_scatter_dim_f32(g, h, h2, outer, inner, scratch, MT_LOC_HOST);
  mt_reduce_scatter_dim_f32(g, d, d2, outer, inner, scratch, MT_LOC_DEVICE);
  MT_CHECK(same(h2, d2, outer * inner), "reduce_scatter_dim: device result differs");
  fill(h2, outer * inner, r, 7);
  memcpy(d2, h2, outer * inner * sizeof(float));
  mt_allgather_dim_f32(g, h2, h, outer, inner, MT_LOC_HOST);
  mt_allgather_dim_f32(g, d2, d, outer, inner, MT_LOC_DEVICE);
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
    mt_alltoall_dim_f32(g, h2, h, ao, ai, 2 * ao, ai / 2, MT_LOC_HOST);
    double u0 = g->bytes;
    mt_alltoall_dim_u16(g, us, ur, ao, ai, 2 * ao, ai / 2, MT_LOC_HOST);
    int ok = 1;
    for (size_t i = 0; i < tot; i++) ok &= (float)ur[i] == h[i];
    MT_CHECK(ok, "alltoall_dim_u16: the elements differ from the f32 all-to-all's");
    MT_CHECK(2 * (g->bytes - u0) == u0 - f0, "alltoall_dim_u16: bytes %g, f32 %g", g->bytes - u0,
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
        case 0: mt_allgatherv_inplace_u16(g, o, counts, displs, loc); break;
        case 1:
          mt_iallgatherv_u16(g, s, o, counts, displs, loc, &q16);
          mt_wait(&q16);
          break;
        case 2: mt_alltoallv_u16(g, s, sc, o, rc, loc); break;
        case 3: mt_allreduce_sum_bf16(g, s, N, loc); o = s; break;
        case 4:
          mt_iallreduce_sum_bf16(g, s, N, loc, &q16);
          mt_wait(&q16);
          o = s;
          break;
        case 5:
          mt_ireduce_scatter_sum_bf16(g, s, o, counts, loc, &q16);
          mt_wait(&q16);
          break;
        case 6: mt_allgather_dim_u16(g, s, o, outer16, inner16, loc); break;
        case 7: mt_alltoall_dim_u16(g, s, o, outer16, inner16 * n, outer16 * n, inner16, loc); break;
        case 8: mt_reduce_scatter_dim_bf16(g, s, o, outer16, inner16, scr, loc); break;
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

  /* point-to-point ring: send to the next, receive from the previous */
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  fill(h2, N, r, 8);
  memcpy(d2, h2, N * sizeof(float));
  mt_request s1, r1;
  mt_irecv_f32(g, h, N, prev, 5, MT_LOC_HOST, &r1);
  mt_isend_f32(g, h2, N, next, 5, MT_LOC_HOST, &s1);
  mt_wait(&r1);
  mt_wait(&s1);
  mt_irecv_f32(g, d, N, prev, 6, MT_LOC_DEVICE, &r1);
  mt_isend_f32(g, d2, N, next, 6, MT_LOC_DEVICE, &s1);
  mt_wait(&r1);
  mt_wait(&s1);
  MT_CHECK(same(h, d, N), "isend/irecv: device result differs");
  /* exchange with a partner (ranks in pairs) */
  int partner = n == 1 ? 0 : (r ^ 1) < n ? r ^ 1 : r;
  mt_sendrecv_f32(g, h2, h, N, partner, 7, MT_LOC_HOST);
  mt_sendrecv_f32(g, d2, d, N, partner, 7, MT_LOC_DEVICE);
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
