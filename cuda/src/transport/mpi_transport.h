// MPI transport: nonblocking MPI_Isend/MPI_Irecv on host buffers over a private duplicate
// of the caller's communicator (so ccompress tags never meet the application's messages).
#pragma once

#include <mpi.h>

#include <string>
#include <unordered_map>
#include <vector>

#include "ccompress/error.h"
#include "ccompress/transport.h"

namespace ccompress {

class CC_API MpiTransport : public Transport {
 public:
  /// Duplicates @p comm (collective over its ranks). MPI must be initialised and must stay
  /// initialised while this object lives.
  explicit MpiTransport(MPI_Comm comm);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  Request isend(int peer, const void* buf, int64_t bytes, int tag) override;
  Request irecv(int peer, void* buf, int64_t bytes, int tag) override;
  std::vector<size_t> wait_some(const std::vector<Request>& reqs, double timeout_s) override;
  std::vector<size_t> test_some(const std::vector<Request>& reqs) override;
  void cancel(const std::vector<Request>& reqs) override;
  void barrier() override;
  /// kSliceElems: see there.
  int64_t default_slice_elems() const override { return kSliceElems; }

  /// The default slice over MPI, 4x kDefaultSliceElems. Over MPICH/TCP each message costs
  /// tens of microseconds of CPU on both ends (MPICH, libfabric, the TCP stack), and on a
  /// CPU-bound host that time is not hidden behind the transfers: a 64 MiB all-reduce on 4
  /// ranks over emulated 1 and 10 Gbit/s links spent 27-35% less CPU per rank (fp8, hint4,
  /// nvfp4 at 1 Gbit/s; hint8 8-15%, nvfp4 at 10 Gbit/s 2%) with 262144-element slices than
  /// with 65536, and was faster in 7 of 8 rows (an A/B of 2026-12-01 in the git history of
  /// perf/RESULTS.md; runs with this slice: perf/RESULTS.md#emulated-collectives-flat-and-hier).
  /// Tensors of a few slices lose little pipelining: two_shot still overlaps the
  /// chunks of different owners.
  static constexpr int64_t kSliceElems = int64_t(1) << 18;

  /// "MPICH Version: ..." as MPI_Get_library_version reports it (first line).
  static std::string library_version();

 private:
  struct Pending {
    MPI_Request req;
    int64_t expected_bytes;  // receives only; -1 for sends
    int peer;
  };
  Request track(MPI_Request req, int64_t expected, int peer);
  // CC_MPI_CHECK's checker (ccompress/error.h): throws when rc is not MPI_SUCCESS.
  void check(int rc, const char* what, const SourceSite& site) const;

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  int tag_ub_ = 32767;
  Request next_ = 1;
  std::unordered_map<Request, Pending> pending_;
};

}  // namespace ccompress
