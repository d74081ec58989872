// Pieces shared by the codec kernels of every family (codec_kernels.cu, warp_rotation.cuh,
// fourbit_kernels.cuh): where a decode puts its values, and a runtime flag as a template
// argument.
//
// A decode writes into fp32 accumulators (assign, or acc + v in that operand order:
// decode_accumulate), or casts to a dtype with round-to-nearest-even (decode; the rounding
// of launch_cast without `:sr`), so decode to a dtype is one pass, bit-identical with
// decoding into fp32 and casting that.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ccompress/common.h"
#include "codecs/float_convert.h"

namespace ccompress::cuda {

struct DecodeOut {
  float* acc = nullptr;
  bool assign = true;
  void* out = nullptr;  // the cast destination (kCast kernels)
  DType out_dtype = DType::Float32;
};

inline DecodeOut decode_into(float* acc, bool assign) {
  DecodeOut o;
  o.acc = acc;
  o.assign = assign;
  return o;
}

inline DecodeOut decode_to(void* out, DType out_dtype) {
  DecodeOut o;
  o.out = out;
  o.out_dtype = out_dtype;
  return o;
}

/// The same destination from element @p off on (a run's later piece).
inline DecodeOut decode_at(DecodeOut o, int64_t off) {
  if (o.acc != nullptr) o.acc += off;
  if (o.out != nullptr) o.out = static_cast<char*>(o.out) + off * static_cast<int64_t>(dtype_size(o.out_dtype));
  return o;
}

/// Element i of the destination <- v (kCast: the cast of v; else assign or add).
template <bool kCast>
__device__ __forceinline__ void store_decoded(DecodeOut o, int64_t i, float v) {
  if constexpr (kCast) {
    codecs::store_from_float(o.out, o.out_dtype, i, v);
  } else {
    o.acc[i] = o.assign ? v : codecs::add_rn(o.acc[i], v);
  }
}

/// Runs fn(std::true_type{}) or fn(std::false_type{}): a runtime flag as a template argument.
template <class Fn>
void with_flag(bool flag, Fn fn) {
  if (flag) {
    fn(std::true_type{});
  } else {
    fn(std::false_type{});
  }
}

}  // namespace ccompress::cuda
