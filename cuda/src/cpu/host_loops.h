// Generic pieces of the host codec loops, shared by the CPU backend and the codec families'
// host loops (cuda/src/codecs/<family>/<family>.cc): dtype loads and stores, block walks,
// the per-thread run buffer. All inline, so that a family's dispatched entry points
// (cpu/isa_dispatch.h) compile them for AVX2 inside their AVX2 copy.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/error.h"
#include "codecs/float_convert.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ccompress::cpu {

/// The input of the piece after the one a run family encodes (x null and n 0 after the last
/// piece): a family that reads its piece twice (the 4-bit codecs: maxima, then codes) asks for
/// it to be cached while it codes the current piece, so its first pass reads it from the cache.
struct NextPiece {
  const float* x = nullptr;
  int64_t n = 0;
};

/// The block size the raw and FP8 loops stream through a stack buffer; the largest FP8 group.
constexpr int64_t kBlock = 1024;

/// Calls fn(i, float(src[off + i])) for i < len, with the dtype switch outside the loop.
template <class Fn>
inline void for_each_loaded(const void* src, DType t, int64_t off, int64_t len, Fn fn) {
  if (t == DType::Float32) {
    const float* p = static_cast<const float*>(src) + off;
    for (int64_t i = 0; i < len; ++i) fn(i, p[i]);
  } else if (t == DType::BFloat16) {
    const uint16_t* p = static_cast<const uint16_t*>(src) + off;
    for (int64_t i = 0; i < len; ++i) fn(i, codecs::bf16_to_float(p[i]));
  } else {
    const uint16_t* p = static_cast<const uint16_t*>(src) + off;
    for (int64_t i = 0; i < len; ++i) fn(i, codecs::f16_to_float(p[i]));
  }
}

/// buf <- float(src[off .. off+len)) / divisor. Dividing by 1 is exact, so it is skipped.
inline void load_block(const void* src, DType t, int64_t off, int64_t len, float divisor,
                       float* buf) {
  for_each_loaded(src, t, off, len, [buf](int64_t i, float v) { buf[i] = v; });
  if (divisor != 1.0f)
    for (int64_t i = 0; i < len; ++i) buf[i] = codecs::div_rn(buf[i], divisor);
}

/// buf <- buf + float(x[off ..]) / divisor: the fused ring hop's sum, then its average.
inline void add_block(const void* x, DType t, int64_t off, int64_t len, float divisor,
                      float* buf) {
  for_each_loaded(x, t, off, len,
                  [buf](int64_t i, float v) { buf[i] = codecs::add_rn(buf[i], v); });
  if (divisor != 1.0f)
    for (int64_t i = 0; i < len; ++i) buf[i] = codecs::div_rn(buf[i], divisor);
}

/// dst[off ..] <- cast(buf) to @p t, round to nearest even.
inline void store_block(const float* buf, int64_t len, void* dst, DType t, int64_t off) {
  if (t == DType::Float32) {
    if (len > 0) std::memcpy(static_cast<float*>(dst) + off, buf, static_cast<size_t>(len) * 4);
  } else if (t == DType::BFloat16) {
    uint16_t* p = static_cast<uint16_t*>(dst) + off;
    for (int64_t i = 0; i < len; ++i) p[i] = codecs::bf16_from_float(buf[i]);
  } else {
    uint16_t* p = static_cast<uint16_t*>(dst) + off;
    for (int64_t i = 0; i < len; ++i) p[i] = codecs::f16_from_float(buf[i]);
  }
}

/// acc <- float(src) when @p assign, else acc += float(src).
inline void load_accumulate_body(const void* src, DType src_dtype, int64_t n, float* acc,
                                 bool assign) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (assign) {
    for_each_loaded(src, src_dtype, 0, n, [acc](int64_t i, float v) { acc[i] = v; });
  } else {
    for_each_loaded(src, src_dtype, 0, n,
                    [acc](int64_t i, float v) { acc[i] = codecs::add_rn(acc[i], v); });
  }
}

/// q[i] = k[i] for n int32 codes: with @p kSigned each in -128..127 (int8 codes), else in
/// 0..255 (FP8 codes). SSE2 narrows 16 at a time with its saturating packs, which leave such
/// values as they are; GCC's own narrowing of a plain (u)int8_t store in the baseline copy
/// shuffles the halves apart instead (three unpacks per pair of vectors, and the codes are
/// computed in 32-bit lanes), which cost the fp8 and hint8 loops more than their arithmetic.
/// So the code loops write int32 codes to a small buffer and call this.
template <bool kSigned>
inline void pack_codes(const int32_t* k, int64_t n, void* out) {
  uint8_t* q = static_cast<uint8_t*>(out);
  int64_t i = 0;
#if defined(__SSE2__)
  for (; i + 16 <= n; i += 16) {
    const __m128i* p = reinterpret_cast<const __m128i*>(k + i);
    const __m128i lo = _mm_packs_epi32(_mm_loadu_si128(p), _mm_loadu_si128(p + 1));
    const __m128i hi = _mm_packs_epi32(_mm_loadu_si128(p + 2), _mm_loadu_si128(p + 3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i),
                     kSigned ? _mm_packs_epi16(lo, hi) : _mm_packus_epi16(lo, hi));
  }
#endif
  for (; i < n; ++i) q[i] = static_cast<uint8_t>(k[i]);
}

/// Walks n elements in groups: fn(group index, first element, length).
template <class Fn>
inline void for_each_group(int64_t n, int64_t group, Fn fn) {
  for (int64_t g = 0, off = 0; off < n; ++g, off += group) fn(g, off, std::min(group, n - off));
}

/// One fp32 buffer per thread, grown to the largest run seen (a slice, normally).
inline float* run_scratch(int64_t n) {
  thread_local std::vector<float> buf(1);  // never empty: data() is never null
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

/// Whether [a, a + a_bytes) and [b, b + b_bytes) do not overlap.
inline bool disjoint(const void* a, int64_t a_bytes, const void* b, int64_t b_bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return pa + static_cast<uintptr_t>(a_bytes) <= pb || pb + static_cast<uintptr_t>(b_bytes) <= pa;
}

}  // namespace ccompress::cpu
