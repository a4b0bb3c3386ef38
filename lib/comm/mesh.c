/* The device mesh: one communicator per axis, made once. Every group is an
 * arithmetic progression of world ranks (first, first + stride, ...), so
 * each rank names its groups itself (MPI_Group_range_incl: no list of
 * members) and makes each with MPI_Comm_create_group, collective over the
 * group's ranks only: at 512 ranks a world-wide MPI_Comm_split per axis
 * (an all-gather of every rank's colour over the world, then a sort, on
 * every rank) was O(ranks) work and memory per rank per axis, O(ranks^2)
 * for the job; this is O(group size). */
#include "comm/comm.h"

#include <string.h>

int mt_mesh_rank_of(const mt_mesh *m, int tp_r, int cp_r, int dp_r, int pp_r) {
  return tp_r + m->tp * (cp_r + m->cp * (dp_r + m->dp * pp_r));
}

/* stride: the world-rank distance between consecutive ranks of the group */
static void group_make(mt_group *g, const char *name, MPI_Comm comm, int world_rank,
                       int stride) {
  memset(g, 0, sizeof *g);
  g->name = name;
  g->comm = comm;
  MPI_Comm_size(comm, &g->size);
  MPI_Comm_rank(comm, &g->rank);
  g->stride = stride;
  g->world0 = world_rank - g->rank * stride;
}

/* the communicator of the count ranks first, first + stride, ... (this rank
 * among them), rank order as listed; tag: one per axis, so that the
 * creation of groups that share ranks never pair up */
static MPI_Comm progression(int first, int count, int stride, int tag) {
  MPI_Group world, g;
  MPI_Comm c;
  int range[1][3] = {{first, first + (count - 1) * stride, stride > 0 ? stride : 1}};
  MT_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  MT_MPI_CHECK(MPI_Group_range_incl(world, 1, range, &g));
  MT_MPI_CHECK(MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, &c));
  MPI_Group_free(&g);
  MPI_Group_free(&world);
  return c;
}

enum { TAG_TP = 301, TAG_CP, TAG_DP, TAG_PP, TAG_DPCP, TAG_ETP, TAG_EP, TAG_EDP };

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
  const int n = tp * cp * dp; /* ranks per pipeline stage */
  c = progression(r - m->tp_rank, tp, 1, TAG_TP);
  group_make(&m->tp_g, "tp", c, r, 1);
  c = progression(r - m->cp_rank * tp, cp, tp, TAG_CP);
  group_make(&m->cp_g, "cp", c, r, tp);
  c = progression(r - m->dp_rank * tp * cp, dp, tp * cp, TAG_DP);
  group_make(&m->dp_g, "dp", c, r, tp * cp);
  c = progression(r - m->pp_rank * n, pp, n, TAG_PP);
  group_make(&m->pp_g, "pp", c, r, n);
  /* dp x cp: same tp rank and stage; rank cp_rank + cp * dp_rank */
  c = progression(m->pp_rank * n + m->tp_rank, dp * cp, tp, TAG_DPCP);
  group_make(&m->dpcp_g, "dp_cp", c, r, tp);
  MT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &c));
  group_make(&m->world, "world", c, r, 1);
  MT_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &c));
  group_make(&m->node, "node", c, r, 1); /* (not a progression: never priced) */
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
  int q = m->world_rank % n;
  mt_mesh_fold_coords(q, etp, ep, &m->etp_rank, &m->ep_rank, &m->edp_rank);
  MPI_Comm c;
  const int base = m->world_rank - q; /* the stage's first rank */
  c = progression(base + q - m->etp_rank, etp, 1, TAG_ETP);
  group_make(&m->etp_g, "etp", c, m->world_rank, 1);
  c = progression(base + q - m->ep_rank * etp, ep, etp, TAG_EP);
  group_make(&m->ep_g, "ep", c, m->world_rank, etp);
  c = progression(base + q - m->edp_rank * etp * ep, m->edp, etp * ep, TAG_EDP);
  group_make(&m->edp_g, "edp", c, m->world_rank, etp * ep);
  m->folded = 1;
  return 0;
}

void mt_mesh_destroy(mt_mesh *m) {
  mt_group *gs[] = {&m->tp_g, &m->cp_g,  &m->dp_g, &m->pp_g,  &m->dpcp_g,
                    &m->world, &m->node, &m->etp_g, &m->ep_g, &m->edp_g};
  for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++)
    if (gs[i]->comm != MPI_COMM_NULL && gs[i]->comm != 0) MPI_Comm_free(&gs[i]->comm);
}

void mt_group_reset_counters(mt_group *g) {
  g->bytes = 0;
  g->seconds = 0;
  g->calls = 0;
}

void mt_mesh_set_virtual(mt_mesh *m) {
  mt_group *gs[] = {&m->tp_g, &m->cp_g, &m->dp_g, &m->pp_g, &m->dpcp_g, &m->world,
                    &m->etp_g, &m->ep_g, &m->edp_g};
  for (size_t i = 0; i < sizeof gs / sizeof gs[0]; i++) gs[i]->backend = MT_COMM_VIRTUAL;
}
