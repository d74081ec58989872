/// @file transport.h
/// @brief The byte-moving half of a collective.
///
/// Point-to-point, nonblocking, tag-matched: a send to (peer, tag) matches the receive from
/// (this rank, tag) posted by that peer; messages with the same (source, dest, tag) match in
/// posting order. Buffers must stay valid until their request completes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ccompress/common.h"

namespace ccompress {

/// Elements per pipelined slice when neither the call nor its transport chooses.
constexpr int64_t kDefaultSliceElems = 1 << 16;

using Request = int64_t;

/// One transfer of a group posted to an OrderedTransport: a whole message to or from @p peer.
/// Messages between one pair of ranks match in posting order (as NCCL's do); @p tag is the
/// plan's tag, by which the executor orders a group so that both ends agree.
struct Transfer {
  bool send = false;
  int peer = -1;
  void* buf = nullptr;
  int64_t bytes = 0;
  int tag = 0;
};

/// A transport whose transfers run in the order they are posted, in groups, after the
/// compute work issued before them (NCCL: grouped ncclSend/ncclRecv on a comm stream, ordered
/// with the codec stream by events). The host never waits between groups, so the ordered
/// executor (ordered_executor.cc) posts every rank's groups in one global order in which a
/// group only needs the groups before it: no rank can wait for a peer that waits for it.
class CC_API OrderedTransport {
 public:
  virtual ~OrderedTransport() = default;
  /// Posts one group after the compute work issued so far; returns its number in this call.
  virtual int post_group(const std::vector<Transfer>& group) = 0;
  /// Compute work issued from now on starts after group @p g has completed.
  virtual void compute_after(int g) = 0;
  /// Blocks until every group of this call has completed; raises TimeoutError after
  /// @p timeout_s seconds without completion (and the transport's own errors). The next
  /// post_group starts a new call.
  virtual void drain(double timeout_s) = 0;
};

class CC_API Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "inproc", "mpi", ...
  virtual std::string name() const = 0;

  virtual Request isend(int peer, const void* buf, int64_t bytes, int tag) = 0;
  virtual Request irecv(int peer, void* buf, int64_t bytes, int tag) = 0;
  /// Blocks until at least one of @p reqs completes; returns the indices that completed
  /// (their requests are released). Throws TimeoutError after @p timeout_s seconds without
  /// progress, and MessageError when a received message does not have the posted size.
  virtual std::vector<size_t> wait_some(const std::vector<Request>& reqs, double timeout_s) = 0;
  /// Non-blocking variant of wait_some: may return an empty vector.
  virtual std::vector<size_t> test_some(const std::vector<Request>& reqs) = 0;
  /// Withdraws requests that will not be waited for (after an error), so that no buffer
  /// of an abandoned collective is read or written later.
  virtual void cancel(const std::vector<Request>& reqs) = 0;
  /// Synchronises all ranks of the group.
  virtual void barrier() = 0;
  /// Elements per pipelined slice when a call does not choose (CollectiveOptions::slice_elems
  /// == 0). A transport whose every message costs much CPU (MPI over TCP) asks for longer
  /// slices, hence fewer messages. Every rank of a group must return the same. The slice
  /// size never changes a result's bits, only how many messages carry it.
  virtual int64_t default_slice_elems() const { return kDefaultSliceElems; }
  /// Bytes of input per pipelined slice when a call does not choose, or 0 (the default):
  /// default_slice_elems() decides. Device transports answer in bytes, a slice of megabytes
  /// whatever the dtype: each slice costs kernel launches and events, which the host
  /// transports' slices of 65536 elements would multiply. Every rank must return the same.
  virtual int64_t default_slice_bytes() const { return 0; }
  /// This transport's ordered interface for payload transfers, or nullptr when its
  /// transfers complete under host polling (isend/irecv/wait_some), as MPI and inproc do.
  /// Ordered transports still serve isend/irecv for the small host messages of the call
  /// check, all posted before the first wait.
  virtual OrderedTransport* ordered() { return nullptr; }

  /// Bytes this rank has sent through isend since creation (message headers included).
  int64_t bytes_sent() const { return bytes_sent_; }

  /// Numbers this rank's collectives 0, 1, 2, ... in call order; every rank makes the same
  /// calls, so the numbers agree, and each message header carries its call's number.
  uint64_t next_call() { return calls_++; }

 protected:
  int64_t bytes_sent_ = 0;
  uint64_t calls_ = 0;
};

/// Elements per pipelined slice of a call on @p t in @p dtype that sets none:
/// t.default_slice_bytes() / dtype_size(dtype) when the transport answers in bytes, else
/// t.default_slice_elems() (before rounding up to a codec's scale group).
CC_API int64_t default_slice_for(const Transport& t, DType dtype);

/// Removes the entries at @p done (indices as wait_some / test_some return them) from @p v,
/// keeping the order of the rest; for the request list and anything kept parallel to it.
template <class T>
void erase_completed(std::vector<T>& v, const std::vector<size_t>& done) {
  std::vector<bool> gone(v.size(), false);
  for (size_t i : done) gone[i] = true;
  size_t w = 0;
  for (size_t i = 0; i < v.size(); ++i)
    if (!gone[i]) v[w++] = v[i];
  v.resize(w);
}

}  // namespace ccompress
