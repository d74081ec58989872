#include "kernels/device_util.h"

#include <cuda_runtime.h>

#include <optional>

#include "ccompress/error.h"
#include "kernels/cuda_backend.h"

namespace ccompress::cuda {

void* device_alloc(int64_t bytes, int device) {
  CC_CHECK(bytes >= 0, "cannot allocate " << bytes << " bytes");
  DeviceGuard g(device);
  void* p = nullptr;
  CC_CUDA_CHECK(cudaMalloc(&p, size_t(bytes > 0 ? bytes : 1)), "cudaMalloc");
  return p;
}

void device_free(void* p, int device) {
  DeviceGuard g(device);
  CC_CUDA_CHECK(cudaFree(p), "cudaFree");
}

namespace {
/// The device of whichever of @p a, @p b is device memory (-1: neither).
int device_of(const void* a, const void* b) {
  for (const void* p : {a, b}) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();  // not memory CUDA knows
      continue;
    }
    if (attr.type == cudaMemoryTypeDevice) return attr.device;
  }
  return -1;
}
}  // namespace

void copy_sync(void* dst, const void* src, int64_t bytes, cudaStream_t stream) {
  if (bytes <= 0) return;
  // On the memory's device: stream 0 is that device's legacy stream, ordered after the work
  // enqueued there, whichever device this thread had current.
  const int device = device_of(dst, src);
  std::optional<DeviceGuard> g;
  if (device >= 0) g.emplace(device);
  CC_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, stream), "cudaMemcpyAsync");
  CC_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void copy_async(void* dst, const void* src, int64_t bytes, cudaStream_t stream) {
  if (bytes <= 0) return;
  CC_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, stream),
             "cudaMemcpyAsync");
}

void stream_synchronize(cudaStream_t stream) {
  CC_CUDA_CHECK(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void device_synchronize(int device) {
  DeviceGuard g(device);
  CC_CUDA_CHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

TimingEvent::TimingEvent(int device) : device_(device) {
  DeviceGuard g(device);
  CC_CUDA_CHECK(cudaEventCreate(&event_), "cudaEventCreate");
}

TimingEvent::~TimingEvent() {
  DeviceGuard g(device_, true);
  cudaEventDestroy(event_);
}

void TimingEvent::record(cudaStream_t stream) {
  DeviceGuard g(device_);
  CC_CUDA_CHECK(cudaEventRecord(event_, stream), "cudaEventRecord");
}

void TimingEvent::block(cudaStream_t stream) {
  DeviceGuard g(device_);
  CC_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0), "cudaStreamWaitEvent");
}

void TimingEvent::synchronize() { CC_CUDA_CHECK(cudaEventSynchronize(event_), "cudaEventSynchronize"); }

float TimingEvent::elapsed_ms(const TimingEvent& start) const {
  float ms = 0.f;
  CC_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_), "cudaEventElapsedTime");
  return ms;
}

}  // namespace ccompress::cuda
