// The AVX2 building blocks of the host codec kernels (simd_avx2.cc and the families'
// *_avx2.cc): the normalised Walsh-Hadamard transform of a block held in registers, group
// maxima, the counter-based stochastic rounding noise, FP8 and s8 code math, int8 packing.
// Each computes, lane by lane, exactly what its scalar reference in cuda/src/codecs does (the
// same IEEE fp32 adds, subtracts, multiplies and divides on the same operands in the same
// order, the same integer hash), so the bits, NaN payloads included, do not depend on which
// runs; tests/codecs/test_cpu_isa.py and tests/codecs/test_digests.py check it.
//
// Host-only and x86-64 only: include it from a .cc file compiled by the host compiler alone,
// inside `#ifdef CC_HAVE_SIMD_AVX2` (simd_avx2.h). Every function is `target("avx2")`, so the
// rest of the library stays baseline x86-64.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "codecs/float_convert.h"
#include "codecs/fourbit/fourbit.h"
#include "codecs/fp8/fp8.h"
#include "codecs/hadamard.h"

#define CC_AVX2 __attribute__((target("avx2")))
#define CC_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline

namespace ccompress::cpu::avx2 {

// ---- Walsh-Hadamard transform in registers ----

/// Stages 1, 2 and 4 of eight values in one register. Per stage, w holds each lane's partner
/// (lane i ^ len): the lower lane of a butterfly takes v + w = a + b, the upper one
/// w - v = a - b (the scalar loops' a + -b, which GCC compiles to a - b).
CC_AVX2_INLINE __m256 wht8(__m256 v) {
  __m256 w = _mm256_permute_ps(v, 0xB1);
  v = _mm256_blend_ps(_mm256_add_ps(v, w), _mm256_sub_ps(w, v), 0xAA);
  w = _mm256_permute_ps(v, 0x4E);
  v = _mm256_blend_ps(_mm256_add_ps(v, w), _mm256_sub_ps(w, v), 0xCC);
  w = _mm256_permute2f128_ps(v, v, 0x01);
  return _mm256_blend_ps(_mm256_add_ps(v, w), _mm256_sub_ps(w, v), 0xF0);
}

/// The unnormalised transform of the 8R values in r[0..R) (element j in lane j % 8 of
/// register j / 8): stages 1 .. 4 within registers (Wht8: wht8, or another form of the same
/// stages), the longer ones between them.
template <int R, __m256 (*Wht8)(__m256) = wht8>
CC_AVX2_INLINE void wht_stages(__m256* r) {
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) r[i] = Wht8(r[i]);
#pragma GCC unroll 4
  for (int len = 1; len < R; len <<= 1)
#pragma GCC unroll 16
    for (int i = 0; i < R; i += 2 * len)
#pragma GCC unroll 16
      for (int j = i; j < i + len; ++j) {
        const __m256 a = r[j], b = r[j + len];
        r[j] = _mm256_add_ps(a, b);
        r[j + len] = _mm256_sub_ps(a, b);
      }
}

/// The normalised transform of r[0..R) in place: wht_stages, then times codecs::wht_norm(8R).
template <int R, __m256 (*Wht8)(__m256) = wht8>
CC_AVX2_INLINE void wht_normalized_regs(__m256* r) {
  wht_stages<R, Wht8>(r);
  const __m256 s = _mm256_set1_ps(codecs::wht_norm(8 * R));
#pragma GCC unroll 16
  for (int i = 0; i < R; ++i) r[i] = _mm256_mul_ps(r[i], s);
}

/// codecs::random_sign(j) for j = 8i .. 8i + 7, as the lanes of one register.
CC_AVX2_INLINE __m256 random_signs8(int32_t i) {
  alignas(32) float s[8];
  for (int l = 0; l < 8; ++l) s[l] = codecs::random_sign(static_cast<uint32_t>(8 * i + l));
  return _mm256_load_ps(s);
}

/// Asks for the @p bytes at p (a multiple of 64) to be brought into the cache: the encode
/// loops read their input once, a few blocks ahead of the one they work on.
CC_AVX2_INLINE void prefetch(const void* p, int bytes) {
  const char* c = static_cast<const char*>(p);
#pragma GCC unroll 16
  for (int i = 0; i < bytes; i += 64) _mm_prefetch(c + i, _MM_HINT_T0);
}

/// How far ahead of the block being encoded its input is prefetched.
constexpr int kPrefetchAhead = 2048;
/// How far ahead (bytes) a decode-accumulate fetches the accumulator it reads and writes
/// beside the codes: without it the loads of a streaming accumulator wait on memory.
constexpr int kAccumulateAhead = 4096;

// ---- group maxima ----

CC_AVX2_INLINE __m256i abs_bits(__m256 v) {
  return _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF));
}

/// The lanes of a (|x| as bits) with NaN and Inf lanes set to 0: codecs::finite_abs_bits.
CC_AVX2_INLINE __m256i finite_bits(__m256i a) {
  const __m256i inf = _mm256_set1_epi32(int32_t(codecs::kF32InfBits));
  return _mm256_and_si256(a, _mm256_cmpgt_epi32(inf, a));
}

CC_AVX2_INLINE int32_t hmax_epi32(__m256i m) {
  m = _mm256_max_epi32(m, _mm256_permute2x128_si256(m, m, 1));
  m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0x4E));
  m = _mm256_max_epi32(m, _mm256_shuffle_epi32(m, 0xB1));
  return _mm256_cvtsi256_si32(m);
}

/// Lane i = the largest of the 8 lanes of m[i], for i < 8 (a transposing reduction: an
/// integer max is exact and order-free).
CC_AVX2_INLINE __m256i hmax8x8(const __m256i* m) {
  __m256i t[4], u[2];
  for (int i = 0; i < 4; ++i)
    t[i] = _mm256_max_epi32(_mm256_unpacklo_epi32(m[2 * i], m[2 * i + 1]),
                            _mm256_unpackhi_epi32(m[2 * i], m[2 * i + 1]));
  for (int i = 0; i < 2; ++i)
    u[i] = _mm256_max_epi32(_mm256_unpacklo_epi64(t[2 * i], t[2 * i + 1]),
                            _mm256_unpackhi_epi64(t[2 * i], t[2 * i + 1]));
  return _mm256_max_epi32(_mm256_permute2x128_si256(u[0], u[1], 0x20),
                          _mm256_permute2x128_si256(u[0], u[1], 0x31));
}

/// The raw |bits| maxima of the K = R / G groups of G registers (8G elements) of r[0..R),
/// group i in lane i % 8 of out[i / 8] (lanes past K are 0).
template <int R, int G>
CC_AVX2_INLINE void group_abs_max_regs(const __m256* r, __m256i* out) {
  constexpr int K = R / G, M = K < 8 ? 8 : K;
  __m256i m[M];
#pragma GCC unroll 16
  for (int i = 0; i < K; ++i) {
    __m256i a = abs_bits(r[i * G]);
#pragma GCC unroll 16
    for (int j = 1; j < G; ++j) a = _mm256_max_epi32(a, abs_bits(r[i * G + j]));
    m[i] = a;
  }
#pragma GCC unroll 8
  for (int i = K; i < M; ++i) m[i] = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int b = 0; b * 8 < K; ++b) out[b] = hmax8x8(m + 8 * b);
}

// ---- stochastic rounding noise ----

/// The low 64 bits of a * k for four 64-bit lanes (AVX2 has only 32 x 32 -> 64 multiplies):
/// lo(a) lo(k) + ((hi(a) lo(k) + lo(a) hi(k)) << 32), all mod 2^64.
CC_AVX2_INLINE __m256i mul64(__m256i a, uint64_t k) {
  const __m256i klo = _mm256_set1_epi64x(static_cast<int64_t>(k & 0xFFFFFFFFu));
  const __m256i khi = _mm256_set1_epi64x(static_cast<int64_t>(k >> 32));
  const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), klo),
                                         _mm256_mul_epu32(a, khi));
  return _mm256_add_epi64(_mm256_mul_epu32(a, klo), _mm256_slli_epi64(cross, 32));
}

/// SplitMix64's two multipliers (codecs::mix64).
constexpr uint64_t kMixMul1 = 0xBF58476D1CE4E5B9ull, kMixMul2 = 0x94D049BB133111EBull;

/// Row l of SrNoise8's table: (l ^ j) * kMixMul1 mod 2^64 for j = 0..7.
struct MixMul1Rows {
  alignas(32) uint64_t row[8][8];
  constexpr MixMul1Rows() : row() {
    for (int l = 0; l < 8; ++l)
      for (int j = 0; j < 8; ++j) row[l][j] = static_cast<uint64_t>(l ^ j) * kMixMul1;
  }
};
inline constexpr MixMul1Rows kMixMul1Rows{};

/// The rest of codecs::mix64 after its first product z, on four lanes, as far as
/// codecs::sr_uniform_at uses it (h >> 40): the high 32-bit half of each 64-bit lane holds
/// bits 32..63 of the second product (the low half is not meaningful). The finaliser's last
/// step z ^ (z >> 31) leaves bits 40..63 unchanged (z >> 31 has only 33 bits), so it is
/// skipped; and the high half of w * M mod 2^64 is hi(lo(w) lo(M)) + lo(w) hi(M) + hi(w) lo(M)
/// mod 2^32: one 32 x 32 -> 64 product and one 32-bit multiply of both halves at once
/// (lo(w) hi(M) in the low half, hi(w) lo(M) in the high half), instead of three products.
CC_AVX2_INLINE __m256i mix64_tail_hi32x4(__m256i z) {
  const __m256i w = _mm256_xor_si256(z, _mm256_srli_epi64(z, 27));
  const __m256i lolo = _mm256_mul_epu32(w, _mm256_set1_epi64x(int64_t(kMixMul2 & 0xFFFFFFFFu)));
  const __m256i cross = _mm256_mullo_epi32(
      w, _mm256_set1_epi64x(int64_t((kMixMul2 << 32) | (kMixMul2 >> 32))));
  return _mm256_add_epi32(lolo, _mm256_add_epi32(cross, _mm256_slli_epi64(cross, 32)));
}

/// Draws codecs::sr_uniform_at(prefix, index + i) eight at a time, for consecutive indices.
struct SrNoise8 {
  uint64_t prefix;
  int64_t index;  ///< of the next draw

  CC_AVX2_INLINE SrNoise8(uint64_t p, int64_t i) : prefix(p), index(i) {}

  /// The draws of the next eight indices as their 24-bit integers N (the draw is N * 2^-24:
  /// codecs::mix64(prefix ^ index) >> 40), in eight int32 lanes.
  CC_AVX2_INLINE __m256i next_bits() {
    __m256i h0, h1;
    if ((index & 7) == 0) {
      // Eight indices from a multiple of 8 differ from it in their low three bits only: with
      // P = prefix ^ index, element j hashes z = P ^ j, so z ^ (z >> 30) = W ^ j for
      // W = P ^ (P >> 30), and its product (W ^ j) * M = (W & ~7) * M + ((W & 7) ^ j) * M
      // (mod 2^64): one scalar product plus row W & 7 of the table kMixMul1Rows.
      const uint64_t p = prefix ^ static_cast<uint64_t>(index);
      const uint64_t w = p ^ (p >> 30);
      const __m256i base = _mm256_set1_epi64x(static_cast<int64_t>((w & ~uint64_t(7)) * kMixMul1));
      const uint64_t* row = kMixMul1Rows.row[w & 7];  // ((W & 7) ^ j) * M, j = 0..7
      h0 = mix64_tail_hi32x4(
          _mm256_add_epi64(base, _mm256_load_si256(reinterpret_cast<const __m256i*>(row))));
      h1 = mix64_tail_hi32x4(
          _mm256_add_epi64(base, _mm256_load_si256(reinterpret_cast<const __m256i*>(row + 4))));
    } else {
      const __m256i pre = _mm256_set1_epi64x(static_cast<int64_t>(prefix));
      const __m256i i0 =
          _mm256_add_epi64(_mm256_set1_epi64x(index), _mm256_setr_epi64x(0, 1, 2, 3));
      const __m256i z0 = _mm256_xor_si256(pre, i0);
      const __m256i z1 = _mm256_xor_si256(pre, _mm256_add_epi64(i0, _mm256_set1_epi64x(4)));
      h0 = mix64_tail_hi32x4(mul64(_mm256_xor_si256(z0, _mm256_srli_epi64(z0, 30)), kMixMul1));
      h1 = mix64_tail_hi32x4(mul64(_mm256_xor_si256(z1, _mm256_srli_epi64(z1, 30)), kMixMul1));
    }
    index += 8;
    // Bits 32..63 sit in the high half of each 64-bit lane: gather the halves in order, >> 8.
    const __m256 hi = _mm256_shuffle_ps(_mm256_castsi256_ps(h0), _mm256_castsi256_ps(h1), 0xDD);
    return _mm256_srli_epi32(_mm256_permute4x64_epi64(_mm256_castps_si256(hi), 0xD8), 8);
  }

  /// The draws of the next eight indices: codecs::sr_uniform_at, N * 2^-24 (exact).
  CC_AVX2_INLINE __m256 next() { return uniform8(next_bits()); }

  /// The draws N * 2^-24 of eight 24-bit integers N.
  static CC_AVX2_INLINE __m256 uniform8(__m256i n) {
    return _mm256_mul_ps(_mm256_cvtepi32_ps(n), _mm256_set1_ps(5.9604644775390625e-8f));
  }
};

/// The bits of 8 lanes as unsigned: u < v, as codecs::sr_step compares them.
CC_AVX2_INLINE __m256i lt_u32(__m256i u, __m256i v) {
  const __m256i bias = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  return _mm256_cmpgt_epi32(_mm256_xor_si256(v, bias), _mm256_xor_si256(u, bias));
}

/// codecs::floor_small on 8 lanes: r = RNE(t) by +- 1.5 * 2^23, minus 1 where r - t > 0.
CC_AVX2_INLINE __m256 floor_small8(__m256 t) {
  const __m256 c = _mm256_set1_ps(12582912.0f);
  const __m256 r = _mm256_sub_ps(_mm256_add_ps(t, c), c);
  const __m256i up = _mm256_cmpgt_epi32(_mm256_castps_si256(_mm256_sub_ps(r, t)),
                                        _mm256_setzero_si256());
  return _mm256_add_ps(r, _mm256_and_ps(_mm256_castsi256_ps(up), _mm256_set1_ps(-1.0f)));
}

/// codecs::sr_step(u, frac) on 8 lanes: 1.0f where bits(u) < bits(frac), else +0.
CC_AVX2_INLINE __m256 sr_step8(__m256 u, __m256 frac) {
  return _mm256_and_ps(_mm256_castsi256_ps(lt_u32(_mm256_castps_si256(u),
                                                  _mm256_castps_si256(frac))),
                       _mm256_set1_ps(1.0f));
}

// ---- int8 codes ----

/// Eight int32 lanes to eight bytes (low 64 bits), each saturated to -128..127.
CC_AVX2_INLINE __m128i pack8_epi8(__m256i k) {
  const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
  return _mm_packs_epi16(w, w);
}

/// Four registers of int32 lanes (elements 0..31 in order) to 32 bytes in order, each
/// saturated to -128..127.
CC_AVX2_INLINE __m256i pack32_epi8(__m256i a, __m256i b, __m256i c, __m256i d) {
  // packs work within 128-bit halves: [a0-3 b0-3 c0-3 d0-3 | a4-7 b4-7 c4-7 d4-7] in bytes.
  const __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/// Bytes 0..7 of @p b as eight floats (signed int8 values).
CC_AVX2_INLINE __m256 load8_i8_ps(const int8_t* b) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))));
}

// ---- FP8 codes ----

/// codecs::fp8_from_float<F> on 8 lanes (int32 codes 0..255). With @p kFinite the caller
/// knows that no lane is NaN, and the NaN code is left out.
template <class F, bool kFinite = false>
CC_AVX2_INLINE __m256i fp8_from_float8(__m256 x) {
  constexpr int32_t kMinExp = 128 - F::kBias, kMaxExp = F::kMaxF32Bits >> 23;
  const __m256i u = _mm256_castps_si256(x);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(int32_t(codecs::kF32InfBits)));
  __m256i e = _mm256_srli_epi32(a, 23);
  e = _mm256_min_epi32(_mm256_max_epi32(e, _mm256_set1_epi32(kMinExp)),
                       _mm256_set1_epi32(kMaxExp));
  const __m256i c =
      _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(23 - F::kMantBits)), 23);
  const __m256i k = _mm256_sub_epi32(
      _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(c))), c);
  __m256i code = _mm256_add_epi32(
      _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(kMinExp)), F::kMantBits), k);
  const __m256i limit = _mm256_blendv_epi8(_mm256_set1_epi32(F::kMaxCode),
                                           _mm256_set1_epi32(codecs::kFp8NaN), nan);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  if (kFinite)
    return _mm256_or_si256(_mm256_min_epu32(code, _mm256_set1_epi32(F::kMaxCode)), sign);
  code = _mm256_min_epu32(code, limit);
  return _mm256_or_si256(code, _mm256_andnot_si256(nan, sign));
}

/// codecs::fp8_from_float_sr<F>(v, u) on 8 lanes. Its a / spacing (spacing = 2^p, a normal
/// power of two) is computed as a * 2^-p: both are the rounding of the same real number (and
/// NaN a gives a's NaN either way), so the bits are the same and no division is needed.
template <class F>
CC_AVX2_INLINE __m256i fp8_from_float_sr8(__m256 v, __m256 u) {
  constexpr int32_t kMinExp = 128 - F::kBias, kMaxExp = F::kMaxF32Bits >> 23;
  const __m256i bits = _mm256_castps_si256(v);
  const __m256 max = _mm256_set1_ps(F::kMax);
  __m256 a = _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF)));
  a = _mm256_blendv_ps(a, max, _mm256_cmp_ps(a, max, _CMP_GT_OQ));  // clamp_f(a, 0, max)
  __m256i e = _mm256_srli_epi32(_mm256_castps_si256(a), 23);
  e = _mm256_min_epi32(_mm256_max_epi32(e, _mm256_set1_epi32(kMinExp)),
                       _mm256_set1_epi32(kMaxExp));
  // spacing = 2^(e - 127 - m) (bits (e - m) << 23); its inverse has bits (254 + m - e) << 23.
  const __m256 spacing = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(F::kMantBits)), 23));
  const __m256 inverse = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254 + F::kMantBits), e), 23));
  const __m256 t = _mm256_mul_ps(a, inverse);
  const __m256 k = floor_small8(t);
  const __m256 r = _mm256_mul_ps(_mm256_add_ps(k, sr_step8(u, _mm256_sub_ps(t, k))), spacing);
  const __m256i sign =
      _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
  return fp8_from_float8<F>(_mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(r), sign)));
}

/// The lanes that fp8_from_float_sr8_normal codes: |v| (fp32 bits @p abs) from FP8's smallest
/// normal to the largest finite fp32. Returned is abs less the normal's bits, as unsigned: it
/// exceeds kFp8SrNormalSpan<F> exactly in the other lanes (zeros, values below FP8's normal
/// range, Inf, NaN), so a loop keeps the unsigned maximum and checks it once.
template <class F>
CC_AVX2_INLINE __m256i fp8_sr_normal_offset8(__m256i abs) {
  return _mm256_sub_epi32(abs, _mm256_set1_epi32((128 - F::kBias) << 23));
}
template <class F>
inline constexpr uint32_t kFp8SrNormalSpan = codecs::kF32InfBits - 1u - ((128u - F::kBias) << 23);

/// True where some lane of fp8_sr_normal_offset8's unsigned maximum @p m is out of the span.
template <class F>
CC_AVX2_INLINE bool fp8_sr_outside_normals(__m256i m) {
  const __m256i span = _mm256_set1_epi32(static_cast<int32_t>(kFp8SrNormalSpan<F>));
  const __m256i out = _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_max_epu32(m, span), span),
                                       _mm256_set1_epi32(-1));
  return !_mm256_testz_si256(out, out);
}

/// codecs::fp8_from_float_sr_normal<F> (group_codec.h) on 8 lanes: fp8_from_float_sr8<F>(v,
/// N * 2^-24) in integers, for the 24-bit integers N of SrNoise8::next_bits, in the lanes
/// fp8_sr_normal_offset8 accepts (@p bits of v, @p abs its |bits|).
template <class F>
CC_AVX2_INLINE __m256i fp8_from_float_sr8_normal(__m256i bits, __m256i abs, __m256i n) {
  constexpr int32_t kMinExp = 128 - F::kBias, kDrop = 23 - F::kMantBits;
  // clamp_f(|v|, 0, FP8_MAX) as bits
  const __m256i a = _mm256_min_epi32(abs, _mm256_set1_epi32(int32_t(F::kMaxF32Bits)));
  const __m256i carry =
      _mm256_xor_si256(_mm256_srli_epi32(n, F::kMantBits + 1), _mm256_set1_epi32((1 << kDrop) - 1));
  const __m256i code =
      _mm256_sub_epi32(_mm256_srli_epi32(_mm256_add_epi32(a, carry), kDrop),
                       _mm256_set1_epi32((kMinExp - 1) << F::kMantBits));
  return _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80)));
}

/// fp8_from_float_sr8_normal of the quotient @p t with the draws @p n, and @p offset raised to
/// fp8_sr_normal_offset8 of |t| (the check, once per run of calls, that every lane was one it
/// codes).
template <class F>
CC_AVX2_INLINE __m256i fp8_sr_normal_code8(__m256 t, __m256i n, __m256i& offset) {
  const __m256i bits = _mm256_castps_si256(t);
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  offset = _mm256_max_epu32(offset, fp8_sr_normal_offset8<F>(abs));
  return fp8_from_float_sr8_normal<F>(bits, abs, n);
}

/// The integer floor(t) + [u < t - floor(t)] of codecs::hint8_quantize_sr (before its clamp)
/// on 8 lanes of finite t (|t| <= 2^22). floor is roundps's, which equals floor_small for every
/// such t but -0: there floor_small gives +0, so the reference's fraction -0 + -(+0) is -0,
/// whose bits exceed every u's, and it steps up to 1; roundps gives -0 and t - floor(t) = +0,
/// so t = -0 steps up explicitly. Elsewhere t - floor(t) is the reference's fraction (+0 or
/// positive), and u < frac as floats orders like sr_step's comparison of their bits.
CC_AVX2_INLINE __m256i sr_floor_step8(__m256 t, __m256 u) {
  const __m256 f = _mm256_round_ps(t, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m256i minus0 = _mm256_cmpeq_epi32(_mm256_castps_si256(t),
                                            _mm256_set1_epi32(static_cast<int32_t>(0x80000000u)));
  const __m256i up = _mm256_or_si256(
      _mm256_castps_si256(_mm256_cmp_ps(u, _mm256_sub_ps(t, f), _CMP_LT_OQ)), minus0);
  return _mm256_sub_epi32(_mm256_cvttps_epi32(f), up);  // up is -1 where it applies
}

/// Eight int32 lanes of byte values (0..255) to eight bytes (low 64 bits).
CC_AVX2_INLINE __m128i pack8_epu8(__m256i k) {
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(k), _mm256_extracti128_si256(k, 1));
  return _mm_packus_epi16(w, w);
}

/// codecs::fp8_to_float<F> of eight codes (int32 lanes, 0..255).
template <class F>
CC_AVX2_INLINE __m256 fp8_to_float8(__m256i q) {
  constexpr int32_t kExpMask = (1 << (7 - F::kMantBits)) - 1, kMantMask = (1 << F::kMantBits) - 1;
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(q, _mm256_set1_epi32(0x80)), 24);
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(q, F::kMantBits),
                                     _mm256_set1_epi32(kExpMask));
  const __m256i m = _mm256_and_si256(q, _mm256_set1_epi32(kMantMask));
  const __m256i mbits = _mm256_slli_epi32(m, 23 - F::kMantBits);
  // Normal: (e + 127 - bias) << 23 | m << (23 - mant bits).
  __m256i v = _mm256_or_si256(
      _mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127 - F::kBias)), 23), mbits);
  // Subnormal (e = 0): m * 2^(1 - bias - mant bits), exact.
  const __m256 sub = _mm256_mul_ps(
      _mm256_cvtepi32_ps(m),
      _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(128 - F::kBias - F::kMantBits) << 23)));
  v = _mm256_blendv_epi8(v, _mm256_castps_si256(sub),
                         _mm256_cmpeq_epi32(e, _mm256_setzero_si256()));
  const __m256i top = _mm256_cmpeq_epi32(e, _mm256_set1_epi32(kExpMask));
  if (F::kHasInf) {  // Inf (m = 0) or NaN: the Inf exponent with m kept
    v = _mm256_blendv_epi8(v, _mm256_or_si256(_mm256_set1_epi32(int32_t(codecs::kF32InfBits)),
                                              mbits),
                           top);
  } else {  // only e = max, m = max is NaN
    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7FC00000),
                           _mm256_and_si256(top, _mm256_cmpeq_epi32(
                                                     m, _mm256_set1_epi32(kMantMask))));
  }
  return _mm256_castsi256_ps(_mm256_or_si256(v, sign));
}

/// codecs::fp8_to_float<F> of the eight codes in bytes 0..7 of @p b.
template <class F>
CC_AVX2_INLINE __m256 fp8_to_float8(const uint8_t* b) {
  return fp8_to_float8<F>(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))));
}

/// Four registers of int32 lanes of byte values 0..255 (elements 0..31 in order) to 32 bytes
/// in order.
CC_AVX2_INLINE __m256i pack32_epu8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i v = _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d));
  return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// ---- E2M1 codes ----

/// E2M1 nibbles of 8 lanes: the magnitude code of a (|value| in units of the step, >= 0) as
/// minus the sum of E2M1::magnitude_rn's seven exact comparisons (each -1 when true), the sign
/// bit of v for a non-zero magnitude, codecs::kNibbleNaN where x is not finite.
CC_AVX2_INLINE __m256i e2m1_nibbles8(__m256 x, __m256 v, __m256 a) {
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
  const __m256i finite = _mm256_cmpgt_epi32(
      _mm256_set1_epi32(0x7F800000),
      _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7FFFFFFF)));
  return _mm256_blendv_epi8(_mm256_set1_epi32(codecs::kNibbleNaN), q, finite);
}

// ---- TACO ----

/// The pairwise fold of codecs::taco_sum_sq over its 32 lanes (lane l in lane l % 8 of
/// acc[l / 8]): lane l += lane l + off for off = 16, 8, 4, 2, 1.
CC_AVX2_INLINE float taco_fold32(__m256* acc) {
  acc[0] = _mm256_add_ps(acc[0], acc[2]);
  acc[1] = _mm256_add_ps(acc[1], acc[3]);
  acc[0] = _mm256_add_ps(acc[0], acc[1]);
  __m128 v = _mm_add_ps(_mm256_castps256_ps128(acc[0]), _mm256_extractf128_ps(acc[0], 1));
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_shuffle_ps(v, v, 1));
  return _mm_cvtss_f32(v);
}

// ---- output of decoded values ----

/// out[0..8) <- v, or out[0..8) <- out + v (codecs::add_rn(out, v), the accumulate order).
CC_AVX2_INLINE void emit8(float* out, __m256 v, bool accumulate) {
  if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(out), v);
  _mm256_storeu_ps(out, v);
}

}  // namespace ccompress::cpu::avx2
