// hier: two-level collectives for nodes of G consecutive ranks (P = nodes * G).
//
// One plan (build_hier), for allreduce with inter_algo two_shot or auto, reduce_scatter and
// allgather. Chunk c = chunk_range(n, P, c) belongs to rank c (node c / G, local c % G); in
// each node, the rank with local index c % G collects it. Per slice of every chunk:
// 1. inside the node, every rank encodes its slice with the intra-node codec (default none:
//    exact) and sends it to the collector, which sums the G contributions in local order;
// 2. between nodes, each collector encodes its node's sum with the call's codec and sends it
//    to the owner, which sums the node contributions in node order (reduce_scatter ends
//    here, finalized into the output);
// 3. allreduce: the owner encodes the sum once more (call's codec; with one node, the intra
//    codec) and sends it to its node and to the ranks of its local index in the other
//    nodes, which forward the same bytes inside their nodes. Every rank decodes the owner's bytes: all ranks end bit-identical.
// Because the levels of every slice are steps of one plan, the executor overlaps them: the
// inter-node transfer of one slice runs while the node sums the next. An element is encoded
// once inside its node (intra codec, when G > 1), once between nodes (when nodes > 1) and,
// for allreduce, once for the result. allgather: each rank's input is encoded once (call's
// codec) and reaches the other nodes once per node, forwarded inside them.
//
// hier_allreduce: the leveled all-reduce for the other inter-node algos (ring, tree,
// one_shot): three collectives over subgroup transports (transport/sub_transport.h), one
// after the other.
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
#include "collectives/plan.h"
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

namespace {

constexpr int kStepIntra = 0;    // slices to their node's collector (intra codec)
constexpr int kStepInter = 1;    // node sums to the chunk's owner (call's codec)
constexpr int kStepResult = 2;   // the owner's encoding of the result, or an allgather input
constexpr int kStepForward = 3;  // those bytes, forwarded inside a node
constexpr int kInter = 0, kIntra = 1;  // codec slots

struct Nodes {
  int G, nodes, node, local;
  int rank(int j, int l) const { return j * G + l; }
};

// Bytes @p wire (ready after @p ready) from rank @p from, with tag (@p step, @p c, @p s),
// go to the other ranks of this node.
void forward_in_node(PlanBuilder& b, const Nodes& t, int64_t wire, int64_t len, int ready,
                     int c, size_t s) {
  for (int k = 1; k < t.G; ++k)
    b.send(t.rank(t.node, (t.local + k) % t.G), wire, len, b.tag(kStepForward, c, int64_t(s)),
           {ready});
}

// The result's slice [lo, hi) of chunk c, encoded by its owner: received (directly or
// forwarded inside this node) and decoded into out[out_base + lo ...].
void receive_result(PlanBuilder& b, const Nodes& t, int c, size_t s, int64_t lo, int64_t hi,
                    int64_t out_base) {
  const int owner_node = c / t.G, owner_local = c % t.G;
  const int64_t len = hi - lo;
  int64_t w = b.alloc_wire(len);
  int rv;
  if (owner_node == t.node || owner_local == t.local) {
    rv = b.recv(c, w, len, b.tag(kStepResult, c, int64_t(s)));
    if (owner_node != t.node) forward_in_node(b, t, w, len, rv, c, s);
  } else {
    rv = b.recv(t.rank(t.node, owner_local), w, len, b.tag(kStepForward, c, int64_t(s)));
  }
  b.decode_out(w, len, out_base + lo, {rv});
}

// The owner's encoding (wire @p w, op @p e) of chunk c's slice s: to this node and to the
// ranks of this local index in the other nodes; decoded into its own output too.
void send_result(PlanBuilder& b, const Nodes& t, int c, size_t s, int64_t w, int64_t len, int e) {
  const int tag = b.tag(kStepResult, c, int64_t(s));
  for (int k = 1; k < t.nodes; ++k) b.send(t.rank((t.node + k) % t.nodes, t.local), w, len, tag, {e});
  for (int k = 1; k < t.G; ++k) b.send(t.rank(t.node, (t.local + k) % t.G), w, len, tag, {e});
}

Plan build_hier_reduce(const PlanContext& ctx, bool reduce_scatter_only) {
  PlanBuilder b(ctx);
  const int P = ctx.size, G = ctx.ranks_per_node;
  const Nodes t{G, P / G, ctx.rank / G, ctx.rank % G};
  const int intra = b.add_codec(ctx.intra_codec);
  const bool exact_inside = !ctx.intra_codec.lossy(ctx.dtype);
  const int result = t.nodes > 1 ? kInter : intra;  // one node: the result stays inside it
  size_t max_s = 0;
  const auto chunks = b.chunk_slices(max_s);
  const int64_t own_begin = chunk_range(ctx.n, P, ctx.rank).first;
  for (size_t s = 0; s < max_s; ++s) {
    for (int k = 0; k < P; ++k) {
      // This rank's slice s of chunk c: to the node's collector of c, or this rank's own
      // contribution when it collects c.
      const int c = (ctx.rank + 1 + k) % P;  // next ranks first: collectors are not all served at once
      if (s >= chunks[size_t(c)].size()) continue;
      auto [lo, hi] = chunks[size_t(c)][s];
      const int64_t len = hi - lo;
      const int owner_node = c / G, collector_local = c % G;
      std::vector<int64_t> node_wire(size_t(G), -1);
      std::vector<int> node_ready(size_t(G), -1);
      if (G > 1) {
        b.use_codec(intra);
        if (collector_local != t.local) {
          int64_t w = b.alloc_wire(len);
          int e = b.encode_input(lo, len, w, 1.f);
          b.send(t.rank(t.node, collector_local), w, len, b.tag(kStepIntra, c, int64_t(s)), {e});
          continue;
        }
        for (int l = 0; l < G; ++l) {
          if (l == t.local) continue;
          node_wire[size_t(l)] = b.alloc_wire(len);
          node_ready[size_t(l)] =
              b.recv(t.rank(t.node, l), node_wire[size_t(l)], len, b.tag(kStepIntra, c, int64_t(s)));
        }
        if (!exact_inside) {
          node_wire[size_t(t.local)] = b.alloc_wire(len);
          node_ready[size_t(t.local)] = b.encode_input(lo, len, node_wire[size_t(t.local)], 1.f);
        }
      }
      // Collector of c in this node (with G == 1 every rank, its input the node's sum): the
      // node's sum in local order, then on to the owner. A lossless intra codec's own term
      // is the input itself (the same bits as its decoded encoding, without the copy).
      int64_t node_acc = -1;
      int node_sum = -1;
      if (G > 1) {
        node_acc = b.alloc_acc(len);
        for (int l = 0; l < G; ++l) {
          std::vector<int32_t> deps;
          if (node_sum >= 0) deps.push_back(node_sum);
          if (node_wire[size_t(l)] < 0) {
            node_sum = b.load_acc(lo, len, node_acc, l == 0, deps);
          } else {
            deps.push_back(node_ready[size_t(l)]);
            node_sum = b.decode_acc(node_wire[size_t(l)], len, node_acc, l == 0, deps);
          }
        }
      }
      b.use_codec(kInter);
      std::vector<int64_t> wire(size_t(t.nodes), -1);
      std::vector<int> ready(size_t(t.nodes), -1);
      int64_t acc = node_acc;
      int sum = node_sum;
      if (t.nodes > 1) {
        int64_t w = b.alloc_wire(len);
        int e = G > 1 ? b.encode_acc(node_acc, len, lo, w, 1.f, {node_sum})
                      : b.encode_input(lo, len, w, 1.f);
        if (owner_node != t.node) {
          b.send(c, w, len, b.tag(kStepInter, c, int64_t(s)), {e});
          continue;
        }
        for (int j = 0; j < t.nodes; ++j) {
          if (j == t.node) continue;
          wire[size_t(j)] = b.alloc_wire(len);
          ready[size_t(j)] = b.recv(t.rank(j, t.local), wire[size_t(j)], len,
                                    b.tag(kStepInter, c, int64_t(s)));
        }
        wire[size_t(t.node)] = w;
        ready[size_t(t.node)] = e;
        acc = b.alloc_acc(len);
        sum = b.sum_in_rank_order(wire, ready, len, acc);
      }
      // Owner of c: its sum over all ranks.
      if (reduce_scatter_only) {
        b.finalize(acc, len, lo - own_begin, b.avg_divisor(), {sum});
      } else {
        b.use_codec(result);
        int64_t w = b.alloc_wire(len);
        int e = b.encode_acc(acc, len, lo, w, b.avg_divisor(), {sum});
        send_result(b, t, c, s, w, len, e);
        b.decode_out(w, len, lo, {e});
      }
    }
    if (reduce_scatter_only) continue;
    b.use_codec(result);
    for (int k = 1; k < P; ++k) {
      const int c = (ctx.rank + P - k) % P;
      if (s >= chunks[size_t(c)].size()) continue;
      auto [lo, hi] = chunks[size_t(c)][s];
      receive_result(b, t, c, s, lo, hi, 0);
    }
  }
  const int q = (G > 1 ? 1 : 0) + (t.nodes > 1 ? 1 : 0) + (reduce_scatter_only ? 0 : 1);
  return b.finish(q);
}

Plan build_hier_allgather(const PlanContext& ctx) {
  PlanBuilder b(ctx);
  const int P = ctx.size, G = ctx.ranks_per_node, r = ctx.rank;
  const Nodes t{G, P / G, r / G, r % G};
  const auto all_slices = b.slices(0, ctx.n);
  for (size_t s = 0; s < all_slices.size(); ++s) {
    auto [lo, hi] = all_slices[s];
    const int64_t len = hi - lo;
    int64_t w = b.alloc_wire(len);
    int e = b.encode_input(lo, len, w, 1.f);
    send_result(b, t, r, s, w, len, e);
    b.decode_out(w, len, int64_t(r) * ctx.n + lo, {e});
    for (int k = 1; k < P; ++k) receive_result(b, t, (r + P - k) % P, s, lo, hi, int64_t((r + P - k) % P) * ctx.n);
  }
  return b.finish(1);
}

}  // namespace

void check_hier(CollectiveKind kind, int size, const CollectiveOptions& opt) {
  const int G = opt.ranks_per_node;
  CC_CHECK(G >= 1, "algo 'hier' needs the ranks per node; got " << G);
  CC_CHECK_AS(Unsupported, size % G == 0,
              size << " ranks do not form nodes of " << G
                   << " ranks each; algo 'hier' needs every node to have the same number of "
                      "ranks (use a flat algo)");
  CC_CHECK_AS(Unsupported, opt.inter_algo != Algo::Hier, "the inter-node algo must be flat");
  CC_CHECK_AS(Unsupported, !opt.feedback.any(),
              "error feedback is not defined for algo 'hier'; use algo='two_shot'");
  CC_CHECK_AS(Unsupported, kind == CollectiveKind::AllReduce || hier_in_one_plan(opt),
              "reduce_scatter and allgather with algo 'hier' have one inter-node schedule "
              "(two_shot's); inter_algo '" << algo_name(opt.inter_algo) << "' applies to allreduce only");
}

bool hier_in_one_plan(const CollectiveOptions& opt) {
  return opt.inter_algo == Algo::Auto || opt.inter_algo == Algo::TwoShot;
}

Plan build_hier(CollectiveKind kind, const PlanContext& ctx) {
  CC_CHECK(ctx.ranks_per_node >= 1 && ctx.size % ctx.ranks_per_node == 0,
           "no nodes of " << ctx.ranks_per_node << " ranks in " << ctx.size);
  if (kind == CollectiveKind::AllGather) return build_hier_allgather(ctx);
  CC_CHECK(kind == CollectiveKind::AllReduce || kind == CollectiveKind::ReduceScatter,
           "no hierarchical schedule for this collective");
  return build_hier_reduce(ctx, kind == CollectiveKind::ReduceScatter);
}

CollectiveStats hier_allreduce(Transport& t, KernelBackend& k, const void* in, void* out,
                               int64_t n, DType dtype, const Codec& codec,
                               const CollectiveOptions& opt, uint64_t call) {
  const int P = t.size(), r = t.rank(), G = opt.ranks_per_node;
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
