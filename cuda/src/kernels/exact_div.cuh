// Correctly rounded fp32 division (IEEE round to nearest even, subnormals kept: the host's
// a / b, bit for bit) without the call that nvcc's division makes for its slow path. That
// call keeps every register live across it, which makes kernels holding a rotation block in
// registers spill. Here every case is inline code: a fast path for the common operands and
// an exact general path, both free of calls.
//
// A divisor is prepared once (prepare_divisor) and then divides many dividends (exact_div):
// b = m * 2^k with 1 <= |m| < 2, its reciprocal r ~ 1/m by Newton steps, and p = 2^-k, so
// that a / b = (a p) / m exactly whenever a p is a normal number.
//
// Fast path (2^-100 <= |a p| < 2^126): q0 = a p r, one correction q1 = q0 + (a p - m q0) r,
// then q1 is within one unit in the last place of Q = a p / m (a faithful rounding; |r m - 1|
// < 2^-21 makes q1's error below 10^-5 ulp before its own rounding). Its remainder
// a p - m q1 is then exact (a multiple of ulp(m) ulp(q1) / 2 of magnitude below 2^24 of those
// units, and no underflow in this range), so comparing it with m times half the spacing to
// each neighbour of q1 (exact: powers of two times m) picks RN(Q) among q1 and its two
// neighbours, ties to even. No theorem on the reciprocal's accuracy is needed beyond
// faithfulness.
//
// General path (everything else: zero, subnormal, huge or non-finite operands): both
// operands normalized to [1, 2), the fast path for the two significands (exact there), and
// the quotient's exponent put back with one rounding, which for a subnormal result uses the
// remainder's sign as the sticky bit (no double rounding).
//
// Checked, when written, against the host's division on 2 x 10^8 cases (every significand of
// the reciprocal, every exponent pair, near-midpoint quotients, subnormal results: all
// equal). In CI, on the emulated runtime and on a GPU: both paths on their own against the
// host's division (kernels/exact_div_check.cu, tests/cuda/test_exact_div.py: every operand
// class and exponent pair, quotients within 2^-24 ulp of a midpoint, subnormal ties), and
// through the hint8 kernels (tests/cuda/test_cuda.py,
// test_hint8_division_extremes_bit_identical_to_cpu). fast_core's q1 errs toward zero: its
// `up` step is reached (e.g. 1 / (2 - 2^-23)), its `dn` step is kept for the faithful bound
// alone (no case of the check, nor of every divisor significand against several dividends,
// needs it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "codecs/float_convert.h"

namespace ccompress::cuda {

/// A divisor prepared for exact_div.
struct Divisor {
  float b;  // the divisor itself (the general path)
  float m;  // b's significand, 1 <= |m| < 2, with b's sign
  float r;  // ~1/m
  float p;  // 2^-k, b = m 2^k; NaN where b is zero, subnormal or not finite (general path)
};

namespace exact_div_detail {

constexpr uint32_t kSign = 0x80000000u;
constexpr uint32_t kAbs = 0x7FFFFFFFu;
constexpr uint32_t kFastLo = 0x0D800000u;  // 2^-100: |a p| from here ...
constexpr uint32_t kFastHi = 0x7E800000u;  // ... to below 2^126 takes the fast path

/// ~1/m for 1 <= m < 2: a linear first guess (error below 1/17) and three Newton steps,
/// |r m - 1| < 2^-21 for every m (checked over all 2^23 significands).
__device__ __forceinline__ float recip_unit(float m) {
  float r = __fmaf_rn(-0.470588235f, m, 1.41176471f);  // 24/17 - 8/17 m
#pragma unroll
  for (int i = 0; i < 3; ++i) r = __fmaf_rn(r, __fmaf_rn(-m, r, 1.0f), r);
  return r;
}

/// RN(a / m) for 1 <= |m| < 2, r ~ 1/m (|r m - 1| < 2^-21), 2^-100 <= |a| < 2^126 (the file
/// comment's fast path).
__device__ __forceinline__ float fast_core(float a, float m, float r) {
  using codecs::f32_bits;
  using codecs::f32_from_bits;
  const float q0 = __fmul_rn(a, r);
  const float q1 = __fmaf_rn(__fmaf_rn(-m, q0, a), r, q0);
  const float e1 = __fmaf_rn(-m, q1, a);  // exact: m (Q - q1)
  const uint32_t uq = f32_bits(q1);
  // |Q| - |q1|, times |m|: the remainder with the dividend's sign taken out
  const float t = f32_from_bits(f32_bits(e1) ^ (f32_bits(a) & kSign));
  const float am = f32_from_bits(f32_bits(m) & kAbs);
  const float hu = __fmul_rn(am, f32_from_bits((uq & 0x7F800000u) - (24u << 23)));  // |m| ulp/2
  const float hd = (uq & 0x7FFFFFu) == 0u ? __fmul_rn(hu, 0.5f) : hu;  // below a power of two
  const bool odd = (uq & 1u) != 0u;
  const bool up = t > hu || (t == hu && odd);
  const bool dn = -t > hd || (-t == hd && odd);
  return f32_from_bits(uq + (up ? 1u : 0u) - (dn ? 1u : 0u));
}

/// |x|'s significand in [1, 2) and its unbiased exponent, for finite non-zero |x| bits ax.
__device__ __forceinline__ float normalize(uint32_t ax, int32_t& k) {
  int32_t adj = 0;
  if (ax < 0x00800000u) {  // subnormal: times 2^64, exact
    ax = codecs::f32_bits(__fmul_rn(codecs::f32_from_bits(ax), 18446744073709551616.0f));
    adj = 64;
  }
  k = static_cast<int32_t>(ax >> 23) - 127 - adj;
  return codecs::f32_from_bits((ax & 0x7FFFFFu) | 0x3F800000u);
}

/// RN(a / b) for every a, b (a NaN for NaN operands, 0 / 0 and Inf / Inf): inline, taken
/// rarely (a branch around it costs nothing where it is not).
__device__ __forceinline__ float div_general(float a, float b) {
  using codecs::f32_bits;
  using codecs::f32_from_bits;
  const uint32_t ua = f32_bits(a), ub = f32_bits(b);
  const uint32_t sign = (ua ^ ub) & kSign;
  const uint32_t aa = ua & kAbs, ab = ub & kAbs;
  constexpr uint32_t kInf = 0x7F800000u;
  if (aa > kInf || ab > kInf) return __fadd_rn(a, b);  // a NaN operand
  if (aa == kInf || ab == 0u) {
    return f32_from_bits(aa == kInf ? (ab == kInf ? 0x7FC00000u : sign | kInf)
                                    : (aa == 0u ? 0x7FC00000u : sign | kInf));
  }
  if (ab == kInf || aa == 0u) return f32_from_bits(sign);  // +-0
  int32_t ka, kb;
  const float ma = normalize(aa, ka), mb = normalize(ab, kb);
  const float q = fast_core(ma, mb, recip_unit(mb));  // RN(ma / mb), in [0.5, 2]
  const float rem = __fmaf_rn(-mb, q, ma);            // exact; its sign: Q above or below q
  const uint32_t uq = f32_bits(q);
  const int32_t e = static_cast<int32_t>(uq >> 23) + ka - kb;  // the result's biased exponent
  if (e >= 255) return f32_from_bits(sign | kInf);
  if (e >= 1) return f32_from_bits(sign | (uq + static_cast<uint32_t>((ka - kb) * (1 << 23))));
  // Subnormal: N 2^-149 with N = round(M 2^(e - 1)), M = q's 24-bit integer significand.
  const uint32_t shift = static_cast<uint32_t>(1 - e);
  if (shift > 25u) return f32_from_bits(sign);  // below 2^-151: rounds to zero
  const uint32_t mq = (uq & 0x7FFFFFu) | 0x800000u;
  const uint32_t n = mq >> shift, low = mq & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  const bool up = low > half || (low == half && (rem > 0.0f || (rem == 0.0f && (n & 1u))));
  return f32_from_bits(sign | (n + (up ? 1u : 0u)));
}

}  // namespace exact_div_detail

/// The divisor @p b prepared for exact_div.
__device__ __forceinline__ Divisor prepare_divisor(float b) {
  using namespace exact_div_detail;
  const uint32_t ub = codecs::f32_bits(b);
  const uint32_t eb = (ub >> 23) & 0xFFu;
  Divisor d;
  d.b = b;
  d.m = codecs::f32_from_bits((ub & 0x807FFFFFu) | 0x3F800000u);
  d.r = recip_unit(codecs::f32_from_bits(codecs::f32_bits(d.m) & kAbs));
  d.r = codecs::f32_from_bits(codecs::f32_bits(d.r) | (ub & kSign));
  // 2^-k = 2^(127 - eb): a normal number for eb >= 2, 2^-127 (a subnormal power of two) for 254
  d.p = eb == 0u || eb == 255u ? codecs::f32_from_bits(0x7FC00000u)
        : eb == 254u           ? codecs::f32_from_bits(0x00400000u)
                               : codecs::f32_from_bits((254u - eb) << 23);
  return d;
}

/// RN(a / d.b), bit for bit the host's a / b, for every a and b.
__device__ __forceinline__ float exact_div(float a, const Divisor& d) {
  using namespace exact_div_detail;
  const float ap = __fmul_rn(a, d.p);  // exact where the fast path takes it
  const uint32_t x = codecs::f32_bits(ap) & kAbs;
  if (x - kFastLo < kFastHi - kFastLo) return fast_core(ap, d.m, d.r);
  // a p = +-0 (p a normal number or 2^-127): |a / b| <= |a p| <= 2^-150, which rounds to 0
  if (x == 0u) return __fmul_rn(ap, d.r);
  return div_general(a, d.b);
}

}  // namespace ccompress::cuda
