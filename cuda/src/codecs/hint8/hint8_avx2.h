// hint8's host kernels with AVX2 intrinsics (codecs/hint8/hint8.h has the format). The block
// kernels take a run's whole blocks of h <= 128 in one call, each block in one pass that
// never writes its rotated coefficients to memory: encode loads the block into registers,
// rotates it, takes the group maxima, the (s8: block exponent and) scales, and divides,
// rounds and packs the codes; decode reads codes and scales, rotates in registers and stores
// or accumulates. They compute exactly what hint8.cc's scalar loops do (the same IEEE
// operations on the same operands), so the bits are the same; tests/codecs/test_cpu_isa.py and
// tests/codecs/test_digests.py check it. Call them only when cpu_use_avx2() (isa_dispatch.h).
#pragma once

#include <cstdint>

#include "cpu/simd_avx2.h"

#ifdef CC_HAVE_SIMD_AVX2

namespace ccompress::cpu {

/// A hint8 codec's block shape and options.
struct Hint8Shape {
  int32_t h;           ///< rotation block
  int32_t g;           ///< scale group
  int32_t scale_bits;  ///< 8, 16 or 32
  bool rs;             ///< random signs
  bool sr;             ///< stochastic rounding
};

/// Whether the block kernels take this shape: h in 16..128, g a multiple of 8.
inline bool hint8_blocks_avx2_fit(const Hint8Shape& s) {
  return s.h >= 16 && s.h <= 128 && s.g % 8 == 0;
}

/// Bytes of scale section per whole block: s8 one per group (plus the E byte of a block of
/// fewer than 8 groups), s16 two, s32 four.
inline int32_t hint8_block_scale_bytes(const Hint8Shape& s) {
  const int32_t k = s.h / s.g;
  return s.scale_bits == 8 ? k + (k < 8 ? 1 : 0) : k * (s.scale_bits / 8);
}

/// Encodes nblocks whole blocks of x (the first blocks of a run): codes to q, scales to sc
/// (the run's scale section: these blocks' scales come first), `:sr` draws of element i at
/// sr_uniform_at(prefix, index + i).
void hint8_encode_blocks_avx2(const Hint8Shape& s, const float* x, int64_t nblocks,
                              uint64_t prefix, int64_t index, int8_t* q, uint8_t* sc);

/// Decodes nblocks whole blocks from codes q and scales sc (readable up to sc_end) into out,
/// or adds them to out (out += value, codecs::add_rn) with @p accumulate.
void hint8_decode_blocks_avx2(const Hint8Shape& s, const int8_t* q, const uint8_t* sc,
                              const uint8_t* sc_end, int64_t nblocks, float* out,
                              bool accumulate);

/// hint8 s8 scales of k <= 8 groups of a block of exponent e: code[i] = the 7-bit code and
/// scale[i] = s' of codecs::hint8_make_scale(8, amax[i], e).
void hint8_s8_scales_avx2(uint32_t e, const int32_t* amax, int32_t k, uint32_t* code,
                          float* scale);
/// The codes of one block of len coefficients in groups of g (a multiple of 8) with scales
/// scale[i / g]: q[i] = codecs::hint8_quantize(y[i], s), or hint8_quantize_sr(y[i], s, u[i])
/// when u is not null; 0 for a group whose scale is not finite.
void hint8_quantize_avx2(const float* y, int32_t len, int32_t g, const float* scale,
                         const float* u, int8_t* q);

}  // namespace ccompress::cpu

#endif
