// Entry points: validate, check that all ranks make the same call, build this rank's plan
// for the chosen schedule and run it.
#include "ccompress/collectives.h"

#include "ccompress/error.h"
#include "collectives/executor.h"
#include "collectives/header_check.h"
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

  Plan plan;
  if (kind == CollectiveKind::AllGather) {
    CC_CHECK(!inplace, "allgather cannot write its output over its input");
    stats.algo = Algo::OneShot;
    plan = build_allgather(ctx);
  } else if (kind == CollectiveKind::ReduceScatter) {
    stats.algo = Algo::TwoShot;
    plan = ctx.size == 1 ? build_single(ctx) : build_two_shot(ctx, true);
  } else {
    stats.algo = opt.algo == Algo::Auto ? choose_algo(n, dtype, ctx.codec, ctx.size) : opt.algo;
    if (ctx.size == 1) {
      plan = build_single(ctx);
    } else {
      switch (stats.algo) {
        case Algo::Ring: plan = build_ring(ctx); break;
        case Algo::TwoShot: plan = build_two_shot(ctx, false); break;
        case Algo::Tree: plan = build_tree(ctx); break;
        case Algo::OneShot: plan = build_one_shot(ctx); break;
        case Algo::Auto: break;
      }
    }
  }
  stats.quantizations = plan.quantizations;
  ExecBuffers bufs{in, out, dtype, call_number};
  SentBytes sent = execute(plan, ctx.codec, bufs, t, k, opt);
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
