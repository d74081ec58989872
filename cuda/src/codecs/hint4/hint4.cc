// The hint4 family (format: hint4.h): spec options, name, size, host loops and the registry
// entry.
#include <cmath>
#include <string>

#include "ccompress/error.h"
#include "codecs/hadamard.h"
#include "codecs/hint4/hint4.h"
#include "codecs/registry.h"
#include "codecs/fourbit/fourbit_cpu.h"
#include "cpu/isa_dispatch.h"
#include "cpu/run_family.h"

namespace ccompress {
namespace {

constexpr int32_t kDefaultGroup = 16;
constexpr int32_t kMinGroup = 16;
constexpr int32_t kMaxGroup = 256;
constexpr int32_t kMaxRotation = 256;

constexpr const char* kHelp =
    "hint4[:gG][:hH][:s8|:s16][:rs][:sr] (Hadamard rotation of H, symmetric int4 per G with "
    "an E4M3 or fp16 scale under an fp32 run scale; G, H powers of two, 16 <= G <= 256, "
    "2 <= H <= 256; defaults g16, H = G, s8)";

void configure(Codec& c, const std::string&, const CodecOptions& o, const std::string& spec) {
  c.group = o.group ? o.group : kDefaultGroup;
  CC_CHECK(codecs::is_pow2(c.group) && c.group >= kMinGroup && c.group <= kMaxGroup,
           "codec '" << spec << "': bad group; " << kHelp);
  c.rotation = o.rotation ? o.rotation : c.group;
  CC_CHECK(codecs::is_pow2(c.rotation) && c.rotation >= 2 && c.rotation <= kMaxRotation,
           "codec '" << spec << "': bad rotation size; " << kHelp);
  c.scale_bits = static_cast<uint8_t>(o.scale_bits ? o.scale_bits : 8);
  CC_CHECK(c.scale_bits == 8 || c.scale_bits == 16,
           "codec '" << spec << "': group scales are s8 (E4M3) or s16 (fp16); " << kHelp);
  c.random_signs = o.random_signs;
  c.stochastic = o.stochastic;
  c.run_block = codecs::kFourbitRunBlock;
}

std::string spec_name(const Codec& c) {
  std::string s = "hint4:g" + std::to_string(c.group);
  if (c.rotation != c.group) s += ":h" + std::to_string(c.rotation);
  if (c.scale_bits != 8) s += ":s" + std::to_string(c.scale_bits);
  if (c.random_signs) s += ":rs";
  if (c.stochastic) s += ":sr";
  return s;
}

int64_t wire_bytes(const Codec& c, int64_t n) {
  return codecs::fourbit_layout(n, c.group, c.scale_bits / 8).total;
}

void encode_body(const float* x, int64_t n, const Codec& c, const EncodeContext& ctx,
                 uint8_t* dst, const cpu::NextPiece& next) {
  cpu4::encode_run<codecs::Int4>(x, n, c, ctx, dst, next);
}

void decode_body(const uint8_t* src, int64_t n, const Codec& c, float* out, bool accumulate) {
  cpu4::decode_run<codecs::Int4>(src, n, c, out, accumulate);
}

CC_CPU_RUN_FAMILY_HOST_OPS(kHostOps)

const char* kind_name(const Codec&) { return "hint4"; }

int64_t run_wire_bytes(const Codec& c, int64_t n) { return pieces_wire_bytes(wire_bytes, c, n); }

// hint4.h: int4 codes (-7..7) under an E4M3 (s8) or fp16 (s16) group scale; the group
// scale's floor under the run's fp32 scale errs by 1/(7 * max * 128) of the run piece's
// largest coefficient.
ErrorModel error_model(const Codec& c) {
  const double sr = c.stochastic ? 2.0 : 1.0;
  double u = c.scale_bits == 8 ? 17.0 / 224 : (1 + std::ldexp(1.0, -11)) / 14;
  if (c.stochastic) u = c.scale_bits == 8 ? 9.0 / 56 : (1 + std::ldexp(1.0, -10)) / 7;
  const double scale_max = c.scale_bits == 8 ? 448 : 32768;
  ErrorModel m;
  m.u = u * (1 + std::ldexp(1.0, -20));
  m.v = sr / (7 * scale_max * 128);
  m.floor = sr * std::ldexp(1.0, -126);
  return m;
}

}  // namespace

extern const CodecFamily kHint4Family = {
    "hint4", {"hint4", nullptr}, configure, spec_name, kind_name, run_wire_bytes, nullptr,
    kHostOps, kHelp, error_model};

}  // namespace ccompress
