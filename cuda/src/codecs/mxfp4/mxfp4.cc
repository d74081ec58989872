// The mxfp4 family (format: mxfp4.h): spec options, name, size, host loops and the registry
// entry. The element steps are the 4-bit codecs' (fourbit.h, nvfp4.h's E2M1 grid) and the
// scale is mxfp8.h's E8M0.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "ccompress/error.h"
#include "codecs/fourbit/fourbit.h"
#include "codecs/fourbit/fourbit_cpu.h"
#include "codecs/mxfp4/mxfp4.h"
#include "codecs/mxfp4/mxfp4_avx2.h"
#include "codecs/mxfp8/mx_avx2.h"
#include "codecs/mxfp8/mx_options.h"
#include "codecs/registry.h"
#include "cpu/isa_dispatch.h"
#include "cpu/run_family.h"
#include "cpu/simd_avx2.h"

namespace ccompress {
namespace {

using codecs::E2M1;
using codecs::kMxBlock;

constexpr int64_t kBatch = 32;  // blocks coded in one batch (4 KiB of input)

const char* kind_name(const Codec&) { return "mxfp4"; }

std::string spec_name(const Codec&) { return "mxfp4"; }

int64_t wire_bytes(const Codec&, int64_t n) {
  return codecs::mx_wire_bytes(codecs::mxfp4_scales_offset(n), n);
}

// The E8M0 code of a block with largest finite |x| (bits) @p amax into *scale; returns the
// inverse of its scale (mx_inv_scale).
float block_scale(int32_t amax, uint8_t* scale) {
  const uint32_t code = codecs::mx_scale_code(amax, codecs::kE2M1Emax);
  *scale = static_cast<uint8_t>(code);
  return codecs::mx_inv_scale(code);
}

// Codes of the nb whole blocks at x under inverse scales inv, two nibbles per byte into q:
// AVX2's coder where the CPU has it, else loops GCC vectorizes.
void code_blocks(const float* x, int64_t nb, const float* inv, uint8_t* q) {
#ifdef CC_HAVE_MXFP4_AVX2
  if (cpu_use_avx2()) return cpu4::mxfp4_code_blocks_avx2(x, nb, inv, q);
#endif
  uint8_t nib[kBatch * kMxBlock];
  for (int64_t j = 0; j < nb; ++j)
    for (int i = 0; i < kMxBlock; ++i)
      nib[j * kMxBlock + i] = codecs::mxfp4_quantize(x[j * kMxBlock + i], inv[j]);
  cpu4::pack_nibbles(nib, nb * kMxBlock, q);
}

void encode_body(const float* x, int64_t n, const Codec&, const EncodeContext&, uint8_t* dst,
                 const cpu::NextPiece&) {
  uint8_t* scales = dst + codecs::mxfp4_scales_offset(n);
  const int64_t full = n / kMxBlock;
  int32_t amax[kBatch];
  float inv[kBatch];
  for (int64_t k0 = 0; k0 < full; k0 += kBatch) {
    const int64_t nb = std::min(kBatch, full - k0);
    const float* v = x + k0 * kMxBlock;
    cpu::mx_block_maxima(v, nb, amax);
    for (int64_t j = 0; j < nb; ++j) inv[j] = block_scale(amax[j], scales + k0 + j);
    code_blocks(v, nb, inv, dst + k0 * (kMxBlock / 2));
  }
  const int64_t off = full * kMxBlock, len = n - off;
  if (len > 0) {
    inv[0] = block_scale(cpu::finite_abs_max_host(x + off, len), scales + full);
    uint8_t nib[kMxBlock];
    for (int64_t i = 0; i < len; ++i) nib[i] = codecs::mxfp4_quantize(x[off + i], inv[0]);
    cpu4::pack_nibbles(nib, len, dst + off / 2);  // an odd run's last high nibble is 0
  }
  for (int64_t i = scales - dst + (n + kMxBlock - 1) / kMxBlock; i < wire_bytes({}, n); ++i)
    dst[i] = 0;
}

// The two values of each code byte (low nibble first), tabulated from E2M1::dequantize.
struct PairTable {
  float v[256][2];
  PairTable() {
    for (int b = 0; b < 256; ++b)
      for (int h = 0; h < 2; ++h)
        v[b][h] = E2M1::dequantize(static_cast<uint8_t>((b >> (4 * h)) & 15));
  }
};

const PairTable& pair_table() {
  static const PairTable t;
  return t;
}

// out[i] (+)= value(q_i) * d for the len elements of a block: the values by byte from the
// pair table, then one loop of multiplies (and adds) that GCC vectorizes.
inline void decode_block(const uint8_t* q, int64_t len, float d, float* out, bool accumulate) {
  const PairTable& t = pair_table();
  alignas(32) float v[kMxBlock];
  for (int64_t i = 0; i < (len + 1) / 2; ++i) std::memcpy(v + 2 * i, t.v[q[i]], 8);
  if (len == kMxBlock) {
    for (int i = 0; i < kMxBlock; ++i) {
      const float y = codecs::mul_rn(v[i], d);
      out[i] = accumulate ? codecs::add_rn(out[i], y) : y;
    }
    return;
  }
  for (int64_t i = 0; i < len; ++i) {
    const float y = codecs::mul_rn(v[i], d);
    out[i] = accumulate ? codecs::add_rn(out[i], y) : y;
  }
}

void decode_body(const uint8_t* src, int64_t n, const Codec&, float* out, bool accumulate) {
  const uint8_t* scales = src + codecs::mxfp4_scales_offset(n);
  for (int64_t k = 0, off = 0; off < n; ++k, off += kMxBlock)
    decode_block(src + off / 2, std::min<int64_t>(kMxBlock, n - off),
                 codecs::mx_scale(scales[k]), out + off, accumulate);
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
    "mxfp4", {"mxfp4", nullptr}, codecs::mx_configure, spec_name, kind_name, wire_bytes, nullptr,
    kHostOps, "mxfp4 (OCP MX: E2M1 elements, an E8M0 scale per 32)", error_model};

}  // namespace ccompress
