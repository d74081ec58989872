// Transports and collectives for Python. Buffers arrive as integer addresses that the
// Python layer (ccompress/_internal/arrays.py) has taken from validated arrays it keeps alive.
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

}  // namespace

void bind_collectives(py::module_& m) {
  py::class_<CallSpec>(m, "CallSpec",
                       "One collective call's kind and options, validated once per call.")
      .def(py::init(&make_call_spec), py::arg("kind"), py::kw_only(), py::arg("algo") = py::none(),
           py::arg("op") = py::none(), py::arg("slice_elems") = 0, py::arg("timeout") = 300.0,
           py::arg("seed") = 0, py::arg("ranks_per_node") = 0, py::arg("inter_algo") = py::none(),
           py::arg("intra_codec") = py::none())
      .def_readonly("kind", &CallSpec::kind)
      .def_property_readonly("algo", [](const CallSpec& s) { return algo_name(s.options.algo); })
      .def_property_readonly("op", [](const CallSpec& s) { return reduce_op_name(s.options.op); });

  py::class_<Transport, std::shared_ptr<Transport>> transport(
      m, "Transport", "Moves bytes between the ranks of a group.");
  transport.def_property_readonly("rank", &Transport::rank)
      .def_property_readonly("size", &Transport::size)
      .def_property_readonly("name", &Transport::name)
      .def_property_readonly("bytes_sent", &Transport::bytes_sent)
      .def_property_readonly(
          "default_slice_elems", &Transport::default_slice_elems,
          "Elements per slice of a call that sets no slice_elems (before rounding up to the "
          "codec's scale group): the transport's choice, DEFAULT_SLICE_ELEMS unless it says. "
          "A transport whose default_slice_bytes is not 0 slices by bytes instead.")
      .def_property_readonly(
          "default_slice_bytes", &Transport::default_slice_bytes,
          "Bytes of input per slice of a call that sets no slice_elems, or 0 when the "
          "transport slices by default_slice_elems (device transports: a few MiB).")
      .def(
          "default_slice_for",
          [](const Transport& t, const std::string& dtype) {
            return default_slice_for(t, parse_dtype(dtype));
          },
          py::arg("dtype"),
          "Elements per slice of a call in `dtype` that sets no slice_elems (before rounding "
          "up to the codec's scale group).")
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
        "Element range of one chunk when ``n`` elements are cut into ``parts``.\n\n"
        "Parameters\n----------\nn : int\n    Elements in all.\nparts : int\n"
        "    Chunks (a collective's ranks).\nindex : int\n    The chunk, 0 <= index < parts.\n\n"
        "Returns\n-------\ntuple of int\n    ``(begin, end)``: the chunk is ``[begin, end)``; "
        "the first ``n % parts`` chunks hold one element more.");
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

  def_run(transport, [](Transport& t, CollectiveFn fn, const void* in, void* out, int64_t n,
                         DType dtype, const py::object& codec, const CollectiveOptions& o,
                         uintptr_t stream, uintptr_t ready) {
    CC_CHECK_AS(Unsupported, stream == 0 && ready == 0,
                "a host transport runs on the CPU; stream= applies to device communicators");
    const Codec& c = codec.cast<const Codec&>();
    py::gil_scoped_release release;
    return fn(t, cpu_backend(), in, out, n, dtype, c, o);
  });
}

}  // namespace ccompress::py_bindings
