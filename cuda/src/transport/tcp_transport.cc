#include "transport/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "ccompress/error.h"

namespace ccompress {

namespace {

constexpr uint32_t kMagic = 0x43435450;        // "CCTP": every message header
constexpr uint32_t kHelloMagic = 0x43434831;   // "CCH1": the first bytes of a connection
constexpr int kBarrierTag = -1;                // plan tags are >= 0
using Clock = std::chrono::steady_clock;

std::string errno_text(int e) { return std::strerror(e); }

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

sockaddr_in parse_address(const std::string& addr) {
  auto colon = addr.rfind(':');
  CC_CHECK(colon != std::string::npos, "address '" << addr << "' is not host:port");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(std::stoi(addr.substr(colon + 1))));
  CC_CHECK(inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr) == 1,
           "address '" << addr << "' has no IPv4 host");
  return sa;
}

// Blocking exact I/O on a socket during connect(), bounded by @p deadline.
bool io_all(int fd, void* buf, size_t n, bool send, Clock::time_point deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    double left = std::chrono::duration<double>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd pfd{fd, short(send ? POLLOUT : POLLIN), 0};
    if (poll(&pfd, 1, int(std::min(left, 1.0) * 1000) + 1) <= 0) continue;
    ssize_t k = send ? ::send(fd, p, n, MSG_NOSIGNAL) : ::recv(fd, p, n, 0);
    if (k == 0) return false;
    if (k < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return false;
    }
    p += k;
    n -= size_t(k);
  }
  return true;
}

}  // namespace

TcpTransport::TcpTransport(int rank, int size, const std::string& host)
    : rank_(rank), size_(size), host_(host), peers_(size_t(std::max(size, 1))) {
  CC_CHECK(size >= 1 && rank >= 0 && rank < size,
           "rank " << rank << " is outside a group of " << size);
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CC_CHECK_AS(Error, listen_fd_ >= 0, "socket: " << errno_text(errno));
  sockaddr_in sa = parse_address(host + ":0");
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      listen(listen_fd_, size) != 0) {
    int e = errno;
    close(listen_fd_);
    CC_CHECK_AS(Error, false, "rank " << rank << ": cannot listen on " << host << ": "
                                      << errno_text(e)
                                      << " (set CCOMPRESS_SOCKET_IFNAME to the interface "
                                         "the ranks reach each other on)");
  }
  socklen_t len = sizeof sa;
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  CC_CHECK_AS(Error, wake_fd_ >= 0, "eventfd: " << errno_text(errno));
}

TcpTransport::~TcpTransport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake();
  if (thread_.joinable()) thread_.join();
  for (Peer& p : peers_)
    if (p.fd >= 0) close(p.fd);
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::string TcpTransport::address() const { return host_ + ":" + std::to_string(port_); }

void TcpTransport::connect(const std::vector<std::string>& addresses, double timeout_s) {
  CC_CHECK(!connected_, "this TCP transport is connected already");
  CC_CHECK(int(addresses.size()) == size_,
           addresses.size() << " addresses for a group of " << size_);
  const auto deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(timeout_s));
  const uint32_t hello[3] = {kHelloMagic, uint32_t(rank_), uint32_t(size_)};
  // Lower ranks: this rank connects and introduces itself.
  for (int r = 0; r < rank_; ++r) {
    sockaddr_in sa = parse_address(addresses[size_t(r)]);
    int fd = -1;
    for (;;) {
      fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      CC_CHECK_AS(Error, fd >= 0, "socket: " << errno_text(errno));
      if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) break;
      int e = errno;
      close(fd);
      CC_CHECK_AS(TimeoutError, Clock::now() < deadline,
                  "rank " << rank_ << ": cannot connect to rank " << r << " at "
                          << addresses[size_t(r)] << " within " << timeout_s
                          << " s: " << errno_text(e));
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CC_CHECK_AS(TimeoutError, io_all(fd, const_cast<uint32_t*>(hello), sizeof hello, true, deadline),
                "rank " << rank_ << ": rank " << r << " did not take the connection");
    peers_[size_t(r)].fd = fd;
  }
  // Higher ranks: they connect here, each saying who it is.
  for (int k = rank_ + 1; k < size_; ++k) {
    pollfd pfd{listen_fd_, POLLIN, 0};
    int fd = -1;
    while (fd < 0) {
      double left = std::chrono::duration<double>(deadline - Clock::now()).count();
      CC_CHECK_AS(TimeoutError, left > 0,
                  "rank " << rank_ << ": " << (size_ - k)
                          << " higher rank(s) did not connect within " << timeout_s << " s");
      if (poll(&pfd, 1, int(std::min(left, 1.0) * 1000) + 1) > 0)
        fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    }
    uint32_t theirs[3] = {0, 0, 0};
    bool ok = io_all(fd, theirs, sizeof theirs, false, deadline);
    const int r = int(theirs[1]);
    if (!ok || theirs[0] != kHelloMagic || int(theirs[2]) != size_ || r <= rank_ ||
        r >= size_ || peers_[size_t(r)].fd >= 0) {
      close(fd);
      CC_CHECK_AS(MessageError, false,
                  "rank " << rank_ << ": a connection that is not a higher rank of this "
                          "group of " << size_ << " (rank " << r << ", group of " << theirs[2]
                          << ")");
    }
    peers_[size_t(r)].fd = fd;
  }
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    set_nonblocking(peers_[size_t(r)].fd);
    set_nodelay(peers_[size_t(r)].fd);
  }
  close(listen_fd_);
  listen_fd_ = -1;
  connected_ = true;
  thread_ = std::thread([this] { progress_loop(); });
}

void TcpTransport::check_peer(int peer) const {
  CC_CHECK(connected_, "this TCP transport is not connected yet");
  CC_CHECK(peer >= 0 && peer < size_ && peer != rank_,
           "peer " << peer << " is not another rank of a group of " << size_);
}

void TcpTransport::wake() {
  uint64_t one = 1;
  ssize_t k = write(wake_fd_, &one, sizeof one);
  (void)k;  // the counter is only a doorbell: a full one rings as well
}

Request TcpTransport::new_request(int peer) {
  Request id = next_++;
  states_[id].peer = peer;
  return id;
}

void TcpTransport::finish(Request id, const std::string& error, bool size_mismatch) {
  auto it = states_.find(id);
  if (it == states_.end()) return;  // cancelled
  it->second.done = true;
  it->second.error = error;
  it->second.size_mismatch = size_mismatch;
}

Request TcpTransport::isend(int peer, const void* buf, int64_t bytes, int tag) {
  check_peer(peer);
  std::lock_guard<std::mutex> lock(mu_);
  Request id = new_request(peer);
  Peer& p = peers_[size_t(peer)];
  if (!p.error.empty()) {
    finish(id, p.error);
    return id;
  }
  SendOp op{id, static_cast<const char*>(buf), bytes, {}, 0, {}};
  const uint32_t head[2] = {kMagic, uint32_t(tag)};
  std::memcpy(op.header, head, 8);
  std::memcpy(op.header + 8, &bytes, 8);
  const bool idle = p.sends.empty();
  p.sends.push_back(std::move(op));
  bytes_sent_ += bytes;
  if (idle) pump_sends(p, peer);  // most messages leave here, without a thread hop
  if (!p.sends.empty()) wake();
  return id;
}

Request TcpTransport::irecv(int peer, void* buf, int64_t bytes, int tag) {
  check_peer(peer);
  std::lock_guard<std::mutex> lock(mu_);
  Request id = new_request(peer);
  Peer& p = peers_[size_t(peer)];
  auto& early = p.early[tag];
  // The first early message of this tag not yet taken is this receive's.
  for (auto it = early.begin(); it != early.end(); ++it) {
    Early& e = **it;
    if (e.claimed != 0) continue;
    if (int64_t(e.data.size()) != bytes) {
      finish(id, "rank " + std::to_string(rank_) + " expected " + std::to_string(bytes) +
                     " bytes from rank " + std::to_string(peer) + " but got " +
                     std::to_string(e.data.size()), true);
      early.erase(it);
    } else if (e.got == bytes) {
      if (bytes) std::memcpy(buf, e.data.data(), size_t(bytes));
      finish(id);
      early.erase(it);
    } else {
      e.claimed = id;  // still arriving: copied out when complete
      recv_targets_[id] = static_cast<char*>(buf);
    }
    return id;
  }
  if (!p.error.empty()) {
    finish(id, p.error);
    return id;
  }
  p.posted[tag].push_back(RecvOp{id, static_cast<char*>(buf), bytes});
  return id;
}

void TcpTransport::pump_sends(Peer& p, int peer) {
  while (!p.sends.empty() && p.error.empty()) {
    SendOp& op = p.sends.front();
    iovec iov[2];
    int n = 0;
    if (op.sent < 16) iov[n++] = {op.header + op.sent, size_t(16 - op.sent)};
    const int64_t off = std::max<int64_t>(op.sent - 16, 0);
    const char* payload = op.owned.empty() ? op.buf + off : op.owned.data();
    if (op.bytes > off) iov[n++] = {const_cast<char*>(payload), size_t(op.bytes - off)};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = size_t(n);
    ssize_t k = sendmsg(p.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      fail_peer(p, "sending to rank " + std::to_string(peer) + " failed: " +
                             errno_text(errno));
      return;
    }
    if (!op.owned.empty()) {  // the rest was copied at cancel: drop what left
      const int64_t from_payload = std::max<int64_t>(0, int64_t(k) - std::max<int64_t>(16 - op.sent, 0));
      op.owned.erase(op.owned.begin(), op.owned.begin() + from_payload);
    }
    op.sent += k;
    if (op.sent < op.bytes + 16) return;  // the socket is full
    finish(op.id);
    p.sends.pop_front();
    cv_.notify_all();
  }
}

void TcpTransport::start_message(Peer& p, int peer) {
  uint32_t head[2];
  int64_t bytes = 0;
  std::memcpy(head, p.header, 8);
  std::memcpy(&bytes, p.header + 8, 8);
  if (head[0] != kMagic || bytes < 0) {
    fail_peer(p, "rank " + std::to_string(peer) + " sent bytes that are not a "
                       "ccompress message (another program on this port?)");
    return;
  }
  const int tag = int(head[1]);
  p.in_payload = true;
  p.left = bytes;
  p.dst = nullptr;
  p.dst_req = 0;
  p.dst_early.reset();
  auto posted = p.posted.find(tag);
  if (posted != p.posted.end() && !posted->second.empty()) {
    RecvOp op = posted->second.front();
    posted->second.pop_front();
    if (op.bytes != bytes) {  // read and dropped; the receive fails as MPI's would
      finish(op.id, "rank " + std::to_string(rank_) + " expected " + std::to_string(op.bytes) +
                        " bytes from rank " + std::to_string(peer) + " but got " +
                        std::to_string(bytes), true);
      cv_.notify_all();
    } else {
      p.dst = op.buf;
      p.dst_req = op.id;
    }
  } else {
    auto e = std::make_shared<Early>();
    e->data.resize(size_t(bytes));
    p.early[tag].push_back(e);
    p.dst = e->data.data();
    p.dst_early = e;
  }
}

void TcpTransport::pump_recvs(Peer& p, int peer) {
  static thread_local std::vector<char> sink(1 << 16);
  while (p.error.empty()) {
    if (!p.in_payload) {
      ssize_t k = recv(p.fd, p.header + p.header_got, size_t(16 - p.header_got), MSG_DONTWAIT);
      if (k <= 0) {
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        fail_peer(p, k == 0 ? "rank " + std::to_string(peer) + " closed its connection "
                                    "(the process ended or destroyed its group)"
                                  : "receiving from rank " + std::to_string(peer) +
                                        " failed: " + errno_text(errno));
        return;
      }
      p.header_got += int(k);
      if (p.header_got < 16) return;
      p.header_got = 0;
      start_message(p, peer);
      if (!p.in_payload) return;  // a failed peer
    }
    while (p.left > 0) {
      char* into = p.dst ? p.dst : sink.data();
      size_t want = size_t(p.dst ? p.left : std::min<int64_t>(p.left, int64_t(sink.size())));
      ssize_t k = recv(p.fd, into, want, MSG_DONTWAIT);
      if (k <= 0) {
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        fail_peer(p, k == 0 ? "rank " + std::to_string(peer) + " closed its connection "
                                    "in the middle of a message"
                                  : "receiving from rank " + std::to_string(peer) +
                                        " failed: " + errno_text(errno));
        return;
      }
      if (p.dst) p.dst += k;
      p.left -= k;
      if (p.dst_early) p.dst_early->got += k;
    }
    p.in_payload = false;
    if (p.dst_req) {
      finish(p.dst_req);
      cv_.notify_all();
    } else if (p.dst_early && p.dst_early->claimed != 0) {
      // Taken by a receive while it arrived: hand it over now (or drop a cancelled one).
      Early& e = *p.dst_early;
      if (e.claimed > 0) {
        auto t = recv_targets_.find(e.claimed);
        if (t != recv_targets_.end()) {
          if (!e.data.empty()) std::memcpy(t->second, e.data.data(), e.data.size());
          recv_targets_.erase(t);
          finish(e.claimed);
          cv_.notify_all();
        }
      }
      for (auto& [tag, list] : p.early)
        list.erase(std::remove(list.begin(), list.end(), p.dst_early), list.end());
    }
    p.dst = nullptr;
    p.dst_req = 0;
    p.dst_early.reset();
  }
}

void TcpTransport::fail_peer(Peer& p, const std::string& why) {
  if (!p.error.empty()) return;
  p.error = "rank " + std::to_string(rank_) + ": " + why;
  for (SendOp& op : p.sends) finish(op.id, p.error);
  p.sends.clear();
  for (auto& [tag, list] : p.posted)
    for (RecvOp& op : list) finish(op.id, p.error);
  p.posted.clear();
  if (p.dst_req) finish(p.dst_req, p.error);
  for (auto& [tag, list] : p.early)
    for (auto& e : list)
      if (e->claimed > 0) {
        recv_targets_.erase(e->claimed);
        finish(e->claimed, p.error);
      }
  p.early.clear();
  p.in_payload = false;
  p.dst_req = 0;
  p.dst_early.reset();
  cv_.notify_all();
}

void TcpTransport::progress_loop() {
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (;;) {
    fds.clear();
    who.clear();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      fds.push_back({wake_fd_, POLLIN, 0});
      who.push_back(-1);
      for (int r = 0; r < size_; ++r) {
        Peer& p = peers_[size_t(r)];
        if (r == rank_ || !p.error.empty()) continue;
        fds.push_back({p.fd, short(POLLIN | (p.sends.empty() ? 0 : POLLOUT)), 0});
        who.push_back(r);
      }
    }
    if (poll(fds.data(), fds.size(), 1000) < 0 && errno != EINTR) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    if (fds[0].revents) {
      uint64_t count;
      ssize_t k = read(wake_fd_, &count, sizeof count);
      (void)k;
    }
    for (size_t i = 1; i < fds.size(); ++i) {
      Peer& p = peers_[size_t(who[i])];
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) pump_recvs(p, who[i]);
      if (!p.sends.empty()) pump_sends(p, who[i]);
    }
    if (fds[0].revents)  // new sends queued by a caller whose socket was full
      for (int r = 0; r < size_; ++r)
        if (r != rank_ && !peers_[size_t(r)].sends.empty()) pump_sends(peers_[size_t(r)], r);
  }
}

std::vector<size_t> TcpTransport::collect(const std::vector<Request>& reqs) {
  std::vector<size_t> done;
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto it = states_.find(reqs[i]);
    CC_CHECK(it != states_.end(), "unknown or already completed request " << reqs[i]);
    if (!it->second.done) continue;
    if (!it->second.error.empty()) {
      std::string error = it->second.error;
      bool mismatch = it->second.size_mismatch;
      states_.erase(it);
      if (mismatch) CC_CHECK_AS(MessageError, false, error);
      CC_CHECK_AS(Error, false, error);
    }
    states_.erase(it);
    done.push_back(i);
  }
  return done;
}

std::vector<size_t> TcpTransport::test_some(const std::vector<Request>& reqs) {
  std::lock_guard<std::mutex> lock(mu_);
  return collect(reqs);
}

std::vector<size_t> TcpTransport::wait_some(const std::vector<Request>& reqs, double timeout_s) {
  const auto start = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto done = collect(reqs);
    if (!done.empty() || reqs.empty()) return done;
    const double waited = seconds_since(start);
    CC_CHECK_AS(TimeoutError, waited < timeout_s,
                "rank " << rank_ << ": no message arrived for " << timeout_s
                        << " s; a peer is missing, stuck or called a different collective");
    cv_.wait_for(lock, std::chrono::duration<double>(std::min(timeout_s - waited, 1.0)));
  }
}

void TcpTransport::cancel(const std::vector<Request>& reqs) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Request id : reqs) {
    auto st = states_.find(id);
    if (st == states_.end()) continue;
    const int peer = st->second.peer;
    states_.erase(st);
    recv_targets_.erase(id);
    if (peer < 0) continue;
    Peer& p = peers_[size_t(peer)];
    for (auto it = p.sends.begin(); it != p.sends.end(); ++it) {
      if (it->id != id) continue;
      if (it->sent == 0) {
        p.sends.erase(it);  // nothing of it on the wire
      } else {  // the peer expects the rest: send it from a copy, not the caller's buffer
        const int64_t off = std::max<int64_t>(it->sent - 16, 0);
        if (it->owned.empty() && it->bytes > off)
          it->owned.assign(it->buf + off, it->buf + it->bytes);
        it->buf = nullptr;
      }
      break;
    }
    for (auto& [tag, list] : p.posted)
      list.erase(std::remove_if(list.begin(), list.end(),
                                [id](const RecvOp& op) { return op.id == id; }),
                 list.end());
    if (p.dst_req == id) {  // arriving now: the rest goes nowhere
      p.dst = nullptr;
      p.dst_req = 0;
    }
    for (auto& [tag, list] : p.early)
      for (auto& e : list)
        if (e->claimed == id) e->claimed = -1;
  }
}

void TcpTransport::barrier() {
  if (size_ == 1) return;
  char none = 0;
  std::vector<Request> reqs;
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) reqs.push_back(irecv(r, &none, 0, kBarrierTag));
    while (!reqs.empty()) erase_completed(reqs, wait_some(reqs, barrier_timeout_s));
    for (int r = 1; r < size_; ++r) reqs.push_back(isend(r, &none, 0, kBarrierTag));
  } else {
    reqs.push_back(isend(0, &none, 0, kBarrierTag));
    reqs.push_back(irecv(0, &none, 0, kBarrierTag));
  }
  while (!reqs.empty()) erase_completed(reqs, wait_some(reqs, barrier_timeout_s));
}

}  // namespace ccompress
