// Device ranks for Python: one rank's transport and CUDA backend, running the collectives on
// device buffers ordered with the caller's stream. Built from a one-GPU loopback group (N
// virtual ranks as threads) or, with NCCL, from a communicator.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ccompress/collectives.h"
#include "ccompress/error.h"
#include "collective_args.h"
#include "cuda_bindings.h"
#include "kernels/device_collective.h"
#include "transport/device_loopback.h"
#include "transport/nccl_transport.h"

namespace py = pybind11;

namespace ccompress::py_bindings {

namespace {

cuda::NcclUniqueId unique_id_from(const py::bytes& b) {
  std::string s = b;
  CC_CHECK(s.size() == sizeof(cuda::NcclUniqueId),
           "an NCCL unique id has " << sizeof(cuda::NcclUniqueId) << " bytes, got " << s.size());
  cuda::NcclUniqueId id;
  std::memcpy(id.internal, s.data(), s.size());
  return id;
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
      .def_property_readonly(
          "default_slice_elems", [](DeviceRank& r) { return r.transport->default_slice_elems(); },
          "Elements per slice of a call that sets no slice_elems, where default_slice_bytes "
          "is 0.")
      .def_property_readonly(
          "default_slice_bytes", [](DeviceRank& r) { return r.transport->default_slice_bytes(); },
          "Bytes of input per slice of a call that sets no slice_elems: the device "
          "transport's own slice (CCOMPRESS_DEVICE_SLICE_MB overrides it).")
      .def(
          "default_slice_for",
          [](DeviceRank& r, const std::string& dtype) {
            return default_slice_for(*r.transport, parse_dtype(dtype));
          },
          py::arg("dtype"),
          "Elements per slice of a call in `dtype` that sets no slice_elems (before rounding up "
          "to the codec's scale group).")
      .def("barrier", [](DeviceRank& r) { r.transport->barrier(); },
           py::call_guard<py::gil_scoped_release>());
  def_run(cls, [](DeviceRank& r, CollectiveFn fn, const void* in, void* out, int64_t n,
                  DType dtype, const py::object& codec, const CollectiveOptions& o,
                  uintptr_t stream, uintptr_t ready) {
    Codec c = to_codec(codec, dtype);
    py::gil_scoped_release release;  // ranks on threads run in parallel
    return cuda::run_device_collective(fn, *r.transport, *r.backend, in, out, n, dtype, c, o,
                                       reinterpret_cast<cudaStream_t>(stream),
                                       reinterpret_cast<cudaEvent_t>(ready));
  });

  cls.def(
      "nccl_allreduce",
      [](DeviceRank& r, uintptr_t in, uintptr_t out, int64_t n, uintptr_t stream) {
        CC_CHECK_AS(Unsupported, r.nccl != nullptr, "nccl_allreduce needs an NCCL rank");
        py::gil_scoped_release release;
        r.nccl->nccl_allreduce(reinterpret_cast<const float*>(in), reinterpret_cast<float*>(out), n,
                               reinterpret_cast<cudaStream_t>(stream));
      },
      py::arg("in_ptr"), py::arg("out_ptr"), py::arg("n"), py::arg("stream") = 0,
      "Plain float32 ncclAllReduce (sum), ordered with `stream`: the uncompressed baseline.");

  m.def(
      "nccl_load",
      [](const std::string& path) { return cuda::load_nccl(path)->version_string(); },
      py::arg("path"),
      "Loads libnccl from `path` (once per process) and returns its version; raises "
      "Unsupported when it cannot be loaded.");
  m.def(
      "nccl_unique_id",
      [](const std::string& path) {
        cuda::NcclUniqueId id = cuda::nccl_unique_id(*cuda::load_nccl(path));
        return py::bytes(id.internal, sizeof id.internal);
      },
      py::arg("path") = "", "A fresh NCCL unique id (128 bytes) for nccl_rank.");
  m.def(
      "nccl_rank",
      [](const py::bytes& unique_id, int size, int rank, int device, const std::string& path) {
        cuda::NcclUniqueId id = unique_id_from(unique_id);
        auto lib = cuda::load_nccl(path);
        auto streams = std::make_shared<cuda::RankStreams>(device);
        std::shared_ptr<cuda::NcclTransport> t;
        {
          py::gil_scoped_release release;  // ncclCommInitRank waits for every rank
          t = std::make_shared<cuda::NcclTransport>(lib, id, size, rank, streams);
        }
        return std::make_shared<DeviceRank>(
            DeviceRank{t, std::make_shared<cuda::CudaBackend>(streams), nullptr, t});
      },
      py::arg("unique_id"), py::arg("size"), py::arg("rank"), py::arg("device"),
      py::arg("path") = "",
      "Rank `rank` of an NCCL communicator of `size` ranks on CUDA device `device`; "
      "collective over the ranks sharing `unique_id`.");

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
