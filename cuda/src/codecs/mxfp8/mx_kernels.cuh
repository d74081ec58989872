// CUDA kernels of the MX codecs (mxfp8_kernels.cu, mxfp4_kernels.cu), templated on the element
// policy P of a family:
//   kEmax                          the element format's largest exponent (mxfp8.h)
//   code_bytes(n)                  bytes of n element codes (the scales follow them)
//   quantize(x, c)                 the code of x under E8M0 scale code c (a byte, or a nibble)
//   dequantize(code, s)            its value
//   load_code(wire, i)             element i's code in a wire buffer
//   store_codes(dst, i, n, code)   called by every lane of a warp, lane l holding element i
//                                  of a block: writes the block's codes (nibbles pair up)
// They compute exactly what the host loops compute (the same fp32 operations on the same
// operands), so wire bytes and decoded values are the CPU's bit for bit.
//
// Encode: one warp per block of 32, one element per lane: the block maximum by one
// __reduce_max_sync, the E8M0 scale from it, then the codes. The ring hop (wire_in) loads
// decode(wire_in) + x instead of x; in place (dst = wire_in) is safe because a warp reads its
// block's codes and scale byte before the reduction, writes them after it, and no other warp
// touches them.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "ccompress/codec.h"
#include "ccompress/error.h"
#include "codecs/float_convert.h"
#include "codecs/fp8/group_codec.h"
#include "codecs/mxfp8/mxfp8.h"
#include "kernels/kernel_util.cuh"

namespace ccompress::cuda::mx {

constexpr int kThreads = 256;  // 8 blocks of 32 per CUDA block
constexpr int64_t kMaxBlocks = int64_t(1) << 20;  // grid-stride loops cover any count

template <class P, bool kHop>
__global__ void __launch_bounds__(kThreads)
    encode_kernel(const void* src, DType src_dtype, const uint8_t* wire_in, int64_t n,
                  float divisor, uint8_t* dst) {
  const int64_t nblocks = (n + codecs::kMxBlock - 1) / codecs::kMxBlock;
  const int64_t scales = P::code_bytes(n);
  const int64_t pad = scales + nblocks;  // the zero pad, up to 3 bytes
  if (blockIdx.x == 0 && threadIdx.x < 3 && pad + threadIdx.x < codecs::mx_wire_bytes(scales, n))
    dst[pad + threadIdx.x] = 0;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t b = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / 32; b < nblocks; b += warps) {
    const int64_t i = b * codecs::kMxBlock + lane;
    float v = 0.0f;
    if (i < n) {
      float x = codecs::load_as_float(src, src_dtype, i);
      if constexpr (kHop)
        x = codecs::add_rn(
            P::dequantize(P::load_code(wire_in, i), codecs::mx_scale(wire_in[scales + b])), x);
      v = divisor != 1.0f ? codecs::div_rn(x, divisor) : x;
    }
    const int32_t amax = __reduce_max_sync(0xFFFFFFFFu, i < n ? codecs::finite_abs_bits(v) : 0);
    const uint32_t code = codecs::mx_scale_code(amax, P::kEmax);
    P::store_codes(dst, i, n, P::quantize(v, code));
    if (lane == 0) dst[scales + b] = static_cast<uint8_t>(code);
  }
}

template <class P, bool kCast>
__global__ void __launch_bounds__(kThreads)
    decode_kernel(const uint8_t* __restrict__ src, int64_t n, DecodeOut o) {
  const int64_t scales = P::code_bytes(n);
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const float s = codecs::mx_scale(src[scales + i / codecs::kMxBlock]);
    store_decoded<kCast>(o, i, P::dequantize(P::load_code(src, i), s));
  }
}

inline int grid_for(int64_t threads) {
  return static_cast<int>(
      std::min(std::max<int64_t>((threads + kThreads - 1) / kThreads, 1), kMaxBlocks));
}

/// dst <- encode(src / divisor), or with wire_in (the fused ring hop)
/// encode((decode(wire_in) + float(src)) / divisor), dst possibly wire_in. Asynchronous.
template <class P>
void launch_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                   float divisor, void* dst, cudaStream_t stream, const char* what) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (n == 0) return;
  const int grid = grid_for((n + codecs::kMxBlock - 1) / codecs::kMxBlock * 32);
  const uint8_t* in = static_cast<const uint8_t*>(wire_in);
  uint8_t* out = static_cast<uint8_t*>(dst);
  with_flag(in != nullptr, [&](auto hop) {
    encode_kernel<P, decltype(hop)::value><<<grid, kThreads, 0, stream>>>(src, src_dtype, in, n,
                                                                         divisor, out);
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

/// The decode of src into @p o (kernels/decode_out.h), in one pass. Asynchronous.
template <class P>
void launch_decode(const void* src, int64_t n, const DecodeOut& o, cudaStream_t stream,
                   const char* what) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (n == 0) return;
  const uint8_t* wire = static_cast<const uint8_t*>(src);
  with_flag(o.out != nullptr, [&](auto cast) {
    decode_kernel<P, decltype(cast)::value><<<grid_for(n), kThreads, 0, stream>>>(wire, n, o);
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

}  // namespace ccompress::cuda::mx
