// Host launchers of the FP8 codec kernels. Plain C++ (no CUDA headers needed to call them),
// so host-compiled bindings can use them; the kernels themselves live in codec_kernels.cu
// and run the same cuda/src/codecs math as the CPU backend.
#pragma once

#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/kernel_backend.h"

// The CUDA runtime's own definition (driver_types.h); repeating an identical typedef is legal.
typedef struct CUstream_st* cudaStream_t;

namespace ccompress::cuda {

// Number of visible CUDA devices; 0 when there is no GPU or driver. Never throws.
int device_count() noexcept;

// dst <- encode(src / divisor) for an FP8 codec. src: n elements of src_dtype on the device;
// dst: codec.wire_bytes(n) bytes on the device, 4-byte aligned (the scales are fp32).
// Asynchronous on @p stream; throws CudaError if the launch fails, InvalidArgument on bad
// arguments. @p ctx places the run for stochastic rounding (codec.stochastic): element i
// draws its noise at ctx.index + i, exactly like the CPU backend.
void launch_fp8_encode(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                       float divisor, void* dst, cudaStream_t stream,
                       const EncodeContext& ctx = EncodeContext{});

// The ring hop in one pass: dst <- encode((decode(src) + float(x)) / divisor) for an FP8
// codec, the sum in that order; dst may be src (in place).
void launch_fp8_decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                                     const Codec& codec, float divisor, const EncodeContext& ctx,
                                     void* dst, cudaStream_t stream);

// out <- cast(decode(src)) to out_dtype for an FP8 codec, in one pass.
void launch_fp8_decode_to(const void* src, int64_t n, const Codec& codec, void* out,
                          DType out_dtype, cudaStream_t stream);

// acc <- decode(src) when assign, else acc += decode(src), for an FP8 codec; acc is fp32.
void launch_fp8_decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                  bool assign, cudaStream_t stream);

}  // namespace ccompress::cuda
