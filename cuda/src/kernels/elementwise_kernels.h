// Host launchers of the element-wise kernels of the CUDA backend: dtype casts with an
// optional addend and divisor (raw codecs, finalize, the raw ring hop), fp32
// accumulation, the NaN/Inf counts and error feedback's residuals. Plain C++ like codecs/fp8/fp8_kernels.h; the math is codecs/float_convert.h and
// codecs/stochastic.h, element for element what the CPU backend does.
#pragma once

#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/kernel_backend.h"

// The CUDA runtime's own definition (driver_types.h); repeating an identical typedef is legal.
typedef struct CUstream_st* cudaStream_t;

namespace ccompress::cuda {

// How a cast rounds: to nearest even, or stochastically with the noise of element i drawn at
// sr_uniform_at(sr_prefix(seed, step, rank), index + i) (16-bit destinations only).
struct CastRounding {
  bool stochastic = false;
  EncodeContext ctx;
};

// dst[i] <- cast_to(dst_dtype)((float(src[i]) [+ float(x[i])]) [/ divisor]) for i < n.
// x may be null (no addend); the sum is formed src + x, the division skipped when divisor
// is 1, as on the CPU. 16-byte vector loads and stores where every pointer allows them.
void launch_cast(const void* src, DType src_dtype, const void* x, DType x_dtype, int64_t n,
                 float divisor, void* dst, DType dst_dtype, const CastRounding& rounding,
                 cudaStream_t stream);

// acc[i] <- float(src[i]) when assign, else acc[i] + float(src[i]) (that operand order).
void launch_accumulate(const void* src, DType src_dtype, int64_t n, float* acc, bool assign,
                       cudaStream_t stream);

// *count += the number of NaN and +-Inf among n elements of src (count: device memory).
void launch_count_nonfinite(const void* src, DType t, int64_t n, int64_t* count,
                            cudaStream_t stream);

// residual[i] <- codecs::feedback_residual_of(v[i], decoded[i]) for i < n, adding the number
// of elements set to 0 (non-finite) to *count (device memory).
void launch_feedback_residual(const float* v, const float* decoded, int64_t n, float* residual,
                              int64_t* count, cudaStream_t stream);

}  // namespace ccompress::cuda
