// Checks of the CPU emulator itself (built into the emulated _cuda module only, as
// _cuda.emulator_selftest(); tests/cuda/test_cuda_emulator.py runs it): the primitives give CUDA's
// results, and the mistakes it exists to catch are caught.
#include "emu_selftest.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace emu {

namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;

__global__ void block_sum_kernel(const int* in, int* out) {
  __shared__ int part[64];
  part[threadIdx.x] = in[blockIdx.x * 64 + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    for (int i = 0; i < 64; ++i) s += part[i];
    out[blockIdx.x] = s;
  }
}

__global__ void shuffle_kernel(int* out) {
  const int lane = threadIdx.x & 31;
  const int v = 100 + lane;
  int* o = out + 5 * lane;
  o[0] = __shfl_xor_sync(kFull, v, 1);
  o[1] = __shfl_sync(kFull, v, 3);
  o[2] = __shfl_down_sync(kFull, v, 1);
  o[3] = __reduce_max_sync(kFull, lane == 7 ? 1000 : v);
  o[4] = int(__reduce_add_sync(kFull, unsigned(lane)));
}

__global__ void early_exit_kernel(int* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(kFull, int(threadIdx.x), 1);
}

__global__ void divergent_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(kFull, int(threadIdx.x), 1);
  }
}

__global__ void fill_kernel(int* p, int n, int value) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = value;
}

std::vector<int> read(const int* device, int n) {
  std::vector<int> host(size_t(n), 0);
  cudaMemcpyAsync(host.data(), device, size_t(n) * 4, cudaMemcpyDeviceToHost, nullptr);
  cudaStreamSynchronize(nullptr);
  return host;
}

}  // namespace

std::map<std::string, bool> selftest() {
  std::map<std::string, bool> r;
  int* d = nullptr;
  int* e = nullptr;
  cudaMalloc(reinterpret_cast<void**>(&d), 4096 * 4);
  cudaMalloc(reinterpret_cast<void**>(&e), 4096 * 4);
  cudaStream_t a = nullptr, b = nullptr;
  cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);

  // Device memory starts as 0xFF bytes.
  r["fresh_memory_is_0xff"] = read(d, 1)[0] == -1;

  std::vector<int> in(256);
  for (int i = 0; i < 256; ++i) in[size_t(i)] = i;
  cudaMemcpyAsync(d, in.data(), 256 * 4, cudaMemcpyHostToDevice, nullptr);
  block_sum_kernel % Config{4, 64, 0, nullptr}(d, e);
  std::vector<int> sums = read(e, 4);
  bool ok = true;
  for (int blk = 0; blk < 4; ++blk) ok &= sums[size_t(blk)] == 64 * 64 * blk + 63 * 64 / 2;
  r["block_barrier_sum"] = ok && cudaGetLastError() == cudaSuccess;

  shuffle_kernel % Config{1, 32, 0, nullptr}(d);
  std::vector<int> sh = read(d, 160);
  ok = true;
  for (int lane = 0; lane < 32; ++lane) {
    const int* o = sh.data() + 5 * lane;
    ok &= o[0] == 100 + (lane ^ 1) && o[1] == 103 && o[2] == 100 + (lane < 31 ? lane + 1 : lane) &&
          o[3] == 1000 && o[4] == 31 * 32 / 2;
  }
  r["warp_primitives"] = ok;

  // The device's shape: 4 SMs, blocks per SM from sm_80's thread and block limits.
  int sms = 0, per_sm_256 = 0, per_sm_32 = 0, per_sm_bad = -1, unused = 0;
  ok = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0) == cudaSuccess &&
       sms == kSmCount;
  ok &= cudaDeviceGetAttribute(&unused, cudaDevAttrMultiProcessorCount, 1 << 20) ==
        cudaErrorInvalidDevice;
  ok &= cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_256, fill_kernel, 256, 0) ==
            cudaSuccess && per_sm_256 == 8;
  ok &= cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_32, fill_kernel, 32, 0) ==
            cudaSuccess && per_sm_32 == 32;
  ok &= cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_bad, fill_kernel, 2048, 0) ==
        cudaErrorInvalidValue;
  r["device_shape_and_occupancy"] = ok;

  // Mistakes: each must be an error of the launch or of the next synchronisation.
  const int64_t before = emu_error_count();
  early_exit_kernel % Config{1, 32, 0, nullptr}(d);
  r["exited_lane_in_mask_is_an_error"] = cudaStreamSynchronize(nullptr) == cudaErrorLaunchFailure;
  divergent_kernel % Config{1, 32, 0, nullptr}(d);
  r["barrier_against_warp_op_is_an_error"] = cudaStreamSynchronize(nullptr) == cudaErrorLaunchFailure;
  fill_kernel % Config{1, 32, 0, nullptr}(in.data(), 4, 1);
  r["host_pointer_argument_is_an_error"] = cudaGetLastError() == cudaErrorInvalidValue;
  r["copy_past_an_allocation_is_an_error"] =
      cudaMemcpyAsync(e, d, 4097 * 4, cudaMemcpyDeviceToDevice, a) == cudaErrorInvalidValue;
  cudaGetLastError();
  r["errors_counted"] = emu_error_count() == before + 4;

  // Lazy streams: a copy on b that does not wait for a's kernel copies the old bytes; after
  // an event it copies the kernel's.
  cudaMemsetAsync(d, 0, 64 * 4, nullptr);
  cudaMemsetAsync(e, 0, 64 * 4, nullptr);
  cudaStreamSynchronize(nullptr);
  fill_kernel % Config{1, 32, 0, a}(d, 64, 7);
  cudaMemcpyAsync(e, d, 64 * 4, cudaMemcpyDeviceToDevice, b);
  cudaStreamSynchronize(b);
  r["unordered_streams_see_old_data"] = read(e, 1)[0] == 0;
  cudaEvent_t ev = nullptr;
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  cudaEventRecord(ev, a);
  cudaStreamWaitEvent(b, ev, 0);
  cudaMemcpyAsync(e, d, 64 * 4, cudaMemcpyDeviceToDevice, b);
  cudaStreamSynchronize(b);
  r["event_orders_streams"] = read(e, 64)[63] == 7;

  cudaEventDestroy(ev);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  cudaFree(d);
  cudaFree(e);
  return r;
}

}  // namespace emu
