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
};

/// Runs @p plan to completion: posts each transfer as soon as its dependencies are done and,
/// between transfers, runs the ready compute step with the lowest index, so encoding of
/// later slices overlaps the transfer of earlier ones. Returns the payload bytes sent, and
/// in @p feedback_nonfinite (when given) the NaN/Inf kept out of error-feedback residuals.
int64_t execute(const Plan& plan, const Codec& codec, const ExecBuffers& bufs, Transport& t,
                KernelBackend& k, const CollectiveOptions& opt,
                int64_t* feedback_nonfinite = nullptr);

}  // namespace ccompress
