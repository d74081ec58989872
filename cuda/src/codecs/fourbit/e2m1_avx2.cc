#include "codecs/fourbit/e2m1_avx2.h"

#ifdef CC_HAVE_E2M1_AVX2

#include <immintrin.h>

#include "codecs/fourbit/fourbit.h"
#include "codecs/int4/int4.h"
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
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i finite = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x7F800000),
                                            _mm256_and_si256(_mm256_castps_si256(x), abs_mask));
  const __m256 v = d > 0.0f ? _mm256_div_ps(x, _mm256_set1_ps(d)) : _mm256_setzero_ps();
  const __m256 a = _mm256_and_ps(v, _mm256_castsi256_ps(abs_mask));
  // Each true comparison is -1 as an integer; the magnitude code is minus their sum.
  __m256i m = _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(0.25f), _CMP_GT_OQ));
  m = _mm256_add_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(0.75f), _CMP_GE_OQ)));
  m = _mm256_add_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(1.25f), _CMP_GT_OQ)));
  m = _mm256_add_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(1.75f), _CMP_GE_OQ)));
  m = _mm256_add_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(2.5f), _CMP_GT_OQ)));
  m = _mm256_add_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(3.5f), _CMP_GE_OQ)));
  m = _mm256_add_epi32(m, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(5.0f), _CMP_GT_OQ)));
  m = _mm256_sub_epi32(_mm256_setzero_si256(), m);
  const __m256i sign8 = _mm256_slli_epi32(_mm256_srli_epi32(_mm256_castps_si256(v), 31), 3);
  const __m256i nonzero = _mm256_cmpgt_epi32(m, _mm256_setzero_si256());
  const __m256i q = _mm256_or_si256(m, _mm256_and_si256(sign8, nonzero));
  return _mm256_blendv_epi8(_mm256_set1_epi32(codecs::kNibbleNaN), q, finite);
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

// Largest finite |x| of 16 elements as bits (codecs::finite_abs_bits, then max).
__attribute__((target("avx2"))) inline int32_t amax16(__m256 x0, __m256 x1) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256i inf = _mm256_set1_epi32(0x7F800000);
  __m256i a0 = _mm256_and_si256(_mm256_castps_si256(x0), abs_mask);
  __m256i a1 = _mm256_and_si256(_mm256_castps_si256(x1), abs_mask);
  a0 = _mm256_and_si256(a0, _mm256_cmpgt_epi32(inf, a0));
  a1 = _mm256_and_si256(a1, _mm256_cmpgt_epi32(inf, a1));
  __m256i m = _mm256_max_epi32(a0, a1);
  m = _mm256_max_epi32(m, _mm256_permute2x128_si256(m, m, 1));
  m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0x4E));
  m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0xB1));
  return _mm256_cvtsi256_si32(m);
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
// their steps: codecs::encode_group_scale(amax, qmax, s, 8, false) and steps8, lane by lane:
// t = (amax / qmax) / s, then fp8_from_float<E4M3>(t) (t is finite and >= 0).
__attribute__((target("avx2"))) inline void scales8(__m256i amax, float qmax, float s,
                                                    int32_t* code, float* step) {
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
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(code), q);
  _mm256_storeu_ps(step, steps8(q, vs));
}

template <bool kInt4>
__attribute__((target("avx2"))) void encode_groups(const float* y, int64_t ngroups, float s,
                                                   uint8_t* codes, uint8_t* scales) {
  const float qmax = kInt4 ? codecs::Int4::kQMax : codecs::E2M1::kQMax;
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t k0 = 0; k0 < ngroups; k0 += kBatch) {
    const int64_t nb = ngroups - k0 < kBatch ? ngroups - k0 : kBatch;
    alignas(32) int32_t amax[kBatch] = {};
    alignas(32) int32_t code[kBatch];
    alignas(32) float step[kBatch];
    for (int64_t j = 0; j < nb; ++j)
      amax[j] = amax16(_mm256_loadu_ps(y + 16 * (k0 + j)), _mm256_loadu_ps(y + 16 * (k0 + j) + 8));
    scales8(_mm256_load_si256(reinterpret_cast<const __m256i*>(amax)), qmax, s, code, step);
    for (int64_t j = 0; j < nb; ++j) scales[k0 + j] = static_cast<uint8_t>(code[j]);
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t k = k0 + j;
      const __m256 x0 = _mm256_loadu_ps(y + 16 * k), x1 = _mm256_loadu_ps(y + 16 * k + 8);
      // 16 nibbles, one per byte in element order: packs interleave the 128-bit halves,
      // the permute puts the four 4-byte runs back in order.
      __m256i n = _mm256_packus_epi32(quantize8<kInt4>(x0, step[j]),
                                      quantize8<kInt4>(x1, step[j]));
      n = _mm256_packus_epi16(n, _mm256_setzero_si256());
      const __m128i e = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(n, order));
      // Byte pair (2i, 2i+1) as one 16-bit lane: low nibble 2i, high nibble 2i+1.
      __m128i w = _mm_or_si128(e, _mm_srli_epi16(e, 4));
      w = _mm_and_si128(w, _mm_set1_epi16(0xFF));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + 8 * k), _mm_packus_epi16(w, w));
    }
  }
}

template <bool kInt4>
__attribute__((target("avx2"))) void decode_groups(const uint8_t* codes, const uint8_t* scales,
                                                   int64_t ngroups, float s, float* out) {
  const __m128i low4 = _mm_set1_epi8(0x0F);
  const __m256 vs = _mm256_set1_ps(s);
  for (int64_t k0 = 0; k0 < ngroups; k0 += kBatch) {
    const int64_t nb = ngroups - k0 < kBatch ? ngroups - k0 : kBatch;
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
      _mm256_storeu_ps(out + 16 * k, dequantize8<kInt4>(e, d));
      _mm256_storeu_ps(out + 16 * k + 8, dequantize8<kInt4>(_mm_srli_si128(e, 8), d));
    }
  }
}

}  // namespace

__attribute__((target("avx2"))) void fourbit_encode_groups_avx2(bool int4, const float* y,
                                                                int64_t ngroups, float s,
                                                                uint8_t* codes, uint8_t* scales) {
  if (int4) return encode_groups<true>(y, ngroups, s, codes, scales);
  encode_groups<false>(y, ngroups, s, codes, scales);
}

__attribute__((target("avx2"))) void fourbit_decode_groups_avx2(bool int4, const uint8_t* codes,
                                                                const uint8_t* scales,
                                                                int64_t ngroups, float s,
                                                                float* out) {
  if (int4) return decode_groups<true>(codes, scales, ngroups, s, out);
  decode_groups<false>(codes, scales, ngroups, s, out);
}

}  // namespace ccompress::cpu4

#endif
