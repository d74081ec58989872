// The pipelined slice of the device transports (loopback and NCCL), in bytes of input.
//
// Every slice of a device collective costs kernel launches and events on the codec and comm
// streams (a few microseconds each on the host, some on the GPU too), so a slice must hold
// megabytes for its kernels and transfers to outweigh them; the host transports' default of
// 65536 elements (256 KiB of fp32) made a 64 MiB all-reduce pay for hundreds of them. The
// slice still pipelines: the codec stream encodes slice s + 1 while the comm stream moves
// slice s. CCOMPRESS_DEVICE_SLICE_MB overrides the transports' choice (MiB, a positive
// number; every rank must set the same: the call check compares the slices).
#pragma once

#include <cstdint>

namespace ccompress::cuda {

/// The loopback transport's slice: its virtual ranks share one GPU's memory, where overlap
/// cannot hide memory-bound kernels, so fewer, longer slices.
constexpr int64_t kLoopbackSliceBytes = int64_t(16) << 20;
/// The NCCL transport's slice: long enough to amortise a slice's launches and events, short
/// enough that a 25 MB gradient bucket over 8 GPUs still pipelines its chunks.
constexpr int64_t kNcclSliceBytes = int64_t(4) << 20;

/// @p fallback, or CCOMPRESS_DEVICE_SLICE_MB (in MiB) when set; InvalidArgument naming the
/// variable when it is not a positive number. Read at every call.
int64_t device_slice_bytes(int64_t fallback);

}  // namespace ccompress::cuda
