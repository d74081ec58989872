#include "collectives/ordered_executor.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "ccompress/error.h"
#include "collectives/step_runner.h"

namespace ccompress {

namespace {

constexpr int kUnknown = -2;

bool is_transfer(OpKind k) { return k == OpKind::Send || k == OpKind::Recv; }

uint64_t pair_key(int peer, int tag) { return (uint64_t(uint32_t(peer)) << 32) | uint32_t(tag); }

// Level of the data each op produces (-1: depends on no received message); a receive
// produces its message's level, one more than what its sender's send depends on.
class Levels {
 public:
  explicit Levels(const std::vector<Plan>& plans) : plans_(plans), h_(plans.size()) {
    sends_.resize(plans.size());
    for (size_t p = 0; p < plans.size(); ++p) {
      h_[p].assign(plans[p].ops.size(), kUnknown);
      for (size_t i = 0; i < plans[p].ops.size(); ++i) {
        const Op& op = plans[p].ops[i];
        if (op.kind != OpKind::Send) continue;
        bool fresh = sends_[p].emplace(pair_key(op.peer, op.tag), int32_t(i)).second;
        CC_CHECK_AS(Error, fresh, "rank " << p << " sends tag " << op.tag << " to rank "
                                          << op.peer << " twice in one collective");
      }
    }
    solve();
  }

  int message_level(int rank, const Op& op, int32_t id) const {
    return op.kind == OpKind::Recv ? h_[rank][id] : h_[rank][id] + 1;
  }

 private:
  // Passes over the ops still unknown until none is left; each pass settles at least the
  // lowest unsettled level, so there are about as many passes as levels.
  void solve() {
    std::vector<std::vector<int32_t>> todo(plans_.size());
    for (size_t p = 0; p < plans_.size(); ++p)
      for (size_t i = 0; i < plans_[p].ops.size(); ++i) todo[p].push_back(int32_t(i));
    bool left = true;
    while (left) {
      bool progress = false;
      left = false;
      for (size_t p = 0; p < plans_.size(); ++p) {
        std::vector<int32_t> still;
        for (int32_t i : todo[p]) {
          if (settle(int(p), i)) {
            progress = true;
          } else {
            still.push_back(i);
          }
        }
        todo[p].swap(still);
        left = left || !todo[p].empty();
      }
      CC_CHECK_AS(Error, !left || progress,
                  "the ranks' plans wait for each other in a cycle (a schedule bug)");
    }
  }

  bool settle(int p, int32_t i) {
    const Op& op = plans_[p].ops[i];
    int h = -1;
    for (int32_t d : op.deps) {
      if (h_[p][d] == kUnknown) return false;
      h = std::max(h, h_[p][d]);
    }
    if (op.kind == OpKind::Recv) {
      CC_CHECK_AS(Error, op.peer >= 0 && op.peer < int(plans_.size()),
                  "rank " << p << " receives from rank " << op.peer << " of " << plans_.size());
      auto it = sends_[op.peer].find(pair_key(p, op.tag));
      CC_CHECK_AS(Error, it != sends_[op.peer].end(),
                  "rank " << p << " expects tag " << op.tag << " from rank " << op.peer
                          << ", which never sends it");
      const int sender = h_[op.peer][it->second];
      if (sender == kUnknown) return false;
      h = std::max(h, sender + 1);
    }
    h_[p][i] = h;
    return true;
  }

  const std::vector<Plan>& plans_;
  std::vector<std::vector<int>> h_;
  std::vector<std::unordered_map<uint64_t, int32_t>> sends_;
};

class OrderedRunner {
 public:
  OrderedRunner(const Plan& plan, std::vector<std::pair<int, int64_t>> keys,
                const PlanContext& ctx, const ExecBuffers& bufs, OrderedTransport& t,
                KernelBackend& k, const CollectiveOptions& opt)
      : plan_(plan),
        t_(t),
        steps_(plan_, ctx.codec, bufs, k, opt, ctx.rank),
        keys_(std::move(keys)) {}

  ExecResult run(double timeout_s) {
    const size_t n = plan_.ops.size();
    issued_.assign(n, false);
    group_of_.assign(n, -1);
    std::map<std::pair<int, int64_t>, std::vector<int32_t>> groups;
    for (size_t i = 0; i < n; ++i)
      if (is_transfer(plan_.ops[i].kind)) groups[keys_[i]].push_back(int32_t(i));
    for (auto& [key, ids] : groups) {
      // Both ends of a pair order their messages of one group alike: by tag.
      std::stable_sort(ids.begin(), ids.end(),
                       [&](int32_t a, int32_t b) { return plan_.ops[a].tag < plan_.ops[b].tag; });
      post(ids);
    }
    for (size_t i = 0; i < n; ++i) issue(int32_t(i));
    t_.drain(timeout_s);
    steps_.finish();
    return steps_.result();
  }

 private:
  // Issues the compute op @p id after its dependencies; transfers were posted by post().
  void issue(int32_t id) {
    if (issued_[id]) return;
    const Op& op = plan_.ops[id];
    CC_CHECK_AS(Error, !is_transfer(op.kind),
                "transfer " << id << " is needed before its group was posted (a schedule bug)");
    for (int32_t d : op.deps) {
      if (is_transfer(plan_.ops[d].kind)) {
        CC_CHECK_AS(Error, issued_[d], "op " << id << " reads transfer " << d
                                             << " before its group was posted");
        t_.compute_after(group_of_[d]);
      } else {
        issue(d);
      }
    }
    steps_.compute(op);
    steps_.count_nonfinite(op);
    issued_[id] = true;
  }

  void post(const std::vector<int32_t>& ids) {
    std::vector<Transfer> group;
    for (int32_t id : ids) {
      const Op& op = plan_.ops[id];
      if (op.kind == OpKind::Send)
        for (int32_t d : op.deps)
          if (!is_transfer(plan_.ops[d].kind)) issue(d);  // forwarded receives: same stream
      const int64_t bytes = steps_.message_bytes(op);
      if (op.kind == OpKind::Send) {
        group.push_back({true, op.peer, const_cast<void*>(steps_.send_message(op)), bytes, op.tag});
        steps_.result().payload += bytes - kMessageHeaderBytes;
        steps_.result().headers += kMessageHeaderBytes;
      } else {
        group.push_back({false, op.peer, steps_.recv_message(op), bytes, op.tag});
      }
    }
    const int g = t_.post_group(group);
    for (int32_t id : ids) {
      issued_[id] = true;
      group_of_[id] = g;
      if (plan_.ops[id].kind == OpKind::Recv) steps_.received(plan_.ops[id]);
    }
  }

  const Plan& plan_;
  OrderedTransport& t_;
  StepRunner steps_;
  std::vector<std::pair<int, int64_t>> keys_;
  std::vector<bool> issued_;
  std::vector<int> group_of_;
};

}  // namespace

std::vector<std::pair<int, int64_t>> transfer_group_keys(const std::vector<Plan>& plans,
                                                         const PlanContext& ctx) {
  Levels levels(plans);
  const Plan& mine = plans[ctx.rank];
  std::vector<std::pair<int, int64_t>> keys(mine.ops.size(), {-1, -1});
  for (size_t i = 0; i < mine.ops.size(); ++i) {
    const Op& op = mine.ops[i];
    if (is_transfer(op.kind))
      keys[i] = {levels.message_level(ctx.rank, op, int32_t(i)),
                 PlanBuilder::tag_slice(ctx, op.tag)};
  }
  return keys;
}

std::vector<std::pair<int, int64_t>> one_level_group_keys(const Plan& plan,
                                                          const PlanContext& ctx) {
  // Whether an op waits on a received message, directly or through its dependencies (deps
  // point to earlier ops, so one pass in op order settles them).
  std::vector<bool> after_recv(plan.ops.size(), false);
  std::vector<std::pair<int, int64_t>> keys(plan.ops.size(), {-1, -1});
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const Op& op = plan.ops[i];
    for (int32_t d : op.deps)
      after_recv[i] = after_recv[i] || after_recv[d] || plan.ops[d].kind == OpKind::Recv;
    CC_CHECK_AS(Error, op.kind != OpKind::Send || !after_recv[i],
                "send " << i << " waits on a received message: the schedule has more than "
                                "one level (a schedule bug)");
    if (is_transfer(op.kind)) keys[i] = {0, PlanBuilder::tag_slice(ctx, op.tag)};
  }
  return keys;
}

ExecResult execute_ordered(const std::vector<Plan>& plans, const PlanContext& ctx,
                          const ExecBuffers& bufs, OrderedTransport& t, KernelBackend& k,
                          const CollectiveOptions& opt) {
  OrderedRunner runner(plans[ctx.rank], transfer_group_keys(plans, ctx), ctx, bufs, t, k, opt);
  return runner.run(opt.timeout_s);
}

ExecResult execute_ordered_one_level(const Plan& plan, const PlanContext& ctx,
                                     const ExecBuffers& bufs, OrderedTransport& t,
                                     KernelBackend& k, const CollectiveOptions& opt) {
  OrderedRunner runner(plan, one_level_group_keys(plan, ctx), ctx, bufs, t, k, opt);
  return runner.run(opt.timeout_s);
}

}  // namespace ccompress
