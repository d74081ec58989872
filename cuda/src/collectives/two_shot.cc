// two_shot: compressed all-to-all reduce-scatter, then all-gather of each owner's encoding.
//
// Chunk c of the tensor belongs to rank c. Phase 1: every rank encodes every chunk and sends
// it to its owner; the owner decodes the n contributions (its own encoding included) and
// sums them in rank order 0..n-1 in fp32, so arrival order never changes the bits. Phase 2:
// the owner encodes the sum once and every rank, the owner too, decodes those same bytes.
// Each element is quantized twice whatever the rank count. reduce_scatter stops after the
// owner's sum (one quantization).
#include <vector>

#include "collectives/plan.h"

namespace ccompress {

namespace {
constexpr int kStepContribute = 0;
constexpr int kStepGather = 1;
}  // namespace

Plan build_two_shot(const PlanContext& ctx, bool reduce_scatter_only) {
  PlanBuilder b(ctx);
  const int r = ctx.rank, P = ctx.size;
  size_t max_s = 0;
  const auto chunk_slices = b.chunk_slices(max_s);
  const auto& own = chunk_slices[r];
  const int64_t own_begin = chunk_range(ctx.n, P, r).first;

  for (size_t s = 0; s < max_s; ++s) {
    // Contributions to this rank's slice s, one wire buffer per source rank.
    std::vector<int64_t> contrib_off(P, -1);
    std::vector<int> contrib_op(P, -1);
    if (s < own.size()) {
      int64_t len = own[s].second - own[s].first;
      for (int p = 0; p < P; ++p) {
        if (p == r) continue;
        contrib_off[p] = b.alloc_wire(len);
        contrib_op[p] = b.recv(p, contrib_off[p], len, b.tag(kStepContribute, r, s));
      }
    }
    // Encode slice s of every chunk, starting with the next rank's so that owners are
    // not all served by everyone at once.
    for (int k = 1; k <= P; ++k) {
      int c = (r + k) % P;
      if (s >= chunk_slices[c].size()) continue;
      auto [lo, hi] = chunk_slices[c][s];
      int64_t w = b.alloc_wire(hi - lo);
      int e = b.encode_input(lo, hi - lo, w, 1.f);
      if (c == r) {
        contrib_off[r] = w;
        contrib_op[r] = e;
      } else {
        b.send(c, w, hi - lo, b.tag(kStepContribute, c, s), {e});
      }
    }
    // Owner: sum the contributions in rank order, then finish or re-encode and share.
    int64_t own_wire = -1;
    int own_op = -1;
    if (s < own.size()) {
      auto [lo, hi] = own[s];
      int64_t len = hi - lo;
      int64_t acc = b.alloc_acc(len);
      int prev = b.sum_in_rank_order(contrib_off, contrib_op, len, acc);
      if (reduce_scatter_only) {
        b.finalize(acc, len, lo - own_begin, b.avg_divisor(), {prev});
      } else {
        own_wire = b.alloc_wire(len);
        own_op = b.encode_acc(acc, len, lo, own_wire, b.avg_divisor(), {prev});
      }
    }
    if (!reduce_scatter_only) b.share_slice(chunk_slices, s, kStepGather, own_wire, own_op);
  }
  return b.finish(reduce_scatter_only ? 1 : 2);
}

}  // namespace ccompress
