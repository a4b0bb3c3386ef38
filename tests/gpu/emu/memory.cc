/* gpu-emu: device and page-locked host memory, copies and fills.
 *
 * Device memory is host memory from aligned_alloc (256-byte aligned, as
 * cudaMalloc's), registered by address so that every copy, fill, kernel
 * pointer argument and NCCL buffer can be checked against it, and filled
 * with 0xff bytes when allocated: a float, double or bf16 read before any
 * write is NaN. Copies and fills are stream operations; a device range
 * that leaves its allocation is an error naming the call and its line. */
#include "runtime.h"

#include <stdlib.h>
#include <string.h>

#include <map>

namespace mt_emu {

struct alloc_info {
  size_t size;
  int kind;
};
static std::map<uintptr_t, alloc_info> g_allocs;
static size_t g_device_bytes;

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

static void *register_alloc(size_t bytes, int kind) {
  size_t rounded = (bytes + 255) / 256 * 256;
  void *p = aligned_alloc(256, rounded ? rounded : 256);
  if (!p) return nullptr;
  memset(p, 0xff, rounded ? rounded : 256); /* NaN */
  g_allocs[(uintptr_t)p] = alloc_info{bytes, kind};
  if (kind == ALLOC_DEVICE) g_device_bytes += bytes;
  return p;
}

static int unregister_alloc(void *p, int kind) {
  auto it = g_allocs.find((uintptr_t)p);
  if (it == g_allocs.end() || it->second.kind != kind) return -1;
  if (kind == ALLOC_DEVICE) g_device_bytes -= it->second.size;
  g_allocs.erase(it);
  free(p);
  return 0;
}

static cudaError_t device_alloc(void **p, size_t bytes) {
  if (!p) return set_error(cudaErrorInvalidValue);
  *p = nullptr;
  if (g_device_bytes + bytes > props().totalGlobalMem) return set_error(cudaErrorMemoryAllocation);
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
  call_site at = take_site();
  bool dd, sd;
  kind_sides(kind, dst, src, &dd, &sd);
  check_side(at, "cudaMemcpyAsync", "destination", dst, count, dd);
  check_side(at, "cudaMemcpyAsync", "source", src, count, sd);
  if (!count) return cudaSuccess;
  op o{};
  o.kind = op::WORK;
  o.what = "cudaMemcpyAsync";
  o.run = [dst, src, count, dd, sd]() {
    memmove(dst, src, count);
    stats.copies++;
    if (sd && !dd) digest_d2h(dst, count);
  };
  enqueue(s, std::move(o));
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind) {
  cudaError_t e = cudaMemcpyAsync(dst, src, count, kind, 0);
  if (e == cudaSuccess) e = cudaStreamSynchronize(0);
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

cudaError_t cudaMemset(void *dst, int value, size_t count) {
  cudaError_t e = cudaMemsetAsync(dst, value, count, 0);
  if (e == cudaSuccess) e = cudaStreamSynchronize(0);
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
