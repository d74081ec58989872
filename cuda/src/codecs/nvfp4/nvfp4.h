// nvfp4 / hnvfp4: NVIDIA's NVFP4 recipe (E2M1 values, 16-element blocks with E4M3 block
// scales, one fp32 scale per encoded run), optionally after a normalised Walsh-Hadamard
// rotation. A run is a piece of at most 65536 elements (Codec::run_block) of a collective's
// slice or of a tensor given to Codec.encode, counted from the chunk (or tensor) start, so the
// run scales are the same whatever the slice size.
//
// Specs: `nvfp4[:g16][:sr]` and `hnvfp4[:g16][:hH][:rs][:sr]` (H a power of two in 2..256,
// default 16). Codec: kind Nvfp4, group 16, scale_bits 8, rotation 0 (nvfp4) or H (hnvfp4).
//
// Encode of a run of n elements (every step one IEEE fp32 rounding, the same on host and GPU):
//   y = x for nvfp4. hnvfp4 rotates each block of p elements (rotation_blocks.h: blocks of H
//     from the run start, the tail n mod H cut into its powers of two, so nothing is padded):
//     y = WHT(sign * x) / sqrt(p), sign = random_sign(j) of hadamard.h with `:rs`, else 1.
//   s = max(A / 2688, FLT_MIN), A the largest finite |y| of the run (2688 = 6 * 448: the run's
//     largest value gets block scale 448 and value 6).
//   Per block of 16 from the run start (the last one shorter), a its largest finite |y|:
//     c = E4M3((a / 6) / s), round to nearest even, satfinite (as NVIDIA does; `:sr` rounds
//         up instead so that nothing clips and the rounding stays unbiased)
//     d = float(c) * s;   q = E2M1(y / d) round to nearest even, saturating at +-6 (d = 0:
//         q = 0). `:sr`: up with probability (|v| - lo) / (hi - lo) between the neighbouring
//         grid values, noise sr_uniform(seed, step, rank, index + j) for the run's j-th element.
//   Why round-to-nearest block scales may clip, and why that is harmless: c can be 2^-4 below
//   a / 6 / s, so the block's largest |y / d| can reach 6 * (1 + 2^-4) = 6.375, which saturates
//   to 6: an error of at most 0.375 d, below the half step (1 d) at the top of the grid.
// Decode: y' = value(q) * d; hnvfp4 then x' = sign * WHT(y') / sqrt(p) per rotation block.
//
// Wire: [ceil(n/2) bytes: element 2k in the low nibble of byte k, 2k+1 in the high one
//   (sign bit 3, exponent bits 2-1, mantissa bit 0) | ceil(n/16) E4M3 block scale bytes |
//   zero pad to 4 | fp32 s]; wire_bytes(n) = n ? align4(ceil(n/2) + ceil(n/16)) + 4 : 0,
//   4.5 bits per element plus 32 per run. hnvfp4 has the same size (no padding).
//
// Bound per element of y (round to nearest), with d, a, s as above:
//   |y' - y| <= (max(d, |y|) / 4 + s / 128) * (1 + 2^-20), and also (as d <= (a/6)(1 + 2^-4)
//   (1 + 2^-22) + s 2^-10, a subnormal E4M3 scale being exact to 2^-10)
//   |y' - y| <= (17/96 * a + s / 128) * (1 + 2^-20).
//   `:sr` (errors up to a whole grid step; c rounded up, d <= (a/6)(1 + 2^-3) + s 2^-9):
//   |y' - y| <= (max(d, |y|) / 2 + s / 128) * (1 + 2^-20), and <= (3/8 * a + s / 128) *
//   (1 + 2^-20); E[y'] = y up to fp32 rounding. hnvfp4, element i of a rotation block b of p elements:
//   |x'_i - x_i| <= p^-1/2 * sum_{j in b} bound(y_j)
//                   + 2^-24 (sqrt(p) + 1)(log2(p) + 2) (||x_b||_2 + ||x'_b||_2)   (rotations).
// Non-finite policy: NaN and +-Inf are left out of A and a (they never spoil a scale) and coded
//   as nibble 0x8 (E2M1's negative zero; zeros are always written +0), which decodes to NaN:
//   nvfp4 keeps NaN (and turns +-Inf into NaN, like fp8_e4m3) in that element only. In
//   hnvfp4 a non-finite element makes every coefficient of its rotation block non-finite, so
//   that block (p elements, and no other) decodes to NaN; so does a finite block whose
//   rotated sum overflows fp32 (|x| ~ FLT_MAX / p).
//
// The layout and the shared scale steps are in codecs/fourbit/fourbit.h.
#pragma once

#include <cstdint>

#include "codecs/fourbit/fourbit.h"
#include "codecs/stochastic.h"

namespace ccompress::codecs {

constexpr int32_t kNvfp4Block = 16;

/// E2M1 (1 sign, 2 exponent, 1 mantissa bit, no Inf/NaN): magnitudes by code 0..7 are
/// 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign.
struct E2M1 {
  static constexpr float kQMax = 6.0f;

  /// Code of |v| rounded to nearest, ties to the even code (the one whose mantissa bit is 0),
  /// saturating at 6. Each comparison is exact, so there is nothing to round differently on
  /// host and device; the midpoints 0.25, 1.25, 2.5, 5 round down (to 0, 1, 2, 4) and
  /// 0.75, 1.75, 3.5 round up (to 1, 2, 4).
  CC_HOST_DEVICE static uint32_t magnitude_rn(float a) {
    return uint32_t(a > 0.25f) + uint32_t(a >= 0.75f) + uint32_t(a > 1.25f) +
           uint32_t(a >= 1.75f) + uint32_t(a > 2.5f) + uint32_t(a >= 3.5f) + uint32_t(a > 5.0f);
  }

  /// Signed nibble; a value that rounds to zero is +0 (code 0), so 0x8 stays free.
  CC_HOST_DEVICE static uint8_t with_sign(uint32_t m, float v) {
    return static_cast<uint8_t>(m | ((m != 0u && (f32_bits(v) >> 31)) ? 8u : 0u));
  }

  CC_HOST_DEVICE static uint8_t quantize_rn(float v) {
    return with_sign(magnitude_rn(f32_from_bits(f32_bits(v) & kF32AbsMask)), v);
  }

  /// Stochastic rounding between the two neighbouring grid values, up with probability
  /// (|v| - lo) / (hi - lo): within [0, 2), [2, 4), [4, 6] the grid is uniform with step 0.5,
  /// 1, 2, so |v| / step is exact and sr_round of it is unbiased. |v| beyond 6 saturates
  /// (the stochastic recipe rounds block scales up, so only fp32 rounding can get there).
  /// The selects compare bits (non-negative floats order like them) so that CPU loops need
  /// no branches; NaN lands anywhere, its nibble is replaced by the caller.
  CC_HOST_DEVICE static uint8_t quantize_sr(float v, float u) {
    uint32_t ab = f32_bits(v) & kF32AbsMask;
    bool lt2 = ab < 0x40000000u, lt4 = ab < 0x40800000u;                      // 2.0f, 4.0f
    float step = f32_from_bits(lt2 ? 0x3F000000u : (lt4 ? 0x3F800000u : 0x40000000u));
    float inv = f32_from_bits(lt2 ? 0x40000000u : (lt4 ? 0x3F800000u : 0x3F000000u));
    uint32_t r = f32_bits(mul_rn(sr_round(mul_rn(f32_from_bits(ab), inv), u), step));
    return with_sign(magnitude_rn(f32_from_bits(r < 0x40C00000u ? r : 0x40C00000u)), v);  // 6
  }

  CC_HOST_DEVICE static float dequantize(uint8_t q) {
    // Magnitude m * 2^e exactly: codes 1..7 -> 0.5, 1, 1.5, 2, 3, 4, 6.
    uint32_t e = (q >> 1) & 3u, m = q & 1u;
    float mag = e == 0 ? 0.5f * float(m) : f32_from_bits(((126u + e) << 23) | (m << 22));
    uint32_t bits = f32_bits(mag) | (uint32_t(q & 8u) << 28);
    return (q & 15u) == kNibbleNaN ? f32_from_bits(0x7FC00000u) : f32_from_bits(bits);
  }
};

}  // namespace ccompress::codecs
