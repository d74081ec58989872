/// @file codec.h
/// @brief Stateless wire formats ("codecs"), named by spec strings.
///
/// Every codec encodes a run of n elements into exactly wire_bytes(n) bytes laid out as
/// [payload | padding to 4 bytes | scales]. Slices of a collective are encoded independently,
/// and every slice starts a new scale group, so the same elements always meet the same
/// groups whatever the slice size (slice sizes are multiples of the group size).
///
/// Formats:
///  - `none`: the input dtype itself (bound at call time). Exact for float32.
///  - `bf16`, `fp16`: a round-to-nearest-even cast; no scale. fp16 overflows to +-Inf
///    beyond +-65504 exactly like a cast. Raw codecs keep NaN and +-Inf as they are.
///  - `fp8_e4m3:gG`, `fp8_e5m2:gG` (G in 16..1024, default 128): per group of G elements an
///    fp32 scale s = max(amax / FP8_MAX, FLT_MIN) with amax the largest finite |x| of the
///    group; payload q = fp8(x / s) with saturating round-to-nearest-even (the hardware's
///    `satfinite` conversion); decode x' = float(q) * s. x / s is an IEEE fp32 division,
///    float(q) * s one fp32 multiply, identical on host and device.
///    Bound per element (finite x, taken after the divisor), with m mantissa bits, emin the
///    min normal exponent (E4M3: m = 3, emin = -6; E5M2: m = 2, emin = -14) and
///    H = FP8_MAX * u the half-spacing at the top of the format (u = 1/28 E4M3, 1/14 E5M2):
///      |x' - x| <= min(s * H, |x| * 2^-(m+1) + s * 2^(emin - m - 1)) * (1 + 2^-16).
///    While the scale is not floored (amax >= FP8_MAX * FLT_MIN), s * H = amax * u to one
///    fp32 rounding; the factor (1 + 2^-16) covers the roundings of s, x / s and q * s.
///    (amax * u alone does not bound a floored group: there |x'-x| can reach ~amax / 17.)
///    wire_bytes(n) = align4(n) + 4 * ceil(n / G); the padding bytes are zero.
///    `:sr` (stochastic rounding): x / s goes to one of its two neighbouring FP8 values, the
///    upper with probability proportional to the distance from the lower (unbiased; noise
///    sr_uniform(seed, step, rank, index) of element index); the bound doubles (a whole step).
///
/// Non-finite policy: NaN stays NaN and +-Inf stays +-Inf in its own element (E4M3 has no
/// Inf, so there +-Inf becomes NaN); the scale is computed over the finite elements only,
/// so the rest of the group is encoded as if the non-finite element were absent. FP8 NaN is
/// written as 0x7F, E5M2 Inf as 0x7C / 0xFC.
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

enum class CodecKind : uint8_t {
  Raw = 0,      ///< a plain dtype on the wire: none / bf16 / fp16
  Fp8E4M3 = 1,  ///< FP8 E4M3 (max 448), per-group fp32 scale
  Fp8E5M2 = 2,  ///< FP8 E5M2 (max 57344), per-group fp32 scale
  // Families registered by their own files (cuda/src/codecs/registry.h); each documents its
  // format at its registration.
  Taco = 3,     ///< RMS pre-scale, Walsh-Hadamard, absmax scale, FP8 (`taco`, `taco_e5m2`)
  HInt8 = 4,    ///< Hadamard rotation, symmetric int8 (`hint8` and variants)
  Nvfp4 = 5,    ///< E2M1 in 16-element blocks with E4M3 block scales (`nvfp4`, `hnvfp4`)
  Int4 = 6,     ///< symmetric int4 after a Hadamard rotation (`hint4`)
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
  /// FP8 element format where a family offers both: 0 = E4M3, 1 = E5M2.
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
