// The KernelBackend's pointer-level calls for Python, written once: _core binds them as module
// functions on the CPU backend, _cuda as methods of its Backend class (one rank's CUDA
// backend). Buffers are addresses (Python ints) in the backend's memory; codecs are _core's
// Codec objects (one pybind11 type shared by both modules).
//
// def_kernel_backend_calls<Self...>(target, policy) defines encode, decode, decode_accumulate,
// load_accumulate, decode_reduce_encode and finalize on @p target (a py::module_ with no Self,
// or a py::class_ with Self its C++ type, the calls' first argument). The policy says how
// those differ between the two modules:
//   Codec codec(const Codec& c, DType t)    the codec a call runs (bound to t, or checked);
//   void run(Self&... self, Fn fn)          calls fn(KernelBackend&) for self (the device
//                                           guard, the GIL release).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "ccompress/codec.h"
#include "ccompress/kernel_backend.h"

namespace ccompress::py_bindings {

inline void* addr(uintptr_t p) { return reinterpret_cast<void*>(p); }

template <class... Self, class Target, class Policy>
void def_kernel_backend_calls(Target& t, Policy policy) {
  namespace py = pybind11;
  t.def(
      "encode",
      [policy](Self&... self, const Codec& c, uintptr_t src, const std::string& src_dtype,
               int64_t n, float divisor, uintptr_t dst, uint64_t seed, uint64_t step,
               int32_t rank, int64_t index) {
        const DType dt = parse_dtype(src_dtype);
        const Codec b = policy.codec(c, dt);
        policy.run(self..., [&](KernelBackend& k) {
          k.encode(addr(src), dt, n, b, divisor, EncodeContext{seed, step, rank, index},
                   addr(dst));
        });
      },
      py::arg("codec"), py::arg("src_ptr"), py::arg("src_dtype"), py::arg("n"),
      py::arg("divisor"), py::arg("dst_ptr"), py::arg("seed") = 0, py::arg("step") = 0,
      py::arg("rank") = 0, py::arg("index") = 0,
      "dst <- encode(src / divisor); (seed, step, rank, index) place the run for stochastic "
      "rounding.");
  t.def(
      "decode",
      [policy](Self&... self, const Codec& c, uintptr_t src, int64_t n, uintptr_t out,
               const std::string& out_dtype) {
        const DType dt = parse_dtype(out_dtype);
        const Codec b = policy.codec(c, dt);
        policy.run(self..., [&](KernelBackend& k) { k.decode(addr(src), n, b, addr(out), dt); });
      },
      py::arg("codec"), py::arg("src_ptr"), py::arg("n"), py::arg("out_ptr"),
      py::arg("out_dtype"), "out <- cast(decode(src)) to out_dtype.");
  t.def(
      "decode_accumulate",
      [policy](Self&... self, const Codec& c, uintptr_t src, int64_t n, uintptr_t acc,
               bool assign) {
        const Codec b = policy.codec(c, DType::Float32);
        policy.run(self..., [&](KernelBackend& k) {
          k.decode_accumulate(addr(src), n, b, static_cast<float*>(addr(acc)), assign);
        });
      },
      py::arg("codec"), py::arg("src_ptr"), py::arg("n"), py::arg("acc_ptr"), py::arg("assign"),
      "acc <- decode(src) when assign, else acc += decode(src) (float32 accumulators).");
  t.def(
      "load_accumulate",
      [policy](Self&... self, uintptr_t src, const std::string& src_dtype, int64_t n,
               uintptr_t acc, bool assign) {
        const DType dt = parse_dtype(src_dtype);
        policy.run(self..., [&](KernelBackend& k) {
          k.load_accumulate(addr(src), dt, n, static_cast<float*>(addr(acc)), assign);
        });
      },
      py::arg("src_ptr"), py::arg("src_dtype"), py::arg("n"), py::arg("acc_ptr"),
      py::arg("assign"), "acc <- float(src) when assign, else acc += float(src).");
  t.def(
      "decode_reduce_encode",
      [policy](Self&... self, const Codec& c, uintptr_t src, uintptr_t x,
               const std::string& x_dtype, int64_t n, float divisor, uintptr_t dst,
               uint64_t seed, uint64_t step, int32_t rank, int64_t index) {
        const DType dt = parse_dtype(x_dtype);
        const Codec b = policy.codec(c, dt);
        policy.run(self..., [&](KernelBackend& k) {
          k.decode_reduce_encode(addr(src), addr(x), dt, n, b, divisor,
                                 EncodeContext{seed, step, rank, index}, addr(dst));
        });
      },
      py::arg("codec"), py::arg("src_ptr"), py::arg("x_ptr"), py::arg("x_dtype"), py::arg("n"),
      py::arg("divisor"), py::arg("dst_ptr"), py::arg("seed") = 0, py::arg("step") = 0,
      py::arg("rank") = 0, py::arg("index") = 0,
      "The fused ring hop: dst <- encode((decode(src) + float(x)) / divisor).");
  t.def(
      "finalize",
      [policy](Self&... self, uintptr_t acc, int64_t n, float divisor, uintptr_t out,
               const std::string& out_dtype) {
        const DType dt = parse_dtype(out_dtype);
        policy.run(self..., [&](KernelBackend& k) {
          k.finalize(static_cast<const float*>(addr(acc)), n, divisor, addr(out), dt);
        });
      },
      py::arg("acc_ptr"), py::arg("n"), py::arg("divisor"), py::arg("out_ptr"),
      py::arg("out_dtype"), "out <- cast(acc / divisor) to out_dtype.");
}

}  // namespace ccompress::py_bindings
