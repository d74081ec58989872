// Declarations shared by the files that make up the ccompress._cuda module.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "ccompress/codec.h"
#include "ccompress/collectives.h"
#include "kernels/cuda_backend.h"

namespace ccompress::cuda {
class NcclTransport;
}

namespace ccompress::py_bindings {

/// One rank's ends: what moves bytes, what runs kernels, and what must outlive both.
struct DeviceRank {
  std::shared_ptr<Transport> transport;
  std::shared_ptr<cuda::CudaBackend> backend;
  std::shared_ptr<void> keepalive;
  std::shared_ptr<cuda::NcclTransport> nccl;  // set for NCCL ranks
};

/// A codec from a spec string or a ccompress Codec; an unbound `none` is bound to @p bind_to.
Codec to_codec(const pybind11::object& c, DType bind_to);
/// Loopback groups and device ranks with their collectives.
void bind_device_collectives(pybind11::module_& m);
/// ccompress.jax's device path: device communicators in the registry of compiled programs,
/// the collective a CUDA handler runs, and the handlers where jaxlib's headers were found
/// (cuda_jax.cc).
void bind_jax(pybind11::module_& m);

}  // namespace ccompress::py_bindings
