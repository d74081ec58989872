// Symmetric int4 (-7..7) for `hint4`: a Walsh-Hadamard rotation, then a uniform 4-bit grid per
// scale group under the two-level scale of fourbit.h. The format, its bound and its policies
// are documented at the registration (int4_cpu.cc).
#pragma once

#include <cstdint>

#include "codecs/fourbit.h"
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
