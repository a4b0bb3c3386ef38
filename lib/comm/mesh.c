/* The device mesh: every group described once, as data (the axes it
 * spans), and made from that description. The same table gives the NCCL
 * communicators (nccl.c) and the plan's count of them: a group added here
 * is made everywhere. Every group is an arithmetic progression of world
 * ranks (first, first + stride, ...) that each rank lists itself, and is
 * made with MPI_Comm_create_group, collective over the group's ranks only:
 * at 512 ranks a world-wide MPI_Comm_split per group (an all-gather of every
 * rank's colour over the world, then a sort, on every rank) was O(ranks)
 * work and memory per rank per group, O(ranks^2) for the job; this is
 * O(group size). */
#include "comm/comm.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mt_group_desc g_groups[] = {
    {MT_G_TP, "tp", MT_AX_TP, offsetof(mt_mesh, tp_g)},
    {MT_G_CP, "cp", MT_AX_CP, offsetof(mt_mesh, cp_g)},
    {MT_G_DP, "dp", MT_AX_DP, offsetof(mt_mesh, dp_g)},
    {MT_G_PP, "pp", MT_AX_PP, offsetof(mt_mesh, pp_g)},
    /* gradients, ZeRO shards and the loss: rank cp_rank + cp * dp_rank */
    {MT_G_DP_CP, "dp_cp", MT_AX_CP | MT_AX_DP, offsetof(mt_mesh, dpcp_g)},
    /* the ranks holding pieces of the same sequences (the MoE router's
     * per-sequence counts): rank tp_rank + tp * cp_rank */
    {MT_G_TP_CP, "tp_cp", MT_AX_TP | MT_AX_CP, offsetof(mt_mesh, tpcp_g)},
    {MT_G_ETP, "etp", MT_AX_ETP, offsetof(mt_mesh, etp_g)},
    {MT_G_EP, "ep", MT_AX_EP, offsetof(mt_mesh, ep_g)},
    {MT_G_EDP, "edp", MT_AX_EDP, offsetof(mt_mesh, edp_g)},
};
enum { N_GROUPS = sizeof g_groups / sizeof g_groups[0] };
_Static_assert((int)N_GROUPS == (int)MT_G_N, "the table lists every MT_G_* group, in order");

const mt_group_desc *mt_mesh_groups(int *n) {
  *n = N_GROUPS;
  return g_groups;
}

mt_group *mt_mesh_group(mt_mesh *m, const mt_group_desc *d) {
  if ((d->axes & MT_AX_FOLDED) && !m->folded) return NULL;
  return (mt_group *)((char *)m + d->offset);
}

mt_mesh_dims mt_mesh_dims_of(const mt_mesh *m) {
  return (mt_mesh_dims){.tp = m->tp, .cp = m->cp, .dp = m->dp, .pp = m->pp, .etp = m->etp,
                        .ep = m->ep};
}

int mt_mesh_rank_of(const mt_mesh *m, int tp_r, int cp_r, int dp_r, int pp_r) {
  return tp_r + m->tp * (cp_r + m->cp * (dp_r + m->dp * pp_r));
}

void mt_mesh_fold_coords(int q, int etp, int ep, int *etp_r, int *ep_r, int *edp_r) {
  *etp_r = q % etp;
  *ep_r = (q / etp) % ep;
  *edp_r = q / (etp * ep);
}

/* A rank's coordinates along the axes of its mesh (dense: tp, cp, dp, pp;
 * folded: etp, ep, edp, pp), with the axes' sizes, innermost first. */
typedef struct {
  int n;
  unsigned axis[4];
  int size[4], coord[4];
} coords;

static coords coords_of(const mt_mesh_dims *d, int folded, int r) {
  coords c;
  const int stage = d->tp * d->cp * d->dp;
  c.n = 4;
  if (!folded) {
    unsigned ax[4] = {MT_AX_TP, MT_AX_CP, MT_AX_DP, MT_AX_PP};
    int sz[4] = {d->tp, d->cp, d->dp, d->pp};
    for (int i = 0, rest = r; i < 4; i++) {
      c.axis[i] = ax[i];
      c.size[i] = sz[i];
      c.coord[i] = rest % sz[i];
      rest /= sz[i];
    }
  } else {
    unsigned ax[4] = {MT_AX_ETP, MT_AX_EP, MT_AX_EDP, MT_AX_PP};
    int sz[4] = {d->etp, d->ep, stage / (d->etp * d->ep), d->pp};
    int q = r % stage;
    mt_mesh_fold_coords(q, d->etp, d->ep, &c.coord[0], &c.coord[1], &c.coord[2]);
    c.coord[3] = r / stage;
    for (int i = 0; i < 4; i++) c.axis[i] = ax[i], c.size[i] = sz[i];
  }
  return c;
}

static int world_of(const mt_mesh_dims *d, int folded, const coords *c) {
  const int stage = d->tp * d->cp * d->dp;
  if (!folded)
    return c->coord[0] + d->tp * (c->coord[1] + d->cp * (c->coord[2] + d->dp * c->coord[3]));
  return c->coord[0] + d->etp * (c->coord[1] + d->ep * c->coord[2]) + stage * c->coord[3];
}

int mt_mesh_group_members(const mt_mesh_dims *dims, const mt_group_desc *g, int r, int *members) {
  const int folded = (g->axes & MT_AX_FOLDED) != 0;
  coords c = coords_of(dims, folded, r);
  /* the group's axes vary (innermost fastest), the others stay r's */
  int span[4], n_span = 0, count = 1;
  for (int i = 0; i < c.n; i++)
    if (g->axes & c.axis[i]) {
      span[n_span++] = i;
      count *= c.size[i];
      c.coord[i] = 0;
    }
  for (int k = 0; k < count; k++) {
    for (int j = 0, rest = k; j < n_span; j++) {
      c.coord[span[j]] = rest % c.size[span[j]];
      rest /= c.size[span[j]];
    }
    members[k] = world_of(dims, folded, &c);
  }
  return count;
}

/* an mt_group over comm (errors returned to the caller, not fatal) */
static int group_make(mt_group *g, const char *name, MPI_Comm comm, mt_err *e) {
  memset(g, 0, sizeof *g);
  g->name = name;
  g->comm = comm;
  MT_MPI_TRY(e, MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
  MT_MPI_TRY(e, MPI_Comm_size(comm, &g->size));
  MT_MPI_TRY(e, MPI_Comm_rank(comm, &g->rank));
  return 0;
}

/* The communicator of the n world ranks in members (group-rank order),
 * made with tag (one per group, so that the creation of groups that share
 * ranks never pairs up). Returns the first failing call's MPI code. */
static int comm_of(const int *members, int n, int tag, MPI_Comm *c) {
  MPI_Group world, grp;
  int rc = MPI_Comm_group(MPI_COMM_WORLD, &world);
  if (rc != MPI_SUCCESS) return rc;
  rc = MPI_Group_incl(world, n, members, &grp);
  if (rc == MPI_SUCCESS) {
    rc = MPI_Comm_create_group(MPI_COMM_WORLD, grp, tag, c);
    int freed = MPI_Group_free(&grp);
    if (rc == MPI_SUCCESS) rc = freed;
  }
  int freed = MPI_Group_free(&world);
  return rc != MPI_SUCCESS ? rc : freed;
}

/* The groups of the table on one mesh (dense or folded), each made from
 * its members' world ranks. */
static int make_groups(mt_mesh *m, int folded, mt_err *e) {
  mt_mesh_dims dims = mt_mesh_dims_of(m);
  int *members = mt_malloc((size_t)m->world_size * sizeof(int));
  for (int i = 0; i < N_GROUPS; i++) {
    const mt_group_desc *d = &g_groups[i];
    if (((d->axes & MT_AX_FOLDED) != 0) != folded) continue;
    /* members are in group-rank order: this rank's place is its rank */
    int n = mt_mesh_group_members(&dims, d, m->world_rank, members);
    MPI_Comm c;
    int rc = comm_of(members, n, 301 + i, &c);
    if (rc != MPI_SUCCESS) {
      free(members);
      char s[MPI_MAX_ERROR_STRING];
      int len = 0;
      if (MPI_Error_string(rc, s, &len) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
      mt_err_runtime(e, "MPI_Comm_create_group for the %s group failed: %s", d->name, s);
      return -1;
    }
    mt_group *g = (mt_group *)((char *)m + d->offset);
    if (group_make(g, d->name, c, e) != 0) {
      free(members);
      mt_err_pass_at(e, __FILE__, __LINE__);
      return -1;
    }
    g->world0 = members[0];
    g->stride = n > 1 ? members[1] - members[0] : 1;
  }
  free(members);
  return 0;
}

int mt_mesh_create(mt_mesh *m, int tp, int cp, int dp, int pp, mt_err *e) {
  memset(m, 0, sizeof *m);
  MT_MPI_TRY(e, MPI_Comm_size(MPI_COMM_WORLD, &m->world_size));
  MT_MPI_TRY(e, MPI_Comm_rank(MPI_COMM_WORLD, &m->world_rank));
  long prod = (long)tp * cp * dp * pp;
  if (tp < 1 || cp < 1 || dp < 1 || pp < 1 || prod != m->world_size) {
    mt_err_set(e,
               "the mesh pp x dp x cp x tp = %d x %d x %d x %d = %ld ranks does not match "
               "the %d MPI ranks launched (set parallel.dp/tp/pp/cp or the rank count)",
               pp, dp, cp, tp, prod, m->world_size);
    return -1;
  }
  m->tp = tp; m->cp = cp; m->dp = dp; m->pp = pp;
  m->etp = m->ep = 1;
  m->edp = tp * cp * dp;
  int r = m->world_rank;
  m->tp_rank = r % tp;
  m->cp_rank = (r / tp) % cp;
  m->dp_rank = (r / (tp * cp)) % dp;
  m->pp_rank = r / (tp * cp * dp);
  MT_TRY(e, make_groups(m, 0, e));
  MPI_Comm c;
  MT_MPI_TRY(e, MPI_Comm_dup(MPI_COMM_WORLD, &c));
  MT_TRY(e, group_make(&m->world, "world", c, e));
  m->world.stride = 1;
  MT_MPI_TRY(e, MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &c));
  MT_TRY(e, group_make(&m->node, "node", c, e));
  /* (not a progression in general: never priced) */
  m->node.stride = 1;
  m->node.world0 = r - m->node.rank;
  return 0;
}

int mt_mesh_fold(mt_mesh *m, int etp, int ep, mt_err *e) {
  int n = m->tp * m->cp * m->dp;
  if (etp < 1 || ep < 1 || n % (etp * ep) != 0) {
    mt_err_set(e,
               "parallel.etp x parallel.ep = %d x %d does not divide the %d ranks of a pipeline "
               "stage (tp x cp x dp = %d x %d x %d)",
               etp, ep, n, m->tp, m->cp, m->dp);
    return -1;
  }
  m->etp = etp;
  m->ep = ep;
  m->edp = n / (etp * ep);
  mt_mesh_fold_coords(m->world_rank % n, etp, ep, &m->etp_rank, &m->ep_rank, &m->edp_rank);
  MT_TRY(e, make_groups(m, 1, e));
  m->folded = 1;
  return 0;
}

void mt_mesh_destroy(mt_mesh *m) {
  mt_group *gs[] = {&m->tp_g,  &m->cp_g, &m->dp_g,  &m->pp_g, &m->dpcp_g, &m->tpcp_g,
                    &m->world, &m->node, &m->etp_g, &m->ep_g, &m->edp_g};
  for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++)
    if (gs[i]->comm != MPI_COMM_NULL && gs[i]->comm != 0) MT_MPI_CHECK(MPI_Comm_free(&gs[i]->comm));
}

void mt_group_reset_counters(mt_group *g) {
  g->bytes = 0;
  g->seconds = 0;
  g->calls = 0;
}

void mt_mesh_set_virtual(mt_mesh *m) {
  mt_group *gs[] = {&m->tp_g,  &m->cp_g, &m->dp_g,  &m->pp_g, &m->dpcp_g,
                    &m->tpcp_g, &m->world, &m->etp_g, &m->ep_g, &m->edp_g};
  for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) gs[i]->backend = MT_COMM_VIRTUAL;
}
