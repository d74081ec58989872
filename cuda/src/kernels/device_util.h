// Small device-memory and timing helpers for the bindings, the GPU tests and perf scripts.
// Plain C++ (no CUDA headers); every failure throws CudaError.
#pragma once

#include <cstdint>

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace ccompress::cuda {

void* device_alloc(int64_t bytes, int device);
void device_free(void* p, int device);
/// Copies between any host and device memory on @p stream and waits for that stream; runs
/// on the device of the memory (stream 0 is that device's legacy stream).
void copy_sync(void* dst, const void* src, int64_t bytes, cudaStream_t stream);
/// Asynchronous device-to-device copy on @p stream (the copy bandwidth baseline).
void copy_async(void* dst, const void* src, int64_t bytes, cudaStream_t stream);
void stream_synchronize(cudaStream_t stream);
/// Waits for all work on @p device, on every stream (cudaDeviceSynchronize).
void device_synchronize(int device);

/// A timing event on one device.
class TimingEvent {
 public:
  explicit TimingEvent(int device);
  ~TimingEvent();
  TimingEvent(const TimingEvent&) = delete;
  TimingEvent& operator=(const TimingEvent&) = delete;
  void record(cudaStream_t stream);
  /// Work enqueued on @p stream from now on waits for the last record.
  void block(cudaStream_t stream);
  void synchronize();
  /// Milliseconds from @p start to this event (both recorded and complete).
  float elapsed_ms(const TimingEvent& start) const;
  cudaEvent_t handle() const { return event_; }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace ccompress::cuda
