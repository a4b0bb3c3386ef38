/* gpu-emu: streams, events and the progress engine.
 *
 * A stream is a queue of operations run in order: work (a kernel grid, a
 * copy, a host function), event records, waits for an event, and
 * asynchronous operations (NCCL's, as non-blocking MPI) that start at the
 * head of the queue and finish later. Events record a host clock when their
 * stream reaches them, which is what cudaEventElapsedTime measures.
 *
 * Two modes (MT_EMU_STREAMS):
 *   deferred (the default): streams as a GPU runs them. Work is only
 *     queued when issued; it runs when the host waits for something
 *     (stream, event or device synchronisation, a synchronous cudaMemcpy,
 *     cudaFree) or lets the GPU advance (cudaStreamQuery, cudaEventQuery:
 *     NCCL's polling). Each step runs the head of one runnable stream,
 *     picked by a random order seeded by MT_EMU_SEED, and a wait stops as
 *     soon as what it waits for is done: work on other streams may or may
 *     not have run by then. So a host read before its wait sees stale
 *     data, and two streams without an event between them run in either
 *     order, on every path.
 *   eager: progress() after each enqueue runs every operation that can
 *     run (a stream that waits for nothing runs its work at once, in the
 *     host's order).
 * Both keep CUDA's ordering rules: the legacy default stream (stream 0,
 * cudaStreamLegacy) waits for the work issued before on every blocking
 * stream (created without cudaStreamNonBlocking), and a blocking stream's
 * work waits for the legacy stream's work issued before it;
 * cudaStreamPerThread is a blocking stream of its own; an event wait waits
 * for the record it names (the latest at the call), not a later one.
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

#include <algorithm>
#include <set>

namespace mt_emu {

struct event {
  unsigned flags;
  uint64_t recorded;          /* records issued (the latest's number) */
  std::set<uint64_t> pending; /* records issued that their stream has not reached */
  uint64_t timed;             /* the record whose time t holds */
  double t;                   /* host clock when it was reached (seconds) */
  int refs;                   /* queued records and waits that name it */
  bool dead;                  /* destroyed: freed when refs is 0 */
};

struct stream {
  std::deque<op> q;
  unsigned flags;
  int id;
  bool dead; /* destroyed: freed when its queue is empty (as on a GPU) */
};

static stream g_legacy = {{}, 0, 0, false};
/* every stream, in creation order (the seeded order picks among them by
 * position, so the same seed picks the same way in every run) */
static std::vector<stream *> g_streams = {&g_legacy};
static std::set<stream *> g_live; /* handles the program may use */
static std::set<event *> g_events;
static int g_next_stream_id = 1;
static uint64_t g_next_op_id = 1;
static int g_in_progress; /* progress() is not re-entered */

static double now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* the streams' order: splitmix64 from MT_EMU_SEED (its own sequence, apart
 * from the threads' resume order) */
static uint64_t next_random() {
  static uint64_t state = cfg().seed ^ 0x53545245414d53ULL;
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static stream *new_stream(unsigned flags) {
  stream *st = new stream();
  st->flags = flags;
  st->id = g_next_stream_id++;
  g_streams.push_back(st);
  g_live.insert(st);
  return st;
}

stream *stream_of(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy) return &g_legacy;
  if (s == cudaStreamPerThread) {
    /* a blocking stream of the calling thread, made at its first use */
    static thread_local stream *per_thread;
    if (!per_thread) per_thread = new_stream(0);
    return per_thread;
  }
  stream *st = (stream *)s;
  if (!g_live.count(st)) fatal("stream %p is not a live stream", (void *)s);
  return st;
}

static bool blocking(const stream *st) { return !(st->flags & cudaStreamNonBlocking); }

/* every operation st holds that was issued before id has completed */
static bool done_before(const stream *st, uint64_t id) {
  return st->q.empty() || st->q.front().id >= id;
}

/* the legacy stream's implicit synchronisation: what id, queued on st,
 * waits for (nothing when st is non-blocking) */
static bool implicit_sync_done(const stream *st, uint64_t id) {
  if (st != &g_legacy) return !blocking(st) || done_before(&g_legacy, id);
  for (stream *o : g_streams)
    if (o != st && blocking(o) && !done_before(o, id)) return false;
  return true;
}

static void unref(event *ev) {
  if (--ev->refs == 0 && ev->dead) delete ev;
}

/* one step at the head of st; returns whether it moved */
static bool step(stream *st) {
  if (st->q.empty()) return false;
  op &o = st->q.front();
  if (!implicit_sync_done(st, o.id)) return false;
  switch (o.kind) {
  case op::WORK: {
    std::function<void()> run = std::move(o.run);
    st->q.pop_front(); /* popped first: run may enqueue nothing, but may be long */
    run();
    return true;
  }
  case op::RECORD: {
    event *ev = o.ev;
    ev->pending.erase(o.seq);
    if (o.seq >= ev->timed) {
      ev->timed = o.seq;
      ev->t = now();
    }
    st->q.pop_front();
    unref(ev);
    return true;
  }
  case op::WAIT: {
    event *ev = o.ev;
    if (ev->pending.count(o.seq)) return false;
    st->q.pop_front();
    unref(ev);
    return true;
  }
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

/* destroyed streams whose work has completed go */
static void reap() {
  for (size_t i = 0; i < g_streams.size();) {
    stream *st = g_streams[i];
    if (st->dead && st->q.empty()) {
      g_streams.erase(g_streams.begin() + (long)i);
      delete st;
    } else {
      i++;
    }
  }
}

/* deferred mode: one operation of a runnable stream the seeded order picks */
static bool step_one() {
  static std::vector<stream *> cand;
  cand.clear();
  for (stream *st : g_streams)
    if (!st->q.empty()) cand.push_back(st);
  while (!cand.empty()) {
    size_t i = (size_t)(next_random() % cand.size());
    if (step(cand[i])) return true;
    cand.erase(cand.begin() + (long)i);
  }
  return false;
}

/* eager: everything that can run; deferred: at most max_steps operations */
static bool advance(long max_steps) {
  if (g_in_progress) return false;
  g_in_progress = 1;
  bool any = false;
  if (cfg().streams_deferred) {
    for (long k = 0; k < max_steps && step_one(); k++) any = true;
  } else {
    bool moved = true;
    while (moved) {
      moved = false;
      for (size_t i = 0; i < g_streams.size(); i++)
        while (step(g_streams[i])) moved = any = true;
    }
  }
  reap();
  g_in_progress = 0;
  return any;
}

bool progress() {
  /* a query lets the GPU advance a random amount: 1 to 8 steps */
  return advance(1 + (long)(cfg().streams_deferred ? next_random() % 8 : 0));
}

uint64_t enqueue(cudaStream_t s, op &&o) {
  stream *st = stream_of(s);
  uint64_t id = o.id = g_next_op_id++;
  if (o.kind == op::RECORD || o.kind == op::WAIT) o.ev->refs++;
  st->q.push_back(std::move(o));
  if (!cfg().streams_deferred) advance(1);
  return id;
}

uint64_t head_id(cudaStream_t s) {
  stream *st = stream_of(s);
  if (st->q.empty() || !implicit_sync_done(st, st->q.front().id)) return 0;
  return st->q.front().id;
}

bool op_done(cudaStream_t s, uint64_t id) { return done_before(stream_of(s), id + 1); }

std::string describe_streams() {
  std::string out;
  char line[512];
  for (stream *st : g_streams) {
    if (st->q.empty()) continue;
    const op &o = st->q.front();
    const char *state =
        !implicit_sync_done(st, o.id)
            ? (st == &g_legacy ? "waits for the blocking streams' earlier work (the legacy "
                                 "default stream's implicit synchronisation)"
                               : "waits for the legacy default stream's earlier work")
        : o.kind == op::WAIT ? "waits for an event"
        : o.kind == op::ASYNC
            ? (o.started ? "is running"
                         : "waits to start (its group's other streams, or room for it)")
            : "is ready";
    std::string what = o.kind == op::ASYNC && o.describe ? o.describe() : o.what ? o.what : "?";
    snprintf(line, sizeof line, "\n  stream %d%s: %zu operation(s) queued; the first (%s) %s",
             st->id, st->dead ? " (destroyed)" : "", st->q.size(), what.c_str(), state);
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
    /* deferred: one step at a time, so the wait ends as soon as pred holds */
    if (advance(1)) {
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

void wait_op(const char *what, cudaStream_t s, uint64_t id) {
  stream *st = stream_of(s);
  wait_until(what, [st, id]() { return done_before(st, id + 1); });
}

/* every operation issued before id that synchronising st waits for */
static bool synchronized(const stream *st, uint64_t id) {
  if (!done_before(st, id)) return false;
  if (st == &g_legacy)
    for (stream *o : g_streams)
      if (blocking(o) && !done_before(o, id)) return false;
  return true;
}

void sync_stream(const char *what, cudaStream_t s) {
  stream *st = stream_of(s);
  uint64_t id = g_next_op_id;
  wait_until(what, [st, id]() { return synchronized(st, id); });
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

/* the event's latest record has been reached (or there is none) */
static bool event_done(const event *ev) { return !ev->pending.count(ev->recorded); }

} // namespace mt_emu

using namespace mt_emu;

extern "C" {

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
  *s = (cudaStream_t)new_stream(flags);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == cudaStreamPerThread) return set_error(cudaErrorInvalidResourceHandle);
  stream *st = stream_of(s);
  if (st == &g_legacy) return set_error(cudaErrorInvalidResourceHandle);
  /* returns at once; its queued work still completes (as on a GPU) before
   * it goes */
  g_live.erase(st);
  st->dead = true;
  if (!cfg().streams_deferred) advance(1);
  if (!g_in_progress) reap();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  sync_stream("cudaStreamSynchronize", s);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t s) {
  take_site();
  stream *st = stream_of(s);
  progress();
  return synchronized(st, g_next_op_id) ? cudaSuccess : cudaErrorNotReady;
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
  /* returns at once: a record or wait still queued keeps it until its
   * stream passes it */
  g_events.erase(ev);
  ev->dead = true;
  if (!ev->refs) delete ev;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  event *ev = event_of(e);
  op o{};
  o.kind = op::RECORD;
  o.what = "cudaEventRecord";
  o.ev = ev;
  o.seq = ++ev->recorded;
  ev->pending.insert(o.seq);
  enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  take_site();
  event *ev = event_of(e);
  progress();
  return event_done(ev) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  event *ev = event_of(e);
  wait_until("cudaEventSynchronize", [ev]() { return event_done(ev); });
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  event *a = event_of(start), *b = event_of(end);
  if ((a->flags | b->flags) & cudaEventDisableTiming) return set_error(cudaErrorInvalidResourceHandle);
  if (!cfg().streams_deferred) progress();
  if (!a->recorded || !b->recorded) return set_error(cudaErrorInvalidResourceHandle);
  if (!event_done(a) || !event_done(b)) return cudaErrorNotReady;
  *ms = (float)((b->t - a->t) * 1e3);
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *data) {
  enqueue_host(s, "cudaLaunchHostFunc", [fn, data]() { fn(data); });
  return cudaSuccess;
}

} // extern "C"
