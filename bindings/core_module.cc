// ccompress._core: the CPU module. Always built; needs no GPU, CUDA or MPI.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "ccompress/common.h"
#include "ccompress/error.h"

namespace py = pybind11;

namespace ccompress::py_bindings {

void register_error_translator() {
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    auto raise = [](const char* cls, const char* what) {
      py::object errors = py::module_::import("ccompress._errors");
      PyErr_SetString(errors.attr(cls).ptr(), what);
    };
    try {
      std::rethrow_exception(p);
    } catch (const InvalidArgument& e) {
      raise("InvalidArgument", e.what());
    } catch (const Unsupported& e) {
      raise("Unsupported", e.what());
    } catch (const MismatchError& e) {
      raise("MismatchError", e.what());
    } catch (const TimeoutError& e) {
      raise("CollectiveTimeout", e.what());
    } catch (const CudaError& e) {
      raise("CudaError", e.what());
    } catch (const NcclError& e) {
      raise("NcclError", e.what());
    } catch (const MpiError& e) {
      raise("MpiError", e.what());
    } catch (const Error& e) {
      raise("CCompressError", e.what());
    }
  });
}

}  // namespace ccompress::py_bindings

PYBIND11_MODULE(_core, m) {
  using namespace ccompress::py_bindings;
  m.doc() = "ccompress C++ core (CPU backend, in-process transport, collectives)";
  register_error_translator();
  m.attr("__version__") = ccompress::version();
  bind_codec_math(m);
  bind_collectives(m);
}
