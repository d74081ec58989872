// Warp-level pieces shared by the rotated codec kernels (hint8_kernels.cu, taco_kernels.cu):
// one warp owns a rotation block (codecs/rotation_blocks.h) held in registers, the butterflies
// of the Hadamard transform between a lane's slots (butterfly_in_registers) and between lanes
// (shuffles). hint8 uses the contiguous layout below; taco its own quad layout
// (taco_kernels.cu), with these butterflies and loads; both number a run's rotation blocks
// with block_at. Every operation is the one the host loop does, in the same order, so the
// results are bit-identical with the CPU backend.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ccompress/error.h"
#include "codecs/float_convert.h"
#include "codecs/hadamard.h"
#include "codecs/rotation_blocks.h"
#include "kernels/exact_div.cuh"
#include "kernels/kernel_util.cuh"

namespace ccompress::cuda::rot {

constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kThreads = 128;  // four warps per CUDA block, one rotation block each
constexpr int kWarps = kThreads / 32;

/// The butterfly stages between this lane's slots k and k | m for m = from, 2 from, ...
/// below @p limit (warp-uniform), in that order: the lower slot becomes a + b, the upper
/// a + (-b), as on the host (codecs::fwht).
template <int kSlots>
__device__ __forceinline__ void butterfly_in_registers(float (&v)[kSlots], int from, int limit) {
#pragma unroll
  for (int m = 1; m < kSlots; m <<= 1) {
    if (m >= from && m < limit) {
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        if (!(k & m)) {
          const float a = v[k], b = v[k | m];
          v[k] = __fadd_rn(a, b);
          v[k | m] = __fadd_rn(a, -b);
        }
      }
    }
  }
}

// ---- the contiguous layout (hint8_kernels.cu) ----
// Lane l holds the run of r = runs_of(len) consecutive elements l * r .. l * r + r - 1 of its
// block in slots 0..r-1 (a block shorter than 32: lanes 0..len-1, one element each), so a
// lane reads and writes its elements with vector accesses: 4 elements (one 16-byte load of
// fp32, one 8-byte load of bf16 / fp16, one 4-byte word of one-byte codes) per access once
// r >= 4 (rotation blocks of 128 and more). A block starts at a multiple of its length, so
// with a 16-byte aligned base every such access is aligned. Every arithmetic step is the one
// of the host loop, only the places of the elements differ.

/// Elements per lane of a block of len elements in the contiguous layout.
__device__ __forceinline__ int runs_of(int len) { return len < 32 ? 1 : len >> 5; }

/// Element index of slot k (< r) of this lane in the contiguous layout.
__device__ __forceinline__ int run_elem(int k, int r) { return (threadIdx.x & 31) * r + k; }

/// Where a lane's run lies in the contiguous layout: its r consecutive elements from element
/// j0 of its block, the block held by `lanes` lanes (an aligned sub-group of the warp when
/// lanes < 32); mine: the lane holds elements.
struct Runs {
  int r, j0, lanes;
  bool mine;
};

/// One block a warp (above).
__device__ __forceinline__ Runs whole_warp_runs(int len) {
  const int r = runs_of(len);
  const int j0 = run_elem(0, r);
  return Runs{r, j0, len < 32 ? len : 32, len >= 32 || j0 < len};
}

/// Blocks of 2^lg_len elements (16 <= len <= 256), kPackedRun elements a lane: a warp holds
/// 256 / len of them at once, sub-group packed_block(lg_len) (len / 8 lanes) the pass's
/// block of that index, so that a lane's one-byte codes are one 8-byte access.
constexpr int kPackedRun = 8;
__device__ __forceinline__ Runs packed_runs(int lg_len) {
  const int lanes = 1 << (lg_len - 3);
  const int lane = threadIdx.x & 31;
  return Runs{kPackedRun, (lane & (lanes - 1)) * kPackedRun, lanes, true};
}
__device__ __forceinline__ int packed_block(int lg_len) {
  return static_cast<int>(threadIdx.x & 31) >> (lg_len - 3);
}

/// v <- WHT(v) / sqrt(len) in the contiguous layout, the lane's run @p u: partners closer
/// than r sit in this lane's other slots, farther ones (distance d) in lane ^ (d / r) of the
/// block's sub-group; the stages in the host's order.
template <int kSlots>
__device__ __forceinline__ void wht_runs(float (&v)[kSlots], int len, const Runs& u) {
  const int lane = threadIdx.x & 31;
  butterfly_in_registers(v, 1, u.r);
  // Five stages, each shuffle outside any branch (a shuffle under a condition the compiler
  // cannot prove uniform becomes a call, across which the block's registers spill); a block
  // held by fewer than 32 lanes keeps its values through the stages beyond its lanes (the
  // shuffles at those distances cross into another sub-group, and their results are unused).
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const bool upper = (lane & d) != 0, on = d < u.lanes;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const float o = __shfl_xor_sync(kFullMask, v[k], d);
      const float w = upper ? __fadd_rn(o, -v[k]) : __fadd_rn(v[k], o);
      v[k] = on && k < u.r ? w : v[k];
    }
  }
  const float norm = codecs::wht_norm(len);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) v[k] = __fmul_rn(v[k], norm);
}

/// wht_runs of a block held by the whole warp.
template <int kSlots>
__device__ __forceinline__ void wht_runs(float (&v)[kSlots], int len) {
  wht_runs(v, len, whole_warp_runs(len));
}

/// Elements i..i+4 of p (dtype t) as fp32, one vector load (see load4_as_float).
__device__ __forceinline__ void load4_any(const void* p, DType t, int64_t i, float* v) {
  if (t == DType::Float32) {
    load4_as_float<DType::Float32>(p, i, v);
  } else if (t == DType::BFloat16) {
    load4_as_float<DType::BFloat16>(p, i, v);
  } else {
    load4_as_float<DType::Float16>(p, i, v);
  }
}

/// v[k] <- float(src[off + j0 + k]) / divisor for the lane's run @p u, 0 where the lane holds
/// none (the CPU backend's load_block; the division exact_div's, no call). With @p add (the
/// fused ring hop, v holding a decoded block) the value is v[k] + float(src), in that operand
/// order, before the division. @p vec: src is 16-byte aligned.
template <int kSlots>
__device__ __forceinline__ void load_runs(const void* src, DType t, int64_t off,
                                          const Divisor& divisor, bool vec, float (&v)[kSlots],
                                          const Runs& u, bool add = false) {
  const int r = u.r;
  const int j0 = u.j0;
  const bool mine = u.mine;
  float x[kSlots];
  bool wide = false;
  if constexpr (kSlots >= 4) {
    wide = vec && r >= 4;
    if (wide) {
#pragma unroll
      for (int c = 0; c < kSlots; c += 4)
        if (c < r) load4_any(src, t, off + j0 + c, x + c);
    }
  }
  if (!wide) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k)
      x[k] = k < r && mine ? codecs::load_as_float(src, t, off + j0 + k) : 0.0f;
  }
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    float y = k < r && mine ? x[k] : 0.0f;
    if (add && k < r && mine) y = codecs::add_rn(v[k], y);
    v[k] = divisor.b != 1.0f ? exact_div(y, divisor) : y;
  }
}

/// load_runs of a block of len elements held by the whole warp.
template <int kSlots>
__device__ __forceinline__ void load_runs(const void* src, DType t, int64_t off, int len,
                                          const Divisor& divisor, bool vec, float (&v)[kSlots],
                                          bool add = false) {
  load_runs(src, t, off, divisor, vec, v, whole_warp_runs(len), add);
}

/// Elements off + j, j < len, of the decode's destination <- v (kernel_util.cuh), the
/// lane's run @p u. @p vec: the destination is 16-byte aligned.
template <bool kCast, int kSlots>
__device__ __forceinline__ void store_runs(DecodeOut o, int64_t off, bool vec,
                                           const float (&v)[kSlots], const Runs& u) {
  if (!u.mine) return;
  if constexpr (kSlots >= 4) {
    if (vec && u.r >= 4) {
#pragma unroll
      for (int c = 0; c < kSlots; c += 4)
        if (c < u.r) store_decoded4<kCast>(o, off + u.j0 + c, v + c);
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < kSlots; ++k)
    if (k < u.r) store_decoded<kCast>(o, off + u.j0 + k, v[k]);
}

/// store_runs of a block held by the whole warp.
template <bool kCast, int kSlots>
__device__ __forceinline__ void store_runs(DecodeOut o, int64_t off, int len, bool vec,
                                           const float (&v)[kSlots]) {
  store_runs<kCast>(o, off, vec, v, whole_warp_runs(len));
}

/// Warp index over the whole grid, and the grid's warp count.
__device__ __forceinline__ int64_t global_warp() {
  return int64_t(blockIdx.x) * kWarps + (threadIdx.x >> 5);
}
__device__ __forceinline__ int64_t grid_warps() { return int64_t(gridDim.x) * kWarps; }

// ---- a run's rotation blocks, in the order the warp passes take them ----
// codecs/rotation_blocks.h's rot_block and rot_block_count for a rotation h = 2^lg_h, its
// divisions by h done as shifts and masks (a 64-bit division is a call on the device, and the
// block's registers, live across a call, spill).

/// Rotation block b (< block_count(n, h, lg_h)) of a run of n elements: the whole blocks of h
/// first, then the tail's descending powers of two (codecs::rot_block). A warp pass takes
/// block b of its index (hint8; taco for its items of 128 elements and more).
__device__ __forceinline__ codecs::RotBlock block_at(int64_t n, int32_t h, int32_t lg_h,
                                                     int64_t b) {
  const int64_t full = n >> lg_h;
  if (b < full) return codecs::RotBlock{b << lg_h, h};
  const int32_t tail = static_cast<int32_t>(n & (h - 1));
  int64_t off = full << lg_h;
  int64_t t = b - full;
  for (int32_t piece = h >> 1; piece > 0; piece >>= 1) {
    if (!(tail & piece)) continue;
    if (t == 0) return codecs::RotBlock{off, piece};
    off += piece;
    --t;
  }
  return codecs::RotBlock{off, 0};  // b out of range
}

/// The rotation blocks of a run of n elements, h = 2^lg_h (codecs::rot_block_count).
__device__ __forceinline__ int64_t block_count(int64_t n, int32_t h, int32_t lg_h) {
  return (n >> lg_h) + codecs::popcount64(uint64_t(n) & uint64_t(h - 1));
}



/// Runs fn(std::integral_constant<int, kSlots>) with the register slots a block of h needs.
template <class Fn>
void with_slots(int32_t h, Fn fn) {
  if (h <= 32) {
    fn(std::integral_constant<int, 1>{});
  } else if (h <= 128) {
    fn(std::integral_constant<int, 4>{});
  } else if (h <= 256) {
    fn(std::integral_constant<int, 8>{});
  } else if (h <= 512) {
    fn(std::integral_constant<int, 16>{});
  } else {
    fn(std::integral_constant<int, 32>{});
  }
}

}  // namespace ccompress::cuda::rot
