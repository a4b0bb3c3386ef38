/* The mesh's one table of groups, without MPI (the plan uses it so): for a
 * mesh tp 2 x cp 3 x dp 2 x pp 2, folded etp 2 x ep 3 (edp 2), every group
 * of every rank
 *   - holds the rank, has the size its axes multiply to, and its members
 *     differ from the rank only along the group's axes (the others equal),
 *   - lists them innermost axis first (dp_cp: rank cp_rank + cp * dp_rank);
 *   - is the same list whichever member asks (a partition of the world);
 * and the NCCL memory estimate counts one communicator per distinct group
 * that carries device traffic plus the point-to-point links: dp 2 (dp and
 * dp_cp share one), tp 2 x dp 2 (two), pp 2 (links only: activations,
 * gradients, tied: three). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

#include "../check.h"

static void coords(const mt_mesh_dims *d, int r, int c[7]) {
  c[0] = r % d->tp;
  c[1] = r / d->tp % d->cp;
  c[2] = r / (d->tp * d->cp) % d->dp;
  c[3] = r / (d->tp * d->cp * d->dp);
  mt_mesh_fold_coords(r % (d->tp * d->cp * d->dp), d->etp, d->ep, &c[4], &c[5], &c[6]);
}

int main(void) {
  const mt_mesh_dims d = {.tp = 2, .cp = 3, .dp = 2, .pp = 2, .etp = 2, .ep = 3};
  const int world = 24, edp = 2;
  const unsigned ax[7] = {MT_AX_TP, MT_AX_CP, MT_AX_DP, MT_AX_PP, MT_AX_ETP, MT_AX_EP, MT_AX_EDP};
  const int size[7] = {2, 3, 2, 2, 2, 3, edp};
  int n;
  const mt_group_desc *g = mt_mesh_groups(&n);
  MT_CHECK(n == MT_G_N, "%d groups in the table", n);
  int m[64], m2[64];
  for (int i = 0; i < n; i++) {
    MT_CHECK(g[i].id == i, "%s: id %d at place %d", g[i].name, g[i].id, i);
    const int folded = (g[i].axes & MT_AX_FOLDED) != 0;
    int want = 1;
    for (int a = 0; a < 7; a++) want *= g[i].axes & ax[a] ? size[a] : 1;
    for (int r = 0; r < world; r++) {
      int k = mt_mesh_group_members(&d, &g[i], r, m), cr[7], cq[7], has = 0;
      MT_CHECK(k == want, "%s of rank %d: %d members, want %d", g[i].name, r, k, want);
      coords(&d, r, cr);
      for (int j = 0; j < k; j++) {
        has |= m[j] == r;
        coords(&d, m[j], cq);
        /* the other axes of its own mesh (the stage, always) equal */
        for (int a = 0; a < 7; a++) {
          int own_mesh = a == 3 || (folded ? a >= 4 : a < 4);
          if (own_mesh && !(g[i].axes & ax[a]))
            MT_CHECK(cq[a] == cr[a], "%s of rank %d: member %d differs on axis %d", g[i].name, r,
                     m[j], a);
        }
        /* its place: the group's coordinates, innermost first */
        int place = 0, stride = 1;
        for (int a = 0; a < 7; a++)
          if (g[i].axes & ax[a]) place += cq[a] * stride, stride *= size[a];
        MT_CHECK(place == j, "%s of rank %d: member %d at place %d, want %d", g[i].name, r, m[j],
                 j, place);
        int k2 = mt_mesh_group_members(&d, &g[i], m[j], m2);
        MT_CHECK(k2 == k && !memcmp(m, m2, (size_t)k * sizeof(int)),
                 "%s: rank %d and member %d see different groups", g[i].name, r, m[j]);
      }
      MT_CHECK(has, "%s of rank %d: the rank is not a member", g[i].name, r);
    }
  }
  /* NCCL's memory: 16 channels x 2 x 4 MiB a communicator, 2 x 2 x 4 MiB a link */
  const double coll = 128.0 * 1048576.0, link = 16.0 * 1048576.0;
  struct {
    mt_mesh_dims d;
    unsigned groups, p2p;
    double want;
  } cases[] = {
      {{.tp = 1, .cp = 1, .dp = 2, .pp = 1, .etp = 1, .ep = 1},
       1u << MT_G_DP | 1u << MT_G_DP_CP, 0, coll},
      {{.tp = 2, .cp = 1, .dp = 2, .pp = 1, .etp = 1, .ep = 1},
       1u << MT_G_TP | 1u << MT_G_DP_CP, 0, 2 * coll},
      /* no collective on pp (its group carries point-to-point only) */
      {{.tp = 1, .cp = 1, .dp = 1, .pp = 2, .etp = 1, .ep = 1}, 1u << MT_G_DP_CP,
       MT_P2P_PP | MT_P2P_PP_TIED, 3 * link},
      {{.tp = 1, .cp = 2, .dp = 1, .pp = 1, .etp = 1, .ep = 1}, 1u << MT_G_DP_CP, MT_P2P_CP_RING,
       coll + 2 * link},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    double b = mt_comm_nccl_bytes(&cases[c].d, 0, cases[c].groups, cases[c].p2p);
    MT_CHECK(b == cases[c].want, "NCCL estimate case %zu: %.0f MiB, want %.0f", c, b / 1048576.0,
             cases[c].want / 1048576.0);
  }
  int failed = *mt_check_failures();
  printf("%s: the mesh's table of %d groups over %d ranks, and the NCCL estimate\n",
         failed ? "FAIL" : "ok", n, world);
  return failed != 0;
}
