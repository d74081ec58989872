// NCCL transport: payload moves as grouped ncclSend/ncclRecv on the rank's comm stream
// (OrderedTransport, driven by the ordered executor); the small host messages of the call
// check go through isend/irecv, staged in pinned and device memory and sent as one group at
// the first wait. Waiting polls the groups' events and ncclCommGetAsyncError; an error or a
// timeout aborts the communicator (ncclCommAbort), after which every call raises NcclError.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ccompress/transport.h"
#include "kernels/cuda_backend.h"
#include "transport/nccl_library.h"

namespace ccompress::cuda {

class NcclTransport : public Transport, public OrderedTransport {
 public:
  /// Joins the NCCL communicator of @p id as @p rank of @p size on streams->device();
  /// collective: every rank must call it with the same id.
  NcclTransport(std::shared_ptr<const NcclLibrary> lib, const NcclUniqueId& id, int size,
                int rank, std::shared_ptr<RankStreams> streams);
  ~NcclTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  OrderedTransport* ordered() override { return this; }
  /// kNcclSliceBytes, or CCOMPRESS_DEVICE_SLICE_MB (transport/device_slice.h).
  int64_t default_slice_bytes() const override;

  // Host messages (the call check): queued, sent as one group by the first wait.
  Request isend(int peer, const void* buf, int64_t bytes, int tag) override;
  Request irecv(int peer, void* buf, int64_t bytes, int tag) override;
  std::vector<size_t> wait_some(const std::vector<Request>& reqs, double timeout_s) override;
  std::vector<size_t> test_some(const std::vector<Request>& reqs) override;
  void cancel(const std::vector<Request>& reqs) override;
  /// A one-element ncclAllReduce, waited for (300 s).
  void barrier() override;

  int post_group(const std::vector<Transfer>& group) override;
  void compute_after(int g) override;
  void drain(double timeout_s) override;

  /// out <- sum of in over ranks, plain ncclAllReduce of float32 on the comm stream after
  /// @p caller's work, which then waits for it: the uncompressed baseline.
  void nccl_allreduce(const float* in, float* out, int64_t n, cudaStream_t caller);
  const NcclLibrary& library() const { return *lib_; }

 private:
  struct Queued {
    bool send;
    int peer;
    void* host;
    int64_t bytes;
    Request id;
  };
  void check_usable() const;
  void start_host_group();
  /// Posts @p group on @p s as one NCCL group; on any failure aborts the communicator
  /// (the rank's messages are out of step with its peers') and rethrows.
  void post_or_abort(const std::vector<Transfer>& group, cudaStream_t s);
  /// Polls @p event until done; aborts on an NCCL error or after @p timeout_s.
  void wait_event(cudaEvent_t event, double timeout_s, const char* what);
  [[noreturn]] void abort_and_throw(const std::string& why, bool timeout);
  cudaEvent_t group_event(int g);

  std::shared_ptr<const NcclLibrary> lib_;
  std::shared_ptr<RankStreams> streams_;
  int size_, rank_;
  ncclComm_t comm_ = nullptr;
  std::string broken_;
  // Ordered groups of the current call.
  std::vector<cudaEvent_t> events_;  // pool, grown to the most groups of a call
  std::vector<bool> waited_;
  int groups_ = 0;
  // Host messages.
  std::vector<Queued> queued_, in_flight_;
  cudaEvent_t host_done_ = nullptr;
  Request next_ = 1;
  DeviceScratch stage_device_;
  void* stage_host_ = nullptr;  // pinned
  int64_t stage_host_bytes_ = 0;
};

/// A fresh NCCL unique id (rank 0 makes it and shares it with the others).
NcclUniqueId nccl_unique_id(const NcclLibrary& lib);

}  // namespace ccompress::cuda
