// The raw family's format: a plain dtype on the wire, no scale.
//
// `none`: the input dtype itself, bound at call time (Codec::bind); exact. Bound to bfloat16
//   or float16 it is the same wire format as `bf16` / `fp16` and takes that name.
// `bf16`, `fp16`: a cast of the fp32 value (after the divisor) with round to nearest even
//   (codecs/float_convert.h: bf16_from_float, f16_from_float); fp16 overflows to +-Inf
//   beyond +-65504 exactly like a cast. Error per element: half a unit in the last place of
//   the wire dtype (2^-9 |x| bf16, 2^-11 |x| fp16 in the normal range).
// `:sr` (bf16:sr, fp16:sr): the cast rounds up with probability proportional to the distance
//   from the lower neighbour, noise sr_uniform_at(sr_prefix(seed, step, rank), index)
//   (codecs/stochastic.h); unbiased, error up to a whole unit in the last place.
// Wire: n elements of the wire dtype, little-endian; wire_bytes(n) = n * sizeof(dtype).
// Non-finite policy: NaN and +-Inf stay as they are (a cast keeps them).
#pragma once

#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "codecs/float_convert.h"
#include "codecs/stochastic.h"

namespace ccompress::codecs {

/// The wire value of one element of a raw codec with `:sr`: a stochastic cast to 16 bits.
CC_HOST_DEVICE uint16_t raw_cast_sr(float v, DType wire, float u) {
  return wire == DType::BFloat16 ? bf16_from_float_sr(v, u) : f16_from_float_sr(v, u);
}

}  // namespace ccompress::codecs
