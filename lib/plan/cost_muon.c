/* The optimizer step under optim.name = muon, priced (the cost model's
 * optimizer part): the matrices of a stage's rank and their owners as the
 * dp engine chooses them (optim/muon.h: mt_muon_matrices, mt_muon_assign,
 * the same on every rank), then
 *   Newton-Schulz  the busiest owner's matrices, each orthogonalised by
 *                  the real iteration (mt_muon_orthogonalize) on the
 *                  virtual device's op table over a clock of its own: its
 *                  matmuls at the profile's GEMM curve for their sizes, in
 *                  the iteration's dtype, and its elementwise work; plus
 *                  the whole matrix assembled, scaled and cut back;
 *   exchange       the four all-to-alls of each reduction group (to the
 *                  owners' group rank, to the owner over tp or etp, and
 *                  back), each at the most bytes a rank of it sends;
 *                  they follow the backward and the gradient reductions,
 *                  so nothing hides them;
 *   momentum       the momentum and the update over the rank's parts and
 *                  the pieces copied in and out of the exchange's buffers,
 *                  over the memory bandwidth.
 * A piece of a matrix a rank holds is taken as its 1 / G share of the
 * matrix (ZeRO parts cut buckets, not matrices: the run's pieces differ by
 * where the cuts fall). */
#include "plan/cost_internal.h"

#include <stdlib.h>
#include <string.h>

#include "optim/muon.h"

/* seconds of orthogonalising one rows x cols matrix on the owner: the
 * iteration on the virtual op table (no arithmetic, the clock moved by each
 * op's price), the whole matrix copied in and out and scaled (fp32) */
static double ns_matrix_s(const mt_price *q, mt_dtype t, int rows, int cols, int steps) {
  mt_vclock_state keep;
  mt_vclock_save(&keep);
  mt_vclock_start(q);
  float dummy[16];
  mt_muon_orthogonalize(mt_ops_virtual(), t, dummy, rows, cols, steps, dummy);
  double s = mt_vclock_busy();
  mt_vclock_restore(&keep);
  const double n = (double)rows * cols;
  return s + mt_price_elem_s(q, (4.0 * q->act_bytes + 8.0) * n);
}

/* ns_matrix_s of the shapes met so far: a model repeats a few shapes over
 * its layers and experts, each priced once */
#define NS_SHAPES 16
typedef struct {
  int n, rows[NS_SHAPES], cols[NS_SHAPES];
  double s[NS_SHAPES];
} ns_shapes;

static double ns_shape_s(ns_shapes *c, const mt_price *q, mt_dtype t, int rows, int cols,
                         int steps) {
  for (int i = 0; i < c->n; i++)
    if (c->rows[i] == rows && c->cols[i] == cols) return c->s[i];
  double s = ns_matrix_s(q, t, rows, cols, steps);
  if (c->n < NS_SHAPES) {
    c->rows[c->n] = rows;
    c->cols[c->n] = cols;
    c->s[c->n++] = s;
  }
  return s;
}

/* one group's (g: G ranks of the reduction group, S of the shard axis,
 * stride_g and stride_s apart in world order) Newton-Schulz seconds of its
 * busiest owner, exchange seconds, and elements per rank moved */
static void price_group(const mt_price *q, mt_dtype t, int steps, mt_muon_matrix *m, int n,
                        mt_grad_group g, int G, int S, int stride_g, int stride_s,
                        mt_cost_muon *out) {
  const int slots = G * S;
  double *ns = mt_calloc((size_t)slots, sizeof(double));
  double *own = mt_calloc((size_t)slots, sizeof(double)); /* elements of a shard each slot owns */
  double *own_g = mt_calloc((size_t)G, sizeof(double));  /* ... each group rank's */
  double *flops = mt_calloc((size_t)slots, sizeof(double));
  ns_shapes shapes = {0};
  double total = 0.0;
  int any = 0;
  mt_muon_assign(m, n, g, G, S);
  for (int i = 0; i < n; i++) {
    if (m[i].group != g) continue;
    any = 1;
    const int slot = m[i].owner_g * S + m[i].owner_s;
    const double nl = (double)m[i].rows_l * m[i].cols_l;
    ns[slot] += ns_shape_s(&shapes, q, t, m[i].rows, m[i].cols, steps);
    flops[slot] += m[i].flops;
    own[slot] += nl;
    own_g[m[i].owner_g] += nl;
    total += nl;
    out->flops_total += m[i].flops;
  }
  if (any) {
    double ns_most = 0.0, flops_most = 0.0, own_least = total, own_g_most = 0.0, l2_fwd = 0.0,
           l2_back = 0.0;
    for (int s = 0; s < slots; s++) {
      double f = flops[s];
      if (ns[s] > ns_most) ns_most = ns[s];
      if (f > flops_most) flops_most = f;
      /* over the shard axis: the group rank's matrices to their owners
       * (all but this slot's), and the owner's back to every shard rank */
      double fwd = own_g[s / S] - own[s], back = own[s] * (S - 1);
      if (fwd > l2_fwd) l2_fwd = fwd;
      if (back > l2_back) l2_back = back;
    }
    for (int r = 0; r < G; r++) {
      if (own_g[r] < own_least) own_least = own_g[r];
      if (own_g[r] > own_g_most) own_g_most = own_g[r];
    }
    /* over the reduction group: each rank's 1 / G of every matrix owned
     * elsewhere, and the owners' pieces back to the other G - 1 */
    const double l1_fwd = (total - own_least) / G, l1_back = own_g_most * (G - 1) / G;
    const double B = sizeof(float); /* the exchange is in fp32 */
    double red = 0.0, shard = 0.0;
    if (G > 1) {
      const int k = mt_price_per_node(q, stride_g, G);
      red = mt_price_coll_s(q, B * l1_fwd, G, k, 1) + mt_price_coll_s(q, B * l1_back, G, k, 1);
    }
    if (S > 1) {
      const int k = mt_price_per_node(q, stride_s, S);
      shard = mt_price_coll_s(q, B * l2_fwd, S, k, 1) + mt_price_coll_s(q, B * l2_back, S, k, 1);
    }
    out->ns_s += ns_most;
    out->flops_busiest += flops_most;
    out->exchange_s += red + shard;
    const double red_b = B * (l1_fwd + l1_back), shard_b = B * (l2_fwd + l2_back);
    if (g == MT_GROUP_DP) out->dp_bytes = red_b, out->tp_bytes = shard_b;
    else out->edp_bytes = red_b, out->etp_bytes = shard_b;
    /* the rank's parts (1 / G of each matrix) and what it copies in and
     * out of the exchange's buffers (the busiest group rank's pieces) */
    out->held += total;
    out->parts += total / G;
    out->copied += 2.0 * own_g_most * (G - 1) / G;
  }
  free(ns);
  free(flops);
  free(own);
  free(own_g);
}

void mt_cost_muon_price(const mt_price *q, const mt_config *cfg, const mt_registry *reg,
                        const mt_cost_dtypes *dt, mt_cost_muon *out) {
  memset(out, 0, sizeof *out);
  if (cfg->optim != MT_OPTIM_MUON) return;
  mt_muon_matrix *m = NULL;
  const int n = mt_muon_matrices(reg, cfg->muon_exclude, cfg->muon_ns_steps, &m);
  /* the iteration's dtype as the run resolves optim.muon_ns_dtype
   * (plan/layout.c), from the priced weights' copy */
  const mt_dtype t = cfg->muon_ns_dtype == MT_MUON_NS_BF16 ||
                             (cfg->muon_ns_dtype == MT_MUON_NS_AUTO && dt->weights == 2.0)
                         ? MT_DT_BF16
                         : MT_DT_F32;
  /* dense matrices over dp x cp (ranks tp apart) and tp; experts over edp
   * (etp x ep apart on the folded mesh) and etp */
  const int ndp = cfg->dp * cfg->cp, moe = cfg->ep * cfg->etp;
  price_group(q, t, cfg->muon_ns_steps, m, n, MT_GROUP_DP, ndp, cfg->tp, cfg->tp, 1, out);
  price_group(q, t, cfg->muon_ns_steps, m, n, MT_GROUP_EDP, cfg->tp * ndp / moe, cfg->etp, moe,
              1, out);
  free(m);
  /* per element of its parts: the gradient read and widened, clipped,
   * the momentum scaled and added, the mix (Nesterov: an axpy), the
   * update's decay and step on the master, the weights' copy written
   * (fp32 but the copy: 4 bytes each stream) */
  const double per_part = (dt->grads + 4.0) + 8.0 + 8.0 + 12.0 + 12.0 + 8.0 + 12.0 +
                          (dt->master > 0 ? 4.0 + dt->weights : 0.0);
  out->momentum_s = mt_price_elem_s(q, per_part * out->parts + 2.0 * q->act_bytes * out->copied);
  out->total_s = out->ns_s + out->exchange_s + out->momentum_s;
}
