// An in-process stand-in for libnccl, built into the emulated _cuda module only (never into
// the real one) and exported from it under NCCL's own names, so that the NCCL transport runs
// under the CPU emulator through the ordinary load_nccl path: a test points NCCL_ROOT at a
// folder whose lib/libnccl.so.2 is a link to the emulated module (see cuda/emu/README.md).
// Ranks are threads of one process. The semantics the transport relies on are NCCL's:
//  - ncclGetUniqueId / ncclCommInitRank: every rank of an id joins; init waits for all;
//  - ncclGroupStart / ncclGroupEnd nest; the ops of a group run together, on their stream,
//    as one stream operation; an argument error inside a group fails ncclGroupEnd too and
//    launches nothing of that group;
//  - ncclSend / ncclRecv match per (sender, receiver) pair in posting order; a send finishes
//    when its receive has taken the data, so a peer that never posts stalls the stream (the
//    transport's timeout and ncclCommAbort then end it); different sizes are an async error;
//  - ncclAllReduce (float32 sum, in rank order) for the barrier and the plain baseline;
//  - ncclCommGetAsyncError, ncclCommAbort (its pending operations finish without moving
//    data, as NCCL's kernels stop), ncclCommDestroy.
// Test hooks (extern "C", ccompress_fake_nccl_*): make a call fail, set an async error.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "emu_internal.h"

#define FAKE_NCCL_API extern "C" __attribute__((visibility("default")))

namespace {

using Result = int;
enum : int {
  kSuccess = 0,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kInProgress = 7,
};
constexpr int kVersion = 29900;          // "2.99.0": never a real NCCL release
constexpr double kInitSeconds = 60.0;    // ncclCommInitRank gives up when ranks are missing
constexpr int kFloat32 = 7, kSum = 0;

struct UniqueId {
  char internal[128];
};

struct Message {  // a posted send: the sender's stream is at it until `taken`
  const char* data;
  size_t bytes;
  bool taken = false;
};

struct Reduce {  // one ncclAllReduce of every rank
  std::vector<const float*> in;
  std::vector<float*> out;
  size_t count = 0;
  int arrived = 0, finished = 0;
  bool done = false, dead = false;
};

struct Comm;
struct Clique {
  int size = 0, joined = 0, alive = 0;
  std::vector<Comm*> ranks;
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<Message>>> channels;  // (from, to)
  std::map<uint64_t, std::shared_ptr<Reduce>> reduces;
};

struct Comm {
  std::shared_ptr<Clique> clique;
  int rank = 0;
  bool gone = false;  // aborted or destroyed
  Result async_error = kSuccess;
  uint64_t reduces_posted = 0;
};

enum class Kind { Send, Recv, AllReduce };
struct Op {
  Kind kind;
  std::shared_ptr<Comm> comm;
  cudaStream_t stream;
  const void* src;
  void* dst;
  size_t bytes;  // Send/Recv: bytes; AllReduce: elements
  int peer;
  uint64_t seq = 0;
  // progress
  bool posted = false, done = false;
  std::shared_ptr<Message> msg;
  std::shared_ptr<Reduce> reduce;
};

struct Fault {
  std::string call;
  int rank, remaining;
  Result result;
};

// All of it under emu::runtime_lock(): the stream operations below run with it held.
std::map<std::string, std::shared_ptr<Clique>> g_joining;  // by unique id, until all joined
std::map<Comm*, std::shared_ptr<Comm>> g_comms;
std::vector<Fault> g_faults;
thread_local int t_depth = 0;
thread_local Result t_group_error = kSuccess;
thread_local std::vector<Op> t_ops;

std::shared_ptr<Comm> live(void* handle) {
  auto it = g_comms.find(static_cast<Comm*>(handle));
  return it == g_comms.end() ? nullptr : it->second;
}

/// The result an injected fault gives this call of @p call by @p rank, or kSuccess.
Result injected(const char* call, int rank) {
  for (size_t i = 0; i < g_faults.size(); ++i) {
    Fault& f = g_faults[i];
    if (f.call != call || (f.rank >= 0 && f.rank != rank)) continue;
    if (f.remaining-- > 0) continue;
    const Result r = f.result;
    g_faults.erase(g_faults.begin() + long(i));
    return r;
  }
  return kSuccess;
}

void set_async(Comm& c, Result r) {
  if (c.async_error == kSuccess) c.async_error = r;
}

/// One step of @p op; true once it has finished.
bool progress(Op& op) {
  Comm& c = *op.comm;
  if (c.gone) return true;  // aborted: NCCL's kernels stop, no data moves
  Clique& q = *c.clique;
  switch (op.kind) {
    case Kind::Send:
      if (!op.posted) {
        op.msg = std::make_shared<Message>(Message{static_cast<const char*>(op.src), op.bytes});
        q.channels[{c.rank, op.peer}].push_back(op.msg);
        op.posted = true;
      }
      return op.msg->taken;
    case Kind::Recv: {
      auto& ch = q.channels[{op.peer, c.rank}];
      if (ch.empty()) return false;
      std::shared_ptr<Message> m = ch.front();
      ch.pop_front();
      if (m->bytes != op.bytes) {  // NCCL would hang or truncate: say so instead
        set_async(c, kInvalidUsage);
        if (Comm* from = q.ranks[size_t(op.peer)]) set_async(*from, kInvalidUsage);
      } else if (op.bytes > 0) {
        std::memcpy(op.dst, m->data, op.bytes);
      }
      m->taken = true;
      return true;
    }
    case Kind::AllReduce: {
      if (!op.posted) {
        auto& slot = q.reduces[op.seq];
        if (!slot) {
          slot = std::make_shared<Reduce>();
          slot->in.assign(size_t(q.size), nullptr);
          slot->out.assign(size_t(q.size), nullptr);
          slot->count = op.bytes;
        }
        if (slot->count != op.bytes) set_async(c, kInvalidUsage);
        slot->in[size_t(c.rank)] = static_cast<const float*>(op.src);
        slot->out[size_t(c.rank)] = static_cast<float*>(op.dst);
        ++slot->arrived;
        op.reduce = slot;
        op.posted = true;
      }
      Reduce& r = *op.reduce;
      if (r.dead) return false;  // a rank left: the others hang, as with NCCL
      if (!r.done && r.arrived == q.size) {
        std::vector<float> sum(r.in[0], r.in[0] + r.count);  // every rank's stream is here
        for (size_t k = 1; k < r.in.size(); ++k)
          for (size_t i = 0; i < r.count; ++i) sum[i] += r.in[k][i];
        for (float* out : r.out) std::memcpy(out, sum.data(), r.count * sizeof(float));
        r.done = true;
      }
      if (!r.done) return false;
      if (++r.finished == q.size) q.reduces.erase(op.seq);
      return true;
    }
  }
  return true;
}

/// Puts the ops of one group on their streams, one stream operation per stream.
void launch(std::vector<Op> ops) {
  std::map<cudaStream_t, std::vector<Op>> by_stream;
  for (Op& op : ops) {
    if (op.kind == Kind::AllReduce) op.seq = op.comm->reduces_posted++;
    by_stream[op.stream].push_back(std::move(op));
  }
  for (auto& [stream, group] : by_stream) {
    auto shared = std::make_shared<std::vector<Op>>(std::move(group));
    emu::enqueue_pollable(stream, [shared]() {
      bool all = true;
      for (Op& op : *shared) {
        if (!op.done) op.done = progress(op);
        all = all && op.done;
      }
      return all;
    });
  }
  emu::notify_progress();
}

/// Validates and queues one op (in a group) or launches it (outside one).
Result post(Op op, const char* call) {
  Result r = kSuccess;
  if (op.comm == nullptr) {
    r = kInvalidArgument;
  } else if (Result f = injected(call, op.comm->rank); f != kSuccess) {
    r = f;
  } else if (op.kind != Kind::AllReduce &&
             (op.peer < 0 || op.peer >= op.comm->clique->size)) {
    r = kInvalidArgument;
  } else {
    const size_t span = op.kind == Kind::AllReduce ? op.bytes * sizeof(float) : op.bytes;
    const bool src_ok = op.kind == Kind::Recv || span == 0 || emu::is_device_memory(op.src, span);
    const bool dst_ok = op.kind == Kind::Send || span == 0 || emu::is_device_memory(op.dst, span);
    if (!src_ok || !dst_ok) r = kInvalidArgument;  // NCCL checks for device pointers too
  }
  if (t_depth > 0) {
    if (r != kSuccess) {
      if (t_group_error == kSuccess) t_group_error = r;
    } else {
      t_ops.push_back(std::move(op));
    }
    return r;
  }
  if (r == kSuccess) launch({std::move(op)});
  return r;
}

/// Takes @p c out of its clique: nothing of it is matched or read any more.
void retire(Comm& c) {
  if (c.gone) return;
  c.gone = true;
  Clique& q = *c.clique;
  for (auto& [pair, ch] : q.channels)
    if (pair.first == c.rank || pair.second == c.rank) ch.clear();  // its buffers, or its inbox
  for (auto& [seq, r] : q.reduces)
    if (r->in[size_t(c.rank)] != nullptr) r->dead = true;
  q.ranks[size_t(c.rank)] = nullptr;
  --q.alive;
  emu::notify_progress();
}

}  // namespace

FAKE_NCCL_API const char* ccompress_emulated_nccl() {
  return "ccompress's in-process stand-in for libnccl (CPU emulator, tests only)";
}

FAKE_NCCL_API Result ncclGetVersion(int* version) {
  if (version == nullptr) return kInvalidArgument;
  *version = kVersion;
  return kSuccess;
}

FAKE_NCCL_API const char* ncclGetErrorString(Result r) {
  switch (r) {
    case kSuccess: return "no error";
    case 1: return "unhandled cuda error (emulated NCCL)";
    case kSystemError: return "unhandled system error (emulated NCCL: ranks missing at init)";
    case kInternalError: return "internal error (emulated NCCL)";
    case kInvalidArgument: return "invalid argument (emulated NCCL)";
    case kInvalidUsage: return "invalid usage (emulated NCCL)";
    case 6: return "remote process exited or there was a network error (emulated NCCL)";
    case kInProgress: return "NCCL operation in progress";
  }
  return "unknown result code (emulated NCCL)";
}

FAKE_NCCL_API Result ncclGetUniqueId(UniqueId* id) {
  if (id == nullptr) return kInvalidArgument;
  static std::mt19937_64 rng{std::random_device{}()};
  auto lock = emu::runtime_lock();
  std::memset(id->internal, 0, sizeof id->internal);
  std::snprintf(id->internal, 32, "emulated-nccl-%016llx", static_cast<unsigned long long>(rng()));
  return kSuccess;
}

FAKE_NCCL_API Result ncclCommInitRank(void** comm, int nranks, UniqueId id, int rank) {
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) return kInvalidArgument;
  auto lock = emu::runtime_lock();
  const std::string key(id.internal, sizeof id.internal);
  std::shared_ptr<Clique>& slot = g_joining[key];
  if (!slot) {
    slot = std::make_shared<Clique>();
    slot->size = nranks;
    slot->ranks.assign(size_t(nranks), nullptr);
  }
  std::shared_ptr<Clique> q = slot;
  if (q->size != nranks || q->ranks[size_t(rank)] != nullptr) return kInvalidUsage;
  auto c = std::make_shared<Comm>();
  c->clique = q;
  c->rank = rank;
  q->ranks[size_t(rank)] = c.get();
  ++q->joined;
  ++q->alive;
  if (q->joined == q->size) g_joining.erase(key);  // an id serves one communicator
  emu::notify_progress();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(int(kInitSeconds));
  while (q->joined < q->size) {
    if (std::chrono::steady_clock::now() > deadline) {
      q->ranks[size_t(rank)] = nullptr;
      --q->joined;
      --q->alive;
      if (q->alive == 0) g_joining.erase(key);
      return kSystemError;
    }
    emu::wait_for_progress(lock, 2);
  }
  g_comms[c.get()] = c;
  *comm = c.get();
  return kSuccess;
}

FAKE_NCCL_API Result ncclCommDestroy(void* comm) {
  auto lock = emu::runtime_lock();
  std::shared_ptr<Comm> c = live(comm);
  if (c == nullptr) return kInvalidArgument;
  retire(*c);
  g_comms.erase(c.get());
  return kSuccess;
}

FAKE_NCCL_API Result ncclCommAbort(void* comm) { return ncclCommDestroy(comm); }

FAKE_NCCL_API Result ncclCommGetAsyncError(void* comm, Result* async) {
  auto lock = emu::runtime_lock();
  std::shared_ptr<Comm> c = live(comm);
  if (c == nullptr || async == nullptr) return kInvalidArgument;
  *async = c->async_error;
  return kSuccess;
}

FAKE_NCCL_API Result ncclGroupStart() {
  auto lock = emu::runtime_lock();
  ++t_depth;
  return kSuccess;
}

FAKE_NCCL_API Result ncclGroupEnd() {
  auto lock = emu::runtime_lock();
  if (t_depth == 0) return kInvalidUsage;
  if (--t_depth > 0) return kSuccess;
  std::vector<Op> ops;
  ops.swap(t_ops);
  Result r = t_group_error;
  t_group_error = kSuccess;
  if (r == kSuccess && !ops.empty()) r = injected("ncclGroupEnd", ops.front().comm->rank);
  if (r != kSuccess) return r;  // the whole group is dropped, as NCCL drops it
  launch(std::move(ops));
  return kSuccess;
}

FAKE_NCCL_API Result ncclSend(const void* buf, size_t count, int datatype, int peer, void* comm,
                              cudaStream_t stream) {
  auto lock = emu::runtime_lock();
  if (datatype != 0 && datatype != 1) return kInvalidArgument;  // (u)int8 only: bytes
  return post(Op{Kind::Send, live(comm), stream, buf, nullptr, count, peer}, "ncclSend");
}

FAKE_NCCL_API Result ncclRecv(void* buf, size_t count, int datatype, int peer, void* comm,
                              cudaStream_t stream) {
  auto lock = emu::runtime_lock();
  if (datatype != 0 && datatype != 1) return kInvalidArgument;
  return post(Op{Kind::Recv, live(comm), stream, nullptr, buf, count, peer}, "ncclRecv");
}

FAKE_NCCL_API Result ncclAllReduce(const void* in, void* out, size_t count, int datatype, int op,
                                   void* comm, cudaStream_t stream) {
  auto lock = emu::runtime_lock();
  if (datatype != kFloat32 || op != kSum) return kInvalidArgument;  // all ccompress asks for
  return post(Op{Kind::AllReduce, live(comm), stream, in, out, count, 0}, "ncclAllReduce");
}

/// Test hook: the call named @p call ("ncclSend", "ncclRecv", "ncclGroupEnd",
/// "ncclAllReduce") made by rank @p rank (-1: any) after @p after such calls returns
/// @p result instead of running.
FAKE_NCCL_API int ccompress_fake_nccl_fail(const char* call, int rank, int after, int result) {
  auto lock = emu::runtime_lock();
  g_faults.push_back({call, rank, after, result});
  return 0;
}

/// Test hook: ncclCommGetAsyncError of every live communicator of rank @p rank gives
/// @p result from now on (as after a failure in NCCL's kernels or network). Returns how
/// many communicators it set.
FAKE_NCCL_API int ccompress_fake_nccl_set_async_error(int rank, int result) {
  auto lock = emu::runtime_lock();
  int n = 0;
  for (auto& [handle, c] : g_comms)
    if (c->rank == rank && !c->gone) {
      c->async_error = result;
      ++n;
    }
  return n;
}

/// Test hook: clears every fault still armed; returns how many there were.
FAKE_NCCL_API int ccompress_fake_nccl_reset() {
  auto lock = emu::runtime_lock();
  const int n = int(g_faults.size());
  g_faults.clear();
  return n;
}
