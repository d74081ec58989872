// ccompress._cuda: the CUDA module, imported lazily so that a machine without a GPU never
// loads it by accident. For now it exposes the device count and the FP8 codec kernels on
// raw device pointers (Python ints), which the GPU tests compare with the CPU backend.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/error.h"
#include "error_translator.h"
#include "kernels/codec_kernels.h"

namespace py = pybind11;

namespace {

// Accepts a spec string or a ccompress._core.Codec (anything with a `name`), so this module
// needs no shared pybind11 type registration with _core.
ccompress::Codec to_codec(const py::object& c) {
  if (py::isinstance<py::str>(c)) return ccompress::Codec::parse(c.cast<std::string>());
  return ccompress::Codec::parse(c.attr("name").cast<std::string>());
}

void* ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }
cudaStream_t stream_of(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

}  // namespace

PYBIND11_MODULE(_cuda, m) {
  m.doc() = "ccompress CUDA kernels (FP8 codec encode / decode_accumulate on device pointers)";
  ccompress::py_bindings::register_error_translator();
  m.def("device_count", &ccompress::cuda::device_count,
        "Visible CUDA devices; 0 without a GPU or driver (never raises).");
  m.def(
      "fp8_encode",
      [](const py::object& codec, uintptr_t src, const std::string& src_dtype, int64_t n,
         float divisor, uintptr_t dst, uintptr_t stream) {
        ccompress::Codec c = to_codec(codec);
        ccompress::DType t = ccompress::parse_dtype(src_dtype);
        py::gil_scoped_release nogil;
        ccompress::cuda::launch_fp8_encode(ptr(src), t, n, c, divisor, ptr(dst), stream_of(stream));
      },
      py::arg("codec"), py::arg("src_ptr"), py::arg("src_dtype"), py::arg("n"),
      py::arg("divisor"), py::arg("dst_ptr"), py::arg("stream") = 0,
      "dst <- encode(src / divisor), asynchronously on `stream` (0: the legacy default stream).");
  m.def(
      "fp8_decode_accumulate",
      [](const py::object& codec, uintptr_t src, int64_t n, uintptr_t acc, bool assign,
         uintptr_t stream) {
        ccompress::Codec c = to_codec(codec);
        py::gil_scoped_release nogil;
        ccompress::cuda::launch_fp8_decode_accumulate(ptr(src), n, c, static_cast<float*>(ptr(acc)),
                                                      assign, stream_of(stream));
      },
      py::arg("codec"), py::arg("src_ptr"), py::arg("n"), py::arg("acc_ptr"), py::arg("assign"),
      py::arg("stream") = 0, "acc <- decode(src) (assign) or acc += decode(src), on `stream`.");
}
