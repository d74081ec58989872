// Host loops of the hint8 family (format and policies: codecs/hint8/hint8.h) and its registration.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "ccompress/error.h"
#include "codecs/hadamard.h"
#include "codecs/hint8/hint8.h"
#include "codecs/hint8/hint8_avx2.h"
#include "codecs/registry.h"
#include "codecs/rotation_blocks.h"
#include "codecs/stochastic.h"
#include "cpu/fast_wht.h"
#include "cpu/host_loops.h"
#include "cpu/isa_dispatch.h"
#include "cpu/run_family.h"

namespace ccompress {
namespace {

constexpr int32_t kDefaultGroup = 16;
constexpr int32_t kDefaultRotation = 128;
constexpr int32_t kDefaultScaleBits = 8;
constexpr int32_t kMinGroup = 8, kMinRotation = 16, kMaxRotation = 1024;

void configure(Codec& c, const std::string&, const CodecOptions& o, const std::string& spec) {
  c.group = o.group ? o.group : kDefaultGroup;
  // An explicit group above the default rotation brings the rotation up with it.
  c.rotation = o.rotation ? o.rotation : std::max(kDefaultRotation, c.group);
  c.scale_bits = static_cast<uint8_t>(o.scale_bits ? o.scale_bits : kDefaultScaleBits);
  c.random_signs = o.random_signs;
  c.stochastic = o.stochastic;
  CC_CHECK(codecs::is_pow2(c.rotation) && c.rotation >= kMinRotation &&
               c.rotation <= kMaxRotation,
           "codec spec '" << spec << "': hint8 rotation :hH must be a power of two in "
                          << kMinRotation << ".." << kMaxRotation << " (e.g. hint8:g16:h128)");
  CC_CHECK(codecs::is_pow2(c.group) && c.group >= kMinGroup && c.group <= c.rotation,
           "codec spec '" << spec << "': hint8 group :gG must be a power of two in " << kMinGroup
                          << ".." << c.rotation << " (at most the rotation size, so every scale "
                          << "group lies in one rotation block)");
}

std::string spec_name(const Codec& c) {
  std::string s = "hint8:g" + std::to_string(c.group) + ":h" + std::to_string(c.rotation);
  if (c.random_signs) s += ":rs";
  s += ":s" + std::to_string(c.scale_bits);
  if (c.stochastic) s += ":sr";
  return s;
}

int64_t wire_bytes(const Codec& c, int64_t n) {
  return codecs::rot_scales_offset(n) +
         codecs::hint8_scale_bytes_before(c.scale_bits, n, c.group, c.rotation);
}

// Stores group gi's scale (i-th of its block) in the scale section.
void store_scale(const Codec& c, uint8_t* sc, int64_t gi, int32_t i, const codecs::S8Layout& l,
                 uint32_t e, uint32_t stored) {
  if (c.scale_bits == 8) {
    sc[l.base + (l.e_byte ? 1 : 0) + i] =
        static_cast<uint8_t>(stored | codecs::s8_exp_bit(l, e, i));
  } else if (c.scale_bits == 16) {
    uint16_t b = static_cast<uint16_t>(stored);
    std::memcpy(sc + 2 * gi, &b, 2);
  } else {
    std::memcpy(sc + 4 * gi, &stored, 4);
  }
}

// Group scales of one block (k groups): s' and stored bits per group, s8 through AVX2 in
// batches of 8 when the CPU has it (the same codes as codecs::hint8_make_scale).
void block_scales(const Codec& c, const int32_t* amax, int32_t k, uint32_t e, float* s,
                  uint32_t* stored) {
#ifdef CC_HAVE_SIMD_AVX2
  if (c.scale_bits == 8 && cpu_use_avx2()) {
    for (int32_t i = 0; i < k; i += 8)
      cpu::hint8_s8_scales_avx2(e, amax + i, std::min(8, k - i), stored + i, s + i);
    return;
  }
#endif
  for (int32_t i = 0; i < k; ++i) {
    const codecs::Hint8Scale h = codecs::hint8_make_scale(c.scale_bits, amax[i], e);
    s[i] = h.s;
    stored[i] = h.stored;
  }
}

// The codes of one block of len coefficients in groups of g at scales scale[i / g] (a
// non-finite scale: zero codes); u: the block's stochastic rounding draws, or null.
void quantize_block(const float* y, int32_t len, int32_t g, const float* scale, const float* u,
                    int8_t* q) {
#ifdef CC_HAVE_SIMD_AVX2
  if (g % 8 == 0 && cpu_use_avx2()) return cpu::hint8_quantize_avx2(y, len, g, scale, u, q);
#endif
  // int32 codes, narrowed by pack_codes: a plain int8_t store per element made GCC shuffle
  // 32-bit lanes apart in the baseline copy, which cost more than the arithmetic.
  alignas(16) int32_t k[kMaxRotation];
  for (int32_t i = 0; i < len / g; ++i) {
    const float s = scale[i];
    const int32_t off = i * g;
    if (!codecs::f32_is_finite(s)) {
      for (int32_t j = off; j < off + g; ++j) k[j] = 0;
    } else if (u != nullptr) {
      for (int32_t j = off; j < off + g; ++j) k[j] = codecs::hint8_quantize_sr(y[j], s, u[j]);
    } else {
      for (int32_t j = off; j < off + g; ++j) k[j] = codecs::hint8_quantize_code(y[j], s);
    }
  }
  cpu::pack_codes<true>(k, len, q);
}

#ifdef CC_HAVE_SIMD_AVX2
cpu::Hint8Shape shape(const Codec& c) {
  return cpu::Hint8Shape{c.rotation, c.group, c.scale_bits, c.random_signs, c.stochastic};
}
#endif

// The whole blocks at the start of a run that hint8_avx2.h's block kernels take (0 when they
// do not apply: no AVX2, or a shape they do not cover).
int64_t avx2_blocks(int64_t n, const Codec& c) {
#ifdef CC_HAVE_SIMD_AVX2
  if (cpu_use_avx2() && cpu::hint8_blocks_avx2_fit(shape(c))) return n / c.rotation;
#endif
  (void)n;
  (void)c;
  return 0;
}

// Block by block: rotate, group amaxes, (s8) the block exponent, scales, codes. The whole
// blocks go through the AVX2 block kernel where it applies, the rest one at a time.
void encode_body(const float* x, int64_t n, const Codec& c, const EncodeContext& ctx,
                 uint8_t* dst, const cpu::NextPiece&) {  // one pass: nothing to prefetch
  alignas(32) float y[kMaxRotation];
  alignas(32) float u[kMaxRotation];  // the block's stochastic rounding draws
  int32_t amax[kMaxRotation / kMinGroup];
  float scale[kMaxRotation / kMinGroup];
  uint32_t stored[kMaxRotation / kMinGroup];
  uint8_t* sc = dst + codecs::rot_scales_offset(n);
  for (int64_t i = n; i < codecs::rot_scales_offset(n); ++i) dst[i] = 0;
  int8_t* q = reinterpret_cast<int8_t*>(dst);
  const uint64_t prefix = codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank);
  const int64_t blocks = codecs::rot_block_count(n, c.rotation);
  const int64_t fast = avx2_blocks(n, c);
#ifdef CC_HAVE_SIMD_AVX2
  if (fast > 0) cpu::hint8_encode_blocks_avx2(shape(c), x, fast, prefix, ctx.index, q, sc);
#endif
  for (int64_t b = fast; b < blocks; ++b) {
    const codecs::RotBlock blk = codecs::rot_block(n, c.rotation, b);
    const float* in = x + blk.off;
    if (c.random_signs) {
      for (int32_t j = 0; j < blk.len; ++j)
        y[j] = codecs::mul_rn(x[blk.off + j], codecs::random_sign(j));
      in = y;
    }
    cpu::wht_normalized_host(in, y, blk.len);
    const int32_t gl = std::min(c.group, blk.len), k = blk.len / gl;
    // Raw |y| bits: a NaN or Inf coefficient exceeds every finite one (and Inf's bits).
    cpu::group_abs_max_host(y, blk.len, gl, amax);
    int32_t block_amax = 0;
    for (int32_t i = 0; i < k; ++i)
      if (amax[i] < static_cast<int32_t>(codecs::kF32InfBits))
        block_amax = std::max(block_amax, amax[i]);
    const uint32_t e = c.scale_bits == 8 ? codecs::s8_block_exp(block_amax) : 0;
    const codecs::S8Layout l = codecs::s8_layout(blk, c.group, c.rotation);
    if (c.scale_bits == 8 && l.e_byte) sc[l.base] = static_cast<uint8_t>(e);
    const int64_t g0 = codecs::scale_groups_before(blk.off, c.group);
    block_scales(c, amax, k, e, scale, stored);
    if (c.stochastic) cpu::sr_uniforms_host(prefix, ctx.index + blk.off, blk.len, u);
    for (int32_t i = 0; i < k; ++i) store_scale(c, sc, g0 + i, i, l, e, stored[i]);
    quantize_block(y, blk.len, gl, scale, c.stochastic ? u : nullptr, q + blk.off);
  }
}

void decode_body(const uint8_t* src, int64_t n, const Codec& c, float* out, bool accumulate) {
  alignas(32) float y[kMaxRotation];  // a block's values, when they are added to out
  const uint8_t* sc = src + codecs::rot_scales_offset(n);
  const int8_t* q = reinterpret_cast<const int8_t*>(src);
  const int64_t blocks = codecs::rot_block_count(n, c.rotation);
  const int64_t fast = avx2_blocks(n, c);
#ifdef CC_HAVE_SIMD_AVX2
  if (fast > 0) {
    cpu::hint8_decode_blocks_avx2(shape(c), q, sc, src + wire_bytes(c, n), fast, out,
                                  accumulate);
  }
#endif
  for (int64_t b = fast; b < blocks; ++b) {
    const codecs::RotBlock blk = codecs::rot_block(n, c.rotation, b);
    const int32_t gl = std::min(c.group, blk.len), k = blk.len / gl;
    const int64_t g0 = codecs::scale_groups_before(blk.off, c.group);
    const codecs::S8Layout l = codecs::s8_layout(blk, c.group, c.rotation);
    const uint32_t e = c.scale_bits == 8 ? codecs::s8_read_exp(l, sc + l.base) : 0;
    float* v = accumulate ? y : out + blk.off;
    for (int32_t i = 0; i < k; ++i) {
      const float s = c.scale_bits == 8
                          ? codecs::s8_read(e, sc[l.base + (l.e_byte ? 1 : 0) + i])
                          : codecs::hint8_read_scale(c.scale_bits, sc, g0 + i);
      for (int32_t j = i * gl; j < (i + 1) * gl; ++j)
        v[j] = codecs::hint8_dequantize(q[blk.off + j], s);
    }
    cpu::wht_normalized_host(v, v, blk.len);
    if (c.random_signs)
      for (int32_t j = 0; j < blk.len; ++j) v[j] = codecs::mul_rn(v[j], codecs::random_sign(j));
    if (accumulate) cpu::load_accumulate_body(y, DType::Float32, blk.len, out + blk.off, false);
  }
}

CC_CPU_RUN_FAMILY_HOST_OPS(kHostOps)

const char* kind_name(const Codec&) { return "hint8"; }

int64_t run_wire_bytes(const Codec& c, int64_t n) { return pieces_wire_bytes(wire_bytes, c, n); }

// hint8.h: int8 codes of step amax / 127 err by half a step, 1/254 of the group's largest
// coefficient, with the slack of its scale format (fp32; fp16; 8-bit exponent steps of 2^1/16
// under the run's fp32 scale).
ErrorModel error_model(const Codec& c) {
  const double sr = c.stochastic ? 2.0 : 1.0;
  const double slack = c.scale_bits == 32   ? 1 + 1e-6
                       : c.scale_bits == 16 ? 1 + std::ldexp(1.0, -7)
                                            : std::pow(2.0, 1.0 / 16) * (1 + 1e-6);
  ErrorModel m;
  m.u = sr * slack / 254;
  m.floor = sr * std::ldexp(1.0, -126);
  m.groups_tile_blocks = true;
  return m;
}

}  // namespace

extern const CodecFamily kHint8Family = {
    "hint8", {"hint8", nullptr}, configure, spec_name, kind_name, run_wire_bytes, nullptr,
    kHostOps,
    "hint8[:gG][:hH][:rs][:s32|:s16|:s8][:sr] (Hadamard rotation of H, symmetric int8 per G; "
    "G, H powers of two, 8 <= G <= H <= 1024, H >= 16; default hint8:g16:h128:s8, 8.5 bits)",
    error_model};

}  // namespace ccompress
