#include "collectives/header_check.h"

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
  }
  return "unknown collective";
}

std::string describe(const WireHeader& h) {
  std::ostringstream os;
  os << kind_name(h.kind) << "(count=" << h.count << ", dtype=" << dtype_name(DType(h.dtype))
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

}  // namespace

int64_t check_same_call(Transport& t, const CallDescription& mine, double timeout_s) {
  const int P = t.size(), r = t.rank();
  if (P == 1) return 0;
  WireHeader own = pack(mine);
  std::vector<WireHeader> theirs(P);
  std::vector<Request> reqs;
  for (int p = 0; p < P; ++p) {
    if (p == r) continue;
    reqs.push_back(t.irecv(p, &theirs[p], sizeof(WireHeader), kHeaderTag));
    reqs.push_back(t.isend(p, &own, sizeof(WireHeader), kHeaderTag));
  }
  try {
    wait_all(t, reqs, timeout_s);
  } catch (...) {
    t.cancel(reqs);
    throw;
  }
  theirs[r] = own;
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

}  // namespace ccompress
