/* gpu-emu's own test: each case is a small CUDA program with one planted
 * defect (or none), compiled through the same rewrite as the backend.
 * selftest.sh runs every case in a process of its own and checks that the
 * model reports the defect as an error naming its line (// MARK lines
 * below), or, for the clean cases, gives the right numbers.
 *
 *   gpu_emu_selftest CASE      (MT_EMU_GPUS >= 1; two ranks for nccl_*)
 *
 * Clean cases print "ok <digest>" (a checksum of their output, so that
 * runs under other MT_EMU_ORDER values can be compared). */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(call)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (call);                                                       \
    if (e_ != cudaSuccess) {                                                       \
      fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                  \
      exit(2);                                                                     \
    }                                                                              \
  } while (0)

/* ---- clean: a block sum by shared memory and shuffles ---- */
__global__ void block_sum(const float *x, float *out, int n) {
  __shared__ float warp_sums[32];
  float v = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (int w = 0; w < (int)blockDim.x / 32; w++) s += warp_sums[w];
    out[blockIdx.x] = s;
  }
}

/* ---- defects ---- */
__global__ void two_barriers(float *x) {
  if (threadIdx.x < 16) {
    __syncthreads(); // MARK barriers
  } else {
    __syncthreads();
  }
  x[threadIdx.x] = 1.0f;
}

__global__ void exit_before_barrier(float *x) {
  if (threadIdx.x == 5) return;
  __syncthreads(); // MARK exited
  x[threadIdx.x] = 1.0f;
}

__global__ void partial_warp_shuffle(float *x) {
  float v = x[threadIdx.x];
  if (threadIdx.x % 32 > 16) return;
  v += __shfl_xor_sync(0xffffffffu, v, 1); // MARK shfl_exited
  x[threadIdx.x] = v;
}

__global__ void shuffle_or_barrier(float *x) {
  float v = x[threadIdx.x];
  if (threadIdx.x < 16) v += __shfl_down_sync(0xffffffffu, v, 1); // MARK shfl_barrier
  else __syncthreads();
  x[threadIdx.x] = v;
}

__global__ void write_past_dynamic(float *x, int n) {
  extern __shared__ float dyn[];
  dyn[threadIdx.x] = x[threadIdx.x]; // MARK dynamic_overflow (64 threads, 60 floats)
  __syncthreads();
  x[threadIdx.x] = dyn[(threadIdx.x + 1) % n];
}

__global__ void write_past_static(float *x) {
  __shared__ float rows[4][32];
  rows[threadIdx.x / 32][threadIdx.x % 32] = x[threadIdx.x]; // MARK static_overflow (row 4 of 4)
  __syncthreads();
  x[threadIdx.x] = rows[0][threadIdx.x % 32];
}

/* a race: thread 0 writes what the others read, with no barrier between */
__global__ void race(float *x) {
  __shared__ float value;
  if (threadIdx.x == 0) value = 42.0f;
  x[threadIdx.x] = value; /* NaN (the fresh shared memory) unless thread 0 ran first */
}

/* reads device memory nothing wrote: NaN (allocations are filled so) */
__global__ void read_fresh(const float *fresh, float *out) { out[threadIdx.x] = fresh[threadIdx.x]; }

/* device memory out of bounds: the guard `i < n` written `i <= n` (x holds
 * n floats), a read of x[i + 1] at the last i, a write of x[i - 1] at i 0 */
__global__ void write_one_past(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) x[i] = 1.0f; // MARK oob_write
}

__global__ void read_one_past(const float *x, float *out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] + x[i + 1]; // MARK oob_read
}

__global__ void write_one_before(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i - 1] = 1.0f; // MARK oob_before
}

__global__ void noop(float *x) {
  if (x && threadIdx.x == 0) x[0] += 1.0f;
}


/* ---- streams: x = (i + 1) * 2 + 1 in three kernels, y = 10 x ---- */
__global__ void set_index(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (float)(i + 1);
}
__global__ void scale_add(float *x, float a, float b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = a * x[i] + b;
}
__global__ void times_ten(const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 10.0f * x[i];
}

/* Two streams: the writer (x on stream a) and the reader (y = 10 x on
 * stream b), ordered by `how`: "none" (nothing: a race), "event" (b waits
 * for an event a records), "legacy" (a is a blocking stream and the reader
 * runs on the legacy default stream: its implicit synchronisation orders
 * them), "nonblocking" (the same with a non-blocking a: nothing orders
 * them). Prints "wrong N" (the y values that are not 10 x). */
static int two_streams(const char *how, float *x, float *y, float *h, int n) {
  cudaStream_t a, b;
  int legacy = !strcmp(how, "legacy"), nonblocking = !strcmp(how, "nonblocking");
  CK(cudaStreamCreateWithFlags(&a, legacy ? cudaStreamDefault : cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t written;
  CK(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
  set_index<<<(n + 127) / 128, 128, 0, a>>>(x, n);
  scale_add<<<(n + 127) / 128, 128, 0, a>>>(x, 2.0f, 0.0f, n);
  scale_add<<<(n + 127) / 128, 128, 0, a>>>(x, 1.0f, 1.0f, n);
  CK(cudaEventRecord(written, a));
  if (!strcmp(how, "event")) CK(cudaStreamWaitEvent(b, written, 0));
  cudaStream_t reader = legacy || nonblocking ? (cudaStream_t)0 : b;
  times_ten<<<(n + 127) / 128, 128, 0, reader>>>(x, y, n);
  CK(cudaStreamSynchronize(reader));
  CK(cudaMemcpy(h, y, n * sizeof(float), cudaMemcpyDeviceToHost));
  CK(cudaDeviceSynchronize());
  int wrong = 0;
  for (int i = 0; i < n; i++) wrong += !(h[i] == 10.0f * (float)(2 * (i + 1) + 1));
  printf("wrong %d\n", wrong);
  CK(cudaEventDestroy(written));
  CK(cudaStreamDestroy(a));
  CK(cudaStreamDestroy(b));
  return wrong;
}

static unsigned long long digest(const float *x, size_t n) {
  unsigned long long h = 1469598103934665603ULL;
  const unsigned char *b = (const unsigned char *)x;
  for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char *c = argc > 1 ? argv[1] : "";
  CK(cudaSetDevice(rank));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int n = 1000;
  float *h = (float *)malloc(4096 * sizeof(float)), *d, *out;
  for (int i = 0; i < 4096; i++) h[i] = (float)(i % 13) * 0.25f;
  CK(cudaMalloc((void **)&d, 4096 * sizeof(float)));
  CK(cudaMalloc((void **)&out, 4096 * sizeof(float)));
  CK(cudaMemcpyAsync(d, h, 4096 * sizeof(float), cudaMemcpyHostToDevice, s));
  unsigned long long dg = 0;
  if (!strcmp(c, "ok_sum")) {
    block_sum<<<3, 256, 0, s>>>(d, out, n);
    CK(cudaMemcpyAsync(h, out, 3 * sizeof(float), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    double want = 0.0;
    for (int i = 0; i < n; i++) want += (float)(i % 13) * 0.25f;
    for (int b = 0; b < 3; b++)
      if (!(h[b] == (float)want)) {
        fprintf(stderr, "block_sum: block %d gives %g, want %g\n", b, h[b], want);
        return 1;
      }
    dg = digest(h, 3);
  } else if (!strcmp(c, "stale")) {
    /* a host read of page-locked memory a copy on s writes, before and
     * after the wait for s: deferred, the first sees what was there */
    float *pinned;
    CK(cudaMallocHost((void **)&pinned, 64 * sizeof(float)));
    for (int i = 0; i < 64; i++) pinned[i] = -1.0f;
    set_index<<<1, 64, 0, s>>>(out, 64);
    CK(cudaMemcpyAsync(pinned, out, 64 * sizeof(float), cudaMemcpyDeviceToHost, s));
    printf("before %g", pinned[63]);
    CK(cudaStreamSynchronize(s));
    printf(" after %g\n", pinned[63]);
    CK(cudaFreeHost(pinned));
  } else if (!strncmp(c, "streams_", 8)) {
    CK(cudaStreamSynchronize(s)); /* the upload of d (on s) done: only a and b write it */
    two_streams(c + 8, d, out, h, 4096);
  } else if (!strcmp(c, "barriers")) {
    two_barriers<<<1, 64, 0, s>>>(d);
  } else if (!strcmp(c, "exited")) {
    exit_before_barrier<<<1, 64, 0, s>>>(d);
  } else if (!strcmp(c, "shfl_exited")) {
    partial_warp_shuffle<<<1, 64, 0, s>>>(d);
  } else if (!strcmp(c, "shfl_barrier")) {
    shuffle_or_barrier<<<1, 32, 0, s>>>(d);
  } else if (!strcmp(c, "block")) {
    noop<<<1, 1025, 0, s>>>(d); // MARK block
  } else if (!strcmp(c, "grid_y")) {
    noop<<<dim3(1, 65536), 32, 0, s>>>(d); // MARK grid_y
  } else if (!strcmp(c, "smem")) {
    noop<<<1, 32, 64 * 1024, s>>>(d); // MARK smem
  } else if (!strcmp(c, "smem_optin")) {
    cudaDeviceProp p;
    CK(cudaGetDeviceProperties(&p, rank));
    CK(cudaFuncSetAttribute(noop, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            (int)p.sharedMemPerBlockOptin));
    noop<<<1, 32, p.sharedMemPerBlockOptin + 1024, s>>>(d); // MARK smem_optin
  } else if (!strcmp(c, "pointer")) {
    noop<<<1, 32, 0, s>>>(h); // MARK pointer
  } else if (!strcmp(c, "copy")) {
    CK(cudaMemcpyAsync(out + 4000, h, 200 * sizeof(float), cudaMemcpyHostToDevice, s)); // MARK copy
  } else if (!strcmp(c, "memset")) {
    CK(cudaMemsetAsync(d + 1, 0, 4096 * sizeof(float), s)); // MARK memset
  } else if (!strncmp(c, "oob_", 4)) {
    /* 1024 floats lie between two guard pages; 1000 end 96 bytes before
     * one (the canary); the kernels get x + 16, and n of what follows */
    int total = !strcmp(c, "oob_slack") ? 1000 : 1024, n = total - 16;
    float *x;
    CK(cudaMalloc((void **)&x, total * sizeof(float)));
    if (!strcmp(c, "oob_read")) read_one_past<<<4, 256, 0, s>>>(x + 16, out, n);
    else if (!strcmp(c, "oob_before")) write_one_before<<<4, 256, 0, s>>>(x, n);
    else write_one_past<<<4, 256, 0, s>>>(x + 16, n);
  } else if (!strcmp(c, "dynamic_overflow")) {
    write_past_dynamic<<<1, 64, 60 * sizeof(float), s>>>(d, 60);
  } else if (!strcmp(c, "static_overflow")) {
    write_past_static<<<1, 160, 0, s>>>(d);
  } else if (!strcmp(c, "race") || !strcmp(c, "fresh")) {
    if (!strcmp(c, "race")) race<<<1, 64, 0, s>>>(out);
    else {
      float *fresh;
      CK(cudaMalloc((void **)&fresh, 64 * sizeof(float)));
      read_fresh<<<1, 64, 0, s>>>(fresh, out);
    }
    CK(cudaMemcpyAsync(h, out, 64 * sizeof(float), cudaMemcpyDeviceToHost, s));
    CK(cudaStreamSynchronize(s));
    int nan = 0;
    for (int i = 0; i < 64; i++) nan += h[i] != h[i];
    printf("nan %d\n", nan);
    dg = digest(h, 64);
  } else if (!strcmp(c, "nccl_size") || !strcmp(c, "nccl_hang")) {
    /* two ranks: rank 0 sends 10 floats, rank 1 expects 12 (or nothing is sent) */
    ncclUniqueId id;
    if (rank == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm;
    ncclCommInitRank(&comm, 2, id, rank);
    if (rank == 0 && !strcmp(c, "nccl_size")) ncclSend(d, 10, ncclFloat, 1, comm, s);
    if (rank == 1) ncclRecv(out, 12, ncclFloat, 0, comm, s); // MARK nccl
    CK(cudaStreamSynchronize(s));
    ncclCommDestroy(comm);
  } else {
    fprintf(stderr, "unknown case '%s'\n", c);
    return 2;
  }
  CK(cudaStreamSynchronize(s));
  printf("ok %016llx\n", dg);
  cudaFree(d);
  cudaFree(out);
  MPI_Finalize();
  return 0;
}
