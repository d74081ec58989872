// mxfp4: OCP Microscaling (MX) v1.0 MXFP4, E2M1 elements in blocks of 32 with one E8M0 scale
// per block (the scale of mxfp8.h, with E2M1's emax = 2).
//
// Spec: `mxfp4` (only :g32 is accepted). Codec: group 32, scale_bits 8.
//
// Per block of 32 from the run start (the last one shorter), A its largest finite |x|:
//   c = mx_scale_code(A, 2) (E8M0: floor(log2 A) - 2, clamped to 0..254; a block of zeros gets
//   c = 0), s = mx_scale(c) = 2^(c - 127);
//   q = E2M1(x / s), round to nearest even, saturating at +-6 (nvfp4.h's E2M1 grid through
//   fourbit.h's fourbit_quantize, as mxfp4_quantize; x / s is exact, s being a power of two).
// Decode: x' = value(q) * s (fourbit_dequantize), exact but for an fp32 subnormal product.
// Wire: [ceil(n/2) bytes: element 2k in the low nibble of byte k, 2k+1 in the high one (an odd
//   run's last high nibble is 0; fourbit.h's order) | ceil(n/32) E8M0 scale bytes | zero pad
//   to 4]; wire_bytes(n) = align4(ceil(n/2) + ceil(n/32)): 4.25 bits per element.
// Bound per element (finite x): |x / s| < 8 and A >= 4 s (unless clamped), so rounding errs by
//   at most half the top spacing (1 s <= A/4) and saturation by (|x|/s - 6) s < |x| / 4:
//   |x' - x| <= A / 4 + 2^-129 + 2^-149
//   (2^-129: half the smallest E2M1 step, 0.5, under the smallest scale 2^-127, for clamped
//   blocks; 2^-149: the fp32 subnormal rounding of the decode).
// Non-finite policy (nvfp4's): NaN and +-Inf are left out of A (they never spoil a scale) and
//   coded as nibble 0x8 (kNibbleNaN, E2M1's negative zero: zeros are always written +0), which
//   decodes to NaN: NaN stays NaN and +-Inf becomes NaN, in its own element only. A decoded
//   scale byte 255 (never written) gives NaN for its block.
#pragma once

#include <cstdint>

#include "codecs/fourbit/fourbit.h"
#include "codecs/mxfp8/mxfp8.h"
#include "codecs/nvfp4/nvfp4.h"

namespace ccompress::codecs {

/// E2M1's largest exponent (6 = 1.5 * 2^2).
constexpr int32_t kE2M1Emax = 2;

/// fourbit_quantize<E2M1>(x, s, false, 0) for s = mx_scale(code) (always > 0), by a multiply
/// with its inverse inv = mx_inv_scale(code) (the same bits as the division): the nibble of
/// x / s rounded to nearest even, saturating at 6, kNibbleNaN for non-finite x.
CC_HOST_DEVICE uint8_t mxfp4_quantize(float x, float inv) {
  const uint8_t q = E2M1::quantize_rn(mul_rn(x, inv));
  return f32_is_finite(x) ? q : kNibbleNaN;
}

/// Byte offset of the E8M0 scales in an mxfp4 wire buffer of n elements (after the codes).
CC_HOST_DEVICE int64_t mxfp4_scales_offset(int64_t n) { return (n + 1) / 2; }

}  // namespace ccompress::codecs
