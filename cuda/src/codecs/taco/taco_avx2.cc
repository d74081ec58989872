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

// The FP8 codes of a finite block's normalised transform r (R registers) with scale s, to q;
// `:sr` draws of element i at sr_uniform_at(prefix, index + i).
template <int R, class F, bool kSr>
CC_AVX2_INLINE void block_codes(const __m256* r, float s, uint64_t prefix, int64_t index,
                                uint8_t* q) {
  const __m256 sv = _mm256_set1_ps(s);
  SrNoise8 noise(prefix, index);
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
    SrNoise8 again(prefix, index);
    for (int i = 0; i < R; ++i)
      k[i] = fp8_from_float_sr8<F>(_mm256_div_ps(r[i], sv), again.next());
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; i += 4)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * i),
                        pack32_epu8(k[i], k[i + 1], k[i + 2], k[i + 3]));
}

// Blocks are encoded a chunk at a time, in passes over the chunk: pre-scales; transforms and
// maxima; scales and codes. Within a pass one block's dependency chain (the pre-scale's square
// root and divisions, the transform's stages, the scale's division) does not wait on the
// previous block's, so the chains of neighbouring blocks overlap.
template <int R, class F, bool kSr>
CC_AVX2 void encode_blocks(const float* x, int64_t nblocks, uint64_t prefix, int64_t index,
                           uint8_t* q, uint8_t* pairs) {
  constexpr int32_t kH = 8 * R;
  constexpr int kChunk = 1024 / kH;  // blocks per chunk: 4 KiB of input
  __m256 y[kChunk][R];               // the chunk's normalised transforms
  float a[kChunk];
  int32_t amax[kChunk];
  for (int64_t b0 = 0; b0 < nblocks; b0 += kChunk) {
    const int n = static_cast<int>(nblocks - b0 < kChunk ? nblocks - b0 : kChunk);
    const float* xc = x + b0 * kH;
    for (int b = 0; b < n; ++b) a[b] = block_prescale<R, F>(xc + b * kH);
    for (int b = 0; b < n; ++b) {
      prefetch(xc + (kChunk + b) * kH, 4 * kH);  // block b of the next chunk
      const __m256 av = _mm256_set1_ps(a[b]);
      __m256 r[R];
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) r[i] = _mm256_mul_ps(av, _mm256_loadu_ps(xc + b * kH + 8 * i));
      wht_normalized_regs<R>(r);  // of mul_rn(a, x)
      __m256i m = _mm256_setzero_si256();
#pragma GCC unroll 16
      for (int i = 0; i < R; ++i) {
        m = _mm256_max_epi32(m, abs_bits(r[i]));
        y[b][i] = r[i];
      }
      amax[b] = hmax_epi32(m);
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
        pair[1] = codecs::taco_scale<F>(amax[b]);
        block_codes<R, F, kSr>(y[b], pair[1], prefix, index + e, q + e);
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
