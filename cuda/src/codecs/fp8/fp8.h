// FP8 E4M3 / E5M2 <-> fp32, bit-exact with the hardware's `cvt.rn.satfinite` conversion:
// round to nearest even (normals and subnormals), finite overflow and +-Inf saturate to
// +-max, NaN becomes 0x7F. Decoding is exact (every FP8 value is an fp32).
#pragma once

#include <cstdint>

#include "codecs/float_convert.h"

namespace ccompress::codecs {

/// E4M3 ("fn" variant, as in the OCP spec and ml_dtypes.float8_e4m3fn): no Inf,
/// S.1111.111 is NaN, max 448, min normal 2^-6, min subnormal 2^-9.
struct Fp8E4M3 {
  static constexpr int kMantBits = 3;
  static constexpr int kBias = 7;
  static constexpr bool kHasInf = false;
  static constexpr float kMax = 448.0f;
  static constexpr uint32_t kMaxF32Bits = 0x43E00000u;  // 448.0f
  static constexpr uint8_t kMaxCode = 0x7E;
};

/// E5M2 (IEEE-like, ml_dtypes.float8_e5m2): Inf = S.11111.00, NaN = S.11111.{01,10,11},
/// max 57344, min normal 2^-14, min subnormal 2^-16.
struct Fp8E5M2 {
  static constexpr int kMantBits = 2;
  static constexpr int kBias = 15;
  static constexpr bool kHasInf = true;
  static constexpr float kMax = 57344.0f;
  static constexpr uint32_t kMaxF32Bits = 0x47600000u;  // 57344.0f
  static constexpr uint8_t kMaxCode = 0x7B;
};

/// The NaN every conversion produces (both formats; in E5M2 it is S.11111.11).
constexpr uint8_t kFp8NaN = 0x7F;

// One formula for normals, subnormals and saturation: adding C = 2^(e + 23 - m), whose fp32
// ulp is the FP8 spacing at |x| (e = |x|'s exponent clamped to the FP8 normal range), makes
// the fp32 adder round |x| to that spacing, to nearest even; the integer k = bits(|x| + C) -
// bits(C) is then the significand (with the implicit bit for normals, so a carry moves to
// the next binade by itself). Beyond max, and for Inf and NaN, the code exceeds the limit
// and is clamped. There are no branches, so CPU loops vectorize: with -ftrapping-math GCC
// will not vectorize an fp32 add whose result only some paths use.
template <class F>
CC_HOST_DEVICE uint8_t fp8_from_float(float x) {
  constexpr uint32_t kMinExp = 128 - F::kBias;         // fp32 biased exponent of min normal
  constexpr uint32_t kMaxExp = F::kMaxF32Bits >> 23;  // ... and of max
  uint32_t u = f32_bits(x);
  uint32_t a = u & kF32AbsMask;
  bool nan = a > kF32InfBits;
  uint32_t e = a >> 23;
  e = e < kMinExp ? kMinExp : (e > kMaxExp ? kMaxExp : e);
  uint32_t c = (e + 23 - F::kMantBits) << 23;
  uint32_t k = f32_bits(add_rn(f32_from_bits(a), f32_from_bits(c))) - c;
  uint32_t code = ((e - kMinExp) << F::kMantBits) + k;
  uint32_t limit = nan ? uint32_t(kFp8NaN) : uint32_t(F::kMaxCode);  // satfinite
  code = code < limit ? code : limit;
  return static_cast<uint8_t>(code | (nan ? 0u : (u >> 24) & 0x80u));
}

template <class F>
CC_HOST_DEVICE float fp8_to_float(uint8_t q) {
  constexpr uint32_t kExpMask = (1u << (7 - F::kMantBits)) - 1u;
  constexpr uint32_t kMantMask = (1u << F::kMantBits) - 1u;
  uint32_t sign = uint32_t(q & 0x80u) << 24;
  uint32_t e = (q >> F::kMantBits) & kExpMask;
  uint32_t m = q & kMantMask;
  if (e == 0) {
    // m * 2^(1 - bias - mant_bits): a small integer times a power of two, exact.
    float v = mul_rn(static_cast<float>(m),
                     f32_from_bits(uint32_t(128 - F::kBias - F::kMantBits) << 23));
    return f32_from_bits(f32_bits(v) | sign);
  }
  if (F::kHasInf) {
    if (e == kExpMask) return f32_from_bits(sign | kF32InfBits | (m << (23 - F::kMantBits)));
  } else if (e == kExpMask && m == kMantMask) {
    return f32_from_bits(sign | 0x7FC00000u);
  }
  return f32_from_bits(sign | ((e + 127u - F::kBias) << 23) | (m << (23 - F::kMantBits)));
}

}  // namespace ccompress::codecs
