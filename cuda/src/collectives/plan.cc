#include "collectives/plan.h"

#include <algorithm>
#include <limits>

#include "ccompress/error.h"
#include "collectives/message_header.h"

namespace ccompress {

namespace {
constexpr int64_t kWireAlign = 64;  // keeps every wire buffer aligned for vector loads
}

PlanBuilder::PlanBuilder(const PlanContext& ctx) : ctx_(ctx), codecs_{ctx.codec} {
  CC_CHECK(ctx_.slice_elems > 0 && ctx_.slice_elems % ctx_.codec.align() == 0,
           "slice_elems " << ctx_.slice_elems << " must be a positive multiple of "
                          << ctx_.codec.align());
}

int PlanBuilder::add_codec(const Codec& codec) {
  CC_CHECK(ctx_.slice_elems % codec.align() == 0,
           "slice_elems " << ctx_.slice_elems << " must be a multiple of " << codec.align());
  CC_CHECK(codecs_.size() < 255, "too many codecs in one plan");
  codecs_.push_back(codec);
  return int(codecs_.size()) - 1;
}

void PlanBuilder::use_codec(int slot) {
  CC_CHECK(slot >= 0 && size_t(slot) < codecs_.size(), "no codec slot " << slot);
  codec_slot_ = slot;
}

std::vector<std::pair<int64_t, int64_t>> PlanBuilder::slices(int64_t begin, int64_t end) const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t b = begin; b < end; b += ctx_.slice_elems)
    out.emplace_back(b, std::min(end, b + ctx_.slice_elems));
  return out;
}

std::vector<std::vector<std::pair<int64_t, int64_t>>> PlanBuilder::chunk_slices(
    size_t& most) const {
  std::vector<std::vector<std::pair<int64_t, int64_t>>> out(ctx_.size);
  most = 0;
  for (int c = 0; c < ctx_.size; ++c) {
    auto [lo, hi] = chunk_range(ctx_.n, ctx_.size, c);
    out[c] = slices(lo, hi);
    most = std::max(most, out[c].size());
  }
  return out;
}

int PlanBuilder::sum_in_rank_order(const std::vector<int64_t>& wire,
                                   const std::vector<int>& ready, int64_t elems, int64_t acc) {
  int prev = -1;
  for (size_t p = 0; p < wire.size(); ++p) {
    std::vector<int32_t> deps{ready[p]};
    if (prev >= 0) deps.push_back(prev);
    prev = decode_acc(wire[p], elems, acc, p == 0, deps);
  }
  return prev;
}

namespace {
int64_t slices_bound(const PlanContext& ctx) { return ceil_div(ctx.n, ctx.slice_elems) + 1; }
}  // namespace

int PlanBuilder::tag(int step, int chunk, int64_t slice) const {
  // Tag 0 belongs to the header exchange. Transports reduce tags modulo their limit;
  // equal tags between one pair still match in posting order, and wrapping needs
  // billions of messages in one collective.
  int64_t t = 1 + (int64_t(step) * ctx_.size + chunk) * slices_bound(ctx_) + slice;
  return int(t % std::numeric_limits<int>::max());
}

int64_t PlanBuilder::tag_slice(const PlanContext& ctx, int tag) {
  return (int64_t(tag) - 1) % slices_bound(ctx);
}

int64_t PlanBuilder::alloc_wire(int64_t elems) {
  // Room for the message header (message_header.h) in front, so a transfer moves header and
  // payload as one message while the payload keeps its alignment.
  static_assert(kWireAlign >= kMessageHeaderBytes, "the header must fit in front");
  int64_t off = plan_.wire_bytes + kWireAlign;
  plan_.wire_bytes = off + align_up(codecs_[size_t(codec_slot_)].wire_bytes(elems), kWireAlign);
  return off;
}

int64_t PlanBuilder::alloc_acc(int64_t elems) {
  int64_t off = plan_.acc_elems;
  plan_.acc_elems += align_up(elems, 16);
  return off;
}

int PlanBuilder::add(Op op) {
  int id = int(plan_.ops.size());
  for (int32_t d : op.deps) CC_CHECK(d >= 0 && d < id, "plan dependency " << d << " of op " << id);
  op.codec = uint8_t(codec_slot_);
  plan_.ops.push_back(std::move(op));
  return id;
}

void PlanBuilder::with_feedback(Op& op, Feedback which, int64_t residual_off) {
  CC_CHECK(op.n <= ctx_.slice_elems, "feedback encode of " << op.n << " elements exceeds a slice");
  if (plan_.feedback_scratch < 0) plan_.feedback_scratch = alloc_acc(2 * ctx_.slice_elems);
  op.feedback = which;
  op.residual_off = residual_off;
}

void PlanBuilder::note_input_read(int id, int64_t off, int64_t elems) {
  if (!ctx_.inplace) return;
  input_read_ranges_.emplace_back(off, off + elems);
  input_read_ops_.push_back(id);
}

void PlanBuilder::order_after_input_reads(Op& op, int64_t off, int64_t elems) {
  if (!ctx_.inplace) return;
  for (size_t i = 0; i < input_read_ops_.size(); ++i) {
    auto [b, e] = input_read_ranges_[i];
    if (b < off + elems && off < e) op.deps.push_back(input_read_ops_[i]);
  }
}

int PlanBuilder::send(int peer, int64_t wire_off, int64_t elems, int tag,
                      std::vector<int32_t> deps) {
  Op op{OpKind::Send, elems, {BufKind::Wire, wire_off}, {}, {}, peer, tag, 0, false, 1.f,
        std::move(deps)};
  return add(std::move(op));
}

int PlanBuilder::recv(int peer, int64_t wire_off, int64_t elems, int tag,
                      std::vector<int32_t> deps) {
  Op op{OpKind::Recv, elems, {}, {BufKind::Wire, wire_off}, {}, peer, tag, 0, false, 1.f,
        std::move(deps)};
  return add(std::move(op));
}

int PlanBuilder::encode_input(int64_t in_off, int64_t elems, int64_t wire_off, float divisor,
                              std::vector<int32_t> deps) {
  Op op{OpKind::Encode, elems, {BufKind::Input, in_off}, {BufKind::Wire, wire_off}, {}, -1, 0,
        in_off, false, divisor, std::move(deps)};
  if (ctx_.worker_feedback) with_feedback(op, Feedback::Worker, in_off);
  int id = add(std::move(op));
  note_input_read(id, in_off, elems);
  return id;
}

int PlanBuilder::encode_acc(int64_t acc_off, int64_t elems, int64_t elem_index,
                            int64_t wire_off, float divisor, std::vector<int32_t> deps) {
  Op op{OpKind::Encode, elems, {BufKind::Acc, acc_off}, {BufKind::Wire, wire_off}, {}, -1, 0,
        elem_index, false, divisor, std::move(deps)};
  if (ctx_.server_feedback)
    with_feedback(op, Feedback::Server,
                  elem_index - chunk_range(ctx_.n, ctx_.size, ctx_.rank).first);
  return add(std::move(op));
}

int PlanBuilder::decode_acc(int64_t wire_off, int64_t elems, int64_t acc_off, bool assign,
                            std::vector<int32_t> deps) {
  Op op{OpKind::DecodeAcc, elems, {BufKind::Wire, wire_off}, {BufKind::Acc, acc_off}, {}, -1, 0, 0,
        assign, 1.f, std::move(deps)};
  return add(std::move(op));
}

int PlanBuilder::load_acc(int64_t in_off, int64_t elems, int64_t acc_off, bool assign,
                          std::vector<int32_t> deps) {
  Op op{OpKind::LoadAcc, elems, {BufKind::Input, in_off}, {BufKind::Acc, acc_off}, {}, -1, 0, 0,
        assign, 1.f, std::move(deps)};
  int id = add(std::move(op));
  note_input_read(id, in_off, elems);
  return id;
}

int PlanBuilder::decode_reduce_encode(int64_t wire_in, int64_t in_off, int64_t elems,
                                      int64_t wire_out, float divisor,
                                      std::vector<int32_t> deps) {
  Op op{OpKind::DecodeReduceEncode, elems, {BufKind::Wire, wire_in}, {BufKind::Wire, wire_out},
        {BufKind::Input, in_off}, -1, 0, in_off, false, divisor, std::move(deps)};
  int id = add(std::move(op));
  note_input_read(id, in_off, elems);
  return id;
}

int PlanBuilder::finalize(int64_t acc_off, int64_t elems, int64_t out_off, float divisor,
                          std::vector<int32_t> deps) {
  Op op{OpKind::Finalize, elems, {BufKind::Acc, acc_off}, {BufKind::Output, out_off}, {}, -1, 0, 0,
        false, divisor, std::move(deps)};
  order_after_input_reads(op, out_off, elems);
  return add(std::move(op));
}

int PlanBuilder::decode_out(int64_t wire_off, int64_t elems, int64_t out_off,
                            std::vector<int32_t> deps) {
  Op op{OpKind::DecodeOut, elems, {BufKind::Wire, wire_off}, {BufKind::Output, out_off}, {}, -1,
        0, 0, false, 1.f, std::move(deps)};
  order_after_input_reads(op, out_off, elems);
  return add(std::move(op));
}

void PlanBuilder::share_slice(const std::vector<std::vector<std::pair<int64_t, int64_t>>>& chunks,
                              size_t s, int step, int64_t own_wire, int own_op) {
  const int r = ctx_.rank, P = ctx_.size;
  if (own_op >= 0) {
    auto [lo, hi] = chunks[size_t(r)][s];
    for (int k = 1; k < P; ++k) send((r + k) % P, own_wire, hi - lo, tag(step, r, s), {own_op});
    decode_out(own_wire, hi - lo, lo, {own_op});
  }
  for (int k = 1; k < P; ++k) {
    int c = (r + P - k) % P;
    if (s >= chunks[size_t(c)].size()) continue;
    auto [lo, hi] = chunks[size_t(c)][s];
    int64_t w = alloc_wire(hi - lo);
    int rv = recv(c, w, hi - lo, tag(step, c, s));
    decode_out(w, hi - lo, lo, {rv});
  }
}

float PlanBuilder::avg_divisor() const {
  return ctx_.op == ReduceOp::Avg ? float(ctx_.size) : 1.f;
}

Plan PlanBuilder::finish(int quantizations) {
  plan_.quantizations = quantizations;
  if (codecs_.size() > 1) plan_.codecs = codecs_;
  return std::move(plan_);
}

Plan build_single(const PlanContext& ctx) {
  PlanBuilder b(ctx);
  for (auto [lo, hi] : b.slices(0, ctx.n)) {
    int64_t w = b.alloc_wire(hi - lo);
    int e = b.encode_input(lo, hi - lo, w, b.avg_divisor());
    b.decode_out(w, hi - lo, lo, {e});
  }
  return b.finish(1);
}

}  // namespace ccompress
