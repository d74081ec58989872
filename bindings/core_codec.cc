// ccompress._core: the Codec class, pointer-level codec calls on the CPU backend, and the
// scalar conversion hooks the tests compare against ml_dtypes / NumPy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings.h"
#include "kernel_backend_calls.h"
#include "ccompress/codec.h"
#include "codecs/registry.h"
#include "codecs/rotation_blocks.h"
#include "collectives/message_header.h"
#include "ccompress/error.h"
#include "codecs/float_convert.h"
#include "codecs/fp8/fp8.h"
#include "cpu/cpu_backend.h"

namespace py = pybind11;

namespace ccompress::py_bindings {
namespace {

// "raw", "fp8_e4m3", "fp8_e5m2", "taco", ...: as the codec's family names it.
std::string kind_name(const Codec& c) { return codec_family(c).kind_name(c); }

const Codec& require_bound(const Codec& c) {
  CC_CHECK(!c.unbound, "codec 'none' is unbound: bind it to a dtype first (codec.bind(dtype))");
  return c;
}

std::string codec_repr(const Codec& c) {
  std::string s = "Codec('" + c.name() + "'";
  // A bound `none` keeps its name but no longer means "any dtype": show what it carries.
  if (c.kind == CodecKind::Raw && !c.unbound && c.raw_dtype == DType::Float32) s += ", float32";
  return s + ")";
}

// The conversion hooks take C-contiguous arrays of exactly the given dtype (no silent cast,
// which would round before the function under test does) and keep the input's shape.
template <class In>
using Exact = py::array_t<In, py::array::c_style>;

template <class Out, class In, class Fn>
py::array_t<Out> map_array(const Exact<In>& a, Fn fn) {
  py::array_t<Out> out(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
  const In* src = a.data();
  Out* dst = out.mutable_data();
  py::ssize_t n = a.size();
  {
    py::gil_scoped_release nogil;
    for (py::ssize_t i = 0; i < n; ++i) dst[i] = fn(src[i]);
  }
  return out;
}

bool is_e4m3(const std::string& fmt) {
  CC_CHECK(fmt == "e4m3" || fmt == "e5m2",
           "fp8 format must be 'e4m3' or 'e5m2', got '" << fmt << "'");
  return fmt == "e4m3";
}

void bind_codec_class(py::module_& m) {
  py::class_<Codec>(m, "Codec", "A parsed codec spec (a stateless wire format; see codec.h).")
      .def_static("parse", &Codec::parse, py::arg("spec"))
      .def_property_readonly("name", &Codec::name)
      .def(
          "bind",
          [](const Codec& c, const std::string& dtype) { return c.bind(parse_dtype(dtype)); },
          py::arg("dtype"), "This codec with 'none' resolved to the input dtype.")
      .def("wire_bytes", &Codec::wire_bytes, py::arg("n"))
      .def(
          "lossy",
          [](const Codec& c, const std::string& dtype) { return c.lossy(parse_dtype(dtype)); },
          py::arg("dtype"))
      .def_readonly("group", &Codec::group)
      .def_readonly("rotation", &Codec::rotation)
      .def_readonly("scale_bits", &Codec::scale_bits)
      .def_readonly("stochastic", &Codec::stochastic)
      .def_readonly("random_signs", &Codec::random_signs)
      .def_property_readonly("kind", [](const Codec& c) { return kind_name(c); })
      .def_readonly("unbound", &Codec::unbound)
      .def_property_readonly("raw_dtype",
                             [](const Codec& c) -> py::object {
                               if (c.kind != CodecKind::Raw || c.unbound) return py::none();
                               return py::str(dtype_name(c.raw_dtype));
                             },
                             "Wire dtype of a bound raw codec; None for FP8 and unbound 'none'.")
      .def_property_readonly("id", &Codec::id)
      .def_property_readonly("align", &Codec::align)
      .def_readonly("run_block", &Codec::run_block,
                    "Elements per run piece (nvfp4, hint4: one fp32 scale each); 0: one piece.")
      .def(
          "error_model",
          [](const Codec& c) {
            const ErrorModel e = codec_error_model(c);
            py::dict d;
            d["u"] = e.u;
            d["v"] = e.v;
            d["floor"] = e.floor;
            d["cast"] = e.cast;
            d["groups_tile_blocks"] = e.groups_tile_blocks;
            return d;
          },
          "What one quantization may err by, from the family's registry entry (bound codecs): "
          "u, v, floor, cast, groups_tile_blocks (codecs/registry.h, ErrorModel).")
      .def(
          "rotation_blocks",
          [](const Codec& c, int64_t n) {
            py::list out;
            if (c.rotation <= 0) {
              if (n > 0) out.append(py::make_tuple(int64_t(0), n));
              return out;
            }
            const int64_t count = codecs::rot_block_count(n, c.rotation);
            for (int64_t b = 0; b < count; ++b) {
              const codecs::RotBlock r = codecs::rot_block(n, c.rotation, b);
              out.append(py::make_tuple(r.off, int64_t(r.len)));
            }
            return out;
          },
          py::arg("n"),
          "The (offset, length) rotation blocks of a run of n elements "
          "(codecs/rotation_blocks.h); one block of n without rotation.")
      .def("__repr__", &codec_repr)
      .def("__eq__",
           [](const Codec& a, py::object b) -> py::object {
             if (!py::isinstance<Codec>(b))
               return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             return py::bool_(a.id() == b.cast<const Codec&>().id());
           })
      .def("__hash__", [](const Codec& c) { return py::hash(py::int_(c.id())); })
      .def(py::pickle(
          // By canonical name, plus the dtype a `none` was bound to (its name stays "none").
          [](const Codec& c) {
            bool bound_none = c.kind == CodecKind::Raw && !c.unbound;
            return py::make_tuple(c.name(), bound_none ? dtype_name(c.raw_dtype) : "");
          },
          [](const py::tuple& t) {
            Codec c = Codec::parse(t[0].cast<std::string>());
            std::string dtype = t[1].cast<std::string>();
            return dtype.empty() ? c : c.bind(parse_dtype(dtype));
          }));
}

// The KernelBackend calls on the CPU backend: codecs must come bound, the GIL is released.
struct CpuCalls {
  Codec codec(const Codec& c, DType) const { return require_bound(c); }
  template <class Fn>
  void run(Fn fn) const {
    py::gil_scoped_release nogil;
    fn(static_cast<KernelBackend&>(cpu_backend()));
  }
};

void bind_pointer_calls(py::module_& m) { def_kernel_backend_calls<>(m, CpuCalls{}); }

// The 16-byte header every collective message starts with (collectives/message_header.h),
// for Codec.encode_message / decode_message and the fuzz targets.
void bind_message_header(py::module_& m) {
  m.attr("MESSAGE_HEADER_BYTES") = kMessageHeaderBytes;
  m.def(
      "message_header",
      [](const Codec& c, const std::string& dtype, int64_t n, uint64_t call) {
        char b[kMessageHeaderBytes];
        write_message_header(make_message_header(require_bound(c), parse_dtype(dtype), n, call), b);
        return py::bytes(b, sizeof b);
      },
      py::arg("codec"), py::arg("dtype"), py::arg("n"), py::arg("call"),
      "The header a collective sends in front of n encoded elements in call `call`.");
  m.def(
      "parse_message_header",
      [](const py::bytes& raw) {
        std::string s = raw;
        CC_CHECK_AS(MessageError, s.size() == size_t(kMessageHeaderBytes),
                    "malformed message: a header is " << kMessageHeaderBytes << " bytes, got "
                                                      << s.size());
        MessageHeader h = read_message_header(s.data());
        py::dict d;
        d["magic"] = h.magic;
        d["version"] = h.version;
        d["dtype"] = h.dtype;
        d["codec_id"] = h.codec_id;
        d["count"] = h.count;
        d["call"] = h.call;
        return d;
      },
      py::arg("header"));
  m.def(
      "check_message_header",
      [](const py::bytes& got, const py::bytes& want, int peer) {
        std::string g = got, w = want;
        CC_CHECK_AS(MessageError,
                    g.size() == size_t(kMessageHeaderBytes) && w.size() == g.size(),
                    "malformed message: a header is " << kMessageHeaderBytes << " bytes, got "
                                                      << g.size());
        check_message_header(read_message_header(g.data()), read_message_header(w.data()), peer);
      },
      py::arg("got"), py::arg("want"), py::arg("peer") = -1,
      "Raises MessageError naming the first field of `got` that differs from `want`.");
}

void bind_conversion_hooks(py::module_& m) {
  using namespace codecs;
  m.def("_fp8_from_float", [](const Exact<float>& a, const std::string& fmt) {
    return is_e4m3(fmt) ? map_array<uint8_t>(a, fp8_from_float<Fp8E4M3>)
                        : map_array<uint8_t>(a, fp8_from_float<Fp8E5M2>);
  });
  m.def("_fp8_to_float", [](const Exact<uint8_t>& a, const std::string& fmt) {
    return is_e4m3(fmt) ? map_array<float>(a, fp8_to_float<Fp8E4M3>)
                        : map_array<float>(a, fp8_to_float<Fp8E5M2>);
  });
  m.def("_bf16_from_float",
        [](const Exact<float>& a) { return map_array<uint16_t>(a, bf16_from_float); });
  m.def("_bf16_to_float",
        [](const Exact<uint16_t>& a) { return map_array<float>(a, bf16_to_float); });
  m.def("_f16_from_float",
        [](const Exact<float>& a) { return map_array<uint16_t>(a, f16_from_float); });
  m.def("_f16_to_float",
        [](const Exact<uint16_t>& a) { return map_array<float>(a, f16_to_float); });
}

}  // namespace

void bind_codec_math(py::module_& m) {
  bind_codec_class(m);
  bind_pointer_calls(m);
  bind_message_header(m);
  bind_conversion_hooks(m);
}

}  // namespace ccompress::py_bindings
