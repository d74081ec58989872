// The fp8 family (fp8_e4m3:gG, fp8_e5m2:gG; format: group_codec.h): spec options, name,
// size, host loops and the registry entry.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "ccompress/error.h"
#include "codecs/fp8/fp8.h"
#include "codecs/fp8/fp8_lut.h"
#include "codecs/fp8/group_codec.h"
#include "codecs/registry.h"
#include "codecs/stochastic.h"
#include "cpu/host_loops.h"
#include "cpu/isa_dispatch.h"
#include "cpu/run_family.h"
#include "cpu/simd_avx2.h"

namespace ccompress {
namespace {

using codecs::Fp8E4M3;
using codecs::Fp8E5M2;
using codecs::fp8_lut;
using cpu::kBlock;

constexpr int32_t kDefaultGroup = 128;
constexpr int32_t kMinGroup = 16;
constexpr int32_t kMaxGroup = 1024;

void configure(Codec& c, const std::string& base, const CodecOptions& o,
               const std::string& spec) {
  CC_CHECK(o.given.find_first_not_of("gS") == std::string::npos,
           "codec '" << spec << "': " << base << " takes only :gG (G in " << kMinGroup << ".."
                     << kMaxGroup << ") and :sr");
  c.fp8_format = base == "fp8_e4m3" ? 0 : 1;
  c.stochastic = o.stochastic;
  c.group = o.group ? o.group : kDefaultGroup;
  CC_CHECK(c.group >= kMinGroup && c.group <= kMaxGroup,
           "codec '" << spec << "': the group G of " << base << ":gG is in " << kMinGroup << ".."
                     << kMaxGroup << " (e.g. " << base << ":g128)");
}

const char* kind_name(const Codec& c) { return c.fp8_format == 0 ? "fp8_e4m3" : "fp8_e5m2"; }

std::string spec_name(const Codec& c) {
  return std::string(kind_name(c)) + ":g" + std::to_string(c.group) + (c.stochastic ? ":sr" : "");
}

int64_t wire_bytes(const Codec& c, int64_t n) { return align_up(n, 4) + 4 * ceil_div(n, c.group); }

void check_args(const Codec& codec, int64_t n) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  CC_CHECK(codec.group >= kMinGroup && codec.group <= kBlock,
           "codec group " << codec.group << " is outside 16..1024");
}

// Runs fn(F{}) with F the FP8 format of the codec.
template <class Fn>
inline void with_fp8_format(const Codec& c, Fn fn) {
  if (c.fp8_format == 0) {
    fn(Fp8E4M3{});
  } else {
    fn(Fp8E5M2{});
  }
}

float load_scale(const void* wire, int64_t n, int64_t g) {
  float s;
  std::memcpy(&s, static_cast<const uint8_t*>(wire) + codecs::fp8_scales_offset(n) + 4 * g, 4);
  return s;
}

// With `:sr` the noise of the run's element off + i is drawn at index ctx.index + off + i.
template <class F>
void quantize_group(const float* x, int64_t len, void* wire, int64_t n, int64_t g, int64_t off,
                    const Codec& codec, const EncodeContext& ctx) {
  uint8_t* q = static_cast<uint8_t*>(wire) + off;
  const uint64_t prefix =
      codec.stochastic ? codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank) : uint64_t(0);
  float s;
#ifdef CC_HAVE_SIMD_AVX2
  if (len % 8 == 0 && cpu_use_avx2()) {
    const cpu::SrDraws sr{prefix, ctx.index + off};
    s = cpu::fp8_encode_group_avx2(std::is_same_v<F, Fp8E5M2>, x, static_cast<int32_t>(len),
                                   codec.stochastic ? &sr : nullptr, q);
    std::memcpy(static_cast<uint8_t*>(wire) + codecs::fp8_scales_offset(n) + 4 * g, &s, 4);
    return;
  }
#endif
  s = codecs::group_scale<F>(cpu::finite_abs_max_host(x, len));
  if (codec.stochastic) {
    alignas(32) float u[cpu::kBlock];  // the group's stochastic rounding draws
    cpu::sr_uniforms_host(prefix, ctx.index + off, len, u);
    for (int64_t i = 0; i < len; ++i) {
      // x / s an FP8 normal or larger and finite, nearly always: its code in integers
      const uint32_t y = codecs::f32_bits(codecs::div_rn(x[i], s));
      q[i] = codecs::fp8_sr_normal_range<F>(y & codecs::kF32AbsMask)
                 ? codecs::fp8_from_float_sr_normal<F>(
                       y, static_cast<uint32_t>(codecs::mul_rn(u[i], 16777216.0f)))
                 : codecs::group_quantize_sr<F>(x[i], s, u[i]);
    }
  } else {
    cpu::fp8_codes_rn<F, true>(x, len, s, q);
  }
  std::memcpy(static_cast<uint8_t*>(wire) + codecs::fp8_scales_offset(n) + 4 * g, &s, 4);
}

// The pad between payload and scales is zeroed so equal inputs give equal wire bytes.
void zero_fp8_padding(void* wire, int64_t n) {
  uint8_t* p = static_cast<uint8_t*>(wire);
  for (int64_t i = n; i < codecs::fp8_scales_offset(n); ++i) p[i] = 0;
}

// out[0, len) = the values of group g (elements off .. off + len), codecs::mul_rn(lut[q],
// s), or with @p accumulate out[i] + that, decoded by shifts and one exact scaling (AVX2's
// decoder where the CPU has it, else SSE2's). Every decode (accumulate, into an output,
// before a re-encode) is this.
template <class F>
void decode_group(const void* wire, int64_t n, int64_t g, int64_t off, int64_t len, float* out,
                  bool accumulate) {
  const float* lut = fp8_lut<F>();
  const uint8_t* q = static_cast<const uint8_t*>(wire) + off;
  const float s = load_scale(wire, n, g);
#ifdef CC_HAVE_SIMD_AVX2
  if (cpu_use_avx2())
    return cpu::fp8_decode_avx2(std::is_same_v<F, Fp8E5M2>, lut, q, len, s, out, accumulate);
#endif
  cpu::fp8_decode_sse2(std::is_same_v<F, Fp8E5M2>, lut, q, len, s, out, accumulate);
}

void host_encode_body(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                      float divisor, const EncodeContext& ctx, void* dst) {
  check_args(codec, n);
  float buf[kBlock];
  zero_fp8_padding(dst, n);
  with_fp8_format(codec, [&](auto fmt) {
    using F = decltype(fmt);
    cpu::for_each_group(n, codec.group, [&](int64_t g, int64_t off, int64_t len) {
      // fp32 input needs no conversion: quantize it in place of a copy.
      const float* x = static_cast<const float*>(src) + off;
      if (src_dtype != DType::Float32 || divisor != 1.0f) {
        cpu::load_block(src, src_dtype, off, len, divisor, buf);
        x = buf;
      }
      quantize_group<F>(x, len, dst, n, g, off, codec, ctx);
    });
  });
}

void host_decode_accumulate_body(const void* src, int64_t n, const Codec& codec, float* acc,
                                 bool assign) {
  check_args(codec, n);
  with_fp8_format(codec, [&](auto fmt) {
    using F = decltype(fmt);
    cpu::for_each_group(n, codec.group, [&](int64_t g, int64_t off, int64_t len) {
      decode_group<F>(src, n, g, off, len, acc + off, !assign);
    });
  });
}

void host_decode_body(const void* src, int64_t n, const Codec& codec, void* out,
                      DType out_dtype) {
  check_args(codec, n);
  float buf[kBlock];
  with_fp8_format(codec, [&](auto fmt) {
    using F = decltype(fmt);
    cpu::for_each_group(n, codec.group, [&](int64_t g, int64_t off, int64_t len) {
      if (out_dtype == DType::Float32)  // straight into the output
        return decode_group<F>(src, n, g, off, len, static_cast<float*>(out) + off, false);
      decode_group<F>(src, n, g, off, len, buf, false);
      cpu::store_block(buf, len, out, out_dtype, off);
    });
  });
}

void host_decode_reduce_encode_body(const void* src, const void* x, DType x_dtype, int64_t n,
                                    const Codec& codec, float divisor,
                                    const EncodeContext& ctx, void* dst) {
  check_args(codec, n);
  float buf[kBlock];
  with_fp8_format(codec, [&](auto fmt) {
    using F = decltype(fmt);
    cpu::for_each_group(n, codec.group, [&](int64_t g, int64_t off, int64_t len) {
      decode_group<F>(src, n, g, off, len, buf, false);
      cpu::add_block(x, x_dtype, off, len, divisor, buf);
      quantize_group<F>(buf, len, dst, n, g, off, codec, ctx);
    });
  });
  zero_fp8_padding(dst, n);
}

CC_CPU_HOST_OPS_DISPATCH(kHostOps)

// group_codec.h: round to nearest errs by half the top spacing (16 of 448 for E4M3, 4096
// of 57344 for E5M2) times the group's scale, and by half a subnormal step of fp32 scales.
ErrorModel error_model(const Codec& c) {
  const double sr = c.stochastic ? 2.0 : 1.0;
  const bool e5m2 = c.fp8_format == 1;
  const double top = e5m2 ? 4096.0 : 16.0;
  const double u = top / (e5m2 ? 57344.0 : 448.0);
  ErrorModel m;
  m.u = sr * u * (1 + std::ldexp(1.0, -16));
  m.floor = sr * std::ldexp(1.0, -126) * top;
  m.groups_tile_blocks = true;
  return m;
}

}  // namespace

extern const CodecFamily kFp8Family = {
    "fp8", {"fp8_e4m3", "fp8_e5m2", nullptr}, configure, spec_name, kind_name, wire_bytes,
    nullptr, kHostOps,
    "fp8_e4m3[:gG][:sr], fp8_e5m2[:gG][:sr] (FP8 with an fp32 scale per group of G; G in "
    "16..1024, default 128)",
    error_model};

}  // namespace ccompress
