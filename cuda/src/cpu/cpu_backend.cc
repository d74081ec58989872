#include "cpu/cpu_backend.h"

#include "ccompress/error.h"
#include "codecs/feedback.h"
#include "codecs/registry.h"
#include "cpu/host_loops.h"
#include "cpu/isa_dispatch.h"
#include "cpu/nonfinite.h"
#include "cpu/simd_avx2.h"

namespace ccompress {
namespace {

using cpu::kBlock;

// The codec calls go to the codec's family (codecs/registry.h), whose host loops are
// dispatched to their AVX2 or baseline copy themselves.
const HostOps& host_ops(const Codec& codec) {
  CC_CHECK(!codec.unbound, "codec 'none' is unbound: bind it to a dtype first");
  return codec_family(codec).host;
}

void load_accumulate_any_body(const void* src, DType src_dtype, int64_t n, float* acc,
                              bool assign) {
  cpu::load_accumulate_body(src, src_dtype, n, acc, assign);
}

void finalize_any_body(const float* acc, int64_t n, float divisor, void* out,
                       DType out_dtype) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  float buf[kBlock];
  cpu::for_each_group(n, kBlock, [&](int64_t, int64_t off, int64_t len) {
    cpu::load_block(acc, DType::Float32, off, len, divisor, buf);
    cpu::store_block(buf, len, out, out_dtype, off);
  });
}

// The entry points, each compiled for the baseline and for AVX2 (isa_dispatch.h).
CC_CPU_DISPATCH(void, load_accumulate_any,
                (const void* src, DType src_dtype, int64_t n, float* acc, bool assign),
                (src, src_dtype, n, acc, assign))
CC_CPU_DISPATCH(void, finalize_any,
                (const float* acc, int64_t n, float divisor, void* out, DType out_dtype),
                (acc, n, divisor, out, out_dtype))

}  // namespace

void CpuBackend::encode(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                        float divisor, const EncodeContext& ctx, void* dst) {
  host_ops(codec).encode(src, src_dtype, n, codec, divisor, ctx, dst);
}

void CpuBackend::decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                   bool assign) {
  host_ops(codec).decode_accumulate(src, n, codec, acc, assign);
}

void CpuBackend::decode(const void* src, int64_t n, const Codec& codec, void* out,
                        DType out_dtype) {
  host_ops(codec).decode(src, n, codec, out, out_dtype);
}

void CpuBackend::load_accumulate(const void* src, DType src_dtype, int64_t n, float* acc,
                                 bool assign) {
  load_accumulate_any(src, src_dtype, n, acc, assign);
}

void CpuBackend::decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                                      const Codec& codec, float divisor,
                                      const EncodeContext& ctx, void* dst) {
  host_ops(codec).decode_reduce_encode(src, x, x_dtype, n, codec, divisor, ctx, dst);
}

void CpuBackend::finalize(const float* acc, int64_t n, float divisor, void* out,
                          DType out_dtype) {
  finalize_any(acc, n, divisor, out, out_dtype);
}

bool CpuBackend::count_nonfinite(const void* src, DType t, int64_t n, int64_t* count) {
  *count += ccompress::count_nonfinite(src, t, n).count;
  return true;
}

void CpuBackend::feedback_residual(const float* v, const float* decoded, int64_t n,
                                   float* residual, int64_t* count) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
#ifdef CC_HAVE_SIMD_AVX2
  if (cpu_use_avx2()) {  // the scalar loop's branches made it the slowest pass of a call
    *count += cpu::feedback_residual_avx2(v, decoded, n, residual);
    return;
  }
#endif
  for (int64_t i = 0; i < n; ++i)
    *count += codecs::feedback_residual_of(v[i], decoded[i], residual + i) ? 1 : 0;
}

CpuBackend& cpu_backend() {
  static CpuBackend instance;
  return instance;
}

}  // namespace ccompress
