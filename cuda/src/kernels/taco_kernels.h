// Host launchers of the TACO codec kernels (format: codecs/taco.h). Plain C++, like
// codec_kernels.h, so host-compiled code can call them; bit-identical with the CPU backend.
#pragma once

#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/kernel_backend.h"

// The CUDA runtime's own definition (driver_types.h); repeating an identical typedef is legal.
typedef struct CUstream_st* cudaStream_t;

namespace ccompress::cuda {

// dst <- encode(src / divisor) for a taco / taco_e5m2 codec. src: n elements of src_dtype on
// the device; dst: codec.wire_bytes(n) device bytes, 4-byte aligned. ctx places the run for
// `:sr`. Asynchronous on @p stream; throws CudaError if the launch fails.
void launch_taco_encode(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                        float divisor, const EncodeContext& ctx, void* dst, cudaStream_t stream);

// The ring hop in one pass: dst <- encode((decode(src) + float(x)) / divisor), the sum in
// that order; dst may be src (in place). x: n elements of x_dtype on the device.
void launch_taco_decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                                      const Codec& codec, float divisor, const EncodeContext& ctx,
                                      void* dst, cudaStream_t stream);

// acc <- decode(src) when assign, else acc += decode(src); acc is fp32 on the device.
void launch_taco_decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                   bool assign, cudaStream_t stream);

// out <- cast(decode(src)) to out_dtype (round-to-nearest-even), in one pass.
void launch_taco_decode_to(const void* src, int64_t n, const Codec& codec, void* out,
                           DType out_dtype, cudaStream_t stream);

}  // namespace ccompress::cuda
