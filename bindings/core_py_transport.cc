// A Transport whose point-to-point transfers are Python callables: the bridge to a
// framework's own engine (ccompress/torch/_p2p.py forwards them to a torch.distributed gloo
// group). The executor stays the one loop that moves data; this file only forwards isend /
// irecv / test / cancel / barrier, takes the GIL only while it calls Python, and hands
// Python the caller's buffers as memoryviews over the same bytes (no copy).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bindings.h"
#include "ccompress/error.h"
#include "ccompress/transport.h"

namespace py = pybind11;

namespace ccompress::py_bindings {

namespace {

// Re-raises a Python exception of a callable as the C++ error of the same meaning, so the
// executor cancels what it posted and the Communicator sees the same class it would from
// the MPI transport. Python's own messages are kept (the _p2p layer writes them readable).
[[noreturn]] void rethrow(py::error_already_set& e, const std::string& what) {
  py::module_ errors = py::module_::import("ccompress._internal.errors");
  std::string msg = what + ": " + py::str(e.value()).cast<std::string>();
  if (e.matches(errors.attr("CollectiveTimeout"))) throw TimeoutError(msg);
  if (e.matches(errors.attr("MessageError"))) throw MessageError(msg);
  if (e.matches(errors.attr("InvalidArgument"))) throw InvalidArgument(msg);
  if (e.matches(errors.attr("Unsupported"))) throw Unsupported(msg);
  throw Error(msg);
}

class PyTransport : public Transport {
 public:
  /// @p ops has isend(peer, view, tag) and irecv(peer, view, tag) returning an int handle,
  /// test(handles) returning the indices of the completed ones (raising for a failed one),
  /// wait(handles, timeout_s) the same after blocking until one completes or timeout_s
  /// passes, cancel(handles) (returns once the engine no longer touches their buffers),
  /// barrier(timeout_s).
  PyTransport(py::object ops, int rank, int size, std::string name)
      : ops_(std::move(ops)), rank_(rank), size_(size), name_(std::move(name)) {
    CC_CHECK(size >= 1 && rank >= 0 && rank < size,
             "rank " << rank << " is outside a group of " << size);
    isend_ = ops_.attr("isend");
    irecv_ = ops_.attr("irecv");
    test_ = ops_.attr("test");
    wait_ = ops_.attr("wait");
    cancel_ = ops_.attr("cancel");
    barrier_ = ops_.attr("barrier");
  }

  ~PyTransport() override {
    if (!Py_IsInitialized()) {  // interpreter gone: the objects cannot be released
      for (py::object* o : {&ops_, &isend_, &irecv_, &test_, &wait_, &cancel_, &barrier_})
        o->release();
      return;
    }
    py::gil_scoped_acquire gil;
    std::vector<Request> left;
    for (auto& [id, h] : handles_) left.push_back(id);
    try {
      cancel(left);
    } catch (...) {  // a destructor must not throw; the requests are abandoned either way
    }
    ops_ = isend_ = irecv_ = test_ = wait_ = cancel_ = barrier_ = py::object();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return name_; }

  Request isend(int peer, const void* buf, int64_t bytes, int tag) override {
    check_peer(peer);
    bytes_sent_ += bytes;
    return post(isend_, "isend", peer, const_cast<void*>(buf), bytes, tag);
  }

  Request irecv(int peer, void* buf, int64_t bytes, int tag) override {
    check_peer(peer);
    return post(irecv_, "irecv", peer, buf, bytes, tag);
  }

  std::vector<size_t> test_some(const std::vector<Request>& reqs) override {
    return collect(test_, reqs, -1.0);
  }

  std::vector<size_t> wait_some(const std::vector<Request>& reqs, double timeout_s) override {
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    for (;;) {
      const double waited = std::chrono::duration<double>(clock::now() - start).count();
      CC_CHECK_AS(TimeoutError, waited < timeout_s,
                  "rank " << rank_ << ": no message arrived for " << timeout_s
                          << " s; a peer is missing, stuck or called a different collective");
      // Python blocks on its condition variable (GIL released) until a request completes;
      // in pieces of at most a second so that this loop keeps the deadline.
      auto done = collect(wait_, reqs, std::min(timeout_s - waited, 1.0));
      if (!done.empty()) return done;
    }
  }

  void cancel(const std::vector<Request>& reqs) override {
    py::gil_scoped_acquire gil;
    py::list handles;
    for (Request r : reqs) {
      auto it = handles_.find(r);
      if (it == handles_.end()) continue;
      handles.append(it->second);
      handles_.erase(it);
    }
    if (handles.empty()) return;
    try {
      cancel_(handles);
    } catch (py::error_already_set& e) {
      rethrow(e, "rank " + std::to_string(rank_) + ": cancel");
    }
  }

  void barrier() override {
    py::gil_scoped_acquire gil;
    try {
      barrier_(barrier_timeout_s);
    } catch (py::error_already_set& e) {
      rethrow(e, "rank " + std::to_string(rank_) + ": barrier");
    }
  }

  double barrier_timeout_s = 300.0;

 private:
  // test(handles) when @p wait_s < 0, else wait(handles, wait_s): the indices done.
  std::vector<size_t> collect(const py::object& fn, const std::vector<Request>& reqs,
                              double wait_s) {
    std::vector<size_t> done;
    if (reqs.empty()) return done;
    py::gil_scoped_acquire gil;
    py::list handles;
    for (Request r : reqs) {
      auto it = handles_.find(r);
      CC_CHECK(it != handles_.end(), "unknown or already completed request " << r);
      handles.append(it->second);
    }
    try {
      done = (wait_s < 0 ? fn(handles) : fn(handles, wait_s)).cast<std::vector<size_t>>();
    } catch (py::error_already_set& e) {
      rethrow(e, "rank " + std::to_string(rank_));
    }
    std::sort(done.begin(), done.end());
    for (size_t i : done) {
      CC_CHECK(i < reqs.size(), "test returned index " << i << " of " << reqs.size());
      handles_.erase(reqs[i]);
    }
    return done;
  }

  void check_peer(int peer) const {
    CC_CHECK(peer >= 0 && peer < size_ && peer != rank_,
             "peer " << peer << " is not another rank of a group of " << size_);
  }

  Request post(const py::object& fn, const char* what, int peer, void* buf, int64_t bytes,
               int tag) {
    py::gil_scoped_acquire gil;
    // A writable view for sends too: torch.frombuffer warns on read-only buffers, and the
    // engine only reads a send's bytes.
    py::memoryview view = py::memoryview::from_memory(buf, py::ssize_t(bytes), false);
    py::object h;
    try {
      h = fn(peer, view, tag);
    } catch (py::error_already_set& e) {
      rethrow(e, "rank " + std::to_string(rank_) + ": " + what + " to/from rank " +
                     std::to_string(peer));
    }
    Request id = next_++;
    handles_.emplace(id, std::move(h));
    return id;
  }

  py::object ops_, isend_, irecv_, test_, wait_, cancel_, barrier_;
  int rank_, size_;
  std::string name_;
  Request next_ = 1;
  std::unordered_map<Request, py::object> handles_;  // touched only with the GIL held
};

}  // namespace

void bind_py_transport(py::module_& m) {
  py::class_<PyTransport, Transport, std::shared_ptr<PyTransport>>(
      m, "PyTransport",
      "A transport over Python point-to-point callables (see ccompress/torch/_p2p.py).")
      .def(py::init<py::object, int, int, std::string>(), py::arg("ops"), py::arg("rank"),
           py::arg("size"), py::arg("name") = "python")
      .def_readwrite("barrier_timeout_s", &PyTransport::barrier_timeout_s);
}

}  // namespace ccompress::py_bindings
