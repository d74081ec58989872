// Stochastic rounding noise: a counter-based hash of (seed, step, rank, element index), so a
// result never depends on thread scheduling, slice size or device, and the same call with the
// same seed and step reproduces its bits.
#pragma once

#include <cstdint>

#include "ccompress/common.h"
#include "codecs/float_convert.h"

namespace ccompress::codecs {

/// SplitMix64's finaliser: a bijective 64-bit mix.
CC_HOST_DEVICE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The part of the hash that depends only on the run (seed, step, rank): loops compute it
/// once and then sr_uniform_at per element.
CC_HOST_DEVICE uint64_t sr_prefix(uint64_t seed, uint64_t step, int32_t rank) {
  uint64_t h = mix64(seed ^ 0x243F6A8885A308D3ull);
  h = mix64(h ^ step);
  return mix64(h ^ static_cast<uint64_t>(static_cast<uint32_t>(rank)));
}

/// A uniform draw in [0, 1) with 24 random bits (exact in fp32) for element @p index.
CC_HOST_DEVICE float sr_uniform_at(uint64_t prefix, int64_t index) {
  uint64_t h = mix64(prefix ^ static_cast<uint64_t>(index));
  return static_cast<float>(h >> 40) * 5.9604644775390625e-8f;  // 2^-24
}

/// sr_uniform_at(sr_prefix(seed, step, rank), index).
CC_HOST_DEVICE float sr_uniform(uint64_t seed, uint64_t step, int32_t rank, int64_t index) {
  return sr_uniform_at(sr_prefix(seed, step, rank), index);
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

/// bfloat16 of f rounded stochastically: |f| goes up to the next bfloat16 with probability
/// (its 16 dropped bits) / 2^16, using 16 of u's 24 bits (adding them to the dropped half
/// carries exactly that often). NaN as bf16_from_float; +-Inf stays; beyond the largest
/// bfloat16 the upper neighbour is Inf.
CC_HOST_DEVICE uint16_t bf16_from_float_sr(float f, float u) {
  uint32_t x = f32_bits(f);
  if ((x & kF32AbsMask) > kF32InfBits) return bf16_from_float(f);
  uint32_t r = static_cast<uint32_t>(mul_rn(u, 65536.0f));  // exact: u has 24 bits
  return static_cast<uint16_t>((x + r) >> 16);
}

/// IEEE half of f rounded stochastically: up to the next half above |f| with probability
/// frac, where |f| = (k + frac) * spacing and spacing is that of |f|'s binade (2^-24 for
/// subnormals); every step exact. From 65536 up (and Inf) the result is Inf, NaN stays NaN,
/// and between 65504 and 65536 the upper neighbour is Inf.
CC_HOST_DEVICE uint16_t f16_from_float_sr(float f, float u) {
  uint32_t x = f32_bits(f);
  uint32_t a = x & kF32AbsMask;
  if (a >= 0x47800000u) return f16_from_float(f);  // >= 65536, Inf, NaN
  uint32_t e = a >> 23;
  e = e < 113u ? 113u : e;  // 2^-14, the smallest normal half: subnormals share its spacing
  float spacing = f32_from_bits((e - 10u) << 23);
  float t = div_rn(f32_from_bits(a), spacing);  // < 2^11
  float k = floor_small(t);
  float r = mul_rn(add_rn(k, sr_step(u, add_rn(t, -k))), spacing);
  return f16_from_float(f32_from_bits(f32_bits(r) | (x & 0x80000000u)));
}

/// Rounds @p y to an integer, down with probability 1 - frac(y) and up with probability
/// frac(y) given a uniform draw u in [0, 1): floor(y + u) — unbiased, E[result] = y.
CC_HOST_DEVICE float sr_round(float y, float u) {
#if defined(__CUDA_ARCH__)
  return floorf(__fadd_rn(y, u));
#else
  return __builtin_floorf(y + u);
#endif
}

}  // namespace ccompress::codecs
