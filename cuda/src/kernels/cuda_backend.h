// The CUDA KernelBackend: the codec launchers of cuda/src/kernels on one rank's codec
// stream, with a scratch pool reused across calls. Plain C++ (no CUDA headers), so bindings
// compiled by the host compiler can hold one.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ccompress/error.h"
#include "ccompress/kernel_backend.h"
#include "kernels/decode_out.h"

// The CUDA runtime's own definitions (driver_types.h); repeating identical typedefs is legal.
typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

namespace ccompress::cuda {

/// Number of visible CUDA devices; 0 when there is no GPU or driver. Never throws.
int device_count() noexcept;

/// CC_CUDA_CHECK's checker (ccompress/error.h): throws CudaError "<what> failed: <CUDA's
/// message>" when @p err (a cudaError_t) is not cudaSuccess, with @p site in debug mode.
void check_cuda_status(int err, const char* what, const SourceSite& site);

/// Makes @p device current for the calling thread while it lives, then restores the old one.
/// With @p quiet (destructors) failures are ignored instead of thrown.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device, bool quiet = false);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/// The streams of one rank on its device: codec kernels run on `codec`, transfers on `comm`;
/// they are ordered by events, never by a device-wide synchronisation. Both are non-blocking
/// streams (no implicit ordering with the legacy default stream).
class RankStreams {
 public:
  explicit RankStreams(int device);
  ~RankStreams();
  RankStreams(const RankStreams&) = delete;
  RankStreams& operator=(const RankStreams&) = delete;

  int device() const { return device_; }
  cudaStream_t codec() const { return codec_; }
  cudaStream_t comm() const { return comm_; }

  /// Work enqueued on @p waiter from now on starts after the work enqueued on @p first so
  /// far. Uses one of this rank's reusable events (waiting captures the event's state).
  void order(cudaStream_t first, cudaStream_t waiter);

 private:
  int device_;
  cudaStream_t codec_ = nullptr, comm_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

/// A device buffer that grows on demand and is otherwise reused: nothing is allocated per
/// call once the largest call has been seen.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  ~DeviceScratch();
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  /// At least @p bytes bytes (256-byte aligned). Growing first waits for @p users, the
  /// streams that may still read the old buffer.
  void* get(int64_t bytes, cudaStream_t user_a, cudaStream_t user_b);

 private:
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
};

/// Pinned host memory handed out in small slots for asynchronous host-device copies;
/// blocks are kept and reused (reset()), never freed while a copy may still target them.
class PinnedSlots {
 public:
  PinnedSlots() = default;
  ~PinnedSlots();
  PinnedSlots(const PinnedSlots&) = delete;
  PinnedSlots& operator=(const PinnedSlots&) = delete;
  /// A slot of @p bytes (at most kSlotBytes) valid until reset().
  void* take(int64_t bytes);
  /// Makes every slot available again; call when no copy into them is pending.
  void reset() { next_ = 0; }
  static constexpr int64_t kSlotBytes = 64;

 private:
  static constexpr int64_t kSlotsPerBlock = 1024;
  std::vector<void*> blocks_;
  int64_t next_ = 0;
};

/// KernelBackend over device memory. Every call is asynchronous on streams().codec().
class CudaBackend : public KernelBackend {
 public:
  explicit CudaBackend(std::shared_ptr<RankStreams> streams);

  void encode(const void* src, DType src_dtype, int64_t n, const Codec& codec, float divisor,
              const EncodeContext& ctx, void* dst) override;
  void decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                         bool assign) override;
  void decode(const void* src, int64_t n, const Codec& codec, void* out,
              DType out_dtype) override;
  void load_accumulate(const void* src, DType src_dtype, int64_t n, float* acc,
                       bool assign) override;
  // src and dst may be the same buffer (each family's hop kernels read a block before
  // writing it; see cuda_backend.cu).
  void decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                            const Codec& codec, float divisor, const EncodeContext& ctx,
                            void* dst) override;
  void finalize(const float* acc, int64_t n, float divisor, void* out,
                DType out_dtype) override;
  /// The executor's accumulators and wire buffers: device memory, reused across calls.
  /// Called once at the start of every collective.
  void* workspace(int64_t bytes) override;
  /// Host bytes to the device, on the codec stream (the source is staged at once).
  void write_bytes(void* dst, const void* src, int64_t bytes) override;
  /// Device bytes to pinned host memory on the comm stream, after the transfers issued there.
  const void* read_bytes(const void* src, int64_t bytes) override;
  bool reads_deferred() const override { return true; }
  /// Waits for the comm stream's work so far (not for the codec stream's).
  void finish_reads() override;
  /// Like read_bytes, after the codec stream's work so far as well (the comm stream waits
  /// for it): finish_reads() then also waits for the collective's last kernels.
  const void* read_results(const void* src, int64_t bytes) override;
  /// Both count into device memory on the codec stream (one atomic add per CUDA block).
  bool count_nonfinite(const void* src, DType t, int64_t n, int64_t* count) override;
  void feedback_residual(const float* v, const float* decoded, int64_t n, float* residual,
                         int64_t* count) override;

  RankStreams& streams() { return *streams_; }
  const std::shared_ptr<RankStreams>& shared_streams() const { return streams_; }

 private:
  /// The codec family's encode: of src, or with wire_in the hop (decode(wire_in) + src).
  void launch_encode(const void* src, DType src_dtype, const void* wire_in, int64_t n,
                     const Codec& codec, float divisor, const EncodeContext& ctx, void* dst);
  /// The codec family's decode into @p o (fp32 accumulators or a cast to a dtype).
  void launch_decode(const void* src, int64_t n, const Codec& codec, const DecodeOut& o);
  std::shared_ptr<RankStreams> streams_;
  DeviceScratch workspace_;
  PinnedSlots slots_;  // message headers in and out
  bool reads_finished_ = true;  // the last collective reached finish_reads()
};

}  // namespace ccompress::cuda
