#include "collectives/step_runner.h"

#include <algorithm>
#include <cstring>

#include "ccompress/error.h"

namespace ccompress {

StepRunner::StepRunner(const Plan& plan, const Codec& codec, const ExecBuffers& bufs,
                       KernelBackend& k, const CollectiveOptions& opt, int rank)
    : plan_(plan), codec_(codec), bufs_(bufs), k_(k), opt_(opt), rank_(rank) {
  // The counters, accumulators, then wire buffers, in one block.
  const int64_t acc_bytes = align_up(std::max<int64_t>(plan.acc_elems, 1) * 4, 256);
  const int64_t total = kCounterBytes + acc_bytes + align_up(plan.wire_bytes + 8, 256);
  uint8_t* block = static_cast<uint8_t*>(k.workspace(total));
  CC_CHECK(block != nullptr, "the kernel backend gave no workspace for " << total << " bytes");
  counters_ = reinterpret_cast<int64_t*>(block);
  acc_ = reinterpret_cast<float*>(block + kCounterBytes);
  wire_ = block + kCounterBytes + acc_bytes;
  const int64_t zero[kCounters] = {};
  k.write_bytes(counters_, zero, sizeof zero);
}

void* StepRunner::ptr(const BufRef& b) const {
  size_t es = dtype_size(bufs_.dtype);
  switch (b.kind) {
    case BufKind::Input: return const_cast<char*>(static_cast<const char*>(bufs_.input)) + b.offset * es;
    case BufKind::Output: return static_cast<char*>(bufs_.output) + b.offset * es;
    case BufKind::Acc: return acc_ + b.offset;
    case BufKind::Wire: return wire_ + b.offset;
  }
  return nullptr;
}

MessageHeader StepRunner::expected(const Op& op) const {
  return make_message_header(codec(op), bufs_.dtype, op.n, bufs_.call);
}

int64_t StepRunner::message_bytes(const Op& op) const {
  return codec(op).wire_bytes(op.n) + kMessageHeaderBytes;
}

const void* StepRunner::send_message(const Op& op) {
  // The header sits in front of the wire buffer (PlanBuilder::alloc_wire leaves room).
  uint8_t* msg = static_cast<uint8_t*>(ptr(op.src)) - kMessageHeaderBytes;
  if (headed_.insert(op.src.offset).second) {
    uint8_t h[kMessageHeaderBytes];
    write_message_header(expected(op), h);
    k_.write_bytes(msg, h, kMessageHeaderBytes);
  }
  return msg;
}

void* StepRunner::recv_message(const Op& op) {
  return static_cast<uint8_t*>(ptr(op.dst)) - kMessageHeaderBytes;
}

void StepRunner::received(const Op& op) {
  headed_.insert(op.dst.offset);
  const void* h = k_.read_bytes(recv_message(op), kMessageHeaderBytes);
  if (k_.reads_deferred()) {
    deferred_.emplace_back(h, &op);
  } else {
    check_message_header(read_message_header(h), expected(op), op.peer);
  }
}

void StepRunner::finish() {
  const void* counts = k_.read_results(counters_, kCounters * sizeof(int64_t));
  if (k_.reads_deferred()) k_.finish_reads();
  for (const auto& [h, op] : deferred_)
    check_message_header(read_message_header(h), expected(*op), op->peer);
  deferred_.clear();
  int64_t c[kCounters];
  std::memcpy(c, counts, sizeof c);
  result_.nonfinite_in = counted_ ? c[kIn] : -1;
  result_.nonfinite_out = counted_ ? c[kOut] : -1;
  result_.feedback_nonfinite = c[kFeedback];
}

void StepRunner::compute(const Op& op) {
  float* acc_dst = op.dst.kind == BufKind::Acc ? static_cast<float*>(ptr(op.dst)) : nullptr;
  const EncodeContext ctx{opt_.seed, opt_.step, rank_, op.index};
  switch (op.kind) {
    case OpKind::Encode: {
      bool from_acc = op.src.kind == BufKind::Acc;
      if (op.feedback != Feedback::None) {
        encode_with_feedback(op, from_acc);
        break;
      }
      k_.encode(ptr(op.src), from_acc ? DType::Float32 : bufs_.dtype, op.n, codec(op), op.divisor,
                ctx, ptr(op.dst));
      break;
    }
    case OpKind::DecodeAcc:
      k_.decode_accumulate(ptr(op.src), op.n, codec(op), acc_dst, op.assign);
      break;
    case OpKind::LoadAcc:
      k_.load_accumulate(ptr(op.src), bufs_.dtype, op.n, acc_dst, op.assign);
      break;
    case OpKind::DecodeReduceEncode:
      k_.decode_reduce_encode(ptr(op.src), ptr(op.x), bufs_.dtype, op.n, codec(op), op.divisor, ctx,
                              ptr(op.dst));
      break;
    case OpKind::Finalize:
      k_.finalize(static_cast<const float*>(ptr(op.src)), op.n, op.divisor, ptr(op.dst),
                  bufs_.dtype);
      break;
    case OpKind::DecodeOut:
      k_.decode(ptr(op.src), op.n, codec(op), ptr(op.dst), bufs_.dtype);
      break;
    case OpKind::Send:
    case OpKind::Recv:
      break;
  }
}

void StepRunner::count_nonfinite(const Op& op) {
  if (!counted_) return;
  const BufRef* in = op.src.kind == BufKind::Input ? &op.src
                     : op.x.kind == BufKind::Input ? &op.x : nullptr;
  if (in) counted_ = k_.count_nonfinite(ptr(*in), bufs_.dtype, op.n, counters_ + kIn);
  if (counted_ && op.dst.kind == BufKind::Output)
    counted_ = k_.count_nonfinite(ptr(op.dst), bufs_.dtype, op.n, counters_ + kOut);
}

// v = src / divisor + e is encoded; then e <- v - decode(those bytes), the value every
// receiver adds, with NaN/Inf kept out of e (counted in result_.feedback_nonfinite).
void StepRunner::encode_with_feedback(const Op& op, bool from_acc) {
  const ErrorFeedbackBuffers& fb = opt_.feedback;
  const EncodeContext ctx{opt_.seed, opt_.step, rank_, op.index};
  float* e = (op.feedback == Feedback::Worker ? fb.worker : fb.server) + op.residual_off;
  float* v = acc_ + plan_.feedback_scratch;
  float* decoded = v + op.n;
  if (from_acc) {
    k_.finalize(static_cast<const float*>(ptr(op.src)), op.n, op.divisor, v, DType::Float32);
  } else {
    k_.load_accumulate(ptr(op.src), bufs_.dtype, op.n, v, true);
    if (op.divisor != 1.f) k_.finalize(v, op.n, op.divisor, v, DType::Float32);
  }
  k_.load_accumulate(e, DType::Float32, op.n, v, false);
  k_.encode(v, DType::Float32, op.n, codec(op), 1.f, ctx, ptr(op.dst));
  k_.decode_accumulate(ptr(op.dst), op.n, codec(op), decoded, true);
  k_.feedback_residual(v, decoded, op.n, e, counters_ + kFeedback);
}

}  // namespace ccompress
