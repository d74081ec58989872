// In-process transport: N ranks as threads of one process. Used by the tests, by
// ccompress.simulate, and, with a device copier (cuda/src/transport/device_loopback.h), for
// N virtual ranks on one GPU.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "ccompress/transport.h"

namespace ccompress {

/// Copies the payload of a matched message. Without one, a group copies with memcpy and a
/// message is complete once matched; a device copier starts an asynchronous copy and
/// returns a handle that the transport polls (InprocTransport::copy_finished).
class CC_API InprocCopier {
 public:
  virtual ~InprocCopier() = default;
  /// Starts copying @p bytes from @p src to @p dst (rank @p dst_rank's buffer) once the work
  /// each side had issued when it posted (the handles from InprocTransport::post_ready) is
  /// done; returns a completion handle, or nullptr when the copy is already complete.
  /// Called under the group's lock.
  virtual std::shared_ptr<void> copy(void* dst, const void* src, int64_t bytes,
                                     const std::shared_ptr<void>& send_ready,
                                     const std::shared_ptr<void>& recv_ready, int dst_rank) = 0;
};

/// Shared mailbox of one group. A message is copied once, by whichever side arrives second.
class CC_API InprocGroup : public std::enable_shared_from_this<InprocGroup> {
 public:
  explicit InprocGroup(int size, std::shared_ptr<InprocCopier> copier = nullptr);
  int size() const { return size_; }

  struct RequestState {
    bool done = false;            // matched (and copied, unless `pending`)
    std::string error;            // set when the sizes of a matched pair differ
    bool copy_failed = false;     // `error` is the copier's failure, not a size mismatch
    std::shared_ptr<void> pending;  // the copier's completion handle, while copying
  };
  struct Posted {
    void* buf;
    int64_t bytes;
    std::shared_ptr<RequestState> state;
    std::shared_ptr<void> ready;  // the poster's readiness handle for the copier
  };

  std::shared_ptr<RequestState> post(bool is_send, int src, int dst, int tag, void* buf,
                                     int64_t bytes, std::shared_ptr<void> ready = nullptr);
  /// Removes a still-unmatched posted message (no-op once matched).
  void withdraw(const std::shared_ptr<RequestState>& st);
  std::mutex& mutex() { return mu_; }
  /// Notified whenever a message completes.
  std::condition_variable& completed() { return cv_; }
  void barrier(double timeout_s);

 private:
  using Key = std::tuple<int, int, int>;  // src, dst, tag
  int size_;
  std::shared_ptr<InprocCopier> copier_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::deque<Posted>> sends_, recvs_;
  int barrier_count_ = 0;
  int64_t barrier_generation_ = 0;
};

class CC_API InprocTransport : public Transport {
 public:
  InprocTransport(std::shared_ptr<InprocGroup> group, int rank);
  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string name() const override { return "inproc"; }
  Request isend(int peer, const void* buf, int64_t bytes, int tag) override;
  Request irecv(int peer, void* buf, int64_t bytes, int tag) override;
  std::vector<size_t> wait_some(const std::vector<Request>& reqs, double timeout_s) override;
  std::vector<size_t> test_some(const std::vector<Request>& reqs) override;
  void cancel(const std::vector<Request>& reqs) override;
  void barrier() override;

  /// Seconds barrier() waits before raising TimeoutError.
  double barrier_timeout_s = 300.0;

 protected:
  /// The readiness handle posted with each send and receive for the group's copier (none by
  /// default): the copy waits for what this rank had issued before posting.
  virtual std::shared_ptr<void> post_ready() { return nullptr; }
  /// Whether the copy behind a copier's completion handle has finished.
  virtual bool copy_finished(const std::shared_ptr<void>& pending) {
    (void)pending;
    return true;
  }

 private:
  bool complete_locked(InprocGroup::RequestState& st);
  std::vector<size_t> collect_locked(const std::vector<Request>& reqs);
  Request track(std::shared_ptr<InprocGroup::RequestState> st);
  void check_peer(int peer) const;

  std::shared_ptr<InprocGroup> group_;
  int rank_;
  Request next_ = 1;
  std::unordered_map<Request, std::shared_ptr<InprocGroup::RequestState>> reqs_;
};

/// An in-process rank that also serves the ordered interface: post_group posts the group's
/// transfers and waits for all of them before returning, the strictest order an ordered
/// transport (NCCL's serial comm stream) can impose. It runs the ordered executor on the CPU,
/// so its group keys are tested without a GPU: a wrong key deadlocks (TimeoutError here).
class CC_API InprocOrderedTransport : public InprocTransport, public OrderedTransport {
 public:
  using InprocTransport::InprocTransport;
  std::string name() const override { return "inproc_ordered"; }
  OrderedTransport* ordered() override { return this; }
  int post_group(const std::vector<Transfer>& group) override;
  void compute_after(int g) override { (void)g; }
  void drain(double timeout_s) override {
    (void)timeout_s;
    groups_ = 0;
  }

 private:
  int groups_ = 0;
};

}  // namespace ccompress
