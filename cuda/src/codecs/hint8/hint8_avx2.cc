// hint8's AVX2 kernels (hint8_avx2.h). Lane by lane they are the scalar code of hint8.h:
// hint8_base_scale, s8_code / s8_decode, bf16_round_up, hint8_quantize(_sr),
// hint8_dequantize, and the normalised transform of hadamard.h.
#include "codecs/hint8/hint8_avx2.h"

#ifdef CC_HAVE_SIMD_AVX2

#include <array>
#include <cstring>
#include <type_traits>

#include "codecs/hint8/hint8.h"
#include "cpu/simd_avx2_inl.h"

namespace ccompress::cpu {

using namespace avx2;

namespace {

// The products 2^(E-127) * T[j] of s8_decode for j = c mod 16 in a block of exponent E, as
// two registers (j = 0..7 and 8..15).
struct S8Table {
  __m256 lo, hi;
};

CC_AVX2_INLINE S8Table s8_table(uint32_t e) {
  alignas(32) float t[16];
  for (uint32_t j = 0; j < 16; ++j) t[j] = codecs::log_scale_frac(j);
  const __m256 pe = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(e << 23)));
  return S8Table{_mm256_mul_ps(pe, _mm256_load_ps(t)), _mm256_mul_ps(pe, _mm256_load_ps(t + 8))};
}

// codecs::s8_decode(e, c) on 8 lanes, c in 0..127: (2^(E-127) * T[c mod 16]) * 2^-(c div 16).
CC_AVX2_INLINE __m256 s8_decode8(__m256i c, const S8Table& t) {
  const __m256i j = _mm256_and_si256(c, _mm256_set1_epi32(7));
  const __m256 hi_half = _mm256_castsi256_ps(_mm256_slli_epi32(c, 28));  // bit 3 -> sign
  const __m256 frac = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t.lo, j),
                                       _mm256_permutevar8x32_ps(t.hi, j), hi_half);
  const __m256i pow2 =
      _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(127), _mm256_srli_epi32(c, 4)), 23);
  return _mm256_mul_ps(frac, _mm256_castsi256_ps(pow2));
}

// hint8_base_scale of 8 group maxima: max(amax / 127, FLT_MIN) (s > floor ? s : floor is
// maxps's rule).
CC_AVX2_INLINE __m256 base_scale8(__m256i amax) {
  return _mm256_max_ps(
      _mm256_div_ps(_mm256_castsi256_ps(amax), _mm256_set1_ps(codecs::kInt8Max)),
      _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(codecs::kF32MinNormalBits))));
}

// The non-finite groups of 8 group maxima (|y| bits from Inf's up), as -1 lanes.
CC_AVX2_INLINE __m256i non_finite8(__m256i amax) {
  return _mm256_cmpgt_epi32(amax, _mm256_set1_epi32(int32_t(codecs::kF32InfBits) - 1));
}

// The scales of 8 groups: s' and the stored bits (hint8_make_scale, lane by lane).
struct Scales8 {
  __m256 s;
  __m256i stored;
};

// decode(c) >= s, as -1 / 0 lanes.
CC_AVX2_INLINE __m256i s8_at_least(__m256i c, __m256 s, const S8Table& t) {
  return _mm256_castps_si256(_mm256_cmp_ps(s8_decode8(c, t), s, _CMP_GE_OQ));
}

// s8 by search, for any E (s8_scales8 takes it where E < kS8FastMinE): the code s8_code
// returns, the largest c <= 126 with decode(c) >= s (decode does not increase with c, and
// decode(0) >= s), in all lanes at once. Its first guess
// 16 log2(2^(E-127) / s) = (d * 16) >> 23 = d >> 19 (d > 0) is at most two codes above the
// answer, so the answer is lo + #{i = 1..3 : decode(lo + i) >= s} for lo = guess - 2 wherever
// decode(lo) >= s (or lo = 0) and decode(lo + 4) < s (or lo + 4 > 126), which is checked; a
// lane where it fails takes s8_code's steps (down while decode(c) < s, up while
// decode(c + 1) >= s), which end at the answer from any start.
CC_AVX2_INLINE __m256i s8_codes_search(uint32_t e, __m256 s, __m256i bad, const S8Table& t) {
  const __m256i d = _mm256_sub_epi32(_mm256_set1_epi32(int32_t(e << 23)), _mm256_castps_si256(s));
  const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
  const __m256i cmax = _mm256_set1_epi32(int32_t(codecs::kS8MaxCode));
    __m256i c = _mm256_min_epi32(_mm256_max_epi32(_mm256_srai_epi32(d, 19), zero), cmax);
  const __m256i lo = _mm256_max_epi32(_mm256_sub_epi32(c, _mm256_set1_epi32(2)), zero);
  c = lo;
  for (int i = 1; i <= 3; ++i) {  // counts -1 per code lo + i <= 126 that qualifies
    const __m256i ci = _mm256_add_epi32(lo, _mm256_set1_epi32(i));
    c = _mm256_sub_epi32(c, _mm256_andnot_si256(_mm256_cmpgt_epi32(ci, cmax), s8_at_least(ci, s, t)));
  }
  const __m256i c4 = _mm256_add_epi32(lo, _mm256_set1_epi32(4));
  const __m256i bottom = _mm256_or_si256(_mm256_cmpeq_epi32(lo, zero), s8_at_least(lo, s, t));
  const __m256i top = _mm256_or_si256(_mm256_cmpgt_epi32(c4, cmax),
                                      _mm256_xor_si256(s8_at_least(c4, s, t), _mm256_set1_epi32(-1)));
  const __m256i ok = _mm256_or_si256(bad, _mm256_and_si256(bottom, top));
  if (_mm256_movemask_ps(_mm256_castsi256_ps(ok)) != 0xFF) {
    for (;;) {
      const __m256i below = _mm256_xor_si256(s8_at_least(c, s, t), _mm256_set1_epi32(-1));
      const __m256i down = _mm256_and_si256(below, _mm256_cmpgt_epi32(c, zero));
      const __m256i up = _mm256_andnot_si256(
          below, _mm256_and_si256(s8_at_least(_mm256_add_epi32(c, one), s, t), _mm256_cmpgt_epi32(cmax, c)));
      const __m256i step = _mm256_andnot_si256(bad, _mm256_or_si256(down, up));
      if (_mm256_testz_si256(step, step)) break;
      c = _mm256_sub_epi32(_mm256_add_epi32(c, _mm256_and_si256(step, down)),
                           _mm256_and_si256(step, up));  // down / up are -1 where they apply
    }
  }
  return c;
}

// The smallest block exponent for which s8_codes_fast applies: from E = 9 on, every
// s8_decode(E, c) with c <= 126 is a normal number, 2^(E-127-(c div 16)) * T[c mod 16]
// exactly.
constexpr uint32_t kS8FastMinE = 9;

// The mantissa bits of T[j] (j = 1..15, each in [0.5, 1)) bucketed by their top 5 bits: for
// bucket b, (t + 1) << 4 | a, with a the number of T[j] whose mantissa lies above the bucket
// and t the one mantissa inside it (-1 when none: the buckets are narrower than the gaps
// between the T[j]), as four registers of 8 buckets.
struct S8Buckets {
  __m256i r[4];
};
CC_AVX2_INLINE S8Buckets s8_buckets() {
  alignas(32) static const std::array<int32_t, 32> table = [] {
    std::array<int32_t, 32> v{};
    for (int32_t k = 0; k < 32; ++k) {
      int32_t above = 0, inside = -1;
      for (uint32_t j = 1; j < 16; ++j) {
        const int32_t t = int32_t(codecs::f32_bits(codecs::log_scale_frac(j)) & 0x7FFFFFu);
        if (t >= (k + 1) << 18) {
          ++above;
        } else if (t >= k << 18) {
          inside = t;
        }
      }
      v[k] = ((inside + 1) << 4) | above;
    }
    return v;
  }();
  S8Buckets b;
  for (int i = 0; i < 4; ++i)
    b.r[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(table.data() + 8 * i));
  return b;
}

// s8_code for E >= kS8FastMinE in closed form. With s = 2^(es-127) (1 + m 2^-23) and
// D = E - es: decode(16k + j) >= s holds for every code with k < D - 1, for none with k > D,
// for k = D only at j = 0 and m = 0, and for k = D - 1 exactly where T[j]'s mantissa >= m.
// So the code is 16 D where m = 0, else 16 (D - 1) + #{j = 1..15 : mant(T[j]) >= m}, at most
// 126.
CC_AVX2_INLINE __m256i s8_codes_fast(uint32_t e, __m256 s, const S8Buckets& bucket) {
  const __m256i sb = _mm256_castps_si256(s);
  const __m256i m = _mm256_and_si256(sb, _mm256_set1_epi32(0x7FFFFF));
  const __m256i d16 = _mm256_slli_epi32(
      _mm256_sub_epi32(_mm256_set1_epi32(int32_t(e)), _mm256_srli_epi32(sb, 23)), 4);
  const __m256i idx = _mm256_srli_epi32(m, 18);  // vpermd reads its low 3 bits
  const __m256 b3 = _mm256_castsi256_ps(_mm256_slli_epi32(m, 10));  // bucket bit 3 -> sign
  const __m256 b4 = _mm256_castsi256_ps(_mm256_slli_epi32(m, 9));   // bucket bit 4 -> sign
  const __m256 lo = _mm256_blendv_ps(
      _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(bucket.r[0], idx)),
      _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(bucket.r[1], idx)), b3);
  const __m256 hi = _mm256_blendv_ps(
      _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(bucket.r[2], idx)),
      _mm256_castsi256_ps(_mm256_permutevar8x32_epi32(bucket.r[3], idx)), b3);
  const __m256i p = _mm256_castps_si256(_mm256_blendv_ps(lo, hi, b4));
  // count = a + [t >= m] = a - cmpgt(t + 1, m)
  const __m256i count = _mm256_sub_epi32(_mm256_and_si256(p, _mm256_set1_epi32(15)),
                                         _mm256_cmpgt_epi32(_mm256_srli_epi32(p, 4), m));
  const __m256i c = _mm256_blendv_epi8(
      _mm256_add_epi32(_mm256_sub_epi32(d16, _mm256_set1_epi32(16)), count), d16,
      _mm256_cmpeq_epi32(m, _mm256_setzero_si256()));
  return _mm256_min_epi32(c, _mm256_set1_epi32(int32_t(codecs::kS8MaxCode)));
}

// The s8 scales of 8 groups (hint8_make_scale, lane by lane) with base scales s
// (base_scale8) in a block of exponent E; bad: the non-finite groups.
CC_AVX2_INLINE Scales8 s8_scales8(uint32_t e, __m256 s, __m256i bad, const S8Table& t,
                                  const S8Buckets& bucket) {
  const __m256i c =
      e >= kS8FastMinE ? s8_codes_fast(e, s, bucket) : s8_codes_search(e, s, bad, t);
  const __m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(codecs::kF32QNaNBits)));
  return Scales8{_mm256_blendv_ps(s8_decode8(c, t), nan, _mm256_castsi256_ps(bad)),
                 _mm256_blendv_epi8(c, _mm256_set1_epi32(int32_t(codecs::kS8NaN)), bad)};
}

// s16 / s32 scales of 8 groups (hint8_make_scale with 16 or 32 scale bits).
CC_AVX2_INLINE Scales8 wide_scales8(int32_t scale_bits, __m256i amax) {
  const __m256i bad = non_finite8(amax);
  const __m256 nan = _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(codecs::kF32QNaNBits)));
  __m256i u = _mm256_castps_si256(base_scale8(amax));
  if (scale_bits == 16) {  // bf16_round_up: + 2^16 where the low half is not 0, then >> 16
    const __m256i low = _mm256_and_si256(u, _mm256_set1_epi32(0xFFFF));
    const __m256i inexact = _mm256_xor_si256(_mm256_cmpeq_epi32(low, _mm256_setzero_si256()),
                                             _mm256_set1_epi32(-1));
    u = _mm256_add_epi32(u, _mm256_and_si256(inexact, _mm256_set1_epi32(0x10000)));
    const __m256i b = _mm256_srli_epi32(u, 16);
    return Scales8{
        _mm256_blendv_ps(_mm256_castsi256_ps(_mm256_slli_epi32(b, 16)), nan,
                         _mm256_castsi256_ps(bad)),
        _mm256_blendv_epi8(b, _mm256_set1_epi32(0x7FC0), bad)};
  }
  const __m256 s = _mm256_blendv_ps(_mm256_castsi256_ps(u), nan, _mm256_castsi256_ps(bad));
  return Scales8{s, _mm256_castps_si256(s)};
}

// Lane i of v broadcast to all lanes.
CC_AVX2_INLINE __m256 lane(__m256 v, int32_t i) {
  return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(i));
}

// Bytes of a block's scale section, at most 64 (16 groups of s32): straight from the wire
// where 64 bytes are readable, else through a copy.
struct ScaleBytes {
  alignas(32) uint8_t buf[64] = {};

  CC_AVX2_INLINE const uint8_t* read(const uint8_t* p, int32_t n, const uint8_t* end) {
    if (end - p >= 64) return p;
    std::memcpy(buf, p, static_cast<size_t>(n));
    return buf;
  }
};

// Writes the scale bytes of the groups 8v .. 8v + k8 - 1 (k8 <= 8) of a block: s8 codes
// (with bit i of E in bit 7 of group i's byte, i < 8, when @p e_bits), bf16 or fp32 bits.
CC_AVX2_INLINE void store_scales8(int32_t scale_bits, __m256i stored, int32_t k8, uint32_t e,
                                  bool e_bits, uint8_t* p) {
  alignas(32) uint8_t b[32];
  int32_t bytes;
  if (scale_bits == 8) {
    if (e_bits) {
      const __m256i bit = _mm256_and_si256(
          _mm256_srlv_epi32(_mm256_set1_epi32(int32_t(e)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
          _mm256_set1_epi32(1));
      stored = _mm256_or_si256(stored, _mm256_slli_epi32(bit, 7));
    }
    _mm_storel_epi64(reinterpret_cast<__m128i*>(b), pack8_epu8(stored));
    bytes = k8;
  } else if (scale_bits == 16) {
    _mm_store_si128(reinterpret_cast<__m128i*>(b),
                    _mm_packus_epi32(_mm256_castsi256_si128(stored),
                                     _mm256_extracti128_si256(stored, 1)));
    bytes = 2 * k8;
  } else {
    _mm256_store_si256(reinterpret_cast<__m256i*>(b), stored);
    bytes = 4 * k8;
  }
  std::memcpy(p, b, static_cast<size_t>(bytes));
}

// Reads the scales of groups 8v .. 8v + 7 of a block from its scale bytes @p b (s8: the group
// bytes, after the E byte if any).
CC_AVX2_INLINE __m256 load_scales8(int32_t scale_bits, const uint8_t* b, const S8Table& t) {
  if (scale_bits == 8) {  // s8_read: code 127 is NaN, bit 7 belongs to E
    const __m256i c = _mm256_and_si256(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b))),
        _mm256_set1_epi32(0x7F));
    const __m256i nan = _mm256_cmpeq_epi32(c, _mm256_set1_epi32(int32_t(codecs::kS8NaN)));
    return _mm256_blendv_ps(s8_decode8(c, t),
                            _mm256_castsi256_ps(_mm256_set1_epi32(int32_t(codecs::kF32QNaNBits))),
                            _mm256_castsi256_ps(nan));
  }
  if (scale_bits == 16)  // bf16_to_float
    return _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b))), 16));
  return _mm256_loadu_ps(reinterpret_cast<const float*>(b));
}

// The kernels, for blocks of R registers (h = 8R) in groups of G registers (g = 8G).
template <int R, int G, bool kSr>
CC_AVX2 void encode_blocks(const Hint8Shape& sh, const float* x, int64_t nblocks,
                           uint64_t prefix, int64_t index, int8_t* q, uint8_t* sc) {
  constexpr int32_t kH = 8 * R, kG = 8 * G, K = R / G, NV = (K + 7) / 8;
  constexpr bool kEByte = K < codecs::kS8SpreadGroups;
  const int32_t stride = hint8_block_scale_bytes(sh);
  const int32_t group_bytes = sh.scale_bits == 8 ? 1 : sh.scale_bits / 8;
  __m256 sign[R];
  for (int i = 0; i < R; ++i) sign[i] = random_signs8(i);
  const __m256 rne = _mm256_set1_ps(12582912.0f);
  const __m256i qmin = _mm256_set1_epi8(-127);
  SrNoise8 noise(prefix, index);
  const S8Buckets bucket = s8_buckets();
  for (int64_t b = 0; b < nblocks; ++b, x += kH, q += kH, sc += stride) {
    prefetch(reinterpret_cast<const char*>(x) + kPrefetchAhead, 4 * kH);
    __m256 r[R];
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      r[i] = _mm256_loadu_ps(x + 8 * i);
      if (sh.rs) r[i] = _mm256_mul_ps(r[i], sign[i]);  // mul_rn(x, random_sign(j))
    }
    wht_normalized_regs<R>(r);
    __m256i amax[2];
    group_abs_max_regs<R, G>(r, amax);
    // Non-finite groups: as lanes, and as bit i for group i.
    __m256i badv[NV];
    int bad = 0;
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      badv[v] = non_finite8(amax[v]);
      bad |= _mm256_movemask_ps(_mm256_castsi256_ps(badv[v])) << (8 * v);
    }
    __m256 scale[NV];
    uint8_t* out = sc;
    if (sh.scale_bits == 8) {
      // The block exponent from the largest base scale of a finite group (lanes past K
      // are 0: FLT_MIN, as are non-finite groups here).
      __m256 base[NV];
      __m256i m = _mm256_set1_epi32(int32_t(codecs::kF32MinNormalBits));
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        base[v] = base_scale8(amax[v]);
        m = _mm256_max_epi32(m, _mm256_andnot_si256(badv[v], _mm256_castps_si256(base[v])));
      }
      const uint32_t e = codecs::s8_exp_of_scale(static_cast<uint32_t>(hmax_epi32(m)));
      const S8Table table = s8_table(e);
      if (kEByte) *out++ = static_cast<uint8_t>(e);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        const Scales8 s8 = s8_scales8(e, base[v], badv[v], table, bucket);
        scale[v] = s8.s;
        const int32_t k8 = K - 8 * v < 8 ? K - 8 * v : 8;
        store_scales8(8, s8.stored, k8, e, !kEByte && v == 0, out);
        out += k8;
      }
    } else {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) {
        const Scales8 s8 = wide_scales8(sh.scale_bits, amax[v]);
        scale[v] = s8.s;
        const int32_t k8 = K - 8 * v < 8 ? K - 8 * v : 8;
        store_scales8(sh.scale_bits, s8.stored, k8, 0, false, out);
        out += k8 * group_bytes;
      }
    }
    // Codes: RNE(y / s') (or floor + [u < frac]) as int32, packed 32 at a time; the packs
    // saturate to -128..127 and the max brings -128 to -127, the clamp of hint8_quantize.
    __m256i kq[R];
#pragma GCC unroll 16
    for (int i = 0; i < K; ++i) {
      const __m256 sv = lane(scale[i / 8], i % 8);
#pragma GCC unroll 16
      for (int j = i * G; j < (i + 1) * G; ++j) {
        const __m256 t = _mm256_div_ps(r[j], sv);
        kq[j] = kSr ? sr_floor_step8(t, noise.next())
                    : _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(t, rne), rne));
      }
    }
    if constexpr (R == 2) {
      const __m256i p = _mm256_max_epi8(pack32_epi8(kq[0], kq[1], kq[0], kq[1]), qmin);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm256_castsi256_si128(p));
    } else {
#pragma GCC unroll 4
      for (int i = 0; i < R; i += 4)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 8 * i),
                            _mm256_max_epi8(pack32_epi8(kq[i], kq[i + 1], kq[i + 2], kq[i + 3]),
                                            qmin));
    }
    // A non-finite group: zero codes.
    for (int32_t i = 0; bad != 0; ++i, bad >>= 1)
      if (bad & 1) std::memset(q + i * kG, 0, static_cast<size_t>(kG));
  }
}

template <int R, int G>
CC_AVX2 void decode_blocks(const Hint8Shape& sh, const int8_t* q, const uint8_t* sc,
                           const uint8_t* sc_end, int64_t nblocks, float* out, bool accumulate) {
  constexpr int32_t kH = 8 * R, K = R / G, NV = (K + 7) / 8;
  constexpr bool kEByte = K < codecs::kS8SpreadGroups;
  const int32_t stride = hint8_block_scale_bytes(sh);
  const int32_t group_bytes = sh.scale_bits == 8 ? 1 : sh.scale_bits / 8;
  __m256 sign[R];
  for (int i = 0; i < R; ++i) sign[i] = random_signs8(i);
  ScaleBytes bytes;
  for (int64_t b = 0; b < nblocks; ++b, q += kH, sc += stride, out += kH) {
    if (accumulate) prefetch(out + kAccumulateAhead / 4, 4 * kH);
    const uint8_t* p = bytes.read(sc, stride, sc_end);
    __m256 scale[NV];
    if (sh.scale_bits == 8) {
      uint32_t e;  // s8_read_exp
      if (kEByte) {
        e = *p++;
      } else {
        e = static_cast<uint32_t>(
            _mm_movemask_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)))) & 0xFFu;
      }
      const S8Table table = s8_table(e);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) scale[v] = load_scales8(8, p + 8 * v, table);
    } else {
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v)
        scale[v] = load_scales8(sh.scale_bits, p + 8 * v * group_bytes, S8Table{});
    }
    __m256 r[R];
#pragma GCC unroll 16
    for (int i = 0; i < K; ++i) {
      const __m256 sv = lane(scale[i / 8], i % 8);
#pragma GCC unroll 16
      for (int j = i * G; j < (i + 1) * G; ++j) r[j] = _mm256_mul_ps(load8_i8_ps(q + 8 * j), sv);
    }
    wht_normalized_regs<R>(r);
#pragma GCC unroll 16
    for (int i = 0; i < R; ++i) {
      if (sh.rs) r[i] = _mm256_mul_ps(r[i], sign[i]);
      emit8(out + 8 * i, r[i], accumulate);
    }
  }
}

// Calls fn(integral_constant<G>) for the group size g = 8G of a block of R registers.
template <int R, int G = 1, class Fn>
inline void with_groups(int32_t g, Fn fn) {
  if constexpr (G <= R) {
    if (g == 8 * G) return fn(std::integral_constant<int, G>{});
    with_groups<R, 2 * G>(g, fn);
  }
}

// Calls fn(integral_constant<R>) for the block size h = 8R.
template <class Fn>
inline void with_block(int32_t h, Fn fn) {
  switch (h) {
    case 16: return fn(std::integral_constant<int, 2>{});
    case 32: return fn(std::integral_constant<int, 4>{});
    case 64: return fn(std::integral_constant<int, 8>{});
    default: return fn(std::integral_constant<int, 16>{});
  }
}

}  // namespace

CC_AVX2 void hint8_encode_blocks_avx2(const Hint8Shape& s, const float* x, int64_t nblocks,
                                      uint64_t prefix, int64_t index, int8_t* q, uint8_t* sc) {
  with_block(s.h, [&](auto r) {
    with_groups<r.value>(s.g, [&](auto g) {
      if (s.sr) return encode_blocks<r.value, g.value, true>(s, x, nblocks, prefix, index, q, sc);
      encode_blocks<r.value, g.value, false>(s, x, nblocks, prefix, index, q, sc);
    });
  });
}

CC_AVX2 void hint8_decode_blocks_avx2(const Hint8Shape& s, const int8_t* q, const uint8_t* sc,
                                      const uint8_t* sc_end, int64_t nblocks, float* out,
                                      bool accumulate) {
  with_block(s.h, [&](auto r) {
    with_groups<r.value>(s.g, [&](auto g) {
      decode_blocks<r.value, g.value>(s, q, sc, sc_end, nblocks, out, accumulate);
    });
  });
}

CC_AVX2 void hint8_s8_scales_avx2(uint32_t e, const int32_t* amax, int32_t k, uint32_t* code,
                                  float* scale) {
  alignas(32) int32_t a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int32_t i = 0; i < k; ++i) a[i] = amax[i];
  const __m256i am = _mm256_load_si256(reinterpret_cast<const __m256i*>(a));
  const Scales8 s = s8_scales8(e, base_scale8(am), non_finite8(am), s8_table(e), s8_buckets());
  alignas(32) uint32_t cs[8];
  alignas(32) float ss[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(cs), s.stored);
  _mm256_store_ps(ss, s.s);
  for (int32_t i = 0; i < k; ++i) {
    code[i] = cs[i];
    scale[i] = ss[i];
  }
}

CC_AVX2 void hint8_quantize_avx2(const float* y, int32_t len, int32_t g, const float* scale,
                                 const float* u, int8_t* q) {
  const __m256 c = _mm256_set1_ps(12582912.0f);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  for (int32_t i = 0; i < len; i += 8) {
    const float s = scale[i / g];
    if (!codecs::f32_is_finite(s)) {  // a non-finite group: zero codes
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_setzero_si128());
      continue;
    }
    const __m256 t = _mm256_div_ps(_mm256_loadu_ps(y + i), _mm256_set1_ps(s));
    // hint8_quantize_sr: floor(t) + [u < frac]; hint8_quantize: RNE by +- 1.5 * 2^23
    const __m256i r = u != nullptr ? sr_floor_step8(t, _mm256_loadu_ps(u + i))
                                   : _mm256_cvttps_epi32(_mm256_sub_ps(_mm256_add_ps(t, c), c));
    const __m256i k = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), pack8_epi8(k));
  }
}

}  // namespace ccompress::cpu

#endif
