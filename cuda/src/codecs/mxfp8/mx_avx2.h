// What both MX families' host loops share: the largest finite |x| of each 32-element block
// (its E8M0 scale's input), with AVX2 intrinsics where the CPU has them (the same integer
// maxima as the portable loop: the bits cannot differ).
#pragma once

#include <cstdint>

#include "codecs/mxfp8/mxfp8.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd_avx2.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CC_HAVE_MX_AVX2 1
#endif

namespace ccompress::cpu {

#ifdef CC_HAVE_MX_AVX2
/// amax[j] = the largest codecs::finite_abs_bits of block j of 32 at x, for j < nb.
void mx_block_maxima_avx2(const float* x, int64_t nb, int32_t* amax);
#endif

/// mx_block_maxima_avx2 where the CPU has AVX2, else the portable group_maxima.
inline void mx_block_maxima(const float* x, int64_t nb, int32_t* amax) {
#ifdef CC_HAVE_MX_AVX2
  if (cpu_use_avx2()) return mx_block_maxima_avx2(x, nb, amax);
#endif
  group_maxima<codecs::kMxBlock, true>(x, nb, amax);
}

}  // namespace ccompress::cpu
