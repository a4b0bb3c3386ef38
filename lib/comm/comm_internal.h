/* Shared by lib/comm's files (not part of the API): what every collective
 * is made of. A call computes the bytes it counts once, offers itself to a
 * backend other than MPI (MT_OTHER_BACKEND), handles a group of one, hands
 * device buffers to the direct backend where the group has one
 * (MT_DIRECT_BLOCKING, MT_DIRECT_START), and otherwise runs its MPI call on
 * host views of its buffers (mt_comm_stage) with the element type's MPI
 * datatype and reduction (elem.c), counting its time and bytes (path.c). */
#ifndef MT_COMM_INTERNAL_H
#define MT_COMM_INTERNAL_H

#include "comm/comm.h"
#include "core/flight.h"

/* The flight recorder's entry for a blocking call of g (core/flight.h):
 * peer a group rank for point-to-point (else -1), call MT_FLIGHT_NEW for a
 * new collective, a request's number for its wait, 0 for point-to-point. */
#define MT_FLIGHT_BEGIN(g, op, peer, call, bytes)                                   \
  mt_flight_begin((op), (g)->name, (g)->world0, (g)->stride, (g)->size,             \
                  (peer) < 0 ? -1 : (g)->world0 + (peer) * (g)->stride, (call), (bytes))

/* ---- element types (elem.c) ---- */
/* t's MPI datatype (bf16: 16-bit words) */
MPI_Datatype mt_comm_mpi_type(mt_dtype t);
/* the MPI reduction for op on t (a bf16 sum: mt_comm_bf16_sum_op) */
MPI_Op mt_comm_mpi_op(mt_dtype t, mt_redop op);
/* dst[i] = a[i] + b[i], n elements of t, as t's sum adds (bf16: in fp32,
 * rounded to bf16); dst may be a or b */
void mt_comm_add(mt_dtype t, void *dst, const void *a, const void *b, size_t n);
/* n as an MPI count (beyond INT_MAX: a fatal error naming the call) */
int mt_comm_count_of(size_t n);
size_t mt_comm_sum_counts(const int *counts, int n);
/* int counts c and displacements d of n parts laid end to end; *total
 * gets their sum */
void mt_comm_int_parts(const size_t *counts, int n, int *c, int *d, size_t *total);

/* ---- counting, waiting, the direct backend (path.c) ---- */
/* a collective's time since t0, bytes and call (and its span in the
 * timeline); a point-to-point call's (a send's span on its track) */
void mt_comm_count(mt_group *g, double t0, double bytes);
void mt_comm_count_p2p(mt_group *g, double t0, double bytes);
/* Waits for r; with a direct backend the wait polls and lets the device
 * progress (work a peer needs may be queued behind communication). */
int mt_comm_wait_request(MPI_Request *r, MPI_Status *st);
/* whether blocking calls go as non-blocking ones and a polling wait: with
 * a direct backend that lets the device progress (which first issues
 * what it holds back); plain MPI blocking calls otherwise (their tuned
 * algorithms) */
int mt_comm_polling(void);
/* a non-blocking MPI call's code (rc, with its request r) turned blocking */
int mt_comm_blocking(int rc, MPI_Request *r);
/* A blocking MPI collective: its non-blocking form icall (filling request
 * *q) and a polling wait where the host must let the device progress, the
 * blocking form call otherwise. Its value is the MPI return code. */
#define MT_COMM_BLOCKING(q, icall, call) \
  (mt_comm_polling() ? mt_comm_blocking((icall), (q)) : (call))

/* the registered direct backend, or NULL */
const mt_comm_direct *mt_comm_direct_backend(void);
/* does a call of g on buffers at loc go to the direct backend? */
int mt_comm_goes_direct(const mt_group *g, mt_loc loc);
/* bytes and calls of a direct call (its seconds come from the backend);
 * device_calls device-buffer calls it made */
void mt_comm_count_direct(mt_group *g, double bytes, int device_calls);

/* A blocking direct call: queued compute first, then the call (an
 * expression over the backend d_, e.g. d_->allreduce(...)) and its wait
 * (the backend issues what it holds back where its wait blocks the host). */
#define MT_DIRECT_BLOCKING(g, bytes, call)                   \
  do {                                                       \
    const mt_comm_direct *d_ = mt_comm_direct_backend();     \
    d_->quiesce();                                           \
    void *dh_ = (call);                                      \
    d_->wait(dh_);                                           \
    mt_comm_count_direct((g), (bytes), 1);                   \
  } while (0)

/* A non-blocking direct call: launched, finished by mt_wait or mt_progress. */
#define MT_DIRECT_START(g, r, bytes, call)                   \
  do {                                                       \
    const mt_comm_direct *d_ = mt_comm_direct_backend();     \
    (r)->direct = (call);                                    \
    (r)->active = 1;                                         \
    mt_comm_count_direct((g), (bytes), 1);                   \
  } while (0)

/* A group of another backend (count.c, virtual.c) takes the call as a
 * description (mt_coll's fields): kind, the bytes every backend counts,
 * the blocks the host reads. True when that backend carried it out. */
#define MT_OTHER_BACKEND(g, ...) \
  ((g)->backend != MT_COMM_MPI && mt_comm_backend_call((g), &(mt_coll){__VA_ARGS__}))

/* ---- device buffers staged through the host (staging.c) ---- */
/* Host views of a call's buffers. Host buffers are their own views; device
 * ones get one host block holding the send side (copied from the device),
 * the receive side (copied from the device too when the call is in place:
 * send == recv) and extra scratch bytes after them. */
typedef struct {
  void *block; /* the host block (NULL for host buffers) */
  void *send, *recv, *extra;
} mt_comm_staged;
mt_comm_staged mt_comm_stage(mt_group *g, mt_loc loc, const void *send, size_t send_bytes,
                             void *recv, size_t recv_bytes, size_t extra_bytes);
/* Ends a blocking call's staging: recv_bytes of the receive side back to
 * recv on the device, the block freed (nothing for host buffers). */
void mt_comm_unstage(const mt_comm_staged *x, void *recv, size_t recv_bytes);
/* dst = src, bytes, both where loc says (a group of one) */
void mt_comm_local_copy(void *dst, const void *src, size_t bytes, mt_loc loc);
/* bytes from a host staging block to the device */
void mt_comm_to_device(void *dev, const void *host, size_t bytes);

/* ---- requests (requests.c) ---- */
void mt_comm_req_init(mt_request *r, mt_group *g);
/* the flight recorder's entry of a non-blocking call's start (peer: a
 * group rank, -1 for a collective); mt_wait records the wait, which is
 * where it can block */
void mt_comm_req_flight(mt_request *r, const char *op, int peer, double bytes);
/* The staging x of a request's buffers ends when the request does:
 * recv_bytes of its receive side go back to recv (none: recv NULL), and
 * the block is freed. */
void mt_comm_req_stage(mt_request *r, const mt_comm_staged *x, void *recv, size_t recv_bytes);

/* ---- the recording of a count-only rank (record.c): a call, a wait ---- */
void mt_comm_rec_call(const mt_group *g, const mt_coll *c);
void mt_comm_rec_wait(mt_request *r);

/* ---- the virtual backend (virtual.c): a call (mt_comm_backend_call's
 * contract), and the end of a request it started ---- */
int mt_comm_virtual_call(mt_group *g, const mt_coll *c);
void mt_comm_virtual_wait(mt_request *r);
void mt_comm_virtual_progress(mt_request *r);

#endif
