#include "codecs/fourbit/e2m1_avx2.h"

#ifdef CC_HAVE_E2M1_AVX2

#include <immintrin.h>

#include <cstring>

#include "codecs/fourbit/fourbit.h"
#include "codecs/hint4/hint4.h"
#include "codecs/nvfp4/nvfp4.h"
#include "cpu/simd_avx2_inl.h"

namespace ccompress::cpu4 {

namespace {

constexpr int32_t kScaleBits = 8;  // E4M3 group scales
constexpr int64_t kBatch = 8;      // groups whose scales are computed in one vector

// Nibbles of 8 elements x (int32 lanes, 0..15), as codecs::fourbit_quantize<E2M1>(x, d):
// v = x / d (or 0 when d is 0), magnitude by the seven exact comparisons of
// E2M1::magnitude_rn, the sign bit for a non-zero magnitude, kNibbleNaN for non-finite x.
__attribute__((target("avx2"))) inline __m256i quantize8_e2m1(__m256 x, float d) {
  const __m256 v = d > 0.0f ? _mm256_div_ps(x, _mm256_set1_ps(d)) : _mm256_setzero_ps();
  const __m256 a = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
  return cpu::avx2::e2m1_nibbles8(x, v, a);
}

// Nibbles of 8 elements as codecs::fourbit_quantize<Int4>(x, d, false, 0): v = x / d (0 when d
// is 0), RNE(min(|v|, 7)) by the 2^23 trick, two's complement for a negative v, kNibbleNaN for
// non-finite x.
__attribute__((target("avx2"))) inline __m256i quantize8_int4(__m256 x, float d) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i finite = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F800000),
                                            _mm256_and_si256(_mm256_castps_si256(x), abs_mask));
  const __m256 v = d > 0.0f ? _mm256_div_ps(x, _mm256_set1_ps(d)) : _mm256_setzero_ps();
  const __m256i a = _mm256_min_epu32(_mm256_and_si256(_mm256_castps_si256(v), abs_mask),
                                     _mm256_set1_epi32(0x40E00000));  // Int4::clamped_abs
  const __m256 c = _mm256_set1_ps(8388608.0f);
  const __m256i m = _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(_mm256_castsi256_ps(a), c), c));
  const __m256i neg = _mm256_srai_epi32(_mm256_castps_si256(v), 31);
  const __m256i q = _mm256_blendv_epi8(
      m, _mm256_and_si256(_mm256_sub_epi32(_mm256_set1_epi32(16), m), _mm256_set1_epi32(15)), neg);
  return _mm256_blendv_epi8(_mm256_set1_epi32(codecs::kNibbleNaN), q, finite);
}

template <bool kInt4>
__attribute__((target("avx2"))) inline __m256i quantize8(__m256 x, float d) {
  return kInt4 ? quantize8_int4(x, d) : quantize8_e2m1(x, d);
}

// Nibbles of 8 elements as codecs::fourbit_quantize<E2M1 or Int4>(x, d, true, u): v = x / d
// (0 when d is 0), then Q::quantize_sr(v, u) lane by lane (the same IEEE multiplies, adds and
// floors, the selects on the bits), kNibbleNaN for non-finite x.
template <bool kInt4>
__attribute__((target("avx2"))) inline __m256i quantize8_sr(__m256 x, float d, __m256 u) {
  const __m256 v = d > 0.0f ? _mm256_div_ps(x, _mm256_set1_ps(d)) : _mm256_setzero_ps();
  const __m256i ab = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF));
  if (kInt4) {  // Int4::quantize_sr: floor(min(|v|, 7) + u), at most 7, two's complement
    const __m256i finite = _mm256_cmpgt_epi32(
        _mm256_set1_epi32(0x7F800000),
        _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7FFFFFFF)));
    const __m256 a = _mm256_castsi256_ps(_mm256_min_epu32(ab, _mm256_set1_epi32(0x40E00000)));
    const __m256i m = _mm256_min_epi32(
        _mm256_cvttps_epi32(_mm256_floor_ps(_mm256_add_ps(a, u))), _mm256_set1_epi32(7));
    const __m256i neg = _mm256_srai_epi32(_mm256_castps_si256(v), 31);
    const __m256i q = _mm256_blendv_epi8(
        m, _mm256_and_si256(_mm256_sub_epi32(_mm256_set1_epi32(16), m), _mm256_set1_epi32(15)),
        neg);
    return _mm256_blendv_epi8(_mm256_set1_epi32(codecs::kNibbleNaN), q, finite);
  }
  // E2M1::quantize_sr: floor(|v| / step + u) * step on the binade's uniform grid, at most 6
  const __m256i lt2 = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x40000000), ab);  // 2.0f
  const __m256i lt4 = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x40800000), ab);  // 4.0f
  const __m256 step = _mm256_castsi256_ps(_mm256_blendv_epi8(
      _mm256_blendv_epi8(_mm256_set1_epi32(0x40000000), _mm256_set1_epi32(0x3F800000), lt4),
      _mm256_set1_epi32(0x3F000000), lt2));
  const __m256 inv = _mm256_castsi256_ps(_mm256_blendv_epi8(
      _mm256_blendv_epi8(_mm256_set1_epi32(0x3F000000), _mm256_set1_epi32(0x3F800000), lt4),
      _mm256_set1_epi32(0x40000000), lt2));
  const __m256 t = _mm256_floor_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_castsi256_ps(ab), inv), u));
  const __m256 a = _mm256_castsi256_ps(_mm256_min_epu32(
      _mm256_castps_si256(_mm256_mul_ps(t, step)), _mm256_set1_epi32(0x40C00000)));  // 6.0f
  return cpu::avx2::e2m1_nibbles8(x, v, a);
}

// Values of 8 nibbles (the low 8 bytes of q8, one nibble each) times d, as
// codecs::fourbit_dequantize<E2M1>: the magnitude of codes 0..7, bit 3 the sign, and
// kNibbleNaN alone NaN.
__attribute__((target("avx2"))) inline __m256 dequantize8_e2m1(__m128i q8, __m256 d) {
  const __m256 magnitudes = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  const __m256i q = _mm256_cvtepu8_epi32(q8);
  __m256 v = _mm256_permutevar8x32_ps(magnitudes, _mm256_and_si256(q, _mm256_set1_epi32(7)));
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(q, _mm256_set1_epi32(8)), 28);
  v = _mm256_or_ps(v, _mm256_castsi256_ps(sign));
  const __m256i nan = _mm256_cmpeq_epi32(q, _mm256_set1_epi32(codecs::kNibbleNaN));
  v = _mm256_blendv_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)),
                       _mm256_castsi256_ps(nan));
  return _mm256_mul_ps(v, d);
}

// Values of 8 int4 nibbles times d, as codecs::fourbit_dequantize<Int4>: 0..7, 9..15 as -7..-1,
// kNibbleNaN NaN (a table of Int4::dequantize itself).
__attribute__((target("avx2"))) inline __m256 dequantize8_int4(__m128i q8, __m256 d) {
  const __m256 pos = _mm256_setr_ps(0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f);
  const __m256 neg = _mm256_setr_ps(codecs::Int4::dequantize(8), -7.0f, -6.0f, -5.0f, -4.0f,
                                    -3.0f, -2.0f, -1.0f);
  const __m256i q = _mm256_cvtepu8_epi32(q8);
  const __m256i j = _mm256_and_si256(q, _mm256_set1_epi32(7));
  const __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(pos, j),
                                    _mm256_permutevar8x32_ps(neg, j),
                                    _mm256_castsi256_ps(_mm256_slli_epi32(q, 28)));
  return _mm256_mul_ps(v, d);
}

template <bool kInt4>
__attribute__((target("avx2"))) inline __m256 dequantize8(__m128i q8, __m256 d) {
  return kInt4 ? dequantize8_int4(q8, d) : dequantize8_e2m1(q8, d);
}

// codecs::group_step(code, s, 8) of 8 E4M3 codes (int32 lanes, 0..255: a decoder reads any
// byte): fp8_to_float<E4M3>(code) * s.
__attribute__((target("avx2"))) inline __m256 steps8(__m256i q, __m256 vs) {
  return _mm256_mul_ps(cpu::avx2::fp8_to_float8<codecs::Fp8E4M3>(q), vs);
}

// The E4M3 scale codes of 8 groups of largest finite |x| amax (bits) under run scale s, and
// their steps: codecs::encode_group_scale(amax, qmax, s, 8, round_up) and steps8, lane by
// lane: t = (amax / qmax) / s, then fp8_from_float<E4M3>(t) (t is finite and >= 0), with
// @p round_up one code more where that is below t and not the largest.
CC_AVX2_INLINE void scales8(__m256i amax, float qmax, float s, __m256i* code, __m256* step,
                            bool round_up = false) {
  const __m256 vs = _mm256_set1_ps(s);
  const __m256 t = _mm256_div_ps(
      _mm256_div_ps(_mm256_castsi256_ps(amax), _mm256_set1_ps(qmax)), vs);
  // fp8_from_float: add C = 2^(e + 23 - 3) (e clamped to E4M3's normal binades) so that the
  // fp32 adder rounds t to the E4M3 spacing, then read the significand off the sum.
  constexpr uint32_t kMinExp = 128 - codecs::Fp8E4M3::kBias;
  constexpr uint32_t kMaxExp = codecs::Fp8E4M3::kMaxF32Bits >> 23;
  const __m256i a = _mm256_castps_si256(t);
  __m256i e = _mm256_srli_epi32(a, 23);
  e = _mm256_min_epu32(_mm256_max_epu32(e, _mm256_set1_epi32(kMinExp)),
                       _mm256_set1_epi32(kMaxExp));
  const __m256i c = _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(23 - 3)), 23);
  const __m256i k = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(t, _mm256_castsi256_ps(c))), c);
  __m256i q = _mm256_add_epi32(
      _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(kMinExp)), 3), k);
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
  const __m256i limit = _mm256_blendv_epi8(_mm256_set1_epi32(codecs::Fp8E4M3::kMaxCode),
                                           _mm256_set1_epi32(codecs::kFp8NaN), nan);
  q = _mm256_min_epu32(q, limit);
  if (round_up) {
    const __m256 below = _mm256_cmp_ps(cpu::avx2::fp8_to_float8<codecs::Fp8E4M3>(q), t,
                                       _CMP_LT_OQ);
    const __m256i room = _mm256_cmpgt_epi32(_mm256_set1_epi32(codecs::Fp8E4M3::kMaxCode), q);
    q = _mm256_sub_epi32(q, _mm256_and_si256(_mm256_castps_si256(below), room));  // +1
  }
  *code = q;
  *step = steps8(q, vs);
}

// The short path of a group with only finite elements and a step d that the encoder checks
// (see short_path_steps): signed codes s in -7..7 (int32 lanes) whose nibble is
// nibble_of_signed<kInt4>(s): the code of |x / d| with x's sign where the code is non-zero
// (_mm256_sign_epi32 gives 0 for a zero code, so a zero is written as +0).
//
// E2M1, with h = d / 2 (exact: d >= 2^-125 here): b = min(|x / h|, 12) = 2 min(|x / d|, 6)
// (the division by h is 2 x / d rounded once, as 2 RN(x / d) wherever x / d is normal; below,
// both code 0), since 6 codes as 7 as every |x / d| > 5 does. The E2M1 grid in the binade of
// b / 2 is the integer grid of p = b / 2^f, f = clamp(exponent(b) - 1, 0, 2) (0 for b < 4,
// 1 for b in [4, 8), 2 for b in [8, 12]), and the code is RNE(p) + 2f: the conversion rounds
// to nearest even, and the code's parity is the integer's. p is b with f taken off its
// exponent field (exact: b >= 4 where f > 0); f << 23 is b's biased exponent less 128,
// saturating at 0, by one saturating 16-bit subtract on the upper half of each lane, the
// mantissa bits then masked off, and 2f is that shifted down by 22.
// Every fp32 b in [0, 12] was checked against E2M1::magnitude_rn(b / 2) when this was
// written; tests/codecs/test_cpu_isa.py and tests/codecs/test_nvfp4.py compare the nibbles with the baseline
// copy and the NumPy reference (ties included).
CC_AVX2_INLINE __m256i quantize8_e2m1_finite(__m256 x, __m256 h) {
  const __m256 b = _mm256_min_ps(
      _mm256_and_ps(_mm256_div_ps(x, h), _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))),
      _mm256_set1_ps(12.0f));
  const __m256i bb = _mm256_castps_si256(b);
  const __m256i f23 = _mm256_and_si256(_mm256_subs_epu16(bb, _mm256_set1_epi32(128 << 23)),
                                       _mm256_set1_epi32(0x7F800000));
  const __m256 p = _mm256_castsi256_ps(_mm256_sub_epi32(bb, f23));
  const __m256i m = _mm256_add_epi32(_mm256_cvtps_epi32(p), _mm256_srli_epi32(f23, 22));
  return _mm256_sign_epi32(m, _mm256_castps_si256(x));
}

// quantize8_int4 for 8 finite elements in a group of step d > 0, as signed codes: RNE of
// x / d clamped to [-7, 7] by the conversion (round to nearest even, symmetric), which is
// RNE(min(|x / d|, 7)) with x / d's sign (x's), the nibble its two's complement (s & 15).
CC_AVX2_INLINE __m256i quantize8_int4_finite(__m256 x, __m256 d) {
  const __m256 v = _mm256_div_ps(x, d);
  return _mm256_cvtps_epi32(
      _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-7.0f)), _mm256_set1_ps(7.0f)));
}

// The signed code (as the short paths give) of nibbles n (int32 lanes, 0..15) of the general
// path: int4's nibble is its own (s & 15 = n); E2M1's sign-magnitude nibble 8 + m (m > 0) is
// -m, and kNibbleNaN stays 8 (nibble_of_signed maps 8 to 8).
template <bool kInt4>
CC_AVX2_INLINE __m256i signed_of_nibble(__m256i n) {
  if (kInt4) return n;
  const __m256i neg = _mm256_cmpgt_epi32(n, _mm256_set1_epi32(8));
  return _mm256_blendv_epi8(n, _mm256_sub_epi32(_mm256_set1_epi32(8), n), neg);
}

// The nibbles of signed codes s (bytes, -7..8): int4's two's complement s & 15; E2M1's
// sign-magnitude, 8 + m for s = -m (from s & 15 = 16 - m by a table), s itself for s >= 0.
template <bool kInt4>
CC_AVX2_INLINE __m256i nibble_of_signed(__m256i s) {
  const __m256i low = _mm256_and_si256(s, _mm256_set1_epi8(0x0F));
  if (kInt4) return low;
  const __m256i table = _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 15, 14, 13, 12, 11, 10, 9,
                                         0, 1, 2, 3, 4, 5, 6, 7, 8, 15, 14, 13, 12, 11, 10, 9);
  return _mm256_shuffle_epi8(table, low);
}

// The steps at which a group takes the short path (with only finite elements): d > 0, and
// for E2M1 d >= 2^-125, so that d / 2 is a normal number (exact).
template <bool kInt4>
CC_AVX2_INLINE int short_path_steps(__m256 step) {
  const float min = kInt4 ? 0.0f : 2.35098870164457501594e-38f;  // 2^-125
  return _mm256_movemask_ps(_mm256_cmp_ps(step, _mm256_set1_ps(min), kInt4 ? _CMP_GT_OQ
                                                                            : _CMP_GE_OQ));
}

// The signed codes of the 16 elements of group y (int32 lanes, elements 0..7 and 8..15) of
// step d (short-path divisor: d, or d / 2 for E2M1, in @p sd); @p fast: the group takes the
// short path.
template <bool kInt4>
CC_AVX2_INLINE void quantize16(const float* y, float d, float sd, bool fast, __m256i* q) {
  const __m256 x0 = _mm256_loadu_ps(y), x1 = _mm256_loadu_ps(y + 8);
  if (fast) {
    const __m256 vd = _mm256_set1_ps(sd);
    q[0] = kInt4 ? quantize8_int4_finite(x0, vd) : quantize8_e2m1_finite(x0, vd);
    q[1] = kInt4 ? quantize8_int4_finite(x1, vd) : quantize8_e2m1_finite(x1, vd);
  } else {
    q[0] = signed_of_nibble<kInt4>(quantize8<kInt4>(x0, d));
    q[1] = signed_of_nibble<kInt4>(quantize8<kInt4>(x1, d));
  }
}

// Signed codes (int32 lanes, -7..8) of 64 elements in order, q[i] elements 8i..8i+7, to 32
// bytes of nibbles: element 2k in the low nibble of byte k, 2k + 1 in the high one.
template <bool kInt4>
CC_AVX2_INLINE void pack64_nibbles(const __m256i* q, uint8_t* out) {
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i pair = _mm256_set1_epi16(0x1001);  // byte 2k times 1 plus byte 2k + 1 times 16
  __m256i w[2];
  for (int h = 0; h < 2; ++h) {
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[4 * h], q[4 * h + 1]),
                                         _mm256_packs_epi32(q[4 * h + 2], q[4 * h + 3]));
    w[h] = _mm256_maddubs_epi16(
        nibble_of_signed<kInt4>(_mm256_permutevar8x32_epi32(b, order)), pair);
  }
  const __m256i v = _mm256_permute4x64_epi64(_mm256_packus_epi16(w[0], w[1]), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
}

// Codes 4 groups of 16 (y, y + 16, ...) whose short-path divisors are sd[0..4), all on the
// short path, to 32 bytes at out.
template <bool kInt4>
CC_AVX2_INLINE void code64_short(const float* y, const float* sd, uint8_t* out) {
  __m256i q[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) quantize16<kInt4>(y + 16 * i, 0.0f, sd[i], true, q + 2 * i);
  pack64_nibbles<kInt4>(q, out);
}

// Transposes the 4 x 4 blocks of a[0..4) in each 128-bit half: half h of b[e] holds element e
// of half h of a[0], a[1], a[2], a[3]. Its own inverse.
CC_AVX2_INLINE void transpose4x4_halves(const __m256* a, __m256* b) {
  const __m256 t0 = _mm256_unpacklo_ps(a[0], a[1]), t1 = _mm256_unpackhi_ps(a[0], a[1]);
  const __m256 t2 = _mm256_unpacklo_ps(a[2], a[3]), t3 = _mm256_unpackhi_ps(a[2], a[3]);
  b[0] = _mm256_shuffle_ps(t0, t2, 0x44);
  b[1] = _mm256_shuffle_ps(t0, t2, 0xEE);
  b[2] = _mm256_shuffle_ps(t1, t3, 0x44);
  b[3] = _mm256_shuffle_ps(t1, t3, 0xEE);
}

// The 8 groups of 16 at g (group j at g + 16j) as 16 columns: lane j of t[e] is element e of
// group j.
CC_AVX2_INLINE void load_columns16(const float* g, __m256* t) {
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {  // elements 4q .. 4q + 3
    __m256 a[4];
    for (int i = 0; i < 4; ++i)
      a[i] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(g + 16 * i + 4 * q)),
                                  _mm_loadu_ps(g + 16 * (i + 4) + 4 * q), 1);
    transpose4x4_halves(a, t + 4 * q);
  }
}

// The inverse of load_columns16: columns t[0..16) back to 8 groups of 16 at g.
CC_AVX2_INLINE void store_columns16(const __m256* t, float* g) {
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    __m256 a[4];
    transpose4x4_halves(t + 4 * q, a);
    for (int i = 0; i < 4; ++i) {
      _mm_storeu_ps(g + 16 * i + 4 * q, _mm256_castps256_ps128(a[i]));
      _mm_storeu_ps(g + 16 * (i + 4) + 4 * q, _mm256_extractf128_ps(a[i], 1));
    }
  }
}

// Codes a batch of 8 groups held as columns (y[8e .. 8e + 8) lane j: element e of group j;
// load_columns16), all on the short path with divisors sd (lane j: group j's), to 64 bytes
// at out. The signed packs of the even and the odd columns put the codes of elements 2k and
// 2k + 1 of a group at the same byte of two registers, whose nibbles make byte k; a 4 x 4
// byte transpose and two unpacks then put each group's 8 bytes together.
template <bool kInt4>
CC_AVX2_INLINE void code128_columns(const float* y, __m256 sd, uint8_t* out) {
  __m256i q[16];
#pragma GCC unroll 16
  for (int e = 0; e < 16; ++e) {
    const __m256 x = _mm256_loadu_ps(y + 8 * e);
    q[e] = kInt4 ? quantize8_int4_finite(x, sd) : quantize8_e2m1_finite(x, sd);
  }
  // Half h of bytes[0]: byte 4k + i is byte k of group 4h + i (k < 4); bytes[1] the same for
  // k = 4..7.
  __m256i bytes[2];
  for (int c = 0; c < 2; ++c) {
    const __m256i* r = q + 8 * c;
    const __m256i even = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[2]),
                                            _mm256_packs_epi32(r[4], r[6]));
    const __m256i odd = _mm256_packs_epi16(_mm256_packs_epi32(r[1], r[3]),
                                           _mm256_packs_epi32(r[5], r[7]));
    bytes[c] = _mm256_or_si256(nibble_of_signed<kInt4>(even),
                               _mm256_slli_epi16(nibble_of_signed<kInt4>(odd), 4));
  }
  const __m256i by_group = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,
                                            0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  // dword i of half h: bytes 0..3 (a) and 4..7 (b) of group 4h + i
  const __m256i a = _mm256_shuffle_epi8(bytes[0], by_group);
  const __m256i b = _mm256_shuffle_epi8(bytes[1], by_group);
  const __m256i u = _mm256_unpacklo_epi32(a, b), v = _mm256_unpackhi_epi32(a, b);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute2x128_si256(u, v, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32),
                      _mm256_permute2x128_si256(u, v, 0x31));
}

// kColumns: y's batches are columns (fourbit_prepare_groups_avx2 for h = 16), whole batches.
template <bool kInt4, bool kColumns>
__attribute__((target("avx2"))) void encode_groups(const float* y, int64_t ngroups, float s,
                                                   const int32_t* amax, const uint8_t* special,
                                                   uint8_t* codes, uint8_t* scales,
                                                   const float* next, int64_t next_n) {
  const float qmax = kInt4 ? codecs::Int4::kQMax : codecs::E2M1::kQMax;
  // The next piece's share per batch: all of it by the end of this piece's groups.
  const int64_t ahead = next_n > 0 ? (next_n + ngroups - 1) / ngroups * kBatch : 0;
  for (int64_t k0 = 0; k0 < ngroups; k0 += kBatch) {
    const int64_t nb = ngroups - k0 < kBatch ? ngroups - k0 : kBatch;
    for (int64_t i = k0 / kBatch * ahead; i < next_n && i < (k0 / kBatch + 1) * ahead; i += 16)
      _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T1);
    __m256i code;
    __m256 step;
    scales8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(amax + k0)), qmax, s, &code,
            &step);
    alignas(8) uint8_t code8[kBatch];
    _mm_storel_epi64(reinterpret_cast<__m128i*>(code8), cpu::avx2::pack8_epu8(code));
    const __m256 vsd = kInt4 ? step : _mm256_mul_ps(step, _mm256_set1_ps(0.5f));
    alignas(32) float d[kBatch], sd[kBatch];
    _mm256_store_ps(d, step);
    _mm256_store_ps(sd, vsd);
    // Groups coded by the short path: no non-finite element and a step it takes.
    const int fast = short_path_steps<kInt4>(step) & ~special[k0 / kBatch];
    if (nb == kBatch) {
      std::memcpy(scales + k0, code8, kBatch);
      if (fast == 0xFF) {  // the common case: all eight, unrolled
        if constexpr (kColumns) {
          code128_columns<kInt4>(y + 16 * k0, vsd, codes + 8 * k0);
        } else {
          code64_short<kInt4>(y + 16 * k0, sd, codes + 8 * k0);
          code64_short<kInt4>(y + 16 * (k0 + 4), sd + 4, codes + 8 * (k0 + 4));
        }
        continue;
      }
      const float* yb = y + 16 * k0;
      alignas(32) float groups[16 * kBatch];
      if constexpr (kColumns) {  // rare: the groups back in order
        __m256 t[16];
        for (int e = 0; e < 16; ++e) t[e] = _mm256_loadu_ps(yb + 8 * e);
        store_columns16(t, groups);
        yb = groups;
      }
      for (int64_t j = 0; j < kBatch; j += 4) {
        __m256i q[8];
        for (int i = 0; i < 4; ++i)
          quantize16<kInt4>(yb + 16 * (j + i), d[j + i], sd[j + i], (fast >> (j + i)) & 1,
                            q + 2 * i);
        pack64_nibbles<kInt4>(q, codes + 8 * (k0 + j));
      }
      continue;
    }
    std::memcpy(scales + k0, code8, static_cast<size_t>(nb));
    for (int64_t j = 0; j < nb; ++j) {  // the last groups, one at a time
      __m256i q[8] = {};
      quantize16<kInt4>(y + 16 * (k0 + j), d[j], sd[j], (fast >> j) & 1, q);
      alignas(32) uint8_t b[32];
      pack64_nibbles<kInt4>(q, b);
      std::memcpy(codes + 8 * (k0 + j), b, 8);
    }
  }
}

// Stochastic rounding of groups 0..ngroups-1 of 16 (ngroups a multiple of kBatch) with the
// draws of elements index, index + 1, ... under prefix: each batch's round-up scales in one
// vector (scales8), each group's nibbles from quantize8_sr, 64 elements packed at a time.
template <bool kInt4>
__attribute__((target("avx2"))) void encode_groups_sr(const float* y, int64_t ngroups, float s,
                                                      const int32_t* amax, uint64_t prefix,
                                                      int64_t index, uint8_t* codes,
                                                      uint8_t* scales) {
  const float qmax = kInt4 ? codecs::Int4::kQMax : codecs::E2M1::kQMax;
  cpu::avx2::SrNoise8 noise(prefix, index);
  for (int64_t k0 = 0; k0 < ngroups; k0 += kBatch) {
    __m256i code;
    __m256 step;
    scales8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(amax + k0)), qmax, s, &code,
            &step, true);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(scales + k0), cpu::avx2::pack8_epu8(code));
    alignas(32) float d[kBatch];
    _mm256_store_ps(d, step);
    for (int64_t j = 0; j < kBatch; j += 4) {
      __m256i q[8];  // elements 8i .. 8i + 7 of groups k0 + j .. k0 + j + 3
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        q[i] = signed_of_nibble<kInt4>(quantize8_sr<kInt4>(
            _mm256_loadu_ps(y + 16 * (k0 + j) + 8 * i), d[j + i / 2], noise.next()));
      pack64_nibbles<kInt4>(q, codes + 8 * (k0 + j));
    }
  }
}

// The finite maxima (bits) of 8 groups of 16 held in r[0..16) (group j in r[2j], r[2j+1]),
// group j in lane j, and in *special bit j whether group j has a non-finite element.
CC_AVX2_INLINE __m256i group_maxima8(const __m256* r, uint8_t* special) {
  using cpu::avx2::abs_bits;
  using cpu::avx2::finite_bits;
  __m256i raw;
  cpu::avx2::group_abs_max_regs<16, 2>(r, &raw);
  const int nonfinite = _mm256_movemask_ps(_mm256_castsi256_ps(
      _mm256_cmpgt_epi32(raw, _mm256_set1_epi32(int32_t(codecs::kF32InfBits) - 1))));
  *special = static_cast<uint8_t>(nonfinite);
  if (nonfinite) {  // rare: leave NaN and Inf out (codecs::finite_abs_bits)
    __m256i m[8];
    for (int j = 0; j < 8; ++j)
      m[j] = _mm256_max_epi32(finite_bits(abs_bits(r[2 * j])), finite_bits(abs_bits(r[2 * j + 1])));
    raw = cpu::avx2::hmax8x8(m);
  }
  return raw;
}

// Rotates the 128 values of r in blocks of 8R (R registers each): hadamard.h's normalised
// transform, after the random signs with @p rs.
template <int R>
CC_AVX2_INLINE void rotate128(__m256* r, const __m256* signs, bool rs) {
  if (rs)
    for (int i = 0; i < 16; ++i) r[i] = _mm256_mul_ps(r[i], signs[i % R]);
#pragma GCC unroll 16
  for (int b = 0; b < 16; b += R) cpu::avx2::wht_normalized_regs<R>(r + b);
}

template <int R>
__attribute__((target("avx2"))) int32_t prepare_groups(const float* x, float* y, int64_t ngroups,
                                                       bool rs, int32_t* amax,
                                                       uint8_t* special) {
  __m256 signs[R > 0 ? R : 1];
  for (int i = 0; i < R; ++i) signs[i] = cpu::avx2::random_signs8(i);
  __m256i run = _mm256_setzero_si256();
  for (int64_t k0 = 0; k0 < ngroups; k0 += kBatch) {
    const int64_t nb = ngroups - k0 < kBatch ? ngroups - k0 : kBatch;
    const float* in = x + 16 * k0;
    cpu::avx2::prefetch(in + cpu::avx2::kPrefetchAhead / 4, 512);
    __m256 r[16];
    for (int i = 0; i < 16; ++i)
      r[i] = i < 2 * nb ? _mm256_loadu_ps(in + 8 * i) : _mm256_setzero_ps();
    if constexpr (R > 0) {  // whole batches only (the caller's contract)
      rotate128<R>(r, signs, rs);
      for (int i = 0; i < 16; ++i) _mm256_storeu_ps(y + 16 * k0 + 8 * i, r[i]);
    }
    const __m256i m = group_maxima8(r, special + k0 / kBatch);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(amax + k0), m);
    run = _mm256_max_epi32(run, m);
  }
  return cpu::avx2::hmax_epi32(run);
}

// prepare_groups for rotation blocks of 16 (one per group), 8 groups at a time held as
// columns (load_columns16): the butterflies of every stage are then whole-register adds and
// subtracts, with no lane shuffles or blends between the stages, and each group's maximum is
// a lane of a vertical max. The operations on each element are wht_normalized_regs<2>'s (the
// same adds and subtracts of the same operands, stage by stage, then times wht_norm(16)), so
// the bits are the same. y keeps the columns, batch by batch (encode_groups<., true> reads
// them).
__attribute__((target("avx2"))) int32_t prepare_groups_h16(const float* x, float* y,
                                                           int64_t ngroups, bool rs,
                                                           int32_t* amax, uint8_t* special) {
  using cpu::avx2::abs_bits;
  using cpu::avx2::finite_bits;
  float sign[16];
  for (int e = 0; e < 16; ++e) sign[e] = codecs::random_sign(static_cast<uint32_t>(e));
  const __m256 norm = _mm256_set1_ps(codecs::wht_norm(16));
  const __m256i below_inf = _mm256_set1_epi32(int32_t(codecs::kF32InfBits) - 1);
  __m256i run = _mm256_setzero_si256();
  for (int64_t k0 = 0; k0 < ngroups; k0 += kBatch) {  // whole batches only
    const float* in = x + 16 * k0;
    cpu::avx2::prefetch(in + cpu::avx2::kPrefetchAhead / 4, 512);
    __m256 t[16];
    load_columns16(in, t);
    if (rs)
      for (int e = 0; e < 16; ++e) t[e] = _mm256_mul_ps(t[e], _mm256_set1_ps(sign[e]));
#pragma GCC unroll 4
    for (int len = 1; len < 16; len <<= 1)
#pragma GCC unroll 16
      for (int e = 0; e < 16; ++e) {
        if (e & len) continue;
        const __m256 a = t[e], b = t[e + len];
        t[e] = _mm256_add_ps(a, b);
        t[e + len] = _mm256_sub_ps(a, b);
      }
#pragma GCC unroll 16
    for (int e = 0; e < 16; ++e) t[e] = _mm256_mul_ps(t[e], norm);
    for (int e = 0; e < 16; ++e) _mm256_storeu_ps(y + 16 * k0 + 8 * e, t[e]);
    __m256i m = abs_bits(t[0]);
    for (int e = 1; e < 16; ++e) m = _mm256_max_epi32(m, abs_bits(t[e]));
    const int nonfinite = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(m, below_inf)));
    special[k0 / kBatch] = static_cast<uint8_t>(nonfinite);
    if (nonfinite) {  // rare: leave NaN and Inf out (codecs::finite_abs_bits)
      m = finite_bits(abs_bits(t[0]));
      for (int e = 1; e < 16; ++e) m = _mm256_max_epi32(m, finite_bits(abs_bits(t[e])));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(amax + k0), m);
    run = _mm256_max_epi32(run, m);
  }
  return cpu::avx2::hmax_epi32(run);
}

// kRot16: each group is a rotation block of 16, un-rotated in registers as fourbit.h's
// unrotate_block does (the normalised transform, then the random signs); kAcc: out += the
// values (one IEEE add each, as cpu::load_accumulate_body) instead of out = them.
template <bool kInt4, bool kRot16, bool kAcc>
__attribute__((target("avx2"))) void decode_groups(const uint8_t* codes, const uint8_t* scales,
                                                   int64_t ngroups, float s, bool rs,
                                                   float* out) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m256 vs = _mm256_set1_ps(s);
  const __m256 sign[2] = {rs ? cpu::avx2::random_signs8(0) : _mm256_set1_ps(1.0f),
                          rs ? cpu::avx2::random_signs8(1) : _mm256_set1_ps(1.0f)};
  for (int64_t k0 = 0; k0 < ngroups; k0 += kBatch) {
    const int64_t nb = ngroups - k0 < kBatch ? ngroups - k0 : kBatch;
    // the accumulator streams in and out beside the codes: fetch it ahead
    if (kAcc) {
      cpu::avx2::prefetch(out + 16 * k0 + cpu::avx2::kAccumulateAhead / 4,
                          16 * kBatch * sizeof(float));
    }
    alignas(8) uint8_t code[kBatch] = {};
    for (int64_t j = 0; j < nb; ++j) code[j] = scales[k0 + j];
    alignas(32) float step[kBatch];
    _mm256_store_ps(step, steps8(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                                     reinterpret_cast<const __m128i*>(code))),
                                 vs));
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t k = k0 + j;
      const __m256 d = _mm256_set1_ps(step[j]);
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * k));
      const __m128i e = _mm_unpacklo_epi8(_mm_and_si128(b, low4),
                                          _mm_and_si128(_mm_srli_epi16(b, 4), low4));
      __m256 r[2] = {dequantize8<kInt4>(e, d), dequantize8<kInt4>(_mm_srli_si128(e, 8), d)};
      if (kRot16) {
        cpu::avx2::wht_normalized_regs<2>(r);
        if (rs) {
          r[0] = _mm256_mul_ps(r[0], sign[0]);
          r[1] = _mm256_mul_ps(r[1], sign[1]);
        }
      }
      for (int i = 0; i < 2; ++i) {
        float* o = out + 16 * k + 8 * i;
        _mm256_storeu_ps(o, kAcc ? _mm256_add_ps(_mm256_loadu_ps(o), r[i]) : r[i]);
      }
    }
  }
}

template <bool kInt4>
__attribute__((target("avx2"))) void decode_groups(const uint8_t* codes, const uint8_t* scales,
                                                   int64_t ngroups, float s, bool rot16,
                                                   bool rs, bool accumulate, float* out) {
  if (rot16) {
    if (accumulate) return decode_groups<kInt4, true, true>(codes, scales, ngroups, s, rs, out);
    return decode_groups<kInt4, true, false>(codes, scales, ngroups, s, rs, out);
  }
  if (accumulate) return decode_groups<kInt4, false, true>(codes, scales, ngroups, s, rs, out);
  decode_groups<kInt4, false, false>(codes, scales, ngroups, s, rs, out);
}

}  // namespace

__attribute__((target("avx2"))) int32_t fourbit_prepare_groups_avx2(
    const float* x, float* y, int64_t ngroups, int32_t h, bool rs, int32_t* amax,
    uint8_t* special) {
  switch (h) {
    case 16: return prepare_groups_h16(x, y, ngroups, rs, amax, special);
    case 32: return prepare_groups<4>(x, y, ngroups, rs, amax, special);
    case 64: return prepare_groups<8>(x, y, ngroups, rs, amax, special);
    case 128: return prepare_groups<16>(x, y, ngroups, rs, amax, special);
    default: return prepare_groups<0>(x, y, ngroups, rs, amax, special);
  }
}

__attribute__((target("avx2"))) void fourbit_encode_groups_avx2(bool int4, const float* y,
                                                                int64_t ngroups, float s,
                                                                const int32_t* amax,
                                                                const uint8_t* special,
                                                                uint8_t* codes, uint8_t* scales,
                                                                const float* next,
                                                                int64_t next_n, bool columns) {
  if (columns) {
    if (int4)
      return encode_groups<true, true>(y, ngroups, s, amax, special, codes, scales, next, next_n);
    return encode_groups<false, true>(y, ngroups, s, amax, special, codes, scales, next, next_n);
  }
  if (int4)
    return encode_groups<true, false>(y, ngroups, s, amax, special, codes, scales, next, next_n);
  encode_groups<false, false>(y, ngroups, s, amax, special, codes, scales, next, next_n);
}

__attribute__((target("avx2"))) void fourbit_decode_groups_avx2(bool int4, const uint8_t* codes,
                                                                const uint8_t* scales,
                                                                int64_t ngroups, float s,
                                                                float* out, bool accumulate,
                                                                int32_t h, bool rs) {
  if (int4) return decode_groups<true>(codes, scales, ngroups, s, h == 16, rs, accumulate, out);
  decode_groups<false>(codes, scales, ngroups, s, h == 16, rs, accumulate, out);
}

__attribute__((target("avx2"))) void fourbit_encode_groups_sr_avx2(
    bool int4, const float* y, int64_t ngroups, float s, const int32_t* amax, uint64_t prefix,
    int64_t index, uint8_t* codes, uint8_t* scales) {
  if (int4) return encode_groups_sr<true>(y, ngroups, s, amax, prefix, index, codes, scales);
  encode_groups_sr<false>(y, ngroups, s, amax, prefix, index, codes, scales);
}

}  // namespace ccompress::cpu4

#endif
