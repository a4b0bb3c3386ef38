/* comm: the device mesh and every collective meshtrain issues.
 * World size = pp x dp x cp x tp, rank order innermost first tp, cp, dp, pp
 * (a tp group stays inside one node). The dp x cp group (the ranks that hold
 * the same parameters and reduce their gradients together: cp ranks see
 * other tokens of the same sequences) has rank cp_rank + cp * dp_rank, so
 * at cp = 1 it is the dp group, rank for rank. MoE layers see the same ranks
 * of a pipeline stage through a second, folded mesh etp, ep, edp (innermost
 * first, etp x ep x edp = tp x cp x dp: Megatron-Core's "parallel folding").
 * Groups are made once here with MPI_Comm_split; nothing else splits
 * communicators. Each group counts the
 * bytes its collectives move (per rank, as sent on the wire by the standard
 * ring algorithms) and the time ranks spend inside them. Host buffers go to
 * MPI; device buffers go to NCCL (nccl.c) on the groups it serves, and are
 * staged through host MPI on the others, behind the same calls. */
#ifndef MT_COMM_H
#define MT_COMM_H

#include <stddef.h>
#include <mpi.h>
#include "core/core.h"

/* How a group's calls are carried out: over MPI (and NCCL for device
 * buffers), only counted (count.c: no MPI, nothing moves; the plan), or
 * virtually (virtual.c: the virtual device; device buffers carry virtual
 * timestamps over MPI instead of their payload, host buffers move for real
 * and are timed too). */
typedef enum { MT_COMM_MPI = 0, MT_COMM_COUNT = 1, MT_COMM_VIRTUAL = 2 } mt_comm_backend;

typedef struct {
  const char *name; /* "dp", "tp", "pp", "cp", "dp_cp", "world", "node", "etp", "ep", "edp" */
  MPI_Comm comm;
  int size, rank;
  double bytes;   /* payload bytes this rank passed to collectives (send side) */
  double seconds; /* time in collectives: the host's, or the GPU's between an
                     event pair around each device call (direct backend) */
  long calls;
  /* device buffers in this group's collectives go to the direct backend
   * (NCCL) rather than through host copies; the backend's state for the
   * group (point-to-point goes direct where the backend has a channel for
   * the peer and tag, see mt_comm_direct.p2p_ok) */
  int direct;
  void *direct_state;
  /* device-buffer calls served by the direct backend and staged through
   * host MPI so far: how this group's device traffic really travelled */
  long device_direct, device_staged;
  mt_comm_backend backend; /* MT_COMM_MPI unless a count-only mesh made it */
  /* where the group sits in the world: group rank q is world rank world0 +
   * q * stride (every group of the mesh is such a progression) */
  int world0, stride;
  /* virtual backend: when this group's collective channel is next free,
   * and its two point-to-point send links (to the next rank, to others),
   * virtual seconds; its non-blocking collectives not yet priced, in issue
   * order (virtual.c) */
  double vchan, vsend[2];
  void *vqueue;
} mt_group;

/* The axes of the mesh: the dense mesh tp, cp, dp, pp (innermost first)
 * and the folded mesh of expert layers etp, ep, edp inside a stage. */
enum {
  MT_AX_TP = 1 << 0,
  MT_AX_CP = 1 << 1,
  MT_AX_DP = 1 << 2,
  MT_AX_PP = 1 << 3,
  MT_AX_ETP = 1 << 4,
  MT_AX_EP = 1 << 5,
  MT_AX_EDP = 1 << 6,
  MT_AX_FOLDED = MT_AX_ETP | MT_AX_EP | MT_AX_EDP
};

/* The mesh's sizes along every axis (etp = ep = 1 before the fold). */
typedef struct {
  int tp, cp, dp, pp, etp, ep;
} mt_mesh_dims;

/* One group of the mesh, as data: the axes it spans (the ranks that differ
 * only along them form one group, ranked innermost axis first) and where
 * its mt_group sits in mt_mesh. Groups of the folded mesh exist once the
 * mesh is folded. The one table (mesh.c) makes both the MPI communicators
 * (mt_mesh_create, mt_mesh_fold) and the NCCL ones (nccl.c). */
enum {
  MT_G_TP,
  MT_G_CP,
  MT_G_DP,
  MT_G_PP,
  MT_G_DP_CP,
  MT_G_TP_CP,
  MT_G_ETP,
  MT_G_EP,
  MT_G_EDP,
  MT_G_N
};
typedef struct {
  int id;           /* MT_G_*: its place in the table */
  const char *name;
  unsigned axes;
  size_t offset;
} mt_group_desc;

typedef struct {
  int world_size, world_rank;
  int tp, cp, dp, pp;             /* axis sizes */
  int tp_rank, cp_rank, dp_rank, pp_rank;
  mt_group world, tp_g, cp_g, dp_g, pp_g;
  mt_group dpcp_g;                /* dp x cp: gradients, ZeRO shards, the loss */
  mt_group tpcp_g;                /* tp x cp: the ranks holding pieces of the same sequences
                                     (rank tp_rank + tp x cp_rank; MoE routing counts) */
  mt_group node;                  /* the ranks sharing this node's memory */
  /* the folded mesh of MoE layers over the tp x cp x dp ranks of one stage
   * (mt_mesh_fold; etp = ep = 1 and no groups until then) */
  int etp, ep, edp;
  int etp_rank, ep_rank, edp_rank;
  mt_group etp_g, ep_g, edp_g;
  int folded;
} mt_mesh;

/* Validates the product against the world size (message names both) and
 * builds the groups of the dense mesh (tp, cp, dp, pp, dp_cp), world and
 * node. Every communicator returns errors (MPI_ERRORS_RETURN) instead of
 * aborting. Collective over MPI_COMM_WORLD. No communicator is made on
 * failure. */
int mt_mesh_create(mt_mesh *m, int tp, int cp, int dp, int pp, mt_err *e);
void mt_mesh_destroy(mt_mesh *m);
/* The folded mesh of expert layers: the q = tp_rank + tp * (cp_rank + cp *
 * dp_rank)-th rank of a pipeline stage is etp rank q % etp, ep rank
 * (q / etp) % ep, edp rank q / (etp * ep). Validates that etp x ep divides
 * tp x cp x dp (message names the keys) and builds the etp, ep and edp
 * groups. Collective over MPI_COMM_WORLD. */
int mt_mesh_fold(mt_mesh *m, int etp, int ep, mt_err *e);
/* (etp, ep, edp) coordinates of the stage-local rank q (no MPI: the plan) */
void mt_mesh_fold_coords(int q, int etp, int ep, int *etp_r, int *ep_r, int *edp_r);
/* world rank of the given coordinates */
int mt_mesh_rank_of(const mt_mesh *m, int tp_r, int cp_r, int dp_r, int pp_r);
/* A count-only mesh (count.c): world rank world_rank of a pp x dp x cp x tp
 * mesh folded into etp x ep x edp, every group of mt_mesh_create and
 * mt_mesh_fold with its size and this rank's place in it, and backend
 * MT_COMM_COUNT: no MPI, no communicator. Returns 0, or -1 with e set. */
int mt_mesh_count(mt_mesh *m, int tp, int cp, int dp, int pp, int world_rank, int etp, int ep,
                  mt_err *e);
void mt_group_reset_counters(mt_group *g);

/* A recording of one rank's collectives on a count-only mesh, in the
 * order it makes them (record.c): the plan's priced step records, and the
 * cost model replays it to price what dp's collectives expose as the
 * virtual device would run them (the issue order decides what hides). An
 * event's t is mt_now() when it happened: the step's op clock. */
enum { MT_REC_WAIT = 100, MT_REC_OP_BEGIN, MT_REC_OP_END, MT_REC_SKIP_BEGIN, MT_REC_SKIP_END };
typedef struct {
  double t;
  double bytes;     /* a call's, as counted */
  const char *name; /* its group's (a string of the mesh's: static) */
  int size, stride, world0;
  int rank, peer;   /* this rank's and a point-to-point call's peer's group ranks */
  int kind;         /* an mt_coll_kind, or MT_REC_* */
  int id;           /* a non-blocking call's number (its wait names it), an op's index, or 0 */
  int host;         /* a host buffer's call */
  int op;           /* an op mark's mt_pp_op_kind */
} mt_comm_event;
typedef struct {
  mt_comm_event *ev;
  long n, cap;
  int next_id;
} mt_comm_rec;
/* record every count-only call from now into r (NULL: stop); the previous
 * recording back */
mt_comm_rec *mt_comm_rec_use(mt_comm_rec *r);
/* a mark in the recording: MT_REC_OP_BEGIN / END of op i of the rank's
 * pipeline schedule, of kind op (an mt_pp_op_kind); MT_REC_SKIP_BEGIN /
 * END around calls the cost model prices apart (the replay leaves them) */
void mt_comm_rec_mark(int what, int i, int op);
void mt_comm_rec_free(mt_comm_rec *r);

/* The table of the mesh's groups: tp, cp, dp, pp, dp_cp, etp, ep, edp (in
 * that order); *n gets their number. */
const mt_group_desc *mt_mesh_groups(int *n);
/* the group of m that d describes; NULL for a folded group before the fold */
mt_group *mt_mesh_group(mt_mesh *m, const mt_group_desc *d);
mt_mesh_dims mt_mesh_dims_of(const mt_mesh *m);
/* The world ranks of the group d that holds world rank r, in group-rank
 * order (no MPI: the plan asks too); returns their number (at most the
 * world size, which members must hold). */
int mt_mesh_group_members(const mt_mesh_dims *dims, const mt_group_desc *d, int r, int *members);

/* ---- The collectives: one function per operation ----
 * Every call is written once over the element type t (core.h's mt_dtype):
 * MT_DT_F32, MT_DT_F64, MT_DT_BF16 (any 16-bit element: a move carries its
 * bits) and MT_DT_I32. Arguments come in one order: the group; the buffers
 * (send before recv; one buf where the call works in place); the element
 * counts and the layout; t; the reduction (mt_redop) of a reduction that
 * offers more than a sum; a point-to-point call's peer and tag, a
 * gather's root; where the buffers live (loc); a non-blocking call's
 * request last. Counts, displacements and sizes are in elements; bytes
 * counted on the group are those elements times mt_dtype_bytes(t).
 *
 * Sums add in t: fp32, fp64 and int32 as MPI_SUM does; MT_DT_BF16 adds
 * each pair in fp32 and rounds the partial sum to bf16 (to nearest even:
 * mt_comm_bf16_sum_op, NCCL's bf16 sum alike), as a bf16 all-reduce on
 * GPUs does. Maxima: fp32, fp64, int32.
 *
 * Host buffers go to MPI as they are. Device buffers go to the direct
 * backend (NCCL, below) on the groups it serves, and are otherwise staged
 * through host copies made with the device backend's copy functions
 * (mt_comm_set_device_copy): one host block for the send side, the receive
 * side and any scratch, copied back at the end of the call (of a
 * non-blocking one, in mt_wait). Groups of another backend (count.c: only
 * counted; virtual.c: timed) take every call as an mt_coll. Bytes and
 * time are counted on the group whatever the path. */
typedef enum { MT_RED_SUM = 0, MT_RED_MAX = 1 } mt_redop;

/* A non-blocking call's request, finished by mt_wait (which counts the
 * time spent waiting as communication time) or mt_progress. */
typedef struct mt_request {
  MPI_Request req;
  mt_group *g;
  int active;
  /* virtual backend: the timestamps in flight (heap: a request may move
   * while MPI holds them), what kind of call, and a send's completion */
  double *vbuf;
  int vkind;
  double vend;
  void *host;     /* staging block of a device buffer (freed in mt_wait), or NULL */
  void *back;     /* the part of it that goes back to the device, or NULL */
  void *dev_dst;  /* ... and where to */
  size_t bytes;
  void *direct;   /* the direct backend's handle, or NULL */
  /* the flight recorder: the call (NULL: not recorded), its peer (group
   * rank, -1 for a collective) and number (core/flight.h) */
  const char *fl_op;
  int fl_peer;
  long fl_call;
  int rec_id; /* a recorded call's number (record.c), its wait recorded; 0: none */
} mt_request;

/* All-reduce in place: n elements of buf, reduced by op over the group. */
void mt_allreduce(mt_group *g, void *buf, size_t n, mt_dtype t, mt_redop op, mt_loc loc);
void mt_iallreduce(mt_group *g, void *buf, size_t n, mt_dtype t, mt_redop op, mt_loc loc,
                   mt_request *r);

/* Reduce-scatter (sum) of parts laid end to end in rank order: send holds
 * the whole (counts[q] elements for rank q), recv this rank's counts[rank]
 * elements of the sum. Bytes counted: mt_bytes_reduce_scatter of the
 * whole. */
void mt_reduce_scatter(mt_group *g, const void *send, void *recv, const int *counts, mt_dtype t,
                       mt_loc loc);
void mt_ireduce_scatter(mt_group *g, const void *send, void *recv, const int *counts,
                        mt_dtype t, mt_loc loc, mt_request *r);
/* All-gather of parts: every rank's send (counts[rank] elements) ->
 * recv (part q, counts[q] elements, at displs[q]). send NULL: in place,
 * this rank's part already at displs[rank] of recv. Bytes counted:
 * mt_bytes_allgather of the whole. */
void mt_allgatherv(mt_group *g, const void *send, void *recv, const int *counts,
                   const int *displs, mt_dtype t, mt_loc loc);
void mt_iallgatherv(mt_group *g, const void *send, void *recv, const int *counts,
                    const int *displs, mt_dtype t, mt_loc loc, mt_request *r);
/* The packed forms of the two above, with size_t counts: parts laid end to
 * end in rank order (MoE's etp rows); each part and the whole must still
 * fit MPI's int count. Counted as the int forms are. */
void mt_reduce_scatter_packed(mt_group *g, const void *send, void *recv, const size_t *counts,
                              mt_dtype t, mt_loc loc);
void mt_allgatherv_packed(mt_group *g, const void *send, void *recv, const size_t *counts,
                          mt_dtype t, mt_loc loc);

/* Fixed blocks of n elements per rank. Gather to one rank: every rank's
 * send -> recv (size x n, rank order) on group rank root (recv may be NULL
 * elsewhere): O(n) on every rank but the root, where an all-gather or a sum
 * of vectors is O(size x n) on every rank; bytes counted: what leaves a
 * rank (none on the root). All-gather: every rank's send -> recv (size x
 * n, rank order); counted as mt_bytes_allgather of recv. All-to-all: send
 * (size x n, block q goes to rank q) -> recv (size x n, block q from rank
 * q); counted: the blocks sent to the other ranks. A count-only group
 * fills host recv buffers as if every rank had sent what this one sends (a
 * balanced run: the MoE counts the host reads). */
void mt_gather(mt_group *g, const void *send, void *recv, size_t n, mt_dtype t, int root,
               mt_loc loc);
void mt_allgather(mt_group *g, const void *send, void *recv, size_t n, mt_dtype t, mt_loc loc);
void mt_alltoall(mt_group *g, const void *send, void *recv, size_t n, mt_dtype t, mt_loc loc);
/* All-to-all of variable parts (MoE dispatch and combine): send holds
 * send_counts[q] elements for rank q, one part after the other in rank
 * order; recv receives recv_counts[q] elements from rank q the same way.
 * Bytes counted: what goes to the other ranks (mt_bytes_alltoallv). */
void mt_alltoallv(mt_group *g, const void *send, const size_t *send_counts, void *recv,
                  const size_t *recv_counts, mt_dtype t, mt_loc loc);

/* Collectives along one dim of a row-major tensor, e.g. the sequence dim T
 * of (B,T,C) activations under sequence parallelism. The full tensor is
 * viewed as (outer, size, inner): rank r holds the slice (outer, inner) at
 * index r of the middle dim (for (B,T,C) split along T: outer = B, inner =
 * T/size * C).
 * all-gather: send (outer, inner) of this rank -> recv (outer, size, inner).
 * reduce-scatter (sum): send (outer, size, inner) -> recv (outer, inner),
 * this rank's slice of the sum, by a ring of size-1 send/receive steps;
 * scratch holds 2 x outer x inner elements for host buffers (device ones
 * are summed in host scratch comm makes, or by the direct backend, which
 * needs none: scratch may be NULL there).
 * Bytes counted as for the plain collectives over the full tensor of
 * size x outer x inner elements (what the ring sends). */
void mt_allgather_dim(mt_group *g, const void *send, void *recv, size_t outer, size_t inner,
                      mt_dtype t, mt_loc loc);
void mt_reduce_scatter_dim(mt_group *g, const void *send, void *recv, size_t outer,
                           size_t inner, void *scratch, mt_dtype t, mt_loc loc);
/* All-to-all along one dim (Ulysses context parallelism: sequence shards to
 * head shards and back). send is viewed as (s_outer, size, s_inner): block
 * r of the middle dim goes to rank r; recv as (r_outer, size, r_inner):
 * block j comes from rank j. Each block holds s_outer x s_inner = r_outer x
 * r_inner elements. Bytes counted: what leaves this rank, (size-1)/size of
 * its send buffer (mt_bytes_alltoall). */
void mt_alltoall_dim(mt_group *g, const void *send, void *recv, size_t s_outer, size_t s_inner,
                     size_t r_outer, size_t r_inner, mt_dtype t, mt_loc loc);

/* Point-to-point between ranks of a group (pipeline stages, the context-
 * parallel ring): non-blocking send and receive of n elements to or from
 * group rank peer under tag, finished by mt_wait (time waiting counts on
 * the group); bytes counted on the send side. mt_sendrecv exchanges n
 * elements with peer, blocking. */
void mt_isend(mt_group *g, const void *buf, size_t n, mt_dtype t, int peer, int tag, mt_loc loc,
              mt_request *r);
void mt_irecv(mt_group *g, void *buf, size_t n, mt_dtype t, int peer, int tag, mt_loc loc,
              mt_request *r);
void mt_sendrecv(mt_group *g, const void *send, void *recv, size_t n, mt_dtype t, int peer,
                 int tag, mt_loc loc);

void mt_wait(mt_request *r);
/* give MPI a chance to progress outstanding requests (cheap) */
void mt_progress(mt_request *r);

/* The bf16 sum as an MPI reduction on 16-bit words (inout = round(in +
 * inout), in fp32, to nearest even): what the bf16 sums above reduce with,
 * for a stand-in backend to reduce alike. */
MPI_Op mt_comm_bf16_sum_op(void);

/* Bytes one rank sends for each collective with the ring algorithms the
 * bus-bandwidth figures assume: allreduce 2(n-1)/n * S, reduce-scatter and
 * all-gather (n-1)/n * S, where S is the full buffer in bytes. */
double mt_bytes_allreduce(size_t total_bytes, int n);
double mt_bytes_reduce_scatter(size_t total_bytes, int n);
double mt_bytes_allgather(size_t total_bytes, int n);
/* all-to-all of a total_bytes buffer per rank: (n-1)/n of it leaves the rank */
double mt_bytes_alltoall(size_t total_bytes, int n);
/* Bytes an all-to-all of these per-rank parts sends (rank's own part
 * excluded), elem_bytes each: what mt_alltoallv counts. */
double mt_bytes_alltoallv(const size_t *send_counts, int n, int rank, size_t elem_bytes);

/* ---- device buffers ----
 * How a device backend copies its memory to and from the host (bytes). */
typedef struct {
  void (*to_host)(void *host_dst, const void *dev_src, size_t bytes);
  void (*to_device)(void *dev_dst, const void *host_src, size_t bytes);
} mt_comm_device_copy;
/* Register (or with NULL remove) the device copy functions. Without them a
 * device buffer handed to comm is a fatal error. */
void mt_comm_set_device_copy(const mt_comm_device_copy *c);
/* device buffers staged through the host so far (a test reads it) */
long mt_comm_staged_calls(void);

/* ---- device collectives without host copies (NCCL) ----
 * A library that moves device buffers itself registers an mt_comm_direct;
 * comm hands it the device-buffer calls of every group whose `direct` flag
 * it set, and keeps staging the others through host MPI. Each call is
 * queued after the work the compute backend queued before it and returns a
 * handle: done() polls it, wait() returns once it is finished with later
 * compute ordered after it. quiesce() waits for the compute queued so far
 * when the backend's waits block the host (so that host time is
 * communication only). Bytes and calls are counted on the group as on the
 * MPI path; its seconds are the backend's to add: the device time between
 * an event pair around each call, once the pair has completed.
 * Point-to-point may be held back by the backend (to be issued together
 * with the calls that pair with it); flush() issues what it holds, and comm
 * calls it before the host blocks in MPI (the backend's own waits flush
 * where they block the host). idle() lets the device progress
 * while the host waits in MPI (a GPU needs nothing; an emulated one runs
 * its queued work then). flush and idle may be NULL.
 * Arguments as in the calls above, with t passed on (bf16 sums add in fp32
 * and round each partial sum to bf16, as the host bf16 sum does; the moves
 * carry any 16-bit element as bf16 bits); allgatherv's send is NULL for
 * the in-place form; reduce_scatter and reduce_scatter_dim sum. */
typedef struct {
  const char *name;
  void *(*allreduce)(mt_group *g, void *buf, size_t n, mt_dtype t, mt_redop op);
  void *(*reduce_scatter)(mt_group *g, const void *send, void *recv, const int *counts,
                          mt_dtype t);
  void *(*allgatherv)(mt_group *g, const void *send, void *recv, const int *counts,
                      const int *displs, mt_dtype t);
  void *(*allgather_dim)(mt_group *g, const void *send, void *recv, size_t outer, size_t inner,
                         mt_dtype t);
  void *(*reduce_scatter_dim)(mt_group *g, const void *send, void *recv, size_t outer,
                              size_t inner, mt_dtype t);
  void *(*alltoallv)(mt_group *g, const void *send, const size_t *send_counts, void *recv,
                     const size_t *recv_counts, mt_dtype t);
  void *(*alltoall_dim)(mt_group *g, const void *send, void *recv, size_t s_outer,
                        size_t s_inner, size_t r_outer, size_t r_inner, mt_dtype t);
  void *(*send)(mt_group *g, const void *buf, size_t n, mt_dtype t, int peer, int tag);
  void *(*recv)(mt_group *g, void *buf, size_t n, mt_dtype t, int peer, int tag);
  /* 1 when point-to-point with peer under tag goes direct in g */
  int (*p2p_ok)(const mt_group *g, int peer, int tag);
  int (*done)(void *handle);
  void (*wait)(void *handle);
  void (*quiesce)(void);
  void (*flush)(void);
  void (*idle)(void);
} mt_comm_direct;
/* Register (or with NULL remove) the direct backend. */
void mt_comm_set_direct(const mt_comm_direct *d);
/* device-buffer calls the direct backend served so far */
long mt_comm_direct_calls(void);
/* how a group's device buffers travel: "nccl" (the direct backend's name)
 * or "staged" */
const char *mt_group_device_path(const mt_group *g);
/* 1 when point-to-point with peer under tag goes to the direct backend */
int mt_group_p2p_direct(const mt_group *g, int peer, int tag);
/* how they did travel so far: "nccl" (every device call direct), "staged"
 * (every one staged), "mixed", or "none" (no device traffic) */
const char *mt_group_device_traffic(const mt_group *g);

/* The point-to-point tags meshtrain uses (pipeline activations, their
 * gradients, tied gradients between the first and last stage; context
 * parallelism's ring of keys and values and of their gradients). NCCL
 * matches messages by order, not by tag, so nccl.c gives each (neighbour
 * pair, tag) a communicator of its own: its messages then pair up as MPI's
 * would, whatever order the tags interleave in. */
enum {
  MT_TAG_PP_ACT = 11,
  MT_TAG_PP_GRAD = 12,
  MT_TAG_PP_TIED = 13,
  MT_TAG_CP_KV = 71,
  MT_TAG_CP_DKV = 72
};

/* ---- NCCL (nccl.c; nccl_none.c in a build without NCCL) ----
 * One communicator per group of the mesh's table (tp, cp, dp, pp, dp_cp,
 * and once folded etp, ep, edp) with more than one rank (groups with the
 * same ranks share one), made from the group's MPI communicator (unique id
 * broadcast over it); and a two-rank one per neighbour pair and tag for the
 * point-to-point sets asked for (p2p: MT_P2P_*). A group (or a neighbour
 * pair) where two ranks share a GPU stays staged: NCCL refuses duplicate
 * devices. Collective over MPI_COMM_WORLD, after the fold; every rank
 * passes its GPU's identifier (distinct GPUs, distinct strings) and its
 * compute stream (a cudaStream_t). host_wait: waits return only once the
 * data is there (1), or merely order later compute after it (0: the
 * default, compute and communication overlap); the group timers count the
 * device time between event pairs either way. On failure everything made
 * is freed (communicators aborted), nothing is left registered and e says
 * why. */
enum { MT_P2P_PP = 1, MT_P2P_PP_TIED = 2, MT_P2P_CP_RING = 4 };
typedef struct {
  const char *device_id;
  void *compute_stream;
  int host_wait;
  /* the groups that carry device traffic (bits 1 << MT_G_*; 0: all) and
   * the point-to-point sets this run uses (MT_P2P_*) */
  unsigned groups;
  unsigned p2p;
} mt_comm_nccl_opts;

/* What a run of cfg sends over NCCL: the groups that carry device traffic
 * (bits 1 << MT_G_*: tp; dp_cp, the gradients; cp under Ulysses; etp, ep
 * and edp of a MoE model) and its point-to-point sets (the pipeline's,
 * with its tied gradients, and context parallelism's ring). */
void mt_comm_nccl_needs(const mt_config *cfg, unsigned *groups, unsigned *p2p);
/* The point-to-point links (peer, tag) of rank `rank` in a group `name` of
 * `size` ranks for the sets p2p: the pipeline's activations and gradients
 * to both ring neighbours, its tied gradients between the first and last
 * stage, the context-parallel ring's keys and values and their gradients.
 * Returns their number (at most 8). Pure: the plan counts with it. */
int mt_comm_p2p_links(const char *name, int size, int rank, unsigned p2p, int *peers, int *tags);
/* NCCL's device memory for one rank of a mesh with one GPU per rank: a
 * communicator per distinct group of more than one rank among `groups`
 * (bits 1 << MT_G_*; 0: all) and per link, each
 * holding its channels' send and receive buffers (the NCCL defaults: 16
 * channels for a collective communicator, 2 for a two-rank link, 4 MiB a
 * buffer). An estimate the plan counts in its comm category and the run
 * reserves under the same category. */
double mt_comm_nccl_bytes(const mt_mesh_dims *dims, int world_rank, unsigned groups,
                          unsigned p2p);
int mt_comm_nccl_built(void);
int mt_comm_nccl_init(mt_mesh *m, const mt_comm_nccl_opts *o, mt_err *e);
void mt_comm_nccl_destroy(mt_mesh *m);
/* device memory NCCL calls held for their own staging (padded parts,
 * strided layouts), most at once, bytes */
size_t mt_comm_nccl_workspace_peak(void);

/* Layouts NCCL has no call for, built with copies (layout.c), on elements
 * of elem bytes. A 2D copy moves `rows` rows of `width` bytes from src
 * (rows `spitch` bytes apart) to dst (rows `dpitch` bytes apart). */
typedef void (*mt_copy2d_fn)(void *ctx, void *dst, size_t dpitch, const void *src, size_t spitch,
                             size_t width, size_t rows);
/* the parts' common size when every part has it and (displs given) part q
 * starts at q times it; else 0 */
size_t mt_parts_equal(const int *counts, const int *displs, int n);
size_t mt_parts_largest(const int *counts, int n);
/* parts (counts[q] elements at displs[q]) <-> padded rank-major (part q at
 * q * pitch elements): to_padded 1 copies parts into padded, 0 back */
void mt_copy_parts(void *parts, void *padded, size_t pitch, const int *counts,
                   const int *displs, int n, size_t elem, int to_padded, mt_copy2d_fn copy2d,
                   void *ctx);
/* (outer, size, inner) <-> (size, outer, inner) elements: to_rank_major 1
 * reads strided and writes rank_major, 0 the other way */
void mt_permute_dim(void *strided, void *rank_major, size_t outer, size_t inner, int size,
                    size_t elem, int to_rank_major, mt_copy2d_fn copy2d, void *ctx);

/* Distinct devices: 1 when the n identifiers (each id_len bytes, NUL
 * padded) are pairwise different. */
int mt_comm_ids_distinct(const char *ids, int n, size_t id_len);

/* ---- other backends ----
 * A call as a backend other than MPI sees it (count.c): its kind, the
 * bytes this rank puts on the wire (the figure every backend counts on the
 * group, computed once per call), and for an exchange of fixed blocks
 * whose values the host reads (mt_gather, mt_allgather, mt_alltoall on
 * host memory) n elements of elem bytes per rank from send to recv (recv
 * NULL where nothing comes back: a gather's other ranks). */
typedef enum {
  MT_COLL_REDUCE, MT_COLL_GATHER, MT_COLL_SCATTER, MT_COLL_ALLTOALL, MT_COLL_SEND, MT_COLL_RECV,
  MT_COLL_SENDRECV
} mt_coll_kind;
/* its kind as core's prices count a collective's steps (MT_PRICE_PASS,
 * _ALLTOALL, _ALLREDUCE): the virtual device and the cost model's replay */
int mt_comm_price_kind(mt_coll_kind kind);
typedef struct {
  mt_coll_kind kind;
  double bytes;
  const void *send;
  void *recv;
  size_t n, elem;
  mt_loc loc;               /* where the buffers live */
  int peer, tag;            /* point-to-point: the group rank and the tag */
  mt_request *req;          /* a non-blocking call's request, else NULL */
} mt_coll;
/* Carries out c when g's backend is not MPI and returns 1 (the caller is
 * done); 0 when the caller goes on over MPI (an MPI group; on the virtual
 * backend, a host buffer, whose values move for real after being timed). */
int mt_comm_backend_call(mt_group *g, const mt_coll *c);
/* Every group of m but the node's on the virtual backend (after
 * mt_mesh_create and mt_mesh_fold). */
void mt_mesh_set_virtual(mt_mesh *m);

#endif
