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

void launch_int4_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                        const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                        void* amax_scratch, cudaStream_t stream) {
  check_kind(codec);
  const char* what = wire_in != nullptr ? "hint4 decode_reduce_encode" : "hint4 encode";
  fourbit::launch_encode<codecs::Int4>(src, src_dtype, wire_in, n, codec, divisor, ctx, dst,
                                       static_cast<int32_t*>(amax_scratch), stream, what);
}

void launch_int4_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                        cudaStream_t stream) {
  check_kind(codec);
  const char* what = o.out != nullptr ? "hint4 decode" : "hint4 decode_accumulate";
  fourbit::launch_decode<codecs::Int4>(src, n, codec, o, stream, what);
}

}  // namespace ccompress::cuda
