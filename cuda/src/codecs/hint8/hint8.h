// hint8: a normalised Walsh-Hadamard rotation, then symmetric int8 per scale group.
//
// Format `hint8[:gG][:hH][:rs][:s32|:s16|:s8][:sr]`, one run of n elements; the default,
// `hint8` = `hint8:g16:h128:s8`, is exactly 8.5 bits per element for whole blocks:
//   blocks: rotation blocks of rotation_blocks.h (H a power of two in 16..1024, default 128,
//           or G if larger; the tail is cut into the powers of two of n mod H); scale groups
//           of G elements (G a power of two in 8..H, default 16) tile each block.
//   encode: y = WHT(sign * x) / sqrt(p) over each block of p elements (sign = random_sign(j)
//           of hadamard.h with `:rs`, else 1); per group amax = max|y|,
//           s = max(amax / 127, FLT_MIN), then the stored scale s' >= s (below);
//           q = RNE(clamp(y / s', +-127)) as int8 (`:sr`: floor(y/s') + [u < frac], u the
//           sr_uniform draw of coefficient i of the run at index + i).
//   decode: x' = sign * WHT(q * s') / sqrt(p).
//   bound:  per coefficient |q s' - y| <= s'/2 (`:sr`: < s'), so over a block
//           ||x' - x|| <= sqrt(sum over its groups of len * (s'/2)^2), plus fp32 rounding of
//           the two rotations (~1e-6 relative).
//   scales: s8 (default), a two-level scale in one byte per group: a per-block exponent E
//           (2^(E-127) the smallest power of two >= the block's largest finite s) and per
//           group a 7-bit code c with s' = 2^(E-127) * 2^(-c/16), computed as
//           (2^(E-127) * T[c mod 16]) * 2^-(c div 16) (T the fp32 table below), c in 0..126
//           the largest code with s' >= s: rounded up, so nothing clips; steps at most 4.4%
//           coarser (about 5% more error than s32 on real tensors, which includes losing the
//           exact largest coefficient). Code 127 marks a non-finite group. Groups below
//           2^(E-127) * 2^-7.9 take code 126: after the rotation a block's groups rarely
//           differ that much, and such a group is tiny next to its block anyway. In a block
//           of >= 8 groups, bit 7 of group i's byte (i < 8) holds bit i of E, so the block
//           costs nothing extra; a block of fewer groups stores E in a byte of its own first.
//           A log code was chosen over E4M3 ratios for its even 4.4% resolution.
//           s16: s' = s rounded up to bfloat16 (8 exponent bits keep fp32's range, unlike
//           fp16, so gradients of any magnitude fit; <= 0.8% coarser). s32: s' = s, fp32.
//   wire:   [n int8 codes | zero padding to 4 | scales, block by block in element order],
//           NG = floor(n/G) + popcount(n mod G): s32: 4*NG bytes; s16: 2*NG (bf16);
//           s8: NG + (H < 8G ? floor(n/H) : 0) + popcount((n mod H) & (8G - 1)) (the E bytes).
//           wire_bytes(n) = align4(n) + that.
// Non-finite policy: a group with a NaN or Inf coefficient (a non-finite input anywhere in its
// rotation block, or a rotated sum beyond fp32's range: two inputs near FLT_MAX) stores a NaN
// scale (fp32 / bf16 NaN, s8 code 127) and zero codes; the inverse rotation spreads that NaN
// over exactly its rotation block. Other blocks never see it (nor does E, taken over the
// block's finite groups).
#pragma once

#include <cstdint>
#include <cstring>

#include "codecs/float_convert.h"
#include "codecs/rotation_blocks.h"
#include "codecs/taco/taco.h"  // floor_small, sr_step, sr_prefix: shared with TACO

namespace ccompress::codecs {

constexpr float kInt8Max = 127.0f;
constexpr uint32_t kS8MaxCode = 126;    // 7-bit codes; 127 marks a non-finite group
constexpr uint32_t kS8NaN = 127;
constexpr int32_t kS8SpreadGroups = 8;  // blocks with this many groups spread E over bit 7

/// 2^(-j/16) rounded to fp32 (float32(2.0 ** (-j / 16)) in NumPy), for j = c mod 16. A switch
/// rather than a table: a local array would live in (slow) local memory on the device.
CC_HOST_DEVICE float log_scale_frac(uint32_t j) {
  uint32_t b;
  switch (j & 15u) {
    case 0: b = 0x3f800000u; break;
    case 1: b = 0x3f75257du; break;
    case 2: b = 0x3f6ac0c7u; break;
    case 3: b = 0x3f60ccdfu; break;
    case 4: b = 0x3f5744fdu; break;
    case 5: b = 0x3f4e248cu; break;
    case 6: b = 0x3f45672au; break;
    case 7: b = 0x3f3d08a4u; break;
    case 8: b = 0x3f3504f3u; break;
    case 9: b = 0x3f2d583fu; break;
    case 10: b = 0x3f25fed7u; break;
    case 11: b = 0x3f1ef532u; break;
    case 12: b = 0x3f1837f0u; break;
    case 13: b = 0x3f11c3d3u; break;
    case 14: b = 0x3f0b95c2u; break;
    default: b = 0x3f05aac3u; break;
  }
  return f32_from_bits(b);
}

/// max(q, FLT_MIN) for q = amax / 127 (hint8_base_scale; the CUDA kernels divide their own
/// way, bit for bit).
CC_HOST_DEVICE float hint8_base_of_quotient(float q) {
  float floor = f32_from_bits(kF32MinNormalBits);
  return q > floor ? q : floor;
}

/// max(amax / 127, FLT_MIN): the floor keeps every divisor a normal number.
CC_HOST_DEVICE float hint8_base_scale(int32_t amax_bits) {
  return hint8_base_of_quotient(div_rn(f32_from_bits(static_cast<uint32_t>(amax_bits)), kInt8Max));
}

/// The s8 block exponent: E with 2^(E-127) the smallest power of two >= the block's largest
/// base scale (from its largest finite group amax). 1 <= E <= 248.
CC_HOST_DEVICE uint32_t s8_exp_of_scale(uint32_t base_scale_bits) {
  return (base_scale_bits >> 23) + ((base_scale_bits & 0x7FFFFFu) != 0u ? 1u : 0u);
}
CC_HOST_DEVICE uint32_t s8_block_exp(int32_t amax_bits) {
  return s8_exp_of_scale(f32_bits(hint8_base_scale(amax_bits)));
}

/// s8 scale of code c (<= 126) in a block of exponent E: (2^(E-127) * T[c mod 16]) *
/// 2^-(c div 16), both products exact unless the result is subnormal.
CC_HOST_DEVICE float s8_decode(uint32_t e, uint32_t c) {
  float pow2 = f32_from_bits((127u - (c >> 4)) << 23);
  return mul_rn(mul_rn(f32_from_bits(e << 23), log_scale_frac(c)), pow2);
}

/// The largest code whose scale is still >= s (s <= 2^(E-127), so code 0 always qualifies).
/// The decoded scale does not increase with c, so stepping from any first guess finds it;
/// the guess, 16 log2(2^(E-127) / s) from the fp32 bit patterns (a piecewise-linear log2), is
/// within two codes, and the answer does not depend on it.
/// The guess is at most two codes above the answer, so from lo = guess - 2 the answer is lo
/// plus the number of codes lo + 1 .. lo + 3 (<= 126) that qualify, wherever decode(lo) >= s
/// (or lo = 0) and decode(lo + 4) < s (or lo + 4 > 126): that is checked, and nearly always
/// holds, so the per-group steps (data-dependent branches the CPU mispredicts, which
/// dominated the baseline hint8 encoder's scales) run only where it does not. The same
/// counting as hint8_avx2.cc's s8_scales8.
CC_HOST_DEVICE uint32_t s8_code(uint32_t e, float s) {
  int64_t d = int64_t(e << 23) - int64_t(f32_bits(s));
  int64_t c = d <= 0 ? 0 : (d * 16) >> 23;
  c = c > int64_t(kS8MaxCode) ? int64_t(kS8MaxCode) : c;
  const int64_t lo = c > 2 ? c - 2 : 0;
  int64_t counted = lo;
  for (int64_t i = 1; i <= 3; ++i)
    counted += int64_t((lo + i <= int64_t(kS8MaxCode)) & (s8_decode(e, uint32_t(lo + i)) >= s));
  const bool bottom = (lo == 0) | (s8_decode(e, uint32_t(lo)) >= s);
  const bool top = (lo + 4 > int64_t(kS8MaxCode)) | (s8_decode(e, uint32_t(lo + 4)) < s);
  if (bottom & top) return static_cast<uint32_t>(counted);
  while (c > 0 && s8_decode(e, uint32_t(c)) < s) --c;
  while (c < int64_t(kS8MaxCode) && s8_decode(e, uint32_t(c + 1)) >= s) ++c;
  return static_cast<uint32_t>(c);
}

/// The scale of an s8 group byte (bit 7 belongs to E) in a block of exponent E.
CC_HOST_DEVICE float s8_read(uint32_t e, uint8_t byte) {
  uint32_t c = byte & 0x7Fu;
  return c == kS8NaN ? f32_from_bits(kF32QNaNBits) : s8_decode(e, c);
}

/// The bfloat16 code of s (positive, finite) rounded toward +Inf.
CC_HOST_DEVICE uint16_t bf16_round_up(float s) {
  uint32_t u = f32_bits(s);
  if (u & 0xFFFFu) u += 0x10000u;
  return static_cast<uint16_t>(u >> 16);
}

/// A group's quantization scale s' and the bits stored for it (fp32 bits, bf16 or the 7-bit
/// s8 code).
struct Hint8Scale {
  float s;
  uint32_t stored;
};

/// From the group's max raw |y| bits (>= Inf bits: non-finite group) and, for s8, its block's
/// exponent E.
/// The same from @p bad (a non-finite group) and, for a finite one, its base scale.
CC_HOST_DEVICE Hint8Scale hint8_scale_of_base(int scale_bits, bool bad, float base, uint32_t e) {
  const float nan = f32_from_bits(kF32QNaNBits);
  if (scale_bits == 8) {
    if (bad) return Hint8Scale{nan, kS8NaN};
    uint32_t c = s8_code(e, base);
    return Hint8Scale{s8_decode(e, c), c};
  }
  if (scale_bits == 16) {
    if (bad) return Hint8Scale{nan, 0x7FC0u};
    uint16_t b = bf16_round_up(base);
    return Hint8Scale{bf16_to_float(b), b};
  }
  if (bad) return Hint8Scale{nan, kF32QNaNBits};
  return Hint8Scale{base, f32_bits(base)};
}

CC_HOST_DEVICE Hint8Scale hint8_make_scale(int scale_bits, int32_t amax_bits, uint32_t e) {
  const bool bad = amax_bits >= static_cast<int32_t>(kF32InfBits);
  return hint8_scale_of_base(scale_bits, bad, bad ? 0.0f : hint8_base_scale(amax_bits), e);
}

/// Bytes of the scale section before element m of a run (m a block boundary, or n): 4 or 2
/// per group, or for s8 one per group plus one E byte per block of fewer than 8 groups (the
/// tail pieces shorter than 8 G, and every block when H < 8 G).
CC_HOST_DEVICE int64_t hint8_scale_bytes_before(int scale_bits, int64_t m, int32_t g, int32_t h) {
  const int64_t ng = scale_groups_before(m, g);
  if (scale_bits != 8) return ng * (scale_bits / 8);
  const int64_t full = h < kS8SpreadGroups * g ? m / h : 0;
  return ng + full + popcount64(static_cast<uint64_t>(m % h) & uint64_t(kS8SpreadGroups * g - 1));
}

/// Where a block's s8 bytes are: group i's byte at base + (e_byte ? 1 : 0) + i.
struct S8Layout {
  int64_t base;
  bool e_byte;
};

CC_HOST_DEVICE S8Layout s8_layout(const RotBlock& blk, int32_t g, int32_t h) {
  const int32_t k = blk.len > g ? blk.len / g : 1;
  return S8Layout{hint8_scale_bytes_before(8, blk.off, g, h), k < kS8SpreadGroups};
}

/// Bit 7 of group i's byte: bit i of E when the block spreads E over its first 8 bytes.
CC_HOST_DEVICE uint8_t s8_exp_bit(const S8Layout& l, uint32_t e, int32_t i) {
  return (!l.e_byte && i < 8) ? static_cast<uint8_t>(((e >> i) & 1u) << 7) : 0;
}

/// E of a block read back from its scale bytes @p b (= sc + base).
CC_HOST_DEVICE uint32_t s8_read_exp(const S8Layout& l, const uint8_t* b) {
  if (l.e_byte) return b[0];
  uint32_t e = 0;
  for (int i = 0; i < 8; ++i) e |= uint32_t(b[i] >> 7) << i;
  return e;
}

/// The s32 / s16 quantization scale of group gi read back from the scale section @p sc.
CC_HOST_DEVICE float hint8_read_scale(int scale_bits, const uint8_t* sc, int64_t gi) {

#if defined(__CUDA_ARCH__)
  if (scale_bits == 16) return bf16_to_float(reinterpret_cast<const uint16_t*>(sc)[gi]);
  return reinterpret_cast<const float*>(sc)[gi];
#else
  // memcpy: a host buffer handed in from Python need not be aligned.
  if (scale_bits == 16) {
    uint16_t b;
    std::memcpy(&b, sc + 2 * gi, 2);
    return bf16_to_float(b);
  }
  float s;
  std::memcpy(&s, sc + 4 * gi, 4);
  return s;
#endif
}

/// RNE(clamp(y / s, +-127)). Adding and subtracting 1.5 * 2^23 rounds any |t| <= 2^22 to an
/// integer, ties to even, with two plain fp32 adds; the clamp is then on integers. Both keep
/// the CPU loop free of float branches, so it vectorizes. A finite group's scale is at least
/// amax / 127 rounded to nearest, so |y / s| <= 127 (1 + 2^-23) and the trick applies.
/// As an int32 (-127..127), for loops that keep 32-bit lanes (host_loops.h pack_codes).
/// The code of the quotient t = y / s (hint8_quantize_code; the CUDA kernels divide their own
/// way, bit for bit).
CC_HOST_DEVICE int32_t hint8_code_of_quotient(float t) {
  float r = add_rn(add_rn(t, 12582912.0f), -12582912.0f);
  int32_t k = static_cast<int32_t>(r);
  k = k < -127 ? -127 : k;
  return k > 127 ? 127 : k;
}

CC_HOST_DEVICE int32_t hint8_quantize_code(float y, float s) {
  return hint8_code_of_quotient(div_rn(y, s));
}

CC_HOST_DEVICE int8_t hint8_quantize(float y, float s) {
  return static_cast<int8_t>(hint8_quantize_code(y, s));
}

/// Stochastic rounding of t = y / s: floor(t) + 1 with probability frac(t) = t - floor(t)
/// (exact) for a uniform u in [0, 1), else floor(t); then clamped to +-127 (|t| <= 127
/// (1 + 2^-23) as above), so E[q] = t. Branch-free for the same reasons as hint8_quantize.
/// The stochastic code of the quotient t = y / s (hint8_quantize_sr).
CC_HOST_DEVICE int8_t hint8_sr_code_of_quotient(float t, float u) {
  float k = floor_small(t);
  int32_t q = static_cast<int32_t>(add_rn(k, sr_step(u, add_rn(t, -k))));
  q = q < -127 ? -127 : q;
  return static_cast<int8_t>(q > 127 ? 127 : q);
}

CC_HOST_DEVICE int8_t hint8_quantize_sr(float y, float s, float u) {
  return hint8_sr_code_of_quotient(div_rn(y, s), u);
}

CC_HOST_DEVICE float hint8_dequantize(int8_t q, float s) {
  return mul_rn(static_cast<float>(q), s);
}

}  // namespace ccompress::codecs
