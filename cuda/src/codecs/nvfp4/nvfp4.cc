// The nvfp4 / hnvfp4 family (format: nvfp4.h): spec options, name, size, host loops and the registry
// entry.
#include <cmath>
#include <string>

#include "ccompress/error.h"
#include "codecs/hadamard.h"
#include "codecs/nvfp4/nvfp4.h"
#include "codecs/registry.h"
#include "codecs/fourbit/fourbit_cpu.h"
#include "cpu/isa_dispatch.h"
#include "cpu/run_family.h"

namespace ccompress {
namespace {

constexpr int32_t kMaxRotation = 256;

constexpr const char* kNvfp4Help = "nvfp4[:sr] (E2M1 in 16-element blocks, E4M3 block scales)";
constexpr const char* kHnvfp4Help =
    "hnvfp4[:g16][:hH][:rs][:sr] (NVFP4 after a Hadamard rotation; H a power of two in "
    "2..256, default 16)";

void configure(Codec& c, const std::string& base, const CodecOptions& o,
               const std::string& spec) {
  const bool rotated = base == "hnvfp4";
  CC_CHECK(o.group == 0 || o.group == codecs::kNvfp4Block,
           "codec '" << spec << "': NVFP4 blocks are 16 elements (only :g16 is accepted); "
                     << (rotated ? kHnvfp4Help : kNvfp4Help));
  CC_CHECK(o.scale_bits == 0 || o.scale_bits == 8,
           "codec '" << spec << "': NVFP4 block scales are E4M3 (8 bits)");
  CC_CHECK(rotated || (o.rotation == 0 && !o.random_signs),
           "codec '" << spec << "': nvfp4 takes no rotation options; use " << kHnvfp4Help);
  c.group = codecs::kNvfp4Block;
  c.run_block = codecs::kFourbitRunBlock;
  c.scale_bits = 8;
  c.stochastic = o.stochastic;
  c.random_signs = o.random_signs;
  c.rotation = rotated ? (o.rotation ? o.rotation : codecs::kNvfp4Block) : 0;
  CC_CHECK(!rotated || (c.rotation >= 2 && c.rotation <= kMaxRotation &&
                        codecs::is_pow2(c.rotation)),
           "codec '" << spec << "': bad rotation size; " << kHnvfp4Help);
}

std::string spec_name(const Codec& c) {
  std::string s = c.rotation ? "hnvfp4:g16" : "nvfp4";
  if (c.rotation && c.rotation != codecs::kNvfp4Block) s += ":h" + std::to_string(c.rotation);
  if (c.random_signs) s += ":rs";
  if (c.stochastic) s += ":sr";
  return s;
}

int64_t wire_bytes(const Codec&, int64_t n) {
  return codecs::fourbit_layout(n, codecs::kNvfp4Block, 1).total;
}

void encode_body(const float* x, int64_t n, const Codec& c, const EncodeContext& ctx,
                 uint8_t* dst, const cpu::NextPiece& next) {
  cpu4::encode_run<codecs::E2M1>(x, n, c, ctx, dst, next);
}

void decode_body(const uint8_t* src, int64_t n, const Codec& c, float* out, bool accumulate) {
  cpu4::decode_run<codecs::E2M1>(src, n, c, out, accumulate);
}

CC_CPU_RUN_FAMILY_HOST_OPS(kHostOps)

const char* kind_name(const Codec&) { return "nvfp4"; }

int64_t run_wire_bytes(const Codec& c, int64_t n) { return pieces_wire_bytes(wire_bytes, c, n); }

// nvfp4.h: E2M1 under an E4M3 block scale errs by 17/96 of the block's largest coefficient,
// and the E4M3 scale's floor under the run's fp32 scale by 1/(2688 * 128) of the run piece's.
ErrorModel error_model(const Codec& c) {
  const double sr = c.stochastic ? 2.0 : 1.0;
  ErrorModel m;
  m.u = sr * 17 / 96 * (1 + std::ldexp(1.0, -20));
  m.v = sr / (2688 * 128);
  m.floor = sr * std::ldexp(1.0, -126);
  return m;
}

}  // namespace

extern const CodecFamily kNvfp4Family = {
    "nvfp4", {"nvfp4", "hnvfp4", nullptr}, configure, spec_name, kind_name, run_wire_bytes,
    nullptr, kHostOps,
    "nvfp4[:sr], hnvfp4[:g16][:hH][:rs][:sr] (E2M1 in 16-element blocks with E4M3 block "
    "scales, hnvfp4 after a Hadamard rotation of H, a power of two in 2..256, default 16)",
    error_model};

}  // namespace ccompress
