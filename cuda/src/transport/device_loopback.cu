#include "transport/device_loopback.h"

#include <cuda_runtime.h>

#include <cstring>

#include "ccompress/error.h"

namespace ccompress::cuda {

namespace {

bool is_device_memory(const void* p) {
  cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

// Copies on the receiver's comm stream after the sender's ready event. Host-to-host
// messages (the call headers every collective exchanges first) are copied at once.
class DeviceCopier : public InprocCopier {
 public:
  explicit DeviceCopier(std::vector<std::shared_ptr<RankStreams>> ranks)
      : ranks_(std::move(ranks)) {}

  std::shared_ptr<void> copy(void* dst, const void* src, int64_t bytes,
                             const std::shared_ptr<void>& send_ready,
                             const std::shared_ptr<void>& recv_ready, int dst_rank) override {
    if (!is_device_memory(dst) && !is_device_memory(src)) {
      std::memcpy(dst, src, size_t(bytes));
      return nullptr;
    }
    RankStreams& r = *ranks_.at(size_t(dst_rank));
    DeviceGuard g(r.device());
    for (const auto* ready : {&send_ready, &recv_ready})
      if (*ready != nullptr)
        CC_CUDA_CHECK(cudaStreamWaitEvent(r.comm(), static_cast<cudaEvent_t>(ready->get()), 0),
                   "loopback: ordering a copy after the work posted before it");
    CC_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDefault, r.comm()),
               "loopback copy");
    return record_shared_event(r.comm());
  }

 private:
  std::vector<std::shared_ptr<RankStreams>> ranks_;
};

}  // namespace

std::shared_ptr<void> record_shared_event(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  CC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  std::shared_ptr<void> handle(e, [](void* p) { cudaEventDestroy(static_cast<cudaEvent_t>(p)); });
  CC_CUDA_CHECK(cudaEventRecord(e, stream), "cudaEventRecord");
  return handle;
}

bool shared_event_done(const std::shared_ptr<void>& event) {
  cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event.get()));
  if (err == cudaErrorNotReady) return false;
  CC_CUDA_CHECK(err, "an asynchronous copy or kernel");
  return true;
}

DeviceLoopbackTransport::DeviceLoopbackTransport(std::shared_ptr<InprocGroup> group, int rank,
                                                 std::shared_ptr<RankStreams> streams)
    : InprocTransport(std::move(group), rank), streams_(std::move(streams)) {}

std::shared_ptr<void> DeviceLoopbackTransport::post_ready() {
  DeviceGuard g(streams_->device());
  return record_shared_event(streams_->codec());
}

bool DeviceLoopbackTransport::copy_finished(const std::shared_ptr<void>& pending) {
  return shared_event_done(pending);
}

LoopbackGroup::LoopbackGroup(int size, int device) {
  CC_CHECK(size >= 1, "a loopback group needs at least one rank, got " << size);
  for (int r = 0; r < size; ++r) streams.push_back(std::make_shared<RankStreams>(device));
  auto group = std::make_shared<InprocGroup>(size, std::make_shared<DeviceCopier>(streams));
  for (int r = 0; r < size; ++r) {
    backends.push_back(std::make_shared<CudaBackend>(streams[r]));
    transports.push_back(std::make_shared<DeviceLoopbackTransport>(group, r, streams[r]));
  }
}

}  // namespace ccompress::cuda
