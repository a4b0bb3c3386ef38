/* The count-only comm backend: a group whose backend is MT_COMM_COUNT
 * moves nothing and needs no MPI; each call counts on the group the bytes
 * it would put on the wire (the figure every backend counts, computed once
 * by the call in lib/comm) and its call. Exchanges of fixed blocks the
 * host reads (the MoE dispatch's counts, the summary's gather) come back as
 * if every rank had sent what this one sends, as a symmetric (balanced)
 * run does. A
 * count-only mesh holds one rank's coordinates and every group of a real
 * mesh, sizes and ranks as mt_mesh_create and mt_mesh_fold would make
 * them, so the real model and dp engine run on one rank of any mesh in one
 * process (the plan). The virtual device of the time-warp work adds a
 * backend here whose calls carry timestamps over MPI. */
#include "comm/comm_internal.h"

#include <string.h>

int mt_comm_backend_call(mt_group *g, const mt_coll *c) {
  if (g->backend == MT_COMM_MPI) return 0;
  if (g->backend == MT_COMM_VIRTUAL) return mt_comm_virtual_call(g, c);
  /* blocks the host reads: every rank's block as this rank's own (n
   * elements per rank) */
  if (c->recv && c->loc == MT_LOC_HOST) {
    const size_t block_bytes = c->n * c->elem;
    const char *mine = (const char *)c->send;
    if (c->kind == MT_COLL_ALLTOALL) mine += (size_t)g->rank * block_bytes;
    char *block = c->recv;
    for (int r = 0; r < g->size; r++, block += block_bytes)
      if (block != mine) memmove(block, mine, block_bytes);
  }
  /* what the MPI path counts: collectives of more than one rank, and every
   * point-to-point call */
  int p2p = c->kind == MT_COLL_SEND || c->kind == MT_COLL_RECV || c->kind == MT_COLL_SENDRECV;
  if (g->size > 1 || p2p) {
    g->bytes += c->bytes;
    g->calls++;
    mt_comm_rec_call(g, c);
  }
  return 1;
}

static void count_group(mt_group *g, const char *name, int size, int rank, int world_rank,
                        int stride) {
  memset(g, 0, sizeof *g);
  g->stride = stride;
  g->world0 = world_rank - rank * stride;
  g->name = name;
  g->comm = MPI_COMM_NULL;
  g->size = size;
  g->rank = rank;
  g->backend = MT_COMM_COUNT;
}

int mt_mesh_count(mt_mesh *m, int tp, int cp, int dp, int pp, int world_rank, int etp, int ep,
                  mt_err *e) {
  memset(m, 0, sizeof *m);
  const int n = tp * cp * dp;
  if (tp < 1 || cp < 1 || dp < 1 || pp < 1 || world_rank < 0 || world_rank >= n * pp) {
    mt_err_set(e, "a count-only mesh pp x dp x cp x tp = %d x %d x %d x %d has no rank %d", pp,
               dp, cp, tp, world_rank);
    return -1;
  }
  if (etp < 1 || ep < 1 || n % (etp * ep) != 0) {
    mt_err_set(e,
               "parallel.etp x parallel.ep = %d x %d does not divide the %d ranks of a pipeline "
               "stage (tp x cp x dp = %d x %d x %d)",
               etp, ep, n, tp, cp, dp);
    return -1;
  }
  m->world_size = n * pp;
  m->world_rank = world_rank;
  m->tp = tp; m->cp = cp; m->dp = dp; m->pp = pp;
  /* rank order innermost first: tp, cp, dp, pp */
  m->tp_rank = world_rank % tp;
  m->cp_rank = (world_rank / tp) % cp;
  m->dp_rank = (world_rank / (tp * cp)) % dp;
  m->pp_rank = world_rank / n;
  count_group(&m->world, "world", m->world_size, world_rank, world_rank, 1);
  count_group(&m->tp_g, "tp", tp, m->tp_rank, world_rank, 1);
  count_group(&m->cp_g, "cp", cp, m->cp_rank, world_rank, tp);
  count_group(&m->dp_g, "dp", dp, m->dp_rank, world_rank, tp * cp);
  count_group(&m->pp_g, "pp", pp, m->pp_rank, world_rank, n);
  count_group(&m->dpcp_g, "dp_cp", dp * cp, m->cp_rank + cp * m->dp_rank, world_rank, tp);
  count_group(&m->tpcp_g, "tp_cp", tp * cp, m->tp_rank + tp * m->cp_rank, world_rank, 1);
  count_group(&m->node, "node", 1, 0, world_rank, 1);
  /* the folded mesh of the stage's tp x cp x dp ranks */
  m->etp = etp;
  m->ep = ep;
  m->edp = n / (etp * ep);
  mt_mesh_fold_coords(world_rank % n, etp, ep, &m->etp_rank, &m->ep_rank, &m->edp_rank);
  count_group(&m->etp_g, "etp", etp, m->etp_rank, world_rank, 1);
  count_group(&m->ep_g, "ep", ep, m->ep_rank, world_rank, etp);
  count_group(&m->edp_g, "edp", m->edp, m->edp_rank, world_rank, etp * ep);
  m->folded = 1;
  return 0;
}
