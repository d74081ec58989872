// CUDA kernels of the MX codecs (mxfp8_kernels.cu, mxfp4_kernels.cu), templated on the element
// policy P of a family:
//   kEmax                  the element format's largest exponent (mxfp8.h)
//   kBits                  bits of an element code: 8 (FP8) or 4 (E2M1, element 2k in the low
//                          nibble of byte k)
//   code_bytes(n)          bytes of n element codes (the scales follow them)
//   quantize(x, c)         the code of x under E8M0 scale code c
//   dequantize(q, s)       the value of code q under scale s
// They compute exactly what the host loops compute (the same fp32 operations on the same
// operands), so wire bytes and decoded values are the CPU's bit for bit.
//
// Encode: a lane owns a run of 8 consecutive elements (one 16-byte load of bf16 / fp16, two
// of fp32), 4 lanes an MX block of 32, a warp a tile of 8 blocks. The block maximum is two
// lane shuffles, no shared memory and no block barrier. A lane's 8 codes are one 8-byte
// store (FP8) or one 4-byte store (E2M1). The tile's 8 E8M0 bytes are two aligned 32-bit
// words, written by lanes 0 and 16: tiles start at the block whose scale byte is 4-byte
// aligned (tile 0 is shorter by the scales' offset modulo 4), so no two warps share a
// scale word. The one word that codes and scales can share (the scales' offset is not a
// multiple of 4) and a run's partial last word are written byte-masked, by a 32-bit atomic
// AND then OR on the bytes the writer owns: no byte store anywhere, and no other byte of
// the word is disturbed. The zero pad after the scales is written by the last tile.
//
// The fused ring hop (wire_in) encodes (decode(wire_in) + x) / divisor. In place (dst =
// wire_in) is safe: a lane reads its run's codes and its block's scale before the warp
// synchronises, and writes only after it; the codes and scale bytes a warp writes are the
// ones it read, and the shared word is updated byte by byte.
//
// Decode: a thread owns a run of 16 elements (one 16-byte load of FP8 codes, one 8-byte
// load of nibbles; one scale, as 16 divides 32) and writes them with 16-byte stores.
//
// Grids: the SM count times the blocks an SM holds (occupancy_grid); grid-stride loops
// cover any count.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/error.h"
#include "codecs/float_convert.h"
#include "codecs/fp8/group_codec.h"
#include "codecs/mxfp8/mxfp8.h"
#include "kernels/kernel_util.cuh"

namespace ccompress::cuda::mx {

constexpr int kThreads = 256;
constexpr int kRun = 8;                          // elements of a lane in the encoder
constexpr int kLanesPerBlock = codecs::kMxBlock / kRun;
constexpr int kTileBlocks = 32 / kLanesPerBlock;  // MX blocks of a warp's tile: 8
constexpr int kDecodeVec = 16;                   // elements of a thread in the decoder

/// The bytes of @p mask in the aligned 32-bit word at @p p <- those of @p value; the other
/// bytes untouched. A whole word is one store; part of one is an atomic AND then OR.
__device__ __forceinline__ void store_word_masked(uint8_t* p, uint32_t value, uint32_t mask) {
  uint32_t* w = reinterpret_cast<uint32_t*>(p);
  if (mask == 0xFFFFFFFFu) {
    *w = value;
  } else if (mask != 0) {
    atomicAnd(w, ~mask);
    atomicOr(w, value & mask);
  }
}

/// Mask of the first @p bytes bytes of a 32-bit word (0..4).
__device__ __forceinline__ uint32_t low_bytes_mask(int bytes) {
  return bytes >= 4 ? 0xFFFFFFFFu : (bytes <= 0 ? 0u : (1u << (8 * bytes)) - 1u);
}

/// Codes of the run at element i (len <= 8 of them valid, len > 0): the run's P::kBits
/// bytes as kBits / 32 words, zeros past len.
template <class P>
__device__ __forceinline__ void load_run_codes(const uint8_t* wire, int64_t i, int len, bool vec,
                                               uint32_t (&q)[kRun]) {
  constexpr int kWords = P::kBits / 4;  // 8 codes of kBits bits in 32-bit words
  const uint8_t* p = wire + i * P::kBits / 8;
  uint32_t w[2] = {0, 0};
  if (len == kRun && (kWords == 1 || vec)) {
    if constexpr (kWords == 2) {
      const uint2 r = *reinterpret_cast<const uint2*>(p);
      w[0] = r.x;
      w[1] = r.y;
    } else {
      w[0] = *reinterpret_cast<const uint32_t*>(p);
    }
  } else {
    const int bytes = (len * P::kBits + 7) / 8;
#pragma unroll
    for (int b = 0; b < kWords * 4; ++b)
      if (b < bytes) w[b >> 2] |= uint32_t(p[b]) << (8 * (b & 3));
  }
  constexpr uint32_t kMask = (1u << P::kBits) - 1u;
#pragma unroll
  for (int k = 0; k < kRun; ++k)
    q[k] = (w[k * P::kBits / 32] >> ((k * P::kBits) % 32)) & kMask;
}

/// Stores the run's codes (len valid, zeros past it): one 8-byte store (FP8, @p vec) or
/// whole 32-bit words, and byte-masked the partial word of the last run.
template <class P>
__device__ __forceinline__ void store_run_codes(uint8_t* wire, int64_t i, int len, bool vec,
                                                const uint32_t (&q)[kRun]) {
  constexpr int kWords = P::kBits / 4;
  uint32_t w[2] = {0, 0};
#pragma unroll
  for (int k = 0; k < kRun; ++k)
    if (k < len) w[k * P::kBits / 32] |= q[k] << ((k * P::kBits) % 32);
  uint8_t* p = wire + i * P::kBits / 8;
  if constexpr (kWords == 2) {
    if (vec && len == kRun) {
      *reinterpret_cast<uint2*>(p) = make_uint2(w[0], w[1]);
      return;
    }
  }
  const int bytes = (len * P::kBits + 7) / 8;
#pragma unroll
  for (int k = 0; k < kWords; ++k) store_word_masked(p + 4 * k, w[k], low_bytes_mask(bytes - 4 * k));
}

/// The encoder's values of the run at element i: (decode(wire_in) + x) / divisor for the
/// hop, x / divisor otherwise, zeros past len.
template <class P, bool kHop, DType S>
__device__ __forceinline__ void load_encode_run(const void* src, const uint8_t* wire_in,
                                                int64_t i, int len, float divisor, bool vec,
                                                float ws, float (&v)[kRun]) {
  load_run8_as_float<S>(src, i, len, vec, v);
  if constexpr (kHop) {
    uint32_t q[kRun];
    load_run_codes<P>(wire_in, i, len, vec, q);
#pragma unroll
    for (int k = 0; k < kRun; ++k)
      if (k < len) v[k] = codecs::add_rn(P::dequantize(q[k], ws), v[k]);
  }
  if (divisor != 1.0f) {
#pragma unroll
    for (int k = 0; k < kRun; ++k)
      if (k < len) v[k] = codecs::div_rn(v[k], divisor);
  }
}

/// @p vec: src 16-byte aligned, dst and wire_in 8-byte aligned (wire buffers are always
/// 4-byte aligned).
template <class P, bool kHop, DType S>
__global__ void __launch_bounds__(kThreads)
    encode_kernel(const void* __restrict__ src, const uint8_t* wire_in, int64_t n, float divisor,
                  uint8_t* dst, bool vec) {
  const int lane = threadIdx.x & 31;
  const int64_t nblocks = (n + codecs::kMxBlock - 1) / codecs::kMxBlock;
  const int64_t scales = P::code_bytes(n);
  const int64_t wire_end = codecs::mx_wire_bytes(scales, n);
  const int shift = static_cast<int>(scales & 3);  // tile 0 starts at block -shift
  const int64_t tiles = (nblocks + shift + kTileBlocks - 1) / kTileBlocks;
  const int j = lane / kLanesPerBlock;  // the lane's block in the tile
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t t = int64_t(blockIdx.x) * (kThreads / 32) + (threadIdx.x >> 5); t < tiles;
       t += warps) {
    const int64_t b = t * kTileBlocks - shift + j;  // the lane's MX block (< 0: none)
    const int64_t i = b * codecs::kMxBlock + (lane % kLanesPerBlock) * kRun;
    const int len = b < 0 ? 0 : static_cast<int>(max(int64_t(0), min(int64_t(kRun), n - i)));
    float v[kRun];
    if (len > 0) {
      const float ws = kHop ? codecs::mx_scale(wire_in[scales + b]) : 0.0f;
      load_encode_run<P, kHop, S>(src, wire_in, i, len, divisor, vec, ws, v);
    }
    int32_t amax = 0;
#pragma unroll
    for (int k = 0; k < kRun; ++k)
      if (k < len) amax = max(amax, codecs::finite_abs_bits(v[k]));
#pragma unroll
    for (int o = 1; o < kLanesPerBlock; o <<= 1)
      amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    const uint32_t code = codecs::mx_scale_code(amax, P::kEmax);
    if constexpr (kHop) __syncwarp();  // in place: every lane has read its codes and scale
    if (len > 0) {
      uint32_t q[kRun];
#pragma unroll
      for (int k = 0; k < kRun; ++k) q[k] = k < len ? P::quantize(v[k], code) : 0u;
      store_run_codes<P>(dst, i, len, vec, q);
    }
    // The tile's scale words: lanes 0..15 hold blocks 0..3 of the tile, 16..31 blocks 4..7.
    const int64_t at = scales + b;  // the block's scale byte
    const int sh = 8 * (j & 3);
    uint32_t word = b >= 0 && b < nblocks ? code << sh : 0u;  // past nblocks: the zero pad
    uint32_t mask = b >= 0 && at < wire_end ? 0xFFu << sh : 0u;
#pragma unroll
    for (int o = kLanesPerBlock; o < 4 * kLanesPerBlock; o <<= 1) {
      word |= __shfl_xor_sync(0xFFFFFFFFu, word, o);
      mask |= __shfl_xor_sync(0xFFFFFFFFu, mask, o);
    }
    if (lane % (4 * kLanesPerBlock) == 0 && mask != 0)
      store_word_masked(dst + (at - (j & 3)), word, mask);
  }
}

/// @p vec: src 16-byte aligned and the destination 16-byte aligned.
template <class P, bool kCast>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(const uint8_t* __restrict__ src, int64_t n, DecodeOut o, bool vec) {
  const int64_t scales = P::code_bytes(n);
  const int64_t stride = int64_t(gridDim.x) * kThreads * kDecodeVec;
  constexpr uint32_t kMask = (1u << P::kBits) - 1u;
  constexpr int kBytes = kDecodeVec * P::kBits / 8;  // 16 (FP8) or 8 (E2M1)
  for (int64_t i = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * kDecodeVec; i < n;
       i += stride) {
    const int len = static_cast<int>(min(int64_t(kDecodeVec), n - i));
    const bool full = vec && len == kDecodeVec;
    const uint8_t* p = src + i * P::kBits / 8;
    uint32_t w[4] = {0, 0, 0, 0};
    if (full) {
      if constexpr (kBytes == 16) {
        const uint4 r = *reinterpret_cast<const uint4*>(p);
        w[0] = r.x; w[1] = r.y; w[2] = r.z; w[3] = r.w;
      } else {
        const uint2 r = *reinterpret_cast<const uint2*>(p);
        w[0] = r.x; w[1] = r.y;
      }
    } else {
      const int bytes = (len * P::kBits + 7) / 8;
#pragma unroll
      for (int b = 0; b < kBytes; ++b)
        if (b < bytes) w[b >> 2] |= uint32_t(p[b]) << (8 * (b & 3));
    }
    const float s = codecs::mx_scale(src[scales + i / codecs::kMxBlock]);
    float v[2][kRun];
#pragma unroll
    for (int k = 0; k < kDecodeVec; ++k)
      v[k / kRun][k % kRun] =
          P::dequantize((w[k * P::kBits / 32] >> ((k * P::kBits) % 32)) & kMask, s);
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

inline bool aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

/// dst <- encode(src / divisor), or with wire_in (the fused ring hop)
/// encode((decode(wire_in) + float(src)) / divisor), dst possibly wire_in. Asynchronous.
template <class P>
void launch_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                   float divisor, void* dst, cudaStream_t stream, const char* what) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (n == 0) return;
  CC_CHECK(aligned(dst, 4) && aligned(wire_in, 4), "wire buffers must be 4-byte aligned");
  const uint8_t* in = static_cast<const uint8_t*>(wire_in);
  uint8_t* out = static_cast<uint8_t*>(dst);
  const bool vec = aligned(src, 16) && aligned(dst, 8) && aligned(wire_in, 8);
  const int64_t nblocks = ceil_div(n, codecs::kMxBlock);
  const int64_t tiles = ceil_div(nblocks + (P::code_bytes(n) & 3), kTileBlocks);
  with_flag(in != nullptr, [&](auto hop) {
    with_dtype(src_dtype, [&](auto t) {
      auto kernel = encode_kernel<P, decltype(hop)::value, decltype(t)::value>;
      kernel<<<occupancy_grid(kernel, kThreads, ceil_div(tiles, kThreads / 32)), kThreads, 0,
               stream>>>(src, in, n, divisor, out, vec);
    });
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

/// The decode of src into @p o (kernels/decode_out.h), in one pass. Asynchronous.
template <class P>
void launch_decode(const void* src, int64_t n, const DecodeOut& o, cudaStream_t stream,
                   const char* what) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (n == 0) return;
  const uint8_t* wire = static_cast<const uint8_t*>(src);
  const bool vec = aligned(src, 16) && decode_out_aligned16(o);
  const int64_t work = ceil_div(ceil_div(n, kDecodeVec), kThreads);
  with_flag(o.out != nullptr, [&](auto cast) {
    auto kernel = decode_kernel<P, decltype(cast)::value>;
    kernel<<<occupancy_grid(kernel, kThreads, work), kThreads, 0, stream>>>(wire, n, o, vec);
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

}  // namespace ccompress::cuda::mx
