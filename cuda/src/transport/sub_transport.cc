#include "transport/sub_transport.h"

#include "ccompress/error.h"

namespace ccompress {

namespace {
// The header exchange's tag: messages between one pair match in posting order, and every
// member posts its barrier and its collectives in the same order.
constexpr int kBarrierTag = 0;
}

// The parent's ordered interface with the peers of each transfer translated.
class SubTransport::Ordered : public OrderedTransport {
 public:
  Ordered(SubTransport& sub, OrderedTransport& parent) : sub_(sub), parent_(parent) {}
  int post_group(const std::vector<Transfer>& group) override {
    std::vector<Transfer> mapped = group;
    for (Transfer& t : mapped) t.peer = sub_.parent_rank(t.peer);
    return parent_.post_group(mapped);
  }
  void compute_after(int g) override { parent_.compute_after(g); }
  void drain(double timeout_s) override { parent_.drain(timeout_s); }

 private:
  SubTransport& sub_;
  OrderedTransport& parent_;
};

SubTransport::SubTransport(Transport& parent, std::vector<int> members, uint64_t call_base)
    : parent_(parent), members_(std::move(members)) {
  for (size_t i = 0; i < members_.size(); ++i)
    if (members_[i] == parent.rank()) rank_ = int(i);
  CC_CHECK(rank_ >= 0, "rank " << parent.rank() << " is not a member of its own subgroup");
  calls_ = call_base;
  if (OrderedTransport* o = parent.ordered()) ordered_ = std::make_unique<Ordered>(*this, *o);
}

int SubTransport::parent_rank(int peer) const {
  CC_CHECK(peer >= 0 && peer < size(), "peer " << peer << " outside a subgroup of " << size());
  return members_[size_t(peer)];
}

Request SubTransport::isend(int peer, const void* buf, int64_t bytes, int tag) {
  bytes_sent_ += bytes;
  return parent_.isend(parent_rank(peer), buf, bytes, tag);
}

Request SubTransport::irecv(int peer, void* buf, int64_t bytes, int tag) {
  return parent_.irecv(parent_rank(peer), buf, bytes, tag);
}

void SubTransport::barrier() {
  const int P = size();
  std::vector<char> in(size_t(P), 0);
  char out = 1;
  std::vector<Request> reqs;
  for (int p = 0; p < P; ++p) {
    if (p == rank_) continue;
    reqs.push_back(irecv(p, &in[size_t(p)], 1, kBarrierTag));
    reqs.push_back(isend(p, &out, 1, kBarrierTag));
  }
  while (!reqs.empty()) erase_completed(reqs, wait_some(reqs, 300.0));
}

}  // namespace ccompress
