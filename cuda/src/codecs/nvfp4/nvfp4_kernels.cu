// nvfp4 / hnvfp4 on the GPU: the shared 4-bit kernels with the E2M1 grid.
#include "codecs/nvfp4/nvfp4_kernels.h"

#include "codecs/nvfp4/nvfp4.h"
#include "codecs/fourbit/fourbit_kernels.cuh"
#include "codecs/registry.h"

namespace ccompress::cuda {

void launch_nvfp4_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                         const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                         cudaStream_t stream) {
  const char* what = wire_in != nullptr ? "nvfp4 decode_reduce_encode" : "nvfp4 encode";
  fourbit::launch_encode<codecs::E2M1>(src, src_dtype, wire_in, n, codec, divisor, ctx, dst,
                                       stream, what);
}

void launch_nvfp4_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                         cudaStream_t stream) {
  const char* what = o.out != nullptr ? "nvfp4 decode" : "nvfp4 decode_accumulate";
  fourbit::launch_decode<codecs::E2M1>(src, n, codec, o, stream, what);
}

namespace {

constexpr DeviceOps kDeviceOps = {launch_nvfp4_encode, launch_nvfp4_decode};
[[maybe_unused]] const bool kAttached = attach_device_ops("nvfp4", kDeviceOps);

}  // namespace

}  // namespace ccompress::cuda
