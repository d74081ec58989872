// The decode layer that the CPU handlers (jax_ffi.cc) and the CUDA handlers
// (jax_ffi_cuda.cc) share: XLA's buffers, attributes and residuals into a Call of
// jax_ffi_registry.h, the handlers' signature, and an error into XLA's reply.
#pragma once

#include <cstddef>
#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include "jax_ffi_registry.h"
#include "xla/ffi/api/ffi.h"

namespace ccompress::jax_ffi {

namespace ffi = xla::ffi;

inline bool to_dtype(ffi::DataType t, DType* out) {
  switch (t) {
    case ffi::DataType::F32: *out = DType::Float32; return true;
    case ffi::DataType::BF16: *out = DType::BFloat16; return true;
    case ffi::DataType::F16: *out = DType::Float16; return true;
    default: return false;
  }
}

/// The Call of one handler invocation. Error-feedback residuals: (worker, server) in,
/// updated copies out, where @p copy (the backend's copy: memcpy, or an asynchronous
/// device copy on XLA's stream) copies an input into its output when XLA did not alias
/// them; a size-0 buffer is a residual the call does not keep. A failed check is left in
/// Call::invalid for run_call to raise.
template <typename Copy>
Call decode(Kind kind, ffi::AnyBuffer x, ffi::AnyBuffer out, ffi::RemainingArgs residuals,
            ffi::RemainingRets residuals_out, std::string_view codec, std::string_view algo,
            std::string_view op, Copy copy) {
  Call call;
  call.kind = kind;
  call.in = x.untyped_data();
  call.out = out.untyped_data();
  call.n = int64_t(x.element_count());
  call.out_elems = int64_t(out.element_count());
  call.codec = std::string(codec);
  call.algo = std::string(algo);
  call.op = std::string(op);
  if (!to_dtype(x.element_type(), &call.dtype)) {
    call.invalid = std::string("ccompress.jax.") + kind_name(kind) +
                   ": x has an element type the codecs do not take; ccompress reduces "
                   "float32, bfloat16 and float16: cast first";
    return call;
  }
  if (out.element_type() != x.element_type()) {
    call.invalid = "ccompress.jax: the output's element type differs from the input's";
    return call;
  }
  if (residuals.size() != 0 && residuals.size() != 2) {
    call.invalid = "ccompress.jax: a collective takes no residuals or two, got " +
                   std::to_string(residuals.size());
    return call;
  }
  float* res[2] = {nullptr, nullptr};
  for (size_t i = 0; i < residuals.size(); ++i) {
    auto in = residuals.get<ffi::AnyBuffer>(i);
    auto upd = residuals_out.get<ffi::AnyBuffer>(i);
    if (!in.has_value() || !upd.has_value()) {
      call.invalid = "ccompress.jax: residual " + std::to_string(i) + " is not a buffer";
      return call;
    }
    if (in->element_type() != ffi::DataType::F32 ||
        upd.value()->element_type() != ffi::DataType::F32 ||
        in->element_count() != upd.value()->element_count()) {
      call.invalid = "ccompress.jax: error-feedback residuals are float32 arrays";
      return call;
    }
    if (in->element_count() == 0) continue;
    void* dst = upd.value()->untyped_data();
    if (dst != in->untyped_data()) copy(dst, in->untyped_data(), in->size_bytes());
    res[i] = static_cast<float*>(dst);
  }
  call.worker = res[0];
  call.server = res[1];
  return call;
}

/// An error as XLA's reply: "[ccompress.<ErrorType>] message".
inline ffi::Error to_ffi(const std::exception& ex) {
  return ffi::Error(is_argument_error(ex) ? ffi::ErrorCode::kInvalidArgument
                                          : ffi::ErrorCode::kInternal,
                    tagged_message(ex));
}

/// The handlers' arguments after what @p b binds first (nothing on the CPU; XLA's stream on
/// CUDA): the ordering token, the input and the residuals; the token, the output and the
/// updated residuals; the attributes of ccompress.jax's lowering.
template <typename Binding>
inline auto bind_collective(Binding b) {
  return std::move(b)
      .template Arg<ffi::Token>()
      .template Arg<ffi::AnyBuffer>()
      .RemainingArgs()
      .template Ret<ffi::Token>()
      .template Ret<ffi::AnyBuffer>()
      .RemainingRets()
      .template Attr<int64_t>("comm")
      .template Attr<std::string_view>("codec")
      .template Attr<std::string_view>("algo")
      .template Attr<std::string_view>("op");
}

}  // namespace ccompress::jax_ffi
