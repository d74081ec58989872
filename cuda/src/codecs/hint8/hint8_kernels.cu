// hint8 encode / decode kernels: one warp per rotation block in registers, one read and one
// write per element, the math of codecs/hint8/hint8.h in the order of codecs/hint8/hint8.cc (layout:
// kernels/warp_rotation.cuh). Every scale, the s8 block exponent included, depends only on
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

// v <- the decoded block blk of the wire buffer src: dequantized, inverse-rotated, signed.
template <int kSlots>
__device__ __forceinline__ void decode_block(const uint8_t* src, const Hint8Params& p,
                                             const codecs::RotBlock& blk, float (&v)[kSlots]) {
  const uint8_t* sc = src + codecs::rot_scales_offset(p.n);
  const int gl = p.group < blk.len ? p.group : blk.len;
  const int64_t g0 = codecs::scale_groups_before(blk.off, p.group);
  const codecs::S8Layout l = codecs::s8_layout(blk, p.group, p.rotation);
  const uint32_t e = p.scale_bits == 8 ? codecs::s8_read_exp(l, sc + l.base) : 0;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int j = rot::elem_of(k);
    v[k] = 0.0f;
    if (j < blk.len) {
      const int i = j / gl;
      const float s = p.scale_bits == 8
                          ? codecs::s8_read(e, sc[l.base + (l.e_byte ? 1 : 0) + i])
                          : codecs::hint8_read_scale(p.scale_bits, sc, g0 + i);
      v[k] = codecs::hint8_dequantize(reinterpret_cast<const int8_t*>(src)[blk.off + j], s);
    }
  }
  rot::wht_normalized(v, blk.len);
  if (p.signs) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k)
      v[k] = __fmul_rn(v[k], codecs::random_sign(rot::elem_of(k)));
  }
}

// Loads and rotates block blk, then leaves in m[k] the max raw |y| bits of slot k's scale
// group (>= Inf bits: a non-finite group). Groups of gl = min(G, len) elements are gl
// consecutive lanes of a slot (gl < 32) or gl / 32 consecutive slots (gl >= 32).
// kHop: first v <- decode_block of the wire buffer `wire`, to which the input is added.
template <bool kHop, int kSlots>
__device__ __forceinline__ void rotate_and_group_amax(const void* src, DType t,
                                                      const uint8_t* wire, float divisor,
                                                      const Hint8Params& p,
                                                      const codecs::RotBlock& blk,
                                                      float (&v)[kSlots], int32_t (&m)[kSlots]) {
  if constexpr (kHop) {
    decode_block(wire, p, blk, v);
    __syncwarp();  // in place: the block's bytes are all read before any lane writes one
  }
  rot::load_block(src, t, blk.off, blk.len, divisor, v, kHop);
  if (p.signs) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) v[k] = __fmul_rn(v[k], codecs::random_sign(rot::elem_of(k)));
  }
  rot::wht_normalized(v, blk.len);
  const int gl = p.group < blk.len ? p.group : blk.len;
#pragma unroll
  for (int k = 0; k < kSlots; ++k)
    m[k] = rot::elem_of(k) < blk.len
               ? static_cast<int32_t>(codecs::f32_bits(v[k]) & codecs::kF32AbsMask)
               : 0;
  const int seg = gl < 32 ? gl : 32;
  for (int o = 1; o < seg; o <<= 1) {
#pragma unroll
    for (int k = 0; k < kSlots; ++k) m[k] = max(m[k], __shfl_xor_sync(rot::kFullMask, m[k], o));
  }
#pragma unroll
  for (int s = 1; s < kSlots; s <<= 1) {
    if (s < (gl >> 5)) {
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
}

// dst <- encode(src / divisor); kHop: dst <- encode((decode(wire) + src) / divisor), wire
// possibly dst itself (see the file comment), hence no __restrict__ on dst.
template <int kSlots, bool kHop>
__global__ void __launch_bounds__(rot::kThreads)
    hint8_encode_kernel(const void* __restrict__ src, DType src_dtype, const uint8_t* wire,
                        float divisor, Hint8Params p, EncodeContext ctx, uint8_t* dst) {
  uint8_t* sc = dst + codecs::rot_scales_offset(p.n);
  const uint64_t prefix = codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank);
  if (blockIdx.x == 0 && p.n + threadIdx.x < codecs::rot_scales_offset(p.n))
    dst[p.n + threadIdx.x] = 0;
  const int64_t blocks = codecs::rot_block_count(p.n, p.rotation);
  for (int64_t b = rot::global_warp(); b < blocks; b += rot::grid_warps()) {
    const codecs::RotBlock blk = codecs::rot_block(p.n, p.rotation, b);
    float v[kSlots];
    int32_t m[kSlots];
    rotate_and_group_amax<kHop>(src, src_dtype, wire, divisor, p, blk, v, m);
    const int gl = p.group < blk.len ? p.group : blk.len;
    const int64_t g0 = codecs::scale_groups_before(blk.off, p.group);
    uint32_t e = 0;
    const codecs::S8Layout l = codecs::s8_layout(blk, p.group, p.rotation);
    if (p.scale_bits == 8) {
      int32_t r = 0;  // the block's largest finite group amax
#pragma unroll
      for (int k = 0; k < kSlots; ++k)
        if (m[k] < static_cast<int32_t>(codecs::kF32InfBits)) r = max(r, m[k]);
      e = codecs::s8_block_exp(__reduce_max_sync(rot::kFullMask, r));
      if (l.e_byte && (threadIdx.x & 31) == 0) sc[l.base] = static_cast<uint8_t>(e);
    }
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int j = rot::elem_of(k);
      if (j >= blk.len) continue;
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
      int8_t q = 0;
      if (codecs::f32_is_finite(s.s)) {
        q = p.stochastic
                ? codecs::hint8_quantize_sr(
                      v[k], s.s, codecs::sr_uniform_at(prefix, ctx.index + blk.off + j))
                : codecs::hint8_quantize(v[k], s.s);
      }
      reinterpret_cast<int8_t*>(dst)[blk.off + j] = q;
    }
  }
}

template <int kSlots, bool kCast>
__global__ void __launch_bounds__(rot::kThreads)
    hint8_decode_kernel(const uint8_t* __restrict__ src, Hint8Params p, DecodeOut o) {
  const int64_t blocks = codecs::rot_block_count(p.n, p.rotation);
  for (int64_t b = rot::global_warp(); b < blocks; b += rot::grid_warps()) {
    const codecs::RotBlock blk = codecs::rot_block(p.n, p.rotation, b);
    float v[kSlots];
    decode_block(src, p, blk, v);
    rot::store_block<kCast>(o, blk.off, blk.len, v);
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
  const int grid = rot::grid_for_blocks(codecs::rot_block_count(n, p.rotation));
  rot::with_slots(p.rotation, [&](auto slots) {
    with_flag(in != nullptr, [&](auto hop) {
      hint8_encode_kernel<decltype(slots)::value, decltype(hop)::value>
          <<<grid, rot::kThreads, 0, stream>>>(src, src_dtype, in, divisor, p, ctx,
                                               static_cast<uint8_t*>(dst));
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
  const int grid = rot::grid_for_blocks(codecs::rot_block_count(n, p.rotation));
  rot::with_slots(p.rotation, [&](auto slots) {
    with_flag(o.out != nullptr, [&](auto cast) {
      hint8_decode_kernel<decltype(slots)::value, decltype(cast)::value>
          <<<grid, rot::kThreads, 0, stream>>>(static_cast<const uint8_t*>(src), p, o);
    });
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

namespace {

void encode_op(const void* src, DType src_dtype, const void* wire_in, int64_t n, const Codec& c,
               float divisor, const EncodeContext& ctx, void* dst, void*, cudaStream_t s) {
  launch_hint8_encode(src, src_dtype, wire_in, n, c, divisor, ctx, dst, s);
}

constexpr DeviceOps kDeviceOps = {encode_op, launch_hint8_decode, false};
[[maybe_unused]] const bool kAttached = attach_device_ops("hint8", kDeviceOps);

}  // namespace

}  // namespace ccompress::cuda
