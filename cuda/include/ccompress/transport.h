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

using Request = int64_t;

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

  /// Bytes this rank has sent through isend since creation (message headers included).
  int64_t bytes_sent() const { return bytes_sent_; }

  /// Numbers this rank's collectives 0, 1, 2, ... in call order; every rank makes the same
  /// calls, so the numbers agree, and each message header carries its call's number.
  uint64_t next_call() { return calls_++; }

 protected:
  int64_t bytes_sent_ = 0;
  uint64_t calls_ = 0;
};

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
