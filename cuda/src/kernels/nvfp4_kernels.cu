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

void launch_nvfp4_encode(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                         float divisor, const EncodeContext& ctx, void* dst, cudaStream_t stream) {
  check_kind(codec);
  fourbit::launch_encode<codecs::E2M1>(src, src_dtype, n, codec, divisor, ctx, dst, stream,
                                       "nvfp4 encode");
}

void launch_nvfp4_decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                    bool assign, cudaStream_t stream) {
  check_kind(codec);
  fourbit::launch_decode_accumulate<codecs::E2M1>(src, n, codec, acc, assign, stream,
                                                  "nvfp4 decode_accumulate");
}

}  // namespace ccompress::cuda
