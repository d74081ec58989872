// TcpTransport for Python: made listening, connected once every rank's address is known
// (ccompress/torch/_p2p.py exchanges them through torch's store).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>

#include "bindings.h"
#include "transport/tcp_transport.h"

namespace py = pybind11;

namespace ccompress::py_bindings {

void bind_tcp_transport(py::module_& m) {
  py::class_<TcpTransport, Transport, std::shared_ptr<TcpTransport>>(
      m, "TcpTransport",
      "A transport over TCP connections between every pair of ranks, moved by a C++ "
      "progress thread (no Python per message). TcpTransport(rank, size, host) listens on "
      "host (an IPv4 address); connect(addresses, timeout_s) joins the group once every "
      "rank's `address` is known.")
      .def(py::init<int, int, std::string>(), py::arg("rank"), py::arg("size"),
           py::arg("host"))
      .def_property_readonly("address", &TcpTransport::address,
                             "host:port of this rank's listening socket")
      .def("connect", &TcpTransport::connect, py::arg("addresses"), py::arg("timeout_s"),
           py::call_guard<py::gil_scoped_release>(),
           "Connects to every other rank (collective); TimeoutError after timeout_s.")
      .def_readwrite("barrier_timeout_s", &TcpTransport::barrier_timeout_s)
      // Test hooks: the point-to-point calls the executor makes, on integer addresses.
      .def(
          "_isend",
          [](TcpTransport& t, int peer, uintptr_t buf, int64_t bytes, int tag) {
            return t.isend(peer, reinterpret_cast<const void*>(buf), bytes, tag);
          },
          py::arg("peer"), py::arg("buf"), py::arg("bytes"), py::arg("tag"))
      .def(
          "_irecv",
          [](TcpTransport& t, int peer, uintptr_t buf, int64_t bytes, int tag) {
            return t.irecv(peer, reinterpret_cast<void*>(buf), bytes, tag);
          },
          py::arg("peer"), py::arg("buf"), py::arg("bytes"), py::arg("tag"))
      .def("_wait_some", &TcpTransport::wait_some, py::arg("reqs"), py::arg("timeout_s"),
           py::call_guard<py::gil_scoped_release>());
}

}  // namespace ccompress::py_bindings
