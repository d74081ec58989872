// The emulator's own runtime state, for the emulated NCCL (fake_nccl.cc) that lives next to
// it: one lock for all of it, operations on a stream that may not finish yet, and a way to
// wait for another thread with the lock released.
#pragma once

#include <cstddef>
#include <functional>
#include <mutex>
#include <string>

typedef struct CUstream_st* cudaStream_t;

namespace emu {

/// The lock every runtime call and all device work hold.
std::unique_lock<std::mutex> runtime_lock();
/// Waits (the lock released) until another thread may have made progress, at most @p ms.
void wait_for_progress(std::unique_lock<std::mutex>& lock, int ms);
void notify_progress();
/// Enqueues on @p stream an operation that runs (lock held) each time the stream reaches it
/// until it returns true; until then the stream stops there.
void enqueue_pollable(cudaStream_t stream, std::function<bool()> op);
/// [p, p + bytes) lies in one device allocation.
bool is_device_memory(const void* p, size_t bytes);
/// Prints and counts an emulator error (see emu_error_count).
void report_error(const std::string& what);

}  // namespace emu
