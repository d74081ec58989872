// allgather: every rank's input, encoded once, reaches every rank; each rank decodes all n
// encodings (its own too), so the output is bit-identical everywhere.
//
// allgather of chunks (hier.cc's last level): the buffer is cut by chunk_range; each rank's
// own chunk, encoded once, reaches every rank, which decodes it in place of its own copy.
#include "collectives/plan.h"

namespace ccompress {

namespace {
constexpr int kStepAll = 0;
}

Plan build_allgather_chunks(const PlanContext& ctx) {
  PlanBuilder b(ctx);
  const int r = ctx.rank;
  size_t max_s = 0;
  const auto chunk_slices = b.chunk_slices(max_s);
  for (size_t s = 0; s < max_s; ++s) {
    int64_t own_wire = -1;
    int own_op = -1;
    if (s < chunk_slices[r].size()) {
      auto [lo, hi] = chunk_slices[r][s];
      own_wire = b.alloc_wire(hi - lo);
      own_op = b.encode_input(lo, hi - lo, own_wire, 1.f);
    }
    b.share_slice(chunk_slices, s, kStepAll, own_wire, own_op);
  }
  return b.finish(1);
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
