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

/// Where a check is written: the checked expression and its file:line. Messages carry it
/// only in debug mode (env CCOMPRESS_DEBUG=1), as "[expr at cuda/src/x.cc:12]" with the path
/// relative to the repository; a user reads the message alone, without C++ or source paths.
struct SourceSite {
  const char* expr;
  const char* file;
  int line;
};

namespace detail {
/// Whether messages end in their check's site: env CCOMPRESS_DEBUG set to anything but "" or
/// "0" (read once).
CC_API bool debug_messages();
/// @p msg, followed in debug mode by " [expr at path:line]" (path relative to the repository).
CC_API std::string with_site(const std::string& msg, const SourceSite& site);

template <typename E>
[[noreturn]] inline void throw_at(const SourceSite& site, const std::string& msg) {
  throw E(with_site(msg, site));
}
}  // namespace detail

}  // namespace ccompress

/// The site of the code where it is written (a check's call site, never a helper's).
#define CC_HERE(expr) (::ccompress::SourceSite{(expr), __FILE__, __LINE__})

/// Throws @p EXC (a ccompress error type) with a streamed message when @p cond is false.
/// Usage: CC_CHECK_AS(InvalidArgument, n >= 0, "count " << n << " is negative");
#define CC_CHECK_AS(EXC, cond, msg)                                                     \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::ostringstream cc_os_;                                                        \
      cc_os_ << msg;                                                                    \
      ::ccompress::detail::throw_at<::ccompress::EXC>(CC_HERE(#cond), cc_os_.str());    \
    }                                                                                   \
  } while (0)

/// Argument check: throws InvalidArgument.
#define CC_CHECK(cond, msg) CC_CHECK_AS(InvalidArgument, cond, msg)

/// A checked call into a C library whose calls return a status: evaluates @p call once and
/// hands its status to `checker(status, what, site)`, which throws that library's error type
/// naming @p what (a short description: "cudaMalloc of collective scratch") when the status
/// is not success. The site is the macro's own line, so a message in debug mode names the
/// code that made the call, not the checker. Each library gets a one-line macro over it:
#define CC_CHECK_CALL(checker, call, what) checker((call), (what), CC_HERE(#call))

/// A CUDA runtime call (cudaError_t); throws CudaError. The checker is
/// ccompress::cuda::check_cuda_status (kernels/cuda_backend.h, in the CUDA module).
#define CC_CUDA_CHECK(call, what) CC_CHECK_CALL(::ccompress::cuda::check_cuda_status, call, what)

/// An MPI call (int status) inside an MpiTransport member; throws MpiError (MessageError for
/// a truncated receive). The checker is MpiTransport::check (transport/mpi_transport.h).
#define CC_MPI_CHECK(call, what) CC_CHECK_CALL(check, call, what)
