// ccompress.jax's CUDA path: the implementation function that a CUDA XLA FFI handler
// (jax_ffi_cuda.cc, a thin decode layer) calls, and the handlers themselves where the build
// found jaxlib's XLA FFI headers (CCOMPRESS_JAX_FFI).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>

#include "jax_ffi_registry.h"
#include "kernels/device_collective.h"

namespace ccompress::jax_ffi {

/// Runs @p call on the device communicator @p comm (a registry id), ordered with @p stream
/// (XLA's): the core's device collective (cuda::run_device_collective), which starts after
/// the work on @p stream so far and makes @p stream wait for its result. Buffers are device
/// memory; the residuals too. Throws Unsupported where @p comm is a host communicator.
void run_cuda(cudaStream_t stream, int64_t comm, const Call& call);

#if defined(CCOMPRESS_JAX_FFI)
/// The CUDA handlers as capsules, by collective ("allreduce", "reduce_scatter",
/// "allgather"), for jax.ffi.register_ffi_target(..., platform="CUDA").
pybind11::dict cuda_handlers();
#endif

}  // namespace ccompress::jax_ffi
