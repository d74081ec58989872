// The registry and the call path shared by ccompress.jax's XLA FFI handlers
// (jax_ffi_registry.h). Built into the core library, so that every module of a process
// reaches the same registry.
#include "jax_ffi_registry.h"

#include <string_view>
#include <unordered_map>

#include "ccompress/error.h"

namespace ccompress::jax_ffi {

namespace {

std::mutex g_mu;
std::unordered_map<int64_t, std::shared_ptr<Entry>> g_registry;
int64_t g_next_id = 1;

CollectiveFn fn_of(Kind k) {
  switch (k) {
    case Kind::AllReduce: return &allreduce;
    case Kind::ReduceScatter: return &reduce_scatter;
    default: return &allgather;
  }
}

/// This rank cannot run the call its peers may be running: it takes part in the call check
/// with a description no real call has (an empty all-gather of slice 1), so that peers raise
/// MismatchError instead of waiting.
void refuse(Entry& e, const Runner& run) {
  if (e.transport->size() == 1) return;
  CollectiveOptions o = e.options;
  o.slice_elems = 1;
  o.algo = Algo::Auto;
  o.ranks_per_node = 0;
  try {
    run(&allgather, e, nullptr, nullptr, 0, DType::Float32, Codec::parse("none"), o);
  } catch (const MismatchError&) {
    ++e.step;  // a peer took its step in its real call
  } catch (const Error&) {
  }
}

}  // namespace

void set_options(Entry& e, double timeout_s, int64_t slice_elems, uint64_t seed,
                 int ranks_per_node) {
  e.options.timeout_s = timeout_s;
  e.options.slice_elems = slice_elems;
  e.options.seed = seed;
  e.options.ranks_per_node = ranks_per_node;
}

int64_t register_entry(std::shared_ptr<Entry> e) {
  CC_CHECK(e != nullptr && e->transport != nullptr, "register needs a transport");
  std::lock_guard<std::mutex> lock(g_mu);
  int64_t id = g_next_id++;
  g_registry.emplace(id, std::move(e));
  return id;
}

bool unregister(int64_t id) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_registry.erase(id) == 1;
}

size_t registered() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_registry.size();
}

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

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce: return "allreduce";
    case Kind::ReduceScatter: return "reduce_scatter";
    default: return "allgather";
  }
}

void run_call(int64_t comm, const Call& call, const Runner& run) {
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
    CC_CHECK(call.invalid.empty(), call.invalid);
    const int64_t n = call.n;
    const int size = e->transport->size(), rank = e->transport->rank();
    int64_t n_out = n;
    if (call.kind == Kind::AllGather) n_out = n * size;
    if (call.kind == Kind::ReduceScatter) {
      auto r = chunk_range(n, size, rank);
      n_out = r.second - r.first;
    }
    CC_CHECK(call.out_elems == n_out, "ccompress.jax: the output holds "
                                          << call.out_elems << " elements, the "
                                          << kind_name(call.kind) << " of " << n << " writes "
                                          << n_out);
    CollectiveOptions o = e->options;
    if (!call.algo.empty()) {
      o.algo = parse_algo(call.algo);
      if (o.algo != Algo::Hier) o.ranks_per_node = 0;
    } else {
      o.ranks_per_node = 0;
    }
    if (o.algo == Algo::Hier) {
      CC_CHECK(o.ranks_per_node >= 1,
               "algo='hier' needs the communicator's ranks_per_node (pass it when making the "
               "communicator)");
    }
    if (!call.op.empty()) o.op = parse_reduce_op(call.op);
    o.feedback.worker = call.worker;
    o.feedback.server = call.server;
    const Codec c = Codec::parse(call.codec);
    o.step = e->step++;
    started = true;
    try {
      run(fn_of(call.kind), *e, call.in, call.out, n, call.dtype, c, o);
    } catch (const MismatchError&) {
      throw;  // every rank stopped at the same point: the group is still in step
    } catch (const InvalidArgument&) {
      throw;  // refused before any data moved
    } catch (const Error& ex) {
      e->broken = std::string(error_type(ex)) + " in an earlier collective (" + ex.what() + ")";
      throw;
    }
  } catch (const std::exception&) {
    // A check of this rank's arguments failed before the collective: its peers, whose
    // checks may have passed, learn of it in the call check instead of waiting.
    if (e && !started && e->broken.empty()) refuse(*e, run);
    throw;
  }
}

const char* error_type(const std::exception& ex) {
  if (dynamic_cast<const InvalidArgument*>(&ex)) return "InvalidArgument";
  if (dynamic_cast<const Unsupported*>(&ex)) return "Unsupported";
  if (dynamic_cast<const MismatchError*>(&ex)) return "MismatchError";
  if (dynamic_cast<const MessageError*>(&ex)) return "MessageError";
  if (dynamic_cast<const TimeoutError*>(&ex)) return "CollectiveTimeout";
  if (dynamic_cast<const MpiError*>(&ex)) return "MpiError";
  return "CCompressError";
}

std::string tagged_message(const std::exception& ex) {
  std::string msg = std::string("[ccompress.") + error_type(ex) + "] " + ex.what();
  const std::string_view what = ex.what();
  if (dynamic_cast<const MismatchError*>(&ex) &&
      what.find("allgather(count=0,") != std::string_view::npos &&
      what.find("slice_elems=1)") != std::string_view::npos) {
    msg += "\n(an empty allgather is how a rank whose arguments failed a check takes part: that "
           "rank raised InvalidArgument for this call)";
  }
  return msg;
}

bool is_argument_error(const std::exception& ex) {
  return dynamic_cast<const InvalidArgument*>(&ex) || dynamic_cast<const MismatchError*>(&ex);
}

}  // namespace ccompress::jax_ffi
