// nvfp4 / hnvfp4 on the GPU: the shared 4-bit kernels with the E2M1 grid.
#include "kernels/nvfp4_kernels.h"

#include "codecs/nvfp4.h"
#include "kernels/fourbit_kernels.cuh"

namespace ccompress::cuda {

namespace {
void check_kind(const Codec& codec) {
  CC_CHECK(codec.kind == CodecKind::Nvfp4,
           "the nvfp4 kernels handle nvfp4 / hnvfp4 only, got '" << codec.name() << "'");
}
}  // namespace

void launch_nvfp4_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                         const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                         void* amax_scratch, cudaStream_t stream) {
  check_kind(codec);
  const char* what = wire_in != nullptr ? "nvfp4 decode_reduce_encode" : "nvfp4 encode";
  fourbit::launch_encode<codecs::E2M1>(src, src_dtype, wire_in, n, codec, divisor, ctx, dst,
                                       static_cast<int32_t*>(amax_scratch), stream, what);
}

void launch_nvfp4_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                         cudaStream_t stream) {
  check_kind(codec);
  const char* what = o.out != nullptr ? "nvfp4 decode" : "nvfp4 decode_accumulate";
  fourbit::launch_decode<codecs::E2M1>(src, n, codec, o, stream, what);
}

}  // namespace ccompress::cuda
