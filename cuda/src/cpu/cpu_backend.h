// The host KernelBackend: plain loops over the codec math in cuda/src/codecs. It is the
// reference the CUDA backend is tested against, and the backend of MPI/inproc collectives
// on host buffers.
#pragma once

#include "ccompress/kernel_backend.h"

namespace ccompress {

// One instance serves every thread at once: its only state is per thread (the collective
// workspace, KernelBackend's host default, and the codec families' run buffer). Scaled
// codecs are processed one group at a time through a stack buffer; nothing is allocated per
// call once a thread has seen its largest call.
class CC_API CpuBackend : public KernelBackend {
 public:
  void encode(const void* src, DType src_dtype, int64_t n, const Codec& codec, float divisor,
              const EncodeContext& ctx, void* dst) override;
  void decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                         bool assign) override;
  void decode(const void* src, int64_t n, const Codec& codec, void* out,
              DType out_dtype) override;
  void load_accumulate(const void* src, DType src_dtype, int64_t n, float* acc,
                       bool assign) override;
  // src and dst may be the same buffer: each group is read whole before it is written.
  void decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                            const Codec& codec, float divisor, const EncodeContext& ctx,
                            void* dst) override;
  void finalize(const float* acc, int64_t n, float divisor, void* out,
                DType out_dtype) override;
  bool count_nonfinite(const void* src, DType t, int64_t n, int64_t* count) override;
  void feedback_residual(const float* v, const float* decoded, int64_t n, float* residual,
                         int64_t* count) override;
};

// The process-wide instance.
CC_API CpuBackend& cpu_backend();

}  // namespace ccompress
