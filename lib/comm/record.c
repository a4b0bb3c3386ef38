/* The recording of a count-only rank's collectives (comm.h): each call
 * with its group, bytes and the op clock's time, each non-blocking call's
 * wait, and the pipeline executor's op boundaries. Only the plan records
 * (one rank in one process), so the recording is one pointer here. */
#include "comm/comm_internal.h"

#include <stdlib.h>

static _Thread_local mt_comm_rec *g_rec; /* (a plan is priced on one thread) */

mt_comm_rec *mt_comm_rec_use(mt_comm_rec *r) {
  mt_comm_rec *prev = g_rec;
  g_rec = r;
  return prev;
}

void mt_comm_rec_free(mt_comm_rec *r) {
  free(r->ev);
  r->ev = NULL;
  r->n = r->cap = 0;
  r->next_id = 0;
}

static mt_comm_event *append(void) {
  if (g_rec->n == g_rec->cap) {
    g_rec->cap = g_rec->cap ? 2 * g_rec->cap : 256;
    mt_comm_event *ev = realloc(g_rec->ev, (size_t)g_rec->cap * sizeof *ev);
    if (!ev) mt_die("out of memory recording %ld collectives", g_rec->cap);
    g_rec->ev = ev;
  }
  mt_comm_event *ev = &g_rec->ev[g_rec->n++];
  *ev = (mt_comm_event){.t = mt_now()};
  return ev;
}

void mt_comm_rec_mark(int what, int i, int op) {
  if (!g_rec) return;
  mt_comm_event *ev = append();
  ev->kind = what;
  ev->id = i;
  ev->op = op;
}

void mt_comm_rec_call(const mt_group *g, const mt_coll *c) {
  if (!g_rec) return;
  mt_comm_event *ev = append();
  ev->bytes = c->bytes;
  ev->name = g->name;
  ev->size = g->size;
  ev->stride = g->stride;
  ev->world0 = g->world0;
  ev->rank = g->rank;
  ev->peer = c->peer;
  ev->kind = (int)c->kind;
  ev->host = c->loc == MT_LOC_HOST;
  if (c->req) ev->id = c->req->rec_id = ++g_rec->next_id;
}

void mt_comm_rec_wait(mt_request *r) {
  if (g_rec) {
    mt_comm_event *ev = append();
    ev->kind = MT_REC_WAIT;
    ev->id = r->rec_id;
  }
  r->rec_id = 0;
}
