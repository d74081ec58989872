#include "ccompress/common.h"

#include "ccompress/error.h"

#include <cstdlib>
#include <cstring>

namespace ccompress {

namespace detail {

bool debug_messages() {
  static const bool on = [] {
    const char* v = std::getenv("CCOMPRESS_DEBUG");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return on;
}

namespace {

// __FILE__ is absolute in a CMake build: keep the part from the repository's top folders on
// (the last "cuda/" or "bindings/" component), so no machine's path reaches a message.
const char* repo_path(const char* file) {
  const char* best = file;
  for (const char* top : {"/cuda/", "/bindings/"}) {
    for (const char* p = std::strstr(file, top); p != nullptr; p = std::strstr(p + 1, top))
      if (p + 1 > best) best = p + 1;
  }
  return best;
}

}  // namespace

std::string with_site(const std::string& msg, const SourceSite& site) {
  if (!debug_messages()) return msg;
  std::string s = msg + " [" + site.expr + " at " + repo_path(site.file) + ":" +
                  std::to_string(site.line) + "]";
  return s;
}

}  // namespace detail

const char* version() { return "0.1.0"; }

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::BFloat16: return "bfloat16";
    case DType::Float16: return "float16";
  }
  return "?";
}

DType parse_dtype(const std::string& s) {
  if (s == "float32") return DType::Float32;
  if (s == "bfloat16") return DType::BFloat16;
  if (s == "float16") return DType::Float16;
  CC_CHECK(false, "got " << s << "; ccompress reduces float32, bfloat16 and float16 — cast first");
}

const char* reduce_op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "avg"; }

ReduceOp parse_reduce_op(const std::string& s) {
  if (s == "sum") return ReduceOp::Sum;
  if (s == "avg" || s == "mean") return ReduceOp::Avg;
  CC_CHECK(false, "unknown op '" << s << "'; use 'sum' or 'avg'");
}

const char* algo_name(Algo a) {
  switch (a) {
    case Algo::Auto: return "auto";
    case Algo::Ring: return "ring";
    case Algo::TwoShot: return "two_shot";
    case Algo::Tree: return "tree";
    case Algo::OneShot: return "one_shot";
    case Algo::Hier: return "hier";
  }
  return "?";
}

Algo parse_algo(const std::string& s) {
  for (Algo a : {Algo::Auto, Algo::Ring, Algo::TwoShot, Algo::Tree, Algo::OneShot, Algo::Hier})
    if (s == algo_name(a)) return a;
  CC_CHECK(false,
           "unknown algo '" << s << "'; use one of auto, ring, two_shot, tree, one_shot, hier");
}

}  // namespace ccompress
