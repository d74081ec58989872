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
  fourbit::launch_encode<codecs::E2M1>(src, src_dtype, nullptr, n, codec, divisor, ctx, dst,
                                       nullptr, stream, "nvfp4 encode");
}

void launch_nvfp4_decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                                       const Codec& codec, float divisor, const EncodeContext& ctx,
                                       void* dst, void* amax_scratch, cudaStream_t stream) {
  check_kind(codec);
  CC_CHECK(src != nullptr, "the hop's wire source is null");
  fourbit::launch_encode<codecs::E2M1>(x, x_dtype, src, n, codec, divisor, ctx, dst,
                                       static_cast<int32_t*>(amax_scratch), stream,
                                       "nvfp4 decode_reduce_encode");
}

void launch_nvfp4_decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                    bool assign, cudaStream_t stream) {
  check_kind(codec);
  fourbit::launch_decode<codecs::E2M1>(src, n, codec, decode_into(acc, assign), stream,
                                       "nvfp4 decode_accumulate");
}

void launch_nvfp4_decode_to(const void* src, int64_t n, const Codec& codec, void* out,
                            DType out_dtype, cudaStream_t stream) {
  check_kind(codec);
  fourbit::launch_decode<codecs::E2M1>(src, n, codec, decode_to(out, out_dtype), stream,
                                       "nvfp4 decode");
}

}  // namespace ccompress::cuda
