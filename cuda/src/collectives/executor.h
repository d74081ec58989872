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

/// Bytes a plan's sends put on the wire.
struct SentBytes {
  int64_t payload = 0;  ///< encoded payloads: the sum of codec.wire_bytes over messages
  int64_t headers = 0;  ///< their message headers (message_header.h)
};

/// Runs @p plan to completion: posts each transfer as soon as its dependencies are done and,
/// between transfers, runs the ready compute step with the lowest index, so encoding of
/// later slices overlaps the transfer of earlier ones. Every message is a message header
/// followed by the payload; a received header is checked (MessageError) before anything reads
/// the payload. Returns the bytes sent.
SentBytes execute(const Plan& plan, const Codec& codec, const ExecBuffers& bufs, Transport& t,
                KernelBackend& k, const CollectiveOptions& opt);

}  // namespace ccompress
