// The one mapping from the C++ error family to ccompress._internal.errors, shared by every extension
// module (each registers it: modules built by different compilers may not share pybind11's
// translator list, and a later, coarser translator would otherwise shadow this one).
#pragma once

#include <pybind11/pybind11.h>

#include <exception>

#include "ccompress/error.h"

namespace ccompress::py_bindings {

inline void register_error_translator() {
  pybind11::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    auto raise = [](const char* cls, const char* what) {
      pybind11::object errors = pybind11::module_::import("ccompress._internal.errors");
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
    } catch (const MessageError& e) {
      raise("MessageError", e.what());
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
