#include "transport/mpi_transport.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "ccompress/error.h"

namespace ccompress {

namespace {

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, len);
}

}  // namespace

void MpiTransport::check(int rc, const char* what, const SourceSite& site) const {
  if (rc == MPI_SUCCESS) return;
  int cls = rc;
  MPI_Error_class(rc, &cls);
  const std::string rank = "rank " + std::to_string(rank_) + ": ";
  if (cls == MPI_ERR_TRUNCATE)
    detail::throw_at<MessageError>(site, rank + what + ": a peer sent a longer message than " +
                                             "expected (" + mpi_error_string(rc) + ")");
  detail::throw_at<MpiError>(site, rank + what + " failed: " + mpi_error_string(rc));
}

MpiTransport::MpiTransport(MPI_Comm comm) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  CC_CHECK_AS(MpiError, initialized && !finalized,
              "MPI is not initialised (import mpi4py.MPI first) or already finalised");
  CC_CHECK(comm != MPI_COMM_NULL, "got MPI_COMM_NULL; pass a valid communicator");
  CC_MPI_CHECK(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup");
  CC_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  CC_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  CC_MPI_CHECK(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  void* attr = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &attr, &flag);
  if (flag && attr) tag_ub_ = *static_cast<int*>(attr);
}

MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || comm_ == MPI_COMM_NULL) return;
  std::vector<Request> left;
  for (auto& [id, p] : pending_) left.push_back(id);
  cancel(left);
  MPI_Comm_free(&comm_);
}

Request MpiTransport::track(MPI_Request req, int64_t expected, int peer) {
  Request id = next_++;
  pending_.emplace(id, Pending{req, expected, peer});
  return id;
}

Request MpiTransport::isend(int peer, const void* buf, int64_t bytes, int tag) {
  CC_CHECK(bytes <= INT_MAX, "message of " << bytes << " bytes exceeds MPI's int count; "
                                           << "use a smaller slice_elems");
  MPI_Request req;
  CC_MPI_CHECK(MPI_Isend(buf, int(bytes), MPI_BYTE, peer, int(int64_t(tag) % (int64_t(tag_ub_) + 1)), comm_, &req),
        "MPI_Isend");
  bytes_sent_ += bytes;
  return track(req, -1, peer);
}

Request MpiTransport::irecv(int peer, void* buf, int64_t bytes, int tag) {
  CC_CHECK(bytes <= INT_MAX, "message of " << bytes << " bytes exceeds MPI's int count; "
                                           << "use a smaller slice_elems");
  MPI_Request req;
  CC_MPI_CHECK(MPI_Irecv(buf, int(bytes), MPI_BYTE, peer, int(int64_t(tag) % (int64_t(tag_ub_) + 1)), comm_, &req),
        "MPI_Irecv");
  return track(req, bytes, peer);
}

std::vector<size_t> MpiTransport::test_some(const std::vector<Request>& reqs) {
  // One MPI_Testsome over all of them: each MPI test call runs MPI's progress engine (over
  // TCP, an epoll_wait system call), so testing requests one by one cost a progress pass per
  // request in flight.
  std::vector<MPI_Request> mpi(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto it = pending_.find(reqs[i]);
    CC_CHECK(it != pending_.end(), "unknown or already completed request " << reqs[i]);
    mpi[i] = it->second.req;
  }
  std::vector<size_t> done;
  if (mpi.empty()) return done;
  std::vector<int> index(mpi.size());
  std::vector<MPI_Status> status(mpi.size());
  int count = 0;
  CC_MPI_CHECK(MPI_Testsome(int(mpi.size()), mpi.data(), &count, index.data(), status.data()),
        "MPI_Testsome");
  if (count == MPI_UNDEFINED) return done;
  std::vector<std::pair<int, MPI_Status>> finished;
  for (int j = 0; j < count; ++j) finished.emplace_back(index[j], status[j]);
  std::sort(finished.begin(), finished.end(),  // the caller's order, not MPI's
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [i, st] : finished) {
    auto it = pending_.find(reqs[size_t(i)]);
    const int64_t expected = it->second.expected_bytes;
    const int peer = it->second.peer;
    pending_.erase(it);  // completed: MPI has freed the request
    if (expected >= 0) {
      int got = 0;
      MPI_Get_count(&st, MPI_BYTE, &got);
      CC_CHECK_AS(MessageError, got == expected,
                  "rank " << rank_ << " expected " << expected << " bytes from rank " << peer
                          << " but got " << got);
    }
    done.push_back(size_t(i));
  }
  return done;
}

std::vector<size_t> MpiTransport::wait_some(const std::vector<Request>& reqs, double timeout_s) {
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  int idle_rounds = 0;
  for (;;) {
    auto done = test_some(reqs);
    if (!done.empty()) return done;
    double waited = std::chrono::duration<double>(clock::now() - start).count();
    CC_CHECK_AS(TimeoutError, waited < timeout_s,
                "rank " << rank_ << ": no message arrived for " << timeout_s
                        << " s; a peer is missing, stuck or called a different collective");
    // Spin briefly for latency, then back off so a waiting rank leaves the core to others.
    if (++idle_rounds > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

void MpiTransport::cancel(const std::vector<Request>& reqs) {
  for (Request r : reqs) {
    auto it = pending_.find(r);
    if (it == pending_.end()) continue;
    MPI_Cancel(&it->second.req);
    MPI_Request_free(&it->second.req);
    pending_.erase(it);
  }
}

void MpiTransport::barrier() { CC_MPI_CHECK(MPI_Barrier(comm_), "MPI_Barrier"); }

std::string MpiTransport::library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, len);
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace ccompress
