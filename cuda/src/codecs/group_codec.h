// Per-group scaled FP8 codec (fp8_e4m3:gG / fp8_e5m2:gG), element by element so that a CPU
// loop and a CUDA block compute the same bits. See codec.h for the format and its bound.
#pragma once

#include <cstdint>

#include "codecs/float_convert.h"
#include "codecs/fp8.h"
#include "codecs/stochastic.h"

namespace ccompress::codecs {

/// Byte offset of the fp32 scales in a wire buffer of n FP8 elements: payload padded to 4.
CC_HOST_DEVICE int64_t fp8_scales_offset(int64_t n) { return (n + 3) & ~int64_t(3); }

/// |x| as fp32 bits, or 0 for NaN and +-Inf; a group's amax is the max of these. Skipping
/// non-finite elements keeps one NaN or Inf from wiping out its group. Non-negative floats
/// order like their bit patterns, so an integer max is exact and order-independent; it is
/// signed because every value is below 2^31 and SSE2 has no unsigned max (so CPU loops of
/// std::max over these vectorize).
CC_HOST_DEVICE int32_t finite_abs_bits(float x) {
  int32_t a = static_cast<int32_t>(f32_bits(x) & kF32AbsMask);
  return a < int32_t(kF32InfBits) ? a : 0;
}

/// s = max(amax / FP8_MAX, FLT_MIN). The floor keeps s a normal number, so x / s never
/// divides by zero and an all-zero (or all non-finite) group still has a usable scale.
template <class F>
CC_HOST_DEVICE float group_scale(int32_t amax_bits) {
  float s = div_rn(f32_from_bits(static_cast<uint32_t>(amax_bits)), F::kMax);
  float floor = f32_from_bits(kF32MinNormalBits);
  return s > floor ? s : floor;
}

/// q = fp8(x / s), except that +-Inf keeps its own code (E5M2) or becomes NaN (E4M3): the
/// satfinite conversion alone would turn it into +-max and hide it.
template <class F>
CC_HOST_DEVICE uint8_t group_quantize(float x, float s) {
  uint32_t u = f32_bits(x);
  uint32_t inf_code = F::kHasInf ? ((u >> 24) & 0x80u) | (F::kMaxCode + 1u) : kFp8NaN;
  uint8_t q = fp8_from_float<F>(div_rn(x, s));
  return (u & kF32AbsMask) == kF32InfBits ? static_cast<uint8_t>(inf_code) : q;
}

/// Stochastic rounding (`:sr`) of x / s to one of its two neighbouring FP8 values, the upper
/// one with probability (|y| - lo) / (hi - lo) given a uniform u in [0, 1): |y| / spacing is
/// exact (a power-of-two multiply; the spacing is that of |y|'s binade, clamped to the
/// format's normal range like fp8_from_float), so sr_round of it is unbiased. A carry into
/// the next binade is exact, beyond FP8_MAX saturates (x / s <= FP8_MAX up to the rounding
/// of s), and the result is an FP8 value, so the final conversion does not round.
/// Non-finite x codes as in group_quantize.
template <class F>
CC_HOST_DEVICE uint8_t group_quantize_sr(float x, float s, float u) {
  constexpr uint32_t kMinExp = 128 - F::kBias;
  constexpr uint32_t kMaxExp = F::kMaxF32Bits >> 23;
  float y = div_rn(x, s);
  uint32_t a = f32_bits(y) & kF32AbsMask;
  uint32_t e = a >> 23;
  e = e < kMinExp ? kMinExp : (e > kMaxExp ? kMaxExp : e);
  float spacing = f32_from_bits((e - F::kMantBits) << 23);        // 2^(e - 127 - m)
  float inv = f32_from_bits((254u - e + F::kMantBits) << 23);     // its exact reciprocal
  float r = mul_rn(sr_round(mul_rn(f32_from_bits(a), inv), u), spacing);
  r = r > F::kMax ? F::kMax : r;  // NaN stays NaN, and converts to the NaN code
  uint32_t u32 = f32_bits(x);
  uint32_t inf_code = F::kHasInf ? ((u32 >> 24) & 0x80u) | (F::kMaxCode + 1u) : kFp8NaN;
  uint8_t q = fp8_from_float<F>(f32_from_bits(f32_bits(r) | (f32_bits(y) & 0x80000000u)));
  return (u32 & kF32AbsMask) == kF32InfBits ? static_cast<uint8_t>(inf_code) : q;
}

/// x' = float(q) * s (one rounding, never fused with a following add).
template <class F>
CC_HOST_DEVICE float group_dequantize(uint8_t q, float s) {
  return mul_rn(fp8_to_float<F>(q), s);
}

}  // namespace ccompress::codecs
