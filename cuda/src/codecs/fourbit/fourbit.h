// What the 4-bit codecs (nvfp4.h: E2M1, hint4.h: symmetric int4) share: the wire layout of
// two 4-bit codes per byte under a two-level scale, the group-scale formats, the per-element
// quantize step with its non-finite marker, and the rotation of a run into Walsh-Hadamard
// coefficients. Each format supplies a policy Q with
//   kQMax                      the largest |value| of its grid (6 for E2M1, 7 for int4)
//   quantize_rn(v)             nibble of finite v: round to nearest even, saturating at kQMax
//   quantize_sr(v, u)          nibble of finite v: stochastic rounding with a uniform u in [0, 1)
//   dequantize(nibble)         the grid value (NaN for kNibbleNaN)
#pragma once

#include <cstdint>

#include "codecs/float_convert.h"
#include "codecs/fp8/fp8.h"
#include "codecs/hadamard.h"
#include "codecs/rotation_blocks.h"

namespace ccompress::codecs {

/// The nibble of a non-finite element. Both grids leave it free: it is E2M1's negative zero
/// (zeros are always written as +0) and int4's -8 (the symmetric grid stops at -7). It decodes
/// to NaN, so NaN stays NaN and +-Inf becomes NaN, in its own element only.
constexpr uint8_t kNibbleNaN = 0x8;
/// Elements under one fp32 run scale (Codec::run_block): a collective's slices are multiples
/// of it, so the run scales do not depend on the slice size (32 bits per 65536 elements).
constexpr int32_t kFourbitRunBlock = 1 << 16;

/// Byte offsets of a run of n elements: [codes | group scales | zero pad to 4 | fp32 run scale].
/// Element 2k is the low nibble of byte k, element 2k+1 the high one (NVIDIA's packed fp4x2
/// order); the high nibble of an odd run's last byte is 0. Group scales are 1 or 2 bytes each
/// (2: little-endian), one per G elements from the run start, the last group shorter.
struct FourBitLayout {
  int64_t scales;     ///< first group-scale byte
  int64_t run_scale;  ///< the fp32 run scale (4-byte aligned within the wire buffer)
  int64_t total;      ///< wire_bytes(n): 0 for n = 0 (nothing is sent)
};

CC_HOST_DEVICE FourBitLayout fourbit_layout(int64_t n, int32_t group, int32_t scale_bytes) {
  FourBitLayout l;
  l.scales = (n + 1) / 2;
  l.run_scale = (l.scales + (n + group - 1) / group * scale_bytes + 3) & ~int64_t(3);
  l.total = n > 0 ? l.run_scale + 4 : 0;
  return l;
}

/// Largest value a group scale takes: E4M3's max (448), or 2^15 for fp16 (exact, and the
/// scale rounded up from 2^15 * (1 + 2^-22) still fits below fp16's 65504).
CC_HOST_DEVICE float group_scale_max(int32_t scale_bits) {
  return scale_bits == 8 ? 448.0f : 32768.0f;
}

/// The fp32 run scale s = max(amax_run / (qmax * scale_max), FLT_MIN) (NVIDIA's "global"
/// scale: it maps the run's largest |value| onto the largest group scale times the largest
/// grid value). amax_run is over finite values; the floor keeps s a normal number.
CC_HOST_DEVICE float fourbit_run_scale(int32_t amax_bits, float qmax, int32_t scale_bits) {
  float s = div_rn(f32_from_bits(static_cast<uint32_t>(amax_bits)),
                   mul_rn(qmax, group_scale_max(scale_bits)));  // 2688, 3136, 229376: exact
  float floor = f32_from_bits(kF32MinNormalBits);
  return s > floor ? s : floor;
}

/// The code of a group's scale t = (amax_g / qmax) / s in the group-scale format (E4M3 or
/// fp16), rounded to nearest even (saturating at 448 for E4M3), or, with @p round_up (used by
/// stochastic rounding, which must not clip to stay unbiased), to the smallest value >= t.
CC_HOST_DEVICE uint32_t encode_group_scale(int32_t amax_bits, float qmax, float s,
                                           int32_t scale_bits, bool round_up) {
  float t = div_rn(div_rn(f32_from_bits(static_cast<uint32_t>(amax_bits)), qmax), s);
  if (scale_bits == 8) {
    uint32_t c = fp8_from_float<Fp8E4M3>(t);
    bool below = fp8_to_float<Fp8E4M3>(static_cast<uint8_t>(c)) < t;
    return c + ((round_up && below && c < Fp8E4M3::kMaxCode) ? 1u : 0u);
  }
  uint32_t c = f16_from_float(t);
  return c + ((round_up && f16_to_float(static_cast<uint16_t>(c)) < t) ? 1u : 0u);
}

/// The effective step of a group: d = float(scale code) * s, one fp32 rounding.
CC_HOST_DEVICE float group_step(uint32_t code, float s, int32_t scale_bits) {
  float g = scale_bits == 8 ? fp8_to_float<Fp8E4M3>(static_cast<uint8_t>(code))
                            : f16_to_float(static_cast<uint16_t>(code));
  return mul_rn(g, s);
}

/// Nibble of element x in a group of step d. A zero step (a group of zeros, or one whose
/// scale underflowed the format) codes every finite element as 0. The division is done
/// unconditionally (by 1 for d = 0) so that CPU loops vectorize: GCC does not speculate a
/// floating-point operation that only one branch uses.
template <class Q>
CC_HOST_DEVICE uint8_t fourbit_quantize(float x, float d, bool stochastic, float u) {
  float v = div_rn(x, d > 0.0f ? d : 1.0f);
  v = d > 0.0f ? v : 0.0f;
  uint8_t q = stochastic ? Q::quantize_sr(v, u) : Q::quantize_rn(v);
  return f32_is_finite(x) ? q : kNibbleNaN;
}

/// x' = value(nibble) * d, one rounding.
template <class Q>
CC_HOST_DEVICE float fourbit_dequantize(uint8_t nibble, float d) {
  return mul_rn(Q::dequantize(nibble), d);
}

/// Forward rotation of one block of p elements in place: v <- WHT(sign * v) / sqrt(p).
CC_HOST_DEVICE void rotate_block(float* v, int32_t p, bool random_signs) {
  if (random_signs)
    for (int32_t j = 0; j < p; ++j) v[j] = mul_rn(v[j], random_sign(static_cast<uint32_t>(j)));
  wht_normalized(v, p);
}

/// Inverse of rotate_block (the normalised transform is its own inverse): v <- sign * WHT(v).
CC_HOST_DEVICE void unrotate_block(float* v, int32_t p, bool random_signs) {
  wht_normalized(v, p);
  if (random_signs)
    for (int32_t j = 0; j < p; ++j) v[j] = mul_rn(v[j], random_sign(static_cast<uint32_t>(j)));
}

/// Length of the rotation block (rotation_blocks.h) holding element j of a run of n elements,
/// and its first element in *start.
CC_HOST_DEVICE int32_t rotation_block_of(int64_t j, int64_t n, int32_t h, int64_t* start) {
  int64_t full = n - n % h;
  if (j < full) {
    *start = j - j % h;
    return h;
  }
  int32_t tail = static_cast<int32_t>(n % h);
  int64_t off = full;
  for (int32_t p = h >> 1; p > 0; p >>= 1) {
    if (!(tail & p)) continue;
    if (j < off + p) {
      *start = off;
      return p;
    }
    off += p;
  }
  *start = j;
  return 1;  // not reached for j < n
}

}  // namespace ccompress::codecs
