// A collective as a dependency graph of per-rank operations. Schedules (ring.cc,
// two_shot.cc, tree.cc, one_shot.cc, allgather.cc, alltoall.cc) build a Plan with
// PlanBuilder; the executor (executor.cc) is the only code that runs one.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ccompress/codec.h"
#include "ccompress/common.h"
#include "ccompress/collectives.h"
#include "collectives/header_check.h"

namespace ccompress {

/// Which buffer an operand lives in. Offsets count elements for Input/Output (in the
/// user dtype) and Acc (float32), bytes for Wire (encoded scratch).
enum class BufKind : uint8_t { Input, Output, Acc, Wire };

struct BufRef {
  BufKind kind = BufKind::Wire;
  int64_t offset = 0;
};

enum class OpKind : uint8_t {
  Send,                ///< send wire bytes to `peer`
  Recv,                ///< receive wire bytes from `peer`
  Encode,              ///< dst(Wire) <- encode(src(Input|Acc) / divisor)
  DecodeAcc,           ///< dst(Acc) (=|+=) decode(src(Wire))
  LoadAcc,             ///< dst(Acc) (=|+=) float(src(Input))
  DecodeReduceEncode,  ///< dst(Wire) <- encode((decode(src(Wire)) + x(Input)) / divisor)
  Finalize,            ///< dst(Output) <- cast(src(Acc) / divisor)
  DecodeOut,           ///< dst(Output) <- cast(decode(src(Wire)))
};

/// Which error-feedback residual an Encode folds in and updates.
enum class Feedback : uint8_t { None, Worker, Server };

struct Op {
  OpKind kind = OpKind::Send;
  int64_t n = 0;  ///< elements
  BufRef src, dst, x;
  int peer = -1;
  int tag = 0;
  int64_t index = 0;  ///< encodes: global element index of the run (stochastic rounding)
  bool assign = false;
  float divisor = 1.f;
  std::vector<int32_t> deps;  ///< ops that must complete first (always earlier indices)
  Feedback feedback = Feedback::None;  ///< Encode: v = src/divisor + residual is encoded
  int64_t residual_off = 0;            ///< element offset into that residual
  uint8_t codec = 0;  ///< index into Plan::codecs of the codec the op's wire bytes use
};

struct Plan {
  std::vector<Op> ops;
  int64_t acc_elems = 0;
  int64_t wire_bytes = 0;
  int quantizations = 0;
  /// Acc offset of 2 * slice_elems floats of error-feedback scratch (-1: none). Compute
  /// ops run one at a time, so every feedback Encode shares it.
  int64_t feedback_scratch = -1;
  /// The codecs ops refer to (Op::codec); empty: every op uses the call's codec. Only the
  /// hierarchical plans (hier.cc) use two: slot 0 between nodes, slot 1 inside a node.
  std::vector<Codec> codecs;
};

/// What a schedule needs to know about the call.
struct PlanContext {
  int rank = 0;
  int size = 1;
  int64_t n = 0;  ///< elements in this rank's input
  DType dtype = DType::Float32;
  Codec codec;    ///< bound to dtype
  int64_t slice_elems = kDefaultSliceElems;  ///< multiple of codec.align()
  ReduceOp op = ReduceOp::Sum;
  bool inplace = false;  ///< input and output are the same buffer
  bool worker_feedback = false;  ///< every encode of Input folds in the worker residual
  bool server_feedback = false;  ///< every encode of Acc folds in the server residual
  /// Hierarchical plans (algo Hier): consecutive blocks of this many ranks form a node, and
  /// intra_codec (bound to dtype) is the codec inside one; 0 for the flat schedules.
  int ranks_per_node = 0;
  Codec intra_codec;
  /// All-to-all (alltoall.cc): element j of send_splits is what this rank sends to rank j,
  /// of recv_splits what it receives from rank j, as the call check agreed them
  /// (check_alltoall_call). n is then the largest piece any rank sends, the same on every
  /// rank, which bounds the slices of every message's tag.
  std::vector<int64_t> send_splits, recv_splits;
};

/// Appends operations to a Plan, allocating scratch and keeping in-place calls safe: when
/// the context is in place, every write to Output waits for the earlier reads of Input
/// that overlap it.
class PlanBuilder {
 public:
  explicit PlanBuilder(const PlanContext& ctx);

  /// [begin, end) cut into slices of ctx.slice_elems elements (the last one shorter).
  std::vector<std::pair<int64_t, int64_t>> slices(int64_t begin, int64_t end) const;
  /// The slices of each of the ctx.size chunks (chunk_range), and in @p most the largest
  /// number of slices of any chunk.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> chunk_slices(size_t& most) const;
  /// A unique tag for (step, chunk, slice); both ends of a message compute the same one.
  int tag(int step, int chunk, int64_t slice) const;
  /// The slice index a tag of this context carries (tag_slice(tag(t, c, s)) == s).
  static int64_t tag_slice(const PlanContext& ctx, int tag);

  /// Ops added from now on, and wire buffers allocated, use the codec of @p slot: 0 is
  /// ctx.codec; add_codec appends another (its align() must divide ctx.slice_elems).
  int add_codec(const Codec& codec);
  void use_codec(int slot);

  int64_t alloc_wire(int64_t elems);  ///< byte offset of a new wire buffer for elems
  int64_t alloc_acc(int64_t elems);   ///< element offset of a new accumulator

  int send(int peer, int64_t wire_off, int64_t elems, int tag, std::vector<int32_t> deps);
  int recv(int peer, int64_t wire_off, int64_t elems, int tag, std::vector<int32_t> deps = {});
  int encode_input(int64_t in_off, int64_t elems, int64_t wire_off, float divisor,
                   std::vector<int32_t> deps = {});
  int encode_acc(int64_t acc_off, int64_t elems, int64_t elem_index, int64_t wire_off,
                 float divisor, std::vector<int32_t> deps);
  int decode_acc(int64_t wire_off, int64_t elems, int64_t acc_off, bool assign,
                 std::vector<int32_t> deps);
  int load_acc(int64_t in_off, int64_t elems, int64_t acc_off, bool assign,
               std::vector<int32_t> deps = {});
  int decode_reduce_encode(int64_t wire_in, int64_t in_off, int64_t elems, int64_t wire_out,
                           float divisor, std::vector<int32_t> deps);
  int finalize(int64_t acc_off, int64_t elems, int64_t out_off, float divisor,
               std::vector<int32_t> deps);
  int decode_out(int64_t wire_off, int64_t elems, int64_t out_off, std::vector<int32_t> deps);

  /// acc <- the sum over p = 0..wire.size()-1 (the ranks, or a hierarchical plan's nodes or
  /// local ranks), in that order, of decode(wire[p]), each term once ready[p] has run: the
  /// fixed order keeps every rank's bits equal whatever arrives first. Returns the last op.
  int sum_in_rank_order(const std::vector<int64_t>& wire, const std::vector<int>& ready,
                        int64_t elems, int64_t acc);

  /// The all-gather of slice @p s of chunked data (@p chunks from chunk_slices): this
  /// rank's encoding of its own slice s (wire @p own_wire, written by op @p own_op; -1:
  /// it has no slice s) goes to every other rank and into its own output, decoded like
  /// theirs; every other rank's slice s is received and decoded into place.
  void share_slice(const std::vector<std::vector<std::pair<int64_t, int64_t>>>& chunks,
                   size_t s, int step, int64_t own_wire, int own_op);

  /// Divisor applied before the last quantization: the rank count for avg, else 1.
  float avg_divisor() const;
  const PlanContext& ctx() const { return ctx_; }
  Plan finish(int quantizations);

 private:
  int add(Op op);
  void with_feedback(Op& op, Feedback which, int64_t residual_off);
  void note_input_read(int id, int64_t off, int64_t elems);
  void order_after_input_reads(Op& op, int64_t off, int64_t elems);

  PlanContext ctx_;
  Plan plan_;
  std::vector<Codec> codecs_;
  int codec_slot_ = 0;
  std::vector<std::pair<int64_t, int64_t>> input_read_ranges_;
  std::vector<int32_t> input_read_ops_;
};

/// The plan of @p kind (and, for allreduce, @p algo, which Auto resolves first) for
/// ctx.rank; sets @p ran to the schedule that runs.
Plan build_plan(CollectiveKind kind, Algo algo, const PlanContext& ctx, Algo& ran);

/// Schedules: each returns this rank's plan.
Plan build_ring(const PlanContext& ctx);
Plan build_two_shot(const PlanContext& ctx, bool reduce_scatter_only);
Plan build_tree(const PlanContext& ctx);
Plan build_one_shot(const PlanContext& ctx);
Plan build_allgather(const PlanContext& ctx);
/// In place over ctx.n elements: chunk chunk_range(n, size, rank) of every rank, to all.
Plan build_allgather_chunks(const PlanContext& ctx);
/// Each rank's piece for each rank (ctx.splits), encoded once on its own, to that rank; the
/// pieces received from every rank decoded into place, this rank's own piece included.
Plan build_alltoall(const PlanContext& ctx);
/// The hierarchical schedule of @p kind (hier.cc) for nodes of ctx.ranks_per_node ranks:
/// intra-node and inter-node steps of every slice in one plan, so that they overlap.
Plan build_hier(CollectiveKind kind, const PlanContext& ctx);
/// One rank: every algorithm is out <- decode(encode(in / divisor)).
Plan build_single(const PlanContext& ctx);

}  // namespace ccompress
