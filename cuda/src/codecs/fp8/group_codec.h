// The fp8 family's format: per-group scaled FP8 (fp8_e4m3:gG / fp8_e5m2:gG), element by
// element so that a CPU loop (fp8.cc) and a CUDA block (fp8_kernels.cu) compute the same bits.
//
// `fp8_e4m3:gG`, `fp8_e5m2:gG` (G in 16..1024, default 128): per group of G elements an fp32
// scale s = max(amax / FP8_MAX, FLT_MIN) with amax the largest finite |x| of the group;
// payload q = fp8(x / s) with saturating round-to-nearest-even (the hardware's `satfinite`
// conversion, fp8.h); decode x' = float(q) * s. x / s is an IEEE fp32 division, float(q) * s
// one fp32 multiply, identical on host and device.
// Bound per element (finite x, taken after the divisor), with m mantissa bits, emin the min
// normal exponent (E4M3: m = 3, emin = -6; E5M2: m = 2, emin = -14) and H = FP8_MAX * u the
// half-spacing at the top of the format (u = 1/28 E4M3, 1/14 E5M2):
//   |x' - x| <= min(s * H, |x| * 2^-(m+1) + s * 2^(emin - m - 1)) * (1 + 2^-16).
// While the scale is not floored (amax >= FP8_MAX * FLT_MIN), s * H = amax * u to one fp32
// rounding; the factor (1 + 2^-16) covers the roundings of s, x / s and q * s. (amax * u
// alone does not bound a floored group: there |x'-x| can reach ~amax / 17.)
// Wire: [n FP8 codes | zero pad to 4 | ceil(n / G) fp32 scales];
// wire_bytes(n) = align4(n) + 4 * ceil(n / G).
// `:sr` (stochastic rounding): x / s goes to one of its two neighbouring FP8 values, the upper
// with probability proportional to the distance from the lower (unbiased; noise
// sr_uniform(seed, step, rank, index) of element index); the bound doubles (a whole step).
// Non-finite policy: NaN stays NaN and +-Inf stays +-Inf in its own element (E4M3 has no Inf,
// so there +-Inf becomes NaN); the scale is computed over the finite elements only, so the
// rest of the group is encoded as if the non-finite element were absent. FP8 NaN is written
// as 0x7F, E5M2 Inf as 0x7C / 0xFC.
#pragma once

#include <cstdint>

#include "codecs/float_convert.h"
#include "codecs/fp8/fp8.h"
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
/// As an int32 (0..255), signed throughout like fp8_code, for loops that keep 32-bit lanes.
template <class F>
CC_HOST_DEVICE int32_t group_quantize_code(float x, float s) {
  const int32_t u = static_cast<int32_t>(f32_bits(x));
  const int32_t inf_code = F::kHasInf ? ((u >> 24) & 0x80) | (F::kMaxCode + 1) : kFp8NaN;
  const int32_t q = fp8_code<F>(div_rn(x, s));
  return (u & static_cast<int32_t>(kF32AbsMask)) == static_cast<int32_t>(kF32InfBits) ? inf_code
                                                                                        : q;
}

template <class F>
CC_HOST_DEVICE uint8_t group_quantize(float x, float s) {
  return static_cast<uint8_t>(group_quantize_code<F>(x, s));
}

/// lo <= v <= hi; NaN passes through (its group is flagged non-finite anyway).
CC_HOST_DEVICE float clamp_f(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

/// FP8 code of v (finite) rounded stochastically: up to the next FP8 value above |v| with
/// probability frac, where |v| = (k + frac) * spacing, given a uniform u in [0, 1). |v| is
/// clamped to FP8_MAX first, so the result never leaves the format. Every step is exact:
/// dividing by the spacing (a power of two), floor, the fraction, k * spacing.
template <class F>
CC_HOST_DEVICE uint8_t fp8_from_float_sr(float v, float u) {
  constexpr uint32_t kMinExp = 128 - F::kBias;
  constexpr uint32_t kMaxExp = F::kMaxF32Bits >> 23;
  uint32_t bits = f32_bits(v);
  float a = clamp_f(f32_from_bits(bits & kF32AbsMask), 0.0f, F::kMax);
  uint32_t e = f32_bits(a) >> 23;
  e = e < kMinExp ? kMinExp : (e > kMaxExp ? kMaxExp : e);
  float spacing = f32_from_bits((e - F::kMantBits) << 23);
  float t = div_rn(a, spacing);  // < 2^(m+2): floor_small applies
  float k = floor_small(t);
  float r = mul_rn(add_rn(k, sr_step(u, add_rn(t, -k))), spacing);
  return fp8_from_float<F>(f32_from_bits(f32_bits(r) | (bits & 0x80000000u)));
}

/// True for the fp32 bits @p abs of |v| from FP8's smallest normal to the largest finite
/// fp32: where fp8_from_float_sr_normal codes v.
template <class F>
CC_HOST_DEVICE bool fp8_sr_normal_range(uint32_t abs) {
  constexpr uint32_t kMinNormal = (128u - F::kBias) << 23;
  return abs - kMinNormal <= kF32InfBits - 1u - kMinNormal;
}

/// fp8_from_float_sr<F>(v, N * 2^-24) in integers, for v (fp32 bits @p bits) in
/// fp8_sr_normal_range and N the draw's 24-bit integer: with |v| (clamped to FP8_MAX) =
/// (k + D / 2^d) * spacing, D the d = 23 - m mantissa bits below the kept ones, the
/// reference steps up iff N * 2^-24 < D * 2^-d, i.e. N >> (m + 1) < D, i.e. iff
/// D + (2^d - 1 - (N >> (m + 1))) carries out of those d bits; so the code is the fp32 bits
/// plus that, shifted right by d, less the exponent offset (a carry out of the mantissa steps
/// into the next binade, as k + 1 does; at FP8_MAX, D = 0 and it never carries), with v's
/// sign.
template <class F>
CC_HOST_DEVICE uint8_t fp8_from_float_sr_normal(uint32_t bits, uint32_t n) {
  constexpr uint32_t kMinExp = 128 - F::kBias, kDrop = 23 - F::kMantBits;
  const uint32_t abs = bits & kF32AbsMask;
  const uint32_t a = abs < F::kMaxF32Bits ? abs : F::kMaxF32Bits;
  const uint32_t carry = (n >> (F::kMantBits + 1)) ^ ((1u << kDrop) - 1u);
  const uint32_t code = ((a + carry) >> kDrop) - ((kMinExp - 1) << F::kMantBits);
  return static_cast<uint8_t>(code | ((bits >> 24) & 0x80u));
}

/// Stochastic rounding (`:sr`) of x / s to one of its two neighbouring FP8 values, the upper
/// one with probability exactly (|y| - lo) / (hi - lo) (fp8_from_float_sr); non-finite x codes
/// as in group_quantize.
template <class F>
CC_HOST_DEVICE uint8_t group_quantize_sr(float x, float s, float u) {
  uint32_t u32 = f32_bits(x);
  uint32_t inf_code = F::kHasInf ? ((u32 >> 24) & 0x80u) | (F::kMaxCode + 1u) : kFp8NaN;
  uint8_t q = fp8_from_float_sr<F>(div_rn(x, s), u);
  return (u32 & kF32AbsMask) == kF32InfBits ? static_cast<uint8_t>(inf_code) : q;
}

/// x' = float(q) * s (one rounding, never fused with a following add).
template <class F>
CC_HOST_DEVICE float group_dequantize(uint8_t q, float s) {
  return mul_rn(fp8_to_float<F>(q), s);
}

}  // namespace ccompress::codecs
