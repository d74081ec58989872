// Collective options from Python arguments and statistics back to Python: shared by the
// host (_core) and device (_cuda) bindings so both read and report a call alike.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "ccompress/collectives.h"

namespace ccompress::py_bindings {

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

inline CollectiveOptions make_options(const std::string& algo, const std::string& op,
                                      int64_t slice_elems, double timeout_s, uint64_t seed,
                                      uint64_t step) {
  CollectiveOptions o;
  o.seed = seed;
  o.step = step;
  o.algo = parse_algo(algo);
  o.op = parse_reduce_op(op);
  o.slice_elems = slice_elems;
  o.timeout_s = timeout_s;
  return o;
}

}  // namespace ccompress::py_bindings
