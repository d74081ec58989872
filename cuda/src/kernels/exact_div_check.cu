// The device-side check of kernels/exact_div.cuh (exact_div_check.h).
#include "kernels/exact_div_check.h"

#include <cuda_runtime.h>

#include "ccompress/error.h"
#include "kernels/cuda_backend.h"
#include "kernels/device_util.h"
#include "kernels/exact_div.cuh"
#include "kernels/kernel_util.cuh"

// The kernel is a test's, not a codec kernel: it sits outside ccompress::cuda, where
// tests/cuda/test_sass.py holds every `*_kernel` to the codec kernels' rules (wide loads).
namespace ccompress::cuda_checks {

template <bool kGeneral>
__global__ void exact_div_check_kernel(const float* __restrict__ a, const float* __restrict__ b,
                                       int64_t n, float* __restrict__ out) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if constexpr (kGeneral) {
      out[i] = cuda::exact_div_detail::div_general(a[i], b[i]);
    } else {
      out[i] = cuda::exact_div(a[i], cuda::prepare_divisor(b[i]));
    }
  }
}

}  // namespace ccompress::cuda_checks

namespace ccompress::cuda {

namespace {

constexpr int kThreads = 256;

/// Device memory, released when it goes out of scope.
struct DeviceArray {
  DeviceArray(int64_t bytes, int device) : p(device_alloc(bytes, device)), device(device) {}
  ~DeviceArray() {
    DeviceGuard g(device, /*quiet=*/true);
    cudaFree(p);  // quietly: a destructor does not throw
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  void* p;
  int device;
};

}  // namespace

void exact_div_check(const float* a, const float* b, int64_t n, ExactDivPath path, float* out,
                     int device) {
  CC_CHECK(n >= 0, "exact_div_check: n must be >= 0, got " << n);
  if (n == 0) return;
  const int64_t bytes = n * int64_t(sizeof(float));
  DeviceArray da(bytes, device), db(bytes, device), dout(bytes, device);
  DeviceGuard g(device);
  // All on the device's legacy stream (0), in order; copy_sync waits for it.
  copy_sync(da.p, a, bytes, nullptr);
  copy_sync(db.p, b, bytes, nullptr);
  const auto* pa = static_cast<const float*>(da.p);
  const auto* pb = static_cast<const float*>(db.p);
  auto* po = static_cast<float*>(dout.p);
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  auto* kernel = path == ExactDivPath::kGeneral ? cuda_checks::exact_div_check_kernel<true>
                                                : cuda_checks::exact_div_check_kernel<false>;
  kernel<<<occupancy_grid(kernel, kThreads, blocks), kThreads, 0, nullptr>>>(pa, pb, n, po);
  CC_CUDA_CHECK(cudaGetLastError(), "the exact_div_check kernel's launch");
  copy_sync(out, dout.p, bytes, nullptr);
}

}  // namespace ccompress::cuda
