// Host loops of the TACO family (format and policies: codecs/taco/taco.h) and its registration.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "ccompress/error.h"
#include "codecs/fp8/fp8.h"
#include "codecs/hadamard.h"
#include "codecs/registry.h"
#include "codecs/rotation_blocks.h"
#include "codecs/stochastic.h"
#include "codecs/taco/taco.h"
#include "codecs/taco/taco_avx2.h"
#include "cpu/fast_wht.h"
#include "cpu/host_loops.h"
#include "cpu/isa_dispatch.h"
#include "cpu/run_family.h"
#include "cpu/simd_avx2.h"

namespace ccompress {
namespace {

using codecs::Fp8E4M3;
using codecs::Fp8E5M2;

constexpr int32_t kDefaultGroup = 128;
constexpr int32_t kMinGroup = 32;
constexpr int32_t kMaxGroup = 512;

const char* base_name(const Codec& c) { return c.fp8_format == 0 ? "taco" : "taco_e5m2"; }

void configure(Codec& c, const std::string& base, const CodecOptions& o,
               const std::string& spec) {
  CC_CHECK(!o.rotation && !o.scale_bits && !o.random_signs,
           "codec spec '" << spec << "': taco takes only :gG (its rotation is its group, its "
                          << "scales are fp32, it has no random signs) and :sr");
  c.group = o.group ? o.group : kDefaultGroup;
  CC_CHECK(codecs::is_pow2(c.group) && c.group >= kMinGroup && c.group <= kMaxGroup,
           "codec spec '" << spec << "': taco group must be a power of two in " << kMinGroup
                          << ".." << kMaxGroup << " (e.g. taco:g128)");
  c.rotation = c.group;
  c.fp8_format = base == "taco" ? 0 : 1;
  c.scale_bits = 32;
  c.random_signs = false;
  c.stochastic = o.stochastic;
}

std::string spec_name(const Codec& c) {
  return std::string(base_name(c)) + ":g" + std::to_string(c.group) + (c.stochastic ? ":sr" : "");
}

int64_t wire_bytes(const Codec& c, int64_t n) {
  return codecs::rot_scales_offset(n) + 8 * codecs::scale_groups_before(n, c.group);
}

// sum(x^2) of a block in taco_sum_sq's order; AVX2 for whole 32-lane rows.
float sum_sq(const float* x, int32_t len) {
#ifdef CC_HAVE_SIMD_AVX2
  if (len % 32 == 0 && cpu_use_avx2()) return cpu::taco_sum_sq_avx2(x, len);
#endif
  return codecs::taco_sum_sq(x, len);
}

// q[0, len) = FP8 of y / s (finite s); with @p sr stochastic rounding, the draw of element j
// at sr_uniform_at(sr->prefix, sr->index + j).
template <class F>
void quantize_block(const float* y, int32_t len, float s, const cpu::SrDraws* sr, uint8_t* q) {
#ifdef CC_HAVE_SIMD_AVX2
  if (len % 8 == 0 && cpu_use_avx2()) {
    return cpu::fp8_quantize_avx2(std::is_same_v<F, Fp8E5M2>, false, y, len, s, sr, q);
  }
#endif
  if (sr != nullptr) {
    alignas(32) float u[kMaxGroup];  // the block's stochastic rounding draws
    cpu::sr_uniforms_host(sr->prefix, sr->index, len, u);
    for (int32_t j = 0; j < len; ++j)
      q[j] = codecs::fp8_from_float_sr<F>(codecs::div_rn(y[j], s), u[j]);
  } else {
    cpu::fp8_codes_rn<F, false>(y, len, s, q);
  }
}

#ifdef CC_HAVE_SIMD_AVX2
cpu::TacoShape shape(const Codec& c) {
  return cpu::TacoShape{c.group, c.fp8_format != 0, c.stochastic};
}
#endif

// The whole groups at the start of a run that taco_avx2.h's block kernels take (0 when they
// do not apply).
int64_t avx2_blocks(int64_t n, const Codec& c) {
#ifdef CC_HAVE_SIMD_AVX2
  if (cpu_use_avx2() && cpu::taco_blocks_avx2_fit(shape(c))) return n / c.group;
#endif
  (void)c;
  (void)n;
  return 0;
}

template <class F>
void encode_run(const float* x, int64_t n, const Codec& c, const EncodeContext& ctx,
                uint8_t* dst) {
  float* pairs = reinterpret_cast<float*>(dst + codecs::rot_scales_offset(n));
  for (int64_t i = n; i < codecs::rot_scales_offset(n); ++i) dst[i] = 0;
  alignas(32) float y[kMaxGroup];
  const uint64_t prefix = codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank);
  const int64_t blocks = codecs::rot_block_count(n, c.group);
  const int64_t fast = avx2_blocks(n, c);
#ifdef CC_HAVE_SIMD_AVX2
  if (fast > 0) {
    cpu::taco_encode_blocks_avx2(shape(c), x, fast, prefix, ctx.index, dst,
                                 reinterpret_cast<uint8_t*>(pairs));
  }
#endif
  for (int64_t b = fast; b < blocks; ++b) {
    const codecs::RotBlock blk = codecs::rot_block(n, c.group, b);
    const int32_t len = blk.len;
    const float a = codecs::taco_prescale<F>(sum_sq(x + blk.off, len), len);
    for (int32_t j = 0; j < len; ++j) y[j] = codecs::mul_rn(a, x[blk.off + j]);
    cpu::wht_normalized_host(y, y, len);
    // Raw |y| bits: a NaN or Inf coefficient (non-finite input, or overflow) exceeds Inf's.
    int32_t amax = 0;
    cpu::group_abs_max_host(y, len, len, &amax);
    uint8_t* q = dst + blk.off;
    float pair[2];
    if (amax >= static_cast<int32_t>(codecs::kF32InfBits)) {
      std::memset(q, 0, static_cast<size_t>(len));
      pair[0] = pair[1] = codecs::taco_nan();
    } else {
      const float s = codecs::taco_scale<F>(amax);
      const cpu::SrDraws sr{prefix, ctx.index + blk.off};
      quantize_block<F>(y, len, s, c.stochastic ? &sr : nullptr, q);
      pair[0] = a;
      pair[1] = s;
    }
    // Blocks are visited in order, so block b's group index is scale_groups_before(off).
    std::memcpy(pairs + 2 * codecs::scale_groups_before(blk.off, c.group), pair, 8);
  }
}

template <class F>
void decode_run(const uint8_t* src, int64_t n, const Codec& c, float* out, bool accumulate) {
  alignas(32) float y[kMaxGroup];  // a block's values, when they are added to out
  const uint8_t* pairs = src + codecs::rot_scales_offset(n);
  // Every FP8 value is an fp32: a table of fp8_to_float itself.
  float lut[256];
  for (int i = 0; i < 256; ++i) lut[i] = codecs::fp8_to_float<F>(static_cast<uint8_t>(i));
  const int64_t blocks = codecs::rot_block_count(n, c.group);
  const int64_t fast = avx2_blocks(n, c);
#ifdef CC_HAVE_SIMD_AVX2
  if (fast > 0) cpu::taco_decode_blocks_avx2(shape(c), src, pairs, fast, out, accumulate);
#endif
  for (int64_t b = fast; b < blocks; ++b) {
    const codecs::RotBlock blk = codecs::rot_block(n, c.group, b);
    float pair[2];
    std::memcpy(pair, pairs + 8 * codecs::scale_groups_before(blk.off, c.group), 8);
    float* v = accumulate ? y : out + blk.off;
    const uint8_t* q = src + blk.off;
    for (int32_t j = 0; j < blk.len; ++j) v[j] = codecs::mul_rn(lut[q[j]], pair[1]);
    cpu::wht_normalized_host(v, v, blk.len);
    for (int32_t j = 0; j < blk.len; ++j) v[j] = codecs::div_rn(v[j], pair[0]);
    if (accumulate) cpu::load_accumulate_body(y, DType::Float32, blk.len, out + blk.off, false);
  }
}

void encode_body(const float* x, int64_t n, const Codec& c, const EncodeContext& ctx,
                 uint8_t* dst, const cpu::NextPiece&) {  // one pass: nothing to prefetch
  if (c.fp8_format == 0) {
    encode_run<Fp8E4M3>(x, n, c, ctx, dst);
  } else {
    encode_run<Fp8E5M2>(x, n, c, ctx, dst);
  }
}

void decode_body(const uint8_t* src, int64_t n, const Codec& c, float* out, bool accumulate) {
  if (c.fp8_format == 0) {
    decode_run<Fp8E4M3>(src, n, c, out, accumulate);
  } else {
    decode_run<Fp8E5M2>(src, n, c, out, accumulate);
  }
}

CC_CPU_RUN_FAMILY_HOST_OPS(kHostOps)

const char* kind_name(const Codec&) { return "taco"; }

int64_t run_wire_bytes(const Codec& c, int64_t n) { return pieces_wire_bytes(wire_bytes, c, n); }

// taco.h: the FP8 element's half top spacing over its max, as fp8; the RMS pre-scale leaves a
// floor of 1e-12 times that spacing.
ErrorModel error_model(const Codec& c) {
  const double sr = c.stochastic ? 2.0 : 1.0;
  const bool e5m2 = c.fp8_format == 1;
  const double top = e5m2 ? 4096.0 : 16.0;
  const double u = top / (e5m2 ? 57344.0 : 448.0);
  ErrorModel m;
  m.u = sr * u * (1 + std::ldexp(1.0, -16));
  m.floor = sr * 1e-12 * top;
  m.groups_tile_blocks = true;
  return m;
}

}  // namespace

extern const CodecFamily kTacoFamily = {
    "taco", {"taco", "taco_e5m2", nullptr}, configure, spec_name, kind_name, run_wire_bytes,
    nullptr, kHostOps,
    "taco[:gG][:sr], taco_e5m2[:gG][:sr] (TACO: RMS pre-scale, Hadamard, FP8 E4M3 or E5M2; G a "
    "power of two in 32..512, default 128)",
    error_model};

}  // namespace ccompress
