/* How a call travels, and what it counts: the group's time, bytes and
 * calls; the host's waits in MPI; the direct backend (NCCL) that device
 * buffers of the groups it serves go to, and how each group's device calls
 * travelled. With a direct backend registered, every place the host
 * blocks first lets the backend issue what it holds back, and waits in MPI
 * poll, letting the device progress meanwhile (see mt_comm_direct). */
#include "comm/comm_internal.h"

#include <sched.h>
#include <string.h>

static void tally(mt_group *g, double t0, double bytes) {
  g->seconds += mt_now() - t0;
  g->bytes += bytes;
  g->calls++;
}

void mt_comm_count(mt_group *g, double t0, double bytes) {
  if (mt_trace_on()) mt_trace_span(g->name, "collective", MT_TRACK_COLL, t0, mt_now(), -1, -1);
  tally(g, t0, bytes);
}

void mt_comm_count_p2p(mt_group *g, double t0, double bytes) {
  if (mt_trace_on() && bytes > 0)
    mt_trace_span(g->name, "send", MT_TRACK_P2P, t0, mt_now(), -1, -1);
  tally(g, t0, bytes);
}

/* ------------------------------------------------------------------ */
/* waiting in MPI                                                      */

static const mt_comm_direct *g_direct;

/* Before the host blocks: what the direct backend holds back goes out
 * (a peer may be waiting for it). */
static void before_block(void) {
  if (g_direct && g_direct->flush) g_direct->flush();
}

int mt_comm_wait_request(MPI_Request *r, MPI_Status *st) {
  before_block();
  if (!g_direct || !g_direct->idle) return MPI_Wait(r, st);
  for (;;) {
    int done = 0, rc = MPI_Test(r, &done, st);
    if (rc != MPI_SUCCESS || done) return rc;
    g_direct->idle();
    sched_yield(); /* ranks may share cores */
  }
}

int mt_comm_polling(void) {
  before_block();
  return g_direct && g_direct->idle;
}

int mt_comm_blocking(int rc, MPI_Request *r) {
  return rc != MPI_SUCCESS ? rc : mt_comm_wait_request(r, MPI_STATUS_IGNORE);
}

/* ------------------------------------------------------------------ */
/* the direct backend                                                  */

static mt_comm_direct g_direct_copy;
static long g_direct_calls;

void mt_comm_set_direct(const mt_comm_direct *d) {
  if (d) g_direct_copy = *d;
  g_direct = d ? &g_direct_copy : NULL;
}

const mt_comm_direct *mt_comm_direct_backend(void) { return g_direct; }

long mt_comm_direct_calls(void) { return g_direct_calls; }

int mt_comm_goes_direct(const mt_group *g, mt_loc loc) {
  return loc == MT_LOC_DEVICE && g_direct && g->direct;
}

void mt_comm_count_direct(mt_group *g, double bytes, int device_calls) {
  g->bytes += bytes;
  g->calls++;
  g->device_direct += device_calls;
  g_direct_calls += device_calls;
}

const char *mt_group_device_path(const mt_group *g) {
  return g_direct && g->direct ? g_direct->name : "staged";
}

const char *mt_group_device_traffic(const mt_group *g) {
  if (!g->device_direct && !g->device_staged) return "none";
  if (!g->device_staged) return g_direct ? g_direct->name : "direct";
  return g->device_direct ? "mixed" : "staged";
}

/* point-to-point goes direct when the backend has a channel for (peer, tag)
 * (its own communicators: also in a group whose collectives are staged) */
int mt_group_p2p_direct(const mt_group *g, int peer, int tag) {
  return g_direct && g->direct_state && g_direct->p2p_ok(g, peer, tag);
}

int mt_comm_ids_distinct(const char *ids, int n, size_t id_len) {
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++)
      if (strncmp(ids + (size_t)a * id_len, ids + (size_t)b * id_len, id_len) == 0) return 0;
  return 1;
}
