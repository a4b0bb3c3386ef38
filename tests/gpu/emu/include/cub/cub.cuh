/* gpu-emu: the part of cub the CUDA backend uses, for the host execution
 * model (the real cub is device code only nvcc compiles). It keeps cub's
 * contract and checks it:
 *
 * DeviceRadixSort::SortPairs: a stable sort of (key, value) pairs by the
 * key bits [begin_bit, end_bit) (signed keys with their sign bit flipped
 * first, as cub orders them), so that bits outside the range are ignored
 * exactly as by cub's passes. Called with d_temp_storage NULL it only sets
 * temp_storage_bytes; otherwise the temporary storage must be a device
 * allocation of at least that size, every buffer a device range of
 * num_items elements, and the sort runs on `stream` in its order. */
#ifndef MT_EMU_CUB_CUH
#define MT_EMU_CUB_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <type_traits>
#include <vector>

#include "mt_emu.h"

namespace cub {

struct DeviceRadixSort {
  template <typename KeyT, typename ValueT, typename NumItemsT>
  static cudaError_t SortPairs(void *d_temp_storage, size_t &temp_storage_bytes,
                               const KeyT *d_keys_in, KeyT *d_keys_out, const ValueT *d_values_in,
                               ValueT *d_values_out, NumItemsT num_items, int begin_bit = 0,
                               int end_bit = (int)sizeof(KeyT) * 8, cudaStream_t stream = 0) {
    static_assert(std::is_integral<KeyT>::value, "gpu-emu's radix sort takes integer keys");
    const size_t n = (size_t)num_items;
    /* what cub would want: double buffers of keys and values and a histogram */
    const size_t need = n * (sizeof(KeyT) + sizeof(ValueT)) + 4096;
    if (!d_temp_storage) {
      temp_storage_bytes = need;
      return cudaSuccess;
    }
    if (begin_bit < 0 || end_bit > (int)sizeof(KeyT) * 8 || begin_bit > end_bit)
      mt_emu::fatal("cub::DeviceRadixSort::SortPairs: key bits [%d, %d) of a %zu-bit key",
                    begin_bit, end_bit, sizeof(KeyT) * 8);
    if (temp_storage_bytes < need)
      mt_emu::fatal("cub::DeviceRadixSort::SortPairs: %zu bytes of temporary storage for %zu "
                    "items, %zu asked for by the sizing call",
                    temp_storage_bytes, n, need);
    mt_emu::check_device_range(nullptr, 0, "SortPairs temporary storage", d_temp_storage,
                               temp_storage_bytes);
    mt_emu::check_device_range(nullptr, 0, "SortPairs keys in", d_keys_in, n * sizeof(KeyT));
    mt_emu::check_device_range(nullptr, 0, "SortPairs keys out", d_keys_out, n * sizeof(KeyT));
    mt_emu::check_device_range(nullptr, 0, "SortPairs values in", d_values_in, n * sizeof(ValueT));
    mt_emu::check_device_range(nullptr, 0, "SortPairs values out", d_values_out,
                               n * sizeof(ValueT));
    mt_emu::enqueue_host(stream, "cub::DeviceRadixSort::SortPairs", [=]() {
      typedef typename std::make_unsigned<KeyT>::type U;
      const U flip = std::is_signed<KeyT>::value ? (U)((U)1 << (sizeof(KeyT) * 8 - 1)) : (U)0;
      const int bits = end_bit - begin_bit;
      const U mask = bits >= (int)sizeof(U) * 8 ? (U)~(U)0 : (U)(((U)1 << bits) - 1);
      std::vector<size_t> idx(n), tmp(n);
      for (size_t i = 0; i < n; i++) idx[i] = i;
      auto digit = [&](size_t i) {
        U u;
        memcpy(&u, &d_keys_in[i], sizeof u);
        return (U)(((U)(u ^ flip) >> begin_bit) & mask);
      };
      /* least significant digit first, 8 bits a pass, each pass stable */
      for (int b = 0; b < bits; b += 8) {
        size_t count[257] = {0};
        for (size_t i = 0; i < n; i++) count[((digit(idx[i]) >> b) & 0xff) + 1]++;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (size_t i = 0; i < n; i++) tmp[count[(digit(idx[i]) >> b) & 0xff]++] = idx[i];
        idx.swap(tmp);
      }
      std::vector<KeyT> k(n);
      std::vector<ValueT> v(n);
      for (size_t i = 0; i < n; i++) k[i] = d_keys_in[idx[i]], v[i] = d_values_in[idx[i]];
      memcpy(d_keys_out, k.data(), n * sizeof(KeyT));
      memcpy(d_values_out, v.data(), n * sizeof(ValueT));
      /* cub leaves its temporary storage in an undefined state */
      memset(d_temp_storage, 0xff, temp_storage_bytes);
    });
    return cudaSuccess;
  }
};

} // namespace cub

#endif
