// Host launchers of the nvfp4 / hnvfp4 CUDA kernels (format: cpu/nvfp4_cpu.cc). Plain C++, so
// host-compiled code can call them; the kernels (fourbit_kernels.cuh) run the same
// codecs/nvfp4.h math as the CPU backend and produce the same bytes.
#pragma once

#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/kernel_backend.h"

// The CUDA runtime's own definition (driver_types.h); repeating an identical typedef is legal.
typedef struct CUstream_st* cudaStream_t;

namespace ccompress::cuda {

// dst <- encode(src / divisor) of one run of n elements of src_dtype (device pointers); dst
// holds codec.wire_bytes(n) bytes, 4-byte aligned. ctx places the run for `:sr`. Three
// launches on @p stream (amax, quantize, finalize); asynchronous.
void launch_nvfp4_encode(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                         float divisor, const EncodeContext& ctx, void* dst, cudaStream_t stream);

// The ring hop: dst <- encode((decode(src) + float(x)) / divisor), the sum in that order,
// three launches per piece as for encode, each decoding the incoming piece itself (no fp32
// scratch); dst may be src (in place). amax_scratch: one 4-byte aligned device word that no
// other work on another stream uses meanwhile (the run's amax; the run-scale slot of an
// in-place src still holds the scale that decodes it).
void launch_nvfp4_decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                                       const Codec& codec, float divisor, const EncodeContext& ctx,
                                       void* dst, void* amax_scratch, cudaStream_t stream);

// acc <- decode(src) when assign, else acc += decode(src); acc is fp32 on the device.
void launch_nvfp4_decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                    bool assign, cudaStream_t stream);

// out <- cast(decode(src)) to out_dtype (round-to-nearest-even), in one pass per piece.
void launch_nvfp4_decode_to(const void* src, int64_t n, const Codec& codec, void* out,
                            DType out_dtype, cudaStream_t stream);

}  // namespace ccompress::cuda
