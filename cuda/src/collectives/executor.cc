#include "collectives/executor.h"

#include <memory>
#include <queue>
#include <vector>

#include "ccompress/error.h"
#include "collectives/message_header.h"
#include "collectives/step_runner.h"

namespace ccompress {

namespace {

bool is_transfer(OpKind k) { return k == OpKind::Send || k == OpKind::Recv; }

class Runner {
 public:
  Runner(const Plan& plan, const Codec& codec, const ExecBuffers& bufs, Transport& t,
         KernelBackend& k, const CollectiveOptions& opt)
      : plan_(plan), t_(t), steps_(plan, codec, bufs, k, opt, t.rank()) {}

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
        steps_.compute(plan_.ops[id]);
        steps_.count_nonfinite(plan_.ops[id]);
        ++done;
        finish(id);
        continue;
      }
      CC_CHECK_AS(Error, !inflight_.empty(), "collective plan stalled with no transfer in flight");
      done += complete(t_.wait_some(inflight_, timeout_s));
    }
    steps_.finish();
    return steps_.result();
  }

  void make_ready(int32_t id) {
    const Op& op = plan_.ops[id];
    if (!is_transfer(op.kind)) {
      ready_.push(id);
      return;
    }
    const int64_t bytes = steps_.message_bytes(op);
    Request req;
    if (op.kind == OpKind::Send) {
      req = t_.isend(op.peer, steps_.send_message(op), bytes, op.tag);
      steps_.result().payload += bytes - kMessageHeaderBytes;
      steps_.result().headers += kMessageHeaderBytes;
    } else {
      req = t_.irecv(op.peer, steps_.recv_message(op), bytes, op.tag);
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
      if (op.kind == OpKind::Recv) steps_.received(op);  // before any reader becomes ready
      finish(id);
    }
    return ids.size();
  }

  void finish(int32_t id) {
    for (int32_t d : dependents_[id])
      if (--pending_[d] == 0) make_ready(d);
  }

  const Plan& plan_;
  Transport& t_;
  StepRunner steps_;
  std::vector<int> pending_;
  std::vector<std::vector<int32_t>> dependents_;
  std::priority_queue<int32_t, std::vector<int32_t>, std::greater<int32_t>> ready_;
  std::vector<Request> inflight_;
  std::vector<int32_t> inflight_ops_;
};

}  // namespace

ExecResult execute(const Plan& plan, const Codec& codec, const ExecBuffers& bufs, Transport& t,
                   KernelBackend& k, const CollectiveOptions& opt) {
  Runner runner(plan, codec, bufs, t, k, opt);
  return runner.run(opt.timeout_s);
}

}  // namespace ccompress
