// Host launchers of the FP8 codec kernels. Plain C++ (no CUDA headers needed to call them),
// so host-compiled bindings can use them; the kernels themselves live in codecs/fp8/fp8_kernels.cu
// and run the same cuda/src/codecs math as the CPU backend.
#pragma once

#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/kernel_backend.h"
#include "kernels/decode_out.h"

// The CUDA runtime's own definition (driver_types.h); repeating an identical typedef is legal.
typedef struct CUstream_st* cudaStream_t;

namespace ccompress::cuda {

// dst <- encode(src / divisor) for an FP8 codec. src: n elements of src_dtype on the device;
// dst: codec.wire_bytes(n) bytes on the device, 4-byte aligned (the scales are fp32).
// Asynchronous on @p stream; throws CudaError if the launch fails, InvalidArgument on bad
// arguments. @p ctx places the run for stochastic rounding (codec.stochastic): element i
// draws its noise at ctx.index + i, exactly like the CPU backend. With wire_in (the ring hop,
// in one pass) dst <- encode((decode(wire_in) + float(src)) / divisor), the sum in that
// order; dst may be wire_in (in place).
void launch_fp8_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                       const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                       cudaStream_t stream);

// The decode of src into @p o (kernels/decode_out.h) for an FP8 codec, in one pass.
void launch_fp8_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                       cudaStream_t stream);

}  // namespace ccompress::cuda
