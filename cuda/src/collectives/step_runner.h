// What both executors (executor.cc: host-driven; ordered_executor.cc: stream-ordered) do to
// one operation of a plan: resolve its buffers, run a compute step on the backend, and frame
// a transfer as a message (header + payload), writing the header of a send and checking the
// header of a receive.
#pragma once

#include <cstdint>
#include <unordered_set>
#include <vector>

#include "ccompress/kernel_backend.h"
#include "collectives/executor.h"
#include "collectives/message_header.h"
#include "collectives/plan.h"

namespace ccompress {

class StepRunner {
 public:
  /// Takes the accumulators and wire buffers of @p plan from the backend's workspace (device
  /// memory for a device backend, reused host memory otherwise).
  StepRunner(const Plan& plan, const Codec& codec, const ExecBuffers& bufs, KernelBackend& k,
             const CollectiveOptions& opt, int rank);

  /// Runs a compute operation on the backend (error feedback included).
  void compute(const Op& op);
  /// Adds the op's input elements (each is read by exactly one op) or output elements (each
  /// written by exactly one) to the NaN/Inf counts; the counts are -1 once the backend
  /// declines.
  void count_nonfinite(const Op& op);
  /// Bytes sent (added by the executor) and, once finish() has run, the counts.
  ExecResult& result() { return result_; }
  /// Header plus payload bytes of a transfer operation.
  int64_t message_bytes(const Op& op) const;
  /// The message of a send, its header written (once per wire buffer and call: a buffer sent
  /// to several peers, or forwarded as received, already holds it).
  const void* send_message(const Op& op);
  /// Where a receive lands (header first).
  void* recv_message(const Op& op);
  /// A receive has completed: its header is checked now (host backends: before anything
  /// reads the payload) or, for backends whose reads are deferred, by finish().
  void received(const Op& op);
  /// Reads the counters back and checks the deferred headers (MessageError); call after
  /// the last transfer and compute step.
  void finish();

 private:
  void* ptr(const BufRef& b) const;
  /// The codec of the op's wire bytes: the call's, or the plan's slot (Plan::codecs).
  const Codec& codec(const Op& op) const {
    return plan_.codecs.empty() ? codec_ : plan_.codecs[op.codec];
  }
  MessageHeader expected(const Op& op) const;
  void encode_with_feedback(const Op& op, bool from_acc);
  // The counters live in the backend's memory (its kernels add to them) at the start of
  // the workspace: NaN/Inf read from the input, written to the output, kept out of
  // error-feedback residuals.
  enum Counter { kIn, kOut, kFeedback, kCounters };
  static constexpr int64_t kCounterBytes = 256;  // keeps the accumulators 256-byte aligned

  const Plan& plan_;
  const Codec& codec_;
  const ExecBuffers& bufs_;
  KernelBackend& k_;
  const CollectiveOptions& opt_;
  int rank_;
  int64_t* counters_ = nullptr;
  bool counted_ = true;  // false once the backend declined to count
  float* acc_ = nullptr;
  uint8_t* wire_ = nullptr;
  std::unordered_set<int64_t> headed_;  // wire offsets whose header is in place
  std::vector<std::pair<const void*, const Op*>> deferred_;
  ExecResult result_;
};

}  // namespace ccompress
