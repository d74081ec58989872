// The hierarchical all-reduce (algo "hier") and the in-place all-gather of chunks it ends
// with; called by the collectives' entry points (collectives.cc).
#pragma once

#include "ccompress/collectives.h"

namespace ccompress {

/// The all-reduce of collectives.h with opt.algo == Algo::Hier, after the call check.
/// @p call numbers the levels' collectives (their message headers).
CollectiveStats hier_allreduce(Transport& t, KernelBackend& k, const void* in, void* out,
                               int64_t n, DType dtype, const Codec& codec,
                               const CollectiveOptions& opt, uint64_t call);

/// buf[chunk_range(n, size, r)] of every rank r reaches every rank, in place.
CollectiveStats allgather_chunks(Transport& t, KernelBackend& k, void* buf, int64_t n,
                                 DType dtype, const Codec& codec, const CollectiveOptions& opt);

}  // namespace ccompress
