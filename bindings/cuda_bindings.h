// Declarations shared by the files that make up the ccompress._cuda module.
#pragma once

#include <pybind11/pybind11.h>

#include "ccompress/codec.h"

namespace ccompress::py_bindings {

/// A codec from a spec string or a ccompress Codec; an unbound `none` is bound to @p bind_to.
Codec to_codec(const pybind11::object& c, DType bind_to);
/// Loopback groups and device ranks with their collectives.
void bind_device_collectives(pybind11::module_& m);

}  // namespace ccompress::py_bindings
