/* gpu-emu: shared by the runtime's sources (not used by device code). */
#ifndef MT_EMU_RUNTIME_H
#define MT_EMU_RUNTIME_H

#include "mt_emu.h"

#include <cuda_runtime_api.h>
#include <stdint.h>

#include <deque>
#include <string>
#include <vector>

namespace mt_emu {

/* ---- configuration (MT_EMU_* in the environment, read once) ---- */
enum order_kind { ORDER_FORWARD = 0, ORDER_REVERSE = 1, ORDER_RANDOM = 2 };
struct config {
  int gpus;              /* MT_EMU_GPUS: GPUs of this node (0: none) */
  int arch;              /* MT_EMU_ARCH: 80, 86 or 90 (the limits of that GPU) */
  size_t memory_bytes;   /* MT_EMU_MEMORY_MB: memory of each GPU */
  order_kind order;      /* MT_EMU_ORDER: forward | reverse | random */
  uint64_t seed;         /* MT_EMU_SEED: the random orders' seed (threads, streams) */
  bool streams_deferred; /* MT_EMU_STREAMS: deferred (default) | eager */
  double watchdog_s;     /* MT_EMU_WATCHDOG_S: a wait without progress this long is a hang */
  int nccl_inflight;     /* MT_EMU_NCCL_INFLIGHT: NCCL operations running at once (0: any) */
  std::string stats;     /* MT_EMU_STATS: file that gets one JSON line per process */
  std::vector<int> visible; /* CUDA_VISIBLE_DEVICES applied: physical index per device */
};
const config &cfg();

/* the bound device's properties and physical index */
const cudaDeviceProp &props();
int physical_device();

/* ---- counters (written to MT_EMU_STATS at exit) ---- */
struct counters {
  long launches, blocks, threads, switches, barriers, warp_ops;
  long nccl_ops, host_ops, copies;
  unsigned long long d2h_digest; /* FNV-1a over every byte copied device -> host */
  unsigned long long d2h_bytes;
};
extern counters stats;
void digest_d2h(const void *p, size_t bytes);

/* the caller's line of the runtime or NCCL call being served (set by the
 * mt_emu_api.h macros; file NULL when the caller has none); taking it
 * clears it */
struct call_site {
  const char *file;
  int line;
};
call_site take_site();

/* an API call's error: remembered for cudaGetLastError, returned */
cudaError_t set_error(cudaError_t e);

/* the handler of faults (kernels.cc): guard pages of shared memory, stacks
 * and device memory reported with the kernel and thread */
void install_segv();

/* ---- memory ---- */
enum alloc_kind { ALLOC_DEVICE = 1, ALLOC_HOST = 2 };
/* the kind of allocation p lies in (0: none), its base and size */
int find_alloc(const void *p, const void **base, size_t *size);
size_t device_bytes_in_use();
/* memory checking: whether address a lies in a guard page of a device
 * allocation; its base, size and a's offset from the base (negative: before) */
bool device_guard_fault(const void *a, const void **base, size_t *size, long long *offset);
/* the canary bytes around a device allocation: the slack after its size
 * and the gap before it */
struct canary_range {
  const unsigned char *p;
  size_t n;
  const void *base; /* the allocation's */
  size_t size;
  bool after;       /* the slack after the end (else the gap before the start) */
};
/* appends those of the allocation p lies in (none twice; none when p is in
 * no device allocation) */
void canary_ranges(const void *p, std::vector<canary_range> &out);
/* the first of r's first n bytes that no longer holds the canary
 * (nullptr: intact) */
const unsigned char *canary_broken(const canary_range &r, size_t n);
/* the canaries of a grid (kernels.cc): those around the allocations its
 * pointer arguments point into, watched while it runs (fatal, naming the
 * launch, when one is broken already); whether the first
 * CANARY_EACH_STOP bytes of a slack after an end changed since (cheap: each
 * time a thread stops) */
static const size_t CANARY_EACH_STOP = 32;
void watch_canaries(const launch_desc &d);
const std::vector<canary_range> &canaries_watched();
bool canaries_changed();
void unwatch_canaries();
/* "offset O, N bytes after the end, of a B-byte device allocation (kernel
 * argument K points at its offset P)" (l: the launch, or null) */
std::string device_offset(long long off, const void *base, size_t size, const launch_desc *l);

/* ---- streams and the progress engine ---- */
struct event;
struct stream;
struct op {
  enum kind_t { WORK, RECORD, WAIT, ASYNC } kind;
  const char *what;
  std::function<void()> run;   /* WORK */
  event *ev;                   /* RECORD, WAIT */
  uint64_t seq;                /* RECORD: the record's number; WAIT: the one waited for */
  /* ASYNC (NCCL): at the head of the stream, start() until it returns true
   * (it may wait for other streams' parts of one group, or for room), then
   * done() until true; describe() for hang reports */
  std::function<bool()> start;
  std::function<bool()> done;
  std::function<std::string()> describe;
  bool started;
  uint64_t id; /* set by enqueue: issue order, over every stream */
};
stream *stream_of(cudaStream_t s);
/* queues o on s; returns its id (eager mode: runs what can run) */
uint64_t enqueue(cudaStream_t s, op &&o);
/* the id of the operation at the head of s if it may start (0: s is empty,
 * or its head waits for the legacy default stream's implicit
 * synchronisation) */
uint64_t head_id(cudaStream_t s);
/* whether the operation id, queued on s, has completed */
bool op_done(cudaStream_t s, uint64_t id);
/* the host waits for the operation id, queued on s */
void wait_op(const char *what, cudaStream_t s, uint64_t id);
/* cudaStreamSynchronize's wait (the legacy default stream's includes every
 * blocking stream's work issued before it) */
void sync_stream(const char *what, cudaStream_t s);
/* runs what can run: eager mode all of it; deferred mode some of it, one
 * operation at a time from a runnable stream the seeded order picks (a
 * query lets the GPU advance, not finish); returns whether anything moved */
bool progress();
/* progress until pred() holds; a hang (no movement for the watchdog's
 * time) is reported with what every stream waits for */
void wait_until(const char *what, const std::function<bool()> &pred);
/* every stream drained (device-wide synchronisation) */
void drain_all(const char *what);
std::string describe_streams();

} // namespace mt_emu

#endif
