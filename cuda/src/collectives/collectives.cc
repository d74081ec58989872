// Entry points: validate, check that all ranks make the same call, build this rank's plan
// for the chosen schedule and run it.
#include "ccompress/collectives.h"

#include "ccompress/error.h"
#include "collectives/executor.h"
#include "collectives/header_check.h"
#include "collectives/ordered_executor.h"
#include "collectives/plan.h"

namespace ccompress {

std::pair<int64_t, int64_t> chunk_range(int64_t n, int parts, int index) {
  // Sizes differ by at most one; the first n % parts chunks get the extra element.
  int64_t base = n / parts, extra = n % parts;
  int64_t begin = index * base + std::min<int64_t>(index, extra);
  return {begin, begin + base + (index < extra ? 1 : 0)};
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
  int64_t slice = opt.slice_elems > 0 ? opt.slice_elems : kDefaultSliceElems;
  ctx.slice_elems = align_up(slice, ctx.codec.align());
  ctx.op = opt.op;
  ctx.inplace = inplace;
  return ctx;
}

}  // namespace

Plan build_plan(CollectiveKind kind, Algo algo, const PlanContext& ctx, Algo& ran) {
  if (kind == CollectiveKind::AllGather) {
    ran = Algo::OneShot;
    return build_allgather(ctx);
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
    case Algo::Auto: break;
  }
  CC_CHECK(false, "no schedule for algo " << algo_name(ran));
  return Plan{};
}

namespace {

CollectiveStats run(Transport& t, KernelBackend& k, CollectiveKind kind, const void* in,
                    void* out, int64_t n, DType dtype, const Codec& codec,
                    const CollectiveOptions& opt) {
  bool inplace = in == out;
  CC_CHECK(n == 0 || (in != nullptr && out != nullptr), "null buffer for " << n << " elements");
  PlanContext ctx = make_context(t, n, dtype, codec, opt, inplace);
  CallDescription call{kind, n, dtype, ctx.codec, opt.algo, opt.op, ctx.slice_elems};
  const uint64_t call_number = t.next_call();
  CollectiveStats stats;
  stats.header_bytes = check_same_call(t, call, opt.timeout_s);

  if (kind == CollectiveKind::AllGather)
    CC_CHECK(!inplace, "allgather cannot write its output over its input");
  Plan plan = build_plan(kind, opt.algo, ctx, stats.algo);
  stats.quantizations = plan.quantizations;
  ExecBuffers bufs{in, out, dtype, call_number};
  SentBytes sent;
  if (OrderedTransport* ordered = t.ordered()) {
    // Every rank's plan: a message's group follows from its sender's dependencies.
    std::vector<Plan> plans(ctx.size);
    for (int p = 0; p < ctx.size; ++p) {
      PlanContext peer = ctx;
      peer.rank = p;
      Algo ran;
      plans[p] = p == ctx.rank ? plan : build_plan(kind, opt.algo, peer, ran);
    }
    sent = execute_ordered(plans, ctx, bufs, *ordered, k, opt);
  } else {
    sent = execute(plan, ctx.codec, bufs, t, k, opt);
  }
  stats.payload_bytes = sent.payload;
  stats.header_bytes += sent.headers;
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

}  // namespace ccompress
