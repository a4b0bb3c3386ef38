/* comm: the device mesh and every collective meshtrain issues.
 * World size = pp x dp x cp x tp, rank order innermost first tp, cp, dp, pp
 * (a tp group stays inside one node). MoE layers see the same ranks of a
 * pipeline stage through a second, folded mesh etp, ep, edp (innermost
 * first, etp x ep x edp = tp x cp x dp: Megatron-Core's "parallel folding").
 * Groups are made once here with MPI_Comm_split; nothing else splits
 * communicators. Each group counts the
 * bytes its collectives move (per rank, as sent on the wire by the standard
 * ring algorithms) and the time ranks spend inside them. MPI backend, host
 * buffers; an NCCL backend for device buffers slots in behind the same calls. */
#ifndef MT_COMM_H
#define MT_COMM_H

#include <stddef.h>
#include <mpi.h>
#include "core/core.h"

typedef struct {
  const char *name; /* "dp", "tp", "pp", "cp", "etp", "ep", "edp", "world" */
  MPI_Comm comm;
  int size, rank;
  double bytes;   /* payload bytes this rank passed to collectives (send side) */
  double seconds; /* wall time this rank spent in (or waiting for) collectives */
  long calls;
} mt_group;

typedef struct {
  int world_size, world_rank;
  int tp, cp, dp, pp;             /* axis sizes */
  int tp_rank, cp_rank, dp_rank, pp_rank;
  mt_group world, tp_g, cp_g, dp_g, pp_g;
  mt_group node;                  /* the ranks sharing this node's memory */
  /* the folded mesh of MoE layers over the tp x cp x dp ranks of one stage
   * (mt_mesh_fold; etp = ep = 1 and no groups until then) */
  int etp, ep, edp;
  int etp_rank, ep_rank, edp_rank;
  mt_group etp_g, ep_g, edp_g;
  int folded;
} mt_mesh;

/* Validates the product against the world size (message names both) and
 * builds the groups. Collective over MPI_COMM_WORLD. No communicator is made
 * on failure. */
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
void mt_group_reset_counters(mt_group *g);

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
typedef struct {
  MPI_Request req;
  mt_group *g;
  int active;
  void *host;     /* staging block of a device buffer (freed in mt_wait), or NULL */
  void *back;     /* the part of it that goes back to the device, or NULL */
  void *dev_dst;  /* ... and where to */
  size_t bytes;
} mt_request;
void mt_iallreduce_sum_f32(mt_group *g, float *buf, size_t n, mt_loc loc, mt_request *r);
void mt_ireduce_scatter_sum_f32(mt_group *g, const float *send, float *recv,
                                const int *counts, mt_loc loc, mt_request *r);
/* every rank's send (counts[rank] floats) -> recv (counts[r] at displs[r]) */
void mt_iallgatherv_f32(mt_group *g, const float *send, float *recv, const int *counts,
                        const int *displs, mt_loc loc, mt_request *r);
void mt_wait(mt_request *r);
/* give MPI a chance to progress outstanding requests (cheap) */
void mt_progress(mt_request *r);

/* Bytes one rank sends for each collective with the ring algorithms the
 * bus-bandwidth figures assume: allreduce 2(n-1)/n * S, reduce-scatter and
 * all-gather (n-1)/n * S, where S is the full buffer in bytes. */
double mt_bytes_allreduce(size_t total_bytes, int n);
double mt_bytes_reduce_scatter(size_t total_bytes, int n);
double mt_bytes_allgather(size_t total_bytes, int n);

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
