// TCP transport: one connection per pair of ranks, moved by a progress thread of its own, with
// no Python and no MPI on the path of a message. The torch backend uses it under torchrun: the
// ranks find each other through torch's store (ccompress/torch/_p2p.py), then every message of
// a collective is a header and the payload written straight from, and read straight into, the
// executor's buffers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ccompress/transport.h"

namespace ccompress {

/// A Transport over TCP sockets between every pair of ranks.
///
/// Made in two steps so that the addresses can be exchanged in between: the constructor
/// listens on @p host (an IPv4 address of this machine; port chosen by the kernel) and
/// address() tells where; connect() then takes every rank's address (own entry ignored),
/// connects to the lower ranks, accepts the higher ones and starts the progress thread.
///
/// Messages between a pair of ranks travel in posting order on one connection, each as a
/// 16-byte header (magic, tag, size) and the payload. A receive matches the first message from
/// its peer with its tag; a message that arrives before its receive is posted is kept in a
/// buffer until it is. The progress thread does every socket operation (poll, nonblocking
/// send and recv); isend and irecv only queue, so a collective's transfers move while the
/// executor runs codec work, and no call holds Python's GIL. A connection that closes or fails
/// fails every request with that peer, then and later.
class CC_API TcpTransport : public Transport {
 public:
  TcpTransport(int rank, int size, const std::string& host);
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  /// "host:port" of this rank's listening socket.
  std::string address() const;
  /// Connects the group (collective over its ranks); raises TimeoutError when a peer has not
  /// connected or accepted within @p timeout_s seconds.
  void connect(const std::vector<std::string>& addresses, double timeout_s);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "tcp"; }
  Request isend(int peer, const void* buf, int64_t bytes, int tag) override;
  Request irecv(int peer, void* buf, int64_t bytes, int tag) override;
  std::vector<size_t> wait_some(const std::vector<Request>& reqs, double timeout_s) override;
  std::vector<size_t> test_some(const std::vector<Request>& reqs) override;
  void cancel(const std::vector<Request>& reqs) override;
  /// A gather to rank 0 and a release from it, over the same connections.
  void barrier() override;

  /// Seconds barrier() waits for the other ranks.
  double barrier_timeout_s = 300.0;

 private:
  struct SendOp {
    Request id;
    const char* buf;
    int64_t bytes;
    char header[16];
    int64_t sent = 0;  // of header + payload
    std::vector<char> owned;  // the rest of the payload, once the request was cancelled
  };
  struct RecvOp {
    Request id;
    char* buf;
    int64_t bytes;
  };
  // A message that arrived before its receive; `claimed` is the receive that took it while
  // it was still arriving (0: none; -1: cancelled, dropped once complete).
  struct Early {
    std::vector<char> data;
    int64_t got = 0;
    Request claimed = 0;
  };
  struct Peer {
    int fd = -1;
    std::deque<SendOp> sends;
    std::map<int, std::deque<RecvOp>> posted;
    std::map<int, std::deque<std::shared_ptr<Early>>> early;
    // The message being read: its header, then where its payload goes.
    char header[16];
    int header_got = 0;
    bool in_payload = false;
    int64_t left = 0;
    char* dst = nullptr;  // nullptr: discard
    Request dst_req = 0;
    std::shared_ptr<Early> dst_early;
    std::string error;  // set once the connection failed
  };
  struct State {
    bool done = false;
    std::string error;   // empty: success
    bool size_mismatch = false;
    int peer = -1;
  };

  void progress_loop();
  void pump_sends(Peer& p, int peer);
  void pump_recvs(Peer& p, int peer);
  void start_message(Peer& p, int peer);
  void finish(Request id, const std::string& error = "", bool size_mismatch = false);
  void fail_peer(Peer& p, const std::string& why);
  void wake();
  Request new_request(int peer);
  std::vector<size_t> collect(const std::vector<Request>& reqs);
  void check_peer(int peer) const;

  int rank_, size_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::string host_;
  int port_ = 0;
  std::vector<Peer> peers_;
  std::unordered_map<Request, State> states_;
  std::unordered_map<Request, char*> recv_targets_;  // receives that claimed an early message
  Request next_ = 1;
  bool stop_ = false;
  bool connected_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace ccompress
