// TACO (ALGORITHMS.md §1): per group of G elements an RMS pre-scale a, a normalised
// Walsh-Hadamard transform (no random signs), an absmax scale s and FP8 codes.
//
// Format `taco:gG` / `taco_e5m2:gG` (G a power of two in 32..512, default 128), one run of n:
//   groups: rotation blocks of rotation_blocks.h with h = G; the tail's smaller power-of-two
//           blocks are groups of their own (same formulas with G replaced by their length p).
//   encode: a = clamp(FP8_MAX / sqrt(sum(x^2) / p + 1e-6), 1e-3, 1e3); y = WHT(a * x) / sqrt(p);
//           s = clamp(max|y| / FP8_MAX, 1e-12, 1e6); q = fp8(y / s) saturating, RNE (or `:sr`
//           stochastic rounding between the two neighbouring FP8 values).
//   decode: x' = WHT(float(q) * s) / sqrt(p) / a.
//   wire:   [n FP8 codes | zero padding to 4 | (a, s) fp32 pair per group, in group order]
//           wire_bytes(n) = align4(n) + 8 * (floor(n / G) + popcount(n mod G)).
// sum(x^2) is summed in a fixed order (taco_sum_sq) so that a warp and a CPU loop get the same
// bits: element j goes to lane j mod W (W = min(32, p)), lanes add their elements in order,
// then lanes fold pairwise (lane l += lane l + off, off = W/2 .. 1).
// Range (inherited from the source's clamps): a and s cancel in exact arithmetic, so the
// relative error is FP8's (2^-4 per coefficient, E4M3) while max|x| of a group stays within
// about 1e-16 .. 4e11 (measured on Gaussian groups); below, s sits at its 1e-12 floor and the
// codes go subnormal; above, s sits at 1e6 and the codes saturate. y cannot overflow:
// a >= 1e-3 keeps |y| <= 512 * 3.4e35.
// Non-finite policy: a group with a NaN or Inf input (or a coefficient that overflows) stores
// a = s = NaN and zero codes, so all p of its decoded values are NaN; other groups are
// untouched (their scales never see it).
#pragma once

#include <cstdint>

#include "codecs/float_convert.h"
#include "codecs/fp8.h"
#include "codecs/stochastic.h"

namespace ccompress::codecs {

constexpr float kTacoEps = 1e-6f;
constexpr float kTacoAMin = 1e-3f, kTacoAMax = 1e3f;
constexpr float kTacoSMin = 1e-12f, kTacoSMax = 1e6f;
constexpr uint32_t kF32QNaNBits = 0x7FC00000u;

CC_HOST_DEVICE float sqrt_rn(float x) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(x);
#else
  return __builtin_sqrtf(x);
#endif
}

/// floor(t) for |t| <= 2^22, exact, with no branch or libm call (random data would make a
/// branch mispredict half the time): round to nearest by adding and subtracting 1.5 * 2^23,
/// then add -1 where that rounded up (r - t > 0; exact) and +0 elsewhere (r is never -0).
/// The -1 / +0 is selected with an integer mask, which compilers do not turn into a jump.
CC_HOST_DEVICE float floor_small(float t) {
  float r = add_rn(add_rn(t, 12582912.0f), -12582912.0f);
  int32_t d = static_cast<int32_t>(f32_bits(add_rn(r, -t)));
  uint32_t mask = 0u - static_cast<uint32_t>(d > 0);
  return add_rn(r, f32_from_bits(mask & 0xBF800000u));  // -1.0f or +0.0f
}

/// 1 with probability frac for a uniform u in [0, 1) and 0 <= frac < 1 (u < frac, compared as
/// the bit patterns of non-negative floats, which order alike), as a masked 1.0f / +0.0f.
CC_HOST_DEVICE float sr_step(float u, float frac) {
  uint32_t mask = 0u - static_cast<uint32_t>(f32_bits(u) < f32_bits(frac));
  return f32_from_bits(mask & 0x3F800000u);
}

/// lo <= v <= hi; NaN passes through (its group is flagged non-finite anyway).
CC_HOST_DEVICE float clamp_f(float v, float lo, float hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

/// sum(v[i]^2) over a block of len elements, in the warp order of the file comment.
CC_HOST_DEVICE float taco_sum_sq(const float* v, int32_t len) {
  float lanes[32];
  const int32_t w = len < 32 ? len : 32;
  for (int32_t l = 0; l < w; ++l) {
    float s = 0.0f;
    for (int32_t j = l; j < len; j += w) s = add_rn(s, mul_rn(v[j], v[j]));
    lanes[l] = s;
  }
  for (int32_t off = w >> 1; off > 0; off >>= 1)
    for (int32_t l = 0; l < off; ++l) lanes[l] = add_rn(lanes[l], lanes[l + off]);
  return lanes[0];
}

/// The RMS pre-scale a of a block of len elements from its sum of squares.
template <class F>
CC_HOST_DEVICE float taco_prescale(float sum_sq, int32_t len) {
  float mean = div_rn(sum_sq, static_cast<float>(len));
  return clamp_f(div_rn(F::kMax, sqrt_rn(add_rn(mean, kTacoEps))), kTacoAMin, kTacoAMax);
}

/// The absmax scale s from the largest |y| (as fp32 bits; finite).
template <class F>
CC_HOST_DEVICE float taco_scale(int32_t amax_bits) {
  return clamp_f(div_rn(f32_from_bits(static_cast<uint32_t>(amax_bits)), F::kMax), kTacoSMin,
                 kTacoSMax);
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

/// The (a, s) pair a non-finite group stores.
CC_HOST_DEVICE float taco_nan() { return f32_from_bits(kF32QNaNBits); }

}  // namespace ccompress::codecs
