// ccompress._cuda: the CUDA backend for Python, imported lazily so that a machine without a
// GPU never loads it by accident. Buffers are device addresses (Python ints) that the Python
// layer takes from validated DLPack arrays it keeps alive; streams are cudaStream_t handles
// (0: the legacy default stream).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/error.h"
#include "cuda_bindings.h"
#include "error_translator.h"
#include "kernel_backend_calls.h"
#if defined(CCOMPRESS_CUDA_EMULATOR)
#include <cuda_runtime.h>  // cuda/emu's: emu::emu_error_count, emu_call_counts
#include <pybind11/stl.h>

#include "emu_selftest.h"
#endif
#include "kernels/cuda_backend.h"
#include "kernels/device_util.h"
#include "kernels/exact_div_check.h"

namespace py = pybind11;

namespace ccompress::py_bindings {

Codec to_codec(const py::object& c, DType bind_to) {
  // _core's Codec is this module's Codec type too (one pybind11 type; the module imports
  // _core first), so it arrives as it is, never re-parsed; a ccompress.Codec carries one as
  // `_c`. A spec string is parsed here. Only what is still unbound takes @p bind_to: a bound
  // float32 `none` keeps its own wire dtype.
  if (py::isinstance<py::str>(c)) return Codec::parse(c.cast<std::string>()).bind(bind_to);
  const py::object core = py::isinstance<Codec>(c) ? c : c.attr("_c");
  return core.cast<const Codec&>().bind(bind_to);
}

namespace {

void* ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }

using cuda::CudaBackend;

// The KernelBackend calls on one rank's CUDA backend: an unbound `none` is bound to the
// call's dtype, the rank's device is made current for the call.
struct CudaCalls {
  Codec codec(const Codec& c, DType t) const { return c.bind(t); }
  template <class Fn>
  void run(CudaBackend& k, Fn fn) const {
    cuda::DeviceGuard g(k.streams().device());
    fn(static_cast<KernelBackend&>(k));
  }
};

// A CUDA backend on its own streams, for kernel-level tests and timing: every call is
// asynchronous on `stream`; synchronize() waits for it.
void bind_backend(py::module_& m) {
  py::class_<CudaBackend, std::shared_ptr<CudaBackend>> backend(
      m, "Backend", "The CUDA KernelBackend of one rank (pointer-level calls, like _core's).");
  def_kernel_backend_calls<CudaBackend>(backend, CudaCalls{});
  backend
      .def(py::init([](int device) {
             return std::make_shared<CudaBackend>(std::make_shared<cuda::RankStreams>(device));
           }),
           py::arg("device") = 0)
      .def_property_readonly("device", [](CudaBackend& k) { return k.streams().device(); })
      .def_property_readonly("stream",
                             [](CudaBackend& k) { return reinterpret_cast<uintptr_t>(k.streams().codec()); })
      .def("synchronize", [](CudaBackend& k) {
        py::gil_scoped_release nogil;
        cuda::stream_synchronize(k.streams().codec());
      })
      .def(
          "count_nonfinite",
          [](CudaBackend& k, uintptr_t src, const std::string& dtype, int64_t n, uintptr_t count) {
            cuda::DeviceGuard g(k.streams().device());
            k.count_nonfinite(ptr(src), parse_dtype(dtype), n, static_cast<int64_t*>(ptr(count)));
          },
          py::arg("src_ptr"), py::arg("dtype"), py::arg("n"), py::arg("count_ptr"),
          "Adds the NaN/Inf count of the buffer to the int64 at count_ptr (device memory).")
      .def(
          "feedback_residual",
          [](CudaBackend& k, uintptr_t v, uintptr_t decoded, int64_t n, uintptr_t residual,
             uintptr_t count) {
            cuda::DeviceGuard g(k.streams().device());
            k.feedback_residual(static_cast<const float*>(ptr(v)),
                                static_cast<const float*>(ptr(decoded)), n,
                                static_cast<float*>(ptr(residual)),
                                static_cast<int64_t*>(ptr(count)));
          },
          py::arg("v_ptr"), py::arg("decoded_ptr"), py::arg("n"), py::arg("residual_ptr"),
          py::arg("count_ptr"),
          "residual <- v - decoded where all finite, else 0; adds the zeroed count to the "
          "int64 at count_ptr (device memory).");
}

void bind_memory(py::module_& m) {
  m.def("device_count", &cuda::device_count,
        "Visible CUDA devices; 0 without a GPU or driver (never raises).");
  m.def(
      "malloc", [](int64_t bytes, int device) { return reinterpret_cast<uintptr_t>(cuda::device_alloc(bytes, device)); },
      py::arg("bytes"), py::arg("device") = 0, "Device memory (an address); release with free().");
  m.def(
      "free", [](uintptr_t p, int device) { cuda::device_free(ptr(p), device); }, py::arg("ptr"),
      py::arg("device") = 0);
  m.def(
      "copy",
      [](uintptr_t dst, uintptr_t src, int64_t bytes, uintptr_t stream) {
        py::gil_scoped_release nogil;
        cuda::copy_sync(ptr(dst), ptr(src), bytes, reinterpret_cast<cudaStream_t>(stream));
      },
      py::arg("dst_ptr"), py::arg("src_ptr"), py::arg("bytes"), py::arg("stream") = 0,
      "Copies between host and device memory (any direction) and waits for it.");
  m.def(
      "synchronize",
      [](int device) {
        py::gil_scoped_release nogil;
        cuda::device_synchronize(device);
      },
      py::arg("device") = 0, "Waits for all work on `device`, on every stream.");
  m.def(
      "copy_async",
      [](uintptr_t dst, uintptr_t src, int64_t bytes, uintptr_t stream) {
        cuda::copy_async(ptr(dst), ptr(src), bytes, reinterpret_cast<cudaStream_t>(stream));
      },
      py::arg("dst_ptr"), py::arg("src_ptr"), py::arg("bytes"), py::arg("stream") = 0,
      "Device-to-device copy enqueued on `stream` (the bandwidth baseline).");
  m.def(
      "exact_div_check",
      [](py::array_t<float, py::array::c_style | py::array::forcecast> a,
         py::array_t<float, py::array::c_style | py::array::forcecast> b, bool general, int device) {
        CC_CHECK(a.ndim() == 1 && b.ndim() == 1 && a.shape(0) == b.shape(0),
                 "exact_div_check: a and b must be 1-D arrays of one length, got shapes of "
                     << a.ndim() << " and " << b.ndim() << " dimensions, " << a.size() << " and "
                     << b.size() << " elements");
        py::array_t<float> out(a.shape(0));
        {
          py::gil_scoped_release nogil;
          cuda::exact_div_check(a.data(), b.data(), a.shape(0),
                                general ? cuda::ExactDivPath::kGeneral : cuda::ExactDivPath::kPrepared,
                                out.mutable_data(), device);
        }
        return out;
      },
      py::arg("a"), py::arg("b"), py::arg("general") = false, py::arg("device") = 0,
      "a / b elementwise (float32), computed on the device by kernels/exact_div.cuh: through "
      "prepare_divisor and exact_div, or with general=True through div_general alone. Host "
      "arrays in and out; for the tests, which compare it with the host's division.");
  py::class_<cuda::TimingEvent, std::shared_ptr<cuda::TimingEvent>>(m, "TimingEvent")
      .def(py::init<int>(), py::arg("device") = 0)
      .def("record", [](cuda::TimingEvent& e, uintptr_t s) { e.record(reinterpret_cast<cudaStream_t>(s)); },
           py::arg("stream") = 0)
      .def("block", [](cuda::TimingEvent& e, uintptr_t s) { e.block(reinterpret_cast<cudaStream_t>(s)); },
           py::arg("stream"), "Work enqueued on `stream` from now on waits for the last record.")
      .def("synchronize", &cuda::TimingEvent::synchronize, py::call_guard<py::gil_scoped_release>())
      .def("elapsed_ms", &cuda::TimingEvent::elapsed_ms, py::arg("start"))
      .def_property_readonly(
          "handle", [](const cuda::TimingEvent& e) { return reinterpret_cast<uintptr_t>(e.handle()); },
          "The cudaEvent_t, for a collective's ready_event.");
}

}  // namespace
}  // namespace ccompress::py_bindings

PYBIND11_MODULE(_cuda, m) {
  m.doc() = "ccompress CUDA backend: kernels, one-GPU loopback groups, device collectives";
  // _core's Codec class is the one this module's calls take (kernel_backend_calls.h).
  pybind11::module_::import("ccompress._core");
  ccompress::py_bindings::register_error_translator();
  ccompress::py_bindings::bind_memory(m);
  ccompress::py_bindings::bind_backend(m);
  ccompress::py_bindings::bind_device_collectives(m);
  ccompress::py_bindings::bind_jax(m);
#if defined(CCOMPRESS_CUDA_EMULATOR)
  m.attr("emulated") = true;
  m.def("emulator_errors", &emu::emu_error_count,
        "Errors the CPU emulator has reported so far (each is also printed to stderr).");
  m.def(
      "emulator_counts",
      [] {
        emu::CallCounts c = emu::emu_call_counts();
        py::dict d;
        d["malloc"] = c.malloc;
        d["free"] = c.free;
        d["device_synchronize"] = c.device_synchronize;
        d["launches"] = c.launches;
        d["copies"] = c.copies;
        d["event_creates"] = c.event_creates;
        d["event_records"] = c.event_records;
        d["stream_waits"] = c.stream_waits;
        d["nccl_ops"] = c.nccl_ops;
        return d;
      },
      "Runtime calls so far: cudaMalloc(Host), cudaFree(Host), cudaDeviceSynchronize, kernel "
      "launches, copies (cudaMemcpyAsync, cudaMemsetAsync), cudaEventCreate, cudaEventRecord, "
      "cudaStreamWaitEvent and the NCCL stand-in's stream operations.");
  m.def("emulator_selftest", &emu::selftest,
        "Runs the CPU emulator's checks of itself: {check name: passed}. Reports errors on "
        "purpose (stderr, emulator_errors()).");
#else
  m.attr("emulated") = false;
#endif
}
