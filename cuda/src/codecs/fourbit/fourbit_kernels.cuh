// CUDA kernels of the 4-bit codecs (nvfp4_kernels.cu, hint4_kernels.cu), templated on the
// grid policy Q of codecs/fourbit/fourbit.h. They compute exactly what codecs/fourbit/fourbit_cpu.h
// computes: every value goes through the same fp32 operations, and the rotation evaluates the
// same butterfly network (each butterfly's operands are fixed by the network, whatever lane
// runs it), so wire bytes and decoded values are bit-identical to the CPU's.
//
// Layout. A call covers all the pieces of its run (Codec::run_block elements each, every piece
// its own wire section, as codecs/registry.h's for_each_piece lays them out) in one launch per
// kernel. A piece is cut into warp tiles of kWarpTile = 256 elements from its start: lane l of
// a warp holds the 8 consecutive elements 8l .. 8l + 7 of its tile in registers, so it reads
// them with 16-byte loads (two for fp32) and writes their 8 codes as one 32-bit word. Every
// group (8 <= G <= 256) and rotation block (H <= 256) lies in one tile: a group is G / 8
// consecutive lanes (its amax by shuffles); a rotation stage of
// distance d < 8 pairs slots of a lane, one of d >= 8 pairs lane l with lane l ^ (d / 8).
// Neither touches shared memory.
//
// Encoding needs a piece's amax before any group scale, so one CUDA block encodes a whole
// piece (64 Ki elements: 128 or 256 KiB of input) in one launch for the call: a first pass
// over the piece takes its amax (a lane's maximum in registers, the warp's by a shuffle
// reduction, the block's from one word per warp), a second pass reads the piece again, from
// L2 where the first left it (the resident blocks' pieces fit in it), and stores each lane's
// codes as a 32-bit word. The group scales (1 or 2 bytes each), a partial last code word,
// the pad and the run scale are gathered in shared memory (the piece's wire tail) and stored
// as 32-bit words once the piece is done. No atomics, no scratch, no other launch. Decoding
// needs no amax: a warp per tile, any block, one launch; there a lane holds 16 elements (a tile
// of 512), so that it reads its codes as one 64-bit word.
//
// The ring hop runs the same kernel, each pass loading a tile as decode(wire) + x
// (decode_lane, the decode kernel's own code, then the input added) instead of x. In place
// (dst = wire) this is safe because only the piece's own block touches its wire section, and
// within it:
//  - a warp tile's whole code words [base/2, (base + 256)/2) are disjoint from every other
//    tile's, and in the second pass a warp reads all of its tile's bytes (decode_lane ends
//    with __syncwarp) before any lane stores one; the first pass, which every warp finishes
//    before the second starts (__syncthreads), stores no wire byte;
//  - everything else every tile may read, the group scales, a partial last code word and the
//    old run scale (read by every thread before the first pass), is stored only after a
//    __syncthreads that follows the second pass.
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

constexpr int kPerLane = 8;                   // elements a lane holds: 4 code bytes
constexpr int kWarpTile = 32 * kPerLane;      // >= and a multiple of every G and H (<= 256)
constexpr int kThreads = 512;                 // 16 warps per CUDA block
constexpr int kWarps = kThreads / 32;
constexpr int kDecodeLane = 16;               // elements a lane decodes: 8 code bytes
constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr int kMinGroup = 16;                 // the 4-bit codecs' smallest group
// The tail of a piece's wire section that its CUDA block gathers in shared memory and stores
// as 32-bit words: a partial last code word, the group scales (at most 2 bytes per 16
// elements of a 65,536-element piece), the pad and the run scale.
constexpr int kTailWords = (4 + (codecs::kFourbitRunBlock / kMinGroup) * 2 + 8) / 4;

struct Params {
  int64_t n;           // elements of the call
  int64_t piece;       // elements of a whole piece (Codec::run_block, or n)
  int64_t piece_wire;  // wire bytes of a whole piece
  int32_t group, rotation, scale_bits;
  bool random_signs, stochastic;
  bool vec;            // the input (encode) is 16-byte aligned and pieces are multiples of 8
  float divisor;
  EncodeContext ctx;
};

inline int64_t piece_elems(const Codec& c, int64_t n) {
  return c.run_block > 0 ? c.run_block : std::max<int64_t>(n, 1);
}

inline int64_t piece_count(const Codec& c, int64_t n) {
  const int64_t p = piece_elems(c, n);
  return (n + p - 1) / p;
}

inline Params make_params(int64_t n, const Codec& c, float divisor, const EncodeContext& ctx,
                          const void* src) {
  const int64_t piece = piece_elems(c, n);
  const bool vec = reinterpret_cast<uintptr_t>(src) % 16 == 0 && (piece % 8 == 0 || piece >= n);
  return Params{n,
                piece,
                codecs::fourbit_layout(piece, c.group, c.scale_bits / 8).total,
                c.group,
                c.rotation,
                c.scale_bits,
                c.random_signs,
                c.stochastic,
                vec,
                divisor,
                ctx};
}

// Piece q of a call: its first element, its length, where its wire section starts and its
// layout there.
struct Piece {
  int64_t off, n, wire;
  codecs::FourBitLayout lay;
};

__device__ __forceinline__ Piece piece_at(const Params& p, int64_t q) {
  Piece c;
  c.off = q * p.piece;
  c.n = min(p.piece, p.n - c.off);
  c.wire = q * p.piece_wire;
  c.lay = codecs::fourbit_layout(c.n, p.group, p.scale_bits / 8);
  return c;
}

__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }

// Elements this lane holds of its run of kN from j0 (0 past the piece's end).
template <int kN = kPerLane>
__device__ __forceinline__ int lane_len(const Piece& c, int64_t j0) {
  return static_cast<int>(max(int64_t(0), min(int64_t(kN), c.n - j0)));
}

// Forward (v <- WHT(sign * v) / sqrt(p)) or inverse (v <- sign * WHT(v) / sqrt(p)) rotation of
// the lane's kN elements j0 .. j0 + kN - 1 of the tile at base (32 kN elements: kN = 8 for
// the encoder, 16 for the decoder), each in its rotation block of p elements
// (rotation_block_of: the piece's tail blocks are shorter, like the CPU's). The stages run in
// the host's order (distance 1, 2, 4, ...); a pair's lower element becomes a + b, the upper
// a + (-b). warp_rotation.cuh holds one block per warp; here a warp holds 32 kN / H blocks,
// so the stages stop at H and the distances >= kN cross lanes.
template <int kN>
__device__ __forceinline__ void rotate_lane(float (&v)[kN], const Params& p, const Piece& c,
                                            int64_t base, int64_t j0, bool inverse) {
  const int h = p.rotation;
  int len[kN];
  uint32_t pos[kN];
  if (base + 32 * kN <= c.n - c.n % h) {  // warp-uniform: whole blocks of h only
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      len[k] = h;
      pos[k] = static_cast<uint32_t>((j0 + k) & (h - 1));
    }
  } else {
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      len[k] = 1;  // past the piece's end: no butterfly (its partners are past it too)
      pos[k] = 0;
      if (j0 + k < c.n) {
        int64_t start;
        len[k] = codecs::rotation_block_of(j0 + k, c.n, h, &start);
        pos[k] = static_cast<uint32_t>(j0 + k - start);
      }
    }
  }
  if (p.random_signs && !inverse) {
#pragma unroll
    for (int k = 0; k < kN; ++k) v[k] = codecs::mul_rn(v[k], codecs::random_sign(pos[k]));
  }
#pragma unroll
  for (int s = 1; s < kN; s <<= 1) {
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      if (!(k & s) && len[k] > s) {  // len[k] > s: k and k | s share a block
        const float a = v[k], b = v[k | s];
        v[k] = codecs::add_rn(a, b);
        v[k | s] = codecs::add_rn(a, -b);
      }
    }
  }
  const int lane = lane_id();
  for (int d = kN; d < h; d <<= 1) {  // warp-uniform trip count
    const bool upper = (lane & (d / kN)) != 0;
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const float o = __shfl_xor_sync(kFullMask, v[k], d / kN);
      if (len[k] > d) v[k] = upper ? codecs::add_rn(o, -v[k]) : codecs::add_rn(v[k], o);
    }
  }
#pragma unroll
  for (int k = 0; k < kN; ++k) v[k] = codecs::mul_rn(v[k], codecs::wht_norm(len[k]));
  if (p.random_signs && inverse) {
#pragma unroll
    for (int k = 0; k < kN; ++k) v[k] = codecs::mul_rn(v[k], codecs::random_sign(pos[k]));
  }
}

// The group-scale code of the group at element j of a piece, from its wire section.
__device__ __forceinline__ uint32_t read_scale(const uint8_t* wire, const Params& p,
                                               const Piece& c, int64_t j) {
  const int sb = p.scale_bits / 8;
  const uint8_t* at = wire + c.wire + c.lay.scales + j / p.group * sb;
  return sb == 1 ? uint32_t(at[0]) : uint32_t(at[0]) | (uint32_t(at[1]) << 8);
}

// v <- the lane's decoded elements j0 .. j0 + kN - 1 (kN = 8 or 16, j0 a multiple of kN) of
// the wire buffer `wire` under run scale s: its kN codes as one 32-bit word (kN = 8) or one
// 64-bit word (kN = 16, where the piece's wire section is 8-byte aligned; else two 32-bit
// words), bytes in the piece's last run, dequantized, then inverse-rotated (zeros past the
// piece's end). The kN elements lie in one group (G >= 16). Ends with __syncwarp: the warp
// has read all of its tile's bytes.
template <class Q, int kN = kPerLane>
__device__ __forceinline__ void decode_lane(const uint8_t* wire, const Params& p, const Piece& c,
                                            float s, int64_t base, int64_t j0, float (&v)[kN]) {
  static_assert(kN == 8 || kN == 16, "a lane decodes 8 or 16 codes");
  const int len = lane_len<kN>(c, j0);
  const uint8_t* codes = wire + c.wire + j0 / 2;
  uint32_t word[kN / 8];
#pragma unroll
  for (int h = 0; h < kN / 8; ++h) word[h] = 0;
  if (len == kN) {  // 4-byte aligned: j0 % 8 == 0
    if constexpr (kN == 16) {
      if (reinterpret_cast<uintptr_t>(codes) % 8 == 0) {
        const uint2 r = *reinterpret_cast<const uint2*>(codes);
        word[0] = r.x;
        word[1] = r.y;
      } else {
        word[0] = reinterpret_cast<const uint32_t*>(codes)[0];
        word[1] = reinterpret_cast<const uint32_t*>(codes)[1];
      }
    } else {
      word[0] = *reinterpret_cast<const uint32_t*>(codes);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i)
      if (i < (len + 1) / 2) word[i / 4] |= uint32_t(codes[i]) << (8 * (i % 4));
  }
  const float d = len > 0 ? codecs::group_step(read_scale(wire, p, c, j0), s, p.scale_bits) : 0.0f;
#pragma unroll
  for (int k = 0; k < kN; ++k)
    v[k] = k < len ? codecs::fourbit_dequantize<Q>(
                         static_cast<uint8_t>((word[k / 8] >> (4 * (k % 8))) & 15u), d)
                   : 0.0f;
  __syncwarp();
  if (p.rotation > 0) rotate_lane(v, p, c, base, j0, true);
}

// x <- elements i .. i + len (len <= 8) of src as fp32, zeros past len: 16-byte loads when
// the run is whole and @p vec.
__device__ __forceinline__ void load_lane_input(const void* src, DType t, int64_t i, int len,
                                                bool vec, float (&x)[kPerLane]) {
  if (t == DType::Float32) {
    load_run8_as_float<DType::Float32>(src, i, len, vec, x);
  } else if (t == DType::BFloat16) {
    load_run8_as_float<DType::BFloat16>(src, i, len, vec, x);
  } else {
    load_run8_as_float<DType::Float16>(src, i, len, vec, x);
  }
}

// v <- the lane's rotated float(src) / divisor, zeros past the piece's end. kHop: v <-
// rotated (decode(wire) + float(src)) / divisor, the sum in that operand order before the
// division (the CPU's decode, add_block, encode), wire_s the wire's run scale.
template <class Q, bool kHop>
__device__ __forceinline__ void load_lane(const void* src, DType t, const uint8_t* wire,
                                          float wire_s, const Params& p, const Piece& c,
                                          int64_t base, int64_t j0, float (&v)[kPerLane]) {
  const int len = lane_len(c, j0);
  if constexpr (kHop) decode_lane<Q>(wire, p, c, wire_s, base, j0, v);
  float x[kPerLane];
  load_lane_input(src, t, c.off + j0, len, p.vec, x);
#pragma unroll
  for (int k = 0; k < kPerLane; ++k) {
    float y = x[k];
    if constexpr (kHop) y = k < len ? codecs::add_rn(v[k], y) : 0.0f;
    v[k] = p.divisor != 1.0f ? codecs::div_rn(y, p.divisor) : y;
  }
  if (p.rotation > 0) rotate_lane(v, p, c, base, j0, false);
}

// The wire's run scale of piece c (the hop's source).
__device__ __forceinline__ float wire_run_scale(const uint8_t* wire, const Piece& c) {
  return *reinterpret_cast<const float*>(wire + c.wire + c.lay.run_scale);
}

// The largest of m over this lane's scale group of g >= 8 elements: g / 8 lanes (shuffles).
__device__ __forceinline__ int32_t group_amax(int32_t m, int g) {
  for (int o = 1; o < g / kPerLane; o <<= 1) m = max(m, __shfl_xor_sync(kFullMask, m, o));
  return m;
}

// Where the block's gathered tail of piece c starts in its wire section: the 4-byte word of
// its last partial run of codes (the scales when the piece is a multiple of 8).
__device__ __forceinline__ int64_t tail_start(const Piece& c) { return (c.n & ~int64_t(7)) / 2; }

// Gathers the scale code of the group starting at element j of piece c into the tail.
__device__ __forceinline__ void gather_scale(uint8_t* tail, const Params& p, const Piece& c,
                                             int64_t j, uint32_t code) {
  uint8_t* at = tail + (c.lay.scales - tail_start(c)) + j / p.group * (p.scale_bits / 8);
  at[0] = static_cast<uint8_t>(code);
  if (p.scale_bits == 16) at[1] = static_cast<uint8_t>(code >> 8);
}

// The largest finite |y| bits of the lane's tiles of piece c (pass 1 of the encode).
template <class Q, bool kHop>
__device__ __forceinline__ int32_t piece_amax_lane(const void* src, DType t, const uint8_t* wire,
                                                   float wire_s, const Params& p, const Piece& c) {
  int32_t m = 0;
  for (int64_t base = int64_t(threadIdx.x >> 5) * kWarpTile; base < c.n; base += kWarps * kWarpTile) {
    const int64_t j0 = base + kPerLane * lane_id();
    float v[kPerLane];
    load_lane<Q, kHop>(src, t, wire, wire_s, p, c, base, j0, v);
    const int len = lane_len(c, j0);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k)
      if (k < len) m = max(m, codecs::finite_abs_bits(v[k]));
  }
  return m;
}

// dst <- the wire sections of every piece (see the file comment): a CUDA block per piece.
// dst may be the hop's wire (in place), hence no __restrict__. A lane stores its 8 codes as
// one 32-bit word; a group's first lane puts its scale, and a piece's last partial run of
// codes its bytes, into the tail the block gathers in shared memory (scales are 1 or 2 bytes
// each: stored from there as 32-bit words once the piece is done, with the pad and the run
// scale).
template <class Q, bool kHop>
__global__ void __launch_bounds__(kThreads, 1)
    encode_kernel(const void* __restrict__ src, DType t, const uint8_t* wire, Params p,
                  uint8_t* dst) {
  __shared__ int32_t warp_max[kWarps];
  __shared__ uint32_t tail_words[kTailWords];
  uint8_t* tail = reinterpret_cast<uint8_t*>(tail_words);
  const int64_t pieces = (p.n + p.piece - 1) / p.piece;
  const int warp = threadIdx.x >> 5;
  const uint64_t prefix = codecs::sr_prefix(p.ctx.seed, p.ctx.step, p.ctx.rank);
  for (int64_t q = blockIdx.x; q < pieces; q += gridDim.x) {
    const Piece c = piece_at(p, q);
    const float wire_s = kHop ? wire_run_scale(wire, c) : 0.0f;
    const int64_t t0 = tail_start(c);
    const int tail_n = static_cast<int>((c.lay.total - t0) / 4);
    for (int i = threadIdx.x; i < tail_n; i += kThreads) tail_words[i] = 0;  // the pad's zeros
    int32_t amax = __reduce_max_sync(kFullMask, piece_amax_lane<Q, kHop>(src, t, wire, wire_s, p, c));
    if (lane_id() == 0) warp_max[warp] = amax;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kWarps; ++w) amax = max(amax, warp_max[w]);
    const float s = codecs::fourbit_run_scale(amax, Q::kQMax, p.scale_bits);
    for (int64_t base = int64_t(warp) * kWarpTile; base < c.n; base += kWarps * kWarpTile) {
      const int64_t j0 = base + kPerLane * lane_id();
      const int len = lane_len(c, j0);
      float v[kPerLane];
      load_lane<Q, kHop>(src, t, wire, wire_s, p, c, base, j0, v);
      int32_t a = 0;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k)
        if (k < len) a = max(a, codecs::finite_abs_bits(v[k]));
      a = group_amax(a, p.group);
      const uint32_t code = codecs::encode_group_scale(a, Q::kQMax, s, p.scale_bits, p.stochastic);
      const float d = codecs::group_step(code, s, p.scale_bits);
      if (len > 0 && j0 % p.group == 0) gather_scale(tail, p, c, j0, code);
      uint32_t word = 0;
#pragma unroll
      for (int k = 0; k < kPerLane; ++k) {
        if (k < len) {
          const float u = p.stochastic
                              ? codecs::sr_uniform_at(prefix, p.ctx.index + c.off + j0 + k)
                              : 0.0f;
          word |= uint32_t(codecs::fourbit_quantize<Q>(v[k], d, p.stochastic, u)) << (4 * k);
        }
      }
      if (len == kPerLane) {
        *reinterpret_cast<uint32_t*>(dst + c.wire + j0 / 2) = word;
      } else if (len > 0) {  // j0 / 2 == t0; an odd piece's last high nibble is 0
        for (int i = 0; i < (len + 1) / 2; ++i) tail[i] = static_cast<uint8_t>(word >> (8 * i));
      }
    }
    // Every read of the wire (the old run scale, a tile's scales and codes) and of warp_max
    // is done, and the tail gathered: store it, the run scale last.
    __syncthreads();
    uint32_t* out = reinterpret_cast<uint32_t*>(dst + c.wire + t0);
    for (int i = threadIdx.x; i < tail_n; i += kThreads)
      out[i] = i + 1 < tail_n ? tail_words[i] : codecs::f32_bits(s);
    __syncthreads();  // the tail and warp_max are reused by the next piece
  }
}

// The decode's destination <- decode(src). A lane decodes a run of kDecodeLane = 16 elements
// (its codes one 64-bit word, decode_lane) and writes its values with 16-byte stores (@p vec:
// the destination 16-byte aligned), element stores in a piece's last partial run. A warp's
// tile is 32 runs: 512 elements, from a multiple of 512 of its piece. The grid: x over a
// piece's tiles, y over pieces (decode_grid); the kernel loops over what the grid does not
// cover.
template <class Q, bool kCast>
__global__ void __launch_bounds__(kThreads, 1)
    decode_kernel(const uint8_t* __restrict__ src, Params p, DecodeOut o, bool vec) {
  constexpr int kN = kDecodeLane;
  const int64_t pieces = (p.n + p.piece - 1) / p.piece;
  const int warp = threadIdx.x >> 5;
  for (int64_t q = blockIdx.y; q < pieces; q += gridDim.y) {
    const Piece c = piece_at(p, q);
    const float s = wire_run_scale(src, c);
    for (int64_t base = (int64_t(blockIdx.x) * kWarps + warp) * (32 * kN); base < c.n;
         base += int64_t(gridDim.x) * kWarps * (32 * kN)) {
      const int64_t j0 = base + kN * lane_id();
      const int len = lane_len<kN>(c, j0);
      float v[kN];
      decode_lane<Q, kN>(src, p, c, s, base, j0, v);
#pragma unroll
      for (int h = 0; h < kN / kPerLane; ++h) {
        float r[kPerLane];
#pragma unroll
        for (int k = 0; k < kPerLane; ++k) r[k] = v[kPerLane * h + k];
        const int64_t i = c.off + j0 + kPerLane * h;
        if (vec && len == kN) {
          store_decoded8<kCast>(o, i, r);
        } else {
#pragma unroll
          for (int k = 0; k < kPerLane; ++k)
            if (kPerLane * h + k < len) store_decoded<kCast>(o, i + k, r[k]);
        }
      }
    }
  }
}

// The decode's grid: x over a piece's warp tiles, y over pieces, x * y at most the blocks the
// GPU holds at once (occupancy_grid); the kernel's loops cover the rest.
template <class K>
dim3 decode_grid(K kernel, const Params& p) {
  const int64_t pieces = ceil_div(p.n, p.piece);
  const int64_t blocks = ceil_div(ceil_div(std::min(p.piece, p.n), int64_t(32) * kDecodeLane), kWarps);
  const int resident = occupancy_grid(kernel, kThreads, pieces * blocks);
  const int64_t x = std::min<int64_t>(blocks, resident);
  const int64_t y = std::min<int64_t>(pieces, std::max<int64_t>(resident / x, 1));
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y), 1);
}


inline void check_args(const Codec& c, int64_t n, const void* wire) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  CC_CHECK(c.group >= kMinGroup && c.group <= kWarpTile && (c.group & (c.group - 1)) == 0,
           "4-bit codec group " << c.group << " must be a power of two in 16..256");
  CC_CHECK(c.rotation >= 0 && c.rotation <= kWarpTile && (c.rotation & (c.rotation - 1)) == 0,
           "4-bit codec rotation " << c.rotation << " must be a power of two up to 256");
  CC_CHECK(c.scale_bits == 8 || c.scale_bits == 16, "4-bit codec scales are 8 or 16 bits");
  CC_CHECK(c.run_block > 0 && c.run_block % kWarpTile == 0 &&
               c.run_block <= codecs::kFourbitRunBlock,
           "4-bit codec run block " << c.run_block << " must be a multiple of " << kWarpTile
                                    << " up to " << codecs::kFourbitRunBlock);
  CC_CHECK(reinterpret_cast<uintptr_t>(wire) % 4 == 0, "wire buffer must be 4-byte aligned");
}

// dst <- encode(src / divisor), every piece of the call (Codec::run_block elements) under its
// own run scale; with wire_in (the hop, same pieces, dst may be wire_in) encode((decode(wire_in)
// + src) / divisor). One launch, whatever n.
template <class Q>
void launch_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                   const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                   cudaStream_t stream, const char* what) {
  check_args(codec, n, dst);
  if (n == 0) return;
  const bool hop = wire_in != nullptr;
  CC_CHECK(!hop || reinterpret_cast<uintptr_t>(wire_in) % 4 == 0,
           what << ": the hop's wire source must be 4-byte aligned");
  const Params p = make_params(n, codec, divisor, ctx, src);
  with_flag(hop, [&](auto k) {
    // a CUDA block per piece, up to the blocks the GPU holds at once (the kernel loops over
    // the pieces past its grid)
    auto kernel = encode_kernel<Q, decltype(k)::value>;
    kernel<<<occupancy_grid(kernel, kThreads, ceil_div(p.n, p.piece)), kThreads, 0, stream>>>(
        src, src_dtype, static_cast<const uint8_t*>(wire_in), p, static_cast<uint8_t*>(dst));
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

// The decode of every piece of src into @p o (kernels/decode_out.h): one launch.
template <class Q>
void launch_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                   cudaStream_t stream, const char* what) {
  check_args(codec, n, src);
  if (n == 0) return;
  const Params p = make_params(n, codec, 1.0f, EncodeContext{}, nullptr);
  const bool vec = decode_out_aligned16(o) && p.piece % 8 == 0;
  with_flag(o.out != nullptr, [&](auto cast) {
    auto kernel = decode_kernel<Q, decltype(cast)::value>;
    kernel<<<decode_grid(kernel, p), kThreads, 0, stream>>>(static_cast<const uint8_t*>(src), p,
                                                            o, vec);
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

}  // namespace ccompress::cuda::fourbit
