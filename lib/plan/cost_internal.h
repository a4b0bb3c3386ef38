/* Shared by the cost model's files (not part of the API; plan.h has it):
 *   cost_profile.c  a profile's [cost] section: read, written, as core's
 *                   prices; the memory headroom it leaves
 *   cost_dtypes.c   the bytes per element of each state category
 *   cost_compute.c  the compute of a chunk: matmuls, attention, elementwise
 *   cost_comm.c     links and collectives: a chunk's tp, cp and ep seconds
 *   cost_bounds.c   lower bounds of step time and memory (the search's)
 *   cost_muon.c     the optimizer step under optim.name = muon
 *   cost_replay.c   dp's exposure: a rank's recorded collectives replayed
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
double mt_cost_gemm_s(const mt_cost_profile *p, double es, double m, double n, double k,
                      double calls);
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
double mt_cost_coll_xfer_s(const mt_price *q, double bytes, int n, int stride, int kind);
double mt_cost_coll_lat(const mt_price *q, int n, int stride, int kind);
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

/* cost_replay.c: a rank's recorded step (the plan's priced step, comm.h's
 * recording) replayed as the virtual device runs it. Prepared once per
 * recording (mt_cost_replay_prepare: each call priced): the ops' seconds
 * are the op clock's times op_scale of the op's kind (1: priced as the
 * plan ran them; another stack's attention prices them apart); bytes as
 * counted times reduce_scale (dp's reductions), gather_scale (dp's
 * gathers) or msg_scale (every other group's), the priced dtype's bytes
 * over the counted one's; host buffers' calls as counted. */
typedef struct {
  double op_scale[MT_PP_NKINDS];
  double reduce_scale, gather_scale, msg_scale;
  /* a pipeline stage: the schedule's op i of this rank begins no earlier
   * than op_start[i] and ends no earlier than op_end[i] (the schedule's
   * simulation; n_ops of them); NULL: ops back to back */
  const double *op_start, *op_end;
  int n_ops;
  /* the blocking calls over groups that span the stages (pp, world), in
   * order: the first n_sync begin no earlier than sync_at[] (the latest
   * stage's arrival) */
  const double *sync_at;
  int n_sync;
} mt_cost_replay_opts;
#define MT_REPLAY_SYNCS 8
#define MT_REPLAY_CHANNELS 32
enum {
  MT_RP_OP_BEGIN, MT_RP_OP_END, MT_RP_SKIP_BEGIN, MT_RP_SKIP_END, MT_RP_WAIT,
  MT_RP_ISSUE,   /* a non-blocking call */
  MT_RP_CALL,    /* a blocking one */
  MT_RP_EXCHANGE /* a point-to-point exchange after the schedule (tied embeddings) */
};
typedef struct {
  double t, d; /* the op clock; a call's seconds */
  int what, id, op, chan;
  char dp, spans;
} mt_cost_replay_ev;
typedef struct {
  mt_cost_replay_ev *ev;
  long n;
  int n_ids;
  double overlap, op_scale[MT_PP_NKINDS];
} mt_cost_replay_prep;
typedef struct {
  double dp_exposed_s; /* the rank's waits on dp, dp_cp and edp: their exposed seconds */
  double dp_total_s;   /* their collectives' whole seconds */
  double other_s;      /* its waits on the other groups' collectives */
  double p2p_s;        /* its point-to-point exchanges after the last op (tied embeddings) */
  double span_s, ops_s; /* the replayed step, of it the ops' seconds */
  double ops_in_s;     /* of those, inside the schedule's ops */
  double post_s;       /* of the span, the ops' seconds after the last op (the optimizer's) */
  double sync_arrival[MT_REPLAY_SYNCS]; /* when the rank reached each call over pp or world */
  int n_sync;
} mt_cost_replay;
void mt_cost_replay_prepare(const mt_comm_rec *rec, const mt_price *q,
                            const mt_cost_replay_opts *o, mt_cost_replay_prep *out);
void mt_cost_replay_prep_free(mt_cost_replay_prep *p);
/* one rank alone (its op times and the calls' starts from o) */
void mt_cost_replay_step(const mt_cost_replay_prep *p, const mt_cost_replay_opts *o,
                         mt_cost_replay *out);
/* a pipeline's n ranks together (rank r: p[r], o[r]): each call over every
 * stage starts at the latest rank's arrival */
void mt_cost_replay_stages(const mt_cost_replay_prep *const *p, const mt_cost_replay_opts *o,
                           int n, mt_cost_replay *out);

#endif
