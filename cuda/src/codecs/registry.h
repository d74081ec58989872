// Codec families beyond the built-in raw casts and per-group FP8. Each family lives in its own
// files — cuda/src/codecs/<family>.h (the CC_HOST_DEVICE math), cuda/src/cpu/<family>_cpu.cc
// (host loops, and the registration below), cuda/src/kernels/<family>_kernels.cu — and
// registers itself at load time, so adding one touches no shared switch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ccompress/codec.h"
#include "ccompress/kernel_backend.h"

namespace ccompress {

/// Options of a spec string "base[:opt]*"; each field is set only when given.
struct CodecOptions {
  int32_t group = 0;        ///< ":gN"
  int32_t rotation = 0;     ///< ":hN"
  int32_t scale_bits = 0;   ///< ":s8", ":s16", ":s32"
  bool random_signs = false;  ///< ":rs"
  bool stochastic = false;    ///< ":sr"
};

struct CodecFamily {
  const char* base;  ///< spec base name ("taco"); a family may register several bases
  CodecKind kind;
  /// Fills a Codec (kind set, unbound false) from the options: defaults, then validation
  /// (throw InvalidArgument naming the spec and what is allowed).
  void (*configure)(Codec& c, const CodecOptions& o, const std::string& spec);
  /// Canonical spec string; parse(name(c)) == c.
  std::string (*name)(const Codec& c);
  /// Exact encoded size of n elements (of one piece, when the family sets Codec::run_block;
  /// a multiple of 4 bytes then, so that pieces concatenate aligned).
  int64_t (*wire_bytes)(const Codec& c, int64_t n);
  /// Host encode of one run of n fp32 values (already divided by the divisor).
  void (*encode)(const float* x, int64_t n, const Codec& c, const EncodeContext& ctx,
                 uint8_t* dst);
  /// Host decode of one run into n fp32 values.
  void (*decode)(const uint8_t* src, int64_t n, const Codec& c, float* out);
  /// One line for the list of valid specs, e.g. "taco[:gG] (G a power of two, 32..512)".
  const char* help;
};

/// Adds a family; returns true so it can initialise a static. Throws on a duplicate base.
bool register_codec_family(const CodecFamily& family);
/// The family of a spec base name, or nullptr.
const CodecFamily* find_codec_family(const std::string& base);
/// The family that owns a kind (the first registered for it), or nullptr.
const CodecFamily* find_codec_family(CodecKind kind);
/// The same, throwing Unsupported when no family of that kind is registered.
const CodecFamily& require_codec_family(CodecKind kind);
/// Help lines of every registered family.
std::vector<std::string> codec_family_help();
/// The base name of each registered family, in registration order.
std::vector<std::string> codec_family_bases();
/// The canonical spec of each registered base with default options ("taco:g128"), in order.
std::vector<std::string> codec_family_examples();

/// Calls fn(first, length) for the pieces of a run of n elements (see Codec::run_block).
template <class Fn>
void for_each_piece(const Codec& c, int64_t n, Fn fn) {
  const int64_t piece = c.run_block > 0 ? c.run_block : (n > 0 ? n : 1);
  for (int64_t off = 0; off < n; off += piece) fn(off, n - off < piece ? n - off : piece);
}

/// Wire bytes of a run of a registered family: the sum over its pieces.
int64_t family_wire_bytes(const CodecFamily& f, const Codec& c, int64_t n);

}  // namespace ccompress
