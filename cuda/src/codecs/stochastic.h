// Stochastic rounding noise: a counter-based hash of (seed, step, rank, element index), so a
// result never depends on thread scheduling, slice size or device, and the same call with the
// same seed and step reproduces its bits.
#pragma once

#include <cstdint>

#include "ccompress/common.h"

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
