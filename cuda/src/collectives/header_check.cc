#include "collectives/header_check.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "ccompress/error.h"

namespace ccompress {

namespace {

constexpr uint32_t kMagic = 0x43435031;  // "CCP1"
constexpr uint32_t kVersion = 1;
constexpr int kHeaderTag = 0;

struct WireHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t kind;
  uint32_t dtype;
  int64_t count;
  uint32_t codec_id;
  uint32_t algo;
  uint32_t op;
  uint32_t topology;  // algo == hier: ranks per node | inter-node algo << 24; else 0
  int64_t slice_elems;
  char codec_name[32];
};

WireHeader pack(const CallDescription& d) {
  WireHeader h;
  std::memset(&h, 0, sizeof h);
  h.magic = kMagic;
  h.version = kVersion;
  h.kind = uint32_t(d.kind);
  h.dtype = uint32_t(d.dtype);
  h.count = d.count;
  h.codec_id = d.codec.id();
  h.algo = uint32_t(d.algo);
  h.op = uint32_t(d.op);
  h.slice_elems = d.slice_elems;
  if (d.algo == Algo::Hier)
    h.topology = uint32_t(d.ranks_per_node & 0xFFFFFF) | (uint32_t(d.inter_algo) << 24);
  std::strncpy(h.codec_name, d.codec.name().c_str(), sizeof h.codec_name - 1);
  return h;
}

const char* kind_name(uint32_t k) {
  switch (k) {
    case uint32_t(CollectiveKind::AllReduce): return "allreduce";
    case uint32_t(CollectiveKind::ReduceScatter): return "reduce_scatter";
    case uint32_t(CollectiveKind::AllGather): return "allgather";
    case uint32_t(CollectiveKind::AllGatherChunks): return "allgather of chunks";
    case uint32_t(CollectiveKind::AllToAll): return "alltoall";
  }
  return "unknown collective";
}

std::string describe(const WireHeader& h) {
  std::ostringstream os;
  os << kind_name(h.kind);
  // An all-to-all's counts differ between ranks; agree_on_splits checks them.
  if (h.kind != uint32_t(CollectiveKind::AllToAll)) os << "(count=" << h.count << ", ";
  else os << "(";
  os << "dtype=" << dtype_name(DType(h.dtype))
     << ", codec=" << std::string(h.codec_name, strnlen(h.codec_name, sizeof h.codec_name))
     << ", algo=" << algo_name(Algo(h.algo));
  if (Algo(h.algo) == Algo::Hier)
    os << " (ranks_per_node=" << (h.topology & 0xFFFFFF)
       << ", between nodes " << algo_name(Algo(h.topology >> 24)) << ")";
  os << ", op=" << reduce_op_name(ReduceOp(h.op))
     << ", slice_elems=" << h.slice_elems << ")";
  return os.str();
}

bool same_call(const WireHeader& a, const WireHeader& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.count == b.count &&
         a.codec_id == b.codec_id && a.algo == b.algo && a.op == b.op &&
         a.slice_elems == b.slice_elems && a.topology == b.topology;
}

// Waits for every request, dropping each from @p reqs as it completes.
void wait_all(Transport& t, std::vector<Request>& reqs, double timeout_s) {
  while (!reqs.empty()) erase_completed(reqs, t.wait_some(reqs, timeout_s));
}

// Sends this rank's @p bytes at @p mine to every peer and receives theirs: row p of @p all
// (P rows of @p bytes) is rank p's, this rank's own row copied. Same shape on every rank.
void exchange_rows(Transport& t, const void* mine, size_t bytes, void* all, double timeout_s) {
  const int P = t.size(), r = t.rank();
  auto* rows = static_cast<uint8_t*>(all);
  std::vector<Request> reqs;
  for (int p = 0; p < P; ++p) {
    if (p == r) continue;
    reqs.push_back(t.irecv(p, rows + size_t(p) * bytes, int64_t(bytes), kHeaderTag));
    reqs.push_back(t.isend(p, mine, int64_t(bytes), kHeaderTag));
  }
  try {
    wait_all(t, reqs, timeout_s);
  } catch (...) {
    t.cancel(reqs);
    throw;
  }
  std::memcpy(rows + size_t(r) * bytes, mine, bytes);
}

}  // namespace

int64_t check_same_call(Transport& t, const CallDescription& mine, double timeout_s) {
  const int P = t.size();
  if (P == 1) return 0;
  WireHeader own = pack(mine);
  std::vector<WireHeader> theirs(P);
  exchange_rows(t, &own, sizeof(WireHeader), theirs.data(), timeout_s);
  // Judge from the full table so every rank reaches the same verdict.
  for (int p = 0; p < P; ++p) {
    const WireHeader& h = theirs[p];
    CC_CHECK_AS(MismatchError, h.magic == kMagic && h.version == kVersion,
                "rank " << p << " sent a header this build cannot read (magic " << std::hex
                        << h.magic << ", version " << std::dec << h.version
                        << "); all ranks must run the same ccompress version");
    CC_CHECK_AS(MismatchError, same_call(theirs[0], h),
                "ranks called different collectives: rank 0 called "
                    << describe(theirs[0]) << " but rank " << p << " called " << describe(h)
                    << "; every rank must make the same call with the same arguments");
  }
  return int64_t(sizeof(WireHeader)) * (P - 1);
}

namespace {

// One rank's row of the split table: its buffer sizes, how many splits it passed (0: equal
// pieces) and the splits, padded to the rank count.
enum SplitRow : size_t { kInElems, kOutElems, kInCount, kOutCount, kSplits };

// The P pieces of @p elems a rank's row describes (@p count splits at @p at; 0: equal ones),
// or an InvalidArgument naming @p rank and @p what.
std::vector<int64_t> pieces_of(const int64_t* row, int64_t elems, int64_t count, size_t at,
                               int rank, int P, const char* what, const char* buffer) {
  CC_CHECK(count == 0 || count == P,
           "rank " << rank << " passed " << count << " " << what << " for " << P
                   << " ranks; pass one per rank, or none for equal pieces");
  if (count == 0) {
    CC_CHECK(elems % P == 0, "rank " << rank << "'s " << buffer << " of " << elems
                                     << " elements does not split into " << P
                                     << " equal pieces; pass " << what);
    return std::vector<int64_t>(size_t(P), elems / P);
  }
  std::vector<int64_t> v(row + at, row + at + P);
  int64_t sum = 0;
  for (int j = 0; j < P; ++j) {
    CC_CHECK(v[j] >= 0 && v[j] <= kMaxElements,
             "rank " << rank << "'s " << what << "[" << j << "] is " << v[j]
                     << "; split sizes run from 0 to " << kMaxElements << " elements");
    sum += v[j];
  }
  CC_CHECK(sum == elems, "rank " << rank << "'s " << what << " add up to " << sum
                                 << " elements, but its " << buffer << " holds " << elems
                                 << "; they must add up to the " << buffer);
  return v;
}

}  // namespace

std::vector<int64_t> agree_on_splits(Transport& t, int64_t n_in, int64_t n_out,
                                     const std::vector<int64_t>& in_splits,
                                     const std::vector<int64_t>& out_splits, double timeout_s,
                                     int64_t& bytes_sent) {
  const int P = t.size();
  const size_t width = kSplits + 2 * size_t(P);
  std::vector<int64_t> own(width, 0);
  own[kInElems] = n_in;
  own[kOutElems] = n_out;
  own[kInCount] = int64_t(in_splits.size());
  own[kOutCount] = int64_t(out_splits.size());
  for (size_t j = 0; j < in_splits.size() && j < size_t(P); ++j) own[kSplits + j] = in_splits[j];
  for (size_t j = 0; j < out_splits.size() && j < size_t(P); ++j)
    own[kSplits + size_t(P) + j] = out_splits[j];
  std::vector<int64_t> table(width * size_t(P));
  if (P > 1) {
    exchange_rows(t, own.data(), width * sizeof(int64_t), table.data(), timeout_s);
    bytes_sent += int64_t(width * sizeof(int64_t)) * (P - 1);
  } else {
    table = own;
  }
  // Judge from the full table, in rank order, so every rank raises the same error.
  std::vector<int64_t> sends(size_t(P) * P), recvs(size_t(P) * P);
  for (int p = 0; p < P; ++p) {
    const int64_t* row = table.data() + size_t(p) * width;
    auto in = pieces_of(row, row[kInElems], row[kInCount], kSplits, p, P, "in_splits", "input");
    auto out = pieces_of(row, row[kOutElems], row[kOutCount], kSplits + size_t(P), p, P,
                         "out_splits", "output");
    std::copy(in.begin(), in.end(), sends.begin() + ptrdiff_t(p) * P);
    std::copy(out.begin(), out.end(), recvs.begin() + ptrdiff_t(p) * P);
  }
  for (int i = 0; i < P; ++i)
    for (int j = 0; j < P; ++j) {
      const int64_t sent = sends[size_t(i) * P + j], expected = recvs[size_t(j) * P + i];
      CC_CHECK_AS(MismatchError, sent == expected,
                  "rank " << i << " sends " << sent << " elements to rank " << j
                          << ", but rank " << j << " expects " << expected
                          << " from rank " << i << " (its out_splits[" << i
                          << "]); every rank's in_splits[j] must equal rank j's out_splits "
                             "entry for it");
    }
  return sends;
}

}  // namespace ccompress
