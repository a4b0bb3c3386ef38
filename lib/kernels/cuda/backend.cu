/* The CUDA backend: one GPU per process, one compute stream every op is
 * queued on, memory counted by category like the CPU backend's, the
 * elementwise helpers and scalar reductions of the op table, and the table
 * itself: one member per op of kernels.h's lists, generated from them, that
 * runs the op's body for the storage type it is given (cuda_common.cuh). */
#include "kernels/cuda/cuda_common.cuh"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

mt_cuda_state g_cu;

static void timers_reset(void); /* per-op GPU time, below */
static int g_ops_built;         /* the op table is filled (once per start) */

/* cuBLASLt's workspace (the size NVIDIA suggests for Hopper) */
#define MT_LT_WORKSPACE_BYTES (32u << 20)
/* scratch for bf16 operands and partial sums: MT_CUDA_SCRATCH_MB, else
 * 256 MiB where bf16 operands are converted into it (larger products are
 * cut into pieces that fit) and 32 MiB otherwise (partial sums only: fp32,
 * and bf16 rounded inside cuBLASLt, MT_CUDA_BF16_GEMM=fast) */
#define MT_SCRATCH_MB_BF16 256
#define MT_SCRATCH_MB_FP32 32

extern "C" int mt_cuda_built(void) { return 1; }

extern "C" int mt_cuda_device_count(char *why, size_t why_len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (e != cudaSuccess || n < 1) {
    const char *cause = e != cudaSuccess ? cudaGetErrorString(e) : "the CUDA runtime reports 0 GPUs";
    /* the runtime says "driver version is insufficient" also when there is
     * no driver at all: say which */
    if (e == cudaErrorInsufficientDriver) {
      void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
      if (!drv) cause = "no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded)";
      else dlclose(drv);
    }
    if (why && why_len)
      snprintf(why, why_len, "%s%s%s%s", cause, vis ? " (CUDA_VISIBLE_DEVICES='" : "",
               vis ? vis : "", vis ? "')" : "");
    cudaGetLastError(); /* clear the sticky error of a failed probe */
    return 0;
  }
  if (why && why_len) why[0] = '\0';
  return n;
}

/* a variable mt_device_env_check has accepted, else def */
static size_t env_mb(const char *name, size_t def) {
  const char *v = getenv(name);
  return v && *v ? (size_t)strtol(v, NULL, 10) : def;
}

extern "C" int mt_cuda_init(int device, mt_precision prec, mt_err *e) {
  if (g_cu.up) {
    if (g_cu.device == device && g_cu.prec == prec) return 0;
    mt_cuda_shutdown();
  }
  char why[256];
  if (mt_device_env_check(why, sizeof why) != 0) {
    mt_err_set(e, "%s", why);
    return -1;
  }
  int n = mt_cuda_device_count(why, sizeof why);
  if (n < 1) {
    mt_err_set(e, "no GPU is usable: %s", why);
    return -1;
  }
  if (device < 0 || device >= n) {
    mt_err_set(e, "GPU %d asked for, but this process sees %d", device, n);
    return -1;
  }
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaGetDeviceProperties(&g_cu.prop, device);
  if (err != cudaSuccess) {
    mt_err_set(e, "GPU %d: %s", device, cudaGetErrorString(err));
    cudaGetLastError();
    return -1;
  }
  if (g_cu.prop.major < 8) {
    mt_err_set(e, "GPU %d (%s) has compute capability %d.%d; meshtrain's CUDA backend needs "
                  "8.0 or newer (A100, H100, H200)", device, g_cu.prop.name, g_cu.prop.major,
               g_cu.prop.minor);
    return -1;
  }
  if (mt_cublaslt_load(e) != 0) return -1;
  g_cu.device = device;
  g_cu.prec = prec;
  const char *gp = getenv("MT_CUDA_BF16_GEMM");
  g_cu.gemm = prec == MT_PRECISION_FP32 ? MT_GEMM_FP32
              : gp && strcmp(gp, "fast") == 0 ? MT_GEMM_BF16_FAST
                                              : MT_GEMM_BF16;
  CUDA_CHECK(cudaStreamCreateWithFlags(&g_cu.stream, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasLtCreate(&g_cu.lt));
  g_cu.lt_workspace_bytes = MT_LT_WORKSPACE_BYTES;
  CUDA_CHECK(cudaMalloc(&g_cu.lt_workspace, g_cu.lt_workspace_bytes));
  g_cu.scratch_bytes =
      env_mb("MT_CUDA_SCRATCH_MB", g_cu.gemm == MT_GEMM_BF16 ? MT_SCRATCH_MB_BF16
                                                             : MT_SCRATCH_MB_FP32) << 20;
  CUDA_CHECK(cudaMalloc(&g_cu.scratch, g_cu.scratch_bytes));
  CUDA_CHECK(cudaMalloc(&g_cu.red_dev, (MT_RED_BLOCKS + 1) * sizeof(double)));
  CUDA_CHECK(cudaMallocHost(&g_cu.red_host, sizeof(double)));
  g_cu.dev_cur = g_cu.dev_peak = 0;
  g_cu.up = 1;
  return 0;
}

extern "C" void mt_cuda_shutdown(void) {
  if (!g_cu.up) return;
  cudaStreamSynchronize(g_cu.stream);
  timers_reset();
  g_ops_built = 0;
  mt_cuda_matmul_shutdown();
  mt_cuda_ops_shutdown();
  cudaFree(g_cu.lt_workspace);
  cudaFree(g_cu.scratch);
  cudaFree(g_cu.red_dev);
  cudaFreeHost(g_cu.red_host);
  cublasLtDestroy(g_cu.lt);
  cudaStreamDestroy(g_cu.stream);
  memset(&g_cu, 0, sizeof g_cu);
}

void *mt_cuda_scratch(size_t bytes, const char *what) {
  if (bytes > g_cu.scratch_bytes)
    mt_die("CUDA backend: %s needs %zu bytes of scratch, %zu reserved (raise "
           "MT_CUDA_SCRATCH_MB)", what, bytes, g_cu.scratch_bytes);
  return g_cu.scratch;
}

extern "C" int mt_cuda_get_info(mt_cuda_info *info) {
  if (!g_cu.up) return -1;
  memset(info, 0, sizeof *info);
  info->device = g_cu.device;
  snprintf(info->name, sizeof info->name, "%s", g_cu.prop.name);
  const unsigned char *u = (const unsigned char *)g_cu.prop.uuid.bytes;
  snprintf(info->uuid, sizeof info->uuid,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
           u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  if (cudaDeviceGetPCIBusId(info->pci_bus_id, (int)sizeof info->pci_bus_id, g_cu.device) !=
      cudaSuccess) {
    info->pci_bus_id[0] = '\0';
    cudaGetLastError();
  }
  info->sm_major = g_cu.prop.major;
  info->sm_minor = g_cu.prop.minor;
  info->sm_count = g_cu.prop.multiProcessorCount;
  size_t fr = 0, tot = 0;
  if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) cudaGetLastError();
  info->total_bytes = tot ? tot : g_cu.prop.totalGlobalMem;
  info->free_bytes = fr;
  info->workspace_bytes = g_cu.lt_workspace_bytes + g_cu.scratch_bytes +
                          (MT_RED_BLOCKS + 1) * sizeof(double) + g_cu.extra_bytes;
  info->peak_bytes = g_cu.dev_peak;
  info->prec = g_cu.prec;
  info->gemm_path = g_cu.gemm == MT_GEMM_FP32 ? "fp32" : g_cu.gemm == MT_GEMM_BF16 ? "bf16"
                                                                                 : "bf16-fast";
  return 0;
}

extern "C" void *mt_cuda_stream(void) { return g_cu.up ? (void *)g_cu.stream : NULL; }

extern "C" void *mt_cuda_host_alloc(size_t bytes) {
  void *p = NULL;
  if (g_cu.up && cudaMallocHost(&p, bytes ? bytes : 1) == cudaSuccess) return p;
  cudaGetLastError();
  return mt_malloc(bytes ? bytes : 1); /* not page-locked: slower copies, same results */
}

extern "C" void mt_cuda_host_free(void *p) {
  if (!p) return;
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost) {
    cudaFreeHost(p);
    return;
  }
  cudaGetLastError();
  free(p);
}

/* ------------------------------------------------------------------ */
/* memory                                                              */

/* zeroed device memory of `bytes`, counted under cat (and in the device
 * peak); out of memory is fatal with the figures that explain it. The
 * size asked for is the tensor's own (cudaMalloc rounds it up itself), so
 * that a memory checker sees the tensor's true end. */
static void *cuda_alloc(mt_mem_cat cat, size_t bytes) {
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    mt_die("out of GPU memory allocating %.1f MiB of %s on GPU %d (%s): %.2f GiB free of "
           "%.2f GiB, %.2f GiB held by this rank's tensors (%s)",
           bytes / 1048576.0, mt_mem_cat_name(cat), g_cu.device, g_cu.prop.name,
           fr / 1073741824.0, tot / 1073741824.0, g_cu.dev_cur / 1073741824.0,
           cudaGetErrorString(e));
  }
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes ? bytes : 1, g_cu.stream));
  mt_mem_count(cat, bytes);
  g_cu.dev_cur += bytes;
  if (g_cu.dev_cur > g_cu.dev_peak) g_cu.dev_peak = g_cu.dev_cur;
  return p;
}

static void cuda_free(mt_mem_cat cat, void *p, size_t bytes) {
  if (!p) return;
  CUDA_CHECK(cudaStreamSynchronize(g_cu.stream)); /* nothing queued may still use it */
  CUDA_CHECK(cudaFree(p));
  mt_mem_uncount(cat, bytes);
  g_cu.dev_cur -= bytes <= g_cu.dev_cur ? bytes : g_cu.dev_cur;
}

/* from host memory; the host buffer may be reused when this returns */
static void cuda_upload(void *dst, const void *host_src, size_t bytes) {
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, g_cu.stream));
}

/* the host waits for the stream: a blocking call the watchdog gives a
 * deadline (core/flight.h; a kernel that never ends is named there) */
static void stream_sync(void) {
  const int fl = mt_flight_begin_self("device_sync");
  CUDA_CHECK(cudaStreamSynchronize(g_cu.stream));
  mt_flight_end(fl);
}

/* to host memory, after every op queued before it */
static void cuda_download(void *host_dst, const void *src, size_t bytes) {
  if (!bytes) return;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, g_cu.stream));
  stream_sync();
}

static void cuda_sync(void) { stream_sync(); }

/* ------------------------------------------------------------------ */
/* elementwise helpers, on storage type S (fp32 math, one rounding per
 * stored value; cuda_common.cuh)                                      */

template <typename S> void mt_cuda_zero(void *x, size_t n) {
  if (n) CUDA_CHECK(cudaMemsetAsync(x, 0, n * sizeof(S), g_cu.stream));
}
MT_CUDA_INSTANTIATE(zero)

template <typename S> void mt_cuda_copy(void *dst, const void *src, size_t n) {
  if (n && dst != src)
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(S), cudaMemcpyDeviceToDevice, g_cu.stream));
}
MT_CUDA_INSTANTIATE(copy)

/* y += a x (bf16: y = round(y + a x)) */
template <typename S> __global__ void axpy_kernel(S *y, float a, const S *x, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    y[i] = mt_st<S>(mt_ld(y[i]) + a * mt_ld(x[i]));
}

template <typename S> void mt_cuda_axpy(void *y, float a, const void *x, size_t n) {
  if (!n) return;
  axpy_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>((S *)y, a, (const S *)x, n);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(axpy)

/* x *= s (bf16: x = round(x s)) */
template <typename S> __global__ void scale_kernel(S *x, float s, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    x[i] = mt_st<S>(mt_ld(x[i]) * s);
}

template <typename S> void mt_cuda_scale(void *x, float s, size_t n) {
  if (!n) return;
  scale_kernel<S><<<mt_blocks(n, 256), 256, 0, g_cu.stream>>>((S *)x, s, n);
  CUDA_LAUNCH_CHECK();
}
MT_CUDA_INSTANTIATE(scale)

/* Scalar reductions in double. A fixed grid of MT_RED_BLOCKS blocks: thread
 * i of the grid sums elements i, i + G, i + 2G, ... (G = the grid's
 * threads), each block adds its threads' sums as a tree, and one thread adds
 * the block sums in order: the same order for a given n on every run. */
template <typename S>
__global__ void reduce_partial_kernel(const S *x, size_t n, int square, double *partial) {
  __shared__ double sh[MT_RED_THREADS];
  double acc = 0.0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    double v = (double)mt_ld(x[i]);
    acc += square ? v * v : v;
  }
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void reduce_final_kernel(double *partial, int n) {
  double s = 0.0;
  for (int i = 0; i < n; i++) s += partial[i];
  partial[n] = s;
}

template <typename S> static double reduce(const S *x, size_t n, int square) {
  if (!n) return 0.0;
  reduce_partial_kernel<S><<<MT_RED_BLOCKS, MT_RED_THREADS, 0, g_cu.stream>>>(x, n, square,
                                                                              g_cu.red_dev);
  CUDA_LAUNCH_CHECK();
  reduce_final_kernel<<<1, 1, 0, g_cu.stream>>>(g_cu.red_dev, MT_RED_BLOCKS);
  CUDA_LAUNCH_CHECK();
  CUDA_CHECK(cudaMemcpyAsync(g_cu.red_host, g_cu.red_dev + MT_RED_BLOCKS, sizeof(double),
                             cudaMemcpyDeviceToHost, g_cu.stream));
  stream_sync();
  return *g_cu.red_host;
}

template <typename S> double mt_cuda_sum(const void *x, size_t n) {
  return reduce((const S *)x, n, 0);
}
MT_CUDA_INSTANTIATE(sum)
template <typename S> double mt_cuda_sumsq(const void *x, size_t n) {
  return reduce((const S *)x, n, 1);
}
MT_CUDA_INSTANTIATE(sumsq)

/* ------------------------------------------------------------------ */
/* the op table's members, from kernels.h's lists                      */

/* cuda_<op>(t, ...): the op's body for storage type t (anything but bf16
 * is fp32, as the CPU's members read it) */
#define MT_CUDA_MEMBER_TYPED_(name, params, args)                                           \
  static void cuda_##name(mt_dtype t, MT_OPS_UNPAREN params) {                              \
    if (t == MT_DT_BF16)                                                                    \
      mt_cuda_##name<mt_bf16> args;                                                         \
    else                                                                                    \
      mt_cuda_##name<float> args;                                                           \
  }
#define MT_CUDA_MEMBER_SUMS_(name, params, args)                                            \
  static double cuda_##name(mt_dtype t, MT_OPS_UNPAREN params) {                            \
    return t == MT_DT_BF16 ? mt_cuda_##name<mt_bf16> args : mt_cuda_##name<float> args;     \
  }
MT_OPS_TYPED(MT_CUDA_MEMBER_TYPED_)
MT_OPS_TYPED_SUMS(MT_CUDA_MEMBER_SUMS_)

/* ------------------------------------------------------------------ */
/* per-op GPU time (MT_CUDA_OP_TIMES=1)                                 */

/* Each timed op is bracketed by two events on the stream; the pairs are
 * read back (cudaEventElapsedTime) in batches, so timing adds two event
 * records per op and no synchronisation of its own. An op of the lists is
 * counted in slot 2 id (fp32, or a fixed-type op) or 2 id + 1 (bf16), its
 * id its place in the lists. */
enum {
#define MT_CUDA_OP_ID_(name, params, args) MT_CUDA_OP_ID_##name,
#define MT_CUDA_OP_ID_FIXED_(name, optional, params, args) MT_CUDA_OP_ID_##name,
  MT_OPS_TYPED(MT_CUDA_OP_ID_) MT_OPS_TYPED_SUMS(MT_CUDA_OP_ID_)
      MT_OPS_FIXED(MT_CUDA_OP_ID_FIXED_) MT_CUDA_N_OPS
#undef MT_CUDA_OP_ID_
#undef MT_CUDA_OP_ID_FIXED_
};
enum { MT_OP_SLOTS = 2 * MT_CUDA_N_OPS, MT_OP_PENDING = 2048 };

/* what mt_cuda_op_times reports for each slot: the member's name, with
 * "bf16 " in front for a bf16 call (NULL: no such slot) */
static const char *const g_op_label[MT_OP_SLOTS] = {
#define MT_CUDA_OP_LABEL_(name, params, args) #name, "bf16 " #name,
#define MT_CUDA_OP_LABEL_FIXED_(name, optional, params, args) #name, NULL,
    MT_OPS_TYPED(MT_CUDA_OP_LABEL_) MT_OPS_TYPED_SUMS(MT_CUDA_OP_LABEL_)
        MT_OPS_FIXED(MT_CUDA_OP_LABEL_FIXED_)
#undef MT_CUDA_OP_LABEL_
#undef MT_CUDA_OP_LABEL_FIXED_
};

static struct {
  int on;
  double seconds[MT_OP_SLOTS];
  long calls[MT_OP_SLOTS];
  cudaEvent_t start[MT_OP_PENDING], end[MT_OP_PENDING];
  int slot[MT_OP_PENDING];
  int n_pending, n_events;
  int depth; /* an op called from a timed op is not timed again */
} g_t;

static void timers_reset(void) {
  for (int i = 0; i < g_t.n_events; i++) {
    cudaEventDestroy(g_t.start[i]);
    cudaEventDestroy(g_t.end[i]);
  }
  memset(&g_t, 0, sizeof g_t);
}

static void timers_harvest(void) {
  if (!g_t.n_pending) return;
  CUDA_CHECK(cudaEventSynchronize(g_t.end[g_t.n_pending - 1]));
  for (int i = 0; i < g_t.n_pending; i++) {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, g_t.start[i], g_t.end[i]));
    g_t.seconds[g_t.slot[i]] += ms * 1e-3;
    g_t.calls[g_t.slot[i]]++;
  }
  g_t.n_pending = 0;
}

static void op_begin(int slot) {
  if (g_t.depth++) return;
  if (g_t.n_pending == MT_OP_PENDING) timers_harvest();
  int k = g_t.n_pending;
  if (k == g_t.n_events) {
    CUDA_CHECK(cudaEventCreate(&g_t.start[k]));
    CUDA_CHECK(cudaEventCreate(&g_t.end[k]));
    g_t.n_events++;
  }
  g_t.slot[k] = slot;
  CUDA_CHECK(cudaEventRecord(g_t.start[k], g_cu.stream));
}

static void op_end(void) {
  if (--g_t.depth) return;
  CUDA_CHECK(cudaEventRecord(g_t.end[g_t.n_pending], g_cu.stream));
  g_t.n_pending++;
}

/* timed_<op>: the member between two events, in the slot of its id and
 * type */
#define MT_CUDA_TIMED_TYPED_(name, params, args)                                            \
  static void timed_##name(mt_dtype t, MT_OPS_UNPAREN params) {                             \
    op_begin(2 * MT_CUDA_OP_ID_##name + (t == MT_DT_BF16));                                 \
    cuda_##name(t, MT_OPS_UNPAREN args);                                                    \
    op_end();                                                                               \
  }
#define MT_CUDA_TIMED_SUMS_(name, params, args)                                             \
  static double timed_##name(mt_dtype t, MT_OPS_UNPAREN params) {                           \
    op_begin(2 * MT_CUDA_OP_ID_##name + (t == MT_DT_BF16));                                 \
    double r = cuda_##name(t, MT_OPS_UNPAREN args);                                         \
    op_end();                                                                               \
    return r;                                                                               \
  }
#define MT_CUDA_TIMED_FIXED_(name, optional, params, args)                                  \
  static void timed_##name params {                                                         \
    op_begin(2 * MT_CUDA_OP_ID_##name);                                                     \
    mt_cuda_##name args;                                                                    \
    op_end();                                                                               \
  }
MT_OPS_TYPED(MT_CUDA_TIMED_TYPED_)
MT_OPS_TYPED_SUMS(MT_CUDA_TIMED_SUMS_)
MT_OPS_FIXED(MT_CUDA_TIMED_FIXED_)

/* MT_CUDA_OP_TIMES=1: the table built from now on is timed */
static int timing_wanted(void) {
  const char *t = getenv("MT_CUDA_OP_TIMES");
  g_t.on = t && *t && strcmp(t, "0") != 0;
  return g_t.on;
}

extern "C" int mt_cuda_op_times(mt_cuda_op_time *out, int max) {
  if (!g_cu.up || !g_t.on) return 0;
  timers_harvest();
  int n = 0;
  for (int i = 0; i < MT_OP_SLOTS && n < max; i++)
    if (g_t.calls[i]) out[n++] = (mt_cuda_op_time){g_op_label[i], g_t.seconds[i], g_t.calls[i]};
  return n;
}

/* ------------------------------------------------------------------ */
/* the op table                                                        */

static mt_ops g_ops_cuda;

extern "C" const mt_ops *mt_ops_cuda(void) {
  if (!g_cu.up) return NULL;
  mt_ops *o = &g_ops_cuda;
  if (g_ops_built) return o;
  g_ops_built = 1;
  memset(o, 0, sizeof *o);
  o->name = g_cu.prec == MT_PRECISION_BF16 ? "cuda-bf16" : "cuda";
  o->loc = MT_LOC_DEVICE;
  o->alloc = cuda_alloc;
  o->free = cuda_free;
  o->upload = cuda_upload;
  o->download = cuda_download;
  o->sync = cuda_sync;
  /* every member of the lists, timed (MT_CUDA_OP_TIMES=1) or not */
  const int timed = timing_wanted();
#define MT_CUDA_SET_(name, params, args) o->name = timed ? timed_##name : cuda_##name;
#define MT_CUDA_SET_FIXED_(name, optional, params, args)                                    \
  o->name = timed ? timed_##name : mt_cuda_##name;
  MT_OPS_TYPED(MT_CUDA_SET_)
  MT_OPS_TYPED_SUMS(MT_CUDA_SET_)
  MT_OPS_FIXED(MT_CUDA_SET_FIXED_)
#undef MT_CUDA_SET_
#undef MT_CUDA_SET_FIXED_
  /* a member left NULL would crash where the model first calls it: name it
   * here instead */
  char missing[512];
  if (mt_ops_missing(o, missing, sizeof missing) > 0)
    mt_die("CUDA backend: the op table lacks %s", missing);
  return o;
}
