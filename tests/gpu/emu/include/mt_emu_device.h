/* gpu-emu: what device code needs to compile as host C++ (included before
 * every .cu file of lib/kernels/cuda in the emulated build; rewrite_cu.py has
 * turned its launches and __shared__ declarations into the calls below,
 * line for line).
 *
 * The CUDA headers are the toolkit's own: compiled by g++ they give the
 * types (dim3, float4, __nv_bfloat16 and its host conversions) and the
 * runtime API's declarations, which the emulator implements. What only
 * nvcc provides is defined here: the built-in indices, barriers, warp
 * collectives, atomics and launches. The CUDA headers are included first,
 * so that none of their declarations meets the macros below. */
#ifndef MT_EMU_DEVICE_H
#define MT_EMU_DEVICE_H

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cublasLt.h>
#include <math.h>
#include <string.h>

#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#include "mt_emu.h"

#define __launch_bounds__(...)
#ifdef __forceinline__
#undef __forceinline__
#endif
#define __forceinline__ inline

/* the running thread's coordinates */
#define threadIdx (static_cast<const ::uint3 &>(::mt_emu::cur->tid))
#define blockIdx (static_cast<const ::uint3 &>(::mt_emu::cur_block_idx))
#define blockDim (static_cast<const ::dim3 &>(::mt_emu::cur_block_dim))
#define gridDim (static_cast<const ::dim3 &>(::mt_emu::cur_grid_dim))
#define warpSize 32

#define __syncthreads() ::mt_emu::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) ::mt_emu::syncwarp_at(__FILE__, __LINE__, ##__VA_ARGS__)
#define __shfl_sync(...) ::mt_emu::shfl_at(::mt_emu::WARP_SHFL_IDX, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::mt_emu::shfl_at(::mt_emu::WARP_SHFL_UP, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) \
  ::mt_emu::shfl_at(::mt_emu::WARP_SHFL_DOWN, __FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ::mt_emu::shfl_at(::mt_emu::WARP_SHFL_XOR, __FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(mask, pred) \
  ((unsigned)::mt_emu::warp_op(::mt_emu::WARP_BALLOT, __FILE__, __LINE__, (mask), !!(pred), 0, 32))
#define __all_sync(mask, pred) \
  ((int)::mt_emu::warp_op(::mt_emu::WARP_ALL, __FILE__, __LINE__, (mask), !!(pred), 0, 32))
#define __any_sync(mask, pred) \
  ((int)::mt_emu::warp_op(::mt_emu::WARP_ANY, __FILE__, __LINE__, (mask), !!(pred), 0, 32))
/* one memory space, one OS thread: fences order nothing more */
#define __threadfence() ((void)0)
#define __threadfence_block() ((void)0)

namespace mt_emu {

inline void syncwarp_at(const char *file, int line, unsigned mask = 0xffffffffu) {
  warp_op(WARP_SYNC, file, line, mask, 0, 0, 32);
}

/* a value of up to 8 bytes through a warp collective, bit for bit */
template <typename T>
inline T shfl_at(warp_kind kind, const char *file, int line, unsigned mask, T var, int param,
                 int width = 32) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp shuffles move values of at most 8 bytes");
  uint64_t v = 0;
  memcpy(&v, &var, sizeof(T));
  uint64_t r = warp_op(kind, file, line, mask, v, param, width);
  T out;
  memcpy(&out, &r, sizeof(T));
  return out;
}

} // namespace mt_emu

/* Atomics: a fiber is never interrupted inside one, so a plain
 * read-modify-write is atomic here. */
template <typename T> inline T atomicAdd(T *p, T v) {
  T old = *p;
  *p = old + v;
  return old;
}
template <typename T> inline T atomicMax(T *p, T v) {
  T old = *p;
  if (v > old) *p = v;
  return old;
}
template <typename T> inline T atomicMin(T *p, T v) {
  T old = *p;
  if (v < old) *p = v;
  return old;
}
template <typename T> inline T atomicExch(T *p, T v) {
  T old = *p;
  *p = v;
  return old;
}
template <typename T> inline T atomicCAS(T *p, T cmp, T v) {
  T old = *p;
  if (old == cmp) *p = v;
  return old;
}
template <typename T> inline T __ldg(const T *p) { return *p; }

/* the device functions min and max of CUDA's math library */
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }

/* nvcc's runtime header takes a kernel itself here (cuda_runtime.h's
 * template, declared for nvcc only) */
template <typename T>
inline cudaError_t cudaFuncSetAttribute(T *entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute((const void *)entry, attr, value);
}

namespace mt_emu {

/* A launch, as rewrite_cu.py writes `K<<<grid, block, smem, stream>>>(args)`:
 *   mt_emu::launch_of(K, "K", __FILE__, __LINE__, grid, block, smem, stream)(args)
 * The arguments convert to the kernel's parameter types as in a call, are
 * copied (as CUDA copies them at the launch), and each pointer among them
 * is checked against the device allocations. */
template <typename... P> struct launcher {
  void (*kernel)(P...);
  launch_desc d;
  void operator()(P... args) {
    auto held = std::make_shared<std::tuple<typename std::decay<P>::type...>>(args...);
    check_pointers(*held, std::index_sequence_for<P...>{});
    void (*k)(P...) = kernel;
    d.body = [k, held]() { std::apply(k, *held); };
    launch(std::move(d));
  }

 private:
  template <typename Tup, size_t... I> void check_pointers(const Tup &t, std::index_sequence<I...>) {
    (check_one((int)I, std::get<I>(t)), ...);
  }
  template <typename A> void check_one(int i, const A &a) {
    if constexpr (std::is_pointer<A>::value) check_kernel_pointer(d, i, (const void *)a);
  }
};

template <typename... P>
inline launcher<P...> launch_of(void (*kernel)(P...), const char *name, const char *file, int line,
                                dim3 grid, dim3 block, size_t shared_bytes = 0,
                                cudaStream_t stream = 0) {
  launcher<P...> l;
  l.kernel = kernel;
  l.d.kernel = (const void *)kernel;
  l.d.name = name;
  l.d.file = file;
  l.d.line = line;
  l.d.grid = grid;
  l.d.block = block;
  l.d.shared_bytes = shared_bytes;
  l.d.stream = stream;
  l.d.n_ptr_args = 0;
  return l;
}

/* `__shared__ T name[N];` becomes
 *   static mt_emu::shared_site s; auto &name = mt_emu::shared_var<T[N]>(s, __FILE__, __LINE__);
 * and `extern __shared__ T name[];` becomes
 *   T *name = mt_emu::shared_dynamic<T>(); */
template <typename T> inline T &shared_var(shared_site &site, const char *file, int line) {
  return *static_cast<T *>(static_shared(&site, sizeof(T), alignof(T), file, line));
}
template <typename T> inline T *shared_dynamic() { return static_cast<T *>(dynamic_shared()); }

} // namespace mt_emu

#endif
