// hier: a two-level all-reduce for nodes of G consecutive ranks.
//
// 1. Inside each node, a reduce-scatter (two_shot's first half) with the intra-node codec
//    (default none: exact): local rank l ends with the node's sum of shard l,
//    chunk_range(n, G, l), written into its own output at that shard's place.
// 2. Between nodes, the ranks with local index l all-reduce shard l in place with the call's
//    codec and any flat schedule (inter_algo), so every node holds the same bits of it.
// 3. Inside each node, an all-gather of the shards (intra-node codec again), in place.
// Every rank decodes the same bytes for every element, so all ranks end bit-identical. An
// element is quantized once inside the node on the way up (intra codec), by the flat
// schedule between nodes, and once more on the way down when the intra codec is lossy.
// avg divides by G inside and by the node count between nodes.
#include "collectives/hier.h"

#include <vector>

#include "ccompress/error.h"
#include "transport/sub_transport.h"

namespace ccompress {

namespace {

// Subgroup call numbers: a bit no parent call reaches, the parent call's number and the
// level, so that a late message of another call or level is never taken for this one's.
uint64_t level_call(uint64_t call, int level) {
  return (uint64_t(1) << 62) | (call << 2) | uint64_t(level);
}

void add(CollectiveStats& total, const CollectiveStats& s) {
  total.payload_bytes += s.payload_bytes;
  total.header_bytes += s.header_bytes;
  total.quantizations += s.quantizations;
  total.feedback_nonfinite += s.feedback_nonfinite;
}

}  // namespace

CollectiveStats hier_allreduce(Transport& t, KernelBackend& k, const void* in, void* out,
                               int64_t n, DType dtype, const Codec& codec,
                               const CollectiveOptions& opt, uint64_t call) {
  const int P = t.size(), r = t.rank(), G = opt.ranks_per_node;
  CC_CHECK(G >= 1, "algo 'hier' needs the ranks per node; got " << G);
  CC_CHECK_AS(Unsupported, P % G == 0,
              P << " ranks do not form nodes of " << G
                << " ranks each; algo 'hier' needs every node to have the same number of "
                   "ranks (use a flat algo)");
  CC_CHECK_AS(Unsupported, opt.inter_algo != Algo::Hier, "the inter-node algo must be flat");
  CC_CHECK_AS(Unsupported, !opt.feedback.any(),
              "error feedback is not defined for algo 'hier'; use algo='two_shot'");
  const int nodes = P / G, node = r / G, local = r % G;
  std::vector<int> node_ranks(static_cast<size_t>(G)), peers(static_cast<size_t>(nodes));
  for (int i = 0; i < G; ++i) node_ranks[size_t(i)] = node * G + i;
  for (int j = 0; j < nodes; ++j) peers[size_t(j)] = j * G + local;

  CollectiveOptions level = opt;
  level.algo = Algo::Auto;  // the intra-node levels have one schedule each
  level.ranks_per_node = 0;
  level.feedback = {};
  CollectiveStats total;
  total.algo = Algo::Hier;
  const auto [lo, hi] = chunk_range(n, G, local);
  char* shard = static_cast<char*>(out) + lo * int64_t(dtype_size(dtype));
  const void* between_in = in;
  void* between_out = out;
  int64_t between_n = n;
  if (G > 1) {
    // In place (in == out) is safe for local > 0 too: two_shot writes each slice of its own
    // shard only after its own encoding of that slice has read it.
    SubTransport intra(t, node_ranks, level_call(call, 0));
    CollectiveStats s = reduce_scatter(intra, k, in, shard, n, dtype, opt.intra_codec, level);
    add(total, s);
    total.nonfinite_in = s.nonfinite_in;
    between_in = between_out = shard;
    between_n = hi - lo;
  }
  if (nodes > 1) {
    SubTransport inter(t, peers, level_call(call, 1));
    level.algo = opt.inter_algo;
    CollectiveStats s = allreduce(inter, k, between_in, between_out, between_n, dtype, codec, level);
    add(total, s);
    if (G == 1) total.nonfinite_in = s.nonfinite_in;
    total.nonfinite_out = s.nonfinite_out;
  }
  if (G > 1) {
    SubTransport intra(t, node_ranks, level_call(call, 2));
    CollectiveStats s = allgather_chunks(intra, k, out, n, dtype, opt.intra_codec, level);
    add(total, s);
    total.nonfinite_out = s.nonfinite_out;
  }
  return total;
}

}  // namespace ccompress
