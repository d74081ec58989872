// Host launchers of the nvfp4 / hnvfp4 CUDA kernels (format: codecs/nvfp4/nvfp4.cc). Plain C++, so
// host-compiled code can call them; the kernels (fourbit_kernels.cuh) run the same
// codecs/nvfp4/nvfp4.h math as the CPU backend and produce the same bytes.
#pragma once

#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/kernel_backend.h"
#include "kernels/decode_out.h"

// The CUDA runtime's own definition (driver_types.h); repeating an identical typedef is legal.
typedef struct CUstream_st* cudaStream_t;

namespace ccompress::cuda {

// dst <- encode(src / divisor) of one run of n elements of src_dtype (device pointers) for
// an nvfp4 / hnvfp4 codec; dst holds codec.wire_bytes(n) bytes, 4-byte aligned. ctx places the run for
// `:sr`. One launch on @p stream, whatever n (a CUDA block per Codec::run_block piece:
// codecs/fourbit/fourbit_kernels.cuh); asynchronous. With wire_in (the ring hop) dst <-
// encode((decode(wire_in) + float(src)) / divisor), the sum in that order, the kernel
// decoding the incoming pieces itself (no fp32 scratch); dst may be wire_in (in place).
void launch_nvfp4_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                         const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                         cudaStream_t stream);

// The decode of src into @p o (kernels/decode_out.h): fp32 accumulators, assigned or added
// to, or a cast to a dtype (round-to-nearest-even), in one launch.
void launch_nvfp4_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                         cudaStream_t stream);

}  // namespace ccompress::cuda
