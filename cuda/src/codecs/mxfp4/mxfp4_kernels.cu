// mxfp4 on the GPU (format: mxfp4.h): the MX kernels (mxfp8/mx_kernels.cuh) with E2M1 nibbles,
// coded by the 4-bit codecs' steps (fourbit.h).
#include <cuda_runtime.h>

#include "codecs/fourbit/fourbit.h"
#include "codecs/mxfp4/mxfp4.h"
#include "codecs/mxfp8/mx_kernels.cuh"
#include "codecs/nvfp4/nvfp4.h"
#include "codecs/registry.h"

namespace ccompress::cuda {
namespace {

struct E2M1Elements {
  static constexpr int32_t kEmax = codecs::kE2M1Emax;
  static constexpr int kBits = 4;
  CC_HOST_DEVICE static int64_t code_bytes(int64_t n) { return codecs::mxfp4_scales_offset(n); }
  CC_HOST_DEVICE static uint32_t quantize(float x, uint32_t code) {
    return codecs::mxfp4_quantize(x, codecs::mx_inv_scale(code));
  }
  CC_HOST_DEVICE static float dequantize(uint32_t q, float s) {
    return codecs::fourbit_dequantize<codecs::E2M1>(static_cast<uint8_t>(q), s);
  }
};

void encode_op(const void* src, DType src_dtype, const void* wire_in, int64_t n, const Codec&,
               float divisor, const EncodeContext&, void* dst, cudaStream_t s) {
  mx::launch_encode<E2M1Elements>(src, src_dtype, wire_in, n, divisor, dst, s,
                                  wire_in != nullptr ? "mxfp4 decode_reduce_encode"
                                                     : "mxfp4 encode");
}

void decode_op(const void* src, int64_t n, const Codec&, const DecodeOut& o, cudaStream_t s) {
  mx::launch_decode<E2M1Elements>(src, n, o, s,
                                  o.out != nullptr ? "mxfp4 decode" : "mxfp4 decode_accumulate");
}

constexpr DeviceOps kDeviceOps = {encode_op, decode_op};
[[maybe_unused]] const bool kAttached = attach_device_ops("mxfp4", kDeviceOps);

}  // namespace
}  // namespace ccompress::cuda
