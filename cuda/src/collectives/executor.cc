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
    acc_.reset(new float[std::max<int64_t>(plan.acc_elems, 1)]);
    wire_.reset(new uint64_t[std::max<int64_t>(plan.wire_bytes / 8 + 1, 1)]);
  }

  ExecResult run(double timeout_s) {
    try {
      return run_all(timeout_s);
    } catch (...) {
      t_.cancel(inflight_);
      throw;
    }
  }

 private:
  ExecResult run_all(double timeout_s) {
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
        count_nonfinite(plan_.ops[id]);
        ++done;
        finish(id);
        continue;
      }
      CC_CHECK_AS(Error, !inflight_.empty(), "collective plan stalled with no transfer in flight");
      done += complete(t_.wait_some(inflight_, timeout_s));
    }
    return result_;
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
      result_.payload += bytes - kMessageHeaderBytes;
      result_.headers += kMessageHeaderBytes;
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
      case BufKind::Acc: return acc_.get() + b.offset;
      case BufKind::Wire: return reinterpret_cast<uint8_t*>(wire_.get()) + b.offset;
    }
    return nullptr;
  }

  // Adds the op's input elements (each is read by exactly one op) or output elements (each
  // written by exactly one) to the counts; -1 sticks once the backend declines to count.
  void count_nonfinite(const Op& op) {
    const BufRef* in = op.src.kind == BufKind::Input ? &op.src
                       : op.x.kind == BufKind::Input ? &op.x : nullptr;
    if (in) add_count(result_.nonfinite_in, k_.count_nonfinite(ptr(*in), bufs_.dtype, op.n));
    if (op.dst.kind == BufKind::Output)
      add_count(result_.nonfinite_out, k_.count_nonfinite(ptr(op.dst), bufs_.dtype, op.n));
  }

  static void add_count(int64_t& total, int64_t c) {
    total = (total < 0 || c < 0) ? -1 : total + c;
  }

  EncodeContext context(const Op& op) const {
    return EncodeContext{opt_.seed, opt_.step, t_.rank(), op.index};
  }

  void compute(const Op& op) {
    float* acc_dst = op.dst.kind == BufKind::Acc ? static_cast<float*>(ptr(op.dst)) : nullptr;
    switch (op.kind) {
      case OpKind::Encode: {
        bool from_acc = op.src.kind == BufKind::Acc;
        if (op.feedback != Feedback::None) {
          encode_with_feedback(op, from_acc);
          break;
        }
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

  // v = src / divisor + e is encoded; then e <- v - decode(those bytes), the value every
  // receiver adds, with NaN/Inf kept out of e (counted in result_.feedback_nonfinite).
  void encode_with_feedback(const Op& op, bool from_acc) {
    const ErrorFeedbackBuffers& fb = opt_.feedback;
    float* e = (op.feedback == Feedback::Worker ? fb.worker : fb.server) + op.residual_off;
    float* v = acc_.get() + plan_.feedback_scratch;
    float* decoded = v + op.n;
    if (from_acc) {
      k_.finalize(static_cast<const float*>(ptr(op.src)), op.n, op.divisor, v, DType::Float32);
    } else {
      k_.load_accumulate(ptr(op.src), bufs_.dtype, op.n, v, true);
      if (op.divisor != 1.f) k_.finalize(v, op.n, op.divisor, v, DType::Float32);
    }
    k_.load_accumulate(e, DType::Float32, op.n, v, false);
    k_.encode(v, DType::Float32, op.n, codec_, 1.f, context(op), ptr(op.dst));
    k_.decode_accumulate(ptr(op.dst), op.n, codec_, decoded, true);
    result_.feedback_nonfinite += k_.feedback_residual(v, decoded, op.n, e);
  }

  const Plan& plan_;
  const Codec& codec_;
  const ExecBuffers& bufs_;
  Transport& t_;
  KernelBackend& k_;
  const CollectiveOptions& opt_;
  std::unique_ptr<float[]> acc_;
  std::unique_ptr<uint64_t[]> wire_;
  std::vector<int> pending_;
  std::vector<std::vector<int32_t>> dependents_;
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<int32_t>> ready_;
  std::vector<Request> inflight_;
  std::vector<int32_t> inflight_ops_;
  ExecResult result_;
};

}  // namespace

ExecResult execute(const Plan& plan, const Codec& codec, const ExecBuffers& bufs, Transport& t,
                   KernelBackend& k, const CollectiveOptions& opt) {
  Runner runner(plan, codec, bufs, t, k, opt);
  return runner.run(opt.timeout_s);
}

}  // namespace ccompress
