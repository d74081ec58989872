// NVFP4's and hint4's full 16-element groups (E4M3 group scales; round to nearest, or
// stochastic in batches of 8 groups) with AVX2 intrinsics, two 8-wide vectors per group.
// They compute what fourbit_cpu.h's scalar loop does for those groups (the same IEEE
// divisions and multiplies; the nibble of a finite x / d found by operations proven to give
// the same code as the scalar comparisons), so the bits match the scalar loop and the CUDA
// kernels; tests/codecs/test_nvfp4.py and tests/codecs/test_cpu_isa.py check it. Callers use
// them only when cpu_use_avx2() (isa_dispatch.h).
#pragma once

#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__)
#define CC_HAVE_E2M1_AVX2 1

namespace ccompress::cpu4 {

/// The first pass of an encode over groups 0..ngroups-1 (16 elements each) of a run: with
/// h in {16, 32, 64, 128}, y <- the rotation of x in blocks of h (fourbit.h's rotate_block,
/// random signs with @p rs; ngroups then a multiple of 8), for h = 16 (fourbit_columns) as
/// columns: in each batch of 8 groups (128 floats), the 8 floats from 8e hold element e of
/// the batch's groups 0..7; otherwise y is x and is not written. amax[k] <- the largest finite |y| (bits) of group k, bit k % 8 of
/// special[k / 8] <- whether group k has a non-finite element (amax holds a multiple of 8
/// entries, special ceil(ngroups / 8) bytes). Returns the largest amax[k].
int32_t fourbit_prepare_groups_avx2(const float* x, float* y, int64_t ngroups, int32_t h,
                                    bool rs, int32_t* amax, uint8_t* special);

/// Whether fourbit_prepare_groups_avx2 writes y as columns for rotation blocks of h.
inline bool fourbit_columns(int32_t h) { return h == 16; }

/// Groups 0..ngroups-1 of y under run scale s, with amax and special from
/// fourbit_prepare_groups_avx2: packed nibbles to codes[8k .. 8k+8), E4M3 scale codes to
/// scales[k]; E2M1 nibbles (NVFP4), or Int4 (hint4) when @p int4. With @p columns, y is
/// columns as fourbit_prepare_groups_avx2 writes them (ngroups a multiple of 8). Meanwhile
/// the next_n floats at @p next (the next piece's input, or none) are prefetched into the
/// cache.
void fourbit_encode_groups_avx2(bool int4, const float* y, int64_t ngroups, float s,
                                const int32_t* amax, const uint8_t* special, uint8_t* codes,
                                uint8_t* scales, const float* next, int64_t next_n,
                                bool columns);

/// The inverse: 16 * ngroups values to out, or with @p accumulate added to out. With h = 16
/// (the rotation blocks are the groups) each group is also un-rotated (fourbit.h's
/// unrotate_block, random signs with @p rs), so one pass decodes, un-rotates and
/// accumulates; other h: the caller un-rotates.
void fourbit_decode_groups_avx2(bool int4, const uint8_t* codes, const uint8_t* scales,
                                int64_t ngroups, float s, float* out, bool accumulate = false,
                                int32_t h = 0, bool rs = false);

/// Stochastic rounding of groups 0..ngroups-1 of y (16 elements each, ngroups a multiple of
/// 8) under run scale s, with group maxima amax (finite |y| bits): what fourbit_cpu.h's
/// group loop writes, E4M3 scale codes rounded up (codecs::encode_group_scale(..., true)) to
/// scales[k] and nibbles codecs::fourbit_quantize<Q>(y[i], d, true, u_i) to codes[8k ..
/// 8k+8), u_i the draw sr_uniform_at(prefix, index + i); Q E2M1 (NVFP4), Int4 (hint4) when
/// @p int4.
void fourbit_encode_groups_sr_avx2(bool int4, const float* y, int64_t ngroups, float s,
                                   const int32_t* amax, uint64_t prefix, int64_t index,
                                   uint8_t* codes, uint8_t* scales);

/// Whether fourbit_decode_groups_avx2 un-rotates rotation blocks of h itself.
inline bool fourbit_decode_rotates(int32_t h) { return h == 16; }

}  // namespace ccompress::cpu4

#endif
