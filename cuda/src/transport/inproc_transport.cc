#include "transport/inproc_transport.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>

#include "ccompress/error.h"

namespace ccompress {

InprocGroup::InprocGroup(int size, std::shared_ptr<InprocCopier> copier)
    : size_(size), copier_(std::move(copier)) {
  CC_CHECK(size >= 1, "an in-process group needs at least one rank, got " << size);
}

std::shared_ptr<InprocGroup::RequestState> InprocGroup::post(bool is_send, int src, int dst,
                                                             int tag, void* buf,
                                                             int64_t bytes,
                                                             std::shared_ptr<void> ready) {
  auto st = std::make_shared<RequestState>();
  std::lock_guard<std::mutex> lock(mu_);
  Key key{src, dst, tag};
  auto& other_queue = is_send ? recvs_[key] : sends_[key];
  if (other_queue.empty()) {
    (is_send ? sends_ : recvs_)[key].push_back({buf, bytes, st, std::move(ready)});
    return st;
  }
  Posted other = other_queue.front();
  other_queue.pop_front();
  const Posted mine{buf, bytes, st, std::move(ready)};
  const Posted& send = is_send ? mine : other;
  const Posted& recv = is_send ? other : mine;
  if (send.bytes != recv.bytes) {
    std::ostringstream os;
    os << "rank " << src << " sent " << send.bytes << " bytes (tag " << tag << ") where rank "
       << dst << " expected " << recv.bytes;
    st->error = other.state->error = os.str();
  } else if (send.bytes > 0 && copier_ != nullptr) {
    try {
      st->pending = other.state->pending =
          copier_->copy(recv.buf, send.buf, send.bytes, send.ready, recv.ready, dst);
    } catch (const std::exception& e) {
      st->error = other.state->error = e.what();
      st->copy_failed = other.state->copy_failed = true;
    }
  } else if (send.bytes > 0) {
    std::memcpy(recv.buf, send.buf, size_t(send.bytes));
  }
  st->done = other.state->done = true;
  cv_.notify_all();
  return st;
}

void InprocGroup::withdraw(const std::shared_ptr<RequestState>& st) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* queues : {&sends_, &recvs_})
    for (auto& [key, q] : *queues)
      for (auto it = q.begin(); it != q.end(); ++it)
        if (it->state == st) {
          q.erase(it);
          return;
        }
}

void InprocGroup::barrier(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  int64_t gen = barrier_generation_;
  if (++barrier_count_ == size_) {
    barrier_count_ = 0;
    ++barrier_generation_;
    cv_.notify_all();
    return;
  }
  bool ok = cv_.wait_for(lock, std::chrono::duration<double>(timeout_s),
                         [&] { return barrier_generation_ != gen; });
  CC_CHECK_AS(TimeoutError, ok, "barrier: not every rank arrived within " << timeout_s << " s");
}

InprocTransport::InprocTransport(std::shared_ptr<InprocGroup> group, int rank)
    : group_(std::move(group)), rank_(rank) {
  CC_CHECK(rank >= 0 && rank < group_->size(),
           "rank " << rank << " is outside a group of " << group_->size());
}

void InprocTransport::check_peer(int peer) const {
  CC_CHECK(peer >= 0 && peer < size() && peer != rank_,
           "peer " << peer << " is not another rank of a group of " << size());
}

Request InprocTransport::track(std::shared_ptr<InprocGroup::RequestState> st) {
  Request id = next_++;
  reqs_.emplace(id, std::move(st));
  return id;
}

Request InprocTransport::isend(int peer, const void* buf, int64_t bytes, int tag) {
  check_peer(peer);
  bytes_sent_ += bytes;
  return track(group_->post(true, rank_, peer, tag, const_cast<void*>(buf), bytes, post_ready()));
}

Request InprocTransport::irecv(int peer, void* buf, int64_t bytes, int tag) {
  check_peer(peer);
  return track(group_->post(false, peer, rank_, tag, buf, bytes, post_ready()));
}

bool InprocTransport::complete_locked(InprocGroup::RequestState& st) {
  if (!st.done) return false;
  if (st.pending == nullptr || !st.error.empty()) return true;
  if (!copy_finished(st.pending)) return false;
  st.pending.reset();
  return true;
}

std::vector<size_t> InprocTransport::collect_locked(const std::vector<Request>& reqs) {
  std::vector<size_t> done;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto it = reqs_.find(reqs[i]);
    CC_CHECK(it != reqs_.end(), "unknown or already completed request " << reqs[i]);
    if (!complete_locked(*it->second)) continue;
    CC_CHECK_AS(Error, !it->second->copy_failed, it->second->error);
    CC_CHECK_AS(MessageError, it->second->error.empty(), it->second->error);
    done.push_back(i);
  }
  for (size_t i : done) reqs_.erase(reqs[i]);
  return done;
}

std::vector<size_t> InprocTransport::test_some(const std::vector<Request>& reqs) {
  std::lock_guard<std::mutex> lock(group_->mutex());
  return collect_locked(reqs);
}

std::vector<size_t> InprocTransport::wait_some(const std::vector<Request>& reqs,
                                               double timeout_s) {
  using Clock = std::chrono::steady_clock;
  // Matching notifies the condition variable; an asynchronous copy does not, so while one
  // is in flight the wait wakes up every 20 us to poll it.
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeout_s));
  std::unique_lock<std::mutex> lock(group_->mutex());
  while (true) {
    std::vector<size_t> done = collect_locked(reqs);
    if (!done.empty()) return done;
    bool copying = false;
    for (Request r : reqs) copying = copying || reqs_.at(r)->done;
    const auto now = Clock::now();
    CC_CHECK_AS(TimeoutError, now < deadline,
                "rank " << rank_ << ": no message arrived for " << timeout_s
                        << " s; a peer is missing, stuck or called a different collective");
    group_->completed().wait_until(
        lock, copying ? std::min(deadline, now + std::chrono::microseconds(20)) : deadline);
  }
}

void InprocTransport::cancel(const std::vector<Request>& reqs) {
  for (Request r : reqs) {
    auto it = reqs_.find(r);
    if (it == reqs_.end()) continue;
    group_->withdraw(it->second);
    reqs_.erase(it);
  }
}

void InprocTransport::barrier() { group_->barrier(barrier_timeout_s); }

int InprocOrderedTransport::post_group(const std::vector<Transfer>& group) {
  std::vector<Request> reqs;
  try {
    for (const Transfer& x : group)
      reqs.push_back(x.send ? isend(x.peer, x.buf, x.bytes, x.tag) : irecv(x.peer, x.buf, x.bytes, x.tag));
    while (!reqs.empty()) erase_completed(reqs, wait_some(reqs, barrier_timeout_s));
  } catch (...) {
    cancel(reqs);
    throw;
  }
  return groups_++;
}

}  // namespace ccompress
