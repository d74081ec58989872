// Element-wise kernels: each thread owns runs of 8 consecutive elements, read and written
// with 16-byte vector accesses when every pointer is 16-byte aligned (scalar accesses for
// the tail and for unaligned pointers), in a grid-stride loop that covers any count.
#include "kernels/elementwise_kernels.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "ccompress/error.h"
#include "codecs/feedback.h"
#include "codecs/float_convert.h"
#include "codecs/stochastic.h"
#include "kernels/exact_div.cuh"
#include "kernels/kernel_util.cuh"

namespace ccompress::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;  // elements per thread and step

template <DType T>
__device__ __forceinline__ float load1(const void* p, int64_t i) {
  if constexpr (T == DType::Float32) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (T == DType::BFloat16) {
    return codecs::bf16_to_float(static_cast<const uint16_t*>(p)[i]);
  } else {
    return codecs::f16_to_float(static_cast<const uint16_t*>(p)[i]);
  }
}

template <DType T>
__device__ __forceinline__ uint16_t to16(float f, bool sr, uint64_t prefix, int64_t index) {
  if (sr) {
    const float u = codecs::sr_uniform_at(prefix, index);
    return T == DType::BFloat16 ? codecs::bf16_from_float_sr(f, u)
                                : codecs::f16_from_float_sr(f, u);
  }
  return T == DType::BFloat16 ? codecs::bf16_from_float(f) : codecs::f16_from_float(f);
}

template <DType T>
__device__ __forceinline__ void store1(void* p, int64_t i, float f, bool sr, uint64_t prefix,
                                       int64_t index) {
  if constexpr (T == DType::Float32) {
    static_cast<float*>(p)[i] = f;
  } else {
    static_cast<uint16_t*>(p)[i] = to16<T>(f, sr, prefix, index);
  }
}

template <DType T>
__device__ __forceinline__ void store8(void* p, int64_t i, const float (&v)[kVec], bool sr,
                                       uint64_t prefix, int64_t index) {
  if constexpr (T == DType::Float32) {
    float4* q = reinterpret_cast<float4*>(static_cast<float*>(p) + i);
    q[0] = make_float4(v[0], v[1], v[2], v[3]);
    q[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k)
      w[k] = uint32_t(to16<T>(v[2 * k], sr, prefix, index + 2 * k)) |
             (uint32_t(to16<T>(v[2 * k + 1], sr, prefix, index + 2 * k + 1)) << 16);
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p) + i) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// dst <- cast((src [+ x]) [/ divisor]); src and dst may be the same buffer (each thread
// reads its elements before writing them), hence no __restrict__. The addend is read with a per-element dtype switch
// (it only appears in the raw ring hop, where x is the caller's input).
template <DType S, DType D>
__global__ void __launch_bounds__(kThreads)
    cast_kernel(const void* src, const void* x, DType x_dtype, int64_t n, float divisor,
                void* dst, bool vec, bool sr,
                uint64_t prefix, int64_t index0) {
  const int64_t stride = int64_t(gridDim.x) * kThreads * kVec;
  // exact_div, not the IEEE division's call: registers live across that call spill (sm_90)
  const Divisor div = prepare_divisor(divisor);
  for (int64_t i = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * kVec; i < n; i += stride) {
    float v[kVec];
    const int len = static_cast<int>(min(int64_t(kVec), n - i));
    const bool full = vec && len == kVec;
    load_run8_as_float<S>(src, i, len, vec, v);
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      if (x != nullptr && k < len) v[k] = codecs::add_rn(v[k], codecs::load_as_float(x, x_dtype, i + k));
      if (divisor != 1.0f) v[k] = exact_div(v[k], div);
    }
    if (full) {
      store8<D>(dst, i, v, sr, prefix, index0 + i);
    } else {
      for (int k = 0; k < len; ++k) store1<D>(dst, i + k, v[k], sr, prefix, index0 + i + k);
    }
  }
}

template <DType S>
__global__ void __launch_bounds__(kThreads)
    accumulate_kernel(const void* __restrict__ src, int64_t n, float* __restrict__ acc,
                      bool assign, bool vec) {
  const int64_t stride = int64_t(gridDim.x) * kThreads * kVec;
  for (int64_t i = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * kVec; i < n; i += stride) {
    const int len = static_cast<int>(min(int64_t(kVec), n - i));
    if (vec && len == kVec) {
      float v[kVec], a[kVec];
      load8_as_float<S>(src, i, v);
      if (!assign) {
        load8_as_float<DType::Float32>(acc, i, a);
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = codecs::add_rn(a[k], v[k]);
      }
      store8<DType::Float32>(acc, i, v, false, 0, 0);
    } else {
      for (int k = 0; k < len; ++k) {
        const float v = load1<S>(src, i + k);
        acc[i + k] = assign ? v : codecs::add_rn(acc[i + k], v);
      }
    }
  }
}

// Adds this block's total of the per-thread counts @p c to *count: one atomic per block.
__device__ __forceinline__ void add_block_count(unsigned c, int64_t* count) {
  __shared__ unsigned warp_sum[kThreads / 32];
  c = __reduce_add_sync(0xFFFFFFFFu, c);
  if ((threadIdx.x & 31) == 0) warp_sum[threadIdx.x >> 5] = c;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sum[w];
    if (total != 0) atomicAdd(reinterpret_cast<unsigned long long*>(count), total);
  }
}

// A thread counts at most kVec elements per grid stride of 2^27 elements, so for any n below
// 2^48 its count stays below 2^24 and a warp's below 2^29: unsigned does not wrap.
template <DType T>
__global__ void __launch_bounds__(kThreads)
    count_nonfinite_kernel(const void* __restrict__ src, int64_t n, bool vec, int64_t* count) {
  const int64_t stride = int64_t(gridDim.x) * kThreads * kVec;
  unsigned c = 0;
  for (int64_t i = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * kVec; i < n; i += stride) {
    const int len = static_cast<int>(min(int64_t(kVec), n - i));
    float v[kVec];
    load_run8_as_float<T>(src, i, len, vec, v);
    // A 16-bit NaN or Inf widens to an fp32 NaN or Inf and nothing else does.
#pragma unroll
    for (int k = 0; k < kVec; ++k) c += codecs::f32_is_finite(v[k]) ? 0u : 1u;
  }
  add_block_count(c, count);
}

__global__ void __launch_bounds__(kThreads)
    feedback_residual_kernel(const float* __restrict__ v, const float* __restrict__ decoded,
                             int64_t n, bool vec, float* __restrict__ residual, int64_t* count) {
  const int64_t stride = int64_t(gridDim.x) * kThreads * kVec;
  unsigned c = 0;
  for (int64_t i = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * kVec; i < n; i += stride) {
    const int len = static_cast<int>(min(int64_t(kVec), n - i));
    if (vec && len == kVec) {
      float a[kVec], d[kVec], r[kVec];
      load8_as_float<DType::Float32>(v, i, a);
      load8_as_float<DType::Float32>(decoded, i, d);
#pragma unroll
      for (int k = 0; k < kVec; ++k) c += codecs::feedback_residual_of(a[k], d[k], &r[k]) ? 1u : 0u;
      store8<DType::Float32>(residual, i, r, false, 0, 0);
    } else {
      for (int k = 0; k < len; ++k)
        c += codecs::feedback_residual_of(v[i + k], decoded[i + k], residual + i + k) ? 1u : 0u;
    }
  }
  add_block_count(c, count);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Blocks of work for n elements; a launch takes occupancy_grid of them (grid-stride loops
// cover the rest).
int64_t work_blocks(int64_t n) { return ceil_div(ceil_div(n, kVec), kThreads); }


}  // namespace

void launch_cast(const void* src, DType src_dtype, const void* x, DType x_dtype, int64_t n,
                 float divisor, void* dst, DType dst_dtype, const CastRounding& rounding,
                 cudaStream_t stream) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (n == 0) return;
  // A cast to the same dtype is a copy, bits and all (the CPU backend's memmove), rounding
  // mode or not.
  if (src_dtype == dst_dtype && x == nullptr && divisor == 1.0f) {
    if (src == dst) return;
    CC_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(n) * dtype_size(src_dtype),
                                  cudaMemcpyDeviceToDevice, stream),
                  "the cast's copy");
    return;
  }
  CC_CHECK(!rounding.stochastic || dst_dtype != DType::Float32,
           "stochastic rounding needs a 16-bit destination, got float32");
  const bool vec = aligned16(src) && aligned16(dst);
  const uint64_t prefix =
      codecs::sr_prefix(rounding.ctx.seed, rounding.ctx.step, rounding.ctx.rank);
  with_dtype(src_dtype, [&](auto s) {
    with_dtype(dst_dtype, [&](auto d) {
      auto kernel = cast_kernel<decltype(s)::value, decltype(d)::value>;
      kernel<<<occupancy_grid(kernel, kThreads, work_blocks(n)), kThreads, 0, stream>>>(
          src, x, x_dtype, n, divisor, dst, vec, rounding.stochastic, prefix, rounding.ctx.index);
    });
  });
  CC_CUDA_CHECK_LAUNCH("cast");
}

void launch_accumulate(const void* src, DType src_dtype, int64_t n, float* acc, bool assign,
                       cudaStream_t stream) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (n == 0) return;
  const bool vec = aligned16(src) && aligned16(acc);
  with_dtype(src_dtype, [&](auto s) {
    auto kernel = accumulate_kernel<decltype(s)::value>;
    kernel<<<occupancy_grid(kernel, kThreads, work_blocks(n)), kThreads, 0, stream>>>(
        src, n, acc, assign, vec);
  });
  CC_CUDA_CHECK_LAUNCH("accumulate");
}

void launch_count_nonfinite(const void* src, DType t, int64_t n, int64_t* count,
                            cudaStream_t stream) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (n == 0) return;
  with_dtype(t, [&](auto d) {
    auto kernel = count_nonfinite_kernel<decltype(d)::value>;
    kernel<<<occupancy_grid(kernel, kThreads, work_blocks(n)), kThreads, 0, stream>>>(
        src, n, aligned16(src), count);
  });
  CC_CUDA_CHECK_LAUNCH("count_nonfinite");
}

void launch_feedback_residual(const float* v, const float* decoded, int64_t n, float* residual,
                              int64_t* count, cudaStream_t stream) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  if (n == 0) return;
  const bool vec = aligned16(v) && aligned16(decoded) && aligned16(residual);
  feedback_residual_kernel<<<occupancy_grid(feedback_residual_kernel, kThreads, work_blocks(n)),
                             kThreads, 0, stream>>>(v, decoded, n, vec, residual, count);
  CC_CUDA_CHECK_LAUNCH("feedback_residual");
}

}  // namespace ccompress::cuda
