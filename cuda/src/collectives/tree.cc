// tree: reduce up a binary tree (root 0, children 2i+1 and 2i+2), broadcast down.
//
// Every slice of the tensor travels separately, so the levels of the tree pipeline. A node
// sums its own input and its children's decoded partial sums (own, left, right: a fixed
// order), re-encodes and sends the result to its parent. The root encodes the total once
// and that encoding is forwarded unchanged down the tree, so every rank decodes the same
// bytes. Quantizations per element: the depth of the tree plus one.
#include <vector>

#include "collectives/plan.h"

namespace ccompress {

namespace {
constexpr int kStepUp = 0;
constexpr int kStepDown = 1;
}  // namespace

Plan build_tree(const PlanContext& ctx) {
  PlanBuilder b(ctx);
  const int r = ctx.rank, P = ctx.size;
  std::vector<int> children;
  for (int c : {2 * r + 1, 2 * r + 2})
    if (c < P) children.push_back(c);
  const int parent = r == 0 ? -1 : (r - 1) / 2;
  int depth = 0;
  while ((2 << depth) - 1 < P) ++depth;  // levels below the root

  auto all_slices = b.slices(0, ctx.n);
  for (size_t s = 0; s < all_slices.size(); ++s) {
    auto [lo, hi] = all_slices[s];
    int64_t len = hi - lo;
    int up = -1;  // op that produced this node's encoding of its subtree sum
    int64_t w_up = b.alloc_wire(len);
    float div = parent < 0 ? b.avg_divisor() : 1.f;
    if (children.empty()) {
      up = b.encode_input(lo, len, w_up, div);
    } else {
      std::vector<int64_t> w_child;
      std::vector<int> rv_child;
      for (int c : children) {
        w_child.push_back(b.alloc_wire(len));
        rv_child.push_back(b.recv(c, w_child.back(), len, b.tag(kStepUp, c, s)));
      }
      int64_t acc = b.alloc_acc(len);
      int prev = b.load_acc(lo, len, acc, true);
      for (size_t i = 0; i < children.size(); ++i)
        prev = b.decode_acc(w_child[i], len, acc, false, {rv_child[i], prev});
      up = b.encode_acc(acc, len, lo, w_up, div, {prev});
    }
    int have_final = up;
    int64_t w_final = w_up;
    if (parent >= 0) {
      b.send(parent, w_up, len, b.tag(kStepUp, r, s), {up});
      w_final = b.alloc_wire(len);
      have_final = b.recv(parent, w_final, len, b.tag(kStepDown, r, s));
    }
    for (int c : children) b.send(c, w_final, len, b.tag(kStepDown, c, s), {have_final});
    b.decode_out(w_final, len, lo, {have_final});
  }
  return b.finish(depth + 1);
}

}  // namespace ccompress
