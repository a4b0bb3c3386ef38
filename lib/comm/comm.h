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
 * buffers), or only counted (count.c: no MPI, nothing moves; the plan). */
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
   * virtual seconds */
  double vchan, vsend[2];
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

/* Every collective takes the buffers and where they live (mt_loc): host
 * buffers go to MPI as they are; device buffers go to NCCL where a backend
 * provides it, and are otherwise staged through host copies made with the
 * device backend's copy functions (mt_comm_set_device_copy). Bytes and time
 * are counted on the group either way. */

/* How a device backend copies its memory to and from the host (bytes). */
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
 * Element counts and parts as in the host calls below, of elements of type
 * t: the fp32 calls pass MT_DT_F32, the 16-bit ones MT_DT_BF16 (the bf16
 * sums add in fp32 and round each partial sum to bf16, as the host bf16
 * sum does; the moves carry any 16-bit element as bf16 bits); allgatherv's
 * send is NULL for the in-place form (this rank's part already at
 * displs[rank]). Point-to-point moves floats. */
typedef enum { MT_RED_SUM = 0, MT_RED_MAX = 1 } mt_redop;
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
  /* all-to-all of variable parts, as mt_alltoallv_f32 */
  void *(*alltoallv)(mt_group *g, const void *send, const size_t *send_counts, void *recv,
                     const size_t *recv_counts, mt_dtype t);
  /* all-to-all along one dim, as mt_alltoall_dim_f32 */
  void *(*alltoall_dim)(mt_group *g, const void *send, void *recv, size_t s_outer,
                        size_t s_inner, size_t r_outer, size_t r_inner, mt_dtype t);
  void *(*send)(mt_group *g, const float *buf, size_t n, int peer, int tag);
  void *(*recv)(mt_group *g, float *buf, size_t n, int peer, int tag);
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

/* A call as a backend other than MPI sees it (count.c): its kind, the
 * bytes this rank puts on the wire (the figure every backend counts on the
 * group, computed once per call), and for integer exchanges n ints per
 * rank from send to recv. */
typedef enum {
  MT_COLL_REDUCE, MT_COLL_GATHER, MT_COLL_SCATTER, MT_COLL_ALLTOALL, MT_COLL_GATHER_I32,
  MT_COLL_ALLTOALL_I32, MT_COLL_SEND, MT_COLL_RECV, MT_COLL_SENDRECV
} mt_coll_kind;
struct mt_request;
typedef struct {
  mt_coll_kind kind;
  double bytes;
  const int *send;
  int *recv;
  size_t n;
  mt_loc loc;               /* where the buffers live (MT_LOC_HOST for integers) */
  int peer, tag;            /* point-to-point: the group rank and the tag */
  struct mt_request *req;   /* a non-blocking call's request, else NULL */
} mt_coll;
/* Carries out c when g's backend is not MPI and returns 1 (the caller is
 * done); 0 when the caller goes on over MPI (an MPI group; on the virtual
 * backend, a host buffer, whose values move for real after being timed). */
int mt_comm_backend_call(mt_group *g, const mt_coll *c);
/* Every group of m but the node's on the virtual backend (after
 * mt_mesh_create and mt_mesh_fold). */
void mt_mesh_set_virtual(mt_mesh *m);

/* Blocking collectives on float buffers (sum). n = elements. */
void mt_allreduce_sum_f32(mt_group *g, float *buf, size_t n, mt_loc loc);
void mt_allreduce_sum_f64(mt_group *g, double *buf, size_t n, mt_loc loc);
void mt_allreduce_max_f64(mt_group *g, double *buf, size_t n, mt_loc loc);
void mt_allreduce_max_f32(mt_group *g, float *buf, size_t n, mt_loc loc);
/* counts[r] elements go to rank r; recv has counts[rank] elements */
void mt_reduce_scatter_sum_f32(mt_group *g, const float *send, float *recv, const int *counts,
                               mt_loc loc);
/* in place: every rank's part (counts[r] at displs[r]) is gathered into buf */
void mt_allgatherv_inplace_f32(mt_group *g, float *buf, const int *counts, const int *displs,
                               mt_loc loc);

/* Collectives along one dim of a row-major tensor, e.g. the sequence dim T of
 * (B,T,C) activations under sequence parallelism. The full tensor is viewed as
 * (outer, size, inner): rank r holds the slice (outer, inner) at index r of
 * the middle dim (for (B,T,C) split along T: outer = B, inner = T/size * C).
 * all-gather: send (outer, inner) of this rank -> recv (outer, size, inner).
 * reduce-scatter (sum): send (outer, size, inner) -> recv (outer, inner), this
 * rank's slice of the sum, by a ring of size-1 send/receive steps; scratch
 * holds 2*outer*inner floats (host memory for host buffers). Bytes counted as
 * for the plain collectives over the full tensor of size*outer*inner floats
 * (what the ring sends). */
void mt_allgather_dim_f32(mt_group *g, const float *send, float *recv, size_t outer,
                          size_t inner, mt_loc loc);
void mt_reduce_scatter_dim_f32(mt_group *g, const float *send, float *recv, size_t outer,
                               size_t inner, float *scratch, mt_loc loc);

/* All-to-all along one dim (Ulysses context parallelism: sequence shards to
 * head shards and back). send is viewed as (s_outer, size, s_inner): block r
 * of the middle dim goes to rank r; recv as (r_outer, size, r_inner): block
 * j comes from rank j. Each block holds s_outer * s_inner = r_outer *
 * r_inner floats. Bytes counted: what leaves this rank, (size-1)/size of
 * its send buffer (mt_bytes_alltoall). */
void mt_alltoall_dim_f32(mt_group *g, const float *send, float *recv, size_t s_outer,
                         size_t s_inner, size_t r_outer, size_t r_inner, mt_loc loc);
/* Gather to one rank: every rank's n doubles (host) -> all (size x n, rank
 * order) on group rank root (all may be NULL elsewhere): O(n) on every rank
 * but the root, where an all-gather or a sum of vectors is O(size x n) on
 * every rank. Bytes counted: what leaves a rank (none on the root). */
void mt_gather_f64(mt_group *g, const double *mine, size_t n, double *all, int root);
/* Integer all-gather: every rank's n ints -> recv (size x n), rank order. */
void mt_allgather_i32(mt_group *g, const int *send, int *recv, size_t n);
/* Integer all-to-all: n ints to every rank (send: size x n, block r goes to
 * rank r) -> recv (size x n, block r from rank r); host memory. Bytes
 * counted: the blocks sent to the other ranks. */
void mt_alltoall_i32(mt_group *g, const int *send, int *recv, size_t n);
/* All-to-all of variable parts (MoE dispatch and combine): send holds
 * send_counts[r] floats for rank r, one part after the other in rank order;
 * recv receives recv_counts[r] floats from rank r the same way. Bytes
 * counted: what goes to the other ranks (own part excluded). */
void mt_alltoallv_f32(mt_group *g, const float *send, const size_t *send_counts, float *recv,
                      const size_t *recv_counts, mt_loc loc);
/* Blocking all-gather of variable parts: rank r's counts[r] floats (send)
 * -> recv, parts in rank order; bytes counted as mt_bytes_allgather of the
 * whole. */
void mt_allgatherv_f32(mt_group *g, const float *send, float *recv, const size_t *counts,
                       mt_loc loc);
/* Reduce-scatter (sum) of variable parts: send holds the whole (parts in
 * rank order), recv this rank's counts[rank] floats of the sum; bytes counted
 * as mt_bytes_reduce_scatter of the whole. */
void mt_reduce_scatterv_f32(mt_group *g, const float *send, float *recv, const size_t *counts,
                            mt_loc loc);
/* Bytes an all-to-all of these per-rank parts sends (rank's own part
 * excluded), bytes each: what mt_alltoallv_f32 counts. */
double mt_bytes_alltoallv(const size_t *send_counts, int n, int rank, size_t elem_bytes);

/* Non-blocking forms; a request is finished by mt_wait (which counts the time
 * spent waiting as communication time). A device buffer's host staging copy
 * goes back to the device in mt_wait. */
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
} mt_request;
void mt_iallreduce_sum_f32(mt_group *g, float *buf, size_t n, mt_loc loc, mt_request *r);
void mt_ireduce_scatter_sum_f32(mt_group *g, const float *send, float *recv,
                                const int *counts, mt_loc loc, mt_request *r);
/* every rank's send (counts[rank] floats) -> recv (counts[r] at displs[r]) */
void mt_iallgatherv_f32(mt_group *g, const float *send, float *recv, const int *counts,
                        const int *displs, mt_loc loc, mt_request *r);
/* The 16-bit calls below (bf16 values moved as bits, or summed with each
 * addition rounded): half the bytes of fp32, counts and displs in
 * elements. Host memory goes to MPI; device buffers go to the direct
 * backend (NCCL) on the groups it serves, as the fp32 calls' do (elements
 * MT_DT_BF16, the same bytes counted), and are otherwise staged through
 * host copies, with the scratch of mt_reduce_scatter_dim_bf16 on the host
 * (the direct backend needs none). Count-only groups count them as any
 * other call.
 * The two all-gathers: */
void mt_allgatherv_inplace_u16(mt_group *g, uint16_t *buf, const int *counts, const int *displs,
                               mt_loc loc);
void mt_iallgatherv_u16(mt_group *g, const uint16_t *send, uint16_t *recv, const int *counts,
                        const int *displs, mt_loc loc, mt_request *r);
/* bf16 activations over tp (sums rounded to bf16 after each addition of
 * two ranks' parts, as a bf16 all-reduce on GPUs does):
 * the all-reduce, and sequence parallelism's all-gather and reduce-scatter
 * along a dimension (as mt_allgather_dim_f32, mt_reduce_scatter_dim_f32;
 * scratch holds 2 outer x inner bf16). */
void mt_allreduce_sum_bf16(mt_group *g, mt_bf16 *buf, size_t n, mt_loc loc);
/* MoE dispatch and combine on bf16 rows: mt_alltoallv_f32's parts and byte
 * count on 16-bit elements (counts in elements; moved as bits). */
void mt_alltoallv_u16(mt_group *g, const uint16_t *send, const size_t *send_counts,
                      uint16_t *recv, const size_t *recv_counts, mt_loc loc);
/* The dp engine's gradient reductions in bf16 (parallel.grad_reduce_dtype =
 * bf16), non-blocking, as mt_iallreduce_sum_f32 and
 * mt_ireduce_scatter_sum_f32 (counts in elements). */
void mt_iallreduce_sum_bf16(mt_group *g, mt_bf16 *buf, size_t n, mt_loc loc, mt_request *r);
void mt_ireduce_scatter_sum_bf16(mt_group *g, const mt_bf16 *send, mt_bf16 *recv,
                                 const int *counts, mt_loc loc, mt_request *r);
void mt_allgather_dim_u16(mt_group *g, const uint16_t *send, uint16_t *recv, size_t outer,
                          size_t inner, mt_loc loc);
/* Ulysses' all-to-all on bf16 activations: mt_alltoall_dim_f32's layout
 * and byte count on 16-bit elements (moved as bits). */
void mt_alltoall_dim_u16(mt_group *g, const uint16_t *send, uint16_t *recv, size_t s_outer,
                         size_t s_inner, size_t r_outer, size_t r_inner, mt_loc loc);
void mt_reduce_scatter_dim_bf16(mt_group *g, const mt_bf16 *send, mt_bf16 *recv, size_t outer,
                                size_t inner, mt_bf16 *scratch, mt_loc loc);
/* The bf16 sum as an MPI reduction on 16-bit words (inout = round(in +
 * inout), in fp32, to nearest even): what the 16-bit sums above reduce with,
 * for a stand-in backend to reduce alike. */
MPI_Op mt_comm_bf16_sum_op(void);
void mt_wait(mt_request *r);
/* give MPI a chance to progress outstanding requests (cheap) */
void mt_progress(mt_request *r);

/* Bytes one rank sends for each collective with the ring algorithms the
 * bus-bandwidth figures assume: allreduce 2(n-1)/n * S, reduce-scatter and
 * all-gather (n-1)/n * S, where S is the full buffer in bytes. */
double mt_bytes_allreduce(size_t total_bytes, int n);
double mt_bytes_reduce_scatter(size_t total_bytes, int n);
double mt_bytes_allgather(size_t total_bytes, int n);
/* all-to-all of a total_bytes buffer per rank: (n-1)/n of it leaves the rank */
double mt_bytes_alltoall(size_t total_bytes, int n);

/* Point-to-point between ranks of a group (pipeline stages): non-blocking
 * send and receive of n floats to or from group rank peer, finished by
 * mt_wait (time waiting counts on the group); bytes counted on the send
 * side. mt_sendrecv_f32 exchanges n floats with peer, blocking. */
void mt_isend_f32(mt_group *g, const float *buf, size_t n, int peer, int tag, mt_loc loc,
                  mt_request *r);
void mt_irecv_f32(mt_group *g, float *buf, size_t n, int peer, int tag, mt_loc loc,
                  mt_request *r);
void mt_sendrecv_f32(mt_group *g, const float *send, float *recv, size_t n, int peer, int tag,
                     mt_loc loc);

#endif
