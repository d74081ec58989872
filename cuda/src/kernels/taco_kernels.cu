// TACO encode / decode kernels: one warp per group (= rotation block), everything in
// registers, one read and one write per element, the math of codecs/taco.h in the order of
// cpu/taco_cpu.cc (see kernels/warp_rotation.cuh for the layout).
#include "kernels/taco_kernels.h"

#include "ccompress/error.h"
#include "codecs/fp8.h"
#include "codecs/stochastic.h"
#include "codecs/taco.h"
#include "kernels/warp_rotation.cuh"

namespace ccompress::cuda {
namespace {

using codecs::Fp8E4M3;
using codecs::Fp8E5M2;

template <class F, int kSlots>
__global__ void __launch_bounds__(rot::kThreads)
    taco_encode_kernel(const void* __restrict__ src, DType src_dtype, int64_t n, int group,
                       float divisor, EncodeContext ctx, bool stochastic,
                       uint8_t* __restrict__ dst, float* __restrict__ pairs) {
  const int lane = threadIdx.x & 31;
  const uint64_t prefix = codecs::sr_prefix(ctx.seed, ctx.step, ctx.rank);
  if (blockIdx.x == 0 && n + threadIdx.x < codecs::rot_scales_offset(n)) dst[n + threadIdx.x] = 0;
  const int64_t blocks = codecs::rot_block_count(n, group);
  for (int64_t b = rot::global_warp(); b < blocks; b += rot::grid_warps()) {
    const codecs::RotBlock blk = codecs::rot_block(n, group, b);
    const int len = blk.len;
    float v[kSlots];
    rot::load_block(src, src_dtype, blk.off, len, divisor, v);
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

template <class F, int kSlots>
__global__ void __launch_bounds__(rot::kThreads)
    taco_decode_kernel(const uint8_t* __restrict__ src, int64_t n, int group,
                       const float* __restrict__ pairs, float* __restrict__ acc, bool assign) {
  const int64_t blocks = codecs::rot_block_count(n, group);
  for (int64_t b = rot::global_warp(); b < blocks; b += rot::grid_warps()) {
    const codecs::RotBlock blk = codecs::rot_block(n, group, b);
    const int64_t gi = codecs::scale_groups_before(blk.off, group);
    const float a = pairs[2 * gi], s = pairs[2 * gi + 1];
    float v[kSlots];
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      const int j = rot::elem_of(k);
      v[k] = j < blk.len ? __fmul_rn(codecs::fp8_to_float<F>(src[blk.off + j]), s) : 0.0f;
    }
    rot::wht_normalized(v, blk.len);
#pragma unroll
    for (int k = 0; k < kSlots; ++k) v[k] = codecs::div_rn(v[k], a);
    rot::store_acc(acc, blk.off, blk.len, assign, v);
  }
}

void check_taco(const Codec& codec, int64_t n) {
  CC_CHECK(codec.kind == CodecKind::Taco, "not a taco codec: '" << codec.name() << "'");
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

void launch_taco_encode(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                        float divisor, const EncodeContext& ctx, void* dst, cudaStream_t stream) {
  check_taco(codec, n);
  if (n == 0) return;
  CC_CHECK(reinterpret_cast<uintptr_t>(dst) % 4 == 0, "wire buffer must be 4-byte aligned");
  uint8_t* wire = static_cast<uint8_t*>(dst);
  float* pairs = reinterpret_cast<float*>(wire + codecs::rot_scales_offset(n));
  const int grid = rot::grid_for_blocks(codecs::rot_block_count(n, codec.group));
  with_format(codec, [&](auto fmt) {
    using F = decltype(fmt);
    rot::with_slots(codec.group, [&](auto slots) {
      taco_encode_kernel<F, decltype(slots)::value><<<grid, rot::kThreads, 0, stream>>>(
          src, src_dtype, n, codec.group, divisor, ctx, codec.stochastic, wire, pairs);
    });
  });
  rot::check_launch("taco encode");
}

void launch_taco_decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                   bool assign, cudaStream_t stream) {
  check_taco(codec, n);
  if (n == 0) return;
  CC_CHECK(reinterpret_cast<uintptr_t>(src) % 4 == 0, "wire buffer must be 4-byte aligned");
  const uint8_t* wire = static_cast<const uint8_t*>(src);
  const float* pairs = reinterpret_cast<const float*>(wire + codecs::rot_scales_offset(n));
  const int grid = rot::grid_for_blocks(codecs::rot_block_count(n, codec.group));
  with_format(codec, [&](auto fmt) {
    using F = decltype(fmt);
    rot::with_slots(codec.group, [&](auto slots) {
      taco_decode_kernel<F, decltype(slots)::value>
          <<<grid, rot::kThreads, 0, stream>>>(wire, n, codec.group, pairs, acc, assign);
    });
  });
  rot::check_launch("taco decode_accumulate");
}

}  // namespace ccompress::cuda
