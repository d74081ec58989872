// alltoall: rank r's input is P pieces in rank order, piece j (ctx.send_splits[j]
// elements) for rank j; rank r's output is the pieces from every rank in rank order
// (ctx.recv_splits[i] elements from rank i). Each piece is encoded once, on its own: its
// slices start at the piece's first element, so no scale group, rotation block or run scale
// spans two pieces, and the bits a rank receives are decode(encode(piece)) whatever the
// slice size. A rank's piece for itself is encoded and decoded the same way, so every piece
// meets the codec once wherever it comes from.
//
// Step k = 1..P-1 sends to rank r + k and receives from rank r - k (the usual pairwise
// exchange order, so no rank has all its peers sending to it at once); the receives are
// posted first, then the encodes in peer order, each send as soon as its encode is done,
// and this rank's own piece last (it waits for nobody).
#include "ccompress/error.h"
#include "collectives/plan.h"

namespace ccompress {

namespace {
constexpr int kStepAll = 0;
}

Plan build_alltoall(const PlanContext& ctx) {
  PlanBuilder b(ctx);
  const int r = ctx.rank, P = ctx.size;
  const std::vector<int64_t>& sends = ctx.send_splits;
  const std::vector<int64_t>& recvs = ctx.recv_splits;
  CC_CHECK_AS(Error, sends.size() == size_t(P) && recvs.size() == size_t(P),
              "an all-to-all plan needs one split per rank each way");
  std::vector<int64_t> in_off(P + 1, 0), out_off(P + 1, 0);
  for (int j = 0; j < P; ++j) {
    in_off[j + 1] = in_off[j] + sends[j];
    out_off[j + 1] = out_off[j] + recvs[j];
  }
  for (int k = 1; k < P; ++k) {
    const int src = (r + P - k) % P;
    auto s = b.slices(0, recvs[src]);
    for (size_t i = 0; i < s.size(); ++i) {
      const int64_t len = s[i].second - s[i].first;
      int64_t w = b.alloc_wire(len);
      int rv = b.recv(src, w, len, b.tag(kStepAll, src, int64_t(i)));
      b.decode_out(w, len, out_off[src] + s[i].first, {rv});
    }
  }
  for (int k = 1; k <= P; ++k) {  // the peers first, this rank's own piece last
    const int dst = (r + k) % P;
    auto s = b.slices(0, sends[dst]);
    for (size_t i = 0; i < s.size(); ++i) {
      const int64_t len = s[i].second - s[i].first, at = in_off[dst] + s[i].first;
      int64_t w = b.alloc_wire(len);
      int e = b.encode_input(at, len, w, 1.f);
      if (dst == r) {
        b.decode_out(w, len, out_off[r] + s[i].first, {e});
      } else {
        b.send(dst, w, len, b.tag(kStepAll, r, int64_t(i)), {e});
      }
    }
  }
  return b.finish(1);
}

}  // namespace ccompress
