// The codec registry: one entry per codec family, carrying everything the spec parser, the
// CPU backend and the CUDA backend dispatch on. A family lives in its own folder,
// cuda/src/codecs/<family>/ — the format header (CC_HOST_DEVICE math, documented at the
// type), <family>.cc (spec options, canonical name, size, host loops and the CodecFamily
// entry) and <family>_kernels.cu (the CUDA launchers, attached to the entry when the CUDA
// module loads) — and is listed once in codecs/families.cc. Nothing outside this registry
// switches over codec kinds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ccompress/codec.h"
#include "ccompress/kernel_backend.h"

// The CUDA runtime's own definition (driver_types.h); repeating an identical typedef is legal.
typedef struct CUstream_st* cudaStream_t;

namespace ccompress {

namespace cuda {
struct DecodeOut;  // kernels/decode_out.h
}

/// Options of a spec string "base[:opt]*"; each field is set only when given.
struct CodecOptions {
  int32_t group = 0;        ///< ":gN"
  int32_t rotation = 0;     ///< ":hN"
  int32_t scale_bits = 0;   ///< ":s8", ":s16", ":s32"
  bool random_signs = false;  ///< ":rs"
  bool stochastic = false;    ///< ":sr"
  std::string given;          ///< one letter per option given (g, h, s, R for rs, S for sr)
};

/// The host loops of a family: KernelBackend's codec calls on host memory (see
/// kernel_backend.h for each contract), already dispatched to the AVX2 or baseline copy
/// (cpu/isa_dispatch.h). Codecs reaching them are bound and of this family.
struct HostOps {
  void (*encode)(const void* src, DType src_dtype, int64_t n, const Codec& c, float divisor,
                 const EncodeContext& ctx, void* dst);
  void (*decode_accumulate)(const void* src, int64_t n, const Codec& c, float* acc,
                            bool assign);
  void (*decode)(const void* src, int64_t n, const Codec& c, void* out, DType out_dtype);
  void (*decode_reduce_encode)(const void* src, const void* x, DType x_dtype, int64_t n,
                               const Codec& c, float divisor, const EncodeContext& ctx,
                               void* dst);
};

/// The CUDA launchers of a family, asynchronous on @p stream (device pointers).
struct DeviceOps {
  /// dst <- encode(src / divisor); with @p wire_in (the fused ring hop, one call)
  /// dst <- encode((decode(wire_in) + float(src)) / divisor), dst possibly wire_in.
  void (*encode)(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                 const Codec& c, float divisor, const EncodeContext& ctx, void* dst,
                 cudaStream_t stream);
  /// The decode of src into @p o (fp32 accumulators, or a cast to a dtype).
  void (*decode)(const void* src, int64_t n, const Codec& c, const cuda::DecodeOut& o,
                 cudaStream_t stream);
};

/// What one quantization of the family may err by, for the per-element error bounds
/// (ccompress/bounds.py). Each family states these constants in its format header.
struct ErrorModel {
  /// Per coefficient (the element, or its Walsh-Hadamard coefficient for rotated codecs), at
  /// most u * M + v * R + floor, M the largest |coefficient| of its scale group and R that
  /// of its run piece (two-level scales). A plain cast (`cast`) errs by u * |x| + floor.
  /// Stochastic rounding is included.
  double u = 0;
  double v = 0;
  double floor = 0;
  /// A plain cast to the wire dtype (the raw family): no scale groups, no rotation.
  bool cast = false;
  /// Scale groups tile each rotation block, a block shorter than a group being one group
  /// (rotation_blocks.h; taco, hint8); otherwise groups of `group` run from the start of the
  /// run piece over the coefficients, across blocks (nvfp4, hint4).
  bool groups_tile_blocks = false;
};

struct CodecFamily {
  const char* name;      ///< the family and its folder ("fp8", "taco")
  const char* bases[4];  ///< the spec base names it parses (nullptr after the last)
  /// Fills a Codec (kind set, unbound false) from a base and its options: defaults, then
  /// validation (throw InvalidArgument naming the spec and what is allowed, in one line).
  void (*configure)(Codec& c, const std::string& base, const CodecOptions& o,
                    const std::string& spec);
  /// Canonical spec string; parse(spec_name(c)) == c.
  std::string (*spec_name)(const Codec& c);
  /// What Codec.kind reports in Python ("raw", "fp8_e4m3", "taco", ...).
  const char* (*kind_name)(const Codec& c);
  /// Exact encoded size of n elements (n already checked against kMaxElements).
  int64_t (*wire_bytes)(const Codec& c, int64_t n);
  /// Whether a round trip can change values of dtype @p input; nullptr: always lossy.
  bool (*lossy)(const Codec& c, DType input);
  HostOps host;
  /// One line for error messages, e.g. "taco[:gG][:sr] (G a power of two, 32..512)".
  const char* help;
  /// The error constants and layout of one quantization (a bound codec).
  ErrorModel (*error_model)(const Codec& c);
};

/// Every family, in the order of codecs/families.cc (the raw casts first: CodecKind 0).
const std::vector<const CodecFamily*>& codec_families();
/// The family of a spec base name, or nullptr.
const CodecFamily* find_codec_family(const std::string& base);
/// The family of a codec (its kind indexes codec_families()).
const CodecFamily& codec_family(const Codec& c);
/// The kind of a family's codecs: its position in codec_families().
CodecKind codec_kind_of(const CodecFamily& f);
/// The base name of each family, in order ("none", "bf16", ..., "hint4").
std::vector<std::string> codec_family_bases();
/// The canonical spec of each base with default options ("taco:g128"), in order.
std::vector<std::string> codec_family_examples();

/// Attaches the CUDA launchers of the family named @p family (the CUDA module's load-time
/// registration in each <family>_kernels.cu); returns true so it can initialise a static.
bool attach_device_ops(const char* family, const DeviceOps& ops);
/// The CUDA launchers of a codec's family; throws Unsupported when none are attached.
const DeviceOps& device_ops(const Codec& c);

/// The error model of a codec's family (codec_family(c).error_model(c)).
ErrorModel codec_error_model(const Codec& c);

/// Calls fn(first, length) for the pieces of a run of n elements (see Codec::run_block).
template <class Fn>
void for_each_piece(const Codec& c, int64_t n, Fn fn) {
  const int64_t piece = c.run_block > 0 ? c.run_block : (n > 0 ? n : 1);
  for (int64_t off = 0; off < n; off += piece) fn(off, n - off < piece ? n - off : piece);
}

/// Wire bytes of a run of pieces: the sum of piece_bytes over its pieces.
int64_t pieces_wire_bytes(int64_t (*piece_bytes)(const Codec&, int64_t), const Codec& c,
                          int64_t n);

}  // namespace ccompress
