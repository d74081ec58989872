// ccompress.jax's CUDA XLA FFI handlers, in ccompress._cuda (built where the build found
// jaxlib's XLA FFI headers: CCOMPRESS_JAX_FFI). Each is a thin decode layer: XLA's stream
// (PlatformStream<cudaStream_t>), buffers and attributes into a Call, then run_cuda
// (cuda_jax.cc), which runs the core's device collective on that stream with the
// communicator of the registry id, as the CPU handlers (jax_ffi.cc) do with the host one.
#include <cuda_runtime.h>

#include <exception>

#include "ccompress/error.h"
#include "jax_ffi_cuda.h"
#include "jax_ffi_decode.h"

namespace py = pybind11;

namespace ccompress::jax_ffi {

namespace {

template <Kind kind>
ffi::Error collective_cuda(cudaStream_t stream, ffi::Token, ffi::AnyBuffer x,
                           ffi::RemainingArgs residuals, ffi::Result<ffi::Token>,
                           ffi::Result<ffi::AnyBuffer> out, ffi::RemainingRets residuals_out,
                           int64_t comm, std::string_view codec, std::string_view algo,
                           std::string_view op) {
  try {
    Call call = decode(kind, x, *out, residuals, residuals_out, codec, algo, op,
                       [stream](void* dst, const void* src, size_t bytes) {
                         CC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes,
                                                       cudaMemcpyDeviceToDevice, stream),
                                       "copying an error-feedback residual");
                       });
    run_cuda(stream, comm, call);
    return ffi::Error::Success();
  } catch (const std::exception& ex) {
    return to_ffi(ex);
  }
}

auto bind_cuda() {
  return bind_collective(ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>());
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(AllReduceCuda, collective_cuda<Kind::AllReduce>, bind_cuda());
XLA_FFI_DEFINE_HANDLER_SYMBOL(ReduceScatterCuda, collective_cuda<Kind::ReduceScatter>,
                              bind_cuda());
XLA_FFI_DEFINE_HANDLER_SYMBOL(AllGatherCuda, collective_cuda<Kind::AllGather>, bind_cuda());

py::dict cuda_handlers() {
  py::dict d;
  d["allreduce"] = py::capsule(reinterpret_cast<void*>(AllReduceCuda));
  d["reduce_scatter"] = py::capsule(reinterpret_cast<void*>(ReduceScatterCuda));
  d["allgather"] = py::capsule(reinterpret_cast<void*>(AllGatherCuda));
  return d;
}

}  // namespace ccompress::jax_ffi
