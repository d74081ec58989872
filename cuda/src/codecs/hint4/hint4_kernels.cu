// hint4 on the GPU: the shared 4-bit kernels with the symmetric int4 grid.
#include "codecs/hint4/hint4_kernels.h"

#include "codecs/hint4/hint4.h"
#include "codecs/fourbit/fourbit_kernels.cuh"
#include "codecs/registry.h"

namespace ccompress::cuda {

void launch_int4_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                        const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                        cudaStream_t stream) {
  const char* what = wire_in != nullptr ? "hint4 decode_reduce_encode" : "hint4 encode";
  fourbit::launch_encode<codecs::Int4>(src, src_dtype, wire_in, n, codec, divisor, ctx, dst,
                                       stream, what);
}

void launch_int4_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                        cudaStream_t stream) {
  const char* what = o.out != nullptr ? "hint4 decode" : "hint4 decode_accumulate";
  fourbit::launch_decode<codecs::Int4>(src, n, codec, o, stream, what);
}

namespace {

constexpr DeviceOps kDeviceOps = {launch_int4_encode, launch_int4_decode};
[[maybe_unused]] const bool kAttached = attach_device_ops("hint4", kDeviceOps);

}  // namespace

}  // namespace ccompress::cuda
