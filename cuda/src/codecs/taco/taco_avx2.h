// TACO's host block kernels with AVX2 intrinsics (codecs/taco/taco.h has the format): a run's
// whole groups of g <= 128 in one call, each group in one pass in registers (sum of squares,
// pre-scale, rotation, maximum, FP8 codes; decode: FP8 values, rotation, the division by the
// pre-scale, then store or accumulate). They compute exactly what taco.cc's scalar loops do,
// so the bits are the same; tests/codecs/test_cpu_isa.py and tests/codecs/test_digests.py check it. Call
// them only when cpu_use_avx2() (isa_dispatch.h).
#pragma once

#include <cstdint>

#include "cpu/simd_avx2.h"

#ifdef CC_HAVE_SIMD_AVX2

namespace ccompress::cpu {

/// A TACO codec's group and options.
struct TacoShape {
  int32_t g;  ///< group (= rotation block)
  bool e5m2;  ///< FP8 E5M2 codes, else E4M3
  bool sr;    ///< stochastic rounding
};

/// Whether the block kernels take this shape: g in 32..128.
inline bool taco_blocks_avx2_fit(const TacoShape& s) { return s.g >= 32 && s.g <= 128; }

/// Encodes nblocks whole groups of x (the first groups of a run): codes to q, the (a, s) fp32
/// pairs to pairs; `:sr` draws of element i at sr_uniform_at(prefix, index + i).
void taco_encode_blocks_avx2(const TacoShape& s, const float* x, int64_t nblocks,
                             uint64_t prefix, int64_t index, uint8_t* q, uint8_t* pairs);

/// Decodes nblocks whole groups into out, or adds them to out with @p accumulate.
void taco_decode_blocks_avx2(const TacoShape& s, const uint8_t* q, const uint8_t* pairs,
                             int64_t nblocks, float* out, bool accumulate);

}  // namespace ccompress::cpu

#endif
