/* The virtual backend's collective channel takes a group's non-blocking
 * collectives in the order they were issued, whatever the order of the
 * waits: a large all-reduce A issued before a small one B, B waited first,
 * ends B after A (the clock then at A's price plus B's), and A's own wait
 * after costs nothing more; in issue order it is the same. A blocking
 * collective issued after both starts after both. (Before, the channel
 * went in wait order: B alone, then A behind it.) Run on 2 ranks. */
#include <math.h>
#include <stdio.h>

#include "comm_check.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(b) + 1e-12); }

int main(int argc, char **argv) {
  mt_mesh mesh;
  comm_test_start(&argc, &argv, &mesh);
  mt_mesh_set_virtual(&mesh);
  mt_group *g = &mesh.dp_g;
  const mt_price p = {.devices_per_node = 8, .intra_gbs = 10, .intra_us = 5, .inter_gbs = 1,
                      .inter_us = 20, .act_bytes = 4, .bytes_as_sent = 1, .overlap = 1};
  mt_vclock_start(&p);
  const size_t big = 25u << 20, small = 256; /* elements (no memory: virtual buffers) */
  const int k = mt_price_group_per_node(&p, g->world0, g->stride, g->size);
  const double tA = mt_price_coll_s(&p, mt_bytes_allreduce(big * 4, g->size), g->size, k,
                                    MT_PRICE_ALLREDUCE),
               tB = mt_price_coll_s(&p, mt_bytes_allreduce(small * 4, g->size), g->size, k,
                                    MT_PRICE_ALLREDUCE);
  float x;
  for (int order = 0; order < 2; order++) { /* 0: B waited first; 1: in issue order */
    mt_request a = {0}, b = {0};
    const double t0 = mt_now();
    mt_iallreduce(g, &x, big, MT_DT_F32, MT_RED_SUM, MT_LOC_DEVICE, &a);
    mt_iallreduce(g, &x, small, MT_DT_F32, MT_RED_SUM, MT_LOC_DEVICE, &b);
    mt_wait(order ? &a : &b);
    const double first = mt_now() - t0;
    mt_wait(order ? &b : &a);
    const double both = mt_now() - t0;
    MT_CHECK(near(first, order ? tA : tA + tB),
             "waits in %s order: the first wait ends at %.9g s, priced %.9g s",
             order ? "issue" : "reverse", first, order ? tA : tA + tB);
    MT_CHECK(near(both, tA + tB), "both end at %.9g s, priced %.9g s (A %.9g, B %.9g)", both,
             tA + tB, tA, tB);
  }
  /* a blocking all-reduce behind a non-blocking one not yet waited */
  mt_request a = {0};
  const double t0 = mt_now();
  mt_iallreduce(g, &x, big, MT_DT_F32, MT_RED_SUM, MT_LOC_DEVICE, &a);
  mt_allreduce(g, &x, small, MT_DT_F32, MT_RED_SUM, MT_LOC_DEVICE);
  MT_CHECK(near(mt_now() - t0, tA + tB), "a blocking one after: %.9g s, priced %.9g s",
           mt_now() - t0, tA + tB);
  mt_wait(&a);
  MT_CHECK(near(mt_now() - t0, tA + tB), "the earlier one's wait after it: %.9g s, priced %.9g s",
           mt_now() - t0, tA + tB);
  int rc = mt_check_summary("comm_virtual_order");
  mt_mesh_destroy(&mesh);
  MPI_Finalize();
  return rc;
}
