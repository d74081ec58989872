// TACO (docs/algorithms.md, "TACO"): per group of G elements an RMS pre-scale a, a normalised
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
#include "codecs/fp8/fp8.h"
#include "codecs/fp8/group_codec.h"  // floor_small, sr_step, clamp_f, fp8_from_float_sr
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

/// sum(v[i]^2) over a block of len elements, in the warp order of the file comment.
/// Row by row (W consecutive elements, one per lane) rather than lane by lane: each lane adds
/// the same terms in the same order, and the CPU loop over a row is contiguous, so it
/// vectorizes (SSE2 in the baseline copy), where the strided lane loop did not.
CC_HOST_DEVICE float taco_sum_sq(const float* v, int32_t len) {
  float lanes[32];
  const int32_t w = len < 32 ? len : 32;
  for (int32_t l = 0; l < w; ++l) lanes[l] = 0.0f;
  for (int32_t r = 0; r < len; r += w)
    for (int32_t l = 0; l < w; ++l) lanes[l] = add_rn(lanes[l], mul_rn(v[r + l], v[r + l]));
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

/// The (a, s) pair a non-finite group stores.
CC_HOST_DEVICE float taco_nan() { return f32_from_bits(kF32QNaNBits); }

}  // namespace ccompress::codecs
