/* Shared by the cost model's files (not part of the API; plan.h has it):
 *   cost_profile.c  a profile's [cost] section: read, written, as core's
 *                   prices; the memory headroom it leaves
 *   cost_dtypes.c   the bytes per element of each state category
 *   cost_compute.c  the compute of a chunk: matmuls, attention, elementwise
 *   cost_comm.c     links and collectives: a chunk's tp, cp and ep seconds
 *   cost_bounds.c   lower bounds of step time and memory (the search's)
 *   cost_muon.c     the optimizer step under optim.name = muon
 *   cost.c          a step: the stages, the pipeline, dp's exposed part
 * All seconds, bytes and FLOPs are per rank. */
#ifndef MT_PLAN_COST_INTERNAL_H
#define MT_PLAN_COST_INTERNAL_H

#include "plan/plan.h"

/* the local shapes of a dense block on one rank (see model.h) */
typedef struct {
  double B, T, C, Cl, Fl, NHl, hs, Vl;
  double Wqkv, Fin; /* the q|k|v projection's outputs, the MLP's input projection's (2 Fl: SwiGLU) */
  int T_full, cp;
} mt_cost_shape;

/* the seconds of one chunk of a stage for one micro-batch */
typedef struct {
  double fwd, bwd;         /* compute seconds of the forward, of the whole backward */
  double bwd_input;        /* of the backward, the input-gradient pass (split backward) */
  double tp;               /* tp communication seconds, forward + backward */
  double cp, ep;           /* exposed cp and ep (all-to-all) seconds, forward + backward */
} mt_chunk_cost;

/* A chunk as priced: the layers [l0, l1) of the model m (n_moe of them MoE
 * blocks), with the embedding (embed) and the LM head (head) where it holds
 * them, over a micro-batch of B sequences. */
typedef struct {
  const mt_gpt *m;
  int l0, l1, n_moe, embed, head, B;
} mt_chunk_desc;

/* cost_compute.c */

/* seconds of one matmul of m x n x k, `calls` times */
double mt_cost_gemm_s(const mt_cost_profile *p, double m, double n, double k, double calls);
/* one dense block's matmuls (lin) and attention forward (att), seconds */
void mt_cost_dense_layer(const mt_cost_profile *p, const mt_cost_shape *d, double act_bytes,
                         double *lin, double *att);
/* the local shapes of a dense block under cfg's layout, micro-batch B */
mt_cost_shape mt_cost_shape_of(const mt_config *cfg, const mt_model_shape *sh, int B);
/* The compute of chunk k (fwd, bwd, bwd_input; the rest zero). ops_s: the
 * seconds of the chunk's forward, backward (input pass) and weight pass
 * ops per micro-batch as the virtual device prices the ops the code runs
 * (the plan's step on a clock), which replace the compute priced here from
 * the shapes; NULL: from the shapes (attention = materialized, another
 * stack's, has no ops of ours). *att: one layer's attention forward, the
 * compute cp's ring hides behind. */
mt_chunk_cost mt_cost_chunk_compute(const mt_cost_profile *p, const mt_config *cfg,
                                    const mt_cost_dtypes *dt, const mt_chunk_desc *k,
                                    const double *ops_s, double *att);

/* cost_comm.c */

/* a link's bandwidth (bytes/s) and latency (s): inside a node or across */
double mt_cost_link_bw(const mt_cost_profile *p, int inside);
double mt_cost_link_lat(const mt_cost_profile *p, int inside);
/* A collective over n ranks `stride` apart (rank order tp, cp, dp, pp on
 * nodes of devices_per_node ranks), priced as the virtual device prices
 * it (core's mt_price_coll_s: hierarchical across nodes): the seconds of
 * `bytes` (comm's count, the sum of many calls') without the latency, and
 * the latency of one call. */
double mt_cost_coll_xfer_s(const mt_price *q, double bytes, int n, int stride, int a2a);
double mt_cost_coll_lat(const mt_price *q, int n, int stride);
/* The communication of chunk k into c (tp, cp, ep): it sends cb[0..3]
 * bytes over tp, cp, ep and etp (the plan's count of the chunk's forward
 * and backward, in the run's message dtype: priced at msg_scale times
 * them, the priced dtype's bytes over the counted one's); att: one layer's
 * attention forward (mt_cost_chunk_compute's); q: the profile's prices. */
void mt_cost_chunk_comm(const mt_cost_profile *p, const mt_price *q, const mt_config *cfg,
                        double msg_scale, const mt_chunk_desc *k, double att, const double cb[4],
                        mt_chunk_cost *c);

/* cost_muon.c: the optimizer step under Muon on a rank of a stage whose
 * registry is reg (zero for AdamW): seconds of the busiest owner's
 * Newton-Schulz iterations, of the exchange's all-to-alls (exposed: they
 * follow the backward), of the momentum's and update's elementwise work;
 * the busiest rank's Newton-Schulz FLOPs and all of the stage's; the
 * exchange's most bytes a rank sends per group (dp x cp, tp, edp, etp);
 * elements of Muon's matrices the rank holds (its shards) and its parts
 * of them (1 / G each), and the elements it copies through the exchange's
 * buffers. q: the profile's prices (act_bytes: the priced activations');
 * dt: the priced dtypes (the iteration in bf16 when the weights' copy is). */
typedef struct {
  double total_s, ns_s, exchange_s, momentum_s;
  double flops_busiest, flops_total;
  double dp_bytes, tp_bytes, edp_bytes, etp_bytes;
  double held, parts, copied;
} mt_cost_muon;
void mt_cost_muon_price(const mt_price *q, const mt_config *cfg, const mt_registry *reg,
                        const mt_cost_dtypes *dt, mt_cost_muon *out);

#endif
