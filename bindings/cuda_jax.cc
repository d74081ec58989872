// ccompress.jax's device path in ccompress._cuda: device communicators registered under the
// ids that compiled programs name (jax_ffi_registry.h, shared with the host handlers), the
// implementation function of the CUDA handlers (run_cuda), a binding that runs it from
// Python (tests, on the emulated runtime too), and the handlers where jaxlib's headers were
// found at build time.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ccompress/collectives.h"
#include "ccompress/error.h"
#include "cuda_bindings.h"
#include "jax_ffi_cuda.h"
#include "jax_ffi_registry.h"
#include "kernels/device_collective.h"

namespace py = pybind11;

namespace ccompress::jax_ffi {

void run_cuda(cudaStream_t stream, int64_t comm, const Call& call) {
  run_call(comm, call, [stream](CollectiveFn fn, Entry& e, const void* in, void* out, int64_t n,
                                DType dtype, const Codec& codec, const CollectiveOptions& o) {
    auto* k = dynamic_cast<cuda::CudaBackend*>(e.backend.get());
    CC_CHECK_AS(Unsupported, k != nullptr,
                "ccompress.jax: this communicator reduces host memory, and the array is on a "
                "GPU: pass a device communicator (ccompress.Communicator.from_nccl) as comm=, "
                "or run the program on the CPU");
    cuda::run_device_collective(fn, *e.transport, *k, in, out, n, dtype, codec, o, stream);
  });
}

}  // namespace ccompress::jax_ffi

namespace ccompress::py_bindings {

namespace {

jax_ffi::Kind kind_of(const std::string& kind) {
  if (kind == "allreduce") return jax_ffi::Kind::AllReduce;
  if (kind == "reduce_scatter") return jax_ffi::Kind::ReduceScatter;
  CC_CHECK(kind == "allgather", "unknown collective '" << kind
                                                       << "'; use allreduce, reduce_scatter or "
                                                          "allgather");
  return jax_ffi::Kind::AllGather;
}

}  // namespace

void bind_jax(py::module_& m) {
  m.def(
      "jax_register",
      [](std::shared_ptr<DeviceRank> r, double timeout_s, int64_t slice_elems, uint64_t seed,
         int ranks_per_node) {
        CC_CHECK(r != nullptr, "jax_register needs a device rank");
        auto e = std::make_shared<jax_ffi::Entry>();
        e->transport = r->transport;
        e->backend = r->backend;
        e->keepalive = r;
        jax_ffi::set_options(*e, timeout_s, slice_elems, seed, ranks_per_node);
        return jax_ffi::register_entry(std::move(e));
      },
      py::arg("rank"), py::arg("timeout_s"), py::arg("slice_elems"), py::arg("seed"),
      py::arg("ranks_per_node"),
      "Registers a device rank with a communicator's options for ccompress.jax's compiled "
      "programs; returns its id (never reused; ccompress._jax_ffi.unregister releases it).");
  m.def(
      "jax_unregister", [](int64_t id) { return jax_ffi::unregister(id); }, py::arg("id"),
      "Releases an id of jax_register.");
  m.def(
      "jax_run",
      [](const std::string& kind, int64_t comm, uintptr_t in, uintptr_t out, int64_t n,
         int64_t out_elems, const std::string& dtype, const std::string& codec,
         const std::string& algo, const std::string& op, uintptr_t stream, uintptr_t worker,
         uintptr_t server) {
        jax_ffi::Call call;
        call.kind = kind_of(kind);
        call.in = reinterpret_cast<const void*>(in);
        call.out = reinterpret_cast<void*>(out);
        call.n = n;
        call.out_elems = out_elems;
        call.dtype = parse_dtype(dtype);
        call.codec = codec;
        call.algo = algo;
        call.op = op;
        call.worker = reinterpret_cast<float*>(worker);
        call.server = reinterpret_cast<float*>(server);
        py::gil_scoped_release release;  // ranks on threads run in parallel
        jax_ffi::run_cuda(reinterpret_cast<cudaStream_t>(stream), comm, call);
      },
      py::arg("kind"), py::arg("comm"), py::arg("in_ptr"), py::arg("out_ptr"), py::arg("n"),
      py::arg("out_elems"), py::arg("dtype"), py::arg("codec"), py::arg("algo") = "",
      py::arg("op") = "", py::arg("stream") = 0, py::arg("worker") = 0, py::arg("server") = 0,
      "What a CUDA handler of ccompress.jax runs once it has decoded XLA's call "
      "(jax_ffi::run_cuda): the collective `kind` on the registered device communicator "
      "`comm`, on device buffers, ordered with `stream`. For tests.");
#if defined(CCOMPRESS_JAX_FFI)
  m.attr("JAX_CUDA_HANDLERS") = jax_ffi::cuda_handlers();
#else
  m.attr("JAX_CUDA_HANDLERS") = py::none();
#endif
}

}  // namespace ccompress::py_bindings
