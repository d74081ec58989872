#include "kernels/device_collective.h"

#include <cuda_runtime.h>

#include "transport/device_loopback.h"

namespace ccompress::cuda {

CollectiveStats run_device_collective(CollectiveFn fn, Transport& t, CudaBackend& k,
                                      const void* in, void* out, int64_t n, DType dtype,
                                      const Codec& codec, const CollectiveOptions& opt,
                                      cudaStream_t caller, cudaEvent_t ready) {
  RankStreams& s = k.streams();
  DeviceGuard g(s.device());
  // The loopback waits on the host for its peers' transfers: as long as the call allows.
  if (auto* loopback = dynamic_cast<DeviceLoopbackTransport*>(&t))
    loopback->match_timeout_s = opt.timeout_s;
  // Codec kernels start after the caller's earlier work; transfers into the workspace start
  // after the codec kernels of the previous collective that still read it.
  if (ready != nullptr) {
    CC_CUDA_CHECK(cudaStreamWaitEvent(s.codec(), ready, 0), "waiting for the caller's work");
  } else {
    s.order(caller, s.codec());
  }
  s.order(s.codec(), s.comm());
  // Every transfer has completed when fn returns (the executor waited for them); the result
  // is final once the codec stream's last kernels have run. A synchronous call makes the
  // caller's stream wait for them now. An asynchronous one runs on a worker thread, which
  // must not touch the caller's stream: it records `ready` again at the end, and the caller
  // makes its stream wait on it when it asks for the result (Work.wait).
  auto finished = [&] {
    if (ready != nullptr) {
      CC_CUDA_CHECK(cudaEventRecord(ready, s.codec()), "recording the collective's end");
    } else {
      s.order(s.codec(), caller);
    }
  };
  CollectiveStats stats;
  try {
    stats = fn(t, k, in, out, n, dtype, codec, opt);
  } catch (...) {
    finished();  // the caller may free its buffers once its stream says so
    throw;
  }
  finished();
  return stats;
}

}  // namespace ccompress::cuda
