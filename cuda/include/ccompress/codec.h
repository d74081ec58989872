/// @file codec.h
/// @brief Stateless wire formats ("codecs"), named by spec strings.
///
/// Every codec encodes a run of n elements into exactly wire_bytes(n) bytes laid out as
/// [payload | padding to 4 bytes | scales]. Slices of a collective are encoded independently,
/// and every slice starts a new scale group, so the same elements always meet the same
/// groups whatever the slice size (slice sizes are multiples of the group size).
///
/// Formats: each family documents its format at its type, in its folder
/// cuda/src/codecs/<family>/ (raw/raw.h: none, bf16, fp16; fp8/group_codec.h: fp8_e4m3:gG,
/// fp8_e5m2:gG; taco/taco.h; hint8/hint8.h; nvfp4/nvfp4.cc; hint4/hint4.cc; mxfp8/mxfp8.h:
/// mxfp8, mxfp8_e5m2; mxfp4/mxfp4.h): bit layout,
/// rounding, scales, exact size, error bound and NaN policy.
///
/// Non-finite policy, every codec: NaN stays NaN in its own element, and no NaN or Inf ever
/// spoils the scale of its neighbours (each family says where +-Inf goes).
///
/// Untrusted bytes: decoding reads exactly wire_bytes(n) bytes and writes n values whatever
/// they hold; collectives check a message's header and size before decoding it
/// (collectives/message_header.h). Content is not checked: garbage codes or scales (NaN,
/// Inf, huge, subnormal) decode to wrong values, possibly non-finite, never out of bounds.
#pragma once

#include <cstdint>
#include <string>

#include "ccompress/common.h"

namespace ccompress {

/// A codec's family: its position in the codec registry (cuda/src/codecs/families.cc), where
/// everything that depends on the family is dispatched. The raw casts come first, so a
/// default Codec is the unbound `none`. Not on the wire (Codec::id is).
enum class CodecKind : uint8_t {
  Raw = 0,  ///< a plain dtype on the wire: none / bf16 / fp16
};

/// A parsed codec spec. Trivially copyable so it can be passed to CUDA kernels by value.
struct CC_API Codec {
  CodecKind kind = CodecKind::Raw;
  /// Raw codecs: the wire dtype. Meaningless while `unbound` is set.
  DType raw_dtype = DType::Float32;
  /// `none` before bind(): the wire dtype is the input dtype, chosen at call time.
  bool unbound = true;
  /// Elements per scale group for scaled codecs; 0 for raw codecs.
  int32_t group = 0;
  /// Walsh-Hadamard block size applied before quantizing (0: no rotation).
  int32_t rotation = 0;
  /// FP8 element format of the FP8 families (fp8_*, taco*): 0 = E4M3, 1 = E5M2.
  uint8_t fp8_format = 0;
  /// Bits per stored group scale: 32 (fp32), 16 (fp16) or 8 (8-bit under one fp32 scale
  /// per encoded run: the two-level scale).
  uint8_t scale_bits = 32;
  /// Random +-1 signs (from a fixed seed) applied before the rotation.
  bool random_signs = false;
  /// Stochastic rounding (":sr"): unbiased, deterministic from (seed, step, rank, index).
  bool stochastic = false;
  /// Families with one scale per encoded run (nvfp4, hint4) see a run as pieces of this many
  /// elements, each encoded on its own and concatenated; 0: the run is one piece. Set by the
  /// family, never by the spec, so the scales do not depend on how a collective slices.
  int32_t run_block = 0;

  /// Parses a spec string such as "none", "bf16", "fp8_e4m3:g128". Throws InvalidArgument
  /// with the list of valid specs when the string is not one of them.
  static Codec parse(const std::string& spec);
  /// The canonical spec string ("fp8_e4m3:g128", "none", ...). A bound `none` is the same
  /// codec as `bf16` / `fp16` for those dtypes and takes that name; for float32 it stays "none".
  std::string name() const;
  /// This codec with `none` resolved to @p input dtype (other codecs unchanged).
  Codec bind(DType input) const;
  /// Exact encoded size in bytes of @p n elements. Requires a bound codec.
  int64_t wire_bytes(int64_t n) const;
  /// Whether decode(encode(x)) can differ from x for inputs of dtype @p input.
  bool lossy(DType input) const;
  /// Slice sizes must be a multiple of this (the scale group or rotation block, or 1), so
  /// the same elements meet the same groups and rotation blocks whatever the slice size.
  int64_t align() const {
    int32_t a = group > rotation ? group : rotation;
    a = a > run_block ? a : run_block;
    return a > 0 ? a : 1;
  }
  /// A 32-bit id that is equal on two ranks exactly when the codecs are equal.
  uint32_t id() const;
};

/// The largest element count any codec or collective accepts (2^48).
constexpr int64_t kMaxElements = int64_t(1) << 48;

inline int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
inline int64_t ceil_div(int64_t x, int64_t a) { return (x + a - 1) / a; }

}  // namespace ccompress
