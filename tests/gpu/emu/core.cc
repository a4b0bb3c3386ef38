/* gpu-emu: configuration, reports, counters, the devices this process sees
 * and the device-level parts of the CUDA runtime API. */
#include "runtime.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

namespace mt_emu {

counters stats;
static cudaError_t g_last_error = cudaSuccess;
static int g_device = 0;
static cudaDeviceProp g_props;
static int g_props_ready = -1; /* the device g_props describes */

/* ------------------------------------------------------------------ */
/* reports                                                             */

static void vreport(const char *file, int line, const char *fmt, va_list ap) {
  char msg[4096];
  vsnprintf(msg, sizeof msg, fmt, ap);
  int rank = -1, up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char who[32] = "";
  if (rank >= 0) snprintf(who, sizeof who, "[rank %d] ", rank);
  if (file)
    fprintf(stderr, "%sgpu-emu: error: %s:%d: %s\n", who, file, line, msg);
  else
    fprintf(stderr, "%sgpu-emu: error: %s\n", who, msg);
  fflush(stderr);
}

[[noreturn]] static void die_now() {
  int up = 0, down = 0;
  MPI_Initialized(&up);
  MPI_Finalized(&down);
  if (up && !down) MPI_Abort(MPI_COMM_WORLD, 70);
  _exit(70);
}

void fatal_at(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(file, line, fmt, ap);
  va_end(ap);
  die_now();
}

void fatal(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vreport(nullptr, 0, fmt, ap);
  va_end(ap);
  die_now();
}

static call_site g_site;

call_site take_site() {
  call_site s = g_site;
  g_site = call_site{nullptr, 0};
  return s;
}

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) g_last_error = e;
  return e;
}

/* ------------------------------------------------------------------ */
/* configuration                                                       */

static long env_long(const char *name, long def, long lo, long hi) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end = nullptr;
  long x = strtol(v, &end, 10);
  if (end == v || *end || x < lo || x > hi)
    fatal("%s = '%s': expected an integer in [%ld, %ld]", name, v, lo, hi);
  return x;
}

static config load_config() {
  config c;
  c.gpus = (int)env_long("MT_EMU_GPUS", 0, 0, 64);
  c.arch = (int)env_long("MT_EMU_ARCH", 80, 0, 1000);
  if (c.arch != 80 && c.arch != 86 && c.arch != 90)
    fatal("MT_EMU_ARCH = %d: the emulator knows the limits of 80, 86 and 90", c.arch);
  c.memory_bytes = (size_t)env_long("MT_EMU_MEMORY_MB", 16384, 1, 1L << 22) << 20;
  const char *o = getenv("MT_EMU_ORDER");
  if (!o || !*o || !strcmp(o, "forward")) c.order = ORDER_FORWARD;
  else if (!strcmp(o, "reverse")) c.order = ORDER_REVERSE;
  else if (!strcmp(o, "random")) c.order = ORDER_RANDOM;
  else fatal("MT_EMU_ORDER = '%s': one of forward, reverse, random", o);
  c.seed = (uint64_t)env_long("MT_EMU_SEED", 1, 0, 0x7fffffffffffffffL);
  const char *m = getenv("MT_EMU_STREAMS");
  if (!m || !*m || !strcmp(m, "deferred")) c.streams_deferred = true;
  else if (!strcmp(m, "eager")) c.streams_deferred = false;
  else fatal("MT_EMU_STREAMS = '%s': one of deferred, eager", m);
  c.watchdog_s = (double)env_long("MT_EMU_WATCHDOG_S", 120, 1, 86400);
  c.nccl_inflight = (int)env_long("MT_EMU_NCCL_INFLIGHT", 0, 0, 1024);
  const char *s = getenv("MT_EMU_STATS");
  c.stats = s ? s : "";
  /* CUDA_VISIBLE_DEVICES: a comma-separated list of indices among the
   * node's GPUs (an index past them, and what follows it, is dropped, as
   * the real runtime drops it); unset: all of them */
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (!vis) {
    for (int i = 0; i < c.gpus; i++) c.visible.push_back(i);
  } else {
    const char *p = vis;
    while (*p) {
      char *end = nullptr;
      long x = strtol(p, &end, 10);
      if (end == p || x < 0 || x >= c.gpus) break;
      bool dup = false;
      for (int v : c.visible) dup |= v == x;
      if (dup) break;
      c.visible.push_back((int)x);
      p = end;
      if (*p == ',') p++;
      else break;
    }
  }
  return c;
}

const config &cfg() {
  /* never destroyed: the exit handler below still reads it */
  static const config *c = new config(load_config());
  return *c;
}

/* ------------------------------------------------------------------ */
/* counters                                                            */

void digest_d2h(const void *p, size_t bytes) {
  const unsigned char *b = (const unsigned char *)p;
  unsigned long long h = stats.d2h_digest ? stats.d2h_digest : 1469598103934665603ULL;
  for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 1099511628211ULL;
  stats.d2h_digest = h;
  stats.d2h_bytes += bytes;
}

static void write_stats() {
  const config &c = cfg();
  if (c.stats.empty()) return;
  FILE *f = fopen(c.stats.c_str(), "a");
  if (!f) return;
  const char *orders[] = {"forward", "reverse", "random"};
  fprintf(f,
          "{\"pid\": %d, \"order\": \"%s\", \"launches\": %ld, \"blocks\": %ld, \"threads\": %ld, "
          "\"switches\": %ld, \"barriers\": %ld, \"warp_ops\": %ld, \"nccl_ops\": %ld, "
          "\"host_ops\": %ld, \"copies\": %ld, \"d2h_bytes\": %llu, \"d2h_digest\": \"%016llx\"}\n",
          (int)getpid(), orders[c.order], stats.launches, stats.blocks, stats.threads,
          stats.switches, stats.barriers, stats.warp_ops, stats.nccl_ops, stats.host_ops,
          stats.copies, stats.d2h_bytes, stats.d2h_digest);
  fclose(f);
}

static struct stats_at_exit {
  stats_at_exit() { atexit(write_stats); }
} g_stats_at_exit;

/* ------------------------------------------------------------------ */
/* devices                                                             */

/* Limits of the emulated GPU, by compute capability (the CUDA programming
 * guide's table): what launches are checked against. */
static void fill_props(cudaDeviceProp *p, int phys) {
  const config &c = cfg();
  memset(p, 0, sizeof *p);
  snprintf(p->name, sizeof p->name, "gpu-emu sm_%d (CUDA on the host, tests/gpu/emu)", c.arch);
  p->major = c.arch / 10;
  p->minor = c.arch % 10;
  /* the GPU's identity: the node and its index there (ranks that see the
   * same GPU see the same id, as on a real node) */
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  unsigned long long h = 1469598103934665603ULL;
  for (const char *s = host; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  for (int i = 0; i < 8; i++) p->uuid.bytes[i] = (char)(h >> (8 * i));
  p->uuid.bytes[8] = 'e', p->uuid.bytes[9] = 'm', p->uuid.bytes[10] = 'u';
  p->uuid.bytes[15] = (char)phys;
  p->totalGlobalMem = c.memory_bytes;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = c.arch == 80 ? 163 * 1024 : c.arch == 86 ? 99 * 1024 : 227 * 1024;
  p->sharedMemPerMultiprocessor = c.arch == 80 ? 164 * 1024 : c.arch == 86 ? 100 * 1024 : 228 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7fffffff, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->multiProcessorCount = c.arch == 80 ? 108 : c.arch == 86 ? 84 : 132;
  p->maxThreadsPerMultiProcessor = c.arch == 86 ? 1536 : 2048;
  p->totalConstMem = 65536;
  p->memPitch = 0x7fffffff;
  p->textureAlignment = 512;
  p->pciBusID = phys + 1;
  p->unifiedAddressing = 1;
  p->concurrentKernels = 1;
  p->l2CacheSize = 40 << 20;
}

const cudaDeviceProp &props() {
  if (g_props_ready != g_device) {
    fill_props(&g_props, physical_device());
    g_props_ready = g_device;
  }
  return g_props;
}

int physical_device() {
  const config &c = cfg();
  return g_device < (int)c.visible.size() ? c.visible[g_device] : 0;
}

} // namespace mt_emu

using namespace mt_emu;

/* ------------------------------------------------------------------ */
/* the runtime API: devices and errors                                 */

extern "C" {

void mt_emu_call_site(const char *file, int line) { g_site = call_site{file, line}; }

cudaError_t cudaGetDeviceCount(int *count) {
  int n = (int)cfg().visible.size();
  *count = n;
  return n ? cudaSuccess : set_error(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= (int)cfg().visible.size()) return set_error(cudaErrorInvalidDevice);
  g_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  *device = g_device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  if (device < 0 || device >= (int)cfg().visible.size()) return set_error(cudaErrorInvalidDevice);
  fill_props(prop, cfg().visible[device]);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= (int)cfg().visible.size()) return set_error(cudaErrorInvalidDevice);
  cudaDeviceProp p;
  fill_props(&p, cfg().visible[device]);
  switch (attr) {
  case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
  case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
  case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
  case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
  case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
  case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
  case cudaDevAttrWarpSize: *value = 32; break;
  default: return set_error(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device) {
  if (device < 0 || device >= (int)cfg().visible.size()) return set_error(cudaErrorInvalidDevice);
  snprintf(pciBusId, (size_t)len, "0000:%02x:00.0", cfg().visible[device] + 1);
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = g_last_error;
  g_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return g_last_error; }

const char *cudaGetErrorName(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "cudaSuccess";
  case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
  case cudaErrorNoDevice: return "cudaErrorNoDevice";
  case cudaErrorNotReady: return "cudaErrorNotReady";
  case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
  case cudaErrorNotSupported: return "cudaErrorNotSupported";
  default: return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t e) {
  switch (e) {
  case cudaSuccess: return "no error";
  case cudaErrorInvalidValue: return "invalid argument";
  case cudaErrorMemoryAllocation: return "out of memory";
  case cudaErrorInvalidConfiguration: return "invalid configuration argument";
  case cudaErrorInvalidDevice: return "invalid device ordinal";
  case cudaErrorNoDevice:
    return "no CUDA-capable device is detected (gpu-emu: MT_EMU_GPUS is 0 or unset)";
  case cudaErrorNotReady: return "device not ready";
  case cudaErrorInvalidResourceHandle: return "invalid resource handle";
  case cudaErrorNotSupported: return "operation not supported";
  default: return "unknown error";
  }
}

} // extern "C"
