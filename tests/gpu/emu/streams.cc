/* gpu-emu: streams, events and the progress engine.
 *
 * A stream is a queue of operations run in order: work (a kernel grid, a
 * copy, a host function), event records, waits for an event, and
 * asynchronous operations (NCCL's, as non-blocking MPI) that start at the
 * head of the queue and finish later. progress() runs every operation that
 * can run, on every stream; it is called by each enqueue (so a stream that
 * waits for nothing runs its work at once, in the host's order) and in
 * every wait of the host (synchronize, query, the NCCL calls' polling).
 * Events record a host clock when their stream reaches them, which is what
 * cudaEventElapsedTime measures.
 *
 * A wait that sees no operation move for MT_EMU_WATCHDOG_S seconds is a
 * hang (ranks waiting for each other's NCCL operations, an event never
 * recorded): it is reported with what every stream of this process waits
 * for. */
#include "runtime.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <set>

namespace mt_emu {

struct event {
  unsigned flags;
  uint64_t recorded;  /* records issued */
  uint64_t completed; /* the last record its stream has reached */
  double t;           /* host clock when it was reached (seconds) */
};

struct stream {
  std::deque<op> q;
  unsigned flags;
  int id;
};

static stream g_legacy = {{}, 0, 0};
static std::set<stream *> g_streams = {&g_legacy};
static std::set<event *> g_events;
static int g_next_stream_id = 1;
static int g_in_progress; /* progress() is not re-entered */

static double now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

stream *stream_of(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return &g_legacy;
  stream *st = (stream *)s;
  if (!g_streams.count(st)) fatal("stream %p is not a live stream", (void *)s);
  return st;
}

/* one step at the head of st; returns whether it moved */
static bool step(stream *st) {
  if (st->q.empty()) return false;
  op &o = st->q.front();
  switch (o.kind) {
  case op::WORK: {
    std::function<void()> run = std::move(o.run);
    st->q.pop_front(); /* popped first: run may enqueue nothing, but may be long */
    run();
    return true;
  }
  case op::RECORD:
    if (o.seq > o.ev->completed) {
      o.ev->completed = o.seq;
      o.ev->t = now();
    }
    st->q.pop_front();
    return true;
  case op::WAIT:
    if (o.ev->completed < o.seq) return false;
    st->q.pop_front();
    return true;
  case op::ASYNC:
    if (!o.started) {
      if (!o.start()) return false;
      o.started = true;
    }
    if (!o.done()) return false;
    st->q.pop_front();
    return true;
  }
  return false;
}

bool progress() {
  if (g_in_progress) return false;
  g_in_progress = 1;
  bool any = false, moved = true;
  while (moved) {
    moved = false;
    for (stream *st : g_streams)
      while (step(st)) moved = any = true;
  }
  g_in_progress = 0;
  return any;
}

uint64_t enqueue(cudaStream_t s, op &&o) {
  static uint64_t next_id = 1;
  stream *st = stream_of(s);
  uint64_t id = o.id = next_id++;
  st->q.push_back(std::move(o));
  progress();
  return id;
}

uint64_t head_id(cudaStream_t s) {
  stream *st = stream_of(s);
  return st->q.empty() ? 0 : st->q.front().id;
}

std::string describe_streams() {
  std::string out;
  char line[512];
  for (stream *st : g_streams) {
    if (st->q.empty()) continue;
    const op &o = st->q.front();
    const char *state = o.kind == op::WAIT    ? "waits for an event"
                        : o.kind == op::ASYNC ? (o.started ? "is running"
                                                           : "waits to start (its group's other "
                                                             "streams, or room for it)")
                                              : "is ready";
    std::string what = o.kind == op::ASYNC && o.describe ? o.describe() : o.what ? o.what : "?";
    snprintf(line, sizeof line, "\n  stream %d: %zu operation(s) queued; the first (%s) %s",
             st->id, st->q.size(), what.c_str(), state);
    out += line;
  }
  if (out.empty()) out = "\n  (every stream is empty)";
  return out;
}

void wait_until(const char *what, const std::function<bool()> &pred) {
  call_site at = take_site();
  double last = now();
  long spins = 0;
  while (!pred()) {
    if (progress()) {
      last = now();
      spins = 0;
      continue;
    }
    if (pred()) break;
    /* nothing moved: other ranks (on the same cores) need the CPU */
    if (++spins < 1000) {
      sched_yield();
    } else {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, nullptr);
    }
    if (now() - last > cfg().watchdog_s)
      fatal_at(at.file, at.line,
               "%s: no operation moved for %.0f s (MT_EMU_WATCHDOG_S): a hang%s", what,
               cfg().watchdog_s, describe_streams().c_str());
  }
}

void drain_all(const char *what) {
  wait_until(what, []() {
    for (stream *st : g_streams)
      if (!st->q.empty()) return false;
    return true;
  });
}

void enqueue_host(cudaStream_t s, const char *what, std::function<void()> fn) {
  op o{};
  o.kind = op::WORK;
  o.what = what;
  o.run = [fn, what]() {
    stats.host_ops++;
    fn();
  };
  enqueue(s, std::move(o));
}

static event *event_of(cudaEvent_t e) {
  event *ev = (event *)e;
  if (!ev || !g_events.count(ev)) fatal("event %p is not a live event", (void *)e);
  return ev;
}

} // namespace mt_emu

using namespace mt_emu;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
  stream *st = new stream();
  st->flags = flags;
  st->id = g_next_stream_id++;
  g_streams.insert(st);
  *s = (cudaStream_t)st;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  stream *st = stream_of(s);
  if (st == &g_legacy) return set_error(cudaErrorInvalidResourceHandle);
  /* its queued work still completes (as on a GPU) before it goes */
  wait_until("cudaStreamDestroy", [st]() { return st->q.empty(); });
  g_streams.erase(st);
  delete st;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  stream *st = stream_of(s);
  wait_until("cudaStreamSynchronize", [st]() { return st->q.empty(); });
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
  take_site();
  stream *st = stream_of(s);
  progress();
  return st->q.empty() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize(void) {
  drain_all("cudaDeviceSynchronize");
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
  (void)flags;
  event *ev = event_of(e);
  if (!ev->recorded) return cudaSuccess; /* never recorded: nothing to wait for */
  op o{};
  o.kind = op::WAIT;
  o.what = "cudaStreamWaitEvent";
  o.ev = ev;
  o.seq = ev->recorded;
  enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
  event *ev = new event();
  ev->flags = flags;
  g_events.insert(ev);
  *e = (cudaEvent_t)ev;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  event *ev = event_of(e);
  /* a record still queued keeps it alive until its stream passes it */
  wait_until("cudaEventDestroy", [ev]() { return ev->completed == ev->recorded; });
  g_events.erase(ev);
  delete ev;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  event *ev = event_of(e);
  op o{};
  o.kind = op::RECORD;
  o.what = "cudaEventRecord";
  o.ev = ev;
  o.seq = ++ev->recorded;
  enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  take_site();
  event *ev = event_of(e);
  progress();
  return ev->completed == ev->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  event *ev = event_of(e);
  wait_until("cudaEventSynchronize", [ev]() { return ev->completed == ev->recorded; });
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  event *a = event_of(start), *b = event_of(end);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return set_error(cudaErrorInvalidResourceHandle);
  progress();
  if (!a->recorded || !b->recorded) return set_error(cudaErrorInvalidResourceHandle);
  if (a->completed != a->recorded || b->completed != b->recorded) return cudaErrorNotReady;
  *ms = (float)((b->t - a->t) * 1e3);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data) {
  enqueue_host(s, "cudaLaunchHostFunc", [fn, data]() { fn(data); });
  return cudaSuccess;
}

} // extern "C"
