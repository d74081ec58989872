#include "collectives/executor.h"

#include <cstring>
#include <memory>
#include <queue>
#include <vector>

#include "ccompress/error.h"
#include "collectives/message_header.h"

namespace ccompress {

namespace {


bool is_transfer(OpKind k) { return k == OpKind::Send || k == OpKind::Recv; }

class Runner {
 public:
  Runner(const Plan& plan, const Codec& codec, const ExecBuffers& bufs, Transport& t,
         KernelBackend& k, const CollectiveOptions& opt)
      : plan_(plan), codec_(codec), bufs_(bufs), t_(t), k_(k), opt_(opt) {
    // Accumulators, then wire buffers, in one block: the backend's (device memory for a
    // device backend) or a host allocation.
    const int64_t acc_bytes = align_up(std::max<int64_t>(plan.acc_elems, 1) * 4, 256);
    const int64_t total = acc_bytes + align_up(plan.wire_bytes + 8, 256);
    uint8_t* block = static_cast<uint8_t*>(k.workspace(total));
    if (block == nullptr) {
      host_.reset(new uint64_t[total / 8]);
      block = reinterpret_cast<uint8_t*>(host_.get());
    }
    acc_ = reinterpret_cast<float*>(block);
    wire_ = block + acc_bytes;
  }

  SentBytes run(double timeout_s) {
    try {
      return run_all(timeout_s);
    } catch (...) {
      t_.cancel(inflight_);
      throw;
    }
  }

 private:
  SentBytes run_all(double timeout_s) {
    const size_t n_ops = plan_.ops.size();
    pending_.assign(n_ops, 0);
    dependents_.assign(n_ops, {});
    for (size_t i = 0; i < n_ops; ++i) {
      pending_[i] = int(plan_.ops[i].deps.size());
      for (int32_t d : plan_.ops[i].deps) dependents_[d].push_back(int32_t(i));
    }
    for (size_t i = 0; i < n_ops; ++i)
      if (pending_[i] == 0) make_ready(int32_t(i));
    size_t done = 0;
    while (done < n_ops) {
      if (!inflight_.empty()) {
        done += complete(t_.test_some(inflight_));
        if (done == n_ops) break;
      }
      if (!ready_.empty()) {
        int32_t id = ready_.top();
        ready_.pop();
        compute(plan_.ops[id]);
        ++done;
        finish(id);
        continue;
      }
      CC_CHECK_AS(Error, !inflight_.empty(), "collective plan stalled with no transfer in flight");
      done += complete(t_.wait_some(inflight_, timeout_s));
    }
    return sent_;
  }

  void make_ready(int32_t id) {
    const Op& op = plan_.ops[id];
    if (!is_transfer(op.kind)) {
      ready_.push(id);
      return;
    }
    const int64_t bytes = codec_.wire_bytes(op.n) + kMessageHeaderBytes;
    Request req;
    if (op.kind == OpKind::Send) {
      uint8_t* msg = message(op.src);
      // A buffer sent to several peers (or forwarded as received) already holds this header;
      // rewriting it would touch a buffer that an earlier send may still be reading.
      uint8_t h[kMessageHeaderBytes];
      write_message_header(expected_header(op), h);
      if (std::memcmp(msg, h, sizeof h) != 0) std::memcpy(msg, h, sizeof h);
      req = t_.isend(op.peer, msg, bytes, op.tag);
      sent_.payload += bytes - kMessageHeaderBytes;
      sent_.headers += kMessageHeaderBytes;
    } else {
      req = t_.irecv(op.peer, message(op.dst), bytes, op.tag);
    }
    inflight_.push_back(req);
    inflight_ops_.push_back(id);
  }

  size_t complete(const std::vector<size_t>& finished) {
    if (finished.empty()) return 0;
    std::vector<int32_t> ids;
    for (size_t i : finished) ids.push_back(inflight_ops_[i]);
    erase_completed(inflight_, finished);
    erase_completed(inflight_ops_, finished);
    for (int32_t id : ids) {
      const Op& op = plan_.ops[id];
      if (op.kind == OpKind::Recv)  // before any op that reads the payload can become ready
        check_message_header(read_message_header(message(op.dst)), expected_header(op), op.peer);
      finish(id);
    }
    return ids.size();
  }

  // The header in front of a wire buffer (PlanBuilder::alloc_wire leaves room for it).
  uint8_t* message(const BufRef& wire) const {
    return static_cast<uint8_t*>(ptr(wire)) - kMessageHeaderBytes;
  }

  MessageHeader expected_header(const Op& op) const {
    return make_message_header(codec_, bufs_.dtype, op.n, bufs_.call);
  }

  void finish(int32_t id) {
    for (int32_t d : dependents_[id])
      if (--pending_[d] == 0) make_ready(d);
  }

  void* ptr(const BufRef& b) const {
    size_t es = dtype_size(bufs_.dtype);
    switch (b.kind) {
      case BufKind::Input: return const_cast<char*>(static_cast<const char*>(bufs_.input)) + b.offset * es;
      case BufKind::Output: return static_cast<char*>(bufs_.output) + b.offset * es;
      case BufKind::Acc: return acc_ + b.offset;
      case BufKind::Wire: return wire_ + b.offset;
    }
    return nullptr;
  }

  EncodeContext context(const Op& op) const {
    return EncodeContext{opt_.seed, opt_.step, t_.rank(), op.index};
  }

  void compute(const Op& op) {
    float* acc_dst = op.dst.kind == BufKind::Acc ? static_cast<float*>(ptr(op.dst)) : nullptr;
    switch (op.kind) {
      case OpKind::Encode: {
        bool from_acc = op.src.kind == BufKind::Acc;
        k_.encode(ptr(op.src), from_acc ? DType::Float32 : bufs_.dtype, op.n, codec_, op.divisor,
                  context(op), ptr(op.dst));
        break;
      }
      case OpKind::DecodeAcc:
        k_.decode_accumulate(ptr(op.src), op.n, codec_, acc_dst, op.assign);
        break;
      case OpKind::LoadAcc:
        k_.load_accumulate(ptr(op.src), bufs_.dtype, op.n, acc_dst, op.assign);
        break;
      case OpKind::DecodeReduceEncode:
        k_.decode_reduce_encode(ptr(op.src), ptr(op.x), bufs_.dtype, op.n, codec_, op.divisor,
                                context(op), ptr(op.dst));
        break;
      case OpKind::Finalize:
        k_.finalize(static_cast<const float*>(ptr(op.src)), op.n, op.divisor, ptr(op.dst),
                    bufs_.dtype);
        break;
      case OpKind::DecodeOut:
        k_.decode(ptr(op.src), op.n, codec_, ptr(op.dst), bufs_.dtype);
        break;
      case OpKind::Send:
      case OpKind::Recv:
        break;
    }
  }

  const Plan& plan_;
  const Codec& codec_;
  const ExecBuffers& bufs_;
  Transport& t_;
  KernelBackend& k_;
  const CollectiveOptions& opt_;
  std::unique_ptr<uint64_t[]> host_;
  float* acc_ = nullptr;
  uint8_t* wire_ = nullptr;
  std::vector<int> pending_;
  std::vector<std::vector<int32_t>> dependents_;
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<int32_t>> ready_;
  std::vector<Request> inflight_;
  std::vector<int32_t> inflight_ops_;
  SentBytes sent_;
};

}  // namespace

SentBytes execute(const Plan& plan, const Codec& codec, const ExecBuffers& bufs, Transport& t,
                KernelBackend& k, const CollectiveOptions& opt) {
  Runner runner(plan, codec, bufs, t, k, opt);
  return runner.run(opt.timeout_s);
}

}  // namespace ccompress
