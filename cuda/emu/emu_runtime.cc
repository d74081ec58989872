// The CPU emulation of the CUDA runtime and of kernel execution declared in
// cuda/emu/cuda_runtime.h (the semantics are listed there). One process-wide lock serialises
// every runtime call and all device work: a rank thread that forces another rank's stream
// runs its work itself. An operation may be unable to finish yet (an emulated NCCL transfer
// whose peer has not posted, emu_internal.h): its stream then stops there, and a caller
// that must wait for it waits with the lock released, so that the peer's thread can post.
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <condition_variable>
#include "emu_internal.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

#if !defined(__x86_64__)
#error "the CUDA emulator switches fiber stacks with x86-64 code (emu_switch below)"
#endif

// Saves the callee-saved registers and the SSE / x87 control words on the current stack,
// stores the stack pointer in *from and continues on the stack `to` (saved the same way, or
// made by new_fiber_stack). No system call, unlike swapcontext: the emulator switches
// fibers at every barrier and warp primitive.
extern "C" void emu_switch(void** from, void* to);
extern "C" void emu_fiber_start();
asm(R"(
  .text
  .globl emu_switch
  .type emu_switch, @function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch, .-emu_switch

  .globl emu_fiber_start
  .type emu_fiber_start, @function
emu_fiber_start:
  andq $-16, %rsp
  call emu_fiber_main
  ud2
  .size emu_fiber_start, .-emu_fiber_start
)");

struct CUstream_st {
  std::deque<std::function<bool()>> pending;  // an operation returns false: not finished yet
  uint64_t enqueued = 0, done = 0;  // operations enqueued and run so far
  bool running = false;             // run_until is running its operations
};

struct CUevent_st {
  CUstream_st* stream = nullptr;  // the last record: done once stream->done >= position
  uint64_t position = 0;
  bool recorded = false;
  // Host time when the record ran (lazy streams: not a device time). Shared with the
  // enqueued record, which may run after the event is destroyed.
  std::shared_ptr<double> time_ms;
};

namespace emu {

Index thread_idx, block_idx;
dim3 block_dim, grid_dim;

namespace {

std::mutex g_mu;
std::condition_variable g_progress;  // something another thread waits for may have happened
int64_t g_errors = 0;
CallCounts g_counts;
cudaError_t g_last_error = cudaSuccess;  // returned (and cleared) by cudaGetLastError
cudaError_t g_async_error = cudaSuccess;  // an error of enqueued work, for the next sync

enum class MemKind { Device, Pinned };
struct Allocation {
  size_t bytes;
  MemKind kind;
  int device;
};
std::map<uintptr_t, Allocation> g_allocs;

// Devices: CCOMPRESS_EMU_DEVICES of them (default 1), each with its own legacy stream 0.
// Emulated NCCL ranks each take a device of their own, as on a GPU machine: a rank's legacy
// stream then waits only for its own transfers (tests set the count, ccompress_emu_set_devices).
constexpr int kMaxDevices = 8;
int g_device_count = 0;  // 0: not read yet
int device_count() {
  if (g_device_count == 0) {
    const char* v = std::getenv("CCOMPRESS_EMU_DEVICES");
    const int k = v != nullptr ? std::atoi(v) : 1;
    g_device_count = std::min(std::max(k, 1), kMaxDevices);
  }
  return g_device_count;
}
thread_local int t_device = 0;  // the calling thread's current device
CUstream_st g_legacy_streams[kMaxDevices];
std::vector<std::unique_ptr<CUstream_st>> g_streams;  // kept until exit: events may name them

void report(const std::string& what) {
  ++g_errors;
  std::fprintf(stderr, "[cuda emulator] ERROR: %s\n", what.c_str());
  std::fflush(stderr);
}

/// An error of the call itself: returned now, and by the next cudaGetLastError.
cudaError_t fail(cudaError_t err, const std::string& what) {
  report(what);
  return g_last_error = err;
}

/// An error of enqueued work: returned by the next synchronisation.
void fail_async(cudaError_t err, const std::string& what) {
  report(what);
  if (g_async_error == cudaSuccess) g_async_error = err;
}

CUstream_st* stream_of(cudaStream_t s) { return s == nullptr ? &g_legacy_streams[t_device] : s; }

/// The allocation holding [p, p + bytes), or nullptr.
const Allocation* find(const void* p, size_t bytes, uintptr_t* base = nullptr) {
  auto a = reinterpret_cast<uintptr_t>(p);
  auto it = g_allocs.upper_bound(a);
  if (it == g_allocs.begin()) return nullptr;
  --it;
  if (a + bytes > it->first + it->second.bytes) return nullptr;
  if (base) *base = it->first;
  return &it->second;
}

bool is_device(const void* p, size_t bytes) {
  const Allocation* a = find(p, bytes);
  return a != nullptr && a->kind == MemKind::Device;
}

/// Runs @p s's operations up to @p position; false when one of them cannot finish yet (it
/// stays first in line and the stream stops there).
bool run_until(CUstream_st* s, uint64_t position) {
  if (s->done >= position) return true;
  if (s->running) {  // its current operation waits, through other streams, on its own later work
    fail_async(cudaErrorLaunchFailure, "streams wait on each other in a cycle (a GPU would hang)");
    return true;
  }
  s->running = true;
  bool reached = true;
  while (s->done < position) {
    if (!s->pending.front()()) {  // may run other streams' work (a wait on an event)
      reached = false;
      break;
    }
    s->pending.pop_front();
    ++s->done;
  }
  s->running = false;
  g_progress.notify_all();
  return reached;
}

/// Runs @p s's operations up to @p position, waiting with @p lock released while one cannot
/// finish yet. Gives up (an error; false) after kStuckSeconds: a GPU would hang there.
constexpr double kStuckSeconds = 120.0;
bool run_until_waiting(std::unique_lock<std::mutex>& lock, CUstream_st* s, uint64_t position) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(kStuckSeconds));
  while (!run_until(s, position)) {
    if (std::chrono::steady_clock::now() > deadline) {
      fail_async(cudaErrorLaunchFailure,
                 "a stream has waited " + std::to_string(int(kStuckSeconds)) +
                     " s for an NCCL transfer no peer matches (a GPU would hang)");
      return false;
    }
    g_progress.wait_for(lock, std::chrono::milliseconds(1));
  }
  return true;
}

void drain(CUstream_st* s) { run_until(s, s->enqueued); }
bool drain_waiting(std::unique_lock<std::mutex>& lock, CUstream_st* s) {
  return run_until_waiting(lock, s, s->enqueued);
}

/// Runs every stream as far as it goes without another thread: on a GPU each rank of an
/// NCCL communicator has a device of its own, so a free or a device synchronisation does not
/// wait for transfers that need another rank's thread (emulated ranks share one device).
void drain_all() {
  for (auto& l : g_legacy_streams) drain(&l);
  for (auto& s : g_streams) drain(s.get());
}

void enqueue_poll(CUstream_st* s, std::function<bool()> op) {
  s->pending.push_back(std::move(op));
  ++s->enqueued;
}

void enqueue(CUstream_st* s, std::function<void()> op) {
  enqueue_poll(s, [op = std::move(op)]() {
    op();
    return true;
  });
}

cudaError_t take_async_error() {
  cudaError_t e = g_async_error;
  g_async_error = cudaSuccess;
  return e;
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// ---- fibers: the threads of one block ----

constexpr size_t kStackBytes = 256 << 10;  // room for the kernels' register arrays (and ASan)
constexpr size_t kGuardBytes = 4096;

enum class State { Ready, AtBarrier, AtWarp, Done };

struct Fiber {
  void* sp = nullptr;  // its saved stack pointer while suspended
  char* stack = nullptr;
  State state = State::Ready;
  unsigned tid = 0;
  WarpOp op = WarpOp::Sync;
  unsigned mask = 0;
  uint64_t in = 0, out = 0;
  int arg = 0, width = 32;
#if EMU_ASAN
  void* fake_stack = nullptr;
#endif
};

struct BlockRun {
  void* scheduler_sp = nullptr;
  std::vector<Fiber>* fibers = nullptr;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
#if EMU_ASAN
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
#endif
};

std::vector<Fiber> g_fibers;  // stacks reused by every launch (device work holds g_mu)
BlockRun g_run;

void set_position(const Fiber& f) {
  thread_idx.x = f.tid % block_dim.x;
  thread_idx.y = (f.tid / block_dim.x) % block_dim.y;
  thread_idx.z = f.tid / (block_dim.x * block_dim.y);
}

void switch_to_scheduler(Fiber* f, bool finished) {
#if EMU_ASAN
  __sanitizer_start_switch_fiber(finished ? nullptr : &f->fake_stack, g_run.sched_bottom,
                                 g_run.sched_size);
#endif
  emu_switch(&f->sp, g_run.scheduler_sp);  // a finished fiber is never resumed
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(f->fake_stack, &g_run.sched_bottom, &g_run.sched_size);
#endif
}

void resume(Fiber& f) {
  g_run.current = &f;
  set_position(f);
#if EMU_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f.stack, kStackBytes);
#endif
  emu_switch(&g_run.scheduler_sp, f.sp);
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

/// A fresh stack for @p f whose first switch to it enters emu_fiber_start: the frame
/// emu_switch pops (control words, six registers, return address) on top of the stack.
void new_fiber_stack(Fiber& f) {
  auto* top = reinterpret_cast<uint64_t*>(f.stack + kStackBytes);
  uint64_t* sp = top - 16;  // 16-byte aligned, with room to spare above the frame
  uint32_t control[2];
  asm volatile("stmxcsr %0" : "=m"(control[0]));
  asm volatile("fnstcw %0" : "=m"(control[1]));
  sp[0] = uint64_t(control[0]) | uint64_t(control[1]) << 32;
  for (int r = 1; r <= 6; ++r) sp[r] = 0;  // r15, r14, r13, r12, rbx, rbp
  sp[7] = reinterpret_cast<uint64_t>(&emu_fiber_start);
  f.sp = sp;
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Sync: return "__syncwarp";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::ShflIdx: return "__shfl_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::MaxS32:
    case WarpOp::MaxU32: return "__reduce_max_sync";
    case WarpOp::AddU32: return "__reduce_add_sync";
  }
  return "?";
}

/// Completes the warp operation the lanes of warp @p w wait at, when every lane of its mask
/// has arrived. Returns true when it did; an impossible wait is reported through @p why.
bool resolve_warp(Fiber* fibers, size_t threads, size_t w, std::string* why) {
  const size_t lo = w * 32, hi = std::min(threads, lo + 32);
  Fiber* first = nullptr;
  for (size_t i = lo; i < hi; ++i)
    if (fibers[i].state == State::AtWarp) {
      first = &fibers[i];
      break;
    }
  if (first == nullptr) return false;
  const unsigned mask = first->mask;
  for (size_t i = lo; i < hi; ++i) {
    const Fiber& f = fibers[i];
    const bool named = (mask >> (i - lo)) & 1u;
    if (f.state == State::AtWarp && (f.mask != mask || f.op != first->op)) {
      *why = std::string("lanes of warp ") + std::to_string(w) + " wait at different warp operations (" +
             op_name(f.op) + ", " + op_name(first->op) + ") or masks";
      return false;
    }
    if (!named) continue;
    if (f.state == State::Done) {
      *why = std::string("lane ") + std::to_string(i - lo) + " of warp " + std::to_string(w) +
             " has exited but the mask of " + op_name(first->op) + " names it";
      return false;
    }
    if (f.state != State::AtWarp) return false;  // still to arrive (or at a block barrier)
  }
  for (size_t i = lo; i < hi; ++i) {
    if (!((mask >> (i - lo)) & 1u)) continue;
    Fiber& f = fibers[i];
    const int lane = int(i - lo), width = f.width, seg = lane & ~(width - 1);
    int src = lane;
    uint64_t acc = 0;
    switch (f.op) {
      case WarpOp::Sync: break;
      case WarpOp::ShflXor: src = lane ^ f.arg; break;
      case WarpOp::ShflIdx: src = seg + (f.arg & (width - 1)); break;
      case WarpOp::ShflDown: src = (lane & (width - 1)) + f.arg < width ? lane + f.arg : lane; break;
      case WarpOp::MaxS32:
      case WarpOp::MaxU32:
      case WarpOp::AddU32:
        for (size_t j = lo; j < hi; ++j) {
          if (!((mask >> (j - lo)) & 1u)) continue;
          const uint32_t v = uint32_t(fibers[j].in);
          if (j == lo + __builtin_ctz(mask)) {
            acc = v;
          } else if (f.op == WarpOp::MaxS32) {
            acc = uint32_t(std::max(int32_t(acc), int32_t(v)));
          } else if (f.op == WarpOp::MaxU32) {
            acc = std::max(uint32_t(acc), v);
          } else {
            acc = uint32_t(uint32_t(acc) + v);
          }
        }
        break;
    }
    if (f.op == WarpOp::Sync) {
      f.out = 0;
    } else if (f.op == WarpOp::MaxS32 || f.op == WarpOp::MaxU32 || f.op == WarpOp::AddU32) {
      f.out = acc;
    } else {
      if (src < 0 || src >= 32 || lo + size_t(src) >= hi || !((mask >> src) & 1u)) {
        *why = std::string(op_name(f.op)) + " in warp " + std::to_string(w) + " reads lane " +
               std::to_string(src) + ", which its mask does not name";
        return false;
      }
      f.out = fibers[lo + size_t(src)].in;
    }
  }
  for (size_t i = lo; i < hi; ++i)
    if ((mask >> (i - lo)) & 1u) fibers[i].state = State::Ready;
  return true;
}

/// Runs one block to completion; false (and @p why) when its threads cannot all finish.
bool run_block(const std::function<void()>& body, size_t threads, bool up, std::string* why) {
  if (g_fibers.size() < threads) g_fibers.resize(threads);
  for (size_t t = 0; t < threads; ++t) {
    Fiber& f = g_fibers[t];
    if (f.stack == nullptr) {  // with a guard page below it: an overflow faults
      void* p = mmap(nullptr, kGuardBytes + kStackBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED || mprotect(p, kGuardBytes, PROT_NONE) != 0) {
        *why = "cannot map a fiber stack";
        return false;
      }
      f.stack = static_cast<char*>(p) + kGuardBytes;
    }
    new_fiber_stack(f);
    f.state = State::Ready;
    f.tid = unsigned(t);
  }
  g_run.body = &body;
  for (;; up = !up) {
    // Alternate the order threads run in between barriers (and the first order between
    // blocks): a thread that reads what another writes with no barrier between them runs
    // before the writer in some of them.
    for (size_t i = 0; i < threads; ++i) {
      Fiber& f = g_fibers[up ? i : threads - 1 - i];
      if (f.state == State::Ready) resume(f);
    }
    size_t done = 0, at_barrier = 0;
    for (size_t t = 0; t < threads; ++t) {
      done += g_fibers[t].state == State::Done;
      at_barrier += g_fibers[t].state == State::AtBarrier;
    }
    if (done == threads) return true;
    // Warp operations first: other warps may wait at the block barrier meanwhile.
    bool progress = false;
    for (size_t w = 0; w * 32 < threads && why->empty(); ++w)
      progress |= resolve_warp(g_fibers.data(), threads, w, why);
    if (!why->empty()) return false;
    if (progress) continue;
    if (at_barrier + done == threads) {
      for (size_t t = 0; t < threads; ++t)
        if (g_fibers[t].state == State::AtBarrier) g_fibers[t].state = State::Ready;
      continue;
    }
    *why = "deadlock: some threads wait at __syncthreads while others wait at a warp operation";
    return false;
  }
}

void run_grid(const Config& c, const std::function<void()>& body) {
  const size_t threads = size_t(c.block.x) * c.block.y * c.block.z;
  const size_t blocks = size_t(c.grid.x) * c.grid.y * c.grid.z;
  grid_dim = c.grid;
  block_dim = c.block;
  // Blocks run last to first: a kernel that relied on block order would show it.
  for (size_t b = blocks; b-- > 0;) {
    block_idx.x = unsigned(b % c.grid.x);
    block_idx.y = unsigned((b / c.grid.x) % c.grid.y);
    block_idx.z = unsigned(b / (size_t(c.grid.x) * c.grid.y));
    std::string why;
    if (!run_block(body, threads, b % 2 == 0, &why)) {
      fail_async(cudaErrorLaunchFailure, "kernel block (" + std::to_string(block_idx.x) + ", " +
                                         std::to_string(block_idx.y) + "): " + why);
      return;
    }
  }
}

}  // namespace
}  // namespace emu

// The first code a fiber runs (entered from emu_fiber_start): its thread of the kernel.
// Referenced only from the assembly above: kept and global under link-time optimisation
// (pybind11 builds a Release module with -flto).
extern "C" __attribute__((used, externally_visible)) void emu_fiber_main() {
  using namespace emu;
#if EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &g_run.sched_bottom, &g_run.sched_size);
#endif
  Fiber* f = g_run.current;
  (*g_run.body)();
  f->state = State::Done;
  switch_to_scheduler(f, true);
  __builtin_unreachable();
}

namespace emu {

int64_t emu_error_count() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_errors;
}

CallCounts emu_call_counts() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_counts;
}

void launch(const Config& c, std::function<void()> body, std::vector<const void*> pointers) {
  std::lock_guard<std::mutex> lock(g_mu);
  const size_t threads = size_t(c.block.x) * c.block.y * c.block.z;
  const size_t blocks = size_t(c.grid.x) * c.grid.y * c.grid.z;
  if (threads == 0 || threads > 1024 || blocks == 0 || c.grid.y > 65535 || c.grid.z > 65535) {
    fail(cudaErrorInvalidValue, "invalid launch configuration (" + std::to_string(blocks) +
                                    " blocks of " + std::to_string(threads) + " threads)");
    return;
  }
  for (size_t i = 0; i < pointers.size(); ++i) {
    if (pointers[i] != nullptr && !is_device(pointers[i], 1)) {
      fail(cudaErrorInvalidValue,
           "pointer argument " + std::to_string(i) + " of a kernel is not device memory");
      return;
    }
  }
  ++g_counts.launches;
  enqueue(stream_of(c.stream), [c, body = std::move(body)]() { run_grid(c, body); });
}

void block_barrier() {
  Fiber* f = g_run.current;
  f->state = State::AtBarrier;
  switch_to_scheduler(f, false);
}

uint64_t warp_collective(WarpOp op, unsigned mask, uint64_t bits, int arg, int width) {
  Fiber* f = g_run.current;
  f->state = State::AtWarp;
  f->op = op;
  f->mask = mask;
  f->in = bits;
  f->arg = arg;
  f->width = width;
  switch_to_scheduler(f, false);
  return f->out;
}

}  // namespace emu

// ---- the runtime API ----

using emu::g_mu;
using Lock = std::lock_guard<std::mutex>;

cudaError_t cudaGetDeviceCount(int* count) {
  Lock lock(g_mu);
  *count = emu::device_count();
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = emu::t_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  {
    Lock lock(g_mu);
    if (device < 0 || device >= emu::device_count()) return cudaErrorInvalidDevice;
  }
  if (value == nullptr) return cudaErrorInvalidValue;
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = emu::kSmCount; return cudaSuccess;
  }
  return cudaErrorInvalidValue;
}

cudaError_t cudaSetDevice(int device) {
  Lock lock(g_mu);
  if (device < 0 || device >= emu::device_count()) return cudaErrorInvalidDevice;
  emu::t_device = device;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  Lock lock(g_mu);
  ++emu::g_counts.device_synchronize;
  emu::drain_all();
  return emu::take_async_error();
}

cudaError_t cudaGetLastError() {
  Lock lock(g_mu);
  cudaError_t e = emu::g_last_error;
  emu::g_last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument (CPU emulator)";
    case cudaErrorMemoryAllocation: return "out of memory (CPU emulator)";
    case cudaErrorInvalidDevice: return "invalid device ordinal (CPU emulator)";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle (CPU emulator)";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered (CPU emulator)";
    case cudaErrorLaunchFailure: return "unspecified launch failure (CPU emulator; see stderr)";
  }
  return "unknown error (CPU emulator)";
}

namespace {

cudaError_t allocate(void** ptr, size_t bytes, emu::MemKind kind) {
  Lock lock(g_mu);
  ++emu::g_counts.malloc;
  // 256-byte aligned like cudaMalloc, but exactly `bytes` long, so that AddressSanitizer
  // reports a kernel reading past the end even within cudaMalloc's rounding. Filled with
  // 0xFF: NaN as fp32, so reading what nobody wrote shows.
  const size_t size = std::max<size_t>(bytes, 1);
  void* p = nullptr;
  if (posix_memalign(&p, 256, size) != 0) return emu::g_last_error = cudaErrorMemoryAllocation;
  std::memset(p, 0xFF, size);
  emu::g_allocs[reinterpret_cast<uintptr_t>(p)] = emu::Allocation{size, kind, emu::t_device};
  *ptr = p;
  return cudaSuccess;
}

cudaError_t release(void* ptr, emu::MemKind kind) {
  if (ptr == nullptr) return cudaSuccess;
  Lock lock(g_mu);
  auto it = emu::g_allocs.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == emu::g_allocs.end() || it->second.kind != kind) {
    return emu::fail(cudaErrorInvalidValue, "free of a pointer this allocator did not return");
  }
  ++emu::g_counts.free;
  emu::drain_all();  // cudaFree / cudaFreeHost wait for the device
  emu::g_allocs.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t bytes) { return allocate(ptr, bytes, emu::MemKind::Device); }
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return allocate(ptr, bytes, emu::MemKind::Pinned); }
cudaError_t cudaFree(void* ptr) { return release(ptr, emu::MemKind::Device); }
cudaError_t cudaFreeHost(void* ptr) { return release(ptr, emu::MemKind::Pinned); }

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  Lock lock(g_mu);
  uintptr_t base = 0;
  const emu::Allocation* a = emu::find(ptr, 1, &base);
  *attr = cudaPointerAttributes{cudaMemoryTypeUnregistered, -1, nullptr, nullptr};
  if (a != nullptr) {
    attr->type = a->kind == emu::MemKind::Device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    attr->device = a->device;
    attr->devicePointer = const_cast<void*>(ptr);
    if (a->kind == emu::MemKind::Pinned) attr->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  std::unique_lock<std::mutex> lock(g_mu);
  if (bytes == 0) return cudaSuccess;
  const emu::Allocation* d = emu::find(dst, bytes);
  const emu::Allocation* s = emu::find(src, bytes);
  const bool dst_dev = d && d->kind == emu::MemKind::Device, src_dev = s && s->kind == emu::MemKind::Device;
  const bool kind_ok = kind == cudaMemcpyDefault ||
                       (kind == cudaMemcpyHostToDevice && dst_dev && !src_dev) ||
                       (kind == cudaMemcpyDeviceToHost && src_dev && !dst_dev) ||
                       (kind == cudaMemcpyDeviceToDevice && src_dev && dst_dev) ||
                       (kind == cudaMemcpyHostToHost && !src_dev && !dst_dev);
  // A device pointer whose range leaves its allocation is found by no allocation: the
  // range check is that both ends of a device-side range lie in one allocation.
  auto partly_device = [](const void* p, size_t n) {
    return (emu::find(p, 1) && !emu::find(p, n)) ||
           (!emu::find(p, 1) && emu::find(static_cast<const char*>(p) + n - 1, 1));
  };
  if (!kind_ok || partly_device(dst, bytes) || partly_device(src, bytes)) {
    return emu::fail(cudaErrorInvalidValue,
                     "cudaMemcpyAsync: kind " + std::to_string(int(kind)) + " does not match the "
                     "pointers, or a range of " + std::to_string(bytes) + " bytes leaves its allocation");
  }
  ++emu::g_counts.copies;
  CUstream_st* st = emu::stream_of(stream);
  emu::enqueue(st, [dst, src, bytes]() { std::memmove(dst, src, bytes); });
  if (d == nullptr || s == nullptr) emu::drain_waiting(lock, st);  // pageable: done on return
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  Lock lock(g_mu);
  if (bytes == 0) return cudaSuccess;
  if (!emu::is_device(dst, bytes)) {
    return emu::fail(cudaErrorInvalidValue, "cudaMemsetAsync outside device memory");
  }
  ++emu::g_counts.copies;
  emu::enqueue(emu::stream_of(stream), [dst, value, bytes]() { std::memset(dst, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  Lock lock(g_mu);
  emu::g_streams.push_back(std::make_unique<CUstream_st>());
  *stream = emu::g_streams.back().get();
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::unique_lock<std::mutex> lock(g_mu);
  if (stream != nullptr) emu::drain_waiting(lock, stream);  // its work still completes
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::unique_lock<std::mutex> lock(g_mu);
  emu::drain_waiting(lock, emu::stream_of(stream));
  return emu::take_async_error();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  Lock lock(g_mu);
  if (event == nullptr) return emu::fail(cudaErrorInvalidResourceHandle, "a null event");
  ++emu::g_counts.stream_waits;
  if (!event->recorded) return cudaSuccess;  // waiting on a never-recorded event is a no-op
  // The wait is for the record as it is now, not for a later one.
  CUstream_st* s = event->stream;
  const uint64_t position = event->position;
  emu::enqueue_poll(emu::stream_of(stream), [s, position]() { return emu::run_until(s, position); });
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  Lock lock(g_mu);
  ++emu::g_counts.event_creates;
  *event = new CUevent_st();
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) { return cudaEventCreate(event); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  Lock lock(g_mu);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  Lock lock(g_mu);
  if (event == nullptr) return emu::fail(cudaErrorInvalidResourceHandle, "a null event");
  ++emu::g_counts.event_records;
  CUstream_st* s = emu::stream_of(stream);
  auto stamp = std::make_shared<double>(0.0);
  emu::enqueue(s, [stamp]() { *stamp = emu::now_ms(); });
  event->time_ms = stamp;
  event->stream = s;
  event->position = s->enqueued;
  event->recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  // Not done yet: run one more operation of its stream and say so, so that a polling
  // caller sees "not ready" first and still makes progress.
  Lock lock(g_mu);
  if (!event->recorded || event->stream->done >= event->position) return emu::take_async_error();
  emu::run_until(event->stream, event->stream->done + 1);
  return cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::unique_lock<std::mutex> lock(g_mu);
  if (event->recorded) emu::run_until_waiting(lock, event->stream, event->position);
  return emu::take_async_error();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Lock lock(g_mu);
  if (!start->recorded || !end->recorded || start->stream->done < start->position ||
      end->stream->done < end->position)
    return cudaErrorNotReady;
  *ms = float(*end->time_ms - *start->time_ms);
  return cudaSuccess;
}

// ---- for the emulated NCCL (emu_internal.h) ----

namespace emu {

std::unique_lock<std::mutex> runtime_lock() { return std::unique_lock<std::mutex>(g_mu); }

void wait_for_progress(std::unique_lock<std::mutex>& lock, int ms) {
  g_progress.wait_for(lock, std::chrono::milliseconds(ms));
}

void notify_progress() { g_progress.notify_all(); }

void enqueue_pollable(cudaStream_t stream, std::function<bool()> op) {
  ++g_counts.nccl_ops;
  enqueue_poll(stream_of(stream), std::move(op));
}

bool is_device_memory(const void* p, size_t bytes) { return is_device(p, bytes); }

void report_error(const std::string& what) { report(what); }

}  // namespace emu

/// Test hook (tests/cuda/test_nccl_emulated.py, through ctypes): operations enqueued on @p stream
/// so far (0: the calling thread's legacy stream).
extern "C" __attribute__((visibility("default"))) uint64_t ccompress_emu_stream_operations(
    cudaStream_t stream) {
  Lock lock(g_mu);
  return emu::stream_of(stream)->enqueued;
}

/// Test hook: the number of emulated devices from now on (1 to 8; the previous one is
/// returned). Memory and streams already made keep their device.
extern "C" __attribute__((visibility("default"))) int ccompress_emu_set_devices(int count) {
  Lock lock(g_mu);
  const int previous = emu::device_count();
  emu::g_device_count = std::min(std::max(count, 1), emu::kMaxDevices);
  return previous;
}
