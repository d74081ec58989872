// The CUDA runtime and device built-ins on the CPU, for running the CUDA backend's own code
// without a GPU (CMake option CCOMPRESS_CUDA_EMULATOR; see cuda/emu/README.md). This header
// stands in for <cuda_runtime.h>: the bindings see the runtime API only; the kernel sources
// (compiled as C++ with __CUDACC__ and __CUDA_ARCH__ defined, their `<<<...>>>` launches
// rewritten to `% ::emu::Config{...}` by rewrite_launches.cmake) also get the keywords,
// thread indices, warp and block primitives and the launch operator.
//
// Semantics are the ones the GPU code relies on, made strict so that mistakes show up:
//  - every CUDA thread is a fiber; a block's fibers run until __syncthreads or a warp
//    primitive, which resolve only when every thread (lane of the mask) has arrived; a
//    lane that exits before a warp primitive its mask names is an error, as is a deadlock;
//  - streams are lazy: enqueued work runs only when something waits for it (a stream or
//    event synchronisation, a stream waiting on an event, a query, a free), so a missing
//    event or synchronisation leaves data unwritten where the GPU might have got lucky;
//  - device memory comes from the host heap, filled with 0xFF (NaN as fp32) so that a read
//    of memory nobody wrote shows, and kernel pointer arguments and copies must lie in it;
//  - copies from or to pageable host memory complete before the call returns, as CUDA's do.
// The emulator counts its own errors (emu_error_count); each is printed to stderr.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// ---- runtime API ----

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
};
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
const char* cudaGetErrorString(cudaError_t err);

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);

cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// The emulated device's shape, for grids sized from it (kernels/kernel_util.cuh's
// occupancy_grid): 4 SMs (a fixed count, every device alike), each holding as many blocks as
// sm_80's limits of 2048 threads and 32 blocks per SM allow (registers and shared memory are
// not modelled). Blocks run one at a time, so a grid of one such wave is also the fastest here.
namespace emu {
constexpr int kSmCount = 4;
constexpr int kSmThreads = 2048;
constexpr int kSmBlocks = 32;
}  // namespace emu
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
template <class T>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, T, int block_size,
                                                          size_t shared) {
  if (blocks == nullptr || block_size <= 0 || block_size > 1024 || shared > 48 * 1024)
    return cudaErrorInvalidValue;
  *blocks = emu::kSmThreads / block_size < emu::kSmBlocks ? emu::kSmThreads / block_size
                                                          : emu::kSmBlocks;
  return cudaSuccess;
}

namespace emu {

/// Errors the emulator found so far (bad launches, divergent barriers, stray pointers).
int64_t emu_error_count();

/// Runtime calls the tests count: what a collective must not do once warm.
struct CallCounts {
  int64_t malloc = 0;              // cudaMalloc and cudaMallocHost
  int64_t free = 0;                // cudaFree and cudaFreeHost (each waits for the device)
  int64_t device_synchronize = 0;  // cudaDeviceSynchronize
  // The work a collective enqueues, for bounds per MiB (tests/cuda/test_launch_bounds.py):
  int64_t launches = 0;       // kernel launches
  int64_t copies = 0;         // cudaMemcpyAsync and cudaMemsetAsync
  int64_t event_creates = 0;  // cudaEventCreate(WithFlags)
  int64_t event_records = 0;  // cudaEventRecord
  int64_t stream_waits = 0;   // cudaStreamWaitEvent
  int64_t nccl_ops = 0;       // operations the NCCL stand-in enqueues (a group counts once)
};
CallCounts emu_call_counts();

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

/// A launch's configuration: `kernel<<<grid, block, shared, stream>>>(args)` is rewritten to
/// `kernel % ::emu::Config{grid, block, shared, stream}(args)`.
struct Config {
  dim3 grid;
  dim3 block;
  size_t shared = 0;
  cudaStream_t stream = nullptr;

  template <class... A>
  auto operator()(A&&... args) const;
};

/// A launch waiting for its kernel: the configuration and the arguments, copied.
template <class... A>
struct Pending {
  Config config;
  std::tuple<A...> args;
};

template <class... A>
auto Config::operator()(A&&... args) const {
  return Pending<std::decay_t<A>...>{*this, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
}

/// Enqueues @p body as a grid of blocks on config.stream; @p pointers are the kernel's raw
/// pointer arguments, which must be null or lie in device memory.
void launch(const Config& config, std::function<void()> body, std::vector<const void*> pointers);

template <class T>
void collect_pointer(std::vector<const void*>& out, const T& v) {
  if constexpr (std::is_pointer_v<T>) out.push_back(static_cast<const void*>(v));
}

/// The launch itself: the arguments convert to the parameter types now, by value, as CUDA
/// copies a kernel's parameters when it is launched.
template <class... P, class... A>
void operator%(void (*kernel)(P...), Pending<A...> p) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
  auto params = std::apply([](auto&... a) { return std::tuple<std::decay_t<P>...>(a...); }, p.args);
  std::vector<const void*> pointers;
  std::apply([&](const auto&... v) { (collect_pointer(pointers, v), ...); }, params);
  launch(p.config, [kernel, params]() { std::apply(kernel, params); }, std::move(pointers));
}

// The calling fiber's position, set by the scheduler before it resumes a fiber.
struct Index {
  unsigned x = 0, y = 0, z = 0;
};
extern Index thread_idx, block_idx;
extern dim3 block_dim, grid_dim;

enum class WarpOp { Sync, ShflXor, ShflIdx, ShflDown, MaxS32, MaxU32, AddU32 };
/// Blocks the calling lane until every lane of @p mask has called the same operation; returns
/// its result for this lane (the value bits of the lane it reads, or the reduction).
uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t bits, int arg, int width);
void block_barrier();

template <class T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a wide type");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
template <class T>
T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

}  // namespace emu

// ---- device code: keywords, indices, built-ins (the kernel sources only) ----
#if defined(__CUDACC__)

#define __host__
#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

using emu::dim3;
#define threadIdx (::emu::thread_idx)
#define blockIdx (::emu::block_idx)
#define blockDim (::emu::block_dim)
#define gridDim (::emu::grid_dim)

struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }

// CUDA's integer min / max for two arguments of one type.
template <class T, class = std::enable_if_t<std::is_integral_v<T>>>
inline T min(T a, T b) {
  return b < a ? b : a;
}
template <class T, class = std::enable_if_t<std::is_integral_v<T>>>
inline T max(T a, T b) {
  return a < b ? b : a;
}

// Round-to-nearest IEEE operations: the host's float arithmetic (built with no contraction).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline unsigned __float_as_uint(float f) { return emu::from_bits<unsigned>(emu::to_bits(f)); }
inline float __uint_as_float(unsigned u) { return emu::from_bits<float>(emu::to_bits(u)); }
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }

inline void __syncthreads() { emu::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu) {
  emu::warp_collective(emu::WarpOp::Sync, mask, 0, 0, 32);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return emu::from_bits<T>(emu::warp_collective(emu::WarpOp::ShflXor, mask, emu::to_bits(v), lane_mask, width));
}
template <class T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return emu::from_bits<T>(emu::warp_collective(emu::WarpOp::ShflIdx, mask, emu::to_bits(v), src_lane, width));
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return emu::from_bits<T>(
      emu::warp_collective(emu::WarpOp::ShflDown, mask, emu::to_bits(v), int(delta), width));
}
inline int __reduce_max_sync(unsigned mask, int v) {
  return emu::from_bits<int>(emu::warp_collective(emu::WarpOp::MaxS32, mask, emu::to_bits(v), 0, 32));
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v) {
  return emu::from_bits<unsigned>(emu::warp_collective(emu::WarpOp::MaxU32, mask, emu::to_bits(v), 0, 32));
}
inline unsigned __reduce_add_sync(unsigned mask, unsigned v) {
  return emu::from_bits<unsigned>(emu::warp_collective(emu::WarpOp::AddU32, mask, emu::to_bits(v), 0, 32));
}
inline int __reduce_add_sync(unsigned mask, int v) {
  return int(__reduce_add_sync(mask, unsigned(v)));
}

// Fibers never run at the same time, so an atomic is a plain read-modify-write.
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  unsigned long long old = *p;
  *p = old + v;
  return old;
}
inline int atomicMax(int* p, int v) {
  int old = *p;
  if (v > old) *p = v;
  return old;
}
inline unsigned atomicMax(unsigned* p, unsigned v) {
  unsigned old = *p;
  if (v > old) *p = v;
  return old;
}
inline unsigned atomicAnd(unsigned* p, unsigned v) {
  unsigned old = *p;
  *p = old & v;
  return old;
}
inline unsigned atomicOr(unsigned* p, unsigned v) {
  unsigned old = *p;
  *p = old | v;
  return old;
}

#endif  // __CUDACC__
