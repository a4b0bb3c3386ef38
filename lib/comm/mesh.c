/* The device mesh: one MPI_Comm_split per axis, done once. */
#include "comm/comm.h"

#include <string.h>

int mt_mesh_rank_of(const mt_mesh *m, int tp_r, int cp_r, int dp_r, int pp_r) {
  return tp_r + m->tp * (cp_r + m->cp * (dp_r + m->dp * pp_r));
}

static void group_make(mt_group *g, const char *name, MPI_Comm comm) {
  memset(g, 0, sizeof *g);
  g->name = name;
  g->comm = comm;
  MPI_Comm_size(comm, &g->size);
  MPI_Comm_rank(comm, &g->rank);
}

int mt_mesh_create(mt_mesh *m, int tp, int cp, int dp, int pp, mt_err *e) {
  memset(m, 0, sizeof *m);
  MPI_Comm_size(MPI_COMM_WORLD, &m->world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &m->world_rank);
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
  MPI_Comm c;
  /* colour = all other coordinates; key = the coordinate along the axis */
  MT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, r - m->tp_rank, m->tp_rank, &c));
  group_make(&m->tp_g, "tp", c);
  MT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, m->tp_rank + tp * (m->dp_rank + dp * m->pp_rank),
                              m->cp_rank, &c));
  group_make(&m->cp_g, "cp", c);
  MT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, m->tp_rank + tp * (m->cp_rank + cp * m->pp_rank),
                              m->dp_rank, &c));
  group_make(&m->dp_g, "dp", c);
  MT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, m->tp_rank + tp * (m->cp_rank + cp * m->dp_rank),
                              m->pp_rank, &c));
  group_make(&m->pp_g, "pp", c);
  /* dp x cp: same tp rank and stage; rank cp_rank + cp * dp_rank */
  MT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, m->tp_rank + tp * m->pp_rank,
                              m->cp_rank + cp * m->dp_rank, &c));
  group_make(&m->dpcp_g, "dp_cp", c);
  /* tp x cp: same dp rank and stage; rank tp_rank + tp * cp_rank */
  MT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, m->dp_rank + dp * m->pp_rank,
                              m->tp_rank + tp * m->cp_rank, &c));
  group_make(&m->tpcp_g, "tp_cp", c);
  MT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  group_make(&m->world, "world", c);
  MT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &c));
  group_make(&m->node, "node", c);
  return 0;
}

void mt_mesh_fold_coords(int q, int etp, int ep, int *etp_r, int *ep_r, int *edp_r) {
  *etp_r = q % etp;
  *ep_r = (q / etp) % ep;
  *edp_r = q / (etp * ep);
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
  /* the rank's place inside its stage, then its folded coordinates */
  int q = m->world_rank % n, stage = m->world_rank / n;
  mt_mesh_fold_coords(q, etp, ep, &m->etp_rank, &m->ep_rank, &m->edp_rank);
  MPI_Comm c;
  /* colour = the stage and the other folded coordinates; key = the coordinate */
  MT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, stage * n + m->ep_rank + ep * m->edp_rank,
                              m->etp_rank, &c));
  group_make(&m->etp_g, "etp", c);
  MT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, stage * n + m->etp_rank + etp * m->edp_rank,
                              m->ep_rank, &c));
  group_make(&m->ep_g, "ep", c);
  MT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, stage * n + m->etp_rank + etp * m->ep_rank,
                              m->edp_rank, &c));
  group_make(&m->edp_g, "edp", c);
  m->folded = 1;
  return 0;
}

void mt_mesh_destroy(mt_mesh *m) {
  mt_group *gs[] = {&m->tp_g,  &m->cp_g, &m->dp_g,  &m->pp_g, &m->dpcp_g, &m->tpcp_g,
                    &m->world, &m->node, &m->etp_g, &m->ep_g, &m->edp_g};
  for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++)
    if (gs[i]->comm != MPI_COMM_NULL && gs[i]->comm != 0) MPI_Comm_free(&gs[i]->comm);
}

void mt_group_reset_counters(mt_group *g) {
  g->bytes = 0;
  g->seconds = 0;
  g->calls = 0;
}
