// Where a decode kernel puts its values: fp32 accumulators (assign, or acc + v in that operand
// order: decode_accumulate), or a cast to a dtype with round-to-nearest-even (decode; the
// rounding of launch_cast without `:sr`). Plain C++: the family launchers take one.
#pragma once

#include <cstdint>

#include "ccompress/common.h"

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
  if (o.out != nullptr) {
    o.out = static_cast<char*>(o.out) + off * static_cast<int64_t>(dtype_size(o.out_dtype));
  }
  return o;
}

}  // namespace ccompress::cuda
