/* gpu-emu: the host execution model of CUDA that runs lib/kernels/cuda/ (its .cu files)
 * in the test suite (a test harness, never a backend users pick). This is
 * the runtime's own interface, used by the device-code header
 * (mt_emu_device.h), the cub stand-in and the cuBLASLt reference; the CUDA
 * runtime and NCCL functions themselves are implemented with their real
 * declarations (cuda_runtime_api.h, nccl.h).
 *
 * Model, in one paragraph: device memory is host memory (every allocation
 * registered, between guard pages, filled with 0xff bytes: NaN as float,
 * double and bf16);
 * streams are queues of operations run in order by a progress engine
 * whenever the host enters the runtime (an operation whose stream is idle
 * runs at once); a kernel runs its blocks one after another and the threads
 * of a block as fibers, each until it reaches __syncthreads, a warp
 * collective or its end; NCCL operations become non-blocking MPI calls on
 * host memory, started when they reach the head of their stream. */
#ifndef MT_EMU_H
#define MT_EMU_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <functional>

namespace mt_emu {

/* ---- reports ---- */

/* A defect found by the model (a kernel, a launch, a copy): prints
 * "gpu-emu: error: <file>:<line>: <message>" and ends the process (every
 * rank: MPI_Abort when MPI is up, else exit 70). */
[[noreturn]] void fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
[[noreturn]] void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- device memory ---- */

/* 1 when [p, p + bytes) lies inside one device allocation (bytes 0: p is in
 * one or at its end); *room gets the bytes from p to that allocation's end */
int device_range(const void *p, size_t bytes, size_t *room);
/* fatal unless [p, p + bytes) is inside one device allocation; what names
 * the operand in the message */
void check_device_range(const char *file, int line, const char *what, const void *p,
                        size_t bytes);

/* ---- streams ---- */

/* runs fn on the host when it reaches the head of stream s (after the work
 * queued there before it); what names it in reports */
void enqueue_host(cudaStream_t s, const char *what, std::function<void()> fn);

/* ---- kernels ---- */

struct launch_desc {
  const void *kernel;  /* the kernel function (its attributes) */
  const char *name;    /* the kernel expression as written at the launch */
  const char *file;    /* the launch's source line */
  int line;
  dim3 grid, block;
  size_t shared_bytes; /* dynamic shared memory per block */
  cudaStream_t stream;
  std::function<void()> body; /* one thread's run of the kernel */
  /* its pointer arguments into device memory (memory checking): the first
   * MAX_PTR_ARGS, with their argument numbers from 1 */
  enum { MAX_PTR_ARGS = 16 };
  const void *ptr_args[MAX_PTR_ARGS];
  int ptr_arg_no[MAX_PTR_ARGS];
  int n_ptr_args;
};
/* checks the configuration (limits, shared memory) and queues the grid */
void launch(launch_desc &&d);
/* a pointer argument must be null or inside a device allocation (d
 * records it for memory checking) */
void check_kernel_pointer(launch_desc &d, int index, const void *p);

/* A thread of the running block (fiber). Device code reads tid; the rest is
 * the scheduler's. */
struct thread {
  uint3 tid;
  void *sp;          /* saved stack pointer while switched out */
  void *stack;       /* its stack (bottom) and size: sanitizer annotations */
  size_t stack_size;
  int lin;           /* linear index in the block */
  int state;         /* scheduler state (kernels.cc) */
  const char *wfile; /* where it waits */
  int wline;
  int wkind;         /* barrier or warp operation kind */
  unsigned mask;     /* warp operation's mask */
  int param, width;  /* lane, lane mask or delta; segment width */
  uint64_t val, out; /* the value offered and the value received */
};
extern thread *cur;               /* the thread running now */
extern uint3 cur_block_idx;       /* its block */
extern dim3 cur_block_dim, cur_grid_dim;

void syncthreads(const char *file, int line);
enum warp_kind {
  WARP_SYNC = 1,
  WARP_SHFL_IDX,
  WARP_SHFL_UP,
  WARP_SHFL_DOWN,
  WARP_SHFL_XOR,
  WARP_BALLOT,
  WARP_ALL,
  WARP_ANY
};
/* a warp collective: every lane of mask must reach the same call (same
 * file, line, kind and mask); returns the lane's result (raw 64 bits) */
uint64_t warp_op(warp_kind kind, const char *file, int line, unsigned mask, uint64_t val,
                 int param, int width);

/* the block's shared memory: a static __shared__ variable of `bytes`
 * (site: a static object per declaration, the same for every thread), and
 * the dynamic part the launch asked for (nullptr when it asked none) */
struct shared_site {
  int unused;
};
void *static_shared(shared_site *site, size_t bytes, size_t align, const char *file, int line);
void *dynamic_shared();

} // namespace mt_emu

#endif
