#include "transport/nccl_transport.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "ccompress/error.h"
#include "transport/device_slice.h"

namespace ccompress::cuda {

namespace {
using Clock = std::chrono::steady_clock;

/// An error's message without the call site CC_CHECK appends (" [... at file:line]").
std::string reason(const std::exception& e) {
  const std::string what = e.what();
  return what.substr(0, what.rfind(" ["));
}
}  // namespace

NcclUniqueId nccl_unique_id(const NcclLibrary& lib) {
  NcclUniqueId id;
  CC_NCCL_CHECK(lib, lib.GetUniqueId(&id), "ncclGetUniqueId");
  return id;
}

NcclTransport::NcclTransport(std::shared_ptr<const NcclLibrary> lib, const NcclUniqueId& id,
                             int size, int rank, std::shared_ptr<RankStreams> streams)
    : lib_(std::move(lib)), streams_(std::move(streams)), size_(size), rank_(rank) {
  CC_CHECK(size >= 1 && rank >= 0 && rank < size, "rank " << rank << " of " << size);
  DeviceGuard g(streams_->device());
  CC_NCCL_CHECK(*lib_, lib_->CommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
  if (cudaEventCreateWithFlags(&host_done_, cudaEventDisableTiming) != cudaSuccess) {
    lib_->CommDestroy(comm_);  // the destructor does not run for a throwing constructor
    CC_CUDA_CHECK(cudaGetLastError(), "cudaEventCreate");
    CC_CHECK_AS(CudaError, false, "cudaEventCreate failed");
  }
}

NcclTransport::~NcclTransport() {
  DeviceGuard g(streams_->device(), true);
  if (comm_ != nullptr) {
    if (broken_.empty()) {
      lib_->CommDestroy(comm_);
    }  // an aborted communicator is already released
  }
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  cudaEventDestroy(host_done_);
  if (stage_host_ != nullptr) cudaFreeHost(stage_host_);
}

int64_t NcclTransport::default_slice_bytes() const {
  return device_slice_bytes(kNcclSliceBytes);
}

void NcclTransport::check_usable() const {
  CC_CHECK_AS(NcclError, broken_.empty(),
              "this NCCL communicator was aborted (" << broken_ << "); create a new one");
}

void NcclTransport::abort_and_throw(const std::string& why, bool timeout) {
  broken_ = why;
  lib_->CommAbort(comm_);
  if (timeout) throw TimeoutError(why);
  throw NcclError(why);
}

void NcclTransport::wait_event(cudaEvent_t event, double timeout_s, const char* what) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(timeout_s));
  int spins = 0;
  while (true) {
    cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess) return;
    if (err != cudaErrorNotReady) {
      cudaGetLastError();
      abort_and_throw(std::string(what) + ": CUDA error " + cudaGetErrorString(err), false);
    }
    ncclResult_t async = kNcclSuccess;
    ncclResult_t r = lib_->CommGetAsyncError(comm_, &async);
    if (r != kNcclSuccess || (async != kNcclSuccess && async != kNcclInProgress)) {
      ncclResult_t bad = r != kNcclSuccess ? r : async;
      abort_and_throw(std::string(what) + ": NCCL error " + lib_->GetErrorString(bad), false);
    }
    if (Clock::now() > deadline) {
      std::ostringstream os;
      os << "rank " << rank_ << ": " << what << " did not complete within " << timeout_s
         << " s; a peer is missing, stuck or called a different collective (communicator aborted)";
      abort_and_throw(os.str(), true);
    }
    // Spin briefly (transfers of a slice take microseconds), then yield the core.
    if (++spins > 1000) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Request NcclTransport::isend(int peer, const void* buf, int64_t bytes, int tag) {
  (void)tag;  // messages between a pair match in posting order, as NCCL's do
  check_usable();
  CC_CHECK(peer >= 0 && peer < size_ && peer != rank_, "peer " << peer << " of " << size_);
  bytes_sent_ += bytes;
  queued_.push_back({true, peer, const_cast<void*>(buf), bytes, next_});
  return next_++;
}

Request NcclTransport::irecv(int peer, void* buf, int64_t bytes, int tag) {
  (void)tag;
  check_usable();
  CC_CHECK(peer >= 0 && peer < size_ && peer != rank_, "peer " << peer << " of " << size_);
  queued_.push_back({false, peer, buf, bytes, next_});
  return next_++;
}

void NcclTransport::start_host_group() {
  if (queued_.empty()) return;
  CC_CHECK_AS(Error, in_flight_.empty(), "host messages posted while others are in flight");
  DeviceGuard g(streams_->device());
  int64_t total = 0;
  for (const Queued& q : queued_) total += align_up(q.bytes, 256);
  if (total > stage_host_bytes_) {
    if (stage_host_ != nullptr) cudaFreeHost(stage_host_);
    stage_host_ = nullptr;
    CC_CUDA_CHECK(cudaMallocHost(&stage_host_, size_t(total)), "cudaMallocHost");
    stage_host_bytes_ = total;
  }
  auto* host = static_cast<uint8_t*>(stage_host_);
  auto* dev = static_cast<uint8_t*>(stage_device_.get(total, streams_->comm(), streams_->comm()));
  cudaStream_t s = streams_->comm();
  int64_t off = 0;
  for (const Queued& q : queued_) {
    if (q.send) {
      std::memcpy(host + off, q.host, size_t(q.bytes));
      CC_CUDA_CHECK(cudaMemcpyAsync(dev + off, host + off, size_t(q.bytes), cudaMemcpyHostToDevice, s),
                 "staging a host message");
    }
    off += align_up(q.bytes, 256);
  }
  std::vector<Transfer> group;
  off = 0;
  for (const Queued& q : queued_) {
    group.push_back({q.send, q.peer, dev + off, q.bytes, 0});
    off += align_up(q.bytes, 256);
  }
  post_or_abort(group, s);
  off = 0;
  for (const Queued& q : queued_) {
    if (!q.send)
      CC_CUDA_CHECK(cudaMemcpyAsync(host + off, dev + off, size_t(q.bytes), cudaMemcpyDeviceToHost, s),
                 "unstaging a host message");
    off += align_up(q.bytes, 256);
  }
  CC_CUDA_CHECK(cudaEventRecord(host_done_, s), "cudaEventRecord");
  in_flight_.swap(queued_);
  queued_.clear();
}

std::vector<size_t> NcclTransport::wait_some(const std::vector<Request>& reqs,
                                             double timeout_s) {
  check_usable();
  start_host_group();
  if (!in_flight_.empty()) {
    wait_event(host_done_, timeout_s, "a host message exchange");
    auto* host = static_cast<uint8_t*>(stage_host_);
    int64_t off = 0;
    for (const Queued& q : in_flight_) {
      if (!q.send) std::memcpy(q.host, host + off, size_t(q.bytes));
      off += align_up(q.bytes, 256);
    }
    in_flight_.clear();
  }
  // Everything posted so far has completed.
  std::vector<size_t> done(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) done[i] = i;
  return done;
}

std::vector<size_t> NcclTransport::test_some(const std::vector<Request>& reqs) {
  start_host_group();
  if (!in_flight_.empty() && cudaEventQuery(host_done_) == cudaErrorNotReady) return {};
  return wait_some(reqs, 1.0);
}

void NcclTransport::cancel(const std::vector<Request>& reqs) {
  // Queued messages are dropped.
  for (Request r : reqs)
    for (size_t i = 0; i < queued_.size(); ++i)
      if (queued_[i].id == r) {
        queued_.erase(queued_.begin() + long(i));
        break;
      }
  bool started = false;
  for (Request r : reqs)
    for (const Queued& q : in_flight_) started = started || q.id == r;
  if (!started) return;
  // A started group cannot be withdrawn. Its results are never copied to the caller (the
  // staging buffers are this transport's); unfinished, its messages would pair with a later
  // call's, so the communicator is aborted, saying why.
  in_flight_.clear();
  if (!broken_.empty()) return;
  DeviceGuard g(streams_->device(), true);
  const cudaError_t done = cudaEventQuery(host_done_);
  if (done == cudaSuccess) return;
  if (done != cudaErrorNotReady) cudaGetLastError();
  broken_ = "a host message exchange was abandoned before it completed";
  lib_->CommAbort(comm_);
}

void NcclTransport::barrier() {
  check_usable();
  DeviceGuard g(streams_->device());
  auto* one = static_cast<float*>(stage_device_.get(256, streams_->comm(), streams_->comm()));
  CC_NCCL_CHECK(*lib_, lib_->AllReduce(one, one, 1, kNcclFloat32, kNcclSum, comm_, streams_->comm()),
              "ncclAllReduce (barrier)");
  CC_CUDA_CHECK(cudaEventRecord(host_done_, streams_->comm()), "cudaEventRecord");
  wait_event(host_done_, 300.0, "barrier");
}

void NcclTransport::post_or_abort(const std::vector<Transfer>& group, cudaStream_t s) {
  // NCCL may have taken part of a group when a call fails (or dropped all of it): either way
  // this rank's messages no longer pair with its peers' in order, and the next call's would
  // match theirs wrongly. Nothing can put the pairs back in step, so the communicator is
  // aborted (every later call raises; the peers time out) and this call's counters cleared.
  try {
    CC_NCCL_CHECK(*lib_, lib_->GroupStart(), "ncclGroupStart");
    ncclResult_t failed = kNcclSuccess;
    const char* what = "ncclGroupEnd";
    for (const Transfer& x : group) {
      ncclResult_t r = x.send ? lib_->Send(x.buf, size_t(x.bytes), kNcclUint8, x.peer, comm_, s)
                              : lib_->Recv(x.buf, size_t(x.bytes), kNcclUint8, x.peer, comm_, s);
      if (r != kNcclSuccess) {
        failed = r;
        what = x.send ? "ncclSend" : "ncclRecv";
        break;
      }
    }
    const ncclResult_t end = lib_->GroupEnd();  // always: NCCL's group depth must unwind
    CC_NCCL_CHECK(*lib_, failed != kNcclSuccess ? failed : end, what);
  } catch (const Error& e) {
    groups_ = 0;
    waited_.clear();
    queued_.clear();
    broken_ = "a transfer failed while posting: " + reason(e);
    lib_->CommAbort(comm_);
    throw;
  }
}

cudaEvent_t NcclTransport::group_event(int g) {
  while (int(events_.size()) <= g) {
    cudaEvent_t e = nullptr;
    CC_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    events_.push_back(e);
  }
  return events_[size_t(g)];
}

int NcclTransport::post_group(const std::vector<Transfer>& group) {
  check_usable();
  DeviceGuard dg(streams_->device());
  bool sends = false;
  for (const Transfer& x : group) sends = sends || x.send;
  // Sends read what the codec stream wrote (encodes, headers): the comm stream waits for it.
  if (sends) streams_->order(streams_->codec(), streams_->comm());
  cudaStream_t s = streams_->comm();
  post_or_abort(group, s);
  for (const Transfer& x : group)
    if (x.send) bytes_sent_ += x.bytes;
  const int g = groups_++;
  CC_CUDA_CHECK(cudaEventRecord(group_event(g), s), "cudaEventRecord");
  waited_.resize(size_t(groups_), false);
  return g;
}

void NcclTransport::compute_after(int g) {
  CC_CHECK(g >= 0 && g < groups_, "group " << g << " was not posted");
  if (waited_[size_t(g)]) return;
  waited_[size_t(g)] = true;
  CC_CUDA_CHECK(cudaStreamWaitEvent(streams_->codec(), events_[size_t(g)], 0), "cudaStreamWaitEvent");
}

void NcclTransport::drain(double timeout_s) {
  const int n = groups_;
  groups_ = 0;
  waited_.assign(0, false);
  if (n == 0) return;
  // The comm stream runs groups in order: the last one's event covers them all.
  wait_event(events_[size_t(n - 1)], timeout_s, "the collective's transfers");
}

void NcclTransport::nccl_allreduce(const float* in, float* out, int64_t n, cudaStream_t caller) {
  check_usable();
  DeviceGuard g(streams_->device());
  streams_->order(caller, streams_->comm());
  CC_NCCL_CHECK(*lib_, lib_->AllReduce(in, out, size_t(n), kNcclFloat32, kNcclSum, comm_, streams_->comm()),
              "ncclAllReduce");
  streams_->order(streams_->comm(), caller);
}

}  // namespace ccompress::cuda
