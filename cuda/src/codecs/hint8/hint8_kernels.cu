// hint8 encode / decode kernels: one warp per rotation block in registers (below a rotation
// of 256, a sub-group of H / 8 lanes per whole block: rot::packed_runs), one read and one
// write per element, the math of codecs/hint8/hint8.h in the order of codecs/hint8/hint8.cc (the
// contiguous layout of kernels/warp_rotation.cuh: a lane's elements are consecutive, so it
// reads and writes them with vector accesses). Every scale, the s8 block exponent included, depends only on
// its own block, so each kernel is a single pass. The ring hop is the encode kernel whose
// load step first decodes the block from the incoming wire (decode_block, the decode
// kernel's own code) and adds the input to it. No kernel makes a call (a call keeps the
// block's registers live across it, and they spill): divisions are exact_div's
// (kernels/exact_div.cuh), block and group offsets shifts, and a lane computes each of its
// groups' scales once. Whole blocks run with their length a compile-time constant, a run's
// tail blocks with it at run time.
//
// In place (hop dst = its wire source): a warp reads only its blocks' codes [off, off + len)
// and their scale bytes (s32 / s16: their groups' entries; s8: each block's run of bytes from
// s8_layout's base, the E byte or the E bits in bit 7 of its first 8 group bytes included),
// and writes only those same bytes (plus, block 0, the payload's zero pad, which no decoder
// reads); blocks own disjoint bytes (the scale section is block by block in element order).
// All its reads happen in decode_block, before a __syncwarp that precedes every write (below
// a rotation of 256 a warp pass holds several blocks, rot::packed_runs, and a sub-group past
// the last whole block reads that block, of the same pass, and writes nothing).
#include "codecs/hint8/hint8_kernels.h"

#include "ccompress/error.h"
#include "codecs/hint8/hint8.h"
#include "codecs/registry.h"
#include "codecs/stochastic.h"
#include "kernels/warp_rotation.cuh"

namespace ccompress::cuda {
namespace {

// The run's geometry. H and G are powers of two, so the kernels cut blocks and groups with
// shifts (a 64-bit division is a call on the device, and registers live across a call
// spill): the same numbers as codecs/rotation_blocks.h and hint8.h compute by division.
struct Hint8Params {
  int64_t n;
  int32_t group, rotation, scale_bits;
  int32_t lg_group, lg_rotation;
  bool signs, stochastic;
};

__device__ __forceinline__ int32_t log2_of(int32_t pow2) {
  return codecs::popcount64(static_cast<uint64_t>(pow2 - 1));
}

/// codecs::scale_groups_before.
__device__ __forceinline__ int64_t groups_before(const Hint8Params& p, int64_t m) {
  return (m >> p.lg_group) + codecs::popcount64(uint64_t(m) & uint64_t(p.group - 1));
}

/// codecs::s8_layout.
__device__ __forceinline__ codecs::S8Layout s8_layout_of(const Hint8Params& p,
                                                         const codecs::RotBlock& blk) {
  const int64_t m = blk.off;
  const int64_t full = p.rotation < codecs::kS8SpreadGroups * p.group ? m >> p.lg_rotation : 0;
  const uint64_t rest = uint64_t(m) & uint64_t(p.rotation - 1) &
                        uint64_t(codecs::kS8SpreadGroups * p.group - 1);
  const int32_t k = blk.len > p.group ? blk.len >> p.lg_group : 1;
  return codecs::S8Layout{groups_before(p, m) + full + codecs::popcount64(rest),
                          k < codecs::kS8SpreadGroups};
}

// Where a lane's groups start. A lane holds r consecutive elements; a group of gl = min(G,
// len) elements covers in_lane = min(gl, r) of its slots. G >= 8, so where r >= 8 groups
// start at multiples of 8 slots, and where r < 8 a lane's slots are one group: a group can
// start only at a slot that is a multiple of kChunk = min(kSlots, 8), and per-group work
// (scales, their division) runs once per chunk that starts one.
template <int kSlots>
struct Chunks {
  static constexpr int kChunk = kSlots < 8 ? kSlots : 8;
  static constexpr int kCount = kSlots / kChunk;
};

struct BlockShape {
  int r, j0, gl, lg_gl, in_lane;
  bool mine;  // the lane holds elements (blocks shorter than 32 leave lanes idle)
};

__device__ __forceinline__ BlockShape shape_of(const Hint8Params& p, const codecs::RotBlock& blk,
                                               const rot::Runs& u) {
  BlockShape b;
  b.r = u.r;
  b.j0 = u.j0;
  b.gl = p.group < blk.len ? p.group : blk.len;
  b.lg_gl = p.group < blk.len ? p.lg_group : log2_of(blk.len);
  b.in_lane = b.gl < b.r ? b.gl : b.r;
  b.mine = u.mine;
  return b;
}

// Codes of this lane's run (r of them from element j0 of block blk, zeros when the lane
// holds none): 16 bytes a load when r >= 16, 8 when r >= 8 (src 16-byte aligned: a run
// starts at a multiple of r), else one 32-bit word per 4 codes when r >= 4, else one byte
// each.
template <int kSlots>
__device__ __forceinline__ void load_codes(const uint8_t* src, const codecs::RotBlock& blk,
                                           int r, int j0, int32_t (&q)[kSlots]) {
  const bool mine = blk.len >= 32 || j0 < blk.len;
  if constexpr (kSlots >= 8) {
    const bool aligned = (reinterpret_cast<uintptr_t>(src) & 15u) == 0u;
    if (aligned && r >= 8) {
      const uint8_t* at = src + blk.off + j0;
      uint32_t w[kSlots / 4];
#pragma unroll
      for (int c = 0; c < kSlots; c += 16) {
        if (c + 16 <= r) {
          const uint4 x = *reinterpret_cast<const uint4*>(at + c);
          w[c / 4] = x.x, w[c / 4 + 1] = x.y, w[c / 4 + 2] = x.z, w[c / 4 + 3] = x.w;
        } else {
#pragma unroll
          for (int h = 0; h < 16 && c + h < kSlots; h += 8) {
            uint2 x = make_uint2(0u, 0u);
            if (c + h < r) x = *reinterpret_cast<const uint2*>(at + c + h);
            w[(c + h) / 4] = x.x, w[(c + h) / 4 + 1] = x.y;
          }
        }
      }
#pragma unroll
      for (int k = 0; k < kSlots; ++k) q[k] = static_cast<int8_t>(w[k / 4] >> (8 * (k & 3)));
      return;
    }
  }
  if constexpr (kSlots >= 4) {
    if (r >= 4) {
#pragma unroll
      for (int c = 0; c < kSlots; c += 4) {
        const uint32_t w =
            c < r ? *reinterpret_cast<const uint32_t*>(src + blk.off + j0 + c) : 0u;
#pragma unroll
        for (int b = 0; b < 4; ++b) q[c + b] = static_cast<int8_t>(w >> (8 * b));
      }
      return;
    }
  }
#pragma unroll
  for (int k = 0; k < kSlots; ++k)
    q[k] = k < r && mine ? reinterpret_cast<const int8_t*>(src)[blk.off + j0 + k] : 0;
}

// v <- the decoded block blk of the wire buffer src: dequantized, inverse-rotated, signed
// (the contiguous layout of warp_rotation.cuh, the lane's run u). Each group's scale is read
// once per lane.
template <int kSlots>
__device__ __forceinline__ void decode_block(const uint8_t* src, const Hint8Params& p,
                                             const codecs::RotBlock& blk, const rot::Runs& u,
                                             float (&v)[kSlots]) {
  using C = Chunks<kSlots>;
  const uint8_t* sc = src + codecs::rot_scales_offset(p.n);
  const BlockShape b = shape_of(p, blk, u);
  const codecs::S8Layout l = s8_layout_of(p, blk);
  const int64_t g0 = p.scale_bits == 8 ? 0 : groups_before(p, blk.off);
  const uint32_t e = p.scale_bits == 8 ? codecs::s8_read_exp(l, sc + l.base) : 0;
  int32_t q[kSlots];
  load_codes(src, blk, b.r, b.j0, q);
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < C::kCount; ++c) {
    const int k0 = c * C::kChunk;
    if (k0 < b.r && (k0 & (b.in_lane - 1)) == 0 && b.mine) {
      const int i = (b.j0 + k0) >> b.lg_gl;  // the group's index in its block
      s = p.scale_bits == 8 ? codecs::s8_read(e, sc[l.base + (l.e_byte ? 1 : 0) + i])
                            : codecs::hint8_read_scale(p.scale_bits, sc, g0 + i);
    }
#pragma unroll
    for (int kk = 0; kk < C::kChunk; ++kk) {
      const int k = k0 + kk;
      v[k] = k < b.r && b.mine ? codecs::hint8_dequantize(static_cast<int8_t>(q[k]), s)
                                           : 0.0f;
    }
  }
  rot::wht_runs(v, blk.len, u);
  if (p.signs) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) v[k] = __fmul_rn(v[k], codecs::random_sign(b.j0 + k));
  }
}

/// decode_block of a block held by the whole warp.
template <int kSlots>
__device__ __forceinline__ void decode_block(const uint8_t* src, const Hint8Params& p,
                                             const codecs::RotBlock& blk, float (&v)[kSlots]) {
  decode_block(src, p, blk, rot::whole_warp_runs(blk.len), v);
}

/// hint8_base_scale (amax / 127, floored) with the call-free division.
__device__ __forceinline__ float base_scale(int32_t amax_bits, const Divisor& d127) {
  return codecs::hint8_base_of_quotient(
      exact_div(codecs::f32_from_bits(static_cast<uint32_t>(amax_bits)), d127));
}

// Loads and rotates block blk, then leaves in m[c] the max raw |y| bits of the group of
// chunk c's slots (>= Inf bits: a non-finite group). kHop: first v <- decode_block of the
// wire buffer `wire`, to which the input is added. @p vec: src 16-byte aligned.
template <bool kHop, int kSlots>
__device__ __forceinline__ void rotate_and_group_amax(
    const void* src, DType t, const uint8_t* wire, const Divisor& divisor, bool vec,
    const Hint8Params& p, const codecs::RotBlock& blk, const rot::Runs& u, const BlockShape& b,
    float (&v)[kSlots], int32_t (&m)[Chunks<kSlots>::kCount]) {
  using C = Chunks<kSlots>;
  if constexpr (kHop) {
    decode_block(wire, p, blk, u, v);
    __syncwarp();  // in place: the warp's bytes are all read before any lane writes one
  }
  rot::load_runs(src, t, blk.off, divisor, vec, v, u, kHop);
  if (p.signs) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) v[k] = __fmul_rn(v[k], codecs::random_sign(b.j0 + k));
  }
  rot::wht_runs(v, blk.len, u);
#pragma unroll
  for (int c = 0; c < C::kCount; ++c) {
    int32_t x = 0;
#pragma unroll
    for (int kk = 0; kk < C::kChunk; ++kk) {
      const int k = c * C::kChunk + kk;
      if (k < b.r && b.mine)
        x = max(x, static_cast<int32_t>(codecs::f32_bits(v[k]) & codecs::kF32AbsMask));
    }
    m[c] = x;
  }
#pragma unroll
  for (int s = 1; s < C::kCount; s <<= 1) {  // chunks of one group (in_lane > kChunk)
    if (s * C::kChunk < b.in_lane) {
#pragma unroll
      for (int c = 0; c < C::kCount; ++c) {
        if (!(c & s)) {
          const int32_t x = max(m[c], m[c | s]);
          m[c] = x;
          m[c | s] = x;
        }
      }
    }
  }
  if (b.gl > b.r) {  // a group spans gl / r lanes; the lane's slots are one group
    int32_t x = m[0];
    const int lanes = b.gl >> log2_of(b.r);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {  // unconditional shuffles: no call (rot::wht_runs)
      const int32_t y = __shfl_xor_sync(rot::kFullMask, x, o);
      x = o < lanes ? max(x, y) : x;
    }
#pragma unroll
    for (int c = 0; c < C::kCount; ++c) m[c] = x;
  }
}

// One block of the encode kernel below, the lane's run u (kPacked: a block on a sub-group of
// the warp, rot::packed_runs; a lane that holds none writes nothing).
template <int kSlots, bool kHop, bool kPacked = false>
__device__ __forceinline__ void encode_block(const void* src, DType src_dtype,
                                             const uint8_t* wire, float divisor,
                                             const Hint8Params& p, const EncodeContext& ctx,
                                             bool vec, uint8_t* dst,
                                             const codecs::RotBlock& blk, const rot::Runs& u) {
  using C = Chunks<kSlots>;
  uint8_t* sc = dst + codecs::rot_scales_offset(p.n);
  // Prepared per block from the kernel's parameters (constant memory) rather than held in
  // registers across the block loop.
  const Divisor div = prepare_divisor(divisor);
  const Divisor d127 = prepare_divisor(codecs::kInt8Max);
  const uint64_t prefix = p.stochastic ? codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank) : 0;
  const BlockShape b = shape_of(p, blk, u);
  float v[kSlots];
  int32_t m[C::kCount];
  rotate_and_group_amax<kHop>(src, src_dtype, wire, div, vec, p, blk, u, b, v, m);
  uint32_t e = 0;
  const codecs::S8Layout l = s8_layout_of(p, blk);
  if (p.scale_bits == 8) {
    int32_t rmax = 0;  // the block's largest finite group amax
#pragma unroll
    for (int c = 0; c < C::kCount; ++c)
      if (m[c] < static_cast<int32_t>(codecs::kF32InfBits)) rmax = max(rmax, m[c]);
    if constexpr (kPacked) {  // the max over the block's sub-group of lanes
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {  // unconditional shuffles: no call (rot::wht_runs)
        const int32_t y = __shfl_xor_sync(rot::kFullMask, rmax, o);
        rmax = o < u.lanes ? max(rmax, y) : rmax;
      }
    } else {
      rmax = __reduce_max_sync(rot::kFullMask, rmax);
    }
    e = codecs::s8_exp_of_scale(codecs::f32_bits(base_scale(rmax, d127)));
    if (l.e_byte && b.j0 == 0 && b.mine) sc[l.base] = static_cast<uint8_t>(e);
  }
  const int64_t g0 = p.scale_bits == 8 ? 0 : groups_before(p, blk.off);
  // Codes leave as one 32-bit word per 4 slots (r >= 4), else one byte each.
  const bool words = kSlots >= 4 && b.r >= 4;
  codecs::Hint8Scale s{0.0f, 0u};
  Divisor ds = prepare_divisor(1.0f);
  // s8 with one group start a lane at most (gl >= r): the lane's group byte, stored below.
  const bool s8_words = p.scale_bits == 8 && b.gl >= b.r;
  uint32_t s8_byte = 0;
#pragma unroll
  for (int c = 0; c < C::kCount; ++c) {
    const int k0 = c * C::kChunk;
    if (k0 < b.r && (k0 & (b.in_lane - 1)) == 0 && b.mine) {  // a group starts
      const int j = b.j0 + k0;
      const bool bad = m[c] >= static_cast<int32_t>(codecs::kF32InfBits);
      s = codecs::hint8_scale_of_base(p.scale_bits, bad, base_scale(m[c], d127), e);
      if ((j & (b.gl - 1)) == 0) {  // this lane holds the group's first element
        const int i = j >> b.lg_gl;  // the group's index in its block
        if (p.scale_bits == 8) {
          s8_byte = (s.stored | codecs::s8_exp_bit(l, e, i)) & 0xFFu;
          if (!s8_words) sc[l.base + (l.e_byte ? 1 : 0) + i] = static_cast<uint8_t>(s8_byte);
        } else if (p.scale_bits == 16) {
          reinterpret_cast<uint16_t*>(sc)[g0 + i] = static_cast<uint16_t>(s.stored);
        } else {
          reinterpret_cast<uint32_t*>(sc)[g0 + i] = s.stored;
        }
      }
      ds = prepare_divisor(s.s);
    }
    uint32_t word = 0;
#pragma unroll
    for (int kk = 0; kk < C::kChunk; ++kk) {
      const int k = k0 + kk;
      const int j = b.j0 + k;
      int32_t q = 0;
      if (k < b.r && b.mine) {
        if (codecs::f32_is_finite(s.s)) {
          const float t = exact_div(v[k], ds);
          q = p.stochastic
                  ? codecs::hint8_sr_code_of_quotient(
                        t, codecs::sr_uniform_at(prefix, ctx.index + blk.off + j))
                  : codecs::hint8_code_of_quotient(t);
        }
        if (!words) reinterpret_cast<int8_t*>(dst)[blk.off + j] = static_cast<int8_t>(q);
      }
      word |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * (k & 3));
      if ((k & 3) == 3) {
        if (words && k < b.r && b.mine)
          *reinterpret_cast<uint32_t*>(dst + blk.off + j - 3) = word;
        word = 0;
      }
    }
  }
  // s8_words: the bytes of 4 groups that fill an aligned 32-bit word of the block's group
  // bytes (the section is 4-byte aligned) leave as that word, stored by the first group's
  // lane, which takes the next three from the lanes gl / r apart; the bytes at the run's
  // unaligned ends leave one by one. The shuffles outside any branch (rot::wht_runs).
  const int apart = b.gl >= b.r ? b.gl >> log2_of(b.r) : 1;
  uint32_t word4 = s8_byte;
#pragma unroll
  for (int t = 1; t < 4; ++t)
    word4 |= __shfl_down_sync(rot::kFullMask, s8_byte, min(t * apart, 31)) << (8 * t);
  if (s8_words && b.mine && (b.j0 & (b.gl - 1)) == 0) {
    const int i = b.j0 >> b.lg_gl;
    const int64_t at = l.base + (l.e_byte ? 1 : 0) + i;
    const int first = i - static_cast<int>(at & 3);  // the group whose byte starts at's word
    if (first < 0 || first + 4 > (blk.len >> b.lg_gl)) {
      sc[at] = static_cast<uint8_t>(s8_byte);
    } else if ((at & 3) == 0) {
      *reinterpret_cast<uint32_t*>(sc + at) = word4;
    }
  }
}

// dst <- encode(src / divisor); kHop: dst <- encode((decode(wire) + src) / divisor), wire
// possibly dst itself (see the file comment), hence no __restrict__ on dst. Below a rotation
// of 256 the warp passes are the decode kernel's (whole blocks 8 elements a lane on
// sub-groups, then the tail blocks one a warp). Codes are stored as one 32-bit word per 4
// (whole blocks, tail blocks of 128 and more), scales as the group's first lane writes
// them. Every division is exact_div's (kernels/exact_div.cuh): the IEEE
// division's slow-path call kept the block's registers live across it, which spilled. One
// block a multiprocessor at the least (the bound's second argument): without it ptxas
// squeezed the 16-slot kernel to 80 registers for occupancy and spilled two loop counters.
template <int kSlots, bool kHop>
__global__ void __launch_bounds__(rot::kThreads, 1)
    hint8_encode_kernel(const void* __restrict__ src, DType src_dtype, const uint8_t* wire,
                        float divisor, Hint8Params p, EncodeContext ctx, bool vec,
                        uint8_t* dst) {
  using C = Chunks<kSlots>;
  if (blockIdx.x == 0 && p.n + threadIdx.x < codecs::rot_scales_offset(p.n))
    dst[p.n + threadIdx.x] = 0;
  const int64_t blocks = rot::block_count(p.n, p.rotation, p.lg_rotation);
  if constexpr (kSlots < rot::kPackedRun) {  // rotations below 256: as the decode kernel
    const int64_t full = p.n >> p.lg_rotation;
    const int lg_pass = 8 - p.lg_rotation;
    const int64_t passes = (full + (int64_t(1) << lg_pass) - 1) >> lg_pass;
    for (int64_t w = rot::global_warp(); w < passes + (blocks - full); w += rot::grid_warps()) {
      if (w < passes) {
        const int64_t bi = (w << lg_pass) + rot::packed_block(p.lg_rotation);
        rot::Runs u = rot::packed_runs(p.lg_rotation);
        u.mine = bi < full;  // past the last whole block: that block's bytes read, none written
        encode_block<rot::kPackedRun, kHop, true>(
            src, src_dtype, wire, divisor, p, ctx, vec, dst,
            codecs::RotBlock{(u.mine ? bi : full - 1) << p.lg_rotation, p.rotation}, u);
      } else {
        const codecs::RotBlock blk =
            rot::block_at(p.n, p.rotation, p.lg_rotation, full + (w - passes));
        encode_block<kSlots, kHop>(src, src_dtype, wire, divisor, p, ctx, vec, dst, blk,
                                   rot::whole_warp_runs(blk.len));
      }
    }
  } else {
    for (int64_t bi = rot::global_warp(); bi < blocks; bi += rot::grid_warps()) {
      const codecs::RotBlock blk = rot::block_at(p.n, p.rotation, p.lg_rotation, bi);
      // A whole block of 32 kSlots with its length a constant, so that its slots need no
      // bounds: no predicates to keep live.
      if (blk.len == 32 * kSlots) {
        encode_block<kSlots, kHop>(src, src_dtype, wire, divisor, p, ctx, vec, dst,
                                   codecs::RotBlock{blk.off, 32 * kSlots},
                                   rot::whole_warp_runs(32 * kSlots));
      } else {
        encode_block<kSlots, kHop>(src, src_dtype, wire, divisor, p, ctx, vec, dst, blk,
                                   rot::whole_warp_runs(blk.len));
      }
    }
  }
}

// Rotations of 256 and more: one block a warp, 8 to 32 codes a lane (8- and 16-byte loads).
// Below 256 (kSlots < 8), a lane takes 8 codes of a whole block too (one 8-byte load): a warp
// pass holds 256 / H whole blocks, each on a sub-group of H / 8 lanes (rot::packed_runs),
// and a run's tail blocks (shorter than H) follow one a warp. One block a multiprocessor at
// the least, as the encode kernel: without it ptxas held the 32-slot decode to bf16 / fp16
// at 80 registers on sm_80 and spilled.
template <int kSlots, bool kCast>
__global__ void __launch_bounds__(rot::kThreads, 1)
    hint8_decode_kernel(const uint8_t* __restrict__ src, Hint8Params p, DecodeOut o, bool vec) {
  const int64_t blocks = rot::block_count(p.n, p.rotation, p.lg_rotation);
  if constexpr (kSlots < rot::kPackedRun) {
    const int64_t full = p.n >> p.lg_rotation;
    const int lg_pass = 8 - p.lg_rotation;  // log2 of the whole blocks a pass
    const int64_t passes = (full + (int64_t(1) << lg_pass) - 1) >> lg_pass;
    const rot::Runs u = rot::packed_runs(p.lg_rotation);
    for (int64_t w = rot::global_warp(); w < passes + (blocks - full); w += rot::grid_warps()) {
      if (w < passes) {
        const int64_t bi = (w << lg_pass) + rot::packed_block(p.lg_rotation);
        // Past the last whole block a sub-group decodes that block again and stores nothing
        // (its lanes still take part in the warp's shuffles).
        const int64_t off = (bi < full ? bi : full - 1) << p.lg_rotation;
        float v[rot::kPackedRun];
        decode_block(src, p, codecs::RotBlock{off, p.rotation}, u, v);
        if (bi < full) rot::store_runs<kCast>(o, off, vec, v, u);
      } else {
        const codecs::RotBlock blk =
            rot::block_at(p.n, p.rotation, p.lg_rotation, full + (w - passes));
        float v[kSlots];
        decode_block(src, p, blk, v);
        rot::store_runs<kCast>(o, blk.off, blk.len, vec, v);
      }
    }
  } else {
    for (int64_t bi = rot::global_warp(); bi < blocks; bi += rot::grid_warps()) {
      const codecs::RotBlock blk = rot::block_at(p.n, p.rotation, p.lg_rotation, bi);
      float v[kSlots];
      if (blk.len == 32 * kSlots) {  // a whole block, its length a constant
        decode_block(src, p, codecs::RotBlock{blk.off, 32 * kSlots}, v);
        rot::store_runs<kCast>(o, blk.off, 32 * kSlots, vec, v);
      } else {
        decode_block(src, p, blk, v);
        rot::store_runs<kCast>(o, blk.off, blk.len, vec, v);
      }
    }
  }
}

Hint8Params params_of(const Codec& codec, int64_t n) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  const int32_t g = codec.group, h = codec.rotation;
  CC_CHECK(h >= 16 && h <= 1024 && (h & (h - 1)) == 0 && g >= 8 && g <= h && (g & (g - 1)) == 0,
           "hint8 group " << g << " / rotation " << h << " out of range");
  CC_CHECK(codec.scale_bits == 8 || codec.scale_bits == 16 || codec.scale_bits == 32,
           "hint8 scale bits " << int(codec.scale_bits) << " not 8, 16 or 32");
  int32_t lg = 0, lh = 0;
  while ((1 << lg) < g) ++lg;
  while ((1 << lh) < h) ++lh;
  return Hint8Params{n, g, h, codec.scale_bits, lg, lh, codec.random_signs, codec.stochastic};
}

/// The kernels' warp passes: one a block, but below a rotation of 256 one per 256 / H whole
/// blocks (the decode kernel's comment).
int64_t warp_passes(const Hint8Params& p) {
  int64_t passes = codecs::rot_block_count(p.n, p.rotation);
  if (p.rotation < 256) {
    const int64_t full = p.n >> p.lg_rotation;
    passes += ceil_div(full, int64_t(256 >> p.lg_rotation)) - full;
  }
  return passes;
}

}  // namespace

void launch_hint8_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                         const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                         cudaStream_t stream) {
  const char* what = wire_in != nullptr ? "hint8 decode_reduce_encode" : "hint8 encode";
  const Hint8Params p = params_of(codec, n);
  if (n == 0) return;
  CC_CHECK(reinterpret_cast<uintptr_t>(dst) % 4 == 0 && reinterpret_cast<uintptr_t>(wire_in) % 4 == 0,
           "wire buffers must be 4-byte aligned");
  const uint8_t* in = static_cast<const uint8_t*>(wire_in);
  const bool vec = reinterpret_cast<uintptr_t>(src) % 16 == 0;
  const int64_t work = ceil_div(warp_passes(p), rot::kWarps);
  rot::with_slots(p.rotation, [&](auto slots) {
    with_flag(in != nullptr, [&](auto hop) {
      auto kernel = hint8_encode_kernel<decltype(slots)::value, decltype(hop)::value>;
      kernel<<<occupancy_grid(kernel, rot::kThreads, work), rot::kThreads, 0, stream>>>(
          src, src_dtype, in, divisor, p, ctx, vec, static_cast<uint8_t*>(dst));
    });
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

void launch_hint8_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                         cudaStream_t stream) {
  const char* what = o.out != nullptr ? "hint8 decode" : "hint8 decode_accumulate";
  const Hint8Params p = params_of(codec, n);
  if (n == 0) return;
  CC_CHECK(reinterpret_cast<uintptr_t>(src) % 4 == 0, "wire buffer must be 4-byte aligned");
  const int64_t work = ceil_div(warp_passes(p), rot::kWarps);
  rot::with_slots(p.rotation, [&](auto slots) {
    with_flag(o.out != nullptr, [&](auto cast) {
      auto kernel = hint8_decode_kernel<decltype(slots)::value, decltype(cast)::value>;
      kernel<<<occupancy_grid(kernel, rot::kThreads, work), rot::kThreads, 0, stream>>>(
          static_cast<const uint8_t*>(src), p, o, decode_out_aligned16(o));
    });
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

namespace {

void encode_op(const void* src, DType src_dtype, const void* wire_in, int64_t n, const Codec& c,
               float divisor, const EncodeContext& ctx, void* dst, cudaStream_t s) {
  launch_hint8_encode(src, src_dtype, wire_in, n, c, divisor, ctx, dst, s);
}

constexpr DeviceOps kDeviceOps = {encode_op, launch_hint8_decode};
[[maybe_unused]] const bool kAttached = attach_device_ops("hint8", kDeviceOps);

}  // namespace

}  // namespace ccompress::cuda
