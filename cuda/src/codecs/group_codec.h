// Per-group scaled FP8 codec (fp8_e4m3:gG / fp8_e5m2:gG), element by element so that a CPU
// loop and a CUDA block compute the same bits. See codec.h for the format and its bound.
#pragma once

#include <cstdint>

#include "codecs/float_convert.h"
#include "codecs/fp8.h"

namespace ccompress::codecs {

/// Byte offset of the fp32 scales in a wire buffer of n FP8 elements: payload padded to 4.
CC_HOST_DEVICE int64_t fp8_scales_offset(int64_t n) { return (n + 3) & ~int64_t(3); }

/// Folds |x| into a running amax kept as fp32 bits. Non-finite elements are skipped so one
/// NaN or Inf does not wipe out its group. For non-negative floats the bit patterns order
/// like the values, so an integer max is exact, order-independent and vectorizes.
CC_HOST_DEVICE uint32_t amax_bits_update(uint32_t amax_bits, float x) {
  uint32_t a = f32_bits(x) & kF32AbsMask;
  return (a < kF32InfBits && a > amax_bits) ? a : amax_bits;
}

/// s = max(amax / FP8_MAX, FLT_MIN). The floor keeps s a normal number, so x / s never
/// divides by zero and an all-zero (or all non-finite) group still has a usable scale.
template <class F>
CC_HOST_DEVICE float group_scale(uint32_t amax_bits) {
  float s = div_rn(f32_from_bits(amax_bits), F::kMax);
  float floor = f32_from_bits(kF32MinNormalBits);
  return s > floor ? s : floor;
}

/// q = fp8(x / s), except that +-Inf keeps its own code (E5M2) or becomes NaN (E4M3): the
/// satfinite conversion alone would turn it into +-max and hide it.
template <class F>
CC_HOST_DEVICE uint8_t group_quantize(float x, float s) {
  uint32_t u = f32_bits(x);
  if ((u & kF32AbsMask) == kF32InfBits) {
    return F::kHasInf ? static_cast<uint8_t>(((u >> 24) & 0x80u) | (F::kMaxCode + 1u)) : kFp8NaN;
  }
  return fp8_from_float<F>(div_rn(x, s));
}

/// x' = float(q) * s (one rounding, never fused with a following add).
template <class F>
CC_HOST_DEVICE float group_dequantize(uint8_t q, float s) {
  return mul_rn(fp8_to_float<F>(q), s);
}

}  // namespace ccompress::codecs
