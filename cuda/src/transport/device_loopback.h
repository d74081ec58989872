// One-GPU loopback: N virtual ranks as threads of this process, each with its own codec and
// comm streams and CUDA backend, exchanging device buffers through the in-process mailbox.
// The payload moves through the ordered interface, as over NCCL: a group of transfers is
// posted after the codec work issued so far (the poster's comm stream waits for its codec
// stream; a group with sends records one event there, after the encodes that filled them and
// the copies into this rank posted before); the receiver's comm stream waits for the
// sender's event and copies device to device, recording a completion event that the
// receiver's codec stream waits on before it reads the message (compute_after). The host waits only for the peers
// to post (matching), never for the GPU inside a collective, so the codec stream encodes the
// next slice while the comm stream copies the previous one; drain() waits for the copies at
// the end. The small host messages of the call check go through isend/irecv (copied at once).
// The whole CUDA pipeline runs as it would over NCCL, for tests and timing on a single GPU.
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
class DeviceLoopbackTransport : public InprocTransport, public OrderedTransport {
 public:
  DeviceLoopbackTransport(std::shared_ptr<InprocGroup> group, int rank,
                          std::shared_ptr<RankStreams> streams);
  std::string name() const override { return "cuda_loopback"; }
  OrderedTransport* ordered() override { return this; }
  /// Posts the group's transfers with one readiness event and waits (on the host) until
  /// every peer has posted its end: each copy is then enqueued on its receiver's comm
  /// stream. TimeoutError after match_timeout_s without a match.
  int post_group(const std::vector<Transfer>& group) override;
  /// Seconds post_group waits for the peers' ends: the call's timeout
  /// (run_device_collective sets it from CollectiveOptions::timeout_s).
  double match_timeout_s = 300.0;
  /// The codec stream waits for the copies into group @p g's receive buffers.
  void compute_after(int g) override;
  /// Waits for every copy of this call (the ones that read this rank's sends too).
  void drain(double timeout_s) override;
  /// kLoopbackSliceBytes, or CCOMPRESS_DEVICE_SLICE_MB (transport/device_slice.h).
  int64_t default_slice_bytes() const override;

 protected:
  std::shared_ptr<void> post_ready() override;
  bool copy_finished(const std::shared_ptr<void>& pending) override;

 private:
  std::shared_ptr<InprocGroup> mailbox_;
  std::shared_ptr<RankStreams> streams_;
  // The current call's groups: the completion events of each group's receives, whether the
  // codec stream already waits for them, and every copy this rank takes part in.
  std::vector<std::vector<std::shared_ptr<void>>> recv_copies_;
  std::vector<bool> waited_;
  std::vector<std::shared_ptr<void>> copies_;
};

/// The group: every rank's streams, backend and transport, all on @p device.
struct LoopbackGroup {
  LoopbackGroup(int size, int device);
  std::vector<std::shared_ptr<RankStreams>> streams;
  std::vector<std::shared_ptr<CudaBackend>> backends;
  std::vector<std::shared_ptr<DeviceLoopbackTransport>> transports;
};

}  // namespace ccompress::cuda
