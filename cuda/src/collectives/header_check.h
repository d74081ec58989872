// The mismatch check every collective starts with: each rank sends a small fixed-size
// description of the call to every peer, so a disagreement (count, dtype, codec, algo, op,
// kind of collective) is seen by all ranks alike and reported on every one of them before
// any payload moves. An all-to-all's header carries a summary of its splits as well
// (check_alltoall_call), so its split table is checked in the same round. The exchange
// itself has the same shape on every rank whatever the arguments, so it cannot deadlock.
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
  /// AllToAll only (check_alltoall_call fills them): the largest piece this rank sends, -1
  /// where its splits are bad, and its share of the split table's checksum. They differ
  /// between ranks, so the comparison of calls leaves them out.
  int64_t largest_piece = 0;
  uint64_t split_share = 0;
};

/// Exchanges @p mine with all peers; throws MismatchError on every rank if any differ.
/// Returns the bytes this rank sent.
int64_t check_same_call(Transport& t, const CallDescription& mine, double timeout_s);

/// What an all-to-all's call check settles about this rank's pieces, in elements.
struct AgreedSplits {
  std::vector<int64_t> send;  ///< [j]: what this rank sends to rank j
  std::vector<int64_t> recv;  ///< [i]: what this rank receives from rank i
  int64_t largest = 0;        ///< the largest piece any rank sends (bounds every message's tag)
};

/// The all-to-all's call check: check_same_call with this rank's splits folded into its
/// header, so that one round of messages comes before the data. @p in_splits and
/// @p out_splits are in elements (empty: equal pieces of @p n_in / @p n_out). Each rank's
/// header carries the largest piece it sends (-1: its splits are not one per rank,
/// negative, or do not add up to its buffer) and its share of a checksum of the split table
/// (a 64-bit hash of every (sender, receiver, elements) entry it sends, minus one of every
/// entry it expects): the shares add up to 0 exactly when every rank's in_splits[j] equals
/// rank j's out_splits entry for it. Every rank judges the same headers, so where a rank's
/// splits are bad or the shares do not add up, every rank sends its full split row to every
/// peer (a second round, on that path only) and all raise the same error naming the ranks:
/// InvalidArgument for splits that do not add up, MismatchError for what rank i sends to
/// rank j differing from what j expects from i. A disagreement the checksum misses (odds
/// about 2^-64) still meets the message header's count check where the piece arrives.
/// @p bytes_sent grows by the bytes this rank sent.
AgreedSplits check_alltoall_call(Transport& t, CallDescription call, int64_t n_in,
                                 int64_t n_out, const std::vector<int64_t>& in_splits,
                                 const std::vector<int64_t>& out_splits, double timeout_s,
                                 int64_t& bytes_sent);

}  // namespace ccompress
