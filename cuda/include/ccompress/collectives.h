/// @file collectives.h
/// @brief Compressed collectives over any Transport and KernelBackend.
///
/// Every call first exchanges a small header with all peers (count, dtype, codec, algo,
/// op, collective kind), so a mismatch between ranks raises MismatchError on every rank
/// before any payload moves. Results are bit-identical on all ranks and deterministic.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/kernel_backend.h"
#include "ccompress/transport.h"

namespace ccompress {

/// Error-feedback residuals of one tensor on this rank (float32, in the kernel backend's
/// memory: device memory for the CUDA backend; null for none). They are per-rank state:
/// each rank's residuals differ. `worker` (n elements) is added to the input before its
/// first quantization and keeps what that quantization lost; `server`
/// (the elements of this rank's chunk, chunk_range(n, size, rank)) is added to the owner's
/// sum before two_shot re-quantizes it. Supported by allreduce with two_shot and one_shot
/// (worker only: one quantization) and by reduce_scatter (worker only).
struct ErrorFeedbackBuffers {
  float* worker = nullptr;
  float* server = nullptr;
  bool any() const { return worker != nullptr || server != nullptr; }
};

struct CollectiveOptions {
  Algo algo = Algo::Auto;
  ReduceOp op = ReduceOp::Sum;
  /// Elements per pipelined slice; 0 picks the transport's default
  /// (Transport::default_slice_elems: MPI 262144, else kDefaultSliceElems), rounded up to a
  /// multiple of the codec's scale group.
  int64_t slice_elems = 0;
  /// Seconds without progress before a collective gives up with TimeoutError.
  double timeout_s = 300.0;
  /// Stochastic rounding: noise is a hash of (seed, step, rank, element index).
  uint64_t seed = 0;
  uint64_t step = 0;
  ErrorFeedbackBuffers feedback;
  /// algo == Hier: consecutive blocks of `ranks_per_node` ranks form a node (the size must
  /// be a multiple of it). The call's codec is used between nodes, by the flat schedule
  /// `inter_algo` (Auto: by size and node count); `intra_codec` (default none: exact)
  /// inside a node, for the reduce-scatter and the all-gather.
  int ranks_per_node = 0;
  Algo inter_algo = Algo::Auto;
  Codec intra_codec;
  /// alltoall only, in elements: in_splits[j] of this rank's input go to rank j (in rank
  /// order, from the start of the input), out_splits[j] from rank j land in the output (in
  /// rank order). Empty: n / size elements to and from every rank. out_elems is the output
  /// buffer's size (-1: the sum of out_splits, or n with equal splits).
  std::vector<int64_t> in_splits;
  std::vector<int64_t> out_splits;
  int64_t out_elems = -1;
};

/// What a collective did, for reporting.
struct CollectiveStats {
  Algo algo = Algo::Auto;    ///< the schedule that ran (never Auto)
  int64_t payload_bytes = 0; ///< bytes this rank sent, headers excluded
  int64_t header_bytes = 0;  ///< bytes of the call-check and message headers this rank sent
  int quantizations = 0;     ///< times each element was encoded on its way to the result
  /// NaN/+-Inf elements in this rank's input and in its output (-1: the backend does not
  /// count). Outputs of all-reduce and all-gather are equal on all ranks, so are their counts.
  int64_t nonfinite_in = 0;
  int64_t nonfinite_out = 0;
  int64_t feedback_nonfinite = 0;  ///< NaN/Inf kept out of the error-feedback residuals
};

/// Element range [first, second) of chunk @p index when @p n elements are cut into
/// @p parts chunks whose sizes differ by at most one.
std::pair<int64_t, int64_t> chunk_range(int64_t n, int parts, int index);

/// The schedule `Algo::Auto` resolves to for this call.
Algo choose_algo(int64_t n, DType dtype, const Codec& codec, int nranks);

/// out[0:n) <- reduce over ranks of in[0:n). @p in and @p out may be the same buffer.
/// With opt.algo == Algo::Hier the reduction runs in two levels (CollectiveOptions).
CollectiveStats allreduce(Transport& t, KernelBackend& k, const void* in, void* out, int64_t n,
                          DType dtype, const Codec& codec, const CollectiveOptions& opt);

/// out <- this rank's chunk (chunk_range(n, size, rank)) of the reduction of in[0:n).
/// Two-shot's first half: every element is quantized once.
CollectiveStats reduce_scatter(Transport& t, KernelBackend& k, const void* in, void* out,
                               int64_t n, DType dtype, const Codec& codec,
                               const CollectiveOptions& opt);

/// out[r*n:(r+1)*n) <- decode(encode(in of rank r)) for every rank r, this one included.
CollectiveStats allgather(Transport& t, KernelBackend& k, const void* in, void* out, int64_t n,
                          DType dtype, const Codec& codec, const CollectiveOptions& opt);

/// Every rank sends piece j of its input (opt.in_splits[j] elements) to rank j, which writes
/// decode(encode(piece)) at its place in the output (offsets: prefix sums of out_splits).
/// Each piece is encoded once, on its own (scales never shared with another rank's piece),
/// the piece a rank sends to itself too, so a rank receives the same bits from itself as
/// from a peer. Every rank learns every rank's splits first: splits that do not add up to
/// the buffers (InvalidArgument) or disagree between sender and receiver (MismatchError)
/// raise on every rank before any payload moves. No error feedback, no in-place call.
CollectiveStats alltoall(Transport& t, KernelBackend& k, const void* in, void* out, int64_t n,
                         DType dtype, const Codec& codec, const CollectiveOptions& opt);

}  // namespace ccompress
