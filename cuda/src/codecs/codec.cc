#include "ccompress/codec.h"

#include <cctype>

#include "ccompress/error.h"

namespace ccompress {
namespace {

constexpr int32_t kDefaultGroup = 128;
constexpr int32_t kMinGroup = 16;
constexpr int32_t kMaxGroup = 1024;

const char* kValidSpecs =
    "valid codec specs: none, bf16, fp16, fp8_e4m3[:gG], fp8_e5m2[:gG] "
    "(G an integer in 16..1024, default 128; e.g. fp8_e4m3:g128)";

// Parses the "gG" suffix; returns 0 when it is not a well-formed group in range.
int32_t parse_group(const std::string& s) {
  if (s.size() < 2 || s.size() > 5 || s[0] != 'g' || s[1] == '0') return 0;
  int32_t g = 0;
  for (size_t i = 1; i < s.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(s[i]))) return 0;
    g = g * 10 + (s[i] - '0');
  }
  return (g >= kMinGroup && g <= kMaxGroup) ? g : 0;
}

}  // namespace

Codec Codec::parse(const std::string& spec) {
  size_t colon = spec.find(':');
  std::string base = spec.substr(0, colon);
  Codec c;
  if (base == "fp8_e4m3" || base == "fp8_e5m2") {
    c.kind = base == "fp8_e4m3" ? CodecKind::Fp8E4M3 : CodecKind::Fp8E5M2;
    c.unbound = false;
    c.group = kDefaultGroup;
    if (colon != std::string::npos) {
      c.group = parse_group(spec.substr(colon + 1));
      CC_CHECK(c.group != 0, "bad group in codec spec '" << spec << "'; " << kValidSpecs);
    }
    return c;
  }
  CC_CHECK(colon == std::string::npos,
           "codec '" << base << "' takes no options (got '" << spec << "'); " << kValidSpecs);
  if (base == "none") return c;
  CC_CHECK(base == "bf16" || base == "fp16",
           "unknown codec spec '" << spec << "'; " << kValidSpecs);
  c.unbound = false;
  c.raw_dtype = base == "bf16" ? DType::BFloat16 : DType::Float16;
  return c;
}

std::string Codec::name() const {
  switch (kind) {
    case CodecKind::Fp8E4M3: return "fp8_e4m3:g" + std::to_string(group);
    case CodecKind::Fp8E5M2: return "fp8_e5m2:g" + std::to_string(group);
    case CodecKind::Raw: break;
  }
  // `none` bound to bfloat16 / float16 is the same wire format as bf16 / fp16, so it takes
  // that name; bound to float32 it stays `none`.
  if (unbound || raw_dtype == DType::Float32) return "none";
  return raw_dtype == DType::BFloat16 ? "bf16" : "fp16";
}

Codec Codec::bind(DType input) const {
  Codec c = *this;
  if (c.unbound) {
    c.unbound = false;
    c.raw_dtype = input;
  }
  return c;
}

int64_t Codec::wire_bytes(int64_t n) const {
  CC_CHECK(!unbound, "codec 'none' is unbound: bind it to a dtype first (Codec.bind(dtype))");
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (kind == CodecKind::Raw) return n * static_cast<int64_t>(dtype_size(raw_dtype));
  return align_up(n, 4) + 4 * ceil_div(n, group);
}

bool Codec::lossy(DType input) const {
  if (kind != CodecKind::Raw) return true;
  if (unbound || raw_dtype == input) return false;
  // Widening bf16/fp16 to fp32 is exact; every other pair of distinct dtypes loses bits.
  return raw_dtype != DType::Float32;
}

uint32_t Codec::id() const {
  // Injective over valid codecs: kind (2 bits), bound flag, wire dtype, group (<= 1024).
  uint32_t dtype_bits =
      (unbound || kind != CodecKind::Raw) ? 0u : static_cast<uint32_t>(raw_dtype);
  return static_cast<uint32_t>(kind) | (unbound ? 1u << 4 : 0u) | (dtype_bits << 8) |
         (static_cast<uint32_t>(group) << 16);
}

}  // namespace ccompress
