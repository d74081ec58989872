#include "collectives/header_check.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <vector>

#include "ccompress/error.h"

namespace ccompress {

namespace {

constexpr uint32_t kMagic = 0x43435031;  // "CCP1"
constexpr uint32_t kVersion = 2;  // 2: the all-to-all's split summary
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
  int64_t largest_piece;  // alltoall: CallDescription::largest_piece; else 0
  uint64_t split_share;   // alltoall: CallDescription::split_share; else 0
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
  h.largest_piece = d.largest_piece;
  h.split_share = d.split_share;
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
  // An all-to-all's counts differ between ranks; check_alltoall_call checks them.
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

namespace {

// Exchanges this rank's header with every peer and judges the full table, so every rank
// reaches the same verdict; returns every rank's header, in rank order.
std::vector<WireHeader> exchange_headers(Transport& t, const WireHeader& own, double timeout_s) {
  const int P = t.size();
  std::vector<WireHeader> theirs(P);
  exchange_rows(t, &own, sizeof(WireHeader), theirs.data(), timeout_s);
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
  return theirs;
}

}  // namespace

int64_t check_same_call(Transport& t, const CallDescription& mine, double timeout_s) {
  const int P = t.size();
  if (P == 1) return 0;
  exchange_headers(t, pack(mine), timeout_s);
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

// This rank's row of the split table.
std::vector<int64_t> split_row(int P, int64_t n_in, int64_t n_out,
                               const std::vector<int64_t>& in_splits,
                               const std::vector<int64_t>& out_splits) {
  std::vector<int64_t> row(kSplits + 2 * size_t(P), 0);
  row[kInElems] = n_in;
  row[kOutElems] = n_out;
  row[kInCount] = int64_t(in_splits.size());
  row[kOutCount] = int64_t(out_splits.size());
  for (size_t j = 0; j < in_splits.size() && j < size_t(P); ++j) row[kSplits + j] = in_splits[j];
  for (size_t j = 0; j < out_splits.size() && j < size_t(P); ++j)
    row[kSplits + size_t(P) + j] = out_splits[j];
  return row;
}

// A 64-bit hash of one entry of the split table (splitmix64's finalizer, twice).
uint64_t mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t entry_hash(int from, int to, int64_t elems) {
  return mix(mix((uint64_t(uint32_t(from)) << 32) | uint32_t(to)) ^ uint64_t(elems));
}

// The second round, where the headers show bad or disagreeing splits: every rank sends its
// splits and buffer sizes to every peer, and all ranks judge the full table alike, in rank
// order, so every rank raises the same error (@p own: this rank's split_row).
void judge_split_table(Transport& t, const std::vector<int64_t>& own, double timeout_s,
                       int64_t& bytes_sent) {
  const int P = t.size();
  const size_t width = own.size();
  std::vector<int64_t> table(width * size_t(P));
  if (P > 1) {
    exchange_rows(t, own.data(), width * sizeof(int64_t), table.data(), timeout_s);
    bytes_sent += int64_t(width * sizeof(int64_t)) * (P - 1);
  } else {
    table = own;
  }
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
}

}  // namespace

AgreedSplits check_alltoall_call(Transport& t, CallDescription call, int64_t n_in,
                                 int64_t n_out, const std::vector<int64_t>& in_splits,
                                 const std::vector<int64_t>& out_splits, double timeout_s,
                                 int64_t& bytes_sent) {
  const int P = t.size(), r = t.rank();
  // This rank's row, judged as the full table's judge reads it: bad splits are refused on
  // every rank below, with the judge's message.
  const std::vector<int64_t> own = split_row(P, n_in, n_out, in_splits, out_splits);
  AgreedSplits agreed;
  bool valid = true;
  try {
    agreed.send = pieces_of(own.data(), n_in, own[kInCount], kSplits, r, P, "in_splits", "input");
    agreed.recv = pieces_of(own.data(), n_out, own[kOutCount], kSplits + size_t(P), r, P,
                            "out_splits", "output");
  } catch (const InvalidArgument&) {
    valid = false;  // every rank raises it below
  }
  call.largest_piece = -1;
  call.split_share = 0;
  if (valid) {
    call.largest_piece = 0;
    for (int j = 0; j < P; ++j) {
      call.largest_piece = std::max(call.largest_piece, agreed.send[j]);
      call.split_share += entry_hash(r, j, agreed.send[j]);
      call.split_share -= entry_hash(j, r, agreed.recv[j]);
    }
  }
  std::vector<WireHeader> headers{pack(call)};
  if (P > 1) {
    headers = exchange_headers(t, headers[0], timeout_s);
    bytes_sent += int64_t(sizeof(WireHeader)) * (P - 1);
  }
  bool agree = true;
  uint64_t total = 0;
  for (const WireHeader& h : headers) {
    agree = agree && h.largest_piece >= 0;
    total += h.split_share;
    agreed.largest = std::max(agreed.largest, h.largest_piece);
  }
  if (!agree || total != 0) {
    judge_split_table(t, own, timeout_s, bytes_sent);
    CC_CHECK_AS(MismatchError, false,
                "the ranks' split checksums disagree, but their split tables agree; all ranks "
                "must run the same ccompress version");
  }
  return agreed;
}

}  // namespace ccompress
