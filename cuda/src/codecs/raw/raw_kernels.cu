// The raw family on the GPU (format: raw.h): the element-wise cast and accumulate kernels of
// kernels/elementwise_kernels.cu, which the CUDA backend's finalize shares.
#include "codecs/registry.h"
#include "kernels/decode_out.h"
#include "kernels/elementwise_kernels.h"

namespace ccompress::cuda {
namespace {

// cast(src / divisor), or the hop's cast((decode(wire_in) + src) / divisor), in one pass.
void encode_op(const void* src, DType src_dtype, const void* wire_in, int64_t n, const Codec& c,
               float divisor, const EncodeContext& ctx, void* dst, cudaStream_t s) {
  const CastRounding r{c.stochastic, ctx};
  if (wire_in == nullptr) {
    launch_cast(src, src_dtype, nullptr, DType::Float32, n, divisor, dst, c.raw_dtype, r, s);
  } else {
    launch_cast(wire_in, c.raw_dtype, src, src_dtype, n, divisor, dst, c.raw_dtype, r, s);
  }
}

void decode_op(const void* src, int64_t n, const Codec& c, const DecodeOut& o, cudaStream_t s) {
  if (o.out != nullptr) {
    launch_cast(src, c.raw_dtype, nullptr, DType::Float32, n, 1.0f, o.out, o.out_dtype,
                CastRounding{}, s);
  } else {
    launch_accumulate(src, c.raw_dtype, n, o.acc, o.assign, s);
  }
}

constexpr DeviceOps kDeviceOps = {encode_op, decode_op};
[[maybe_unused]] const bool kAttached = attach_device_ops("raw", kDeviceOps);

}  // namespace
}  // namespace ccompress::cuda
