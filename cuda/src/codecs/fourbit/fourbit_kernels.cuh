// CUDA kernels of the 4-bit codecs (nvfp4_kernels.cu, hint4_kernels.cu), templated on the
// grid policy Q of codecs/fourbit/fourbit.h. They compute exactly what codecs/fourbit/fourbit_cpu.h computes:
// every value goes through the same fp32 operations, and the rotation evaluates the same
// butterfly network (each butterfly's operands are fixed by the network, whatever order the
// threads run them in), so wire bytes and decoded values are bit-identical to the CPU's.
//
// A run is processed in tiles of kTile elements from the run start: kTile is a multiple of
// every group and rotation size, so no group or rotation block straddles two tiles. Encoding
// needs the run's amax before any group scale, so it takes three launches: amax (atomicMax
// of |y| bits, which order like the values, into the run-scale slot of the wire buffer),
// quantize (reads that amax; every block derives the same s from it), then finalize (turns
// the slot into s and zeroes the pad).
//
// The ring hop runs the same three launches, each loading a tile as decode(wire) + x
// (decode_tile, the decode kernel's own code, then load_tile's add) instead of x, so both
// passes decode the incoming piece. In place (dst = wire) this is safe because:
//  - a tile's codes [base/2, (base + len + 1)/2) and group scales (groups of G | kTile from
//    the run start) are disjoint from every other tile's, a CUDA block reads its tile
//    entirely (decode_tile ends with __syncthreads) before writing any of it, and the amax
//    pass writes no wire byte at all;
//  - the one shared datum, the old run scale every tile needs to decode, stays in the wire
//    untouched until finalize: the hop accumulates the new run's amax in a separate device
//    word (amax_scratch) instead of the run-scale slot, and finalize, which runs after both
//    passes (stream order), is the only writer of the slot and of the pad before it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/error.h"
#include "ccompress/kernel_backend.h"
#include "codecs/float_convert.h"
#include "codecs/fourbit/fourbit.h"
#include "codecs/fp8/group_codec.h"
#include "codecs/registry.h"
#include "codecs/stochastic.h"
#include "kernels/kernel_util.cuh"

namespace ccompress::cuda::fourbit {

constexpr int kTile = 1024;          // >= and a multiple of every G (<= 256) and H (<= 256)
constexpr int kThreads = kTile / 2;  // one output byte (two elements) per thread
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxGrid = 4096;   // grid-stride loops cover any run

struct Params {
  int64_t n;
  int32_t group, rotation, scale_bits;
  bool random_signs, stochastic;
  float divisor;
  EncodeContext ctx;
};

inline Params make_params(int64_t n, const Codec& c, float divisor, const EncodeContext& ctx) {
  return Params{n, c.group, c.rotation, c.scale_bits, c.random_signs, c.stochastic, divisor, ctx};
}

// Forward (v <- WHT(sign * v) / sqrt(p)) or inverse (v <- sign * WHT(v) / sqrt(p)) rotation of
// the tile [base, base + len) of a run, in shared memory; each element's rotation block comes
// from rotation_block_of, so the run's tail blocks work like the CPU's.
__device__ inline void rotate_tile(float* v, const Params& p, int64_t base, int len, bool inverse) {
  const int h = p.rotation;
  auto signs = [&]() {
    if (!p.random_signs) return;
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
      int64_t start;
      codecs::rotation_block_of(base + i, p.n, h, &start);
      v[i] = codecs::mul_rn(v[i], codecs::random_sign(static_cast<uint32_t>(base + i - start)));
    }
    __syncthreads();
  };
  if (!inverse) signs();
  for (int stride = 1; stride < h; stride <<= 1) {
    for (int b = threadIdx.x; b < kTile / 2; b += blockDim.x) {
      int lo = (b / stride) * 2 * stride + b % stride;
      int64_t start;
      if (lo >= len || codecs::rotation_block_of(base + lo, p.n, h, &start) <= stride) continue;
      float a = v[lo], c = v[lo + stride];
      v[lo] = codecs::add_rn(a, c);
      v[lo + stride] = codecs::add_rn(a, -c);
    }
    __syncthreads();
  }
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    int64_t start;
    v[i] = codecs::mul_rn(v[i], codecs::wht_norm(codecs::rotation_block_of(base + i, p.n, h, &start)));
  }
  __syncthreads();
  if (inverse) signs();
}

// The run scale stored in the wire buffer src of a run of p.n elements.
__device__ inline float wire_run_scale(const uint8_t* src, const Params& p) {
  const codecs::FourBitLayout lay = codecs::fourbit_layout(p.n, p.group, p.scale_bits / 8);
  return *reinterpret_cast<const float*>(src + lay.run_scale);
}

// v[0..len) <- the decoded tile [base, base + len) of the wire buffer src under run scale s:
// dequantized, then inverse-rotated (v past len is left as it is). Ends with __syncthreads.
template <class Q>
__device__ inline void decode_tile(const uint8_t* src, const Params& p, float s, int64_t base,
                                   int len, float* v) {
  const int sb = p.scale_bits / 8;
  const codecs::FourBitLayout lay = codecs::fourbit_layout(p.n, p.group, sb);
  const int i0 = 2 * threadIdx.x;
  if (i0 < len) {
    const int64_t j = base + i0;
    uint32_t code = 0;
    for (int k = 0; k < sb; ++k) code |= uint32_t(src[lay.scales + j / p.group * sb + k]) << (8 * k);
    const float d = codecs::group_step(code, s, p.scale_bits);
    const uint8_t byte = src[j / 2];
    v[i0] = codecs::fourbit_dequantize<Q>(byte & 15u, d);
    if (i0 + 1 < len) v[i0 + 1] = codecs::fourbit_dequantize<Q>(byte >> 4, d);
  }
  __syncthreads();
  if (p.rotation > 0) rotate_tile(v, p, base, len, true);
}

// v[0..kTile) <- rotated float(src[base + i]) / divisor, zeros past the run's end. With
// @p add (the hop, v[0..len) holding a decoded tile) the value is v[i] + float(src[base + i]),
// in that operand order, before the division: the CPU's decode, add_block, encode.
__device__ inline void load_tile(const void* src, DType t, const Params& p, int64_t base, int len,
                                 float* v, bool add) {
  for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
    float x = 0.0f;
    if (i < len) {
      x = codecs::load_as_float(src, t, base + i);
      if (add) x = codecs::add_rn(v[i], x);
      if (p.divisor != 1.0f) x = codecs::div_rn(x, p.divisor);
    }
    v[i] = x;
  }
  __syncthreads();
  if (p.rotation > 0) rotate_tile(v, p, base, len, false);
}

// What an encode pass loads: the input src, or (kHop) decode(wire) + src, where wire_scale
// is the wire's run scale (see the file comment).
template <class Q, bool kHop>
__device__ inline void source_tile(const void* src, DType t, const uint8_t* wire,
                                   float wire_scale, const Params& p, int64_t base, int len,
                                   float* v) {
  if constexpr (kHop) decode_tile<Q>(wire, p, wire_scale, base, len, v);
  load_tile(src, t, p, base, len, v, kHop);
}

template <class Q, bool kHop>
__global__ void __launch_bounds__(kThreads)
    amax_kernel(const void* __restrict__ src, DType t, const uint8_t* wire, Params p,
                int32_t* amax_slot) {
  __shared__ float v[kTile];
  __shared__ int32_t warp_max[kWarps];
  const float wire_scale = kHop ? wire_run_scale(wire, p) : 0.0f;
  for (int64_t base = int64_t(blockIdx.x) * kTile; base < p.n; base += int64_t(gridDim.x) * kTile) {
    const int len = static_cast<int>(min(int64_t(kTile), p.n - base));
    source_tile<Q, kHop>(src, t, wire, wire_scale, p, base, len, v);
    int32_t m = 0;
    for (int i = threadIdx.x; i < len; i += blockDim.x) m = max(m, codecs::finite_abs_bits(v[i]));
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 0; w < kWarps; ++w) m = max(m, warp_max[w]);
      atomicMax(amax_slot, m);
    }
    __syncthreads();  // v and warp_max are reused by the next tile
  }
}

// dst may be the hop's wire (in place), hence no __restrict__.
template <class Q, bool kHop>
__global__ void __launch_bounds__(kThreads)
    encode_kernel(const void* __restrict__ src, DType t, const uint8_t* wire, Params p,
                  const int32_t* amax_slot, uint8_t* dst) {
  __shared__ float v[kTile];
  __shared__ int32_t warp_max[kWarps];
  const int sb = p.scale_bits / 8, pairs = p.group / 2, lane = threadIdx.x & 31;
  const float s = codecs::fourbit_run_scale(*amax_slot, Q::kQMax, p.scale_bits);
  const float wire_scale = kHop ? wire_run_scale(wire, p) : 0.0f;
  const codecs::FourBitLayout lay = codecs::fourbit_layout(p.n, p.group, sb);
  for (int64_t base = int64_t(blockIdx.x) * kTile; base < p.n; base += int64_t(gridDim.x) * kTile) {
    const int len = static_cast<int>(min(int64_t(kTile), p.n - base));
    source_tile<Q, kHop>(src, t, wire, wire_scale, p, base, len, v);
    const int i0 = 2 * threadIdx.x;
    // Group amax over the group's pairs: a butterfly within the warp, then across warps.
    int32_t a = max(i0 < len ? codecs::finite_abs_bits(v[i0]) : 0,
                    i0 + 1 < len ? codecs::finite_abs_bits(v[i0 + 1]) : 0);
    for (int o = 1; o < min(pairs, 32); o <<= 1) a = max(a, __shfl_xor_sync(0xFFFFFFFFu, a, o));
    if (pairs > 32) {
      if (lane == 0) warp_max[threadIdx.x >> 5] = a;
      __syncthreads();
      const int per = pairs / 32, w0 = (threadIdx.x >> 5) / per * per;
      for (int k = 0; k < per; ++k) a = max(a, warp_max[w0 + k]);
    }
    if (i0 < len) {
      const int64_t j = base + i0;
      const uint32_t code = codecs::encode_group_scale(a, Q::kQMax, s, p.scale_bits, p.stochastic);
      const float d = codecs::group_step(code, s, p.scale_bits);
      if (j % p.group == 0)
        for (int k = 0; k < sb; ++k) dst[lay.scales + j / p.group * sb + k] = uint8_t(code >> (8 * k));
      float u0 = 0.0f, u1 = 0.0f;
      if (p.stochastic) {
        u0 = codecs::sr_uniform(p.ctx.seed, p.ctx.step, p.ctx.rank, p.ctx.index + j);
        u1 = codecs::sr_uniform(p.ctx.seed, p.ctx.step, p.ctx.rank, p.ctx.index + j + 1);
      }
      uint8_t q0 = codecs::fourbit_quantize<Q>(v[i0], d, p.stochastic, u0);
      uint8_t q1 = i0 + 1 < len ? codecs::fourbit_quantize<Q>(v[i0 + 1], d, p.stochastic, u1) : 0;
      dst[j / 2] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    __syncthreads();
  }
}

// The run-scale slot of dst <- s from the run's amax bits in *amax (which may be that very
// slot: read before written), and zero the pad before it.
template <class Q>
__global__ void finalize_kernel(Params p, const int32_t* amax, uint8_t* dst) {
  const int sb = p.scale_bits / 8;
  const codecs::FourBitLayout lay = codecs::fourbit_layout(p.n, p.group, sb);
  const int64_t scales_end = lay.scales + (p.n + p.group - 1) / p.group * sb;
  if (scales_end + threadIdx.x < lay.run_scale) dst[scales_end + threadIdx.x] = 0;
  if (threadIdx.x == 0) {
    const float s = codecs::fourbit_run_scale(*amax, Q::kQMax, p.scale_bits);
    *reinterpret_cast<float*>(dst + lay.run_scale) = s;
  }
}

template <class Q, bool kCast>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(const uint8_t* __restrict__ src, Params p, DecodeOut o) {
  __shared__ float v[kTile];
  const float s = wire_run_scale(src, p);
  for (int64_t base = int64_t(blockIdx.x) * kTile; base < p.n; base += int64_t(gridDim.x) * kTile) {
    const int len = static_cast<int>(min(int64_t(kTile), p.n - base));
    decode_tile<Q>(src, p, s, base, len, v);
    for (int i = threadIdx.x; i < len; i += blockDim.x) store_decoded<kCast>(o, base + i, v[i]);
    __syncthreads();
  }
}


inline int grid_for(int64_t n) {
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>((n + kTile - 1) / kTile, 1), kMaxGrid));
}

inline void check_args(const Codec& c, int64_t n, const void* wire) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  CC_CHECK(c.group >= 2 && c.group <= 256 && kTile % c.group == 0,
           "4-bit codec group " << c.group << " must be a power of two up to 256");
  CC_CHECK(c.rotation >= 0 && c.rotation <= 256 && (c.rotation == 0 || kTile % c.rotation == 0),
           "4-bit codec rotation " << c.rotation << " must be a power of two up to 256");
  CC_CHECK(c.scale_bits == 8 || c.scale_bits == 16, "4-bit codec scales are 8 or 16 bits");
  CC_CHECK(reinterpret_cast<uintptr_t>(wire) % 4 == 0, "wire buffer must be 4-byte aligned");
}

// One piece (Codec::run_block elements at most) under one run scale: dst <- encode(src /
// divisor), or with wire_in (the hop) encode((decode(wire_in) + src) / divisor), the run's
// amax then gathered in amax_scratch (see the file comment).
template <class Q>
void launch_encode_piece(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                         const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                         int32_t* amax_scratch, cudaStream_t stream, const char* what) {
  check_args(codec, n, dst);
  if (n == 0) return;
  const bool hop = wire_in != nullptr;
  CC_CHECK(!hop || (reinterpret_cast<uintptr_t>(wire_in) % 4 == 0 && amax_scratch != nullptr),
           what << ": the hop needs a 4-byte aligned wire source and an amax scratch word");
  const Params p = make_params(n, codec, divisor, ctx);
  uint8_t* wire = static_cast<uint8_t*>(dst);
  const codecs::FourBitLayout lay = codecs::fourbit_layout(n, codec.group, codec.scale_bits / 8);
  int32_t* amax = hop ? amax_scratch : reinterpret_cast<int32_t*>(wire + lay.run_scale);
  CC_CUDA_CHECK(cudaMemsetAsync(amax, 0, 4, stream), "clearing the run amax");
  const uint8_t* in = static_cast<const uint8_t*>(wire_in);
  with_flag(hop, [&](auto k) {
    amax_kernel<Q, decltype(k)::value>
        <<<grid_for(n), kThreads, 0, stream>>>(src, src_dtype, in, p, amax);
    CC_CUDA_CHECK_LAUNCH(what);
    encode_kernel<Q, decltype(k)::value>
        <<<grid_for(n), kThreads, 0, stream>>>(src, src_dtype, in, p, amax, wire);
    CC_CUDA_CHECK_LAUNCH(what);
  });
  finalize_kernel<Q><<<1, 32, 0, stream>>>(p, amax, wire);
  CC_CUDA_CHECK_LAUNCH(what);
}

template <class Q>
void launch_decode_piece(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                         cudaStream_t stream, const char* what) {
  check_args(codec, n, src);
  if (n == 0) return;
  const Params p = make_params(n, codec, 1.0f, EncodeContext{});
  with_flag(o.out != nullptr, [&](auto cast) {
    decode_kernel<Q, decltype(cast)::value><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const uint8_t*>(src), p, o);
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

// A run is its pieces one after the other, each with its own wire section, exactly as the
// CPU backend lays it out (codecs/registry.h: for_each_piece).
inline int64_t piece_wire_bytes(const Codec& codec, int64_t len) {
  return codecs::fourbit_layout(len, codec.group, codec.scale_bits / 8).total;
}

// dst <- encode(src / divisor) piece by piece; with wire_in (the hop, same pieces, dst may be
// wire_in) encode((decode(wire_in) + src) / divisor), amax_scratch one device word.
template <class Q>
void launch_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                   const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                   int32_t* amax_scratch, cudaStream_t stream, const char* what) {
  for_each_piece(codec, n, [&](int64_t off, int64_t len) {
    EncodeContext at = ctx;
    at.index += off;
    launch_encode_piece<Q>(static_cast<const char*>(src) + off * dtype_size(src_dtype),
                           src_dtype, wire_in, len, codec, divisor, at, dst, amax_scratch,
                           stream, what);
    const int64_t bytes = piece_wire_bytes(codec, len);
    dst = static_cast<uint8_t*>(dst) + bytes;
    if (wire_in != nullptr) wire_in = static_cast<const uint8_t*>(wire_in) + bytes;
  });
}

template <class Q>
void launch_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                   cudaStream_t stream, const char* what) {
  for_each_piece(codec, n, [&](int64_t off, int64_t len) {
    launch_decode_piece<Q>(src, len, codec, decode_at(o, off), stream, what);
    src = static_cast<const uint8_t*>(src) + piece_wire_bytes(codec, len);
  });
}

}  // namespace ccompress::cuda::fourbit
