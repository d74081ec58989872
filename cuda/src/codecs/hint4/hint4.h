// hint4: a normalised Walsh-Hadamard rotation, then symmetric int4 (-7..7) per scale group
// under a two-level scale (the NVFP4 recipe with a uniform grid instead of E2M1), one run of n
// elements at a time (a pipelined slice of a collective, or a whole tensor for Codec.encode).
//
// Spec: `hint4[:gG][:hH][:s8|:s16][:rs][:sr]`, G a power of two in 16..256 (default 16), H a
// power of two in 2..256 (default G). Codec: kind Int4, group G, rotation H, scale_bits 8 / 16.
//
// Encode of a run of n elements (every step one IEEE fp32 rounding, the same on host and GPU):
//   y = WHT(sign * x) / sqrt(p) per rotation block of p elements (rotation_blocks.h: blocks of
//     H from the run start, the tail n mod H cut into its powers of two; nothing padded),
//     sign = random_sign(j) of hadamard.h with `:rs`, else 1.
//   s = max(A / (7 * M), FLT_MIN), A the run's largest finite |y|; M = 448 for s8 (E4M3 group
//     scales, the default), 2^15 for s16 (fp16 group scales).
//   Per group of G from the run start (the last one shorter), a its largest finite |y|:
//     c = E4M3 / fp16 of (a / 7) / s, round to nearest even (E4M3 satfinite); `:sr` rounds up
//     so that nothing clips and the rounding stays unbiased
//     d = float(c) * s;  q = RNE(clamp(y / d, +-7)) (d = 0: q = 0); `:sr`: floor(|y/d| + u)
//         with the sign, u = sr_uniform(seed, step, rank, index + j) for the run's j-th element.
//   As in NVFP4, a round-to-nearest scale can put the group's largest |y / d| at
//   7 * (1 + 2^-4) = 7.44 (E4M3), clipped to 7: an error below the half step d / 2.
// Decode: y' = q * d, then x' = sign * WHT(y') / sqrt(p) per rotation block.
//
// Wire: [ceil(n/2) bytes: element 2k in the low nibble of byte k, 2k+1 in the high one, two's
//   complement | ceil(n/G) group scales, 1 byte (E4M3) or 2 (fp16, little-endian) | zero pad to
//   4 | fp32 s]; wire_bytes(n) = n ? align4(ceil(n/2) + ceil(n/G) * (1 | 2)) + 4 : 0.
//   Bits per element: 4 + 8/G (s8) or 4 + 16/G (s16), plus 32 per run: g16 and g32:s16 are 4.5.
//
// Bound per coefficient y (round to nearest), d, a, s as above: |y' - y| <= (d / 2 + s / 128)
//   * (1 + 2^-20), and also (as d <= (a/7)(1 + 2^-4)(1 + 2^-22) + s 2^-10 for s8, the error
//   of a subnormal scale included) |y' - y| <= (u * a + s / 128) * (1 + 2^-20) with
//   u = 17/224 (s8), (1 + 2^-11) / 14 (s16).
//   `:sr` (errors up to a whole step): |y' - y| <= (d + s / 128)(1 + 2^-20), and the same
//   u-form with u = 9/56 (s8), (1 + 2^-10) / 7 (s16); E[y'] = y up to fp32 rounding.
//   Element i of a rotation block b of p elements:
//   |x'_i - x_i| <= p^-1/2 * sum_{j in b} bound(y_j)
//                   + 2^-24 (sqrt(p) + 1)(log2(p) + 2) (||x_b||_2 + ||x'_b||_2)   (rotations).
// Non-finite policy: NaN and +-Inf are left out of A and a and coded as nibble 0x8 (-8, which
//   the symmetric grid never uses), decoding to NaN. A non-finite element makes every
//   coefficient of its rotation block non-finite, so that block (p elements, no other)
//   decodes to NaN; so does a finite block whose rotated sum overflows fp32.
//
// The layout and the shared scale steps are in codecs/fourbit/fourbit.h.
#pragma once

#include <cstdint>

#include "codecs/fourbit/fourbit.h"
#include "codecs/stochastic.h"

namespace ccompress::codecs {

/// Two's complement nibbles: 0..7 are 0..7, 0x9..0xF are -7..-1; 0x8 (-8) is never a value.
struct Int4 {
  static constexpr float kQMax = 7.0f;

  /// RNE of a in [0, 7] by the 2^23 trick: the fp32 adder drops the fraction, ties to even.
  CC_HOST_DEVICE static uint32_t round_even(float a) {
    return static_cast<uint32_t>(static_cast<int32_t>(add_rn(add_rn(a, 8388608.0f), -8388608.0f)));
  }

  CC_HOST_DEVICE static uint8_t with_sign(uint32_t m, float v) {
    return static_cast<uint8_t>((f32_bits(v) >> 31) ? (16u - m) & 15u : m);
  }

  /// min(|v|, 7) on the bits (non-negative floats order like their bits; NaN gives 7): an
  /// integer select, which GCC vectorizes where it would branch on a float comparison.
  CC_HOST_DEVICE static float clamped_abs(float v) {
    uint32_t a = f32_bits(v) & kF32AbsMask;
    return f32_from_bits(a < 0x40E00000u ? a : 0x40E00000u);  // 7.0f
  }

  CC_HOST_DEVICE static uint8_t quantize_rn(float v) {
    return with_sign(round_even(clamped_abs(v)), v);
  }

  /// floor(|v| + u) on the magnitude: unbiased on a uniform grid (saturating at 7, which the
  /// rounded-up group scale of the stochastic recipe keeps out of reach up to fp32 rounding).
  CC_HOST_DEVICE static uint8_t quantize_sr(float v, float u) {
    uint32_t r = static_cast<uint32_t>(static_cast<int32_t>(sr_round(clamped_abs(v), u)));
    return with_sign(r < 7u ? r : 7u, v);
  }

  CC_HOST_DEVICE static float dequantize(uint8_t q) {
    int32_t s = static_cast<int32_t>(q & 15u);
    s = s >= 8 ? s - 16 : s;
    return s == -8 ? f32_from_bits(0x7FC00000u) : static_cast<float>(s);
  }
};

}  // namespace ccompress::codecs
