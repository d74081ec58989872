// Host loops of the 4-bit codecs (codecs/nvfp4/nvfp4.cc, codecs/hint4/hint4.cc) over the math of
// codecs/fourbit/fourbit.h: one run of n fp32 values in, wire bytes out, and back.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ccompress/codec.h"
#include "ccompress/kernel_backend.h"
#include "codecs/fourbit/fourbit.h"
#include "codecs/hint4/hint4.h"
#include "codecs/fp8/group_codec.h"
#include "codecs/nvfp4/nvfp4.h"
#include "codecs/stochastic.h"
#include "codecs/fourbit/e2m1_avx2.h"
#include "cpu/fast_wht.h"
#include "cpu/host_loops.h"
#include "cpu/isa_dispatch.h"
#include "cpu/simd_avx2.h"

namespace ccompress::cpu4 {

// Rotated coefficients of the run being encoded: the caller's run buffer is const and may be
// the backend's own scratch, so this one is separate. One per thread, grown to the largest run.
inline float* coef_scratch(int64_t n) {
  thread_local std::vector<float> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// Full groups that e2m1_avx2.h encodes (round to nearest) or decodes (either rounding: the
// wire format is the same) on an AVX2 CPU: 16-element groups with E4M3 scales; fourbit_cpu's
// loops do the rest of the run.
template <class Q>
inline int64_t avx2_groups(int64_t n, const Codec& c, bool encode) {
#ifdef CC_HAVE_E2M1_AVX2
  if ((std::is_same_v<Q, codecs::E2M1> || std::is_same_v<Q, codecs::Int4>) &&
      !(encode && c.stochastic) && c.group == codecs::kNvfp4Block && c.scale_bits == 8 &&
      cpu_use_avx2())
    return n / codecs::kNvfp4Block;
#endif
  (void)n;
  (void)c;
  (void)encode;
  return 0;
}

// Calls fn(first, length) for each rotation block of a run (rotation_blocks.h).
template <class Fn>
inline void for_each_rotation_block(int64_t n, int32_t h, Fn fn) {
  for (int64_t b = 0, nb = codecs::rot_block_count(n, h); b < nb; ++b) {
    codecs::RotBlock blk = codecs::rot_block(n, h, b);
    fn(blk.off, blk.len);
  }
}

inline int32_t scale_bytes(const Codec& c) { return c.scale_bits == 16 ? 2 : 1; }

// Rotates (or, with @p inverse, un-rotates) the whole blocks of src[0, full) into v (which
// may be src).
template <int H>
inline void rotate_full_blocks(const float* src, float* v, int64_t full, bool rs, bool inverse) {
  constexpr int64_t kBatch = 1024;  // 4 KiB: the stages of a batch stay in L1
  float sign[H];
  for (int j = 0; j < H; ++j) sign[j] = rs ? codecs::random_sign(static_cast<uint32_t>(j)) : 1.0f;
  const float norm = codecs::wht_norm(H);
  auto apply_signs = [&](const float* in, float* b, int64_t len) {
    for (int64_t off = 0; off < len; off += H)
      for (int j = 0; j < H; ++j) b[off + j] = codecs::mul_rn(in[off + j], sign[j]);
  };
#ifdef CC_HAVE_SIMD_AVX2
  const bool avx2 = cpu_use_avx2();
#else
  const bool avx2 = false;
#endif
  for (int64_t off = 0; off < full; off += kBatch) {
    const float* in = src + off;
    float* b = v + off;
    const int64_t len = std::min(kBatch, full - off);
    if (rs && !inverse) {
      apply_signs(in, b, len);
      in = b;
    }
    if (avx2) {  // block by block in registers (simd_avx2.h), the same bits
#ifdef CC_HAVE_SIMD_AVX2
      cpu::wht_normalized_blocks_avx2(in, b, len, H);
#endif
    } else {
      if (in != b) std::memcpy(b, in, static_cast<size_t>(len) * sizeof(float));
      cpu::fwht_stages<H, 1>(b, len);
      for (int64_t i = 0; i < len; ++i) b[i] = codecs::mul_rn(b[i], norm);
    }
    if (rs && inverse) apply_signs(b, b, len);
  }
}

// Rotates (or, with @p inverse, un-rotates) every rotation block of the run src[0, n) into v
// (which may be src): the common sizes through rotate_full_blocks, the rest (and the run's
// tail blocks) through hadamard.h.
inline void rotate_run(const float* src, float* v, int64_t n, int32_t h, bool rs, bool inverse) {
  int64_t full = 0;
  switch (h) {
    case 16: rotate_full_blocks<16>(src, v, full = n - n % h, rs, inverse); break;
    case 32: rotate_full_blocks<32>(src, v, full = n - n % h, rs, inverse); break;
    case 64: rotate_full_blocks<64>(src, v, full = n - n % h, rs, inverse); break;
    case 128: rotate_full_blocks<128>(src, v, full = n - n % h, rs, inverse); break;
    default: break;
  }
  if (src != v && full < n)
    std::memcpy(v + full, src + full, static_cast<size_t>(n - full) * sizeof(float));
  for_each_rotation_block(n, h, [&](int64_t off, int32_t len) {
    if (off < full) return;
    if (inverse) {
      codecs::unrotate_block(v + off, len, rs);
    } else {
      codecs::rotate_block(v + off, len, rs);
    }
  });
}

// Calls fn(std::integral_constant<int, G>{}) with G = g, a group size of the 4-bit codecs (a
// power of two in 16..256), so that the loops fn runs have their group length at compile time.
template <class Fn>
inline void with_group_size(int32_t g, Fn fn) {
  switch (g) {
    case 16: return fn(std::integral_constant<int, 16>{});
    case 32: return fn(std::integral_constant<int, 32>{});
    case 64: return fn(std::integral_constant<int, 64>{});
    case 128: return fn(std::integral_constant<int, 128>{});
    default: return fn(std::integral_constant<int, 256>{});
  }
}

// out[i] = nib[2i] | nib[2i + 1] << 4 for the len nibbles at nib, the wire's two codes per
// byte; an odd len's last byte has a zero high nibble.
inline void pack_nibbles(const uint8_t* nib, int64_t len, uint8_t* out) {
  for (int64_t i = 0; i < len / 2; ++i) out[i] = uint8_t(nib[2 * i] | (nib[2 * i + 1] << 4));
  if (len & 1) out[len / 2] = nib[len - 1];
}

// Round-to-nearest group scales and codes of the groups of G of y[0, groups * G) (maxima
// amax, run scale s): what encode_run's per-group loop does, a batch of groups at a time in
// three loops that GCC vectorizes (SSE2 in the baseline copy) where the per-group loop with
// its runtime length and two codes per store does not: the batch's scale codes and steps,
// its nibbles (G known at compile time), then their packing.
template <class Q, int G>
inline void encode_groups_rn(const float* y, int64_t groups, const int32_t* amax, float s,
                             int32_t sbits, uint8_t* codes, uint8_t* scales) {
  constexpr int64_t kBatch = 1024 / G;  // groups: 4 KiB of input
  float d[kBatch];
  uint8_t nib[kBatch * G];
  for (int64_t k0 = 0; k0 < groups; k0 += kBatch) {
    const int64_t nb = std::min(kBatch, groups - k0);
    for (int64_t j = 0; j < nb; ++j) {
      const uint32_t code = codecs::encode_group_scale(amax[k0 + j], Q::kQMax, s, sbits, false);
      d[j] = codecs::group_step(code, s, sbits);
      if (sbits == 8) {
        scales[k0 + j] = static_cast<uint8_t>(code);
      } else {
        scales[2 * (k0 + j)] = static_cast<uint8_t>(code);
        scales[2 * (k0 + j) + 1] = static_cast<uint8_t>(code >> 8);
      }
    }
    const float* v = y + k0 * G;
    for (int64_t j = 0; j < nb; ++j)
      for (int i = 0; i < G; ++i)
        nib[j * G + i] = codecs::fourbit_quantize<Q>(v[j * G + i], d[j], false, 0.f);
    pack_nibbles(nib, nb * G, codes + k0 * (G / 2));
  }
}

/// Encodes one run of n fp32 values into fourbit_layout(n, ...).total bytes.
template <class Q>
void encode_run(const float* x, int64_t n, const Codec& c, const EncodeContext& ctx,
                uint8_t* dst, const cpu::NextPiece& next = {}) {
  if (n == 0) return;
  const int32_t g = c.group, sbits = c.scale_bits, sb = scale_bytes(c);
  const bool sr = c.stochastic;
  const float* y = x;
  float* buf = c.rotation > 0 ? coef_scratch(n) : nullptr;
  int64_t k = avx2_groups<Q>(n, c, true);
  int32_t amax = 0;
#ifdef CC_HAVE_E2M1_AVX2
  int64_t kc = 0;  // groups 0..kc-1 of y are columns (e2m1_avx2.h)
  thread_local std::vector<int32_t> group_amax;
  thread_local std::vector<uint8_t> special;
  if (k > 0) {  // one pass: (rotation,) group and run maxima
    group_amax.resize(static_cast<size_t>(k + 8));
    special.resize(static_cast<size_t>(k / 8 + 1));
    // Rotation blocks of h in 16..128 rotate in the same pass, in batches of 128 elements;
    // the rest of the run rotates first (its blocks are the run's remaining ones).
    const int32_t h = c.rotation;
    const bool fused = h >= 16 && h <= 128;
    const int64_t kf = fused ? k - k % 8 : 0;
    if (kf > 0) {
      amax = fourbit_prepare_groups_avx2(x, buf, kf, h, c.random_signs, group_amax.data(),
                                         special.data());
      if (fourbit_columns(h)) kc = kf;
    }
    if (buf) rotate_run(x + 16 * kf, buf + 16 * kf, n - 16 * kf, h, c.random_signs, false);
    y = buf ? buf : x;
    if (kf < k) {
      amax = std::max(amax, fourbit_prepare_groups_avx2(y + 16 * kf, nullptr, k - kf, 0, false,
                                                        group_amax.data() + kf,
                                                        special.data() + kf / 8));
    }
    amax = std::max(amax, cpu::finite_abs_max_host(y + 16 * k, n - 16 * k));
  } else
#endif
  {
    if (buf) {
      rotate_run(x, buf, n, c.rotation, c.random_signs, false);
      y = buf;
    }
  }
  // Without the AVX2 kernels (the baseline copy; group sizes and scale widths e2m1_avx2.h does
  // not take; stochastic rounding), the maxima of the whole groups are found in the pass that
  // finds the run's, and a round-to-nearest run's whole groups go through encode_groups_rn.
  const int64_t kr = k == 0 ? n / g : 0;
  thread_local std::vector<int32_t> whole_amax;
  if (kr > 0) {
    whole_amax.resize(static_cast<size_t>(kr));
    with_group_size(g, [&](auto G) {
      amax = cpu::group_maxima<decltype(G)::value, true>(y, kr, whole_amax.data());
    });
    amax = std::max(amax, cpu::finite_abs_max_host(y + kr * g, n - kr * g));
  } else if (k == 0) {
    amax = cpu::finite_abs_max_host(y, n);
  }
  const float s = codecs::fourbit_run_scale(amax, Q::kQMax, sbits);
  const codecs::FourBitLayout lay = codecs::fourbit_layout(n, g, sb);
  uint8_t nib[1024];  // one group's nibbles (g <= 256 for these codecs)
  const uint64_t prefix = codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank);
#ifdef CC_HAVE_E2M1_AVX2
  constexpr bool int4 = std::is_same_v<Q, codecs::Int4>;
  if (kc > 0) {
    fourbit_encode_groups_avx2(int4, y, kc, s, group_amax.data(), special.data(), dst,
                               dst + lay.scales, next.x, next.n, true);
  }
  if (kc < k) {
    fourbit_encode_groups_avx2(int4, y + 16 * kc, k - kc, s, group_amax.data() + kc,
                               special.data() + kc / 8, dst + 8 * kc, dst + lay.scales + kc,
                               kc > 0 ? nullptr : next.x, kc > 0 ? 0 : next.n, false);
  }
#endif
  if (kr > 0 && !sr) {
    with_group_size(g, [&](auto G) {
      encode_groups_rn<Q, decltype(G)::value>(y, kr, whole_amax.data(), s, sbits, dst,
                                              dst + lay.scales);
    });
    k = kr;
  }
#ifdef CC_HAVE_E2M1_AVX2
  // Stochastic rounding of whole batches of 8 groups of 16 with E4M3 scales in AVX2; the
  // loop below codes the rest of the run.
  if (sr && g == 16 && sbits == 8 && kr >= 8 && cpu_use_avx2() &&
      (std::is_same_v<Q, codecs::E2M1> || int4)) {
    k = kr - kr % 8;
    fourbit_encode_groups_sr_avx2(int4, y, k, s, whole_amax.data(), prefix, ctx.index, dst,
                                  dst + lay.scales);
  }
#endif
  // Stochastic rounding: the draws of the rest of the run in one call (per group, setting up
  // the counter hash cost more than the quantization).
  thread_local std::vector<float> draws;
  const int64_t first = k * g;
  if (sr && first < n) {
    draws.resize(static_cast<size_t>(n - first));
    cpu::sr_uniforms_host(prefix, ctx.index + first, n - first, draws.data());
  }
  for (int64_t off = k * g; off < n; ++k, off += g) {
    const int64_t len = std::min<int64_t>(g, n - off);
    const float* v = y + off;
    const int32_t ga = k < kr ? whole_amax[k] : cpu::finite_abs_max_host(v, len);
    uint32_t code = codecs::encode_group_scale(ga, Q::kQMax, s, sbits, sr);
    const float d = codecs::group_step(code, s, sbits);
    for (int64_t i = 0; i < sb; ++i) dst[lay.scales + k * sb + i] = uint8_t(code >> (8 * i));
    if (sr) {
      const float* u = draws.data() + (off - first);
      for (int64_t i = 0; i < len; ++i) nib[i] = codecs::fourbit_quantize<Q>(v[i], d, true, u[i]);
    } else {
      for (int64_t i = 0; i < len; ++i) nib[i] = codecs::fourbit_quantize<Q>(v[i], d, false, 0.f);
    }
    pack_nibbles(nib, len, dst + off / 2);  // an odd run's last high nibble is 0
  }
  const int64_t scales_end = lay.scales + (n + g - 1) / g * sb;
  for (int64_t i = scales_end; i < lay.run_scale; ++i) dst[i] = 0;
  std::memcpy(dst + lay.run_scale, &s, 4);
}

/// Decodes one run into n fp32 values, or with @p accumulate adds them to out.
template <class Q>
void decode_run(const uint8_t* src, int64_t n, const Codec& c, float* out, bool accumulate) {
  if (n == 0) return;
  float* const dst = out;
  if (accumulate) out = coef_scratch(n);
  const int32_t g = c.group, sbits = c.scale_bits, sb = scale_bytes(c);
  const codecs::FourBitLayout lay = codecs::fourbit_layout(n, g, sb);
  float s;
  std::memcpy(&s, src + lay.run_scale, 4);
  // Dequantized nibble values, tabulated from Q::dequantize itself.
  float lut[16];
  for (int i = 0; i < 16; ++i) lut[i] = Q::dequantize(static_cast<uint8_t>(i));
  int64_t k = avx2_groups<Q>(n, c, false);
  int64_t done = 0;  // dst[0, done) is final: decoded, un-rotated and accumulated in one pass
#ifdef CC_HAVE_E2M1_AVX2
  if (k > 0) {
    const bool whole = c.rotation == 0 || fourbit_decode_rotates(c.rotation);
    fourbit_decode_groups_avx2(std::is_same_v<Q, codecs::Int4>, src, src + lay.scales, k, s,
                               whole ? dst : out, whole && accumulate, c.rotation,
                               c.random_signs);
    if (whole) done = 16 * k;  // the rest is the run's tail: shorter rotation blocks
  }
#endif
  for (int64_t off = k * g; off < n; ++k, off += g) {
    const int64_t len = std::min<int64_t>(g, n - off);
    uint32_t code = 0;
    for (int64_t i = 0; i < sb; ++i) code |= uint32_t(src[lay.scales + k * sb + i]) << (8 * i);
    const float d = codecs::group_step(code, s, sbits);
    const uint8_t* in = src + off / 2;
    float* o = out + off;
    for (int64_t i = 0; i + 1 < len; i += 2) {
      o[i] = codecs::mul_rn(lut[in[i / 2] & 15u], d);
      o[i + 1] = codecs::mul_rn(lut[in[i / 2] >> 4], d);
    }
    if (len & 1) o[len - 1] = codecs::mul_rn(lut[in[len / 2] & 15u], d);
  }
  if (c.rotation > 0)
    rotate_run(out + done, out + done, n - done, c.rotation, c.random_signs, true);
  if (accumulate)
    cpu::load_accumulate_body(out + done, DType::Float32, n - done, dst + done, false);
}

}  // namespace ccompress::cpu4
