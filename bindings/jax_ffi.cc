// ccompress._jax_ffi: the collectives as XLA FFI handlers on the CPU, for ccompress.jax.
//
// A compiled JAX program calls these handlers directly (no Python per call). Each is a thin
// decode layer over jax_ffi_registry.h's run_call, which holds the registry of communicator
// ids and the call path that the CUDA handlers (jax_ffi_cuda.cc, in ccompress._cuda) share.
// The shared pieces of the decode (the attributes, the residuals, the error reply) are in
// jax_ffi_decode.h, for both.
//
// Every handler takes XLA's ordering token first and returns a new one (the ordered effect
// of ccompress.jax), then the input, then optionally the two error-feedback residuals;
// results are the token, the output and the updated residuals. Errors come back to JAX as
// "[ccompress.<ErrorType>] message", which ccompress.jax turns into that error type.
#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <string>

#include "ccompress/collectives.h"
#include "ccompress/error.h"
#include "cpu/cpu_backend.h"
#include "error_translator.h"
#include "jax_ffi_decode.h"
#include "jax_ffi_registry.h"

namespace py = pybind11;
namespace ffi = xla::ffi;

namespace ccompress::jax_ffi {

namespace {

/// The CPU backend on XLA's calling thread.
void run_on_cpu(CollectiveFn fn, Entry& e, const void* in, void* out, int64_t n, DType dtype,
                const Codec& codec, const CollectiveOptions& o) {
  fn(*e.transport, cpu_backend(), in, out, n, dtype, codec, o);
}

template <Kind kind>
ffi::Error collective(ffi::Token, ffi::AnyBuffer x, ffi::RemainingArgs residuals,
                      ffi::Result<ffi::Token>, ffi::Result<ffi::AnyBuffer> out,
                      ffi::RemainingRets residuals_out, int64_t comm, std::string_view codec,
                      std::string_view algo, std::string_view op) {
  try {
    Call call = decode(kind, x, *out, residuals, residuals_out, codec, algo, op,
                       [](void* dst, const void* src, size_t bytes) {
                         std::memcpy(dst, src, bytes);
                       });
    run_call(comm, call, run_on_cpu);
    return ffi::Error::Success();
  } catch (const std::exception& ex) {
    return to_ffi(ex);
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(AllReduceCpu, collective<Kind::AllReduce>,
                              bind_collective(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(ReduceScatterCpu, collective<Kind::ReduceScatter>,
                              bind_collective(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(AllGatherCpu, collective<Kind::AllGather>,
                              bind_collective(ffi::Ffi::Bind()));

}  // namespace ccompress::jax_ffi

namespace {

template <typename T>
py::capsule handler_capsule(T* fn) {
  return py::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

PYBIND11_MODULE(_jax_ffi, m) {
  using namespace ccompress;
  using namespace ccompress::jax_ffi;
  m.doc() = "ccompress collectives as XLA FFI handlers (for ccompress.jax)";
  py::module_::import("ccompress._core");  // registers the Transport base class
  py_bindings::register_error_translator();
  py::dict cpu;
  cpu["allreduce"] = handler_capsule(AllReduceCpu);
  cpu["reduce_scatter"] = handler_capsule(ReduceScatterCpu);
  cpu["allgather"] = handler_capsule(AllGatherCpu);
  m.attr("CPU_HANDLERS") = cpu;
  m.def(
      "register",
      [](std::shared_ptr<Transport> t, double timeout_s, int64_t slice_elems, uint64_t seed,
         int ranks_per_node) {
        auto e = std::make_shared<Entry>();
        e->transport = std::move(t);
        set_options(*e, timeout_s, slice_elems, seed, ranks_per_node);
        return register_entry(std::move(e));
      },
      py::arg("transport"), py::arg("timeout_s"), py::arg("slice_elems"), py::arg("seed"),
      py::arg("ranks_per_node"),
      "Registers a host transport with a communicator's options; returns its id (never "
      "reused).");
  m.def(
      "unregister", [](int64_t id) { return unregister(id); },
      py::arg("id"),
      "Releases an id: a compiled program that still names it fails with InvalidArgument.");
  m.def(
      "registered", []() { return registered(); },
      "How many communicators are registered (a retrace registers none).");
  m.def(
      "steps",
      [](int64_t id) {
        std::shared_ptr<Entry> e = lookup(id);
        std::lock_guard<std::mutex> lock(e->mu);
        return e->step;
      },
      py::arg("id"), "Collectives run through this id so far (its step counter).");
}
