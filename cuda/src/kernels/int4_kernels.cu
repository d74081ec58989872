// hint4 on the GPU: the shared 4-bit kernels with the symmetric int4 grid.
#include "kernels/int4_kernels.h"

#include "codecs/int4.h"
#include "kernels/fourbit_kernels.cuh"

namespace ccompress::cuda {

namespace {
void check_kind(const Codec& codec) {
  CC_CHECK(codec.kind == CodecKind::Int4,
           "the int4 kernels handle hint4 only, got '" << codec.name() << "'");
}
}  // namespace

void launch_int4_encode(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                        float divisor, const EncodeContext& ctx, void* dst, cudaStream_t stream) {
  check_kind(codec);
  fourbit::launch_encode<codecs::Int4>(src, src_dtype, nullptr, n, codec, divisor, ctx, dst,
                                       nullptr, stream, "hint4 encode");
}

void launch_int4_decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                                      const Codec& codec, float divisor, const EncodeContext& ctx,
                                      void* dst, void* amax_scratch, cudaStream_t stream) {
  check_kind(codec);
  CC_CHECK(src != nullptr, "the hop's wire source is null");
  fourbit::launch_encode<codecs::Int4>(x, x_dtype, src, n, codec, divisor, ctx, dst,
                                       static_cast<int32_t*>(amax_scratch), stream,
                                       "hint4 decode_reduce_encode");
}

void launch_int4_decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                   bool assign, cudaStream_t stream) {
  check_kind(codec);
  fourbit::launch_decode<codecs::Int4>(src, n, codec, decode_into(acc, assign), stream,
                                       "hint4 decode_accumulate");
}

void launch_int4_decode_to(const void* src, int64_t n, const Codec& codec, void* out,
                           DType out_dtype, cudaStream_t stream) {
  check_kind(codec);
  fourbit::launch_decode<codecs::Int4>(src, n, codec, decode_to(out, out_dtype), stream,
                                       "hint4 decode");
}

}  // namespace ccompress::cuda
