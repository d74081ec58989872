#include "codecs/fp8/fp8_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>

#include "ccompress/error.h"
#include "codecs/float_convert.h"
#include "codecs/fp8/fp8.h"
#include "codecs/fp8/group_codec.h"
#include "codecs/registry.h"
#include "codecs/stochastic.h"
#include "kernels/kernel_util.cuh"

namespace ccompress::cuda {
namespace {

using codecs::Fp8E4M3;
using codecs::Fp8E5M2;

// Where an encode reads its values: an input of some dtype, or (the fused ring hop) an FP8
// wire buffer decoded and added to an input, decode(wire) + x in that order, as on the CPU.
struct Fp8Source {
  const void* src = nullptr;  // input (kHop: the addend x)
  DType src_dtype = DType::Float32;
  const uint8_t* wire = nullptr;   // kHop only
  const float* wire_scales = nullptr;
};

// ---- groups of a power of two (every default): a warp per group, or part of one ----
//
// Each lane owns runs of kRun = 8 consecutive elements: one 16-byte load of bf16 / fp16
// (two of fp32), one 8-byte store of their codes. A group of G elements is G / 8 consecutive
// lanes (G <= 256; a warp holds 256 / G groups) or a whole warp over G / 256 steps
// (G > 256), so its amax is a max over registers and lane shuffles: no shared
// memory, no block barrier. A warp's tile is max(256, G) consecutive elements; warps stride
// over tiles.
constexpr int kThreads = 256;
constexpr int kMinBlocks = 4;
constexpr int kRun = 8;
constexpr int kWarpRun = 32 * kRun;  // elements of a warp per step

// Codes of elements i..i+8 (len of them valid, zeros past len: the payload's zero pad) as
// two 32-bit words: one 8-byte store when @p vec (dst 8-byte aligned) and the run is whole,
// else a 4-byte store per word holding a valid element (dst is 4-byte aligned, i a multiple
// of 8).
__device__ __forceinline__ void store_codes8(uint8_t* dst, int64_t i, int len, bool vec,
                                             uint32_t lo, uint32_t hi) {
  if (vec && len == kRun) {
    *reinterpret_cast<uint2*>(dst + i) = make_uint2(lo, hi);
  } else {
    if (len > 0) *reinterpret_cast<uint32_t*>(dst + i) = lo;
    if (len > 4) *reinterpret_cast<uint32_t*>(dst + i + 4) = hi;
  }
}

// The 8 codes of wire bytes i..i+8 (len valid, zeros past len), the incoming wire of a hop.
__device__ __forceinline__ void load_codes8(const uint8_t* wire, int64_t i, int len, bool vec,
                                            uint8_t (&q)[kRun]) {
  if (vec && len == kRun) {
    const uint2 r = *reinterpret_cast<const uint2*>(wire + i);
#pragma unroll
    for (int k = 0; k < kRun; ++k) q[k] = static_cast<uint8_t>((k < 4 ? r.x : r.y) >> (8 * (k & 3)));
  } else {
#pragma unroll
    for (int k = 0; k < kRun; ++k) q[k] = k < len ? wire[i + k] : 0;
  }
}

// The run of element i (len of its 8 valid, zeros past len) as the encoder's values:
// (decode(wire) + x) / divisor for the hop, x / divisor otherwise, as on the CPU; *amax
// takes their largest finite |v|. ws: the incoming wire's scale of the run's group (kHop).
// A run across a group boundary (groups of no power of two): its first `split` elements are
// of the first group, the rest of the next, whose wire scale is ws_next and whose largest
// |v| *amax_next takes.
template <class F, bool kHop, DType S>
__device__ __forceinline__ void load_encode_run(const Fp8Source& in, int64_t i, int len,
                                                float divisor, bool vec, float ws,
                                                float (&v)[kRun], int32_t* amax,
                                                int split = kRun, float ws_next = 0.0f,
                                                int32_t* amax_next = nullptr) {
  load_run8_as_float<S>(in.src, i, len, vec, v);
  if constexpr (kHop) {
    uint8_t q[kRun];
    load_codes8(in.wire, i, len, vec, q);
#pragma unroll
    for (int k = 0; k < kRun; ++k)
      if (k < len)
        v[k] = codecs::add_rn(codecs::group_dequantize<F>(q[k], k < split ? ws : ws_next), v[k]);
  }
#pragma unroll
  for (int k = 0; k < kRun; ++k) {
    if (divisor != 1.0f && k < len) v[k] = codecs::div_rn(v[k], divisor);
    const int32_t m = codecs::finite_abs_bits(v[k]);  // 0 past len
    if (k < split) {
      *amax = max(*amax, m);
    } else {
      *amax_next = max(*amax_next, m);
    }
  }
}

// Codes of the run of element i at scale s (its first `split` elements; s_next the rest),
// stored as two 32-bit words (store_codes8).
template <class F>
__device__ __forceinline__ void quantize_run(const float (&v)[kRun], int64_t i, int len,
                                             float s, bool vec, bool stochastic,
                                             const EncodeContext& ctx, uint8_t* dst,
                                             int split = kRun, float s_next = 0.0f) {
  if (len <= 0) return;
  uint32_t word[2] = {0, 0};
#pragma unroll
  for (int k = 0; k < kRun; ++k) {
    if (k >= len) continue;
    const float sk = k < split ? s : s_next;
    uint32_t q;
    if (stochastic) {  // noise of the run's element, as on the CPU
      const float u = codecs::sr_uniform(ctx.seed, ctx.step, ctx.rank, ctx.index + i + k);
      q = codecs::group_quantize_sr<F>(v[k], sk, u);
    } else {
      q = static_cast<uint32_t>(codecs::group_quantize_code<F>(v[k], sk));
    }
    word[k >> 2] |= q << (8 * (k & 3));
  }
  store_codes8(dst, i, len, vec, word[0], word[1]);
}

__device__ __forceinline__ int run_len(int64_t n, int64_t i) {
  return static_cast<int>(max(int64_t(0), min(int64_t(kRun), n - i)));
}

// A group of G <= 256 is one step: its values stay in registers between the amax and the
// codes. A larger group takes G / 256 steps: the first step's values stay in registers, the
// later ones are read again for their codes (from L1: the warp read them just before).
// dst may be the hop's own wire buffer (in place): a lane reads its runs' codes and its
// group's scale before it writes those codes, and the group's scale is written after a
// __syncwarp that follows every lane's last read. @p vec: src (16), dst and wire (8) aligned
// for vector accesses.
// At least kMinBlocks blocks per SM (64 registers a thread): with more, the registers live
// across the IEEE division's slow-path call spill to the stack.
template <class F, bool kHop, DType S>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    fp8_encode_kernel(Fp8Source in, int64_t n, int group, float divisor, uint8_t* dst,
                      float* scales, bool stochastic, EncodeContext ctx, bool vec) {
  const int lane = threadIdx.x & 31;
  const int lanes = group < kWarpRun ? group / kRun : 32;  // lanes per group
  const int steps = group > kWarpRun ? group / kWarpRun : 1;
  const int64_t tile = int64_t(kWarpRun) * steps;
  const int64_t tiles = (n + tile - 1) / tile;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t w = int64_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5); w < tiles;
       w += warps) {
    const int64_t base = w * tile + lane * kRun;
    const int64_t g = base / group;  // this lane's group (the same in every step)
    const int len0 = run_len(n, base);
    const float ws = kHop && len0 > 0 ? in.wire_scales[g] : 0.0f;
    float v[kRun];
    int32_t amax = 0;
    load_encode_run<F, kHop, S>(in, base, len0, divisor, vec, ws, v, &amax);
    for (int t = 1; t < steps; ++t) {
      const int64_t i = base + int64_t(t) * kWarpRun;
      float x[kRun];
      load_encode_run<F, kHop, S>(in, i, run_len(n, i), divisor, vec, ws, x, &amax);
    }
    for (int o = 1; o < lanes; o <<= 1) amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const float s = codecs::group_scale<F>(amax);
    for (int t = steps - 1; t > 0; --t) {  // later steps first: their codes are read again
      const int64_t i = base + int64_t(t) * kWarpRun;
      const int len = run_len(n, i);
      float x[kRun];
      int32_t unused = 0;
      load_encode_run<F, kHop, S>(in, i, len, divisor, vec, ws, x, &unused);
      quantize_run<F>(x, i, len, s, vec, stochastic, ctx, dst);
    }
    quantize_run<F>(v, base, len0, s, vec, stochastic, ctx, dst);
    if constexpr (kHop) __syncwarp();  // in place: every lane has read the group's scale
    if (lane % lanes == 0 && len0 > 0) scales[g] = s;
  }
}

// ---- any other group (16..1024, no power of two): a warp per item of whole groups ----
//
// An item is K = 8 / gcd(G, 8) consecutive groups: K G elements, a multiple of 8, so every
// item starts at a multiple of 8 and the lanes read and write it in the runs of 8 above
// (16-byte loads, 8-byte code stores), lane l taking runs l, l + 32, ... of its item. A run
// lies in at most two groups (G > 8): a lane keeps the largest |v| of each of the item's
// groups (K <= 8, in registers), the warp reduces them once its runs are read (one
// __reduce_max_sync a group), then reads its runs again (from L1: it read them just before)
// for their codes, the last step's values still in registers. dst may be the hop's wire (in
// place): a lane reads a run's codes before it writes them, and the item's scales are
// written after a __syncwarp that follows every lane's last read.
constexpr int kMaxItemGroups = 8;

// The item's group of element r of the item, and the elements of the run from r that lie in
// it (>= 1; >= kRun: the whole run).
struct RunGroups {
  int first, split;
};

__device__ __forceinline__ RunGroups run_groups(int r, int group) {
  const int first = r / group;
  return RunGroups{first, (first + 1) * group - r};
}

// Element k (< kMaxItemGroups) of the per-group values x[] at the runtime index g: selects,
// no local memory.
template <class T>
__device__ __forceinline__ T select_group(const T (&x)[kMaxItemGroups], int g) {
  T out = x[0];
#pragma unroll
  for (int k = 1; k < kMaxItemGroups; ++k)
    if (g == k) out = x[k];
  return out;
}

template <class F, bool kHop, DType S>
__global__ void __launch_bounds__(kThreads, kMinBlocks)
    fp8_encode_any_group_kernel(Fp8Source in, int64_t n, int group, int item_groups,
                                float divisor, uint8_t* dst, float* scales, bool stochastic,
                                EncodeContext ctx, bool vec) {
  const int lane = threadIdx.x & 31;
  const int item_len = item_groups * group;  // <= 8 * 1024
  const int steps = (item_len + kWarpRun - 1) / kWarpRun;
  const int64_t items = (n + item_len - 1) / item_len;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t w = int64_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5); w < items;
       w += warps) {
    const int64_t off = w * item_len;
    const int64_t end = min(n, off + item_len);
    const int64_t g0 = w * item_groups;  // the item's first group
    int32_t amax[kMaxItemGroups];
    float ws[kMaxItemGroups];  // kHop: the incoming wire's scales of the item's groups
#pragma unroll
    for (int k = 0; k < kMaxItemGroups; ++k) {
      amax[k] = 0;
      ws[k] = kHop && k < item_groups && off + int64_t(k) * group < end ? in.wire_scales[g0 + k]
                                                                       : 0.0f;
    }
    float v[kRun];  // the last step's values
    for (int t = 0; t < steps; ++t) {
      const int r = t * kWarpRun + lane * kRun;  // the run's first element in the item
      const int len = run_len(end, off + r);
      const RunGroups rg = run_groups(r, group);
      int32_t ma = 0, mb = 0;
      load_encode_run<F, kHop, S>(in, off + r, len, divisor, vec, select_group(ws, rg.first), v,
                                  &ma, rg.split, select_group(ws, rg.first + 1), &mb);
#pragma unroll
      for (int k = 0; k < kMaxItemGroups; ++k) {
        if (k == rg.first) amax[k] = max(amax[k], ma);
        if (k == rg.first + 1) amax[k] = max(amax[k], mb);
      }
    }
    float s[kMaxItemGroups];
#pragma unroll
    for (int k = 0; k < kMaxItemGroups; ++k) {
      s[k] = 0.0f;
      if (k < item_groups) s[k] = codecs::group_scale<F>(__reduce_max_sync(0xFFFFFFFFu, amax[k]));
    }
    for (int t = 0; t < steps; ++t) {
      const int r = t * kWarpRun + lane * kRun;
      const int len = run_len(end, off + r);
      const RunGroups rg = run_groups(r, group);
      float x[kRun];
      if (t + 1 < steps) {  // read again; the last step's values are in v
        int32_t unused = 0;
        load_encode_run<F, kHop, S>(in, off + r, len, divisor, vec, select_group(ws, rg.first),
                                    x, &unused, rg.split, select_group(ws, rg.first + 1),
                                    &unused);
      } else {
#pragma unroll
        for (int k = 0; k < kRun; ++k) x[k] = v[k];
      }
      quantize_run<F>(x, off + r, len, select_group(s, rg.first), vec, stochastic, ctx, dst,
                      rg.split, select_group(s, rg.first + 1));
    }
    if constexpr (kHop) __syncwarp();  // in place: every lane has read the item's scales
    if (lane < item_groups && off + int64_t(lane) * group < end)
      scales[g0 + lane] = select_group(s, lane);
  }
}

constexpr int kDecodeVec = 16;  // elements per thread and step: one 16-byte load of codes

// Each thread decodes 16 consecutive elements: one 16-byte load of their codes, one scale
// when the group is a multiple of 16 (@p one_scale), and 16-byte stores (two to four) where
// the pointers allow (`vec`).
template <class F, bool kCast>
__global__ void __launch_bounds__(kThreads)
    fp8_decode_kernel(const uint8_t* __restrict__ src, int64_t n, int group,
                      const float* __restrict__ scales, DecodeOut o, bool vec, bool one_scale) {
  const int64_t stride = int64_t(gridDim.x) * kThreads * kDecodeVec;
  for (int64_t i = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * kDecodeVec; i < n;
       i += stride) {
    const int len = static_cast<int>(min(int64_t(kDecodeVec), n - i));
    const bool full = vec && len == kDecodeVec;
    uint8_t q[kDecodeVec];
    if (full) {
      const uint4 r = *reinterpret_cast<const uint4*>(src + i);
      const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int k = 0; k < kDecodeVec; ++k) q[k] = static_cast<uint8_t>(w[k >> 2] >> (8 * (k & 3)));
    } else {
#pragma unroll
      for (int k = 0; k < kDecodeVec; ++k) q[k] = k < len ? src[i + k] : 0;
    }
    const float s0 = scales[i / group];
    float v[2][kRun];
#pragma unroll
    for (int k = 0; k < kDecodeVec; ++k) {
      const float s = one_scale ? s0 : (k < len ? scales[(i + k) / group] : 0.0f);
      v[k / kRun][k % kRun] = codecs::group_dequantize<F>(q[k], s);
    }
    if (full) {
      store_decoded8<kCast>(o, i, v[0]);
      store_decoded8<kCast>(o, i + kRun, v[1]);
    } else {
#pragma unroll
      for (int k = 0; k < kDecodeVec; ++k)
        if (k < len) store_decoded<kCast>(o, i + k, v[k / kRun][k % kRun]);
    }
  }
}

void check_fp8(const Codec& codec, int64_t n) {
  CC_CHECK(codec.group >= 16 && codec.group <= 1024,
           "codec group " << codec.group << " is outside 16..1024");
  CC_CHECK(n >= 0, "element count " << n << " is negative");
}


bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }


}  // namespace

void launch_fp8_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                       const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                       cudaStream_t stream) {
  check_fp8(codec, n);
  if (n == 0) return;
  CC_CHECK(reinterpret_cast<uintptr_t>(dst) % 4 == 0 && reinterpret_cast<uintptr_t>(wire_in) % 4 == 0,
           "wire buffers must be 4-byte aligned");
  const uint8_t* in_wire = static_cast<const uint8_t*>(wire_in);
  const float* in_scales =
      in_wire == nullptr ? nullptr
                         : reinterpret_cast<const float*>(in_wire + codecs::fp8_scales_offset(n));
  const Fp8Source in{src, src_dtype, in_wire, in_scales};
  uint8_t* wire = static_cast<uint8_t*>(dst);
  float* scales = reinterpret_cast<float*>(wire + codecs::fp8_scales_offset(n));
  const int group = codec.group;
  with_flag(in_wire != nullptr, [&](auto hop) {
    constexpr bool kHop = decltype(hop)::value;
    auto go = [&](auto fmt) {
      using F = decltype(fmt);
      if ((group & (group - 1)) == 0) {  // a power of two: a warp per group
        const bool vec = aligned(src, 16) && aligned(dst, 8) && aligned(wire_in, 8);
        const int64_t tile = std::max<int64_t>(kWarpRun, group);
        const int64_t work = ceil_div(ceil_div(n, tile), kThreads / 32);
        with_dtype(src_dtype, [&](auto t) {
          auto kernel = fp8_encode_kernel<F, kHop, decltype(t)::value>;
          kernel<<<occupancy_grid(kernel, kThreads, work), kThreads, 0, stream>>>(
              in, n, group, divisor, wire, scales, codec.stochastic, ctx, vec);
        });
      } else {  // a warp per item of 8 / gcd(G, 8) groups
        const bool vec = aligned(src, 16) && aligned(dst, 8) && aligned(wire_in, 8);
        const int item_groups = 8 / std::gcd(group, 8);
        const int64_t work = ceil_div(ceil_div(n, int64_t(item_groups) * group), kThreads / 32);
        with_dtype(src_dtype, [&](auto t) {
          auto kernel = fp8_encode_any_group_kernel<F, kHop, decltype(t)::value>;
          kernel<<<occupancy_grid(kernel, kThreads, work), kThreads, 0, stream>>>(
              in, n, group, item_groups, divisor, wire, scales, codec.stochastic, ctx, vec);
        });
      }
    };
    if (codec.fp8_format == 0) {
      go(Fp8E4M3{});
    } else {
      go(Fp8E5M2{});
    }
  });
  CC_CUDA_CHECK_LAUNCH(in_wire != nullptr ? "fp8 decode_reduce_encode" : "fp8 encode");
}

void launch_fp8_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                       cudaStream_t stream) {
  check_fp8(codec, n);
  if (n == 0) return;
  CC_CHECK(reinterpret_cast<uintptr_t>(src) % 4 == 0, "wire buffer must be 4-byte aligned");
  const uint8_t* wire = static_cast<const uint8_t*>(src);
  const float* scales = reinterpret_cast<const float*>(wire + codecs::fp8_scales_offset(n));
  const bool vec = aligned(src, 16) && decode_out_aligned16(o);
  const bool one_scale = codec.group % kDecodeVec == 0;
  const int64_t work = ceil_div(ceil_div(n, kDecodeVec), kThreads);
  auto go = [&](auto fmt) {
    using F = decltype(fmt);
    with_flag(o.out != nullptr, [&](auto cast) {
      auto kernel = fp8_decode_kernel<F, decltype(cast)::value>;
      kernel<<<occupancy_grid(kernel, kThreads, work), kThreads, 0, stream>>>(
          wire, n, codec.group, scales, o, vec, one_scale);
    });
  };
  if (codec.fp8_format == 0) {
    go(Fp8E4M3{});
  } else {
    go(Fp8E5M2{});
  }
  CC_CUDA_CHECK_LAUNCH(o.out != nullptr ? "fp8 decode" : "fp8 decode_accumulate");
}

namespace {

constexpr DeviceOps kDeviceOps = {launch_fp8_encode, launch_fp8_decode};
[[maybe_unused]] const bool kAttached = attach_device_ops("fp8", kDeviceOps);

}  // namespace

}  // namespace ccompress::cuda
