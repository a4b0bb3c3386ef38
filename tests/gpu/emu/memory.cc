/* gpu-emu: device and page-locked host memory, copies and fills.
 *
 * Device memory is host memory, registered by address so that every copy,
 * fill, kernel pointer argument and NCCL buffer can be checked against it,
 * and filled with 0xff bytes when allocated: a float, double or bf16 read
 * before any write is NaN. Copies and fills are stream operations; a device
 * range that leaves its allocation is an error naming the call and its line.
 *
 * Memory checking (as compute-sanitizer's memcheck): each device allocation
 * is a mapping of its own, 256-byte aligned as cudaMalloc's, whose 256-byte
 * rounded end touches an inaccessible guard page, with another guard page
 * before the page it starts in. A kernel's read or write that reaches a
 * guard page faults, and kernels.cc reports it with the kernel, block,
 * thread, source line and the offset in the allocation. The bytes between
 * the size asked for and the 256-byte rounding (the slack), and the gap
 * before the start, hold a canary (0x7fffffff words: NaN to a float, bf16
 * or double read): for every allocation a kernel's pointer arguments point
 * into, kernels.cc checks the first 32 bytes of the slack each time one of
 * the kernel's threads stops (a write there, as one element past the end,
 * is reported with the thread that made it), and the whole slack and the
 * last 256 bytes of the gap when each block ends (reported with the block).
 * A read there is not seen: it reads NaN. Freed
 * mappings are kept for reuse by an allocation of the same span, up to a
 * bound, and filled again. */
#include "runtime.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <vector>

namespace mt_emu {

struct alloc_info {
  size_t size;
  int kind;
  char *map;      /* device: the whole mapping, guard pages included */
  size_t map_len;
};
static std::map<uintptr_t, alloc_info> g_allocs;
static size_t g_device_bytes;

static size_t page_bytes() {
  static size_t p = (size_t)sysconf(_SC_PAGESIZE);
  return p;
}
static size_t round256(size_t x) { return x ? (x + 255) / 256 * 256 : 256; }

/* the canary: 0x7fffffff at every 4-byte aligned address (byte 3 of each
 * word 0x7f, the others 0xff); pattern + (address & 3) lines up with it */
static unsigned char g_pattern[256 + 4 + 8];
static const unsigned char *pattern_at(const void *p) {
  if (!g_pattern[0])
    for (size_t i = 0; i < sizeof g_pattern; i++) g_pattern[i] = (i & 3) == 3 ? 0x7f : 0xff;
  return g_pattern + ((uintptr_t)p & 3);
}
static void fill_canary(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = ((uintptr_t)(p + i) & 3) == 3 ? 0x7f : 0xff;
}

/* the gap checked before an allocation's start, at most */
static const size_t FRONT_CHECKED = 256;

void canary_ranges(const void *p, std::vector<canary_range> &out) {
  const void *base;
  size_t size;
  if (find_alloc(p, &base, &size) != ALLOC_DEVICE) return;
  const alloc_info &a = g_allocs[(uintptr_t)base];
  const unsigned char *b = (const unsigned char *)base;
  for (const canary_range &r : out)
    if (r.base == base) return;
  if (round256(size) > size)
    out.push_back(canary_range{b + size, round256(size) - size, base, size, true});
  size_t gap = (size_t)(b - (const unsigned char *)a.map) - page_bytes();
  if (gap) {
    size_t n = gap < FRONT_CHECKED ? gap : FRONT_CHECKED;
    out.push_back(canary_range{b - n, n, base, size, false});
  }
}

const unsigned char *canary_broken(const canary_range &r, size_t n) {
  if (n > r.n) n = r.n;
  const unsigned char *want = pattern_at(r.p);
  if (!memcmp(r.p, want, n)) return nullptr;
  for (size_t i = 0; i < n; i++)
    if (r.p[i] != want[i]) return r.p + i;
  return nullptr;
}

/* "a B-byte device allocation (kernel argument N points at its offset O)" */
static std::string alloc_name(const void *base, size_t size, const launch_desc *l) {
  char b[256];
  int n = snprintf(b, sizeof b, "a %zu-byte device allocation", size);
  for (int i = 0; l && i < l->n_ptr_args; i++) {
    const void *ab;
    size_t as;
    if (find_alloc(l->ptr_args[i], &ab, &as) == ALLOC_DEVICE && ab == base) {
      snprintf(b + n, sizeof b - n, " (kernel argument %d points at its offset %zu)",
               l->ptr_arg_no[i], (size_t)((const char *)l->ptr_args[i] - (const char *)base));
      break;
    }
  }
  return b;
}

/* "offset O, N bytes after the end, of a B-byte device allocation (...)",
 * counted as compute-sanitizer does: 0 bytes after = the first byte past
 * the end */
std::string device_offset(long long off, const void *base, size_t size, const launch_desc *l) {
  char b[96];
  if (off < 0) snprintf(b, sizeof b, "offset %lld, %lld bytes before the start, of ", off, -off);
  else
    snprintf(b, sizeof b, "offset %lld, %lld bytes after the end, of ", off,
             off - (long long)size);
  return b + alloc_name(base, size, l);
}

/* those first bytes as words to compare, made when the grid starts */
struct canary_word {
  const unsigned char *p;
  uint64_t want;
  int len; /* 8, or 1 where the slack is shorter than a word */
};
static std::vector<canary_word> g_canary_words;
/* the canaries around the allocations the running grid's pointer
 * arguments point into */
static std::vector<canary_range> g_canaries;

const std::vector<canary_range> &canaries_watched() { return g_canaries; }

void watch_canaries(const launch_desc &d) {
  g_canaries.clear();
  for (int i = 0; i < d.n_ptr_args; i++) canary_ranges(d.ptr_args[i], g_canaries);
  for (const canary_range &r : g_canaries) /* broken before this grid: a host write */
    if (canary_broken(r, r.n))
      fatal_at(d.file, d.line, "kernel %s: the canary around a %zu-byte device allocation was "
               "overwritten before the launch (a copy or another library's write)", d.name, r.size);
  g_canary_words.clear();
  for (const canary_range &r : g_canaries) {
    if (!r.after) continue;
    size_t m = r.n < CANARY_EACH_STOP ? r.n : CANARY_EACH_STOP;
    for (size_t off = 0; off < m;) {
      /* whole words inside the slack (the last one overlapping its
       * predecessor), never past it: the guard page follows */
      int len = m >= 8 ? 8 : 1;
      if (len == 8 && off + 8 > m) off = m - 8;
      canary_word w{r.p + off, 0, len};
      memcpy(&w.want, r.p + off, (size_t)len); /* intact when the grid starts */
      g_canary_words.push_back(w);
      off += (size_t)len;
    }
  }
}

void unwatch_canaries() {
  g_canaries.clear();
  g_canary_words.clear();
}

bool canaries_changed() {
  uint64_t diff = 0;
  for (const canary_word &w : g_canary_words) {
    uint64_t v = *w.p;
    if (w.len == 8) memcpy(&v, w.p, 8);
    diff |= v ^ w.want;
  }
  return diff != 0;
}

bool device_guard_fault(const void *addr, const void **base, size_t *size, long long *offset) {
  uintptr_t x = (uintptr_t)addr;
  size_t ps = page_bytes();
  auto it = g_allocs.upper_bound(x);
  /* the guard page before the next allocation's first page */
  if (it != g_allocs.end() && it->second.kind == ALLOC_DEVICE) {
    uintptr_t g = (uintptr_t)it->second.map;
    if (x >= g && x < g + ps) {
      *base = (const void *)it->first, *size = it->second.size;
      *offset = -(long long)(it->first - x);
      return true;
    }
  }
  /* the guard page after the previous one's rounded end */
  if (it != g_allocs.begin()) {
    --it;
    if (it->second.kind == ALLOC_DEVICE) {
      uintptr_t end = it->first + round256(it->second.size);
      if (x >= end && x < end + ps) {
        *base = (const void *)it->first, *size = it->second.size;
        *offset = (long long)(x - it->first);
        return true;
      }
    }
  }
  return false;
}

int find_alloc(const void *p, const void **base, size_t *size) {
  uintptr_t a = (uintptr_t)p;
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return 0;
  --it;
  /* p may point at the allocation's end (an empty range after it) */
  if (a > it->first + it->second.size) return 0;
  if (base) *base = (const void *)it->first;
  if (size) *size = it->second.size;
  return it->second.kind;
}

size_t device_bytes_in_use() { return g_device_bytes; }

int device_range(const void *p, size_t bytes, size_t *room) {
  const void *base;
  size_t size;
  if (find_alloc(p, &base, &size) != ALLOC_DEVICE) return 0;
  size_t left = (uintptr_t)base + size - (uintptr_t)p;
  if (room) *room = left;
  return bytes <= left;
}

void check_device_range(const char *file, int line, const char *what, const void *p,
                        size_t bytes) {
  const void *base;
  size_t size;
  if (find_alloc(p, &base, &size) != ALLOC_DEVICE)
    fatal_at(file, line, "%s: %p (%zu bytes) is not in any device allocation", what, p, bytes);
  size_t off = (uintptr_t)p - (uintptr_t)base;
  if (bytes > size - off)
    fatal_at(file, line,
             "%s: %zu bytes at offset %zu of a %zu-byte device allocation run %zu bytes past "
             "its end",
             what, bytes, off, size, bytes - (size - off));
}

/* freed device mappings kept for reuse (their spans), up to a bound */
static std::multimap<size_t, char *> g_spare;
static size_t g_spare_bytes;
static const size_t SPARE_MAX = 256u << 20;

/* [guard page][gap][bytes, rounded to 256][guard page]: the rounded end on
 * a page boundary */
static void *device_mapping(size_t bytes, char **map, size_t *map_len) {
  size_t ps = page_bytes(), rounded = round256(bytes);
  size_t body = (rounded + ps - 1) / ps * ps, len = body + 2 * ps;
  char *m = nullptr;
  auto it = g_spare.find(len);
  if (it != g_spare.end()) {
    m = it->second;
    g_spare.erase(it);
    g_spare_bytes -= len;
  } else {
    m = (char *)mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    if (mprotect(m + ps, body, PROT_READ | PROT_WRITE) != 0)
      fatal("mprotect of device memory failed");
  }
  char *p = m + ps + body - rounded;
  fill_canary((unsigned char *)m + ps, body - rounded);
  memset(p, 0xff, bytes); /* NaN */
  fill_canary((unsigned char *)p + bytes, rounded - bytes);
  *map = m;
  *map_len = len;
  return p;
}

static void *register_alloc(size_t bytes, int kind) {
  install_segv();
  void *p;
  char *map = nullptr;
  size_t map_len = 0;
  if (kind == ALLOC_DEVICE) {
    p = device_mapping(bytes, &map, &map_len);
  } else {
    p = aligned_alloc(256, round256(bytes));
    if (p) memset(p, 0xff, round256(bytes));
  }
  if (!p) return nullptr;
  g_allocs[(uintptr_t)p] = alloc_info{bytes, kind, map, map_len};
  if (kind == ALLOC_DEVICE) g_device_bytes += round256(bytes);
  return p;
}

static int unregister_alloc(void *p, int kind) {
  auto it = g_allocs.find((uintptr_t)p);
  if (it == g_allocs.end() || it->second.kind != kind) return -1;
  alloc_info a = it->second;
  g_allocs.erase(it);
  if (kind != ALLOC_DEVICE) {
    free(p);
    return 0;
  }
  g_device_bytes -= round256(a.size);
  if (g_spare_bytes + a.map_len <= SPARE_MAX) {
    g_spare.emplace(a.map_len, a.map);
    g_spare_bytes += a.map_len;
  } else {
    munmap(a.map, a.map_len);
  }
  return 0;
}

static cudaError_t device_alloc(void **p, size_t bytes) {
  if (!p) return set_error(cudaErrorInvalidValue);
  *p = nullptr;
  if (g_device_bytes + round256(bytes) > props().totalGlobalMem) return set_error(cudaErrorMemoryAllocation);
  *p = register_alloc(bytes, ALLOC_DEVICE);
  return *p ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}

/* the role of one side of a copy: device memory must be a device range */
static void check_side(const call_site &at, const char *call, const char *side, const void *p,
                       size_t bytes, bool device) {
  if (!bytes || !device) return;
  char what[96];
  snprintf(what, sizeof what, "%s %s", call, side);
  check_device_range(at.file, at.line, what, p, bytes);
}

/* what cudaMemcpyDefault means for p */
static bool is_device(const void *p) { return find_alloc(p, nullptr, nullptr) == ALLOC_DEVICE; }

static void kind_sides(cudaMemcpyKind kind, const void *dst, const void *src, bool *dd, bool *sd) {
  switch (kind) {
  case cudaMemcpyHostToDevice: *dd = true, *sd = false; break;
  case cudaMemcpyDeviceToHost: *dd = false, *sd = true; break;
  case cudaMemcpyDeviceToDevice: *dd = true, *sd = true; break;
  case cudaMemcpyHostToHost: *dd = false, *sd = false; break;
  default: *dd = is_device(dst), *sd = is_device(src); break;
  }
}

/* a copy queued on s (its id to *id when given: 0 when nothing was
 * queued). A source in pageable host memory is staged when the call is
 * made in deferred mode, as the driver stages it: the host may reuse it
 * when the call returns. */
static cudaError_t copy_async(call_site at, const char *what, void *dst, const void *src,
                              size_t count, cudaMemcpyKind kind, cudaStream_t s, uint64_t *id) {
  bool dd, sd;
  kind_sides(kind, dst, src, &dd, &sd);
  check_side(at, what, "destination", dst, count, dd);
  check_side(at, what, "source", src, count, sd);
  if (id) *id = 0;
  if (!count) return cudaSuccess;
  std::shared_ptr<std::vector<unsigned char>> staged;
  if (cfg().streams_deferred && !sd && find_alloc(src, nullptr, nullptr) != ALLOC_HOST) {
    const unsigned char *b = (const unsigned char *)src;
    staged = std::make_shared<std::vector<unsigned char>>(b, b + count);
    src = staged->data();
  }
  op o{};
  o.kind = op::WORK;
  o.what = what;
  o.run = [dst, src, count, dd, sd, staged]() {
    memmove(dst, src, count);
    stats.copies++;
    if (sd && !dd) digest_d2h(dst, count);
  };
  uint64_t queued = enqueue(s, std::move(o));
  if (id) *id = queued;
  return cudaSuccess;
}

} // namespace mt_emu

using namespace mt_emu;

extern "C" {

cudaError_t cudaMalloc(void **devPtr, size_t size) { return device_alloc(devPtr, size); }

cudaError_t cudaFree(void *devPtr) {
  if (!devPtr) return cudaSuccess;
  call_site at = take_site();
  drain_all("cudaFree"); /* it synchronises the device, NCCL kernels included */
  if (unregister_alloc(devPtr, ALLOC_DEVICE) != 0)
    fatal_at(at.file, at.line, "cudaFree(%p): not the start of a device allocation", devPtr);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t s) {
  (void)s; /* usable by the stream's later work: it exists from now on */
  return device_alloc(devPtr, size);
}

cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t s) {
  call_site at = take_site();
  if (!devPtr) return cudaSuccess;
  if (find_alloc(devPtr, nullptr, nullptr) != ALLOC_DEVICE)
    fatal_at(at.file, at.line, "cudaFreeAsync(%p): not a device allocation", devPtr);
  op o{};
  o.kind = op::WORK;
  o.what = "cudaFreeAsync";
  o.run = [devPtr]() {
    if (unregister_alloc(devPtr, ALLOC_DEVICE) != 0)
      fatal("cudaFreeAsync(%p): not the start of a device allocation", devPtr);
  };
  enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
  *ptr = register_alloc(size, ALLOC_HOST);
  return *ptr ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
  (void)flags;
  return cudaMallocHost(ptr, size);
}

cudaError_t cudaFreeHost(void *ptr) {
  call_site at = take_site();
  if (!ptr) return cudaSuccess;
  drain_all("cudaFreeHost");
  if (unregister_alloc(ptr, ALLOC_HOST) != 0)
    fatal_at(at.file, at.line, "cudaFreeHost(%p): not page-locked host memory from cudaMallocHost", ptr);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes *a, const void *ptr) {
  memset(a, 0, sizeof *a);
  int k = find_alloc(ptr, nullptr, nullptr);
  a->type = k == ALLOC_DEVICE ? cudaMemoryTypeDevice
            : k == ALLOC_HOST ? cudaMemoryTypeHost
                              : cudaMemoryTypeUnregistered;
  a->device = 0;
  a->devicePointer = k == ALLOC_DEVICE ? (void *)ptr : nullptr;
  a->hostPointer = k != ALLOC_DEVICE ? (void *)ptr : nullptr;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  size_t tot = props().totalGlobalMem, used = device_bytes_in_use();
  *total = tot;
  *free_bytes = used < tot ? tot - used : 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device) {
  (void)device;
  static int the_pool;
  *pool = (cudaMemPool_t)&the_pool;
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void *value) {
  (void)pool, (void)attr, (void)value;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t s) {
  return copy_async(take_site(), "cudaMemcpyAsync", dst, src, count, kind, s, nullptr);
}

/* cudaMemcpy: on the legacy default stream, and the host waits as the
 * runtime documents ("API synchronization behavior"): from pageable host
 * memory to the device, the stream synchronises first and the call returns
 * once the source is staged (the copy itself may still be queued); device
 * to host, from page-locked memory to the device, and host to host, when
 * the copy has completed; device to device, at once. (Eager mode: always
 * when the copy has completed.) */
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind) {
  call_site at = take_site();
  if (!cfg().streams_deferred) {
    cudaError_t e = copy_async(at, "cudaMemcpy", dst, src, count, kind, 0, nullptr);
    if (e == cudaSuccess) sync_stream("cudaMemcpy", 0);
    return e;
  }
  bool dd, sd;
  kind_sides(kind, dst, src, &dd, &sd);
  bool pageable_to_device = dd && !sd && find_alloc(src, nullptr, nullptr) != ALLOC_HOST;
  if (pageable_to_device) sync_stream("cudaMemcpy", 0);
  uint64_t id = 0;
  cudaError_t e = copy_async(at, "cudaMemcpy", dst, src, count, kind, 0, &id);
  if (e == cudaSuccess && id && !pageable_to_device && !(dd && sd)) wait_op("cudaMemcpy", 0, id);
  return e;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s) {
  call_site at = take_site();
  if (!width || !height) return cudaSuccess;
  if (width > dpitch || width > spitch) return set_error(cudaErrorInvalidValue);
  bool dd, sd;
  kind_sides(kind, dst, src, &dd, &sd);
  check_side(at, "cudaMemcpy2DAsync", "destination", dst, dpitch * (height - 1) + width, dd);
  check_side(at, "cudaMemcpy2DAsync", "source", src, spitch * (height - 1) + width, sd);
  op o{};
  o.kind = op::WORK;
  o.what = "cudaMemcpy2DAsync";
  o.run = [=]() {
    for (size_t r = 0; r < height; r++) {
      memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
      if (sd && !dd) digest_d2h((char *)dst + r * dpitch, width);
    }
    stats.copies++;
  };
  enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t count, cudaStream_t s) {
  call_site at = take_site();
  check_side(at, "cudaMemsetAsync", "destination", dst, count, true);
  if (!count) return cudaSuccess;
  op o{};
  o.kind = op::WORK;
  o.what = "cudaMemsetAsync";
  o.run = [=]() { memset(dst, value, count); };
  enqueue(s, std::move(o));
  return cudaSuccess;
}

/* on the legacy default stream; asynchronous to the host for device memory
 * (the runtime's documented behaviour; eager mode waits) */
cudaError_t cudaMemset(void *dst, int value, size_t count) {
  cudaError_t e = cudaMemsetAsync(dst, value, count, 0);
  if (e == cudaSuccess && !cfg().streams_deferred) sync_stream("cudaMemset", 0);
  return e;
}

cudaError_t cudaMemset2DAsync(void *dst, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t s) {
  call_site at = take_site();
  if (!width || !height) return cudaSuccess;
  if (width > pitch) return set_error(cudaErrorInvalidValue);
  check_side(at, "cudaMemset2DAsync", "destination", dst, pitch * (height - 1) + width, true);
  op o{};
  o.kind = op::WORK;
  o.what = "cudaMemset2DAsync";
  o.run = [=]() {
    for (size_t r = 0; r < height; r++) memset((char *)dst + r * pitch, value, width);
  };
  enqueue(s, std::move(o));
  return cudaSuccess;
}

} // extern "C"
