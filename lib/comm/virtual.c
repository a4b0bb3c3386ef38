/* The virtual backend: communication in virtual time. A group on it runs
 * over its real MPI communicator, but a device buffer's call sends
 * timestamps instead of the payload (the virtual device's tensors hold no
 * values); a host buffer's call (losses, norms, the MoE counts, the
 * records' figures: values the control flow reads) is timed here and then
 * moves for real over MPI. Times come from the rank's virtual clock
 * (core's mt_vclock) and the profile's links (mt_price_link_s): a group or
 * a pair of ranks inside one node (devices_per_node consecutive world
 * ranks) uses the intra-node link, else the inter-node one. Bytes are
 * those every backend counts (lib/comm's calls), so a virtual run's bytes
 * per group equal the plan's; their time is priced in the profile's dtypes
 * (priced_bytes: a bf16 profile's activation messages and weight gathers
 * at 2 bytes an element, as meshplan prices them).
 *
 *   collective   completes at max(latest arrival in the group, when the
 *                group's channel is free) + its price for the most bytes
 *                any rank puts on the wire (the ring figures comm counts):
 *                inside a node the intra-node link, across nodes
 *                hierarchical (mt_price_coll_s: the ring's part inside
 *                each node, 1/k of a flat ring's bytes on every rank's
 *                network link, k ranks a node); the channel is then busy
 *                until then. A non-blocking one (dp buckets, ZeRO gathers) is
 *                issued at the rank's clock and the rank only waits for it
 *                in mt_wait: what backward hides is decided by the real
 *                issue order. The group's channel takes them in the
 *                order they were issued, whatever the order of the waits
 *                (a wait first prices those issued before it).
 *   send         leaves when its link (towards the next rank, or the
 *                others) is free and not before its issue time, arrives
 *                bytes / bandwidth + latency later; the message carries
 *                (arrival, issue time, bytes).
 *   receive      completes at max(the receiver's clock when it waits, the
 *                arrival): a causality check (mt_vclock_check) holds it
 *                against the send's issue time. */
#include "comm/comm_internal.h"

#include <stdlib.h>
#include <string.h>

enum { V_COLL = 1, V_SEND = 2, V_RECV = 3 };
/* the timestamp messages use tags apart from the payload tags, so a host
 * buffer's real message never pairs with one */
enum { V_TAG_BASE = 1 << 14 };

/* ranks of g in its first rank's node (all of them: g is inside one) */
static int group_per_node(const mt_group *g) {
  return mt_price_group_per_node(mt_vclock_price(), g->world0, g->stride, g->size);
}

static int pair_inside(const mt_group *g, int peer) {
  return mt_price_same_node(mt_vclock_price(), g->world0 + g->rank * g->stride,
                            g->world0 + peer * g->stride);
}

/* The bytes a call's time is priced for. An fp32 run's messages are fp32
 * and are counted so (the plan's figures); a profile of a mixed-precision
 * device (act_bytes 2) trains as meshplan's default dtypes for it say:
 * activations' messages (tp, sp, cp, pp, ep) and the weights' gathers in
 * bf16, the gradients' reductions (dp_cp, dp, edp) in fp32. A bf16 run
 * (train.precision = bf16) sends each in its own dtype: priced as counted. */
static double priced_bytes(const mt_group *g, const mt_coll *c) {
  const double ab = mt_vclock_price()->act_bytes;
  if (!(ab > 0) || ab >= 4 || mt_vclock_price()->bytes_as_sent) return c->bytes;
  int grads = (c->kind == MT_COLL_REDUCE || c->kind == MT_COLL_SCATTER) && /* sum, sum-scatter */
              (!strcmp(g->name, "dp_cp") || !strcmp(g->name, "dp") || !strcmp(g->name, "edp"));
  return grads ? c->bytes : c->bytes * ab / 4.0;
}

int mt_comm_price_kind(mt_coll_kind kind) {
  return kind == MT_COLL_ALLTOALL ? MT_PRICE_ALLTOALL
         : kind == MT_COLL_REDUCE ? MT_PRICE_ALLREDUCE
                                  : MT_PRICE_PASS;
}

static void count_bytes(mt_group *g, const mt_coll *c) {
  g->bytes += c->bytes;
  g->calls++;
}

/* the clock waits until t; the wait counts as the group's seconds */
static void wait_until(mt_group *g, double t) {
  double now = mt_now();
  if (t > now) {
    g->seconds += t - now;
    mt_vclock_wait_until(t);
  }
}

/* A collective (an all-to-all or not) whose latest arrival and most bytes
 * are a[0], a[1], finished now. A non-blocking one (busy0: the rank's ops'
 * seconds when it was issued, else < 0) ran beside the ops since: there it
 * kept the profile's overlap share of its rate (the share of the compute
 * it hides in meshplan: a GPU's collective kernels take SMs, a CPU's copies
 * take the cores), the full rate while the rank waited. Its span on the
 * timeline is the channel's busy time. */
static double coll_end(mt_group *g, const double *a, int kind, double busy0) {
  const mt_price *p = mt_vclock_price();
  double start = a[0] > g->vchan ? a[0] : g->vchan;
  double d = mt_price_coll_s(p, a[1], g->size, group_per_node(g), kind), end = start + d;
  const double now = mt_now(), ov = p->overlap;
  if (busy0 >= 0 && ov < 1 && now > start) {
    double beside = now - start, ops = mt_vclock_busy() - busy0;
    if (ops > beside) ops = beside;
    double done = ov * ops + (beside - ops); /* its seconds of work by now */
    end = done >= d ? start + beside * d / done : now + (d - done);
  }
  g->vchan = end;
  if (mt_trace_on()) mt_trace_span(g->name, "collective", MT_TRACK_COLL, start, end, -1, -1);
  return end;
}

/* a send of bytes to peer issued now: (arrival, issue, bytes) */
static void send_stamp(mt_group *g, int peer, double bytes, double *out) {
  const mt_price *p = mt_vclock_price();
  int inside = pair_inside(g, peer), link = peer == (g->rank + 1) % g->size ? 0 : 1;
  double now = mt_now(), start = g->vsend[link] > now ? g->vsend[link] : now;
  double lat = (inside ? p->intra_us : p->inter_us) * 1e-6;
  double xfer = mt_price_link_s(p, inside, bytes) - lat;
  g->vsend[link] = start + xfer;
  out[0] = start + xfer + lat;
  if (mt_trace_on()) mt_trace_span(g->name, "send", MT_TRACK_P2P, start, out[0], peer, -1);
  out[1] = now;
  out[2] = bytes;
}

static double *vbuf(void) { return mt_calloc(4, sizeof(double)); }

/* A non-blocking collective in flight: the timestamps the ranks reduce
 * (v: the latest arrival, the most bytes; then this rank's kind and its
 * ops' seconds at the issue), their MPI request, and once priced its end.
 * On the heap (r->vbuf points at v: a request may move while this is
 * queued) and queued on its group in issue order. */
typedef struct vcoll {
  double v[4];
  MPI_Request req;
  double end;
  int priced;
  struct vcoll *next;
} vcoll;

/* prices the group's oldest collective not yet priced: the channel takes
 * it now, after every one issued before it */
static void price_oldest(mt_group *g) {
  vcoll *c = g->vqueue;
  MT_MPI_CHECK(MPI_Wait(&c->req, MPI_STATUS_IGNORE));
  c->end = coll_end(g, c->v, (int)c->v[2], c->v[3]);
  c->priced = 1;
  g->vqueue = c->next;
}

static void finish(mt_request *r) {
  free(r->vbuf);
  r->vbuf = NULL;
  r->active = 0;
}

int mt_comm_virtual_call(mt_group *g, const mt_coll *c) {
  const int p2p = c->kind == MT_COLL_SEND || c->kind == MT_COLL_RECV ||
                  c->kind == MT_COLL_SENDRECV;
  const int host = c->loc == MT_LOC_HOST;
  if (!p2p && g->size == 1) return host ? 0 : 1;
  if (c->req) { /* non-blocking */
    if (host) return 0; /* (none in meshtrain: moves untimed) */
    mt_request *r = c->req;
    r->g = g;
    r->active = 1;
    const int coll = c->kind != MT_COLL_SEND && c->kind != MT_COLL_RECV;
    r->vbuf = coll ? NULL : vbuf(); /* (a collective's lives in its queue entry) */
    count_bytes(g, c);
    if (c->kind == MT_COLL_SEND) {
      r->vkind = V_SEND;
      send_stamp(g, c->peer, priced_bytes(g, c), r->vbuf);
      r->vend = r->vbuf[0];
      MT_MPI_CHECK(MPI_Isend(r->vbuf, 3, MPI_DOUBLE, c->peer, V_TAG_BASE + c->tag, g->comm,
                             &r->req));
    } else if (c->kind == MT_COLL_RECV) {
      r->vkind = V_RECV;
      MT_MPI_CHECK(MPI_Irecv(r->vbuf, 3, MPI_DOUBLE, c->peer, V_TAG_BASE + c->tag, g->comm,
                             &r->req));
    } else {
      r->vkind = V_COLL;
      vcoll *q = mt_calloc(1, sizeof *q), **tail = (vcoll **)&g->vqueue;
      r->vbuf = q->v;
      q->v[0] = mt_now();
      q->v[1] = priced_bytes(g, c);
      q->v[2] = mt_comm_price_kind(c->kind); /* (not reduced: this rank's notes) */
      q->v[3] = mt_vclock_busy();
      MT_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, q->v, 2, MPI_DOUBLE, MPI_MAX, g->comm, &q->req));
      r->req = MPI_REQUEST_NULL;
      while (*tail) tail = &(*tail)->next;
      *tail = q;
    }
    return 1;
  }
  if (c->kind == MT_COLL_SENDRECV) { /* both ways at once: done when both are */
    if (host) return 0;
    double out[3], in[3];
    send_stamp(g, c->peer, priced_bytes(g, c), out);
    MT_MPI_CHECK(MPI_Sendrecv(out, 3, MPI_DOUBLE, c->peer, V_TAG_BASE + c->tag, in, 3,
                              MPI_DOUBLE, c->peer, V_TAG_BASE + c->tag, g->comm,
                              MPI_STATUS_IGNORE));
    count_bytes(g, c);
    double end = out[0] > in[0] ? out[0] : in[0];
    wait_until(g, end);
    mt_vclock_check(mt_now(), in[1], "a point-to-point exchange");
    return 1;
  }
  /* a blocking collective: every rank's arrival and bytes, the largest; on
   * the channel after those issued before it */
  while (g->vqueue) price_oldest(g);
  double a[2] = {mt_now(), priced_bytes(g, c)};
  MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, a, 2, MPI_DOUBLE, MPI_MAX, g->comm));
  double end = coll_end(g, a, mt_comm_price_kind(c->kind), -1.0);
  wait_until(g, end);
  mt_vclock_check(end, a[0], "a collective");
  if (host) return 0; /* the values move over MPI now (counted there) */
  count_bytes(g, c);
  return 1;
}

void mt_comm_virtual_wait(mt_request *r) {
  mt_group *g = r->g;
  if (r->vkind == V_COLL) {
    vcoll *c = (vcoll *)r->vbuf;
    while (!c->priced) price_oldest(g);
    wait_until(g, c->end);
    mt_vclock_check(c->end, c->v[0], "a collective");
    finish(r);
    return;
  }
  MT_MPI_CHECK(MPI_Wait(&r->req, MPI_STATUS_IGNORE));
  if (r->vkind == V_SEND) {
    wait_until(g, r->vend);
  } else {
    wait_until(g, r->vbuf[0]);
    mt_vclock_check(mt_now(), r->vbuf[1], "a receive");
  }
  finish(r);
}

/* Finishes a request early only when that leaves the clock as mt_wait
 * would (what it waits for is already past): a send once its arrival is
 * past, a receive once it is in and its arrival past. A collective only
 * progresses: its channel is taken in issue order at the waits, the same
 * on every run. */
void mt_comm_virtual_progress(mt_request *r) {
  int done = 0;
  if (r->vkind == V_SEND) {
    if (r->vend <= mt_now()) mt_comm_virtual_wait(r); /* (3 doubles: MPI sent them eagerly) */
    return;
  }
  if (r->vkind == V_COLL) {
    vcoll *c = (vcoll *)r->vbuf;
    if (!c->priced) MT_MPI_CHECK(MPI_Test(&c->req, &done, MPI_STATUS_IGNORE));
    return;
  }
  if (r->req == MPI_REQUEST_NULL) done = 1;
  else MT_MPI_CHECK(MPI_Test(&r->req, &done, MPI_STATUS_IGNORE));
  if (done && r->vkind == V_RECV && r->vbuf[0] <= mt_now()) mt_comm_virtual_wait(r);
}
