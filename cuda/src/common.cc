#include "ccompress/common.h"

#include "ccompress/error.h"

namespace ccompress {

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
