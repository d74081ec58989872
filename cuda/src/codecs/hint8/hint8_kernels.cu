// hint8 encode / decode kernels: one warp per rotation block in registers, one read and one
// write per element, the math of codecs/hint8/hint8.h in the order of codecs/hint8/hint8.cc (the
// contiguous layout of kernels/warp_rotation.cuh: a lane's elements are consecutive, so it
// reads and writes them with vector accesses). Every scale, the s8 block exponent included, depends only on
// its own block, so each kernel is a single pass. The ring hop is the encode kernel whose
// load step first decodes the block from the incoming wire (decode_block, the decode
// kernel's own code) and adds the input to it.
//
// In place (hop dst = its wire source): a warp reads only its block's codes [off, off + len)
// and its scale bytes (s32 / s16: its groups' entries; s8: the block's run of bytes from
// s8_layout's base, the E byte or the E bits in bit 7 of its first 8 group bytes included),
// and writes only those same bytes (plus, block 0, the payload's zero pad, which no decoder
// reads); blocks own disjoint bytes (the scale section is block by block in element order).
// All its reads happen in decode_block, before a __syncwarp that precedes every write.
#include "codecs/hint8/hint8_kernels.h"

#include "ccompress/error.h"
#include "codecs/hint8/hint8.h"
#include "codecs/registry.h"
#include "codecs/stochastic.h"
#include "kernels/warp_rotation.cuh"

namespace ccompress::cuda {
namespace {

struct Hint8Params {
  int64_t n;
  int32_t group, rotation, scale_bits;
  bool signs, stochastic;
};

// Codes of this lane's run (r of them from element j0 of block blk, zeros when the lane
// holds none) as one 32-bit word per 4 codes when r >= 4, else one byte each.
template <int kSlots>
__device__ __forceinline__ void load_codes(const uint8_t* src, const codecs::RotBlock& blk,
                                           int r, int j0, int32_t (&q)[kSlots]) {
  const bool mine = j0 < blk.len;
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
// (the contiguous layout of warp_rotation.cuh).
template <int kSlots>
__device__ __forceinline__ void decode_block(const uint8_t* src, const Hint8Params& p,
                                             const codecs::RotBlock& blk, float (&v)[kSlots]) {
  const uint8_t* sc = src + codecs::rot_scales_offset(p.n);
  const int gl = p.group < blk.len ? p.group : blk.len;
  const int64_t g0 = codecs::scale_groups_before(blk.off, p.group);
  const codecs::S8Layout l = codecs::s8_layout(blk, p.group, p.rotation);
  const uint32_t e = p.scale_bits == 8 ? codecs::s8_read_exp(l, sc + l.base) : 0;
  const int r = rot::runs_of(blk.len), j0 = rot::run_elem(0, r);
  int32_t q[kSlots];
  load_codes(src, blk, r, j0, q);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int j = j0 + k;
    v[k] = 0.0f;
    if (k < r && j < blk.len) {
      const int i = j / gl;
      const float s = p.scale_bits == 8
                          ? codecs::s8_read(e, sc[l.base + (l.e_byte ? 1 : 0) + i])
                          : codecs::hint8_read_scale(p.scale_bits, sc, g0 + i);
      v[k] = codecs::hint8_dequantize(static_cast<int8_t>(q[k]), s);
    }
  }
  rot::wht_runs(v, blk.len);
  if (p.signs) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) v[k] = __fmul_rn(v[k], codecs::random_sign(j0 + k));
  }
}

// Loads and rotates block blk, then leaves in m[k] the max raw |y| bits of slot k's scale
// group (>= Inf bits: a non-finite group). Groups of gl = min(G, len) elements are gl
// consecutive slots of a lane (gl < r) or gl / r consecutive lanes (gl >= r).
// kHop: first v <- decode_block of the wire buffer `wire`, to which the input is added.
// @p vec: src 16-byte aligned.
template <bool kHop, int kSlots>
__device__ __forceinline__ void rotate_and_group_amax(const void* src, DType t,
                                                      const uint8_t* wire, float divisor,
                                                      bool vec, const Hint8Params& p,
                                                      const codecs::RotBlock& blk,
                                                      float (&v)[kSlots], int32_t (&m)[kSlots]) {
  if constexpr (kHop) {
    decode_block(wire, p, blk, v);
    __syncwarp();  // in place: the block's bytes are all read before any lane writes one
  }
  rot::load_runs(src, t, blk.off, blk.len, divisor, vec, v, kHop);
  const int r = rot::runs_of(blk.len), j0 = rot::run_elem(0, r);
  if (p.signs) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) v[k] = __fmul_rn(v[k], codecs::random_sign(j0 + k));
  }
  rot::wht_runs(v, blk.len);
  const int gl = p.group < blk.len ? p.group : blk.len;
#pragma unroll
  for (int k = 0; k < kSlots; ++k)
    m[k] = k < r && j0 + k < blk.len
               ? static_cast<int32_t>(codecs::f32_bits(v[k]) & codecs::kF32AbsMask)
               : 0;
  const int in_lane = gl < r ? gl : r;  // slots of a group in one lane
#pragma unroll
  for (int s = 1; s < kSlots; s <<= 1) {
    if (s < in_lane) {
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        if (!(k & s)) {
          int32_t x = max(m[k], m[k | s]);
          m[k] = x;
          m[k | s] = x;
        }
      }
    }
  }
  const int lanes = gl > r ? gl / r : 1;  // lanes of a group
  for (int o = 1; o < lanes; o <<= 1) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) m[k] = max(m[k], __shfl_xor_sync(rot::kFullMask, m[k], o));
  }
}

// dst <- encode(src / divisor); kHop: dst <- encode((decode(wire) + src) / divisor), wire
// possibly dst itself (see the file comment), hence no __restrict__ on dst. Codes are
// stored as one 32-bit word per 4 (blocks of 128 and more), scales as the group's first
// lane writes them.
template <int kSlots, bool kHop>
__global__ void __launch_bounds__(rot::kThreads)
    hint8_encode_kernel(const void* __restrict__ src, DType src_dtype, const uint8_t* wire,
                        float divisor, Hint8Params p, EncodeContext ctx, bool vec,
                        uint8_t* dst) {
  uint8_t* sc = dst + codecs::rot_scales_offset(p.n);
  const uint64_t prefix = codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank);
  if (blockIdx.x == 0 && p.n + threadIdx.x < codecs::rot_scales_offset(p.n))
    dst[p.n + threadIdx.x] = 0;
  const int64_t blocks = codecs::rot_block_count(p.n, p.rotation);
  for (int64_t b = rot::global_warp(); b < blocks; b += rot::grid_warps()) {
    const codecs::RotBlock blk = codecs::rot_block(p.n, p.rotation, b);
    float v[kSlots];
    int32_t m[kSlots];
    rotate_and_group_amax<kHop>(src, src_dtype, wire, divisor, vec, p, blk, v, m);
    const int r = rot::runs_of(blk.len), j0 = rot::run_elem(0, r);
    const int gl = p.group < blk.len ? p.group : blk.len;
    const int64_t g0 = codecs::scale_groups_before(blk.off, p.group);
    uint32_t e = 0;
    const codecs::S8Layout l = codecs::s8_layout(blk, p.group, p.rotation);
    if (p.scale_bits == 8) {
      int32_t rmax = 0;  // the block's largest finite group amax
#pragma unroll
      for (int k = 0; k < kSlots; ++k)
        if (m[k] < static_cast<int32_t>(codecs::kF32InfBits)) rmax = max(rmax, m[k]);
      e = codecs::s8_block_exp(__reduce_max_sync(rot::kFullMask, rmax));
      if (l.e_byte && (threadIdx.x & 31) == 0) sc[l.base] = static_cast<uint8_t>(e);
    }
    // Codes leave as one 32-bit word per 4 slots (r >= 4), else one byte each.
    const bool words = kSlots >= 4 && r >= 4;
    uint32_t word = 0;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int j = j0 + k;
      int32_t q = 0;
      if (k < r && j < blk.len) {
        const codecs::Hint8Scale s = codecs::hint8_make_scale(p.scale_bits, m[k], e);
        const int i = j / gl;  // the group's index in its block
        if (j % gl == 0) {
          if (p.scale_bits == 8) {
            sc[l.base + (l.e_byte ? 1 : 0) + i] =
                static_cast<uint8_t>(s.stored | codecs::s8_exp_bit(l, e, i));
          } else if (p.scale_bits == 16) {
            reinterpret_cast<uint16_t*>(sc)[g0 + i] = static_cast<uint16_t>(s.stored);
          } else {
            reinterpret_cast<uint32_t*>(sc)[g0 + i] = s.stored;
          }
        }
        if (codecs::f32_is_finite(s.s)) {
          q = p.stochastic
                  ? codecs::hint8_quantize_sr(
                        v[k], s.s, codecs::sr_uniform_at(prefix, ctx.index + blk.off + j))
                  : codecs::hint8_quantize_code(v[k], s.s);
        }
        if (!words) reinterpret_cast<int8_t*>(dst)[blk.off + j] = static_cast<int8_t>(q);
      }
      word |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * (k & 3));
      if ((k & 3) == 3) {
        if (words && k < r) *reinterpret_cast<uint32_t*>(dst + blk.off + j - 3) = word;
        word = 0;
      }
    }
  }
}

template <int kSlots, bool kCast>
__global__ void __launch_bounds__(rot::kThreads)
    hint8_decode_kernel(const uint8_t* __restrict__ src, Hint8Params p, DecodeOut o, bool vec) {
  const int64_t blocks = codecs::rot_block_count(p.n, p.rotation);
  for (int64_t b = rot::global_warp(); b < blocks; b += rot::grid_warps()) {
    const codecs::RotBlock blk = codecs::rot_block(p.n, p.rotation, b);
    float v[kSlots];
    decode_block(src, p, blk, v);
    rot::store_runs<kCast>(o, blk.off, blk.len, vec, v);
  }
}

Hint8Params params_of(const Codec& codec, int64_t n) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  const int32_t g = codec.group, h = codec.rotation;
  CC_CHECK(h >= 16 && h <= 1024 && (h & (h - 1)) == 0 && g >= 8 && g <= h && (g & (g - 1)) == 0,
           "hint8 group " << g << " / rotation " << h << " out of range");
  CC_CHECK(codec.scale_bits == 8 || codec.scale_bits == 16 || codec.scale_bits == 32,
           "hint8 scale bits " << int(codec.scale_bits) << " not 8, 16 or 32");
  return Hint8Params{n, g, h, codec.scale_bits, codec.random_signs, codec.stochastic};
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
  const int64_t work = ceil_div(codecs::rot_block_count(n, p.rotation), rot::kWarps);
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
  const int64_t work = ceil_div(codecs::rot_block_count(n, p.rotation), rot::kWarps);
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
