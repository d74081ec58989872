// TACO encode / decode kernels: one warp per group (= rotation block), everything in
// registers, one read and one write per element, the math of codecs/taco/taco.h in the order of
// codecs/taco/taco.cc (see kernels/warp_rotation.cuh for the layout). The ring hop is the encode
// kernel whose load step first decodes the block from the incoming wire (decode_block, the
// decode kernel's own code) and adds the input to it.
//
// In place (hop dst = its wire source): a warp reads only its block's codes [off, off + len)
// and its (a, s) pair, and writes only those same bytes (plus, block 0, the payload's zero
// pad, which no decoder reads); blocks own disjoint bytes. All its reads happen in
// decode_block, before a __syncwarp that precedes every write of the block.
#include "codecs/taco/taco_kernels.h"

#include "ccompress/error.h"
#include "codecs/fp8/fp8.h"
#include "codecs/registry.h"
#include "codecs/stochastic.h"
#include "codecs/taco/taco.h"
#include "kernels/warp_rotation.cuh"

namespace ccompress::cuda {
namespace {

using codecs::Fp8E4M3;
using codecs::Fp8E5M2;

// v <- the decoded block blk of the wire buffer src (pairs: its (a, s) section): each code
// times s, the inverse rotation, then / a.
template <class F, int kSlots>
__device__ __forceinline__ void decode_block(const uint8_t* src, const float* pairs, int group,
                                             const codecs::RotBlock& blk, float (&v)[kSlots]) {
  const int64_t gi = codecs::scale_groups_before(blk.off, group);
  const float a = pairs[2 * gi], s = pairs[2 * gi + 1];
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    const int j = rot::elem_of(k);
    v[k] = j < blk.len ? __fmul_rn(codecs::fp8_to_float<F>(src[blk.off + j]), s) : 0.0f;
  }
  rot::wht_normalized(v, blk.len);
#pragma unroll
  for (int k = 0; k < kSlots; ++k) v[k] = codecs::div_rn(v[k], a);
}

// dst <- encode(src / divisor); kHop: dst <- encode((decode(wire) + src) / divisor), wire
// possibly dst itself (see the file comment), hence no __restrict__ on dst and pairs.
template <class F, int kSlots, bool kHop>
__global__ void __launch_bounds__(rot::kThreads)
    taco_encode_kernel(const void* __restrict__ src, DType src_dtype, const uint8_t* wire,
                       int64_t n, int group, float divisor, EncodeContext ctx, bool stochastic,
                       uint8_t* dst, float* pairs) {
  const int lane = threadIdx.x & 31;
  const uint64_t prefix = codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank);
  if (blockIdx.x == 0 && n + threadIdx.x < codecs::rot_scales_offset(n)) dst[n + threadIdx.x] = 0;
  const int64_t blocks = codecs::rot_block_count(n, group);
  for (int64_t b = rot::global_warp(); b < blocks; b += rot::grid_warps()) {
    const codecs::RotBlock blk = codecs::rot_block(n, group, b);
    const int len = blk.len;
    float v[kSlots];
    if constexpr (kHop) {
      decode_block<F>(wire, reinterpret_cast<const float*>(wire + codecs::rot_scales_offset(n)),
                      group, blk, v);
      __syncwarp();  // in place: the block's bytes are all read before any lane writes one
    }
    rot::load_block(src, src_dtype, blk.off, len, divisor, v, kHop);
    // sum(x^2) in taco_sum_sq's order: each lane in slot order, then lane l += lane l + off
    // (lanes past the block hold +0, and adding +0 changes nothing).
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < kSlots; ++k)
      if (rot::elem_of(k) < len) ss = __fadd_rn(ss, __fmul_rn(v[k], v[k]));
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
      ss = __fadd_rn(ss, __shfl_down_sync(rot::kFullMask, ss, off));
    ss = __shfl_sync(rot::kFullMask, ss, 0);
    const float a = codecs::taco_prescale<F>(ss, len);
#pragma unroll
    for (int k = 0; k < kSlots; ++k) v[k] = __fmul_rn(a, v[k]);
    rot::wht_normalized(v, len);
    int32_t amax = 0;
#pragma unroll
    for (int k = 0; k < kSlots; ++k)
      if (rot::elem_of(k) < len)
        amax = max(amax, static_cast<int32_t>(codecs::f32_bits(v[k]) & codecs::kF32AbsMask));
    amax = __reduce_max_sync(rot::kFullMask, amax);
    const bool bad = amax >= static_cast<int32_t>(codecs::kF32InfBits);
    const float s = bad ? codecs::taco_nan() : codecs::taco_scale<F>(amax);
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int j = rot::elem_of(k);
      if (j >= len) continue;
      uint8_t q = 0;
      if (!bad) {
        float t = codecs::div_rn(v[k], s);
        q = stochastic ? codecs::fp8_from_float_sr<F>(
                             t, codecs::sr_uniform_at(prefix, ctx.index + blk.off + j))
                       : codecs::fp8_from_float<F>(t);
      }
      dst[blk.off + j] = q;
    }
    if (lane == 0) {
      const int64_t gi = codecs::scale_groups_before(blk.off, group);
      pairs[2 * gi] = bad ? codecs::taco_nan() : a;
      pairs[2 * gi + 1] = s;
    }
  }
}

template <class F, int kSlots, bool kCast>
__global__ void __launch_bounds__(rot::kThreads)
    taco_decode_kernel(const uint8_t* __restrict__ src, int64_t n, int group,
                       const float* __restrict__ pairs, DecodeOut o) {
  const int64_t blocks = codecs::rot_block_count(n, group);
  for (int64_t b = rot::global_warp(); b < blocks; b += rot::grid_warps()) {
    const codecs::RotBlock blk = codecs::rot_block(n, group, b);
    float v[kSlots];
    decode_block<F>(src, pairs, group, blk, v);
    rot::store_block<kCast>(o, blk.off, blk.len, v);
  }
}

void check_taco(const Codec& codec, int64_t n) {
  CC_CHECK(codec.group >= 32 && codec.group <= 512 && (codec.group & (codec.group - 1)) == 0,
           "taco group " << codec.group << " is not a power of two in 32..512");
  CC_CHECK(n >= 0, "element count " << n << " is negative");
}

template <class Fn>
void with_format(const Codec& codec, Fn fn) {
  if (codec.fp8_format == 0) {
    fn(Fp8E4M3{});
  } else {
    fn(Fp8E5M2{});
  }
}

}  // namespace

void launch_taco_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                        const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                        cudaStream_t stream) {
  const char* what = wire_in != nullptr ? "taco decode_reduce_encode" : "taco encode";
  check_taco(codec, n);
  if (n == 0) return;
  CC_CHECK(reinterpret_cast<uintptr_t>(dst) % 4 == 0 && reinterpret_cast<uintptr_t>(wire_in) % 4 == 0,
           "wire buffers must be 4-byte aligned");
  uint8_t* wire = static_cast<uint8_t*>(dst);
  float* pairs = reinterpret_cast<float*>(wire + codecs::rot_scales_offset(n));
  const uint8_t* in = static_cast<const uint8_t*>(wire_in);
  const int grid = rot::grid_for_blocks(codecs::rot_block_count(n, codec.group));
  with_format(codec, [&](auto fmt) {
    rot::with_slots(codec.group, [&](auto slots) {
      with_flag(in != nullptr, [&](auto hop) {
        taco_encode_kernel<decltype(fmt), decltype(slots)::value, decltype(hop)::value>
            <<<grid, rot::kThreads, 0, stream>>>(src, src_dtype, in, n, codec.group, divisor,
                                                 ctx, codec.stochastic, wire, pairs);
      });
    });
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

void launch_taco_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                        cudaStream_t stream) {
  const char* what = o.out != nullptr ? "taco decode" : "taco decode_accumulate";
  check_taco(codec, n);
  if (n == 0) return;
  CC_CHECK(reinterpret_cast<uintptr_t>(src) % 4 == 0, "wire buffer must be 4-byte aligned");
  const uint8_t* wire = static_cast<const uint8_t*>(src);
  const float* pairs = reinterpret_cast<const float*>(wire + codecs::rot_scales_offset(n));
  const int grid = rot::grid_for_blocks(codecs::rot_block_count(n, codec.group));
  with_format(codec, [&](auto fmt) {
    rot::with_slots(codec.group, [&](auto slots) {
      with_flag(o.out != nullptr, [&](auto cast) {
        taco_decode_kernel<decltype(fmt), decltype(slots)::value, decltype(cast)::value>
            <<<grid, rot::kThreads, 0, stream>>>(wire, n, codec.group, pairs, o);
      });
    });
  });
  CC_CUDA_CHECK_LAUNCH(what);
}

namespace {

void encode_op(const void* src, DType src_dtype, const void* wire_in, int64_t n, const Codec& c,
               float divisor, const EncodeContext& ctx, void* dst, void*, cudaStream_t s) {
  launch_taco_encode(src, src_dtype, wire_in, n, c, divisor, ctx, dst, s);
}

constexpr DeviceOps kDeviceOps = {encode_op, launch_taco_decode, false};
[[maybe_unused]] const bool kAttached = attach_device_ops("taco", kDeviceOps);

}  // namespace

}  // namespace ccompress::cuda
