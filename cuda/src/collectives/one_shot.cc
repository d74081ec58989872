// one_shot: every rank sends its encoded tensor to every other rank; each rank decodes the
// n encodings and sums them in rank order 0..n-1 (its own encoding included), so all ranks
// compute the same bits. One quantization per element; n-1 times the bytes of two_shot's
// first phase, which is why it is for small messages.
#include <vector>

#include "collectives/plan.h"

namespace ccompress {

namespace {
constexpr int kStepAll = 0;
}

Plan build_one_shot(const PlanContext& ctx) {
  PlanBuilder b(ctx);
  const int r = ctx.rank, P = ctx.size;
  auto all_slices = b.slices(0, ctx.n);
  for (size_t s = 0; s < all_slices.size(); ++s) {
    auto [lo, hi] = all_slices[s];
    int64_t len = hi - lo;
    std::vector<int64_t> w(P);
    std::vector<int> ready(P);
    for (int k = 1; k < P; ++k) {
      int p = (r + k) % P;
      w[p] = b.alloc_wire(len);
      ready[p] = b.recv(p, w[p], len, b.tag(kStepAll, p, s));
    }
    w[r] = b.alloc_wire(len);
    ready[r] = b.encode_input(lo, len, w[r], 1.f);
    for (int k = 1; k < P; ++k) b.send((r + k) % P, w[r], len, b.tag(kStepAll, r, s), {ready[r]});
    int64_t acc = b.alloc_acc(len);
    int prev = b.sum_in_rank_order(w, ready, len, acc);
    b.finalize(acc, len, lo, b.avg_divisor(), {prev});
  }
  return b.finish(1);
}

}  // namespace ccompress
