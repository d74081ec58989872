// Transports and collectives for Python. Buffers arrive as integer addresses that the
// Python layer (ccompress/_arrays.py) has taken from validated arrays it keeps alive.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings.h"
#include "collective_args.h"
#include "ccompress/collectives.h"
#include "cpu/cpu_backend.h"
#include "cpu/nonfinite.h"
#include "transport/inproc_transport.h"

namespace py = pybind11;

namespace ccompress::py_bindings {

namespace {

const void* as_ptr(uintptr_t p) { return reinterpret_cast<const void*>(p); }

using CollectiveFn = CollectiveStats (*)(Transport&, KernelBackend&, const void*, void*, int64_t,
                                         DType, const Codec&, const CollectiveOptions&);

// One binding body for the three collectives: the GIL is released while data moves so that
// threads acting as ranks run in parallel.
template <CollectiveFn Fn>
py::dict call_collective(Transport& t, uintptr_t in, uintptr_t out, int64_t n,
                         const std::string& dtype, const Codec& codec, const std::string& algo,
                         const std::string& op, int64_t slice_elems, double timeout_s,
                         uint64_t seed, uint64_t step, uintptr_t worker_residual,
                         uintptr_t server_residual) {
  DType dt = parse_dtype(dtype);
  CollectiveOptions o = make_options(algo, op, slice_elems, timeout_s, seed, step);
  o.feedback.worker = reinterpret_cast<float*>(worker_residual);
  o.feedback.server = reinterpret_cast<float*>(server_residual);
  CollectiveStats s;
  {
    py::gil_scoped_release release;
    s = Fn(t, cpu_backend(), as_ptr(in), const_cast<void*>(as_ptr(out)), n, dt, codec, o);
  }
  return stats_dict(s);
}

}  // namespace

void bind_collectives(py::module_& m) {
  py::class_<Transport, std::shared_ptr<Transport>>(m, "Transport",
                                                    "Moves bytes between the ranks of a group.")
      .def_property_readonly("rank", &Transport::rank)
      .def_property_readonly("size", &Transport::size)
      .def_property_readonly("name", &Transport::name)
      .def_property_readonly("bytes_sent", &Transport::bytes_sent)
      .def("barrier", &Transport::barrier, py::call_guard<py::gil_scoped_release>())
      .def(
          "_skip_calls",
          [](Transport& t, int k) {
            for (int i = 0; i < k; ++i) t.next_call();
          },
          py::arg("k"),
          "Test hook: this rank loses count of k collectives, so its message headers carry "
          "another call number than its peers expect.");

  py::class_<InprocGroup, std::shared_ptr<InprocGroup>>(
      m, "InprocGroup", "N ranks as threads of this process; transport(r) is rank r's end.")
      .def(py::init<int>(), py::arg("size"))
      .def_property_readonly("size", &InprocGroup::size)
      .def(
          "transport",
          [](std::shared_ptr<InprocGroup> g, int rank, bool ordered) -> std::shared_ptr<Transport> {
            if (!ordered) return std::make_shared<InprocTransport>(g, rank);
            auto t = std::make_shared<InprocOrderedTransport>(g, rank);
            t->barrier_timeout_s = 60.0;  // a wrong group order deadlocks: fail the test fast
            return t;
          },
          py::arg("rank"), py::arg("ordered") = false,
          "Rank `rank`'s end; ordered=True runs the ordered (NCCL-style) executor on the CPU, "
          "for tests.");

  m.def("chunk_range", &chunk_range, py::arg("n"), py::arg("parts"), py::arg("index"),
        "Element range [begin, end) of chunk `index` when n elements are cut into `parts`.");
  m.def(
      "choose_algo",
      [](int64_t n, const std::string& dtype, const Codec& codec, int nranks) {
        return std::string(algo_name(choose_algo(n, parse_dtype(dtype), codec, nranks)));
      },
      py::arg("n"), py::arg("dtype"), py::arg("codec"), py::arg("nranks"));
  m.attr("DEFAULT_SLICE_ELEMS") = kDefaultSliceElems;
  m.def(
      "count_nonfinite",
      [](uintptr_t ptr, const std::string& dtype, int64_t n) {
        DType t = parse_dtype(dtype);
        NonFiniteCount c;
        {
          py::gil_scoped_release nogil;
          c = count_nonfinite(as_ptr(ptr), t, n);
        }
        return py::make_tuple(c.count, c.first);
      },
      py::arg("ptr"), py::arg("dtype"), py::arg("n"),
      "(count, first index or -1) of the NaN and +-Inf elements of a host buffer.");

  m.def("allreduce", &call_collective<&allreduce>, py::arg("transport"), py::arg("in_ptr"),
        py::arg("out_ptr"), py::arg("n"), py::arg("dtype"), py::arg("codec"), py::arg("algo"),
        py::arg("op"), py::arg("slice_elems"), py::arg("timeout"), py::arg("seed") = 0,
        py::arg("step") = 0, py::arg("worker_residual") = 0, py::arg("server_residual") = 0);
  m.def("reduce_scatter", &call_collective<&reduce_scatter>, py::arg("transport"),
        py::arg("in_ptr"), py::arg("out_ptr"), py::arg("n"), py::arg("dtype"), py::arg("codec"),
        py::arg("algo"), py::arg("op"), py::arg("slice_elems"), py::arg("timeout"),
        py::arg("seed") = 0, py::arg("step") = 0, py::arg("worker_residual") = 0,
        py::arg("server_residual") = 0);
  m.def("allgather", &call_collective<&allgather>, py::arg("transport"), py::arg("in_ptr"),
        py::arg("out_ptr"), py::arg("n"), py::arg("dtype"), py::arg("codec"), py::arg("algo"),
        py::arg("op"), py::arg("slice_elems"), py::arg("timeout"), py::arg("seed") = 0,
        py::arg("step") = 0, py::arg("worker_residual") = 0, py::arg("server_residual") = 0);
}

}  // namespace ccompress::py_bindings
