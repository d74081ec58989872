#include "transport/device_loopback.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "ccompress/error.h"
#include "transport/device_slice.h"

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
    : InprocTransport(group, rank), mailbox_(std::move(group)), streams_(std::move(streams)) {}

int DeviceLoopbackTransport::post_group(const std::vector<Transfer>& group) {
  DeviceGuard dg(streams_->device());
  // The comm stream waits for the codec stream's work so far: the encodes that filled the
  // sends and the decodes that last read the receive buffers. A copy into this rank runs on
  // this comm stream, enqueued (by whichever end posts second) after that wait, so a receive
  // needs no event of its own; a send carries one, recorded on this comm stream, that also
  // covers the copies into this rank posted before (a forwarded receive).
  streams_->order(streams_->codec(), streams_->comm());
  bool sends = false;
  for (const Transfer& x : group) sends = sends || x.send;
  std::shared_ptr<void> ready = sends ? record_shared_event(streams_->comm()) : nullptr;
  std::vector<std::shared_ptr<InprocGroup::RequestState>> states;
  auto withdraw = [&] {
    for (const auto& st : states) mailbox_->withdraw(st);
  };
  for (const Transfer& x : group) {
    if (x.peer < 0 || x.peer >= size() || x.peer == rank()) {
      withdraw();
      CC_CHECK(false, "peer " << x.peer << " is not another rank of a group of " << size());
    }
    if (x.send) bytes_sent_ += x.bytes;
    states.push_back(x.send ? mailbox_->post(true, rank(), x.peer, x.tag, x.buf, x.bytes, ready)
                            : mailbox_->post(false, x.peer, rank(), x.tag, x.buf, x.bytes));
  }
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(match_timeout_s));
  std::vector<std::shared_ptr<void>> recvs;
  {
    std::unique_lock<std::mutex> lock(mailbox_->mutex());
    auto matched = [&] {
      for (const auto& st : states)
        if (!st->done) return false;
      return true;
    };
    if (!mailbox_->completed().wait_until(lock, deadline, matched)) {
      lock.unlock();
      withdraw();
      CC_CHECK_AS(TimeoutError, false,
                  "rank " << rank() << ": a peer did not post its end of a transfer within "
                          << match_timeout_s << " s; it is missing, stuck or called a "
                          "different collective");
    }
    for (size_t i = 0; i < states.size(); ++i) {
      const auto& st = *states[i];
      CC_CHECK_AS(Error, !st.copy_failed, st.error);
      CC_CHECK_AS(MessageError, st.error.empty(), st.error);
      if (st.pending == nullptr) continue;
      copies_.push_back(st.pending);
      if (!group[i].send) recvs.push_back(st.pending);
    }
  }
  recv_copies_.push_back(std::move(recvs));
  waited_.push_back(false);
  return int(recv_copies_.size()) - 1;
}

void DeviceLoopbackTransport::compute_after(int g) {
  CC_CHECK(g >= 0 && g < int(recv_copies_.size()), "group " << g << " was not posted");
  if (waited_[size_t(g)]) return;
  waited_[size_t(g)] = true;
  DeviceGuard dg(streams_->device());
  for (const auto& copy : recv_copies_[size_t(g)])
    CC_CUDA_CHECK(cudaStreamWaitEvent(streams_->codec(), static_cast<cudaEvent_t>(copy.get()), 0),
                  "loopback: ordering the codec stream after a copy");
}

void DeviceLoopbackTransport::drain(double timeout_s) {
  using Clock = std::chrono::steady_clock;
  std::vector<std::shared_ptr<void>> copies;
  copies.swap(copies_);
  recv_copies_.clear();
  waited_.clear();
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  DeviceGuard dg(streams_->device());
  int spins = 0;
  for (const auto& copy : copies) {
    while (!shared_event_done(copy)) {
      CC_CHECK_AS(TimeoutError, Clock::now() < deadline,
                  "rank " << rank() << ": the collective's copies did not complete within "
                          << timeout_s << " s");
      // Spin briefly (a slice's copy takes microseconds), then yield the core.
      if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

std::shared_ptr<void> DeviceLoopbackTransport::post_ready() {
  DeviceGuard g(streams_->device());
  return record_shared_event(streams_->codec());
}

int64_t DeviceLoopbackTransport::default_slice_bytes() const {
  return device_slice_bytes(kLoopbackSliceBytes);
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
