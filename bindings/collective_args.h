// The collectives for Python, written once for the host (_core) and device (_cuda) modules.
//
// A call reaches C++ as a CallSpec (which collective, and its options, parsed and validated
// here once per call, before any data moves) plus the per-call buffers. Both modules bind
// the same `run` method on their rank object (_core.Transport, _cuda.DeviceRank) through
// def_run; only the Runner differs: the CPU backend on the calling thread, or the CUDA
// backend ordered with the caller's stream.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "ccompress/collectives.h"
#include "ccompress/error.h"

namespace ccompress::py_bindings {

using CollectiveFn = CollectiveStats (*)(Transport&, KernelBackend&, const void*, void*, int64_t,
                                         DType, const Codec&, const CollectiveOptions&);

/// One collective call as the Python layer resolved it: the kind and the options that are
/// the same on every rank. algo applies to allreduce only, op to allreduce and
/// reduce_scatter; passing either where it has no meaning is refused rather than ignored.
struct CallSpec {
  std::string kind;
  CollectiveFn fn = nullptr;
  CollectiveOptions options;
};

inline CallSpec make_call_spec(const std::string& kind, const std::optional<std::string>& algo,
                               const std::optional<std::string>& op, int64_t slice_elems,
                               double timeout_s, uint64_t seed, int ranks_per_node,
                               const std::optional<std::string>& inter_algo,
                               const std::optional<Codec>& intra_codec) {
  CallSpec s;
  s.kind = kind;
  if (kind == "allreduce") {
    s.fn = &allreduce;
  } else if (kind == "reduce_scatter") {
    s.fn = &reduce_scatter;
  } else if (kind == "allgather") {
    s.fn = &allgather;
  } else if (kind == "alltoall") {
    s.fn = &alltoall;
  } else {
    CC_CHECK(false, "unknown collective '"
                        << kind << "'; use allreduce, reduce_scatter, allgather or alltoall");
  }
  CC_CHECK(!algo || kind != "alltoall",
           "alltoall has one schedule (pairwise exchange); algo does not apply");
  CC_CHECK(!op || kind != "alltoall", "alltoall reduces nothing; op does not apply");
  CC_CHECK(!algo || kind == "allreduce" || *algo == "hier",
           kind << " has one flat schedule; algo applies to allreduce only ('hier' to all)");
  CC_CHECK(!op || kind != "allgather", "allgather reduces nothing; op does not apply");
  if (algo) s.options.algo = parse_algo(*algo);
  if (op) s.options.op = parse_reduce_op(*op);
  // slice_elems and timeout are checked by the collective itself, before any data moves.
  s.options.slice_elems = slice_elems;
  s.options.timeout_s = timeout_s;
  s.options.seed = seed;
  const bool hier = s.options.algo == Algo::Hier;
  CC_CHECK(hier || (ranks_per_node == 0 && !inter_algo && !intra_codec),
           "ranks_per_node, inter_algo and intra_codec apply to algo='hier' only");
  if (hier) {
    CC_CHECK(ranks_per_node >= 1, "algo='hier' needs ranks_per_node >= 1 (the communicator's "
                                  "node size); got " << ranks_per_node);
    s.options.ranks_per_node = ranks_per_node;
    if (inter_algo) s.options.inter_algo = parse_algo(*inter_algo);
    CC_CHECK(s.options.inter_algo != Algo::Hier, "inter_algo must be a flat algo, not 'hier'");
    if (intra_codec) s.options.intra_codec = *intra_codec;
  }
  return s;
}

inline pybind11::dict stats_dict(const CollectiveStats& s) {
  pybind11::dict d;
  d["algo"] = algo_name(s.algo);
  d["payload_bytes"] = s.payload_bytes;
  d["header_bytes"] = s.header_bytes;
  d["quantizations"] = s.quantizations;
  d["nonfinite_in"] = s.nonfinite_in >= 0 ? pybind11::object(pybind11::int_(s.nonfinite_in)) : pybind11::none();
  d["nonfinite_out"] =
      s.nonfinite_out >= 0 ? pybind11::object(pybind11::int_(s.nonfinite_out)) : pybind11::none();
  d["feedback_nonfinite"] = s.feedback_nonfinite;
  return d;
}

/// Binds `cls.run(spec, in_ptr, out_ptr, n, dtype, codec, *, step, stream, worker_residual,
/// server_residual, ready_event, in_splits, out_splits, out_n) -> stats dict` (the last three
/// for alltoall: CollectiveOptions). @p run is called as
/// run(self, fn, in, out, n, dtype, codec, options, stream, ready_event) and returns the
/// CollectiveStats; it converts the codec and releases the GIL around the collective (ranks
/// on threads run in parallel).
template <class Self, class Runner>
void def_run(pybind11::class_<Self, std::shared_ptr<Self>>& cls, Runner run) {
  namespace py = pybind11;
  cls.def(
      "run",
      [run](Self& self, const CallSpec& spec, uintptr_t in, uintptr_t out, int64_t n,
            const std::string& dtype, const py::object& codec, uint64_t step, uintptr_t stream,
            uintptr_t worker_residual, uintptr_t server_residual, uintptr_t ready_event,
            const std::vector<int64_t>& in_splits, const std::vector<int64_t>& out_splits,
            int64_t out_n) {
        DType dt = parse_dtype(dtype);
        CollectiveOptions o = spec.options;
        const bool splits = !in_splits.empty() || !out_splits.empty() || out_n >= 0;
        CC_CHECK(!splits || spec.kind == "alltoall",
                 "in_splits, out_splits and out_n apply to alltoall only");
        o.in_splits = in_splits;
        o.out_splits = out_splits;
        o.out_elems = out_n;
        o.step = step;
        o.feedback.worker = reinterpret_cast<float*>(worker_residual);
        o.feedback.server = reinterpret_cast<float*>(server_residual);
        CollectiveStats s = run(self, spec.fn, reinterpret_cast<const void*>(in),
                                reinterpret_cast<void*>(out), n, dt, codec, o, stream, ready_event);
        return stats_dict(s);
      },
      py::arg("spec"), py::arg("in_ptr"), py::arg("out_ptr"), py::arg("n"), py::arg("dtype"),
      py::arg("codec"), py::kw_only(), py::arg("step") = 0, py::arg("stream") = 0,
      py::arg("worker_residual") = 0, py::arg("server_residual") = 0, py::arg("ready_event") = 0,
      py::arg("in_splits") = std::vector<int64_t>{},
      py::arg("out_splits") = std::vector<int64_t>{}, py::arg("out_n") = -1,
      "Runs the collective `spec` from in_ptr (n elements of dtype) into out_ptr with `codec`; "
      "residuals are error-feedback buffers (0: none); stream and ready_event order a device "
      "collective with the caller's stream; alltoall: in_splits / out_splits are elements to "
      "and from each rank (empty: equal pieces) and out_n the output's elements.");
}

}  // namespace ccompress::py_bindings
