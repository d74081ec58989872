// ring: NCCL's ring with compression in every hop.
//
// Reduce-scatter: in step t rank r sends chunk (r - t) mod n to rank r+1 and receives chunk
// (r - t - 1) mod n from rank r-1; each hop decodes the partial sum, adds the local input
// (decode(partial) + x, always in that order) and re-encodes it, fused in one pass. After
// n-1 steps rank r holds the full sum of chunk (r + 1) mod n: it encodes it a last time
// (dividing for avg) and decodes its own encoding for its output. All-gather: the encoded
// final chunks travel n-1 more hops unchanged, so every rank decodes the same bytes.
// A chunk's first contribution is quantized n times on its way, the owner's once.
#include "collectives/plan.h"

namespace ccompress {

Plan build_ring(const PlanContext& ctx) {
  PlanBuilder b(ctx);
  const int r = ctx.rank, P = ctx.size;
  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  auto mod = [P](int v) { return ((v % P) + P) % P; };
  size_t max_s = 0;
  const auto chunk_slices = b.chunk_slices(max_s);
  // Steps 0..P-2 reduce, steps P-1..2P-3 gather; the message of step t carries tag (t, chunk).
  for (size_t s = 0; s < max_s; ++s) {
    int c0 = r;
    if (s < chunk_slices[c0].size()) {
      auto [lo, hi] = chunk_slices[c0][s];
      int64_t w = b.alloc_wire(hi - lo);
      int e = b.encode_input(lo, hi - lo, w, 1.f);
      b.send(next, w, hi - lo, b.tag(0, c0, s), {e});
    }
    for (int t = 0; t < P - 1; ++t) {
      int c = mod(r - t - 1);
      if (s >= chunk_slices[c].size()) continue;
      auto [lo, hi] = chunk_slices[c][s];
      int64_t len = hi - lo;
      int64_t w_in = b.alloc_wire(len);
      int rv = b.recv(prev, w_in, len, b.tag(t, c, s));
      int64_t w_out = b.alloc_wire(len);
      bool last = (t == P - 2);
      int d = b.decode_reduce_encode(w_in, lo, len, w_out, last ? b.avg_divisor() : 1.f, {rv});
      b.send(next, w_out, len, b.tag(t + 1, c, s), {d});
      if (last) b.decode_out(w_out, len, lo, {d});
    }
    // All-gather: at gather step u rank r receives the final chunk (r - u) and forwards it
    // unless the next rank is its owner's.
    for (int u = 0; u < P - 1; ++u) {
      int c = mod(r - u);
      if (s >= chunk_slices[c].size()) continue;
      auto [lo, hi] = chunk_slices[c][s];
      int64_t len = hi - lo;
      int64_t w = b.alloc_wire(len);
      int rv = b.recv(prev, w, len, b.tag(P - 1 + u, c, s));
      if (u < P - 2) b.send(next, w, len, b.tag(P + u, c, s), {rv});
      b.decode_out(w, len, lo, {rv});
    }
  }
  return b.finish(P);
}

}  // namespace ccompress
