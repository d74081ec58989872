// Declarations shared by the files that make up the ccompress._core module.
#pragma once

#include <pybind11/pybind11.h>

namespace ccompress::py_bindings {

/// Codec class, pointer-level encode/decode and the scalar conversion test hooks.
void bind_codec_math(pybind11::module_& m);
/// In-process groups, transports and the collectives.
void bind_collectives(pybind11::module_& m);
/// PyTransport: a Transport over Python point-to-point callables (core_py_transport.cc).
void bind_py_transport(pybind11::module_& m);
/// TcpTransport: sockets between every pair of ranks, no Python per message
/// (core_tcp_transport.cc).
void bind_tcp_transport(pybind11::module_& m);

}  // namespace ccompress::py_bindings
