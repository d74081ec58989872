// Entry points: validate, check that all ranks make the same call, build this rank's plan
// for the chosen schedule and run it.
#include "ccompress/collectives.h"

#include <algorithm>
#include <numeric>

#include "ccompress/error.h"
#include "collectives/executor.h"
#include "collectives/header_check.h"
#include "collectives/hier.h"
#include "collectives/ordered_executor.h"
#include "collectives/plan.h"

namespace ccompress {

std::pair<int64_t, int64_t> chunk_range(int64_t n, int parts, int index) {
  // Sizes differ by at most one; the first n % parts chunks get the extra element.
  int64_t base = n / parts, extra = n % parts;
  int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
}

int64_t default_slice_for(const Transport& t, DType dtype) {
  const int64_t bytes = t.default_slice_bytes();
  if (bytes <= 0) return t.default_slice_elems();
  return std::max<int64_t>(1, bytes / int64_t(dtype_size(dtype)));
}

Algo choose_algo(int64_t n, DType dtype, const Codec& codec, int nranks) {
  (void)codec;
  if (nranks <= 2) return Algo::OneShot;  // one quantization, same bytes as two_shot at n=2
  int64_t bytes = n * int64_t(dtype_size(dtype));
  if (bytes <= (64 << 10)) return Algo::OneShot;
  if (nranks >= 16 && bytes <= (1 << 20)) return Algo::Tree;
  return Algo::TwoShot;
}

namespace {

PlanContext make_context(Transport& t, int64_t n, DType dtype, const Codec& codec,
                         const CollectiveOptions& opt, bool inplace) {
  CC_CHECK(n >= 0, "element count " << n << " is negative");
  CC_CHECK(opt.slice_elems >= 0, "slice_elems " << opt.slice_elems << " is negative");
  CC_CHECK(opt.timeout_s > 0, "timeout " << opt.timeout_s << " s must be positive");
  PlanContext ctx;
  ctx.rank = t.rank();
  ctx.size = t.size();
  ctx.n = n;
  ctx.dtype = dtype;
  ctx.codec = codec.bind(dtype);
  int64_t slice = opt.slice_elems > 0 ? opt.slice_elems : default_slice_for(t, dtype);
  int64_t align = ctx.codec.align();
  if (opt.algo == Algo::Hier) {
    ctx.ranks_per_node = opt.ranks_per_node;
    ctx.intra_codec = opt.intra_codec.bind(dtype);
    align = std::lcm(align, ctx.intra_codec.align());
  }
  ctx.slice_elems = align_up(slice, align);
  ctx.op = opt.op;
  ctx.inplace = inplace;
  return ctx;
}

}  // namespace

Plan build_plan(CollectiveKind kind, Algo algo, const PlanContext& ctx, Algo& ran) {
  if (algo == Algo::Hier && kind != CollectiveKind::AllGatherChunks) {
    ran = Algo::Hier;
    return ctx.size == 1 ? build_single(ctx) : build_hier(kind, ctx);
  }
  if (kind == CollectiveKind::AllGather) {
    ran = Algo::OneShot;
    return build_allgather(ctx);
  }
  if (kind == CollectiveKind::AllToAll) {
    ran = Algo::OneShot;
    return build_alltoall(ctx);
  }
  if (kind == CollectiveKind::AllGatherChunks) {
    ran = Algo::TwoShot;
    return build_allgather_chunks(ctx);
  }
  if (kind == CollectiveKind::ReduceScatter) {
    ran = Algo::TwoShot;
    return ctx.size == 1 ? build_single(ctx) : build_two_shot(ctx, true);
  }
  ran = algo == Algo::Auto ? choose_algo(ctx.n, ctx.dtype, ctx.codec, ctx.size) : algo;
  if (ctx.size == 1) return build_single(ctx);
  switch (ran) {
    case Algo::Ring: return build_ring(ctx);
    case Algo::TwoShot: return build_two_shot(ctx, false);
    case Algo::Tree: return build_tree(ctx);
    case Algo::OneShot: return build_one_shot(ctx);
    case Algo::Auto:
    case Algo::Hier: break;  // (resolved above)
  }
  CC_CHECK(false, "no schedule for algo " << algo_name(ran));
  return Plan{};
}

namespace {

CollectiveStats run(Transport& t, KernelBackend& k, CollectiveKind kind, const void* in,
                    void* out, int64_t n, DType dtype, const Codec& codec,
                    const CollectiveOptions& opt) {
  bool inplace = in == out;
  CC_CHECK(n == 0 || in != nullptr, "null input for " << n << " elements");
  CC_CHECK(n == 0 || kind == CollectiveKind::AllToAll || out != nullptr,
           "null output for " << n << " elements");
  PlanContext ctx = make_context(t, n, dtype, codec, opt, inplace);
  CallDescription call{kind, n, dtype, ctx.codec, opt.algo, opt.op, ctx.slice_elems};
  const bool hier = opt.algo == Algo::Hier;
  if (hier) {
    CC_CHECK(kind != CollectiveKind::AllGatherChunks, "no hierarchical all-gather of chunks");
    check_hier(kind, t.size(), opt);
    call.ranks_per_node = opt.ranks_per_node;
    call.inter_algo = opt.inter_algo;
  }
  const bool alltoall = kind == CollectiveKind::AllToAll;
  int64_t out_elems = opt.out_elems;  // alltoall: the output's size
  if (alltoall) {
    // What this rank alone can see is refused here, before any message, like the checks
    // above (Communicator.all_to_all refuses it before it calls, and its peers meet that
    // refusal in their call check); what the ranks must agree on is checked below.
    CC_CHECK_AS(Unsupported, !opt.feedback.any(),
                "alltoall has no error feedback: each call sends other data (dispatched "
                "tokens), so no residual carries over; pass no residuals");
    CC_CHECK(!inplace || n == 0, "alltoall cannot write its output over its input");
    if (out_elems < 0) {
      out_elems = n;
      if (!opt.out_splits.empty()) {
        out_elems = 0;
        for (int64_t s : opt.out_splits) out_elems += s;
      }
    }
    CC_CHECK(out_elems == 0 || out != nullptr, "null output for " << out_elems << " elements");
    call.count = 0;  // counts differ between ranks: check_alltoall_call checks them
  }
  const uint64_t call_number = t.next_call();
  CollectiveStats stats;
  if (alltoall) {
    AgreedSplits agreed = check_alltoall_call(t, call, n, out_elems, opt.in_splits,
                                              opt.out_splits, opt.timeout_s, stats.header_bytes);
    ctx.send_splits = std::move(agreed.send);
    ctx.recv_splits = std::move(agreed.recv);
    ctx.n = agreed.largest;
  } else {
    stats.header_bytes = check_same_call(t, call, opt.timeout_s);
  }
  if (hier && !hier_in_one_plan(opt)) {
    const int64_t check_bytes = stats.header_bytes;
    stats = hier_allreduce(t, k, in, out, n, dtype, codec, opt, call_number);
    stats.header_bytes += check_bytes;
    return stats;
  }

  const ErrorFeedbackBuffers& fb = opt.feedback;
  if (fb.any()) {
    CC_CHECK_AS(Unsupported, kind != CollectiveKind::AllGather,
                "error feedback applies to allreduce and reduce_scatter, not allgather");
    CC_CHECK_AS(Unsupported, !fb.server || kind == CollectiveKind::AllReduce,
                "reduce_scatter quantizes once: pass a worker residual only");
    ctx.worker_feedback = fb.worker != nullptr;
    ctx.server_feedback = fb.server != nullptr;
  }
  if (kind == CollectiveKind::AllGather)
    CC_CHECK(!inplace, "allgather cannot write its output over its input");
  Algo algo = opt.algo;
  if (kind == CollectiveKind::AllReduce && !hier) {
    algo = opt.algo == Algo::Auto ? choose_algo(n, dtype, ctx.codec, ctx.size) : opt.algo;
    if (fb.any() && opt.algo == Algo::Auto && algo != Algo::OneShot)
      algo = Algo::TwoShot;  // the schedules error feedback is defined for
    CC_CHECK_AS(Unsupported,
                !fb.any() || ctx.size == 1 || algo == Algo::TwoShot || algo == Algo::OneShot,
                "error feedback is defined for two_shot (worker and server residuals) and "
                "one_shot (worker residual); "
                    << algo_name(algo)
                    << " re-quantizes partial sums at every hop, which no per-rank residual "
                       "corrects: use algo='two_shot' or 'auto'");
  }
  Plan plan = build_plan(kind, algo, ctx, stats.algo);
  stats.quantizations = plan.quantizations;
  ExecBuffers bufs{in, out, dtype, call_number};
  ExecResult done;
  if (OrderedTransport* ordered = t.ordered()) {
    if (alltoall) {
      // Every message of the pairwise exchange carries this rank's input alone: one level,
      // which needs no peer's plan (nor the peers' splits).
      done = execute_ordered_one_level(plan, ctx, bufs, *ordered, k, opt);
    } else {
      // Every rank's plan: a message's group follows from its sender's dependencies.
      std::vector<Plan> plans(ctx.size);
      for (int p = 0; p < ctx.size; ++p) {
        PlanContext peer = ctx;
        peer.rank = p;
        Algo ran;
        plans[p] = p == ctx.rank ? plan : build_plan(kind, algo, peer, ran);
      }
      done = execute_ordered(plans, ctx, bufs, *ordered, k, opt);
    }
  } else {
    done = execute(plan, ctx.codec, bufs, t, k, opt);
  }
  stats.payload_bytes = done.payload;
  stats.header_bytes += done.headers;
  stats.nonfinite_in = done.nonfinite_in;
  stats.nonfinite_out = done.nonfinite_out;
  stats.feedback_nonfinite = done.feedback_nonfinite;
  return stats;
}

}  // namespace

CollectiveStats allreduce(Transport& t, KernelBackend& k, const void* in, void* out, int64_t n,
                          DType dtype, const Codec& codec, const CollectiveOptions& opt) {
  return run(t, k, CollectiveKind::AllReduce, in, out, n, dtype, codec, opt);
}

CollectiveStats reduce_scatter(Transport& t, KernelBackend& k, const void* in, void* out,
                               int64_t n, DType dtype, const Codec& codec,
                               const CollectiveOptions& opt) {
  return run(t, k, CollectiveKind::ReduceScatter, in, out, n, dtype, codec, opt);
}

CollectiveStats allgather(Transport& t, KernelBackend& k, const void* in, void* out, int64_t n,
                          DType dtype, const Codec& codec, const CollectiveOptions& opt) {
  return run(t, k, CollectiveKind::AllGather, in, out, n, dtype, codec, opt);
}

CollectiveStats alltoall(Transport& t, KernelBackend& k, const void* in, void* out, int64_t n,
                         DType dtype, const Codec& codec, const CollectiveOptions& opt) {
  CC_CHECK_AS(Unsupported, opt.algo == Algo::Auto,
              "alltoall has one schedule (pairwise exchange); algo does not apply, not even "
                  << algo_name(opt.algo));
  return run(t, k, CollectiveKind::AllToAll, in, out, n, dtype, codec, opt);
}

CollectiveStats allgather_chunks(Transport& t, KernelBackend& k, void* buf, int64_t n,
                                 DType dtype, const Codec& codec, const CollectiveOptions& opt) {
  return run(t, k, CollectiveKind::AllGatherChunks, buf, buf, n, dtype, codec, opt);
}

}  // namespace ccompress
