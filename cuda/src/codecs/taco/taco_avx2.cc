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

// taco_prescale of the block of 8R values at x (its sum of squares in taco_sum_sq's order).
template <int R, class F>
CC_AVX2_INLINE float block_prescale(const float* x) {
  __m256 acc[4];
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) {
    const __m256 v = _mm256_loadu_ps(x + 8 * i);
    const __m256 sq = _mm256_mul_ps(v, v);  // lane l = element l mod 32, in order
    acc[i % 4] = _mm256_add_ps(i < 4 ? _mm256_setzero_ps() : acc[i % 4], sq);
  }
  return codecs::taco_prescale<F>(taco_fold32(acc), 8 * R);
}

template <int R, class F, bool kSr>
CC_AVX2 void encode_blocks(const float* x, int64_t nblocks, uint64_t prefix, int64_t index,
                           uint8_t* q, uint8_t* pairs) {
  constexpr int32_t kH = 8 * R;
  // The pre-scale (a chain of scalar divisions and a square root) is computed one block
  // ahead, so that it overlaps the previous block's vector work.
  float a_next = nblocks > 0 ? block_prescale<R, F>(x) : 0.0f;
  for (int64_t b = 0; b < nblocks; ++b, x += kH, q += kH, pairs += 8) {
    const float a = a_next;
    prefetch(reinterpret_cast<const char*>(x) + kPrefetchAhead, 4 * kH);
    if (b + 1 < nblocks) a_next = block_prescale<R, F>(x + kH);
    __m256 r[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) r[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 av = _mm256_set1_ps(a);
    __m256i m = _mm256_setzero_si256();
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) r[i] = _mm256_mul_ps(av, r[i]);  // mul_rn(a, x)
    wht_normalized_regs<R>(r);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) m = _mm256_max_epi32(m, abs_bits(r[i]));
    // Raw |y| bits: a NaN or Inf coefficient (non-finite input, or overflow) exceeds Inf's.
    const int32_t amax = hmax_epi32(m);
    float pair[2];
    if (amax >= static_cast<int32_t>(codecs::kF32InfBits)) {
      std::memset(q, 0, kH);
      pair[0] = pair[1] = codecs::taco_nan();
    } else {
      const float s = codecs::taco_scale<F>(amax);
      const __m256 sv = _mm256_set1_ps(s);
      SrNoise8 noise(prefix, index + b * kH);
      __m256i k[R];
      __m256i offset = _mm256_setzero_si256();  // :sr: see fp8_sr_normal_offset8
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        const __m256 t = _mm256_div_ps(r[i], sv);
        if (kSr) {  // in integers where every |t| is an FP8 normal or larger
          k[i] = fp8_sr_normal_code8<F>(t, noise.next_bits(), offset);
        } else {
          // Every y of a block that gets here is finite and s >= amax / FP8_MAX or y / s is
          // below FP8_MAX anyway (s at its ceiling): no lane of t is NaN.
          k[i] = fp8_from_float8<F, true>(t);
        }
      }
      if (kSr && fp8_sr_outside_normals<F>(offset)) {  // a zero or tiny t: the float steps
        SrNoise8 again(prefix, index + b * kH);
        for (int i = 0; i < R; ++i)
          k[i] = fp8_from_float_sr8<F>(_mm256_div_ps(r[i], sv), again.next());
      }
#pragma GCC unroll 4
      for (int i = 0; i < R; i += 4)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * i),
                            pack32_epu8(k[i], k[i + 1], k[i + 2], k[i + 3]));
      pair[0] = a;
      pair[1] = s;
    }
    std::memcpy(pairs, pair, 8);
  }
}

template <int R, class F>
CC_AVX2 void decode_blocks(const uint8_t* q, const uint8_t* pairs, int64_t nblocks, float* out,
                           bool accumulate) {
  constexpr int32_t kH = 8 * R;
  for (int64_t b = 0; b < nblocks; ++b, q += kH, pairs += 8, out += kH) {
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
