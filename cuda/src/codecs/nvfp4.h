// NVFP4: E2M1 values in 16-element blocks with E4M3 block scales under one fp32 scale per
// encoded run (NVIDIA's two-level recipe), optionally after a Walsh-Hadamard rotation.
// The format, its bound and its policies are documented at the registration (nvfp4_cpu.cc);
// the layout and the shared scale steps are in fourbit.h.
#pragma once

#include <cstdint>

#include "codecs/fourbit.h"
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
