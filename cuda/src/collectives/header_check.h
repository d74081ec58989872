// The mismatch check every collective starts with: each rank sends a small fixed-size
// description of the call to every peer, so a disagreement (count, dtype, codec, algo, op,
// kind of collective) is seen by all ranks alike and reported on every one of them before
// any payload moves. The exchange itself has the same shape on every rank whatever the
// arguments, so it cannot deadlock.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/transport.h"

namespace ccompress {

/// AllGatherChunks: the all-gather half of two_shot, in place: each rank's chunk
/// (chunk_range(count, size, rank)) of the buffer reaches every rank (collectives/hier.cc).
enum class CollectiveKind : uint8_t {
  AllReduce = 1,
  ReduceScatter = 2,
  AllGather = 3,
  AllGatherChunks = 4,
  AllToAll = 5
};

struct CallDescription {
  CollectiveKind kind = CollectiveKind::AllReduce;
  int64_t count = 0;
  DType dtype = DType::Float32;
  Codec codec;
  Algo algo = Algo::Auto;  ///< as requested, before auto resolves it
  ReduceOp op = ReduceOp::Sum;
  int64_t slice_elems = 0;
  int32_t ranks_per_node = 0;  ///< algo == Hier only
  Algo inter_algo = Algo::Auto;  ///< algo == Hier only
};

/// Exchanges @p mine with all peers; throws MismatchError on every rank if any differ.
/// Returns the bytes this rank sent.
int64_t check_same_call(Transport& t, const CallDescription& mine, double timeout_s);

/// The all-to-all's second check, once check_same_call has passed: every rank sends its
/// splits (in elements; empty: equal pieces) and buffer sizes to every peer, and all ranks
/// judge the full table alike. Throws InvalidArgument on every rank when a rank's splits are
/// negative, not one per rank, or do not add up to its buffer (equal splits: a buffer that
/// does not divide by the rank count), and MismatchError when what rank i sends to rank j
/// differs from what j expects from i. Returns the agreed matrix: element [i * size + j] is
/// what rank i sends to rank j. @p bytes_sent grows by the bytes this rank sent.
std::vector<int64_t> agree_on_splits(Transport& t, int64_t n_in, int64_t n_out,
                                     const std::vector<int64_t>& in_splits,
                                     const std::vector<int64_t>& out_splits, double timeout_s,
                                     int64_t& bytes_sent);

}  // namespace ccompress
