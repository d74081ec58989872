// ccompress._mpi: the MPI transport. Built against the MPI found at build time (the pip
// mpich wheel by default) and imported only after mpi4py has loaded that library.
#include <mpi.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>

#include "error_translator.h"
#include "transport/mpi_transport.h"

namespace py = pybind11;

PYBIND11_MODULE(_mpi, m) {
  m.doc() = "ccompress MPI transport";
  py::module_::import("ccompress._core");  // registers the Transport base class
  ccompress::py_bindings::register_error_translator();
  py::class_<ccompress::MpiTransport, ccompress::Transport,
             std::shared_ptr<ccompress::MpiTransport>>(m, "MpiTransport")
      .def(py::init([](intptr_t handle) {
             // mpi4py's MPI._handleof(comm) is the C handle: an int for the MPICH ABI, a
             // pointer for Open MPI; the cast covers both.
             MPI_Comm comm;
             if constexpr (sizeof(MPI_Comm) == sizeof(int)) {
               int h = int(handle);
               std::memcpy(&comm, &h, sizeof comm);
             } else {
               std::memcpy(&comm, &handle, sizeof comm);
             }
             return std::make_shared<ccompress::MpiTransport>(comm);
           }),
           py::arg("comm_handle"), py::call_guard<py::gil_scoped_release>());
  m.def("library_version", &ccompress::MpiTransport::library_version);
  // The MPI transport's default slice, for the cost model (ccompress.perfmodel).
  m.attr("SLICE_ELEMS") = ccompress::MpiTransport::kSliceElems;
}
