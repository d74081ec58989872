#include "codecs/fp8/fp8_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>

#include "ccompress/error.h"
#include "codecs/float_convert.h"
#include "codecs/fp8/fp8.h"
#include "codecs/fp8/group_codec.h"
#include "codecs/registry.h"
#include "codecs/stochastic.h"
#include "kernels/kernel_util.cuh"

namespace ccompress::cuda {
namespace {

using codecs::Fp8E4M3;
using codecs::Fp8E5M2;

// One block encodes one group at a time; 128 threads cover the default group in one pass
// and the largest (1024) in kMaxPerThread.
constexpr int kEncodeThreads = 128;
constexpr int kWarps = kEncodeThreads / 32;
constexpr int kMaxPerThread = 1024 / kEncodeThreads;
constexpr int kDecodeThreads = 256;
// Grid-stride loops cover any count; this only bounds the launch.
constexpr int64_t kMaxBlocks = int64_t(1) << 20;

// Where an encode reads its values: an input of some dtype, or (the fused ring hop) an FP8
// wire buffer decoded and added to an input, decode(wire) + x in that order, as on the CPU.
struct Fp8Source {
  const void* src = nullptr;  // input (kHop: the addend x)
  DType src_dtype = DType::Float32;
  const uint8_t* wire = nullptr;   // kHop only
  const float* wire_scales = nullptr;
};

// dst may be the hop's own wire buffer (in place): a block reads its whole group into
// registers, and the scale, before the __syncthreads that precedes its writes.
template <class F, bool kHop>
__global__ void __launch_bounds__(kEncodeThreads)
    fp8_encode_kernel(Fp8Source in, int64_t n, int group, float divisor, uint8_t* dst,
                      float* scales, bool stochastic, EncodeContext ctx) {
  __shared__ int32_t warp_amax[kWarps];
  const int tid = threadIdx.x;
  if (blockIdx.x == 0 && n + tid < codecs::fp8_scales_offset(n)) dst[n + tid] = 0;
  const int64_t num_groups = (n + group - 1) / group;
  for (int64_t g = blockIdx.x; g < num_groups; g += gridDim.x) {
    const int64_t off = g * group;
    const int len = static_cast<int>(min(int64_t(group), n - off));
    float v[kMaxPerThread];
    int32_t amax = 0;
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
      int i = tid + k * kEncodeThreads;
      v[k] = 0.0f;
      if (i < len) {
        float x = codecs::load_as_float(in.src, in.src_dtype, off + i);
        if constexpr (kHop)
          x = codecs::add_rn(codecs::group_dequantize<F>(in.wire[off + i], in.wire_scales[g]), x);
        v[k] = divisor != 1.0f ? codecs::div_rn(x, divisor) : x;
        amax = max(amax, codecs::finite_abs_bits(v[k]));
      }
    }
    amax = __reduce_max_sync(0xFFFFFFFFu, amax);
    if ((tid & 31) == 0) warp_amax[tid >> 5] = amax;
    __syncthreads();
#pragma unroll
    for (int w = 0; w < kWarps; ++w) amax = max(amax, warp_amax[w]);
    const float s = codecs::group_scale<F>(amax);
#pragma unroll
    for (int k = 0; k < kMaxPerThread; ++k) {
      int i = tid + k * kEncodeThreads;
      if (i >= len) continue;
      if (stochastic) {  // noise of the run's element off + i, as on the CPU
        float u = codecs::sr_uniform(ctx.seed, ctx.step, ctx.rank, ctx.index + off + i);
        dst[off + i] = codecs::group_quantize_sr<F>(v[k], s, u);
      } else {
        dst[off + i] = codecs::group_quantize<F>(v[k], s);
      }
    }
    if (tid == 0) scales[g] = s;
    __syncthreads();  // warp_amax is reused by the next group
  }
}

constexpr int kDecodeVec = 16;  // elements per thread and step: one 16-byte load of codes

// Each thread decodes 16 consecutive elements: one 16-byte load of their codes and, into
// fp32 accumulators, four 16-byte loads / stores, where the pointers allow (`vec`).
template <class F, bool kCast>
__global__ void __launch_bounds__(kDecodeThreads)
    fp8_decode_kernel(const uint8_t* __restrict__ src, int64_t n, int group,
                      const float* __restrict__ scales, DecodeOut o, bool vec) {
  const int64_t stride = int64_t(gridDim.x) * kDecodeThreads * kDecodeVec;
  for (int64_t i = (int64_t(blockIdx.x) * kDecodeThreads + threadIdx.x) * kDecodeVec; i < n;
       i += stride) {
    const int len = static_cast<int>(min(int64_t(kDecodeVec), n - i));
    const bool full = vec && len == kDecodeVec;
    uint8_t q[kDecodeVec];
    if (full) {
      const uint4 r = *reinterpret_cast<const uint4*>(src + i);
      const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
      for (int k = 0; k < kDecodeVec; ++k) q[k] = static_cast<uint8_t>(w[k >> 2] >> (8 * (k & 3)));
    } else {
#pragma unroll
      for (int k = 0; k < kDecodeVec; ++k) q[k] = k < len ? src[i + k] : 0;
    }
    float v[kDecodeVec];
#pragma unroll
    for (int k = 0; k < kDecodeVec; ++k)
      v[k] = k < len ? codecs::group_dequantize<F>(q[k], scales[(i + k) / group]) : 0.0f;
    if (kCast || !full) {
      for (int k = 0; k < len; ++k) store_decoded<kCast>(o, i + k, v[k]);
    } else {
      float4* a = reinterpret_cast<float4*>(o.acc + i);
#pragma unroll
      for (int k = 0; k < kDecodeVec / 4; ++k) {
        float4 t = make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
        if (!o.assign) {
          const float4 b = a[k];
          t = make_float4(codecs::add_rn(b.x, t.x), codecs::add_rn(b.y, t.y),
                          codecs::add_rn(b.z, t.z), codecs::add_rn(b.w, t.w));
        }
        a[k] = t;
      }
    }
  }
}

void check_fp8(const Codec& codec, int64_t n) {
  CC_CHECK(codec.group >= 16 && codec.group <= 1024,
           "codec group " << codec.group << " is outside 16..1024");
  CC_CHECK(n >= 0, "element count " << n << " is negative");
}


// Blocks for work_items items at per_block items per block, at least 1, at most kMaxBlocks.
int grid_for(int64_t work_items, int per_block) {
  int64_t blocks = (work_items + per_block - 1) / per_block;
  return static_cast<int>(std::min(std::max<int64_t>(blocks, 1), kMaxBlocks));
}

}  // namespace

void launch_fp8_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                       const Codec& codec, float divisor, const EncodeContext& ctx, void* dst,
                       cudaStream_t stream) {
  check_fp8(codec, n);
  if (n == 0) return;
  CC_CHECK(reinterpret_cast<uintptr_t>(dst) % 4 == 0 && reinterpret_cast<uintptr_t>(wire_in) % 4 == 0,
           "wire buffers must be 4-byte aligned");
  const uint8_t* in_wire = static_cast<const uint8_t*>(wire_in);
  const float* in_scales =
      in_wire == nullptr ? nullptr
                         : reinterpret_cast<const float*>(in_wire + codecs::fp8_scales_offset(n));
  const Fp8Source in{src, src_dtype, in_wire, in_scales};
  uint8_t* wire = static_cast<uint8_t*>(dst);
  float* scales = reinterpret_cast<float*>(wire + codecs::fp8_scales_offset(n));
  const int grid = grid_for(ceil_div(n, codec.group), 1);
  with_flag(in_wire != nullptr, [&](auto hop) {
    constexpr bool kHop = decltype(hop)::value;
    if (codec.fp8_format == 0) {
      fp8_encode_kernel<Fp8E4M3, kHop><<<grid, kEncodeThreads, 0, stream>>>(
          in, n, codec.group, divisor, wire, scales, codec.stochastic, ctx);
    } else {
      fp8_encode_kernel<Fp8E5M2, kHop><<<grid, kEncodeThreads, 0, stream>>>(
          in, n, codec.group, divisor, wire, scales, codec.stochastic, ctx);
    }
  });
  CC_CUDA_CHECK_LAUNCH(in_wire != nullptr ? "fp8 decode_reduce_encode" : "fp8 encode");
}

void launch_fp8_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o,
                       cudaStream_t stream) {
  check_fp8(codec, n);
  if (n == 0) return;
  CC_CHECK(reinterpret_cast<uintptr_t>(src) % 4 == 0, "wire buffer must be 4-byte aligned");
  const uint8_t* wire = static_cast<const uint8_t*>(src);
  const float* scales = reinterpret_cast<const float*>(wire + codecs::fp8_scales_offset(n));
  const bool vec = reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(o.acc) % 16 == 0;
  const int grid = grid_for(ceil_div(n, kDecodeVec), kDecodeThreads);
  auto go = [&](auto fmt) {
    using F = decltype(fmt);
    if (o.out != nullptr) {
      fp8_decode_kernel<F, true><<<grid, kDecodeThreads, 0, stream>>>(wire, n, codec.group, scales, o, vec);
    } else {
      fp8_decode_kernel<F, false><<<grid, kDecodeThreads, 0, stream>>>(wire, n, codec.group, scales, o, vec);
    }
  };
  if (codec.fp8_format == 0) {
    go(Fp8E4M3{});
  } else {
    go(Fp8E5M2{});
  }
  CC_CUDA_CHECK_LAUNCH(o.out != nullptr ? "fp8 decode" : "fp8 decode_accumulate");
}

namespace {

void encode_op(const void* src, DType src_dtype, const void* wire_in, int64_t n, const Codec& c,
               float divisor, const EncodeContext& ctx, void* dst, void*, cudaStream_t s) {
  launch_fp8_encode(src, src_dtype, wire_in, n, c, divisor, ctx, dst, s);
}

constexpr DeviceOps kDeviceOps = {encode_op, launch_fp8_decode, false};
[[maybe_unused]] const bool kAttached = attach_device_ops("fp8", kDeviceOps);

}  // namespace

}  // namespace ccompress::cuda
