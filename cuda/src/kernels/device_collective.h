// A collective on device buffers, ordered with the caller's stream: it starts after the
// work the caller had enqueued on that stream, and the caller's stream waits for its result.
// The host drives the plan (posting transfers, enqueueing kernels) and returns once every
// transfer is done; the last kernels may still be running, ordered before the caller's
// later work. No device-wide synchronisation.
#pragma once

#include "ccompress/collectives.h"
#include "kernels/cuda_backend.h"

namespace ccompress::cuda {

using CollectiveFn = CollectiveStats (*)(Transport&, KernelBackend&, const void*, void*, int64_t,
                                         DType, const Codec&, const CollectiveOptions&);

/// Runs @p fn (allreduce, reduce_scatter or allgather) over @p t with @p k, ordered with
/// @p caller (a cudaStream_t; nullptr is the legacy default stream). With @p ready (an event
/// the caller recorded on its stream when it asked for the collective: an asynchronous call,
/// run later by a worker thread) the collective starts after the work up to that event
/// instead of all the work on @p caller so far, and leaves @p caller alone: @p ready is
/// recorded again after the collective's last kernels, for the caller's stream to wait on
/// when the caller takes the result.
CollectiveStats run_device_collective(CollectiveFn fn, Transport& t, CudaBackend& k,
                                      const void* in, void* out, int64_t n, DType dtype,
                                      const Codec& codec, const CollectiveOptions& opt,
                                      cudaStream_t caller, cudaEvent_t ready = nullptr);

}  // namespace ccompress::cuda
