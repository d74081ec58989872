// nvfp4 / hnvfp4: NVIDIA's NVFP4 recipe (E2M1 values, 16-element blocks with E4M3 block
// scales, one fp32 scale per encoded run), optionally after a normalised Walsh-Hadamard
// rotation. A run is a piece of at most 65536 elements (Codec::run_block) of a collective's
// slice or of a tensor given to Codec.encode, counted from the chunk (or tensor) start, so the
// run scales are the same whatever the slice size.
//
// Specs: `nvfp4[:g16][:sr]` and `hnvfp4[:g16][:hH][:rs][:sr]` (H a power of two in 2..256,
// default 16). Codec: kind Nvfp4, group 16, scale_bits 8, rotation 0 (nvfp4) or H (hnvfp4).
//
// Encode of a run of n elements (every step one IEEE fp32 rounding, the same on host and GPU):
//   y = x for nvfp4. hnvfp4 rotates each block of p elements (rotation_blocks.h: blocks of H
//     from the run start, the tail n mod H cut into its powers of two, so nothing is padded):
//     y = WHT(sign * x) / sqrt(p), sign = random_sign(j) of hadamard.h with `:rs`, else 1.
//   s = max(A / 2688, FLT_MIN), A the largest finite |y| of the run (2688 = 6 * 448: the run's
//     largest value gets block scale 448 and value 6).
//   Per block of 16 from the run start (the last one shorter), a its largest finite |y|:
//     c = E4M3((a / 6) / s), round to nearest even, satfinite (as NVIDIA does; `:sr` rounds
//         up instead so that nothing clips and the rounding stays unbiased)
//     d = float(c) * s;   q = E2M1(y / d) round to nearest even, saturating at +-6 (d = 0:
//         q = 0). `:sr`: up with probability (|v| - lo) / (hi - lo) between the neighbouring
//         grid values, noise sr_uniform(seed, step, rank, index + j) for the run's j-th element.
//   Why round-to-nearest block scales may clip, and why that is harmless: c can be 2^-4 below
//   a / 6 / s, so the block's largest |y / d| can reach 6 * (1 + 2^-4) = 6.375, which saturates
//   to 6: an error of at most 0.375 d, below the half step (1 d) at the top of the grid.
// Decode: y' = value(q) * d; hnvfp4 then x' = sign * WHT(y') / sqrt(p) per rotation block.
//
// Wire: [ceil(n/2) bytes: element 2k in the low nibble of byte k, 2k+1 in the high one
//   (sign bit 3, exponent bits 2-1, mantissa bit 0) | ceil(n/16) E4M3 block scale bytes |
//   zero pad to 4 | fp32 s]; wire_bytes(n) = n ? align4(ceil(n/2) + ceil(n/16)) + 4 : 0,
//   4.5 bits per element plus 32 per run. hnvfp4 has the same size (no padding).
//
// Bound per element of y (round to nearest), with d, a, s as above:
//   |y' - y| <= (max(d, |y|) / 4 + s / 128) * (1 + 2^-20), and also (as d <= (a/6)(1 + 2^-4)
//   (1 + 2^-22) + s 2^-10, a subnormal E4M3 scale being exact to 2^-10)
//   |y' - y| <= (17/96 * a + s / 128) * (1 + 2^-20).
//   `:sr` (errors up to a whole grid step; c rounded up, d <= (a/6)(1 + 2^-3) + s 2^-9):
//   |y' - y| <= (max(d, |y|) / 2 + s / 128) * (1 + 2^-20), and <= (3/8 * a + s / 128) *
//   (1 + 2^-20); E[y'] = y up to fp32 rounding. hnvfp4, element i of a rotation block b of p elements:
//   |x'_i - x_i| <= p^-1/2 * sum_{j in b} bound(y_j)
//                   + 2^-24 (sqrt(p) + 1)(log2(p) + 2) (||x_b||_2 + ||x'_b||_2)   (rotations).
// Non-finite policy: NaN and +-Inf are left out of A and a (they never spoil a scale) and coded
//   as nibble 0x8 (E2M1's negative zero; zeros are always written +0), which decodes to NaN:
//   nvfp4 keeps NaN (and turns +-Inf into NaN, like fp8_e4m3) in that element only. In
//   hnvfp4 a non-finite element makes every coefficient of its rotation block non-finite, so
//   that block (p elements, and no other) decodes to NaN; so does a finite block whose
//   rotated sum overflows fp32 (|x| ~ FLT_MAX / p).
#include <string>

#include "ccompress/error.h"
#include "codecs/hadamard.h"
#include "codecs/nvfp4.h"
#include "codecs/registry.h"
#include "cpu/fourbit_cpu.h"
#include "cpu/isa_dispatch.h"

namespace ccompress {
namespace {

constexpr int32_t kMaxRotation = 256;

const char* kNvfp4Help = "nvfp4[:sr] (E2M1 in 16-element blocks, E4M3 block scales)";
const char* kHnvfp4Help =
    "hnvfp4[:g16][:hH][:rs][:sr] (NVFP4 after a Hadamard rotation; H a power of two in "
    "2..256, default 16)";

void configure(Codec& c, const CodecOptions& o, const std::string& spec) {
  bool rotated = spec.compare(0, 6, "hnvfp4") == 0;
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

std::string name(const Codec& c) {
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
                 uint8_t* dst) {
  cpu4::encode_run<codecs::E2M1>(x, n, c, ctx, dst);
}

void decode_body(const uint8_t* src, int64_t n, const Codec& c, float* out) {
  cpu4::decode_run<codecs::E2M1>(src, n, c, out);
}

CC_CPU_DISPATCH_CODEC_FAMILY()

[[maybe_unused]] const bool kRegistered =
    register_codec_family({"nvfp4", CodecKind::Nvfp4, configure, name, wire_bytes, encode,
                           decode, kNvfp4Help}) &&
    register_codec_family({"hnvfp4", CodecKind::Nvfp4, configure, name, wire_bytes, encode,
                           decode, kHnvfp4Help});

}  // namespace
}  // namespace ccompress
