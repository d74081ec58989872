// A subgroup of a transport's ranks as a transport of its own: the ranks of one node, or
// the ranks that share a local index across nodes, for the levels of a hierarchical
// collective (collectives/hier.cc). Messages go through the parent with the peer's rank
// translated; nothing is copied.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ccompress/transport.h"

namespace ccompress {

class SubTransport : public Transport {
 public:
  /// @p members: the parent ranks of the subgroup, in subgroup rank order; the parent's
  /// own rank must be one of them. @p call_base numbers the subgroup's collectives (their
  /// message headers), so that they differ from the parent's and from other levels'.
  SubTransport(Transport& parent, std::vector<int> members, uint64_t call_base);

  int rank() const override { return rank_; }
  int size() const override { return int(members_.size()); }
  std::string name() const override { return parent_.name(); }

  Request isend(int peer, const void* buf, int64_t bytes, int tag) override;
  Request irecv(int peer, void* buf, int64_t bytes, int tag) override;
  std::vector<size_t> wait_some(const std::vector<Request>& reqs, double timeout_s) override {
    return parent_.wait_some(reqs, timeout_s);
  }
  std::vector<size_t> test_some(const std::vector<Request>& reqs) override {
    return parent_.test_some(reqs);
  }
  void cancel(const std::vector<Request>& reqs) override { parent_.cancel(reqs); }
  int64_t default_slice_elems() const override { return parent_.default_slice_elems(); }
  int64_t default_slice_bytes() const override { return parent_.default_slice_bytes(); }
  /// Every member sends one byte to every other and waits for theirs.
  void barrier() override;
  OrderedTransport* ordered() override { return ordered_ ? ordered_.get() : nullptr; }

 private:
  class Ordered;
  int parent_rank(int peer) const;

  Transport& parent_;
  std::vector<int> members_;
  int rank_ = -1;
  std::unique_ptr<OrderedTransport> ordered_;
};

}  // namespace ccompress
