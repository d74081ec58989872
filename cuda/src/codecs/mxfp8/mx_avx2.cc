#include "codecs/mxfp8/mx_avx2.h"

#ifdef CC_HAVE_MX_AVX2

#include <immintrin.h>

#include "cpu/simd_avx2_inl.h"

namespace ccompress::cpu {

namespace {

// Lane-wise finite maxima (bits) of the block of 32 at x: its maximum is the largest lane.
CC_AVX2_INLINE __m256i block_max(const float* x) {
  __m256i m = avx2::finite_bits(avx2::abs_bits(_mm256_loadu_ps(x)));
  for (int k = 1; k < 4; ++k)
    m = _mm256_max_epi32(m, avx2::finite_bits(avx2::abs_bits(_mm256_loadu_ps(x + 8 * k))));
  return m;
}

}  // namespace

CC_AVX2 void mx_block_maxima_avx2(const float* x, int64_t nb, int32_t* amax) {
  int64_t j = 0;
  for (; j + 8 <= nb; j += 8) {  // eight blocks, reduced together by one transpose
    __m256i m[8];
    for (int b = 0; b < 8; ++b) m[b] = block_max(x + 32 * (j + b));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(amax + j), avx2::hmax8x8(m));
  }
  for (; j < nb; ++j) amax[j] = avx2::hmax_epi32(block_max(x + 32 * j));
}

}  // namespace ccompress::cpu

#endif
