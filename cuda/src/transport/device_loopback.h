// One-GPU loopback: N virtual ranks as threads of this process, each with its own codec and
// comm streams and CUDA backend, exchanging device buffers through the in-process mailbox.
// Posting a send or receive records an event on the poster's codec stream (after the encode
// that filled a send buffer, after the decode that last read a receive buffer); the
// receiver's comm stream waits for both, copies device to device and records the completion
// event that both requests poll. The whole CUDA pipeline runs as it would over
// NCCL, for tests and timing on a single GPU.
#pragma once

#include <memory>
#include <vector>

#include "kernels/cuda_backend.h"
#include "transport/inproc_transport.h"

namespace ccompress::cuda {

/// A CUDA event as a shared handle (destroyed with its last holder); recorded on @p stream.
std::shared_ptr<void> record_shared_event(cudaStream_t stream);

/// Whether the work before a shared event has finished (throws CudaError on a fault).
bool shared_event_done(const std::shared_ptr<void>& event);

/// One rank of a loopback group.
class DeviceLoopbackTransport : public InprocTransport {
 public:
  DeviceLoopbackTransport(std::shared_ptr<InprocGroup> group, int rank,
                          std::shared_ptr<RankStreams> streams);
  std::string name() const override { return "cuda_loopback"; }

 protected:
  std::shared_ptr<void> post_ready() override;
  bool copy_finished(const std::shared_ptr<void>& pending) override;

 private:
  std::shared_ptr<RankStreams> streams_;
};

/// The group: every rank's streams, backend and transport, all on @p device.
struct LoopbackGroup {
  LoopbackGroup(int size, int device);
  std::vector<std::shared_ptr<RankStreams>> streams;
  std::vector<std::shared_ptr<CudaBackend>> backends;
  std::vector<std::shared_ptr<DeviceLoopbackTransport>> transports;
};

}  // namespace ccompress::cuda
