// Pieces shared by the codec kernels of every family (codecs/fp8/fp8_kernels.cu, warp_rotation.cuh,
// fourbit_kernels.cuh): storing a decoded value (kernels/decode_out.h), a runtime flag as
// a template argument, and the grid of a launch (occupancy_grid). Decode to a dtype is one
// pass, bit-identical with decoding into fp32 and casting that.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "ccompress/common.h"
#include "ccompress/error.h"
#include "codecs/float_convert.h"
#include "kernels/cuda_backend.h"
#include "kernels/decode_out.h"

/// After a kernel launch: throws CudaError "<what> failed: <CUDA's message>" (in debug mode
/// naming the launching line) when the launch failed.
#define CC_CUDA_CHECK_LAUNCH(what) CC_CUDA_CHECK(cudaGetLastError(), what)

namespace ccompress::cuda {

/// Element i of the destination <- v (kCast: the cast of v; else assign or add).
template <bool kCast>
__device__ __forceinline__ void store_decoded(DecodeOut o, int64_t i, float v) {
  if constexpr (kCast) {
    codecs::store_from_float(o.out, o.out_dtype, i, v);
  } else {
    o.acc[i] = o.assign ? v : codecs::add_rn(o.acc[i], v);
  }
}

/// v[0..8) <- elements i..i+8 of p as fp32: one 16-byte load (bf16 / fp16) or two (fp32).
/// p + i must be 16-byte aligned.
template <DType T>
__device__ __forceinline__ void load8_as_float(const void* p, int64_t i, float (&v)[8]) {
  if constexpr (T == DType::Float32) {
    const float4* q = reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    const float4 a = q[0], b = q[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    const uint4 r = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p) + i);
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const uint16_t h = static_cast<uint16_t>(w[k >> 1] >> (16 * (k & 1)));
      v[k] = T == DType::BFloat16 ? codecs::bf16_to_float(h) : codecs::f16_to_float(h);
    }
  }
}

/// v[0..8) <- the run of len <= 8 elements of p from i as fp32, zeros past len: the 16-byte
/// form when @p vec (p 16-byte aligned, i a multiple of 8) and the run is whole.
template <DType T>
__device__ __forceinline__ void load_run8_as_float(const void* p, int64_t i, int len, bool vec,
                                                   float (&v)[8]) {
  if (vec && len == 8) {
    load8_as_float<T>(p, i, v);
  } else {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = k < len ? codecs::load_as_float(p, T, i + k) : 0.0f;
  }
}

/// Elements i..i+8 of the decode's destination <- v in 16-byte accesses: the destination's
/// pointer 16-byte aligned and i a multiple of 8 (so every access is aligned).
template <bool kCast>
__device__ __forceinline__ void store_decoded8(DecodeOut o, int64_t i, const float (&v)[8]) {
  if (kCast && o.out_dtype != DType::Float32) {
    uint32_t w[4];
    const bool bf = o.out_dtype == DType::BFloat16;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint16_t lo = bf ? codecs::bf16_from_float(v[2 * k]) : codecs::f16_from_float(v[2 * k]);
      const uint16_t hi =
          bf ? codecs::bf16_from_float(v[2 * k + 1]) : codecs::f16_from_float(v[2 * k + 1]);
      w[k] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(o.out) + i) = make_uint4(w[0], w[1], w[2], w[3]);
    return;
  }
  float4* a = reinterpret_cast<float4*>((kCast ? static_cast<float*>(o.out) : o.acc) + i);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float4 t = make_float4(v[4 * h], v[4 * h + 1], v[4 * h + 2], v[4 * h + 3]);
    if (!kCast && !o.assign) {
      const float4 b = a[h];
      t = make_float4(codecs::add_rn(b.x, t.x), codecs::add_rn(b.y, t.y), codecs::add_rn(b.z, t.z),
                      codecs::add_rn(b.w, t.w));
    }
    a[h] = t;
  }
}

/// v[0..4) <- elements i..i+4 of p as fp32: one 16-byte (fp32) or 8-byte (bf16 / fp16)
/// load; p + i aligned to that.
template <DType T>
__device__ __forceinline__ void load4_as_float(const void* p, int64_t i, float* v) {
  if constexpr (T == DType::Float32) {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(p) + i);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
  } else {
    const uint2 r = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(p) + i);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint16_t h = static_cast<uint16_t>((k < 2 ? r.x : r.y) >> (16 * (k & 1)));
      v[k] = T == DType::BFloat16 ? codecs::bf16_to_float(h) : codecs::f16_to_float(h);
    }
  }
}

/// Elements i..i+4 of the decode's destination <- v: one 16-byte (fp32) or 8-byte (bf16 /
/// fp16) access, the destination aligned to that.
template <bool kCast>
__device__ __forceinline__ void store_decoded4(DecodeOut o, int64_t i, const float* v) {
  if (kCast && o.out_dtype != DType::Float32) {
    const bool bf = o.out_dtype == DType::BFloat16;
    uint32_t w[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint16_t lo = bf ? codecs::bf16_from_float(v[2 * k]) : codecs::f16_from_float(v[2 * k]);
      const uint16_t hi =
          bf ? codecs::bf16_from_float(v[2 * k + 1]) : codecs::f16_from_float(v[2 * k + 1]);
      w[k] = uint32_t(lo) | (uint32_t(hi) << 16);
    }
    *reinterpret_cast<uint2*>(static_cast<uint16_t*>(o.out) + i) = make_uint2(w[0], w[1]);
    return;
  }
  float4* a = reinterpret_cast<float4*>((kCast ? static_cast<float*>(o.out) : o.acc) + i);
  float4 t = make_float4(v[0], v[1], v[2], v[3]);
  if (!kCast && !o.assign) {
    const float4 b = *a;
    t = make_float4(codecs::add_rn(b.x, t.x), codecs::add_rn(b.y, t.y), codecs::add_rn(b.z, t.z),
                    codecs::add_rn(b.w, t.w));
  }
  *a = t;
}

/// The destination's pointer (accumulators or cast output) is 16-byte aligned.
inline bool decode_out_aligned16(const DecodeOut& o) {
  const void* p = o.out != nullptr ? o.out : static_cast<const void*>(o.acc);
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

/// The current device's SM count, read once per device (cudaDevAttrMultiProcessorCount).
inline int device_sm_count() {
  constexpr int kCached = 64;  // devices whose count is kept
  static std::atomic<int> cached[kCached] = {};
  int device = 0;
  CC_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
  int count = device >= 0 && device < kCached ? cached[device].load(std::memory_order_relaxed) : 0;
  if (count > 0) return count;
  CC_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device),
                "reading the device's SM count");
  if (device >= 0 && device < kCached) cached[device].store(count, std::memory_order_relaxed);
  return count;
}

/// The blocks of @p kernel with @p threads threads a block (no dynamic shared memory) that an
/// SM of the current device holds at once: cudaOccupancyMaxActiveBlocksPerMultiprocessor,
/// asked once per kernel, device and block size and then kept (thread-safe).
template <class K>
int blocks_per_sm(K kernel, int threads) {
  int device = 0;
  CC_CUDA_CHECK(cudaGetDevice(&device), "cudaGetDevice");
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, threads);
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int>, int> cached;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto it = cached.find(key);
    if (it != cached.end()) return it->second;
  }
  int per_sm = 0;
  CC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0),
                "the occupancy query of a kernel launch");
  std::lock_guard<std::mutex> lock(mutex);
  cached.emplace(key, per_sm);
  return per_sm;
}

/// The grid of a launch of @p kernel with @p threads threads a block (no dynamic shared
/// memory) over @p work_blocks blocks of work: min(work_blocks, SMs x the blocks of kernel an
/// SM holds at once), at least 1. The kernel's grid-stride loop covers the rest, so one wave
/// of resident blocks streams the whole input:
///   kernel<<<occupancy_grid(kernel, kThreads, work), kThreads, 0, stream>>>(...);
template <class K>
int occupancy_grid(K kernel, int threads, int64_t work_blocks) {
  const int64_t resident = int64_t(std::max(blocks_per_sm(kernel, threads), 1)) * device_sm_count();
  return static_cast<int>(std::clamp<int64_t>(work_blocks, 1, std::max<int64_t>(resident, 1)));
}

/// Runs fn(std::true_type{}) or fn(std::false_type{}): a runtime flag as a template argument.
template <class Fn>
void with_flag(bool flag, Fn fn) {
  if (flag) {
    fn(std::true_type{});
  } else {
    fn(std::false_type{});
  }
}

/// Runs fn(std::integral_constant<DType, t>{}) for the runtime dtype t.
template <class Fn>
void with_dtype(DType t, Fn fn) {
  switch (t) {
    case DType::Float32: fn(std::integral_constant<DType, DType::Float32>{}); return;
    case DType::BFloat16: fn(std::integral_constant<DType, DType::BFloat16>{}); return;
    case DType::Float16: fn(std::integral_constant<DType, DType::Float16>{}); return;
  }
  CC_CHECK(false, "unsupported dtype " << int(t));
}

}  // namespace ccompress::cuda
