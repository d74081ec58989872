// Device ranks for Python: one rank's transport and CUDA backend, running the collectives on
// device buffers ordered with the caller's stream. Built from a one-GPU loopback group (N
// virtual ranks as threads) or, with NCCL, from a communicator.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "ccompress/collectives.h"
#include "collective_args.h"
#include "cuda_bindings.h"
#include "kernels/device_collective.h"
#include "transport/device_loopback.h"

namespace py = pybind11;

namespace ccompress::py_bindings {

namespace {

// One rank's ends: what moves bytes, what runs kernels, and what must outlive both.
struct DeviceRank {
  std::shared_ptr<Transport> transport;
  std::shared_ptr<cuda::CudaBackend> backend;
  std::shared_ptr<void> keepalive;
};

template <cuda::CollectiveFn Fn>
py::dict call(DeviceRank& r, uintptr_t in, uintptr_t out, int64_t n, const std::string& dtype,
              const py::object& codec, const std::string& algo, const std::string& op,
              int64_t slice_elems, double timeout_s, uint64_t seed, uint64_t step,
              uintptr_t stream) {
  DType dt = parse_dtype(dtype);
  Codec c = to_codec(codec, dt);
  CollectiveOptions o = make_options(algo, op, slice_elems, timeout_s, seed, step);
  CollectiveStats s;
  {
    py::gil_scoped_release release;  // ranks on threads run in parallel
    s = cuda::run_device_collective(Fn, *r.transport, *r.backend,
                                    reinterpret_cast<const void*>(in), reinterpret_cast<void*>(out),
                                    n, dt, c, o, reinterpret_cast<cudaStream_t>(stream));
  }
  return stats_dict(s);
}

template <cuda::CollectiveFn Fn>
void def_collective(py::class_<DeviceRank, std::shared_ptr<DeviceRank>>& cls, const char* name,
                    const char* doc) {
  cls.def(name, &call<Fn>, py::arg("in_ptr"), py::arg("out_ptr"), py::arg("n"), py::arg("dtype"),
          py::arg("codec"), py::arg("algo"), py::arg("op"), py::arg("slice_elems"),
          py::arg("timeout"), py::arg("seed") = 0, py::arg("step") = 0, py::arg("stream") = 0,
          doc);
}

}  // namespace

void bind_device_collectives(py::module_& m) {
  py::class_<DeviceRank, std::shared_ptr<DeviceRank>> cls(
      m, "DeviceRank", "One rank's transport and CUDA backend; collectives on device buffers.");
  cls.def_property_readonly("rank", [](DeviceRank& r) { return r.transport->rank(); })
      .def_property_readonly("size", [](DeviceRank& r) { return r.transport->size(); })
      .def_property_readonly("name", [](DeviceRank& r) { return r.transport->name(); })
      .def_property_readonly("bytes_sent", [](DeviceRank& r) { return r.transport->bytes_sent(); })
      .def_property_readonly("device", [](DeviceRank& r) { return r.backend->streams().device(); })
      .def("barrier", [](DeviceRank& r) { r.transport->barrier(); },
           py::call_guard<py::gil_scoped_release>());
  def_collective<&allreduce>(cls, "allreduce",
                             "out <- reduction of in over all ranks, ordered with `stream`.");
  def_collective<&reduce_scatter>(cls, "reduce_scatter",
                                  "out <- this rank's chunk of the reduction of in.");
  def_collective<&allgather>(cls, "allgather", "out <- every rank's decode(encode(in)).");

  m.def(
      "loopback_group",
      [](int size, int device) {
        auto group = std::make_shared<cuda::LoopbackGroup>(size, device);
        std::vector<std::shared_ptr<DeviceRank>> ranks;
        for (int r = 0; r < size; ++r)
          ranks.push_back(std::make_shared<DeviceRank>(
              DeviceRank{group->transports[r], group->backends[r], group}));
        return ranks;
      },
      py::arg("size"), py::arg("device") = 0,
      "`size` virtual ranks on one GPU (threads of this process), each with its own streams; "
      "give each to its own thread.");
}

}  // namespace ccompress::py_bindings
