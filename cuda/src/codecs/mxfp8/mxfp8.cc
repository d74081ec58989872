// The mxfp8 family (mxfp8, mxfp8_e5m2; format: mxfp8.h): spec options, name, size, host loops
// and the registry entry. The element steps are the fp8 family's (group_codec.h: the coder
// fp8_code, its non-finite codes, and the decoders of simd_avx2.h); only the scale differs:
// an E8M0 power of two per 32.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "ccompress/error.h"
#include "codecs/fp8/fp8.h"
#include "codecs/fp8/fp8_lut.h"
#include "codecs/fp8/group_codec.h"
#include "codecs/mxfp8/mxfp8.h"
#include "codecs/mxfp8/mx_avx2.h"
#include "codecs/mxfp8/mx_options.h"
#include "codecs/registry.h"
#include "cpu/isa_dispatch.h"
#include "cpu/run_family.h"
#include "cpu/simd_avx2.h"

namespace ccompress {
namespace {

using codecs::Fp8E4M3;
using codecs::Fp8E5M2;
using codecs::kMxBlock;

constexpr int64_t kBatch = 32;  // blocks coded in one batch (4 KiB of input)

void configure(Codec& c, const std::string& base, const CodecOptions& o,
               const std::string& spec) {
  codecs::mx_configure(c, base, o, spec);
  c.fp8_format = base == "mxfp8" ? 0 : 1;
}

const char* kind_name(const Codec& c) { return c.fp8_format == 0 ? "mxfp8" : "mxfp8_e5m2"; }

std::string spec_name(const Codec& c) { return kind_name(c); }

int64_t wire_bytes(const Codec&, int64_t n) { return codecs::mx_wire_bytes(n, n); }

// Codes of the nb blocks of 32 at x under the E8M0 codes c[0, nb) (L = 32), or of one
// shorter block (nb = 1, L its length): group_quantize<F>(x, s) of each element. Elements
// are coded as finite, by a multiply with the inverse scale (mx_inv_scale: the same bits as
// the division), in a loop GCC vectorizes; a batch with a non-finite element is coded again
// by group_quantize itself.
template <class F>
void code_blocks(const float* x, int64_t nb, int64_t len, const uint32_t* c, uint8_t* q) {
  alignas(32) int32_t k[kBatch * kMxBlock];
  float inv[kBatch];
  for (int64_t j = 0; j < nb; ++j) inv[j] = codecs::mx_inv_scale(c[j]);
  int32_t special = 0;
  for (int64_t j = 0; j < nb; ++j) {
    for (int64_t i = 0; i < len; ++i) {
      const float t = codecs::mul_rn(x[j * len + i], inv[j]);
      k[j * len + i] = codecs::fp8_code<F, true>(t);
      special |= static_cast<int32_t>(codecs::f32_bits(t) & codecs::kF32AbsMask) >=
                 static_cast<int32_t>(codecs::kF32InfBits);
    }
  }
  if (special != 0) {
    for (int64_t j = 0; j < nb; ++j)
      for (int64_t i = 0; i < len; ++i)
        k[j * len + i] = codecs::group_quantize_code<F>(x[j * len + i], codecs::mx_scale(c[j]));
  }
  cpu::pack_codes<false>(k, nb * len, q);
}

template <class F>
void encode_run(const float* x, int64_t n, uint8_t* dst) {
  uint8_t* scales = dst + n;
  const int64_t full = n / kMxBlock;
  int32_t amax[kBatch];
  uint32_t code[kBatch];
  for (int64_t k0 = 0; k0 < full; k0 += kBatch) {
    const int64_t nb = std::min(kBatch, full - k0);
    const float* v = x + k0 * kMxBlock;
    cpu::mx_block_maxima(v, nb, amax);
    for (int64_t j = 0; j < nb; ++j) {
      code[j] = codecs::mx_scale_code(amax[j], codecs::fp8_emax<F>());
      scales[k0 + j] = static_cast<uint8_t>(code[j]);
    }
    code_blocks<F>(v, nb, kMxBlock, code, dst + k0 * kMxBlock);
  }
  const int64_t off = full * kMxBlock;
  if (off < n) {
    code[0] = codecs::mx_scale_code(cpu::finite_abs_max_host(x + off, n - off),
                                    codecs::fp8_emax<F>());
    scales[full] = static_cast<uint8_t>(code[0]);
    code_blocks<F>(x + off, 1, n - off, code, dst + off);
  }
  for (int64_t i = n + (n + kMxBlock - 1) / kMxBlock; i < codecs::mx_wire_bytes(n, n); ++i)
    dst[i] = 0;
}

template <class F>
void decode_run(const uint8_t* src, int64_t n, float* out, bool accumulate) {
  constexpr bool kE5M2 = std::is_same_v<F, Fp8E5M2>;
  const float* lut = codecs::fp8_lut<F>();
  for (int64_t k = 0, off = 0; off < n; ++k, off += kMxBlock) {
    const int64_t len = std::min<int64_t>(kMxBlock, n - off);
    const float s = codecs::mx_scale(src[n + k]);
#ifdef CC_HAVE_SIMD_AVX2
    if (cpu_use_avx2()) {
      cpu::fp8_decode_avx2(kE5M2, lut, src + off, len, s, out + off, accumulate);
      continue;
    }
#endif
    cpu::fp8_decode_sse2(kE5M2, lut, src + off, len, s, out + off, accumulate);
  }
}

void encode_body(const float* x, int64_t n, const Codec& c, const EncodeContext&, uint8_t* dst,
                 const cpu::NextPiece&) {
  if (c.fp8_format == 0) return encode_run<Fp8E4M3>(x, n, dst);
  encode_run<Fp8E5M2>(x, n, dst);
}

void decode_body(const uint8_t* src, int64_t n, const Codec& c, float* out, bool accumulate) {
  if (c.fp8_format == 0) return decode_run<Fp8E4M3>(src, n, out, accumulate);
  decode_run<Fp8E5M2>(src, n, out, accumulate);
}

CC_CPU_RUN_FAMILY_HOST_OPS(kHostOps)

// mxfp8.h: an element errs by at most 1/8 of its block's largest |x| (rounding and
// saturation), plus half an element subnormal under the smallest scale and an fp32
// subnormal rounding of the decode.
ErrorModel error_model(const Codec& c) {
  ErrorModel m;
  m.u = 1.0 / 8;
  m.floor = std::ldexp(1.0, -127) * std::ldexp(1.0, c.fp8_format == 0 ? -10 : -17) +
            std::ldexp(1.0, -149);
  return m;
}

}  // namespace

extern const CodecFamily kMxfp8Family = {
    "mxfp8", {"mxfp8", "mxfp8_e5m2", nullptr}, configure, spec_name, kind_name, wire_bytes,
    nullptr, kHostOps,
    "mxfp8, mxfp8_e5m2 (OCP MX: E4M3 or E5M2 elements, an E8M0 scale per 32)",
    error_model};

}  // namespace ccompress
