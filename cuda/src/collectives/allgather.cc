// allgather: every rank's input, encoded once, reaches every rank; each rank decodes all n
// encodings (its own too), so the output is bit-identical everywhere.
#include "collectives/plan.h"

namespace ccompress {

namespace {
constexpr int kStepAll = 0;
}

Plan build_allgather(const PlanContext& ctx) {
  PlanBuilder b(ctx);
  const int r = ctx.rank, P = ctx.size;
  auto all_slices = b.slices(0, ctx.n);
  for (size_t s = 0; s < all_slices.size(); ++s) {
    auto [lo, hi] = all_slices[s];
    int64_t len = hi - lo;
    for (int k = 1; k < P; ++k) {
      int p = (r + P - k) % P;
      int64_t w = b.alloc_wire(len);
      int rv = b.recv(p, w, len, b.tag(kStepAll, p, s));
      b.decode_out(w, len, int64_t(p) * ctx.n + lo, {rv});
    }
    int64_t w = b.alloc_wire(len);
    int e = b.encode_input(lo, len, w, 1.f);
    for (int k = 1; k < P; ++k) b.send((r + k) % P, w, len, b.tag(kStepAll, r, s), {e});
    b.decode_out(w, len, int64_t(r) * ctx.n + lo, {e});
  }
  return b.finish(1);
}

}  // namespace ccompress
