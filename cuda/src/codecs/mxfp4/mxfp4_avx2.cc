#include "codecs/mxfp4/mxfp4_avx2.h"

#ifdef CC_HAVE_MXFP4_AVX2

#include <immintrin.h>

#include "codecs/fourbit/fourbit.h"
#include "cpu/simd_avx2_inl.h"

namespace ccompress::cpu4 {

namespace {

// Nibbles of 8 elements x (int32 lanes) under inverse scale inv, as codecs::mxfp4_quantize:
// the E2M1 nibbles of v = x * inv.
CC_AVX2_INLINE __m256i quantize8(__m256 x, __m256 inv) {
  const __m256 v = _mm256_mul_ps(x, inv);
  const __m256 a = _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
  return cpu::avx2::e2m1_nibbles8(x, v, a);
}

// The 4 code bytes of 8 nibbles (int32 lanes e0..e7), e_{2k} | e_{2k+1} << 4, as the low 4
// int32 lanes: each 64-bit lane's high nibble moved next to its low one, the odd lanes dropped.
CC_AVX2_INLINE __m128i pair4(__m256i q) {
  const __m256i t = _mm256_or_si256(q, _mm256_srli_epi64(q, 28));
  const __m256i even = _mm256_permutevar8x32_epi32(t, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
  return _mm_and_si128(_mm256_castsi256_si128(even), _mm_set1_epi32(0xFF));
}

}  // namespace

CC_AVX2 void mxfp4_code_blocks_avx2(const float* x, int64_t nb, const float* inv,
                                    uint8_t* codes) {
  for (int64_t j = 0; j < nb; ++j) {
    const __m256 s = _mm256_set1_ps(inv[j]);
    const float* v = x + 32 * j;
    const __m128i p0 = pair4(quantize8(_mm256_loadu_ps(v), s));
    const __m128i p1 = pair4(quantize8(_mm256_loadu_ps(v + 8), s));
    const __m128i p2 = pair4(quantize8(_mm256_loadu_ps(v + 16), s));
    const __m128i p3 = pair4(quantize8(_mm256_loadu_ps(v + 24), s));
    const __m128i b = _mm_packus_epi16(_mm_packs_epi32(p0, p1), _mm_packs_epi32(p2, p3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(codes + 16 * j), b);
  }
}

}  // namespace ccompress::cpu4

#endif
