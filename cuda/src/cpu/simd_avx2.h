// AVX2 intrinsics for the pieces the rotated and stochastic host loops share: the normalised
// Walsh-Hadamard transform of a block held in registers, group maxima, and the counter-based
// stochastic rounding noise. Each computes exactly what its scalar reference does (the same
// IEEE fp32 adds, subtracts and multiplies on the same operands, the same integer hash), so
// the bits do not depend on which runs; tests/codecs/test_cpu_isa.py and tests/codecs/test_digests.py check
// it. Host-only (simd_avx2.cc, compiled by the host compiler alone).
//
// The dispatching wrappers below (wht_normalized_host, group_abs_max_host, sr_uniforms_host)
// take the AVX2 path when cpu_use_avx2() (isa_dispatch.h) and the scalar reference otherwise,
// so a family's loops call them from both of their dispatched copies.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "codecs/float_convert.h"
#include "codecs/fp8/group_codec.h"
#include "codecs/stochastic.h"
#include "cpu/fast_wht.h"
#include "cpu/host_loops.h"
#include "cpu/isa_dispatch.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CC_HAVE_SIMD_AVX2 1
#endif

namespace ccompress::cpu {

/// Where `:sr` noise comes from: element i of a call draws sr_uniform_at(prefix, index + i).
struct SrDraws {
  uint64_t prefix;
  int64_t index;
};

#ifdef CC_HAVE_SIMD_AVX2
/// v <- wht_normalized_fast(src) (fast_wht.h; src may be v) for h a power of two >= 8, bit
/// for bit: blocks of up to 128 values pass all their short stages in sixteen registers.
void wht_normalized_avx2(const float* src, float* v, int32_t h);
/// wht_normalized_avx2(src + i, v + i, h) for every block of h (>= 8) in src[0, len), len a
/// multiple of h (src may be v).
void wht_normalized_blocks_avx2(const float* src, float* v, int64_t len, int32_t h);
/// The largest codecs::finite_abs_bits of v[0, n).
int32_t finite_abs_max_avx2(const float* v, int64_t n);
/// amax[i] = max over group i of the raw |bits| of v (NaN and Inf above every finite value),
/// for len / g groups of g >= 8 elements (len a multiple of g).
void group_abs_max_avx2(const float* v, int32_t len, int32_t g, int32_t* amax);
/// u[i] = codecs::sr_uniform_at(prefix, index + i) for 0 <= i < n.
void sr_uniforms_avx2(uint64_t prefix, int64_t index, int64_t n, float* u);
/// codecs::feedback_residual_of(v[i], decoded[i], residual + i) for 0 <= i < n; returns how
/// many of them set the residual to 0 (a NaN or Inf among v, decoded and their difference).
int64_t feedback_residual_avx2(const float* v, const float* decoded, int64_t n,
                               float* residual);

/// codecs::taco_sum_sq(x, len) for len a multiple of 32 (its 32 lanes in four registers).
float taco_sum_sq_avx2(const float* x, int32_t len);
/// q[i] = codecs::fp8_from_float<F>(y[i] / s), or with @p sr fp8_from_float_sr<F>(y[i] / s,
/// u_i) (u_i the draw of element i, made here), for 0 <= i < n (a multiple of 8); with
/// @p keep_inf, +-Inf y[i] code as in codecs::group_quantize (so this is group_quantize /
/// group_quantize_sr). F is codecs::Fp8E5M2 when @p e5m2, else codecs::Fp8E4M3.
void fp8_quantize_avx2(bool e5m2, bool keep_inf, const float* y, int32_t n, float s,
                       const SrDraws* sr, uint8_t* q);
/// One group of the fp8 family (group_codec.h) of n (a multiple of 8) values: q[i] =
/// codecs::group_quantize<F>(x[i], s) (group_quantize_sr with @p sr) for the group's scale
/// s = codecs::group_scale<F>(its finite maximum), which it returns. F as fp8_quantize_avx2.
float fp8_encode_group_avx2(bool e5m2, const float* x, int32_t n, const SrDraws* sr,
                            uint8_t* q);
/// a[i] = codecs::mul_rn(lut[q[i]], s), or with @p accumulate codecs::add_rn(a[i], that), for
/// 0 <= i < n, where lut is the fp8 code table of the format (E5M2 when @p e5m2, else E4M3):
/// the codes decoded by integer shifts and one exact scaling, the table only for Inf / NaN.
void fp8_decode_avx2(bool e5m2, const float* lut, const uint8_t* q, int64_t n, float s,
                     float* a, bool accumulate);
#endif

/// The table-free decode of fp8 codes (fp8_decode_avx2, fp8_decode_sse2): the magnitude bits
/// of a code (code & 0x7f) shifted left by `shift` are the fp32 bit pattern of its value times
/// 2^-(127 - bias), subnormal codes included, so one exact multiplication by `unbias` =
/// 2^(127 - bias) gives the value; a code is Inf or NaN when (code & special) == special (the
/// exponent bits all set in E5M2, all seven magnitude bits in E4M3), and those take the table.
struct Fp8ShiftDecode {
  int shift;
  float unbias;
  int special;
};
constexpr Fp8ShiftDecode fp8_shift_decode(bool e5m2) {
  return e5m2 ? Fp8ShiftDecode{21, 0x1p112f, 0x7c} : Fp8ShiftDecode{20, 0x1p120f, 0x7f};
}

/// a[i] = codecs::mul_rn(lut[q[i]], s), or with @p accumulate codecs::add_rn(a[i], that), for
/// 0 <= i < n: the table decode of fp8 codes (the reference of fp8_decode_avx2 and
/// fp8_decode_sse2, and their pieces with an Inf / NaN code and their tails).
inline void fp8_lut_decode(const float* lut, const uint8_t* q, int64_t n, float s, float* a,
                           bool accumulate) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = codecs::mul_rn(lut[q[i]], s);
    a[i] = accumulate ? codecs::add_rn(a[i], v) : v;
  }
}

/// fp8_lut_decode(lut, q, n, s, a, accumulate), bit for bit, where lut is the fp8 code table
/// of the format (E5M2 when @p e5m2, else E4M3): the portable copy's decode (fp8_decode_avx2
/// is the AVX2 one). SSE2 decodes 16 codes at a time by fp8_shift_decode, in 16-bit lanes that
/// become the upper halves of the fp32 patterns; a piece of 16 with an Inf or NaN code, and the
/// tail, take the table.
inline void fp8_decode_sse2(bool e5m2, const float* lut, const uint8_t* q, int64_t n, float s,
                            float* a, bool accumulate) {
  int64_t i = 0;
#if defined(__SSE2__)
  const Fp8ShiftDecode d = fp8_shift_decode(e5m2);
  const __m128i special = _mm_set1_epi8(static_cast<char>(d.special));
  const __m128i sign = _mm_set1_epi16(static_cast<int16_t>(0x8000));
  const __m128i mag = _mm_set1_epi16(0x7f00);
  const __m128i count = _mm_cvtsi32_si128(24 - d.shift);  // code << 8: magnitude << (shift - 16)
  const __m128i zero = _mm_setzero_si128();
  const __m128 unbias = _mm_set1_ps(d.unbias);
  const __m128 sv = _mm_set1_ps(s);
  for (; i + 16 <= n; i += 16) {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i));
    if (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(c, special), special)) != 0) {
      fp8_lut_decode(lut, q + i, 16, s, a + i, accumulate);
      continue;
    }
    for (int h = 0; h < 2; ++h) {  // codes 8h .. 8h + 7
      const __m128i w = h == 0 ? _mm_unpacklo_epi8(zero, c) : _mm_unpackhi_epi8(zero, c);
      const __m128i hi = _mm_or_si128(_mm_and_si128(w, sign),
                                      _mm_srl_epi16(_mm_and_si128(w, mag), count));
      for (int k = 0; k < 2; ++k) {
        const __m128i bits = k == 0 ? _mm_unpacklo_epi16(zero, hi) : _mm_unpackhi_epi16(zero, hi);
        float* out = a + i + 8 * h + 4 * k;
        __m128 v = _mm_mul_ps(_mm_mul_ps(_mm_castsi128_ps(bits), unbias), sv);
        if (accumulate) v = _mm_add_ps(_mm_loadu_ps(out), v);
        _mm_storeu_ps(out, v);
      }
    }
  }
#endif
  fp8_lut_decode(lut, q + i, n - i, s, a + i, accumulate);
}

/// q[i] = codecs::group_quantize<F>(y[i], s) (with @p kKeepInf) or codecs::fp8_from_float<F>(
/// y[i] / s) (without), for 0 <= i < n: the round-to-nearest FP8 codes of the portable copy
/// (fp8_quantize_avx2 is the AVX2 one). Codes go through 32-bit lanes and pack_codes; each
/// chunk is coded as if finite (fp8_code<F, true>: no NaN or Inf select per element) while the
/// loop notes whether some y / s was not finite, and a chunk where one was is coded again by
/// the full functions.
template <class F, bool kKeepInf>
inline void fp8_codes_rn(const float* y, int64_t n, float s, uint8_t* q) {
  constexpr int64_t kChunk = 256;
  alignas(16) int32_t k[kChunk];
  for (int64_t off = 0; off < n; off += kChunk) {
    const int64_t len = std::min(kChunk, n - off);
    const float* v = y + off;
    int32_t special = 0;
    for (int64_t i = 0; i < len; ++i) {
      const float t = codecs::div_rn(v[i], s);
      k[i] = codecs::fp8_code<F, true>(t);
      special |= static_cast<int32_t>(codecs::f32_bits(t) & codecs::kF32AbsMask) >=
                         static_cast<int32_t>(codecs::kF32InfBits)
                     ? 1
                     : 0;
    }
    if (special != 0) {
      for (int64_t i = 0; i < len; ++i)
        k[i] = kKeepInf ? codecs::group_quantize_code<F>(v[i], s)
                        : codecs::fp8_code<F>(codecs::div_rn(v[i], s));
    }
    pack_codes<false>(k, len, q + off);
  }
}

/// v <- the normalised WHT of the h (a power of two) values at src (which may be v).
inline void wht_normalized_host(const float* src, float* v, int32_t h) {
#ifdef CC_HAVE_SIMD_AVX2
  if (h >= 8 && cpu_use_avx2()) return wht_normalized_avx2(src, v, h);
#endif
  if (src != v) std::memcpy(v, src, static_cast<size_t>(h) * sizeof(float));
  wht_normalized_fast(v, h);
}

/// The largest codecs::finite_abs_bits (with @p kFinite) or raw |bits| (NaN and Inf above
/// every finite value; without) of each group of G of y[0, groups * G) into amax, and of them
/// all (returned): a run's maximum and its groups' in one pass. G known at compile time lets
/// GCC vectorize the maxima (SSE2 in the baseline copy).
template <int G, bool kFinite>
inline int32_t group_maxima(const float* y, int64_t groups, int32_t* amax) {
  int32_t run = 0;
  for (int64_t k = 0; k < groups; ++k) {
    const float* v = y + k * G;
    int32_t lane[4] = {0, 0, 0, 0};  // four running maxima: one SSE2 vector
    for (int i = 0; i < G; i += 4)
      for (int l = 0; l < 4; ++l)
        lane[l] = std::max(lane[l], kFinite ? codecs::finite_abs_bits(v[i + l])
                                            : static_cast<int32_t>(codecs::f32_bits(v[i + l]) &
                                                                   codecs::kF32AbsMask));
    const int32_t m = std::max(std::max(lane[0], lane[1]), std::max(lane[2], lane[3]));
    amax[k] = m;
    run = std::max(run, m);
  }
  return run;
}

/// Raw |bits| maximum of each group of g in v[0, len) (len a multiple of g).
inline void group_abs_max_host(const float* v, int32_t len, int32_t g, int32_t* amax) {
#ifdef CC_HAVE_SIMD_AVX2
  if (g >= 8 && cpu_use_avx2()) return group_abs_max_avx2(v, len, g, amax);
#endif
  switch (g) {  // hint8's default group and TACO's: fixed lengths, no reduction per group
    case 16: group_maxima<16, false>(v, len / g, amax); return;
    case 128: group_maxima<128, false>(v, len / g, amax); return;
    default: break;
  }
  for (int32_t i = 0; i < len / g; ++i) {
    int32_t m = 0;
    for (int32_t j = i * g; j < (i + 1) * g; ++j)
      m = std::max(m, static_cast<int32_t>(codecs::f32_bits(v[j]) & codecs::kF32AbsMask));
    amax[i] = m;
  }
}

/// The largest codecs::finite_abs_bits(v[i]) of v[0, n) (0 for n = 0): |x| bits, NaN and Inf
/// left out.
inline int32_t finite_abs_max_host(const float* v, int64_t n) {
#ifdef CC_HAVE_SIMD_AVX2
  if (cpu_use_avx2()) return finite_abs_max_avx2(v, n);
#endif
  int32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, codecs::finite_abs_bits(v[i]));
  return m;
}

/// The stochastic rounding draws of elements index .. index + n - 1 of a run.
inline void sr_uniforms_host(uint64_t prefix, int64_t index, int64_t n, float* u) {
#ifdef CC_HAVE_SIMD_AVX2
  if (cpu_use_avx2()) return sr_uniforms_avx2(prefix, index, n, u);
#endif
  for (int64_t i = 0; i < n; ++i) u[i] = codecs::sr_uniform_at(prefix, index + i);
}

}  // namespace ccompress::cpu
