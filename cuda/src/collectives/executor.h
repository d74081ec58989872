// The one loop that moves data: runs a Plan over a Transport and a KernelBackend.
#pragma once

#include "ccompress/kernel_backend.h"
#include "ccompress/transport.h"
#include "collectives/plan.h"

namespace ccompress {

/// Buffers a plan's operands refer to.
struct ExecBuffers {
  const void* input = nullptr;
  void* output = nullptr;
  DType dtype = DType::Float32;
  uint64_t call = 0;  ///< the collective's number (Transport::next_call), for message headers
};

/// What running a plan did.
struct ExecResult {
  int64_t payload = 0;  ///< bytes of encoded payloads sent: the sum of codec.wire_bytes
  int64_t headers = 0;  ///< bytes of their message headers (message_header.h)
  /// NaN/+-Inf elements read from the input and written to the output (each element is read
  /// once and written once by a plan); -1 when the backend does not count.
  int64_t nonfinite_in = 0;
  int64_t nonfinite_out = 0;
  int64_t feedback_nonfinite = 0;  ///< NaN/Inf kept out of error-feedback residuals
};

/// Runs @p plan to completion: posts each transfer as soon as its dependencies are done and,
/// between transfers, runs the ready compute step with the lowest index, so encoding of
/// later slices overlaps the transfer of earlier ones. Every message is a message header
/// followed by the payload; a received header is checked (MessageError) before anything reads
/// the payload. Each slice is counted for NaN/Inf (KernelBackend::count_nonfinite) right
/// after a step read it from the input or wrote it to the output, while it is in cache.
ExecResult execute(const Plan& plan, const Codec& codec, const ExecBuffers& bufs, Transport& t,
                KernelBackend& k, const CollectiveOptions& opt);

}  // namespace ccompress
