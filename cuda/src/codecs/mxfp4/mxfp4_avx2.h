// mxfp4's whole 32-element blocks coded with AVX2 intrinsics: what mxfp4.cc's portable loop
// computes (mxfp4_quantize of every element: the same IEEE multiply, E2M1::magnitude_rn's
// seven exact comparisons, the sign and NaN selects), so the bits are the same;
// tests/codecs/test_mx.py and tests/codecs/test_cpu_isa.py check it. Callers use it only when
// cpu_use_avx2() (cpu/isa_dispatch.h).
#pragma once

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#define CC_HAVE_MXFP4_AVX2 1

namespace ccompress::cpu4 {

/// Blocks 0..nb-1 of 32 at x, block j under inverse scale inv[j] (codecs::mx_inv_scale):
/// codes[16 j + i] = mxfp4_quantize(x[32 j + 2 i]) | mxfp4_quantize(x[32 j + 2 i + 1]) << 4.
void mxfp4_code_blocks_avx2(const float* x, int64_t nb, const float* inv, uint8_t* codes);

}  // namespace ccompress::cpu4

#endif
