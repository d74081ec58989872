// The communicators of ccompress.jax's compiled programs, by id, and the one call path that
// every XLA FFI handler (CPU: ccompress._jax_ffi; CUDA: ccompress._cuda) runs a collective
// through.
//
// A compiled program names its communicator by an integer id (an attribute of its custom
// call), never by an address: ids are never reused, and an id that was released (its
// communicator closed) makes the call fail with a readable error instead of touching freed
// memory. The registry lives in the core library (libccompress), so the host handlers and
// the device handlers of one process share it: a host communicator and a device one are
// reached alike.
//
// A handler is a thin decode layer: it takes XLA's buffers (and, on CUDA, XLA's stream),
// fills a Call and passes a Runner, which runs the core's collective with its kernel
// backend (the CPU backend on the calling thread, or the CUDA backend ordered with XLA's
// stream: cuda::run_device_collective). run_call does the rest, once for both.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "ccompress/collectives.h"

namespace ccompress::jax_ffi {

/// One registered communicator: its transport and kernel backend (null: the CPU backend),
/// the options fixed when it was made, and the step counter of its JAX calls (stochastic
/// rounding).
struct Entry {
  std::shared_ptr<Transport> transport;
  std::shared_ptr<KernelBackend> backend;  // null: the CPU backend
  std::shared_ptr<void> keepalive;         // what the transport and backend need alive
  CollectiveOptions options;
  uint64_t step = 0;
  std::string broken;  // set by an error that leaves the transport out of step
  std::mutex mu;       // one collective at a time on a transport
};

/// Sets a communicator's options on @p e (those of ccompress.Communicator).
void set_options(Entry& e, double timeout_s, int64_t slice_elems, uint64_t seed,
                 int ranks_per_node);
/// Registers @p e; returns its id (never reused).
int64_t register_entry(std::shared_ptr<Entry> e);
/// Releases an id: a compiled program that still names it fails with InvalidArgument.
bool unregister(int64_t id);
/// How many communicators are registered.
size_t registered();
/// The entry of @p id, or InvalidArgument naming what to do.
std::shared_ptr<Entry> lookup(int64_t id);

enum class Kind { AllReduce, ReduceScatter, AllGather };

const char* kind_name(Kind k);

/// One collective as a handler decoded it. @p out_elems is the output buffer's element
/// count (checked against what the collective writes); @p worker and @p server are the
/// error-feedback residuals, in the memory of the backend (null: none kept); @p invalid, a
/// check of the handler's that failed (an element type the codecs do not take, say), which
/// run_call raises as InvalidArgument once it has the communicator (so that its peers learn
/// of it too).
struct Call {
  std::string invalid;
  Kind kind = Kind::AllReduce;
  const void* in = nullptr;
  void* out = nullptr;
  int64_t n = 0;
  int64_t out_elems = 0;
  DType dtype = DType::Float32;
  std::string codec, algo, op;  // algo and op: "" where the call names none
  float* worker = nullptr;
  float* server = nullptr;
};

using CollectiveFn = CollectiveStats (*)(Transport&, KernelBackend&, const void*, void*, int64_t,
                                         DType, const Codec&, const CollectiveOptions&);

/// Runs the core's collective @p fn with the entry's transport and a kernel backend.
using Runner = std::function<void(CollectiveFn fn, Entry& e, const void* in, void* out,
                                  int64_t n, DType dtype, const Codec& codec,
                                  const CollectiveOptions& o)>;

/// Runs @p call on the communicator @p comm through @p run: the argument checks, the
/// options (algo, op, the step counter, error feedback), and an error that leaves the
/// transport out of step marking the communicator unusable. Where a check of this rank's
/// arguments fails before the collective, this rank takes part in the call check with a
/// description no real call has (an empty all-gather of slice 1, as Communicator._refuse
/// does) so that its peers raise MismatchError instead of waiting. Throws the core's
/// typed errors.
void run_call(int64_t comm, const Call& call, const Runner& run);

/// The ccompress error type of @p ex ("InvalidArgument", "MismatchError", ...).
const char* error_type(const std::exception& ex);
/// "[ccompress.<ErrorType>] message", which ccompress.jax turns back into that type.
std::string tagged_message(const std::exception& ex);
/// Whether @p ex is an error of the caller's arguments (else an internal one).
bool is_argument_error(const std::exception& ex);

}  // namespace ccompress::jax_ffi
