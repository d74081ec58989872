/// @file error.h
/// @brief The ccompress exception family and the CC_CHECK macros that throw it.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

#include "ccompress/common.h"

namespace ccompress {

/// Base of every error the library throws.
class CC_API Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// A caller passed something the library cannot use (dtype, size, spec string, buffer).
class CC_API InvalidArgument : public Error {
 public:
  using Error::Error;
};
/// The request is valid but not available in this build or on this machine.
class CC_API Unsupported : public Error {
 public:
  using Error::Error;
};
/// Ranks disagree about a collective (count, dtype, codec, algo, op); seen by every rank alike.
class CC_API MismatchError : public Error {
 public:
  using Error::Error;
};
/// A received message is malformed: its header (magic, version, dtype, codec, count, call)
/// or its size is not what this rank's plan expects. Seen by the receiving rank only, so the
/// communicator is unusable afterwards.
class CC_API MessageError : public Error {
 public:
  using Error::Error;
};
/// A peer did not answer within the communicator's timeout.
class CC_API TimeoutError : public Error {
 public:
  using Error::Error;
};
/// A CUDA runtime call failed.
class CC_API CudaError : public Error {
 public:
  using Error::Error;
};
/// An NCCL call failed.
class CC_API NcclError : public Error {
 public:
  using Error::Error;
};
/// An MPI call failed.
class CC_API MpiError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename E>
[[noreturn]] inline void throw_error(const char* expr, const char* file, int line,
                                     const std::string& msg) {
  std::ostringstream os;
  os << msg << " [" << expr << " at " << file << ":" << line << "]";
  throw E(os.str());
}
}  // namespace detail

}  // namespace ccompress

/// Throws @p EXC (a ccompress error type) with a streamed message when @p cond is false.
/// Usage: CC_CHECK_AS(InvalidArgument, n >= 0, "count " << n << " is negative");
#define CC_CHECK_AS(EXC, cond, msg)                                                     \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::ostringstream cc_os_;                                                        \
      cc_os_ << msg;                                                                    \
      ::ccompress::detail::throw_error<::ccompress::EXC>(#cond, __FILE__, __LINE__,    \
                                                         cc_os_.str());                 \
    }                                                                                   \
  } while (0)

/// Argument check: throws InvalidArgument.
#define CC_CHECK(cond, msg) CC_CHECK_AS(InvalidArgument, cond, msg)
