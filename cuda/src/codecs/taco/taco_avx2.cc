// TACO's AVX2 block kernels (taco_avx2.h). Lane by lane they are taco.cc's scalar loops:
// taco_sum_sq's lane order and fold, taco_prescale, mul_rn(a, x), the normalised transform,
// taco_scale, fp8_from_float(_sr) of y / s; decode fp8_to_float(q) * s, the transform, / a.
#include "codecs/taco/taco_avx2.h"

#ifdef CC_HAVE_SIMD_AVX2

#include <cstring>
#include <type_traits>

#include "codecs/taco/taco.h"
#include "cpu/simd_avx2_inl.h"

namespace ccompress::cpu {

using namespace avx2;

namespace {

// ---- encode ----

// clamp_f(v, lo, hi) on 8 lanes (a NaN lane stays NaN).
CC_AVX2_INLINE __m256 clamp8(__m256 v, float lo, float hi) {
  const __m256 l = _mm256_set1_ps(lo), h = _mm256_set1_ps(hi);
  const __m256 r = _mm256_blendv_ps(v, h, _mm256_cmp_ps(v, h, _CMP_GT_OQ));
  return _mm256_blendv_ps(r, l, _mm256_cmp_ps(v, l, _CMP_LT_OQ));
}

// taco_prescale of the eight blocks of 8R values at x (one after the other), block b in lane
// b: each block's 32 lane sums of squares in taco_sum_sq's order, their fold in
// taco_fold32's order with the eight blocks side by side across the lanes, then
// taco_prescale's steps on eight lanes (the same IEEE operations on the same operands).
template <int R, class F>
CC_AVX2_INLINE __m256 prescale8(const float* x) {
  __m256 v[8];  // block b: lane l = sum of lanes l, l + 8, l + 16, l + 24 (taco_fold32)
#pragma GCC unroll 8
  for (int b = 0; b < 8; ++b) {
    __m256 acc[4];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      const __m256 u = _mm256_loadu_ps(x + 8 * (R * b + i));
      const __m256 sq = _mm256_mul_ps(u, u);  // lane l = element l mod 32, in order
      acc[i % 4] = _mm256_add_ps(i < 4 ? _mm256_setzero_ps() : acc[i % 4], sq);
    }
    v[b] = _mm256_add_ps(_mm256_add_ps(acc[0], acc[2]), _mm256_add_ps(acc[1], acc[3]));
  }
  // lane l += lane l + 4: blocks 2i and 2i + 1 in the halves of w[i]
  __m256 w[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    w[i] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
  // lane l += lane l + 2: blocks 4j, 4j + 2 (low half) and 4j + 1, 4j + 3 (high half) of u[j]
  __m256 u[2];
#pragma GCC unroll 2
  for (int j = 0; j < 2; ++j)
    u[j] = _mm256_add_ps(_mm256_shuffle_ps(w[2 * j], w[2 * j + 1], 0x44),
                         _mm256_shuffle_ps(w[2 * j], w[2 * j + 1], 0xEE));
  // lane 0 += lane 1: blocks 0, 2, 4, 6, 1, 3, 5, 7, then in order
  __m256 sum = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], 0x88),
                             _mm256_shuffle_ps(u[0], u[1], 0xDD));
  sum = _mm256_permutevar8x32_ps(sum, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  // taco_prescale
  const __m256 mean = _mm256_div_ps(sum, _mm256_set1_ps(static_cast<float>(8 * R)));
  const __m256 rms = _mm256_sqrt_ps(_mm256_add_ps(mean, _mm256_set1_ps(codecs::kTacoEps)));
  const __m256 a = _mm256_div_ps(_mm256_set1_ps(F::kMax), rms);
  return clamp8(a, codecs::kTacoAMin, codecs::kTacoAMax);
}

// taco_scale of eight raw |y| maxima (finite lanes; the others' lanes are not used).
template <class F>
CC_AVX2_INLINE __m256 scale8(__m256i amax_bits) {
  const __m256 s = _mm256_div_ps(_mm256_castsi256_ps(amax_bits), _mm256_set1_ps(F::kMax));
  return clamp8(s, codecs::kTacoSMin, codecs::kTacoSMax);
}

// wht8 for the encode, whose coefficients are passed on only when all of them are finite:
// each butterfly adds the lane's partner and the lane itself, its sign flipped in the upper
// lanes (b + a = a + b and a + -b = a - b exactly; only a NaN's sign can differ), instead of
// an add, a subtract and a blend.
CC_AVX2_INLINE __m256 wht8_finite(__m256 v) {
  constexpr int32_t S = INT32_MIN;  // the sign bit
  const __m256 upper1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, S, 0, S, 0, S, 0, S));
  const __m256 upper2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, S, S, 0, 0, S, S));
  const __m256 upper4 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, S, S, S, S));
  v = _mm256_add_ps(_mm256_permute_ps(v, 0xB1), _mm256_xor_ps(v, upper1));
  v = _mm256_add_ps(_mm256_permute_ps(v, 0x4E), _mm256_xor_ps(v, upper2));
  return _mm256_add_ps(_mm256_permute2f128_ps(v, v, 0x01), _mm256_xor_ps(v, upper4));
}

// The fp32 exponent of half FP8's smallest subnormal: below it every value codes to 0.
template <class F>
inline constexpr int32_t kFp8HalfSubnormalExp = 128 - F::kBias - F::kMantBits - 1;

// fp8_from_float8<F, true> of 32 finite quotients t[0..4) (elements in order), in integers:
// |bits| rounded to the FP8 spacing of its binade, to nearest even as the reference's fp32
// add rounds (plus half the spacing less one plus the lowest kept bit: a tie steps up only
// from an odd code, and a carry moves to the next binade), shifted down to 16-bit lanes, less
// the exponent offset; saturated to 0..kMaxCode (zero and values below half the smallest
// subnormal come out negative, values past FP8_MAX above kMaxCode), with t's sign (the signed
// saturation of its bits keeps exactly the sign in bit 7). That is the reference's code except
// where |t| is an FP8 subnormal or rounds to the smallest one, whose spacing is the
// subnormals': @p tiny keeps the unsigned minimum of the shifted values less
// kFp8HalfSubnormalExp's, and fp8_some_subnormal tells from it whether a lane was such a t.
template <class F>
CC_AVX2_INLINE __m256i fp8_codes32(const __m256* t, __m256i& tiny) {
  constexpr int32_t kDrop = 23 - F::kMantBits, kM = F::kMantBits;
  __m256i h[4];
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m256i a = abs_bits(t[j]);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, kDrop), _mm256_set1_epi32(1));
    const __m256i half = _mm256_set1_epi32((1 << (kDrop - 1)) - 1);
    h[j] = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(a, half), odd), kDrop);
  }
  __m256i m[2];  // the magnitudes of t[2i] and t[2i + 1], 16-bit lanes
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    const __m256i above = _mm256_sub_epi16(_mm256_packs_epi32(h[2 * i], h[2 * i + 1]),
                                           _mm256_set1_epi16(kFp8HalfSubnormalExp<F> << kM));
    tiny = _mm256_min_epu16(tiny, above);
    m[i] = _mm256_sub_epi16(above, _mm256_set1_epi16(kM << kM));  // less (kMinExp - 1) << m
  }
  // the lane order of pack32_epu8
  const __m256i mag = _mm256_min_epu8(
      _mm256_permutevar8x32_epi32(_mm256_packus_epi16(m[0], m[1]),
                                  _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)),
      _mm256_set1_epi8(F::kMaxCode));
  const __m256i sign = pack32_epi8(_mm256_castps_si256(t[0]), _mm256_castps_si256(t[1]),
                                   _mm256_castps_si256(t[2]), _mm256_castps_si256(t[3]));
  return _mm256_or_si256(mag,
                         _mm256_and_si256(sign, _mm256_set1_epi8(static_cast<char>(0x80))));
}

// True where fp8_codes32's @p tiny says some |t| was coded with the normals' spacing where the
// subnormals' applies: from half the smallest subnormal (exponent kFp8HalfSubnormalExp) up to
// the smallest normal (exponent 128 - bias), m + 1 binades of 2^m steps.
template <class F>
CC_AVX2_INLINE bool fp8_some_subnormal(__m256i tiny) {
  const __m256i below = _mm256_set1_epi16(((F::kMantBits + 1) << F::kMantBits) - 1);
  const __m256i sub = _mm256_cmpeq_epi16(_mm256_min_epu16(tiny, below), tiny);
  return !_mm256_testz_si256(sub, sub);
}

// The FP8 codes of a finite block's normalised transform r (R registers) with scale s, to q;
// `:sr` draws of element i at sr_uniform_at(prefix, index + i).
template <int R, class F, bool kSr>
CC_AVX2_INLINE void block_codes(const __m256* r, float s, uint64_t prefix, int64_t index,
                                uint8_t* q) {
  const __m256 sv = _mm256_set1_ps(s);
  __m256i out[R / 4];  // 32 codes each
  if (kSr) {
    SrNoise8 noise(prefix, index);
    __m256i k[R];
    __m256i offset = _mm256_setzero_si256();  // see fp8_sr_normal_offset8
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i)  // in integers where every |t| is an FP8 normal or larger
      k[i] = fp8_sr_normal_code8<F>(_mm256_div_ps(r[i], sv), noise.next_bits(), offset);
    if (fp8_sr_outside_normals<F>(offset)) {  // a zero or tiny t: the float steps
      SrNoise8 again(prefix, index);
      for (int i = 0; i < R; ++i)
        k[i] = fp8_from_float_sr8<F>(_mm256_div_ps(r[i], sv), again.next());
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i += 4) out[i / 4] = pack32_epu8(k[i], k[i + 1], k[i + 2], k[i + 3]);
  } else {
    // Every y of a block that gets here is finite and s >= amax / FP8_MAX or y / s is below
    // FP8_MAX anyway (s at its ceiling): every t is finite.
    __m256i tiny = _mm256_set1_epi32(-1);
#pragma GCC unroll 4
    for (int i = 0; i < R; i += 4) {
      __m256 t[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) t[j] = _mm256_div_ps(r[i + j], sv);
      out[i / 4] = fp8_codes32<F>(t, tiny);
    }
    if (fp8_some_subnormal<F>(tiny)) {  // the float steps
      __m256i k[R];
      for (int i = 0; i < R; ++i) k[i] = fp8_from_float8<F, true>(_mm256_div_ps(r[i], sv));
      for (int i = 0; i < R; i += 4) out[i / 4] = pack32_epu8(k[i], k[i + 1], k[i + 2], k[i + 3]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; i += 4)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * i), out[i / 4]);
}

// Blocks are encoded a chunk at a time, in passes over the chunk: pre-scales; transforms and
// maxima; scales; codes. Within a pass one block's dependency chain (the transform's stages,
// the codes) does not wait on the previous block's, so the chains of neighbouring blocks
// overlap; the pre-scales and scales (square roots and divisions) are computed for eight
// blocks at a time in the lanes of one register.
template <int R, class F, bool kSr>
CC_AVX2 void encode_blocks(const float* x, int64_t nblocks, uint64_t prefix, int64_t index,
                           uint8_t* q, uint8_t* pairs) {
  constexpr int32_t kH = 8 * R;
  constexpr int kChunk = 1024 / kH;  // blocks per chunk: 4 KiB of input, a multiple of 8
  __m256 y[kChunk][R];               // the chunk's normalised transforms
  __m256i ymax[kChunk];              // their raw |bits| maxima, lane by lane
  alignas(32) float a[kChunk], s[kChunk];
  alignas(32) int32_t amax[kChunk];
  alignas(32) float tail[kChunk * kH];  // the run's last blocks, zero-padded to a group of 8
  for (int64_t b0 = 0; b0 < nblocks; b0 += kChunk) {
    const int n = static_cast<int>(nblocks - b0 < kChunk ? nblocks - b0 : kChunk);
    const int n8 = (n + 7) & ~7;
    const float* xc = x + b0 * kH;
    if (n < n8) {
      std::memcpy(tail, xc, sizeof(float) * kH * n);
      std::memset(tail + kH * n, 0, sizeof(float) * kH * (n8 - n));
      xc = tail;
    }
    for (int g = 0; g < n8; g += 8) _mm256_store_ps(a + g, prescale8<R, F>(xc + g * kH));
    for (int b = 0; b < n8; ++b) {
      prefetch(x + (b0 + kChunk + b) * kH, 4 * kH);  // block b of the next chunk
      const __m256 av = _mm256_set1_ps(a[b]);
      __m256 r[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) r[i] = _mm256_mul_ps(av, _mm256_loadu_ps(xc + kH * b + 8 * i));
      wht_normalized_regs<R, wht8_finite>(r);  // of mul_rn(a, x)
      __m256i m = _mm256_setzero_si256();
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        m = _mm256_max_epi32(m, abs_bits(r[i]));
        y[b][i] = r[i];
      }
      ymax[b] = m;
    }
    for (int g = 0; g < n8; g += 8) {
      const __m256i m = hmax8x8(ymax + g);
      _mm256_store_si256(reinterpret_cast<__m256i*>(amax + g), m);
      _mm256_store_ps(s + g, scale8<F>(m));
    }
    for (int b = 0; b < n; ++b) {
      const int64_t e = (b0 + b) * kH;  // the block's first element
      float pair[2];
      // Raw |y| bits: a NaN or Inf coefficient (non-finite input, or overflow) exceeds Inf's.
      if (amax[b] >= static_cast<int32_t>(codecs::kF32InfBits)) {
        std::memset(q + e, 0, kH);
        pair[0] = pair[1] = codecs::taco_nan();
      } else {
        pair[0] = a[b];
        pair[1] = s[b];
        block_codes<R, F, kSr>(y[b], s[b], prefix, index + e, q + e);
      }
      std::memcpy(pairs + 8 * (b0 + b), pair, 8);
    }
  }
}

template <int R, class F>
CC_AVX2 void decode_blocks(const uint8_t* q, const uint8_t* pairs, int64_t nblocks, float* out,
                           bool accumulate) {
  constexpr int32_t kH = 8 * R;
  for (int64_t b = 0; b < nblocks; ++b, q += kH, pairs += 8, out += kH) {
    if (accumulate) prefetch(out + kAccumulateAhead / 4, 4 * kH);
    float pair[2];
    std::memcpy(pair, pairs, 8);
    const __m256 sv = _mm256_set1_ps(pair[1]), av = _mm256_set1_ps(pair[0]);
    __m256 r[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) r[i] = _mm256_mul_ps(fp8_to_float8<F>(q + 8 * i), sv);
    wht_normalized_regs<R>(r);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) emit8(out + 8 * i, _mm256_div_ps(r[i], av), accumulate);
  }
}

// Calls fn(integral_constant<R>, format) for g = 8R and the codec's FP8 format.
template <class Fn>
inline void with_shape(const TacoShape& s, Fn fn) {
  auto with_format = [&](auto r) {
    if (s.e5m2) return fn(r, codecs::Fp8E5M2{});
    fn(r, codecs::Fp8E4M3{});
  };
  switch (s.g) {
    case 32: return with_format(std::integral_constant<int, 4>{});
    case 64: return with_format(std::integral_constant<int, 8>{});
    default: return with_format(std::integral_constant<int, 16>{});
  }
}

}  // namespace

CC_AVX2 void taco_encode_blocks_avx2(const TacoShape& s, const float* x, int64_t nblocks,
                                     uint64_t prefix, int64_t index, uint8_t* q,
                                     uint8_t* pairs) {
  with_shape(s, [&](auto r, auto f) {
    using F = decltype(f);
    if (s.sr) return encode_blocks<r.value, F, true>(x, nblocks, prefix, index, q, pairs);
    encode_blocks<r.value, F, false>(x, nblocks, prefix, index, q, pairs);
  });
}

CC_AVX2 void taco_decode_blocks_avx2(const TacoShape& s, const uint8_t* q, const uint8_t* pairs,
                                     int64_t nblocks, float* out, bool accumulate) {
  with_shape(s, [&](auto r, auto f) {
    decode_blocks<r.value, decltype(f)>(q, pairs, nblocks, out, accumulate);
  });
}

}  // namespace ccompress::cpu

#endif
