// ccompress._cuda: the CUDA backend for Python, imported lazily so that a machine without a
// GPU never loads it by accident. Buffers are device addresses (Python ints) that the Python
// layer takes from validated DLPack arrays it keeps alive; streams are cudaStream_t handles
// (0: the legacy default stream).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/error.h"
#include "cuda_bindings.h"
#include "error_translator.h"
#include "kernels/codec_kernels.h"
#if defined(CCOMPRESS_CUDA_EMULATOR)
#include <cuda_runtime.h>  // cuda/emu's: emu::emu_error_count, emu_call_counts
#include <pybind11/stl.h>

#include "emu_selftest.h"
#endif
#include "kernels/cuda_backend.h"
#include "kernels/device_util.h"

namespace py = pybind11;

namespace ccompress::py_bindings {

Codec to_codec(const py::object& c, DType bind_to) {
  // A spec string or a ccompress Codec (anything with a `name`), so this module needs no
  // pybind11 type shared with _core. A bound `none` is named after its dtype ("bf16",
  // "fp16") except for float32, so binding what is still unbound to float32 is exact.
  // A _core Codec that is already bound keeps its own wire dtype: a float32 `none` is named
  // "none" like an unbound one, and must not take the output or addend dtype instead.
  std::string name = py::isinstance<py::str>(c) ? c.cast<std::string>()
                                                : c.attr("name").cast<std::string>();
  Codec codec = Codec::parse(name);
  if (!codec.unbound) return codec;
  if (!py::isinstance<py::str>(c) && py::hasattr(c, "unbound") && !c.attr("unbound").cast<bool>()) {
    py::object raw = c.attr("raw_dtype");
    if (!raw.is_none()) return codec.bind(parse_dtype(raw.cast<std::string>()));
  }
  return codec.bind(bind_to);
}

namespace {

void* ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }

using cuda::CudaBackend;

// A CUDA backend on its own streams, for kernel-level tests and timing: every call is
// asynchronous on `stream`; synchronize() waits for it.
void bind_backend(py::module_& m) {
  py::class_<CudaBackend, std::shared_ptr<CudaBackend>>(
      m, "Backend", "The CUDA KernelBackend of one rank (pointer-level calls, like _core's).")
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
          "encode",
          [](CudaBackend& k, const py::object& c, uintptr_t src, const std::string& src_dtype,
             int64_t n, float divisor, uintptr_t dst, uint64_t seed, uint64_t step, int32_t rank,
             int64_t index) {
            DType t = parse_dtype(src_dtype);
            Codec b = to_codec(c, t);
            cuda::DeviceGuard g(k.streams().device());
            k.encode(ptr(src), t, n, b, divisor, EncodeContext{seed, step, rank, index}, ptr(dst));
          },
          py::arg("codec"), py::arg("src_ptr"), py::arg("src_dtype"), py::arg("n"),
          py::arg("divisor"), py::arg("dst_ptr"), py::arg("seed") = 0, py::arg("step") = 0,
          py::arg("rank") = 0, py::arg("index") = 0)
      .def(
          "decode",
          [](CudaBackend& k, const py::object& c, uintptr_t src, int64_t n, uintptr_t out,
             const std::string& out_dtype) {
            DType t = parse_dtype(out_dtype);
            cuda::DeviceGuard g(k.streams().device());
            k.decode(ptr(src), n, to_codec(c, t), ptr(out), t);
          },
          py::arg("codec"), py::arg("src_ptr"), py::arg("n"), py::arg("out_ptr"),
          py::arg("out_dtype"))
      .def(
          "decode_accumulate",
          [](CudaBackend& k, const py::object& c, uintptr_t src, int64_t n, uintptr_t acc,
             bool assign) {
            cuda::DeviceGuard g(k.streams().device());
            k.decode_accumulate(ptr(src), n, to_codec(c, DType::Float32),
                                static_cast<float*>(ptr(acc)), assign);
          },
          py::arg("codec"), py::arg("src_ptr"), py::arg("n"), py::arg("acc_ptr"),
          py::arg("assign"))
      .def(
          "load_accumulate",
          [](CudaBackend& k, uintptr_t src, const std::string& src_dtype, int64_t n,
             uintptr_t acc, bool assign) {
            cuda::DeviceGuard g(k.streams().device());
            k.load_accumulate(ptr(src), parse_dtype(src_dtype), n, static_cast<float*>(ptr(acc)),
                              assign);
          },
          py::arg("src_ptr"), py::arg("src_dtype"), py::arg("n"), py::arg("acc_ptr"),
          py::arg("assign"))
      .def(
          "decode_reduce_encode",
          [](CudaBackend& k, const py::object& c, uintptr_t src, uintptr_t x,
             const std::string& x_dtype, int64_t n, float divisor, uintptr_t dst, uint64_t seed,
             uint64_t step, int32_t rank, int64_t index) {
            DType t = parse_dtype(x_dtype);
            cuda::DeviceGuard g(k.streams().device());
            k.decode_reduce_encode(ptr(src), ptr(x), t, n, to_codec(c, t), divisor,
                                   EncodeContext{seed, step, rank, index}, ptr(dst));
          },
          py::arg("codec"), py::arg("src_ptr"), py::arg("x_ptr"), py::arg("x_dtype"),
          py::arg("n"), py::arg("divisor"), py::arg("dst_ptr"), py::arg("seed") = 0,
          py::arg("step") = 0, py::arg("rank") = 0, py::arg("index") = 0)
      .def(
          "finalize",
          [](CudaBackend& k, uintptr_t acc, int64_t n, float divisor, uintptr_t out,
             const std::string& out_dtype) {
            cuda::DeviceGuard g(k.streams().device());
            k.finalize(static_cast<const float*>(ptr(acc)), n, divisor, ptr(out),
                       parse_dtype(out_dtype));
          },
          py::arg("acc_ptr"), py::arg("n"), py::arg("divisor"), py::arg("out_ptr"),
          py::arg("out_dtype"))
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
  ccompress::py_bindings::register_error_translator();
  ccompress::py_bindings::bind_memory(m);
  ccompress::py_bindings::bind_backend(m);
  ccompress::py_bindings::bind_device_collectives(m);
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
        return d;
      },
      "Runtime calls so far: cudaMalloc(Host), cudaFree(Host), cudaDeviceSynchronize.");
  m.def("emulator_selftest", &emu::selftest,
        "Runs the CPU emulator's checks of itself: {check name: passed}. Reports errors on "
        "purpose (stderr, emulator_errors()).");
#else
  m.attr("emulated") = false;
#endif
}
