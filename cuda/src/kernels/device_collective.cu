#include "kernels/device_collective.h"

#include <cuda_runtime.h>

namespace ccompress::cuda {

CollectiveStats run_device_collective(CollectiveFn fn, Transport& t, CudaBackend& k,
                                      const void* in, void* out, int64_t n, DType dtype,
                                      const Codec& codec, const CollectiveOptions& opt,
                                      cudaStream_t caller, cudaEvent_t ready) {
  RankStreams& s = k.streams();
  DeviceGuard g(s.device());
  // Codec kernels start after the caller's earlier work; transfers into the workspace start
  // after the codec kernels of the previous collective that still read it.
  if (ready != nullptr) {
    CC_CUDA_CHECK(cudaStreamWaitEvent(s.codec(), ready, 0), "waiting for the caller's work");
  } else {
    s.order(caller, s.codec());
  }
  s.order(s.codec(), s.comm());
  CollectiveStats stats;
  try {
    stats = fn(t, k, in, out, n, dtype, codec, opt);
  } catch (...) {
    s.order(s.codec(), caller);  // the caller may free its buffers once its stream says so
    throw;
  }
  // Every transfer has completed (the executor waited for them); the result is final once
  // the codec stream's last kernels have run.
  s.order(s.codec(), caller);
  return stats;
}

}  // namespace ccompress::cuda
