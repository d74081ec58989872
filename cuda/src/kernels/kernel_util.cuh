// Pieces shared by the codec kernels of every family (codecs/fp8/fp8_kernels.cu, warp_rotation.cuh,
// fourbit_kernels.cuh): storing a decoded value (kernels/decode_out.h), and a runtime flag as
// a template argument. Decode to a dtype is one pass, bit-identical with decoding into fp32
// and casting that.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ccompress/common.h"
#include "codecs/float_convert.h"
#include "kernels/cuda_backend.h"
#include "kernels/decode_out.h"

/// After a kernel launch: throws CudaError "<what> failed: <CUDA's message>" (in debug mode
/// naming the launching line) when the launch failed.
#define CC_CUDA_CHECK_LAUNCH(what) CC_CUDA_CHECK(cudaGetLastError(), what)

namespace ccompress::cuda {

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
