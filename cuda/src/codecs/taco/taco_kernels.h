// Host launchers of the TACO codec kernels (format: codecs/taco/taco.h). Plain C++, like
// codecs/fp8/fp8_kernels.h, so host-compiled code can call them; bit-identical with the CPU backend.
#pragma once

#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/kernel_backend.h"
#include "kernels/decode_out.h"

// The CUDA runtime's own definition (driver_types.h); repeating an identical typedef is legal.
typedef struct CUstream_st* cudaStream_t;

namespace ccompress::cuda {

// dst <- encode(src / divisor) for a taco / taco_e5m2 codec. src: n elements of src_dtype on
// the device; dst: codec.wire_bytes(n) device bytes, 4-byte aligned. ctx places the run for
// `:sr`. With wire_in (the ring hop, in one pass) dst <- encode((decode(wire_in) +
// float(src)) / divisor), the sum in that order; dst may be wire_in (in place). Asynchronous
// on @p stream; throws CudaError if a launch fails, InvalidArgument on bad arguments.
void launch_taco_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                        const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                        cudaStream_t stream);

// The decode of src into @p o (kernels/decode_out.h): fp32 accumulators, assigned or added
// to, or a cast to a dtype (round-to-nearest-even), in one pass.
void launch_taco_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                        cudaStream_t stream);

}  // namespace ccompress::cuda
