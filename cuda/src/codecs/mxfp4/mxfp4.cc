// The mxfp4 family (format: mxfp4.h): spec options, name, size, host loops and the registry
// entry. The element steps are the 4-bit codecs' (fourbit.h, nvfp4.h's E2M1 grid) and the
// scale is mxfp8.h's E8M0.
#include <algorithm>
#include <cmath>
#include <string>

#include "ccompress/error.h"
#include "codecs/fourbit/fourbit.h"
#include "codecs/fourbit/fourbit_cpu.h"
#include "codecs/mxfp4/mxfp4.h"
#include "codecs/registry.h"
#include "cpu/isa_dispatch.h"
#include "cpu/run_family.h"
#include "cpu/simd_avx2.h"

namespace ccompress {
namespace {

using codecs::E2M1;
using codecs::kMxBlock;

constexpr int64_t kBatch = 32;  // blocks coded in one batch (4 KiB of input)

void configure(Codec& c, const std::string& base, const CodecOptions& o,
               const std::string& spec) {
  CC_CHECK(o.given.find_first_not_of("g") == std::string::npos && (!o.group || o.group == kMxBlock),
           "codec '" << spec << "': " << base << " takes no options (MX blocks are 32 elements: "
                     << "only :g32 is accepted)");
  c.group = kMxBlock;
  c.scale_bits = 8;
}

const char* kind_name(const Codec&) { return "mxfp4"; }

std::string spec_name(const Codec&) { return "mxfp4"; }

int64_t wire_bytes(const Codec&, int64_t n) {
  return codecs::mx_wire_bytes(codecs::mxfp4_scales_offset(n), n);
}

// Nibbles of the blocks of x[0, len) (len a multiple of L, or one block shorter than L) under
// their steps d, packed two per byte into q. L known at compile time lets GCC vectorize the
// codes (as fourbit_cpu.h's encode_groups_rn).
template <int L>
void code_blocks(const float* x, int64_t blocks, const float* d, uint8_t* q) {
  uint8_t nib[kBatch * kMxBlock];
  for (int64_t j = 0; j < blocks; ++j)
    for (int i = 0; i < L; ++i)
      nib[j * L + i] = codecs::fourbit_quantize<E2M1>(x[j * L + i], d[j], false, 0.f);
  cpu4::pack_nibbles(nib, blocks * L, q);
}

// The scale byte of a block with largest finite |x| (bits) @p amax, and its step.
float block_scale(int32_t amax, uint8_t* scale) {
  const uint32_t code = codecs::mx_scale_code(amax, codecs::kE2M1Emax);
  *scale = static_cast<uint8_t>(code);
  return codecs::mx_scale(code);
}

void encode_body(const float* x, int64_t n, const Codec&, const EncodeContext&, uint8_t* dst,
                 const cpu::NextPiece&) {
  uint8_t* scales = dst + codecs::mxfp4_scales_offset(n);
  const int64_t full = n / kMxBlock;
  int32_t amax[kBatch];
  float d[kBatch];
  for (int64_t k0 = 0; k0 < full; k0 += kBatch) {
    const int64_t nb = std::min(kBatch, full - k0);
    const float* v = x + k0 * kMxBlock;
    cpu::group_maxima<kMxBlock, true>(v, nb, amax);
    for (int64_t j = 0; j < nb; ++j) d[j] = block_scale(amax[j], scales + k0 + j);
    code_blocks<kMxBlock>(v, nb, d, dst + k0 * (kMxBlock / 2));
  }
  const int64_t off = full * kMxBlock, len = n - off;
  if (len > 0) {
    d[0] = block_scale(cpu::finite_abs_max_host(x + off, len), scales + full);
    uint8_t nib[kMxBlock];
    for (int64_t i = 0; i < len; ++i)
      nib[i] = codecs::fourbit_quantize<E2M1>(x[off + i], d[0], false, 0.f);
    cpu4::pack_nibbles(nib, len, dst + off / 2);  // an odd run's last high nibble is 0
  }
  for (int64_t i = scales - dst + (n + kMxBlock - 1) / kMxBlock; i < wire_bytes({}, n); ++i)
    dst[i] = 0;
}

// E2M1::dequantize(nib) without a table: the magnitude bits eem moved to fp32's exponent's
// low bits and mantissa's top bit make the pattern of value * 2^-126 (e = 0: m * 2^-127, a
// subnormal), so one exact multiplication by 2^126 gives the value; kNibbleNaN is NaN. An
// integer select and two multiplies per value, which GCC vectorizes.
inline float e2m1_value(uint32_t nib) {
  const float mag = codecs::mul_rn(codecs::f32_from_bits((nib & 7u) << 22), 0x1p126f);
  const uint32_t bits = codecs::f32_bits(mag) | ((nib & 8u) << 28);
  return codecs::f32_from_bits(nib == codecs::kNibbleNaN ? 0x7FC00000u : bits);
}

void decode_body(const uint8_t* src, int64_t n, const Codec&, float* out, bool accumulate) {
  const uint8_t* scales = src + codecs::mxfp4_scales_offset(n);
  for (int64_t k = 0, off = 0; off < n; ++k, off += kMxBlock) {
    const int64_t len = std::min<int64_t>(kMxBlock, n - off);
    const float d = codecs::mx_scale(scales[k]);
    const uint8_t* q = src + off / 2;
    float* o = out + off;
    float v[kMxBlock];
    if (len == kMxBlock) {
      for (int i = 0; i < kMxBlock / 2; ++i) {
        v[2 * i] = codecs::mul_rn(e2m1_value(q[i] & 15u), d);
        v[2 * i + 1] = codecs::mul_rn(e2m1_value(q[i] >> 4), d);
      }
    } else {  // the run's last block, shorter: its bytes end where the scales start
      for (int64_t i = 0; i < len; ++i)
        v[i] = codecs::mul_rn(e2m1_value((q[i / 2] >> (4 * (i & 1))) & 15u), d);
    }
    for (int64_t i = 0; i < len; ++i) o[i] = accumulate ? codecs::add_rn(o[i], v[i]) : v[i];
  }
}

CC_CPU_RUN_FAMILY_HOST_OPS(kHostOps)

// mxfp4.h: an element errs by at most 1/4 of its block's largest |x| (rounding and
// saturation), plus half an E2M1 step under the smallest scale and an fp32 subnormal
// rounding of the decode.
ErrorModel error_model(const Codec&) {
  ErrorModel m;
  m.u = 1.0 / 4;
  m.floor = std::ldexp(1.0, -129) + std::ldexp(1.0, -149);
  return m;
}

}  // namespace

extern const CodecFamily kMxfp4Family = {
    "mxfp4", {"mxfp4", nullptr}, configure, spec_name, kind_name, wire_bytes, nullptr,
    kHostOps, "mxfp4 (OCP MX: E2M1 elements, an E8M0 scale per 32)", error_model};

}  // namespace ccompress
