// hint4: a normalised Walsh-Hadamard rotation, then symmetric int4 (-7..7) per scale group
// under a two-level scale (the NVFP4 recipe with a uniform grid instead of E2M1), one run of n
// elements at a time (a pipelined slice of a collective, or a whole tensor for Codec.encode).
//
// Spec: `hint4[:gG][:hH][:s8|:s16][:rs][:sr]`, G a power of two in 16..256 (default 16), H a
// power of two in 2..256 (default G). Codec: kind Int4, group G, rotation H, scale_bits 8 / 16.
//
// Encode of a run of n elements (every step one IEEE fp32 rounding, the same on host and GPU):
//   y = WHT(sign * x) / sqrt(p) per rotation block of p elements (rotation_blocks.h: blocks of
//     H from the run start, the tail n mod H cut into its powers of two; nothing padded),
//     sign = random_sign(j) of hadamard.h with `:rs`, else 1.
//   s = max(A / (7 * M), FLT_MIN), A the run's largest finite |y|; M = 448 for s8 (E4M3 group
//     scales, the default), 2^15 for s16 (fp16 group scales).
//   Per group of G from the run start (the last one shorter), a its largest finite |y|:
//     c = E4M3 / fp16 of (a / 7) / s, round to nearest even (E4M3 satfinite); `:sr` rounds up
//     so that nothing clips and the rounding stays unbiased
//     d = float(c) * s;  q = RNE(clamp(y / d, +-7)) (d = 0: q = 0); `:sr`: floor(|y/d| + u)
//         with the sign, u = sr_uniform(seed, step, rank, index + j) for the run's j-th element.
//   As in NVFP4, a round-to-nearest scale can put the group's largest |y / d| at
//   7 * (1 + 2^-4) = 7.44 (E4M3), clipped to 7: an error below the half step d / 2.
// Decode: y' = q * d, then x' = sign * WHT(y') / sqrt(p) per rotation block.
//
// Wire: [ceil(n/2) bytes: element 2k in the low nibble of byte k, 2k+1 in the high one, two's
//   complement | ceil(n/G) group scales, 1 byte (E4M3) or 2 (fp16, little-endian) | zero pad to
//   4 | fp32 s]; wire_bytes(n) = n ? align4(ceil(n/2) + ceil(n/G) * (1 | 2)) + 4 : 0.
//   Bits per element: 4 + 8/G (s8) or 4 + 16/G (s16), plus 32 per run: g16 and g32:s16 are 4.5.
//
// Bound per coefficient y (round to nearest), d, a, s as above: |y' - y| <= (d / 2 + s / 128)
//   * (1 + 2^-20), and also (as d <= (a/7)(1 + 2^-4)(1 + 2^-22) + s 2^-10 for s8, the error
//   of a subnormal scale included) |y' - y| <= (u * a + s / 128) * (1 + 2^-20) with
//   u = 17/224 (s8), (1 + 2^-11) / 14 (s16).
//   `:sr` (errors up to a whole step): |y' - y| <= (d + s / 128)(1 + 2^-20), and the same
//   u-form with u = 9/56 (s8), (1 + 2^-10) / 7 (s16); E[y'] = y up to fp32 rounding.
//   Element i of a rotation block b of p elements:
//   |x'_i - x_i| <= p^-1/2 * sum_{j in b} bound(y_j)
//                   + 2^-24 (sqrt(p) + 1)(log2(p) + 2) (||x_b||_2 + ||x'_b||_2)   (rotations).
// Non-finite policy: NaN and +-Inf are left out of A and a and coded as nibble 0x8 (-8, which
//   the symmetric grid never uses), decoding to NaN. A non-finite element makes every
//   coefficient of its rotation block non-finite, so that block (p elements, no other)
//   decodes to NaN; so does a finite block whose rotated sum overflows fp32.
#include <string>

#include "ccompress/error.h"
#include "codecs/hadamard.h"
#include "codecs/int4.h"
#include "codecs/registry.h"
#include "cpu/fourbit_cpu.h"
#include "cpu/isa_dispatch.h"

namespace ccompress {
namespace {

constexpr int32_t kDefaultGroup = 16;
constexpr int32_t kMinGroup = 16;
constexpr int32_t kMaxGroup = 256;
constexpr int32_t kMaxRotation = 256;

const char* kHelp =
    "hint4[:gG][:hH][:s8|:s16][:rs][:sr] (Hadamard rotation of H, symmetric int4 per G with "
    "an E4M3 or fp16 scale under an fp32 run scale; G, H powers of two, 16 <= G <= 256, "
    "2 <= H <= 256; defaults g16, H = G, s8)";

void configure(Codec& c, const CodecOptions& o, const std::string& spec) {
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

std::string name(const Codec& c) {
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
                 uint8_t* dst) {
  cpu4::encode_run<codecs::Int4>(x, n, c, ctx, dst);
}

void decode_body(const uint8_t* src, int64_t n, const Codec& c, float* out) {
  cpu4::decode_run<codecs::Int4>(src, n, c, out);
}

CC_CPU_DISPATCH_CODEC_FAMILY()

[[maybe_unused]] const bool kRegistered = register_codec_family(
    {"hint4", CodecKind::Int4, configure, name, wire_bytes, encode, decode, kHelp});

}  // namespace
}  // namespace ccompress
