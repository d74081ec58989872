// mxfp8 / mxfp8_e5m2: OCP Microscaling (MX) v1.0 MXFP8, FP8 elements (E4M3, or E5M2) in blocks of
// 32 with one E8M0 scale per block; and the E8M0 scale both MX families share (mxfp4.h).
//
// Specs: `mxfp8` (E4M3 elements) and `mxfp8_e5m2`; the block is 32 (only :g32 is accepted).
// Codec: group 32, scale_bits 8, fp8_format 0 (E4M3) or 1 (E5M2).
//
// E8M0 scale (one byte, no sign, no mantissa): code c is 2^(c - 127), c = 0..254; c = 255 is NaN.
// Per block of 32 from the run start (the last one shorter), A its largest finite |x|:
//   c = clamp(E(A) - emax, 0, 254), E(A) = A's biased fp32 exponent (0 for 0 and subnormals),
//   so that for a normal A the block's shared exponent is floor(log2 A) - emax, as OCP MX
//   specifies (emax: the element format's largest exponent, 8 for E4M3, 15 for E5M2, 2 for
//   E2M1). Clamping: a block of zeros (A = 0), of non-finite values only, or with A below
//   2^(emax - 126) gets c = 0 (s = 2^-127, a valid scale: every element still codes as
//   x / s, exactly). c never reaches 255: A < 2^128 gives E(A) <= 254 and c <= 252.
//   s = 2^(c - 127) (fp32; c = 0 is the subnormal 2^-127).
// Elements: q = FP8(x / s), round to nearest even, saturating at the format's max (448 E4M3,
//   57344 E5M2): group_codec.h's group_quantize, the fp8 family's own step (x / s is exact, s
//   being a power of two). Decode x' = float(q) * s (group_dequantize): exact but for an fp32
//   subnormal product.
// Wire: [n FP8 codes | ceil(n / 32) E8M0 scale bytes | zero pad to 4];
//   wire_bytes(n) = align4(n + ceil(n / 32)): 8.25 bits per element.
// Bound per element (finite x): with A = 2^k s, k = emax (or k < emax when c was clamped),
//   |x / s| < 2^(emax+1) and |x| <= A, rounding errs by at most half the top spacing times s
//   (16 s for E4M3, 4096 s for E5M2: at most A/16, A/8) and saturation by
//   (|x|/s - max) s < (1 - max / 2^(emax+1)) |x| (A/8 for both), so
//   |x' - x| <= A / 8 + 2^-127 * h_sub + 2^-149,
//   h_sub the half smallest subnormal of the element format (2^-10 E4M3, 2^-17 E5M2: a clamped
//   block's elements below the element format's normal range) and 2^-149 the fp32 subnormal
//   rounding of the decode.
// Non-finite policy (that of the fp8 family, not OCP's NaN scale): NaN and +-Inf are left out
//   of A, so they never spoil their block's scale; NaN stays NaN (code 0x7F) in its own
//   element, +-Inf stays +-Inf in E5M2 (0x7C / 0xFC) and becomes NaN in E4M3 (no Inf there).
//   A decoded scale byte 255 (never written) gives NaN for its block.
#pragma once

#include <cstdint>

#include "codecs/float_convert.h"
#include "codecs/fp8/fp8.h"

namespace ccompress::codecs {

/// Elements per MX block (one E8M0 scale each), in both MX families.
constexpr int32_t kMxBlock = 32;
/// E8M0's NaN code.
constexpr uint32_t kE8M0NaN = 255;

/// The E8M0 code of a block whose largest finite |x| has fp32 bits @p amax_bits (a finite,
/// non-negative pattern), for an element format whose largest exponent is @p emax.
CC_HOST_DEVICE uint32_t mx_scale_code(int32_t amax_bits, int32_t emax) {
  const int32_t c = (amax_bits >> 23) - emax;
  return static_cast<uint32_t>(c < 0 ? 0 : (c > 254 ? 254 : c));
}

/// The scale 2^(code - 127) as fp32 (code 0: the subnormal 2^-127; 255: NaN).
CC_HOST_DEVICE float mx_scale(uint32_t code) {
  const uint32_t bits = code == 0 ? 0x00400000u : (code == kE8M0NaN ? 0x7FC00000u : code << 23);
  return f32_from_bits(bits);
}

/// 1 / mx_scale(code) = 2^(127 - code), for the codes an encoder writes (0..252): x / s and
/// x * mx_inv_scale(code) are the same real number, so they round to the same fp32 value
/// (both are single IEEE operations; nothing is flushed to zero), and loops multiply.
CC_HOST_DEVICE float mx_inv_scale(uint32_t code) { return f32_from_bits((254u - code) << 23); }

/// Byte offset of the scales in an MX wire buffer whose codes take @p code_bytes bytes, and
/// the buffer's size for n elements.
CC_HOST_DEVICE int64_t mx_wire_bytes(int64_t code_bytes, int64_t n) {
  return (code_bytes + (n + kMxBlock - 1) / kMxBlock + 3) & ~int64_t(3);
}

/// The largest exponent of an FP8 element format (8 for E4M3, 15 for E5M2).
template <class F>
constexpr int32_t fp8_emax() {
  return static_cast<int32_t>(F::kMaxF32Bits >> 23) - 127;
}

}  // namespace ccompress::codecs
