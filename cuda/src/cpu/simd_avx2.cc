// AVX2 kernels of simd_avx2.h. Every butterfly forms a + b and a - b from the operands the
// scalar transform (fast_wht.h) uses at that stage (GCC compiles its a + -b to a - b), so the
// results, NaN payloads included, are those of the scalar loops.
#include "cpu/simd_avx2.h"

#ifdef CC_HAVE_SIMD_AVX2

#include <immintrin.h>

#include "codecs/hadamard.h"
#include "codecs/hint8/hint8.h"

namespace ccompress::cpu {

namespace {

#define CC_AVX2 __attribute__((target("avx2")))

// Stages 1, 2 and 4 of eight values in one register. Per stage, w holds each lane's partner
// (lane i ^ len): the lower lane of a butterfly takes v + w = a + b, the upper one w - v = a - b.
CC_AVX2 inline __m256 wht8(__m256 v) {
  __m256 w = _mm256_permute_ps(v, 0xB1);
  v = _mm256_blend_ps(_mm256_add_ps(v, w), _mm256_sub_ps(w, v), 0xAA);
  w = _mm256_permute_ps(v, 0x4E);
  v = _mm256_blend_ps(_mm256_add_ps(v, w), _mm256_sub_ps(w, v), 0xCC);
  w = _mm256_permute2f128_ps(v, v, 0x01);
  return _mm256_blend_ps(_mm256_add_ps(v, w), _mm256_sub_ps(w, v), 0xF0);
}

// Stages 1 .. 4R of 8R values (R registers) from src to dst (which may be src); with
// @p scale, times s at the end.
template <int R>
CC_AVX2 inline void wht_regs(const float* src, float* dst, bool scale, float s) {
  __m256 r[R];
  for (int i = 0; i < R; ++i) r[i] = wht8(_mm256_loadu_ps(src + 8 * i));
  for (int len = 1; len < R; len <<= 1)
    for (int i = 0; i < R; i += 2 * len)
      for (int j = i; j < i + len; ++j) {
        const __m256 a = r[j], b = r[j + len];
        r[j] = _mm256_add_ps(a, b);
        r[j + len] = _mm256_sub_ps(a, b);
      }
  const __m256 sv = _mm256_set1_ps(s);
  for (int i = 0; i < R; ++i)
    _mm256_storeu_ps(dst + 8 * i, scale ? _mm256_mul_ps(r[i], sv) : r[i]);
}

CC_AVX2 inline __m256i abs_bits(__m256 v) {
  return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF));
}

CC_AVX2 inline int32_t hmax_epi32(__m256i m) {
  m = _mm256_max_epi32(m, _mm256_permute2x128_si256(m, m, 1));
  m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0x4E));
  m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0xB1));
  return _mm256_cvtsi256_si32(m);
}

// The low 64 bits of a * k for four 64-bit lanes (AVX2 has only 32 x 32 -> 64 multiplies):
// lo(a) lo(k) + ((hi(a) lo(k) + lo(a) hi(k)) << 32), all mod 2^64.
CC_AVX2 inline __m256i mul64(__m256i a, uint64_t k) {
  const __m256i klo = _mm256_set1_epi64x(static_cast<int64_t>(k & 0xFFFFFFFFu));
  const __m256i khi = _mm256_set1_epi64x(static_cast<int64_t>(k >> 32));
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), klo),
                                         _mm256_mul_epu32(a, khi));
  return _mm256_add_epi64(_mm256_mul_epu32(a, klo), _mm256_slli_epi64(cross, 32));
}

// codecs::mix64 on four lanes.
CC_AVX2 inline __m256i mix64x4(__m256i z) {
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xBF58476D1CE4E5B9ull);
  z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94D049BB133111EBull);
  return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

// The bits of 8 lanes as unsigned: u < v, as codecs::sr_step compares them.
CC_AVX2 inline __m256i lt_u32(__m256i u, __m256i v) {
  const __m256i bias = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  return _mm256_cmpgt_epi32(_mm256_xor_si256(v, bias), _mm256_xor_si256(u, bias));
}

// codecs::floor_small on 8 lanes: r = RNE(t) by +- 1.5 * 2^23, minus 1 where r - t > 0.
CC_AVX2 inline __m256 floor_small8(__m256 t) {
  const __m256 c = _mm256_set1_ps(12582912.0f);
  const __m256 r = _mm256_sub_ps(_mm256_add_ps(t, c), c);
  const __m256i up = _mm256_cmpgt_epi32(_mm256_castps_si256(_mm256_sub_ps(r, t)),
                                        _mm256_setzero_si256());
  return _mm256_add_ps(r, _mm256_and_ps(_mm256_castsi256_ps(up), _mm256_set1_ps(-1.0f)));
}

// codecs::sr_step(u, frac) on 8 lanes: 1.0f where bits(u) < bits(frac), else +0.
CC_AVX2 inline __m256 sr_step8(__m256 u, __m256 frac) {
  return _mm256_and_ps(_mm256_castsi256_ps(lt_u32(_mm256_castps_si256(u),
                                                  _mm256_castps_si256(frac))),
                       _mm256_set1_ps(1.0f));
}

// codecs::s8_decode(e, c) on 8 lanes; pe = 2^(E-127) as a float, c in 0..127.
CC_AVX2 inline __m256 s8_decode8(__m256 pe, __m256i c, __m256 t_lo, __m256 t_hi) {
  const __m256i j = _mm256_and_si256(c, _mm256_set1_epi32(7));
  const __m256 hi_half = _mm256_castsi256_ps(_mm256_slli_epi32(c, 28));  // bit 3 -> sign
  const __m256 frac = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t_lo, j),
                                       _mm256_permutevar8x32_ps(t_hi, j), hi_half);
  const __m256i pow2 =
      _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127), _mm256_srli_epi32(c, 4)), 23);
  return _mm256_mul_ps(_mm256_mul_ps(pe, frac), _mm256_castsi256_ps(pow2));
}

// codecs::fp8_from_float<F> on 8 lanes (int32 codes 0..255).
template <class F>
CC_AVX2 inline __m256i fp8_from_float8(__m256 x) {
  constexpr int32_t kMinExp = 128 - F::kBias, kMaxExp = F::kMaxF32Bits >> 23;
  const __m256i u = _mm256_castps_si256(x);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(int32_t(codecs::kF32InfBits)));
  __m256i e = _mm256_srli_epi32(a, 23);
  e = _mm256_min_epi32(_mm256_max_epi32(e, _mm256_set1_epi32(kMinExp)),
                       _mm256_set1_epi32(kMaxExp));
  const __m256i c = _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(23 - F::kMantBits)), 23);
  const __m256i k = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(c))), c);
  __m256i code = _mm256_add_epi32(
      _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(kMinExp)), F::kMantBits), k);
  const __m256i limit = _mm256_blendv_epi8(_mm256_set1_epi32(F::kMaxCode),
                                           _mm256_set1_epi32(codecs::kFp8NaN), nan);
  code = _mm256_min_epu32(code, limit);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  return _mm256_or_si256(code, _mm256_andnot_si256(nan, sign));
}

// codecs::fp8_from_float_sr<F>(v, u) on 8 lanes.
template <class F>
CC_AVX2 inline __m256i fp8_from_float_sr8(__m256 v, __m256 u) {
  constexpr int32_t kMinExp = 128 - F::kBias, kMaxExp = F::kMaxF32Bits >> 23;
  const __m256i bits = _mm256_castps_si256(v);
  const __m256 max = _mm256_set1_ps(F::kMax);
  __m256 a = _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF)));
  a = _mm256_blendv_ps(a, max, _mm256_cmp_ps(a, max, _CMP_GT_OQ));  // clamp_f(a, 0, max)
  __m256i e = _mm256_srli_epi32(_mm256_castps_si256(a), 23);
  e = _mm256_min_epi32(_mm256_max_epi32(e, _mm256_set1_epi32(kMinExp)),
                       _mm256_set1_epi32(kMaxExp));
  const __m256 spacing = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(F::kMantBits)), 23));
  const __m256 t = _mm256_div_ps(a, spacing);
  const __m256 k = floor_small8(t);
  const __m256 r = _mm256_mul_ps(_mm256_add_ps(k, sr_step8(u, _mm256_sub_ps(t, k))), spacing);
  const __m256i sign = _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
  return fp8_from_float8<F>(_mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(r), sign)));
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

CC_AVX2 void wht_normalized_blocks_avx2(float* v, int64_t len, int32_t h) {
  const float s = codecs::wht_norm(h);
  switch (h) {  // the sizes the 4-bit codecs batch, with the block loop inside
    case 16:
      for (int64_t i = 0; i < len; i += 16) wht_regs<2>(v + i, v + i, true, s);
      return;
    case 32:
      for (int64_t i = 0; i < len; i += 32) wht_regs<4>(v + i, v + i, true, s);
      return;
    default:
      for (int64_t i = 0; i < len; i += h) wht_normalized_avx2(v + i, v + i, h);
  }
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
  const __m256i pre = _mm256_set1_epi64x(static_cast<int64_t>(prefix));
  const __m256i four = _mm256_set1_epi64x(4), eight = _mm256_set1_epi64x(8);
  __m256i i0 = _mm256_add_epi64(_mm256_set1_epi64x(index), _mm256_setr_epi64x(0, 1, 2, 3));
  __m256i i1 = _mm256_add_epi64(i0, four);
  const __m256 scale = _mm256_set1_ps(5.9604644775390625e-8f);  // 2^-24
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    // h >> 40 (24 bits) sits in the low half of each 64-bit lane: gather the halves in order.
    const __m256i h0 = _mm256_srli_epi64(mix64x4(_mm256_xor_si256(pre, i0)), 40);
    const __m256i h1 = _mm256_srli_epi64(mix64x4(_mm256_xor_si256(pre, i1)), 40);
    const __m256 lo = _mm256_shuffle_ps(_mm256_castsi256_ps(h0), _mm256_castsi256_ps(h1), 0x88);
    const __m256i k = _mm256_permute4x64_epi64(_mm256_castps_si256(lo), 0xD8);
    _mm256_storeu_ps(u + i, _mm256_mul_ps(_mm256_cvtepi32_ps(k), scale));
    i0 = _mm256_add_epi64(i0, eight);
    i1 = _mm256_add_epi64(i1, eight);
  }
  for (; i < n; ++i) u[i] = codecs::sr_uniform_at(prefix, index + i);
}

CC_AVX2 void hint8_s8_scales_avx2(uint32_t e, const int32_t* amax, int32_t k, uint32_t* code,
                                  float* scale) {
  static const struct Table {
    float t[16];
    Table() {
      for (uint32_t j = 0; j < 16; ++j) t[j] = codecs::log_scale_frac(j);
    }
  } table;
  const __m256 t_lo = _mm256_loadu_ps(table.t), t_hi = _mm256_loadu_ps(table.t + 8);
  alignas(32) int32_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int32_t i = 0; i < k; ++i) a[i] = amax[i];
  const __m256i av = _mm256_load_si256(reinterpret_cast<const __m256i*>(a));
  const __m256i bad = _mm256_cmpgt_epi32(av, _mm256_set1_epi32(int32_t(codecs::kF32InfBits) - 1));
  // hint8_base_scale: max(amax / 127, FLT_MIN) (s > floor ? s : floor is maxps's rule).
  const __m256 s = _mm256_max_ps(
      _mm256_div_ps(_mm256_castsi256_ps(av), _mm256_set1_ps(codecs::kInt8Max)),
      _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(codecs::kF32MinNormalBits))));
  // s8_code's first guess 16 log2(2^(E-127) / s) = (d * 16) >> 23 = d >> 19 for d > 0; then
  // the same steps: down while decode(c) < s, up while decode(c + 1) >= s. The decoded scale
  // does not increase with c, so this ends at the code s8_code returns.
  const __m256 pe = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(e << 23)));
  const __m256i d = _mm256_sub_epi32(_mm256_set1_epi32(int32_t(e << 23)), _mm256_castps_si256(s));
  const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
  const __m256i cmax = _mm256_set1_epi32(int32_t(codecs::kS8MaxCode));
  __m256i c = _mm256_min_epi32(_mm256_max_epi32(_mm256_srai_epi32(d, 19), zero), cmax);
  for (;;) {
    const __m256 dc = s8_decode8(pe, c, t_lo, t_hi);
    const __m256 dn = s8_decode8(pe, _mm256_add_epi32(c, one), t_lo, t_hi);
    const __m256i below = _mm256_castps_si256(_mm256_cmp_ps(dc, s, _CMP_LT_OQ));
    const __m256i down = _mm256_and_si256(below, _mm256_cmpgt_epi32(c, zero));
    const __m256i up = _mm256_andnot_si256(
        below, _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(dn, s, _CMP_GE_OQ)),
                                _mm256_cmpgt_epi32(cmax, c)));
    // down / up are -1 where they apply.
    c = _mm256_sub_epi32(_mm256_add_epi32(c, down), up);
    if (_mm256_testz_si256(_mm256_or_si256(down, up), _mm256_or_si256(down, up))) break;
  }
  const __m256 sc = _mm256_blendv_ps(s8_decode8(pe, c, t_lo, t_hi),
                                     _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(codecs::kF32QNaNBits))),
                                     _mm256_castsi256_ps(bad));
  c = _mm256_blendv_epi8(c, _mm256_set1_epi32(int32_t(codecs::kS8NaN)), bad);
  alignas(32) uint32_t cs[8];
  alignas(32) float ss[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(cs), c);
  _mm256_store_ps(ss, sc);
  for (int32_t i = 0; i < k; ++i) {
    code[i] = cs[i];
    scale[i] = ss[i];
  }
}

CC_AVX2 void hint8_quantize_avx2(const float* y, int32_t len, int32_t g, const float* scale,
                                 const float* u, int8_t* q) {
  const __m256 c = _mm256_set1_ps(12582912.0f);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  for (int32_t i = 0; i < len; i += 8) {
    const float s = scale[i / g];
    if (!codecs::f32_is_finite(s)) {  // a non-finite group: zero codes
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_setzero_si128());
      continue;
    }
    const __m256 t = _mm256_div_ps(_mm256_loadu_ps(y + i), _mm256_set1_ps(s));
    __m256 r;
    if (u != nullptr) {  // hint8_quantize_sr: floor(t) + [u < frac]
      const __m256 k = floor_small8(t);
      r = _mm256_add_ps(k, sr_step8(_mm256_loadu_ps(u + i), _mm256_sub_ps(t, k)));
    } else {  // hint8_quantize: RNE by +- 1.5 * 2^23
      r = _mm256_sub_ps(_mm256_add_ps(t, c), c);
    }
    const __m256i k = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(r), lo), hi);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(w, w));
  }
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
  // The pairwise fold of taco_sum_sq: lane l += lane l + off for off = 16, 8, 4, 2, 1.
  acc[0] = _mm256_add_ps(acc[0], acc[2]);
  acc[1] = _mm256_add_ps(acc[1], acc[3]);
  acc[0] = _mm256_add_ps(acc[0], acc[1]);
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc[0]), _mm256_extractf128_ps(acc[0], 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
  return _mm_cvtss_f32(v);
}

namespace {

template <class F>
CC_AVX2 inline void fp8_quantize8s(bool keep_inf, const float* y, int32_t n, float s,
                                   const float* u, uint8_t* q) {
  const __m256 sv = _mm256_set1_ps(s);
  const __m256i inf = _mm256_set1_epi32(int32_t(codecs::kF32InfBits));
  for (int32_t i = 0; i < n; i += 8) {
    const __m256 x = _mm256_loadu_ps(y + i);
    const __m256 t = _mm256_div_ps(x, sv);
    __m256i k = u != nullptr ? fp8_from_float_sr8<F>(t, _mm256_loadu_ps(u + i))
                             : fp8_from_float8<F>(t);
    if (keep_inf) {  // codecs::group_quantize: +-Inf codes as itself (E5M2) or NaN (E4M3)
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

}  // namespace

CC_AVX2 void fp8_quantize_avx2(bool e5m2, bool keep_inf, const float* y, int32_t n, float s,
                               const float* u, uint8_t* q) {
  if (e5m2) return fp8_quantize8s<codecs::Fp8E5M2>(keep_inf, y, n, s, u, q);
  fp8_quantize8s<codecs::Fp8E4M3>(keep_inf, y, n, s, u, q);
}

}  // namespace ccompress::cpu

#endif
