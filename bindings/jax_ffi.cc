// ccompress._jax_ffi: the collectives as XLA FFI handlers, for ccompress.jax.
//
// A compiled JAX program calls these handlers directly (no Python per call). The
// communicator reaches a handler as the integer attribute `comm`, an id into the registry
// below, never as a pointer baked into the executable: ids are never reused, and an id that
// was released (its communicator closed) makes the call fail with a readable error instead
// of touching freed memory.
//
// Every handler takes XLA's ordering token first and returns a new one (the ordered effect
// of ccompress.jax), then the input, then optionally the two error-feedback residuals;
// results are the token, the output and the updated residuals. Errors come back to JAX as
// "[ccompress.<ErrorType>] message", which ccompress.jax turns into that error type.
#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>

#include "ccompress/collectives.h"
#include "ccompress/error.h"
#include "cpu/cpu_backend.h"
#include "error_translator.h"
#include "xla/ffi/api/ffi.h"

namespace py = pybind11;
namespace ffi = xla::ffi;

namespace ccompress::jax_ffi {

namespace {

/// One registered communicator: its transport, the options fixed when it was made, and
/// the step counter of its JAX calls (stochastic rounding).
struct Entry {
  std::shared_ptr<Transport> transport;
  CollectiveOptions options;
  uint64_t step = 0;
  std::string broken;  // set by an error that leaves the transport out of step
  std::mutex mu;       // one collective at a time on a transport
};

std::mutex g_mu;
std::unordered_map<int64_t, std::shared_ptr<Entry>> g_registry;
int64_t g_next_id = 1;

std::shared_ptr<Entry> lookup(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_registry.find(id);
  if (it == g_registry.end()) {
    throw InvalidArgument(
        "ccompress.jax: communicator id " + std::to_string(id) +
        " is not registered (its communicator was closed): this compiled program still names "
        "it; make a new communicator and trace again (a new jax.jit, or jax.clear_caches())");
  }
  return it->second;
}

enum class Kind { AllReduce, ReduceScatter, AllGather };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce: return "allreduce";
    case Kind::ReduceScatter: return "reduce_scatter";
    default: return "allgather";
  }
}

bool to_dtype(ffi::DataType t, DType* out) {
  switch (t) {
    case ffi::DataType::F32: *out = DType::Float32; return true;
    case ffi::DataType::BF16: *out = DType::BFloat16; return true;
    case ffi::DataType::F16: *out = DType::Float16; return true;
    default: return false;
  }
}

/// This rank cannot run the call its peers may be running: it takes part in the call check
/// with a description no real call has (an empty all-gather of slice 1, as
/// Communicator._refuse does), so that peers raise MismatchError instead of waiting.
void refuse(Entry& e) {
  if (e.transport->size() == 1) return;
  CollectiveOptions o = e.options;
  o.slice_elems = 1;
  o.algo = Algo::Auto;
  float dummy[1] = {0.0f};
  try {
    allgather(*e.transport, cpu_backend(), dummy, dummy, 0, DType::Float32, Codec::parse("none"),
              o);
  } catch (const MismatchError&) {
    ++e.step;  // a peer took its step in its real call
  } catch (const Error&) {
  }
}

const char* error_type(const std::exception& ex) {
  if (dynamic_cast<const InvalidArgument*>(&ex)) return "InvalidArgument";
  if (dynamic_cast<const Unsupported*>(&ex)) return "Unsupported";
  if (dynamic_cast<const MismatchError*>(&ex)) return "MismatchError";
  if (dynamic_cast<const MessageError*>(&ex)) return "MessageError";
  if (dynamic_cast<const TimeoutError*>(&ex)) return "CollectiveTimeout";
  if (dynamic_cast<const MpiError*>(&ex)) return "MpiError";
  if (dynamic_cast<const Error*>(&ex)) return "CCompressError";
  return "CCompressError";
}

ffi::Error to_ffi(const std::exception& ex) {
  const char* type = error_type(ex);
  std::string msg = std::string("[ccompress.") + type + "] " + ex.what();
  const std::string what = ex.what();
  if (dynamic_cast<const MismatchError*>(&ex) &&
      what.find("allgather(count=0,") != std::string::npos &&
      what.find("slice_elems=1)") != std::string::npos) {
    msg += "\n(an empty allgather is how a rank whose arguments failed a check takes part: that "
           "rank raised InvalidArgument for this call)";
  }
  bool arg = std::strcmp(type, "InvalidArgument") == 0 || std::strcmp(type, "MismatchError") == 0;
  return ffi::Error(arg ? ffi::ErrorCode::kInvalidArgument : ffi::ErrorCode::kInternal, msg);
}

template <Kind kind>
ffi::Error collective(ffi::Token, ffi::AnyBuffer x, ffi::RemainingArgs residuals,
                      ffi::Result<ffi::Token>, ffi::Result<ffi::AnyBuffer> out,
                      ffi::RemainingRets residuals_out, int64_t comm, std::string_view codec,
                      std::string_view algo, std::string_view op) {
  std::shared_ptr<Entry> e;
  std::unique_lock<std::mutex> lock;
  bool started = false;  // whether the collective itself ran (its own checks refuse together)
  try {
    e = lookup(comm);
    lock = std::unique_lock<std::mutex>(e->mu);
    if (!e->broken.empty()) {
      throw Error("ccompress.jax: this communicator is unusable: " + e->broken +
                  "; make a new one (all ranks)");
    }
    DType dtype;
    if (!to_dtype(x.element_type(), &dtype)) {
      throw InvalidArgument(std::string("ccompress.jax.") + kind_name(kind) +
                            ": x has an element type the codecs do not take; ccompress "
                            "reduces float32, bfloat16 and float16: cast first");
    }
    const int64_t n = int64_t(x.element_count());
    const int size = e->transport->size(), rank = e->transport->rank();
    int64_t n_out = n;
    if (kind == Kind::AllGather) n_out = n * size;
    if (kind == Kind::ReduceScatter) {
      auto r = chunk_range(n, size, rank);
      n_out = r.second - r.first;
    }
    CC_CHECK(out->element_type() == x.element_type() && int64_t(out->element_count()) == n_out,
             "ccompress.jax: the output holds " << out->element_count() << " elements, the "
             << kind_name(kind) << " of " << n << " writes " << n_out);
    CollectiveOptions o = e->options;
    if (!algo.empty()) {
      o.algo = parse_algo(std::string(algo));
      if (o.algo != Algo::Hier) o.ranks_per_node = 0;
    } else {
      o.ranks_per_node = 0;
    }
    if (o.algo == Algo::Hier) {
      CC_CHECK(o.ranks_per_node >= 1,
               "algo='hier' needs the communicator's ranks_per_node (pass it when making the "
               "communicator)");
    }
    if (!op.empty()) o.op = parse_reduce_op(std::string(op));
    o.step = e->step++;
    // Error feedback: (worker, server) residuals in, updated copies out (a size-0 buffer is
    // a residual the call does not keep).
    CC_CHECK(residuals.size() == 0 || residuals.size() == 2,
             "ccompress.jax: a collective takes no residuals or two, got " << residuals.size());
    float* res[2] = {nullptr, nullptr};
    for (size_t i = 0; i < residuals.size(); ++i) {
      auto in = residuals.get<ffi::AnyBuffer>(i);
      auto upd = residuals_out.get<ffi::AnyBuffer>(i);
      CC_CHECK(in.has_value() && upd.has_value(), "ccompress.jax: residual " << i
                                                   << " is not a buffer");
      CC_CHECK(in->element_type() == ffi::DataType::F32 &&
                   upd.value()->element_type() == ffi::DataType::F32 &&
                   in->element_count() == upd.value()->element_count(),
               "ccompress.jax: error-feedback residuals are float32 arrays");
      if (in->element_count() == 0) continue;
      void* dst = upd.value()->untyped_data();
      if (dst != in->untyped_data()) std::memcpy(dst, in->untyped_data(), in->size_bytes());
      res[i] = static_cast<float*>(dst);
    }
    o.feedback.worker = res[0];
    o.feedback.server = res[1];
    const Codec c = Codec::parse(std::string(codec));
    started = true;
    try {
      if (kind == Kind::AllReduce) {
        allreduce(*e->transport, cpu_backend(), x.untyped_data(), out->untyped_data(), n, dtype,
                  c, o);
      } else if (kind == Kind::ReduceScatter) {
        reduce_scatter(*e->transport, cpu_backend(), x.untyped_data(), out->untyped_data(), n,
                       dtype, c, o);
      } else {
        allgather(*e->transport, cpu_backend(), x.untyped_data(), out->untyped_data(), n, dtype,
                  c, o);
      }
    } catch (const MismatchError&) {
      throw;  // every rank stopped at the same point: the group is still in step
    } catch (const InvalidArgument&) {
      throw;  // refused before any data moved
    } catch (const Error& ex) {
      e->broken = std::string(error_type(ex)) + " in an earlier collective (" + ex.what() + ")";
      throw;
    }
    return ffi::Error::Success();
  } catch (const std::exception& ex) {
    // A check of this rank's arguments failed before the collective: its peers, whose
    // checks may have passed, learn of it in the call check instead of waiting.
    if (e && !started && e->broken.empty()) refuse(*e);
    return to_ffi(ex);
  }
}

template <Kind kind>
constexpr auto bind() {
  return ffi::Ffi::Bind()
      .Arg<ffi::Token>()
      .Arg<ffi::AnyBuffer>()
      .RemainingArgs()
      .Ret<ffi::Token>()
      .Ret<ffi::AnyBuffer>()
      .RemainingRets()
      .Attr<int64_t>("comm")
      .Attr<std::string_view>("codec")
      .Attr<std::string_view>("algo")
      .Attr<std::string_view>("op");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(AllReduceCpu, collective<Kind::AllReduce>, bind<Kind::AllReduce>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(ReduceScatterCpu, collective<Kind::ReduceScatter>,
                              bind<Kind::ReduceScatter>());
XLA_FFI_DEFINE_HANDLER_SYMBOL(AllGatherCpu, collective<Kind::AllGather>, bind<Kind::AllGather>());

}  // namespace ccompress::jax_ffi

namespace {

template <typename T>
py::capsule handler_capsule(T* fn) {
  return py::capsule(reinterpret_cast<void*>(fn));
}

}  // namespace

PYBIND11_MODULE(_jax_ffi, m) {
  using namespace ccompress;
  using namespace ccompress::jax_ffi;
  m.doc() = "ccompress collectives as XLA FFI handlers (for ccompress.jax)";
  py::module_::import("ccompress._core");  // registers the Transport base class
  py_bindings::register_error_translator();
  py::dict cpu;
  cpu["allreduce"] = handler_capsule(AllReduceCpu);
  cpu["reduce_scatter"] = handler_capsule(ReduceScatterCpu);
  cpu["allgather"] = handler_capsule(AllGatherCpu);
  m.attr("CPU_HANDLERS") = cpu;
  m.def(
      "register",
      [](std::shared_ptr<Transport> t, double timeout_s, int64_t slice_elems, uint64_t seed,
         int ranks_per_node) {
        CC_CHECK(t != nullptr, "register needs a transport");
        auto e = std::make_shared<Entry>();
        e->transport = std::move(t);
        e->options.timeout_s = timeout_s;
        e->options.slice_elems = slice_elems;
        e->options.seed = seed;
        e->options.ranks_per_node = ranks_per_node;
        std::lock_guard<std::mutex> lock(g_mu);
        int64_t id = g_next_id++;
        g_registry.emplace(id, std::move(e));
        return id;
      },
      py::arg("transport"), py::arg("timeout_s"), py::arg("slice_elems"), py::arg("seed"),
      py::arg("ranks_per_node"),
      "Registers a transport with a communicator's options; returns its id (never reused).");
  m.def(
      "unregister",
      [](int64_t id) {
        std::lock_guard<std::mutex> lock(g_mu);
        return g_registry.erase(id) == 1;
      },
      py::arg("id"),
      "Releases an id: a compiled program that still names it fails with InvalidArgument.");
  m.def(
      "registered",
      []() {
        std::lock_guard<std::mutex> lock(g_mu);
        return g_registry.size();
      },
      "How many communicators are registered (a retrace registers none).");
  m.def(
      "steps",
      [](int64_t id) {
        std::shared_ptr<Entry> e = lookup(id);
        std::lock_guard<std::mutex> lock(e->mu);
        return e->step;
      },
      py::arg("id"), "Collectives run through this id so far (its step counter).");
}
