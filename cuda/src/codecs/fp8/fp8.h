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
// the next binade by itself). Saturation (satfinite) clamps |x| to max first, as a float:
// rounding a value beyond max gives max or more, and max codes as kMaxCode, so this equals
// clamping the code; NaN fails the compare and takes max too, and gets its code at the end.
// The clamps are fp32 min / max (x < y ? x : y is the minps / maxps rule, NaN giving y) and
// every integer is signed and below 2^31, so a CPU loop of this vectorizes in plain SSE2
// (which has no unsigned 32-bit compare, min or max) without emulating those: the exponent
// clamp, the code clamp and the NaN test cost about a third of the instructions they took as
// unsigned integer compares. There are no branches either: with -ftrapping-math GCC will not
// vectorize an fp32 add whose result only some paths use. The code is an int32 (0..255), so
// that loops can keep it in 32-bit lanes and narrow it with saturating packs at the end.
// With kFinite the caller knows x is not NaN (the NaN select is left out).
template <class F, bool kFinite = false>
CC_HOST_DEVICE int32_t fp8_code(float x) {
  constexpr int32_t kMinExp = 128 - F::kBias;  // fp32 biased exponent of min normal
  const int32_t u = static_cast<int32_t>(f32_bits(x));
  const int32_t a = u & static_cast<int32_t>(kF32AbsMask);
  const float max = f32_from_bits(F::kMaxF32Bits);
  const float abs = f32_from_bits(static_cast<uint32_t>(a));
  const float am = abs < max ? abs : max;              // satfinite; NaN -> max
  const float lo = f32_from_bits(uint32_t(kMinExp) << 23);
  // |x| with its exponent clamped (NaN: lo, its code is replaced below). Comparing abs, not
  // am, keeps GCC from threading the two clamps into branches, which stopped vectorization.
  const float ae = abs > lo ? am : lo;
  const int32_t eb = static_cast<int32_t>(f32_bits(ae) & kF32InfBits);  // e << 23
  const int32_t c = eb + ((23 - F::kMantBits) << 23);
  const int32_t k = static_cast<int32_t>(f32_bits(add_rn(am, f32_from_bits(uint32_t(c))))) - c;
  const int32_t code = k + (eb >> (23 - F::kMantBits)) - (kMinExp << F::kMantBits);
  const int32_t coded = code | ((u >> 24) & 0x80);
  if (kFinite) return coded;
  // NaN (a > Inf's bits) codes as kFp8NaN: a mask from the sign of Inf - a, not a compare,
  // which GCC would again thread into a branch around the clamps.
  const int32_t nan = (static_cast<int32_t>(kF32InfBits) - a) >> 31;
  return (coded & ~nan) | (int32_t(kFp8NaN) & nan);
}

template <class F>
CC_HOST_DEVICE uint8_t fp8_from_float(float x) {
  return static_cast<uint8_t>(fp8_code<F>(x));
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
