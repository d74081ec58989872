// AVX2 kernels of simd_avx2.h. Every butterfly forms a + b and a - b from the operands the
// scalar transform (fast_wht.h) uses at that stage (GCC compiles its a + -b to a - b), so the
// results, NaN payloads included, are those of the scalar loops.
#include "cpu/simd_avx2.h"

#ifdef CC_HAVE_SIMD_AVX2

#include "codecs/feedback.h"
#include "cpu/simd_avx2_inl.h"

namespace ccompress::cpu {

using namespace avx2;

namespace {

// Stages 1 .. 4R of 8R values (R registers) from src to dst (which may be src); with
// @p scale, times s at the end.
template <int R>
CC_AVX2_INLINE void wht_regs(const float* src, float* dst, bool scale, float s) {
  __m256 r[R];
  for (int i = 0; i < R; ++i) r[i] = _mm256_loadu_ps(src + 8 * i);
  wht_stages<R>(r);
  const __m256 sv = _mm256_set1_ps(s);
  for (int i = 0; i < R; ++i)
    _mm256_storeu_ps(dst + 8 * i, scale ? _mm256_mul_ps(r[i], sv) : r[i]);
}

}  // namespace

CC_AVX2 void wht_normalized_avx2(const float* src, float* v, int32_t h) {
  const float s = codecs::wht_norm(h);
  switch (h) {
    case 8: return wht_regs<1>(src, v, true, s);
    case 16: return wht_regs<2>(src, v, true, s);
    case 32: return wht_regs<4>(src, v, true, s);
    case 64: return wht_regs<8>(src, v, true, s);
    case 128: return wht_regs<16>(src, v, true, s);
    default: break;
  }
  for (int32_t i = 0; i < h; i += 128) wht_regs<16>(src + i, v + i, false, 0.0f);
  for (int32_t len = 128; len < h; len <<= 1)
    for (int32_t i = 0; i < h; i += len << 1)
      for (int32_t j = i; j < i + len; j += 8) {
        const __m256 a = _mm256_loadu_ps(v + j), b = _mm256_loadu_ps(v + j + len);
        _mm256_storeu_ps(v + j, _mm256_add_ps(a, b));
        _mm256_storeu_ps(v + j + len, _mm256_sub_ps(a, b));
      }
  const __m256 sv = _mm256_set1_ps(s);
  for (int32_t i = 0; i < h; i += 8)
    _mm256_storeu_ps(v + i, _mm256_mul_ps(_mm256_loadu_ps(v + i), sv));
}

CC_AVX2 void wht_normalized_blocks_avx2(const float* src, float* v, int64_t len, int32_t h) {
  const float s = codecs::wht_norm(h);
  switch (h) {  // the sizes the 4-bit codecs batch, with the block loop inside
    case 16:
      for (int64_t i = 0; i < len; i += 16) {
        if (i % 64 == 0) prefetch(src + i + kPrefetchAhead / 4, 256);
        wht_regs<2>(src + i, v + i, true, s);
      }
      return;
    case 32:
      for (int64_t i = 0; i < len; i += 32) {
        if (i % 64 == 0) prefetch(src + i + kPrefetchAhead / 4, 256);
        wht_regs<4>(src + i, v + i, true, s);
      }
      return;
    default:
      for (int64_t i = 0; i < len; i += h) wht_normalized_avx2(src + i, v + i, h);
  }
}

CC_AVX2 int32_t finite_abs_max_avx2(const float* v, int64_t n) {
  __m256i m = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (i % 16 == 0) prefetch(v + i + kPrefetchAhead / 4, 64);
    m = _mm256_max_epi32(m, finite_bits(abs_bits(_mm256_loadu_ps(v + i))));
  }
  int32_t r = hmax_epi32(m);
  for (; i < n; ++i) r = std::max(r, codecs::finite_abs_bits(v[i]));
  return r;
}

CC_AVX2 void group_abs_max_avx2(const float* v, int32_t len, int32_t g, int32_t* amax) {
  for (int32_t i = 0; i < len / g; ++i) {
    const float* p = v + int64_t(i) * g;
    __m256i m = abs_bits(_mm256_loadu_ps(p));
    for (int32_t j = 8; j < g; j += 8) m = _mm256_max_epi32(m, abs_bits(_mm256_loadu_ps(p + j)));
    amax[i] = hmax_epi32(m);
  }
}

CC_AVX2 void sr_uniforms_avx2(uint64_t prefix, int64_t index, int64_t n, float* u) {
  SrNoise8 noise(prefix, index);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(u + i, noise.next());
  for (; i < n; ++i) u[i] = codecs::sr_uniform_at(prefix, index + i);
}

CC_AVX2 int64_t feedback_residual_avx2(const float* v, const float* decoded, int64_t n,
                                       float* residual) {
  const __m256i inf = _mm256_set1_epi32(int32_t(codecs::kF32InfBits));
  int64_t dropped = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(decoded + i);
    const __m256 d = _mm256_sub_ps(a, b);  // add_rn(v, -decoded): the same IEEE difference
    const __m256i finite = _mm256_and_si256(
        _mm256_and_si256(_mm256_cmpgt_epi32(inf, abs_bits(a)), _mm256_cmpgt_epi32(inf, abs_bits(b))),
        _mm256_cmpgt_epi32(inf, abs_bits(d)));
    _mm256_storeu_ps(residual + i, _mm256_and_ps(d, _mm256_castsi256_ps(finite)));
    dropped += 8 - __builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(finite)));
  }
  for (; i < n; ++i) dropped += codecs::feedback_residual_of(v[i], decoded[i], residual + i) ? 1 : 0;
  return dropped;
}

CC_AVX2 float taco_sum_sq_avx2(const float* x, int32_t len) {
  __m256 acc[4];
  for (int r = 0; r < 4; ++r) {
    const __m256 v = _mm256_loadu_ps(x + 8 * r);
    acc[r] = _mm256_add_ps(_mm256_setzero_ps(), _mm256_mul_ps(v, v));
  }
  for (int32_t j = 32; j < len; j += 32)
    for (int r = 0; r < 4; ++r) {
      const __m256 v = _mm256_loadu_ps(x + j + 8 * r);
      acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(v, v));
    }
  return taco_fold32(acc);
}

namespace {

// With kFinite (round to nearest only) the caller knows that y has no NaN or Inf, so
// neither has y / s.
template <class F, bool kSr, bool kFinite = false>
CC_AVX2 inline void fp8_quantize8s(bool keep_inf, const float* y, int32_t n, float s,
                                   const SrDraws* sr, uint8_t* q) {
  const __m256 sv = _mm256_set1_ps(s);
  const __m256i inf = _mm256_set1_epi32(int32_t(codecs::kF32InfBits));
  SrNoise8 noise(kSr ? sr->prefix : 0, kSr ? sr->index : 0);
  for (int32_t i = 0; i < n; i += 8) {
    const __m256 x = _mm256_loadu_ps(y + i);
    const __m256 t = _mm256_div_ps(x, sv);
    __m256i k = kSr ? fp8_from_float_sr8<F>(t, noise.next()) : fp8_from_float8<F, kFinite>(t);
    // codecs::group_quantize: +-Inf codes as itself (E5M2) or NaN (E4M3)
    if (keep_inf && !kFinite) {
      const __m256i xb = _mm256_castps_si256(x);
      const __m256i is_inf =
          _mm256_cmpeq_epi32(_mm256_and_si256(xb, _mm256_set1_epi32(0x7FFFFFFF)), inf);
      const __m256i inf_code =
          F::kHasInf ? _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(xb, 24),
                                                        _mm256_set1_epi32(0x80)),
                                       _mm256_set1_epi32(F::kMaxCode + 1))
                     : _mm256_set1_epi32(codecs::kFp8NaN);
      k = _mm256_blendv_epi8(k, inf_code, is_inf);
    }
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packus_epi16(w, w));
  }
}

// The :sr codes of y / s, 8 at a time, in integers (fp8_from_float_sr8_normal); `offset`
// keeps the unsigned maximum of fp8_sr_normal_offset8, which says whether every y / s was in
// the range they code.
template <class F>
struct Fp8SrNormalCodes {
  const float* y;
  __m256 sv;
  SrNoise8 noise;
  __m256i offset = _mm256_setzero_si256();

  CC_AVX2_INLINE __m256i next(int32_t i) {
    return fp8_sr_normal_code8<F>(_mm256_div_ps(_mm256_loadu_ps(y + i), sv), noise.next_bits(),
                                  offset);
  }
};

// fp8_quantize8s<F, true> with the codes found in integers where every y / s is an FP8 normal
// or larger and finite; the 8-element pieces with another value (a zero, a tiny, Inf or NaN
// one) are coded again by fp8_quantize8s, after the loop, so that the loop has no branch.
template <class F>
CC_AVX2 inline void fp8_quantize_sr(bool keep_inf, const float* y, int32_t n, float s,
                                    const SrDraws& sr, uint8_t* q) {
  Fp8SrNormalCodes<F> codes{y, _mm256_set1_ps(s), SrNoise8(sr.prefix, sr.index)};
  int32_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i k0 = codes.next(i), k1 = codes.next(i + 8), k2 = codes.next(i + 16),
                  k3 = codes.next(i + 24);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), pack32_epu8(k0, k1, k2, k3));
  }
  for (; i < n; i += 8)
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), pack8_epu8(codes.next(i)));
  if (!fp8_sr_outside_normals<F>(codes.offset)) return;
  for (i = 0; i < n; i += 8) {
    Fp8SrNormalCodes<F> piece{y, codes.sv, SrNoise8(sr.prefix, sr.index + i)};
    piece.next(i);
    if (fp8_sr_outside_normals<F>(piece.offset)) {
      const SrDraws draws{sr.prefix, sr.index + i};
      fp8_quantize8s<F, true>(keep_inf, y + i, 8, s, &draws, q + i);
    }
  }
}

}  // namespace

CC_AVX2 void fp8_quantize_avx2(bool e5m2, bool keep_inf, const float* y, int32_t n, float s,
                               const SrDraws* sr, uint8_t* q) {
  if (e5m2) {
    if (sr) return fp8_quantize_sr<codecs::Fp8E5M2>(keep_inf, y, n, s, *sr, q);
    return fp8_quantize8s<codecs::Fp8E5M2, false>(keep_inf, y, n, s, sr, q);
  }
  if (sr) return fp8_quantize_sr<codecs::Fp8E4M3>(keep_inf, y, n, s, *sr, q);
  fp8_quantize8s<codecs::Fp8E4M3, false>(keep_inf, y, n, s, sr, q);
}

namespace {

template <class F>
CC_AVX2 inline float fp8_encode_group(const float* x, int32_t n, uint8_t* q) {
  // The raw |bits| maximum first: below Inf's bits, the group is finite, its finite maximum is
  // that one, and the codes need no NaN or Inf handling.
  __m256i m = _mm256_setzero_si256();
  for (int32_t i = 0; i < n; i += 8) {
    if (i % 16 == 0) prefetch(x + i + kPrefetchAhead / 4, 64);
    m = _mm256_max_epi32(m, abs_bits(_mm256_loadu_ps(x + i)));
  }
  const int32_t raw = hmax_epi32(m);
  if (raw < int32_t(codecs::kF32InfBits)) {
    const float s = codecs::group_scale<F>(raw);
    fp8_quantize8s<F, false, true>(true, x, n, s, nullptr, q);
    return s;
  }
  const float s = codecs::group_scale<F>(finite_abs_max_avx2(x, n));
  fp8_quantize8s<F, false>(true, x, n, s, nullptr, q);
  return s;
}

}  // namespace

CC_AVX2 float fp8_encode_group_avx2(bool e5m2, const float* x, int32_t n, const SrDraws* sr,
                                    uint8_t* q) {
  if (sr) {  // the noise dominates: one quantize loop, in its own function
    const float s = e5m2 ? codecs::group_scale<codecs::Fp8E5M2>(finite_abs_max_avx2(x, n))
                         : codecs::group_scale<codecs::Fp8E4M3>(finite_abs_max_avx2(x, n));
    fp8_quantize_avx2(e5m2, true, x, n, s, sr, q);
    return s;
  }
  if (e5m2) return fp8_encode_group<codecs::Fp8E5M2>(x, n, q);
  return fp8_encode_group<codecs::Fp8E4M3>(x, n, q);
}

CC_AVX2 void fp8_decode_avx2(bool e5m2, const float* lut, const uint8_t* q, int64_t n, float s,
                             float* a, bool accumulate) {
  // The codes decoded by fp8_shift_decode; an 8-code piece with an Inf or NaN code, and the
  // tail, take the table.
  const Fp8ShiftDecode d = fp8_shift_decode(e5m2);
  const __m128i count = _mm_cvtsi32_si128(d.shift);
  const __m256 unbias = _mm256_set1_ps(d.unbias);
  const __m256i special = _mm256_set1_epi32(d.special);
  const __m256i mag = _mm256_set1_epi32(0x7f);
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (accumulate && i % 128 == 0) prefetch(a + i + kAccumulateAhead / 4, 512);
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    const __m256i c = _mm256_cvtepu8_epi32(b);
    const __m256i m = _mm256_and_si256(c, mag);
    const __m256i hit = _mm256_cmpeq_epi32(_mm256_and_si256(m, special), special);
    if (!_mm256_testz_si256(hit, hit)) {  // an Inf or NaN code: these 8 from the table
      fp8_lut_decode(lut, q + i, 8, s, a + i, accumulate);
      continue;
    }
    const __m256i sign = _mm256_slli_epi32(_mm256_xor_si256(c, m), 24);
    const __m256i bits = _mm256_or_si256(sign, _mm256_sll_epi32(m, count));
    const __m256 v = _mm256_mul_ps(_mm256_castsi256_ps(bits), unbias);
    emit8(a + i, _mm256_mul_ps(v, sv), accumulate);
  }
  fp8_lut_decode(lut, q + i, n - i, s, a + i, accumulate);
}

}  // namespace ccompress::cpu

#endif
