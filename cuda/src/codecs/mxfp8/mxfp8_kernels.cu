// mxfp8 / mxfp8_e5m2 on the GPU (format: mxfp8.h): the MX kernels (mx_kernels.cuh) with FP8
// elements, coded by the fp8 family's steps (group_codec.h).
#include <cuda_runtime.h>

#include "codecs/fp8/fp8.h"
#include "codecs/fp8/group_codec.h"
#include "codecs/mxfp8/mx_kernels.cuh"
#include "codecs/mxfp8/mxfp8.h"
#include "codecs/registry.h"

namespace ccompress::cuda {
namespace {

template <class F>
struct Fp8Elements {
  static constexpr int32_t kEmax = codecs::fp8_emax<F>();
  static constexpr int kBits = 8;
  CC_HOST_DEVICE static int64_t code_bytes(int64_t n) { return n; }
  CC_HOST_DEVICE static uint32_t quantize(float x, uint32_t code) {
    return codecs::group_quantize<F>(x, codecs::mx_scale(code));
  }
  CC_HOST_DEVICE static float dequantize(uint32_t q, float s) {
    return codecs::group_dequantize<F>(static_cast<uint8_t>(q), s);
  }
};

void encode_op(const void* src, DType src_dtype, const void* wire_in, int64_t n, const Codec& c,
               float divisor, const EncodeContext&, void* dst, cudaStream_t s) {
  const char* what = wire_in != nullptr ? "mxfp8 decode_reduce_encode" : "mxfp8 encode";
  if (c.fp8_format == 0)
    return mx::launch_encode<Fp8Elements<codecs::Fp8E4M3>>(src, src_dtype, wire_in, n, divisor,
                                                           dst, s, what);
  mx::launch_encode<Fp8Elements<codecs::Fp8E5M2>>(src, src_dtype, wire_in, n, divisor, dst, s,
                                                  what);
}

void decode_op(const void* src, int64_t n, const Codec& c, const DecodeOut& o, cudaStream_t s) {
  const char* what = o.out != nullptr ? "mxfp8 decode" : "mxfp8 decode_accumulate";
  if (c.fp8_format == 0)
    return mx::launch_decode<Fp8Elements<codecs::Fp8E4M3>>(src, n, o, s, what);
  mx::launch_decode<Fp8Elements<codecs::Fp8E5M2>>(src, n, o, s, what);
}

constexpr DeviceOps kDeviceOps = {encode_op, decode_op};
[[maybe_unused]] const bool kAttached = attach_device_ops("mxfp8", kDeviceOps);

}  // namespace
}  // namespace ccompress::cuda
