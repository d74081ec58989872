/// @file kernel_backend.h
/// @brief The compute half of a collective: codec and reduction kernels over raw buffers.
///
/// Every function works on one slice of n elements. Wire buffers hold exactly
/// codec.wire_bytes(n) bytes (see codec.h); accumulators are always float32. The CPU and
/// CUDA backends call the same math in cuda/src/codecs, so their results are bit-identical.
/// All codecs passed here are bound (Codec::bind).
#pragma once

#include <cstdint>
#include <cstring>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/error.h"

namespace ccompress {

/// Where a run of elements sits in its collective. Codecs with stochastic rounding draw the
/// noise of element i of the run from a hash of (seed, step, rank, index + i), so a result
/// is reproducible whatever the slicing; other codecs ignore it.
struct EncodeContext {
  uint64_t seed = 0;   ///< the communicator's seed
  uint64_t step = 0;   ///< the collective's sequence number (or the caller's step)
  int32_t rank = 0;    ///< the encoding rank
  int64_t index = 0;   ///< global element index of the run's first element
};

class CC_API KernelBackend {
 public:
  virtual ~KernelBackend() = default;

  /// dst <- encode(src / divisor). @p src holds n elements of @p src_dtype.
  /// divisor is 1 except where an average is taken before the last quantization.
  virtual void encode(const void* src, DType src_dtype, int64_t n, const Codec& codec,
                      float divisor, const EncodeContext& ctx, void* dst) = 0;

  /// acc <- decode(src) when @p assign, else acc += decode(src).
  virtual void decode_accumulate(const void* src, int64_t n, const Codec& codec, float* acc,
                                 bool assign) = 0;

  /// out <- cast(decode(src)) to @p out_dtype (round-to-nearest-even).
  virtual void decode(const void* src, int64_t n, const Codec& codec, void* out,
                      DType out_dtype) = 0;

  /// acc <- float(src) when @p assign, else acc += float(src).
  virtual void load_accumulate(const void* src, DType src_dtype, int64_t n, float* acc,
                               bool assign) = 0;

  /// One ring hop fused: t = decode(src) + float(x); dst <- encode(t / divisor).
  /// The sum is formed as decode(src) + x, in that order.
  virtual void decode_reduce_encode(const void* src, const void* x, DType x_dtype, int64_t n,
                                    const Codec& codec, float divisor, const EncodeContext& ctx,
                                    void* dst) = 0;

  /// out <- cast(acc / divisor) to @p out_dtype.
  virtual void finalize(const float* acc, int64_t n, float divisor, void* out,
                        DType out_dtype) = 0;

  /// Scratch of at least @p bytes (256-byte aligned) in the memory this backend's kernels
  /// work on, owned by the backend and reused by its next call. The default is host memory,
  /// one block per calling thread (a rank's thread, or a communicator's async worker), grown
  /// to the largest request and kept until the thread ends: a fresh block per call would be
  /// page-faulted in again every time, which at 64 MiB cost more than the FP8 codec. Device
  /// backends return device memory here.
  virtual void* workspace(int64_t bytes);

  /// dst (this backend's memory) <- @p bytes host bytes at @p src, ordered before the work
  /// issued after it; @p src may be reused at once. Message headers go through here.
  virtual void write_bytes(void* dst, const void* src, int64_t bytes) {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }
  /// A host copy of @p bytes at @p src (this backend's memory), read after the transfers
  /// issued so far. Host backends return @p src itself; when reads_deferred(), the copy is
  /// valid only once finish_reads() has returned, until the backend's next collective.
  virtual const void* read_bytes(const void* src, int64_t bytes) {
    (void)bytes;
    return src;
  }
  virtual bool reads_deferred() const { return false; }
  virtual void finish_reads() {}

  /// A host copy of @p bytes at @p src (this backend's memory), read after every kernel and
  /// transfer issued so far: the executor's counters at the end of a collective. Valid once
  /// finish_reads() has returned when reads_deferred(). Host backends return @p src itself.
  virtual const void* read_results(const void* src, int64_t bytes) { return read_bytes(src, bytes); }

  /// Adds the number of NaN and +-Inf among @p n elements of @p src (dtype @p t) to *count,
  /// an int64 in this backend's memory, for the per-call report of the NaN/Inf policy; the
  /// executor calls it on a slice right after reading it from the input or writing it to
  /// the output, and reads its counters back once at the end (read_results). Returns false,
  /// counting nothing, when this backend does not count.
  virtual bool count_nonfinite(const void* src, DType t, int64_t n, int64_t* count) {
    (void)src, (void)t, (void)n, (void)count;
    return false;
  }

  /// Error feedback: residual[i] <- v[i] - decoded[i] where v[i], decoded[i] and their
  /// difference are finite, else 0 (a NaN or Inf never enters a residual; the rule is
  /// codecs::feedback_residual_of). Adds how many elements were set to 0 that way to *count
  /// (an int64 in this backend's memory, like count_nonfinite's). All three buffers hold n
  /// float32.
  virtual void feedback_residual(const float* v, const float* decoded, int64_t n,
                                 float* residual, int64_t* count) {
    (void)v, (void)decoded, (void)n, (void)residual, (void)count;
    CC_CHECK_AS(Unsupported, false, "this kernel backend has no error feedback; "
                                    "run without error_feedback");
  }
};

}  // namespace ccompress
