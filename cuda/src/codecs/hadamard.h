// Walsh-Hadamard transform of a power-of-two block, normalised by 1/sqrt(h) so that it is
// its own inverse (up to rounding), and the fixed random signs some codecs apply first.
// The butterfly order is fixed and every operation is an explicitly rounded fp32 add or
// multiply, so host and device produce the same bits.
#pragma once

#include <cstdint>

#include "ccompress/common.h"
#include "codecs/float_convert.h"

namespace ccompress::codecs {

/// True for 1, 2, 4, ...
CC_HOST_DEVICE bool is_pow2(int32_t h) { return h > 0 && (h & (h - 1)) == 0; }

/// 1/sqrt(h) rounded to fp32, for h a power of two up to 2^30: exact for even log2(h),
/// otherwise sqrt(1/2) times an exact power of two.
CC_HOST_DEVICE float wht_norm(int32_t h) {
  int lg = 0;
  while ((1 << lg) < h) ++lg;
  float p = 1.0f;
  for (int i = 0; i < lg / 2; ++i) p = p * 0.5f;  // exact
  return (lg & 1) ? mul_rn(p, 0.70710678118654752f) : p;
}

/// In-place unnormalised fast Walsh-Hadamard transform of v[0..h), h a power of two.
CC_HOST_DEVICE void fwht(float* v, int32_t h) {
  for (int32_t len = 1; len < h; len <<= 1)
    for (int32_t i = 0; i < h; i += len << 1)
      for (int32_t j = i; j < i + len; ++j) {
        float a = v[j], b = v[j + len];
        v[j] = add_rn(a, b);
        v[j + len] = add_rn(a, -b);
      }
}

/// In-place normalised transform: v <- H v / sqrt(h). Applying it twice gives v back up to
/// rounding.
CC_HOST_DEVICE void wht_normalized(float* v, int32_t h) {
  fwht(v, h);
  float s = wht_norm(h);
  for (int32_t i = 0; i < h; ++i) v[i] = mul_rn(v[i], s);
}

/// The fixed +-1 sign of position i of a rotation block (same for every block, rank and
/// call, so no state is needed to undo it): bit 0 of a 32-bit integer hash of i.
CC_HOST_DEVICE float random_sign(uint32_t i) {
  uint32_t x = i * 0x9E3779B1u + 0x7F4A7C15u;
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return (x & 1u) ? -1.0f : 1.0f;
}

}  // namespace ccompress::codecs
