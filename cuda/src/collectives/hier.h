// The hierarchical collectives (algo "hier"): the checks, the leveled all-reduce for the
// inter-node algos other than two_shot, and the in-place all-gather of chunks it ends with;
// called by the collectives' entry points (collectives.cc). build_hier (plan.h) is the
// one-plan schedule.
#pragma once

#include "ccompress/collectives.h"
#include "collectives/header_check.h"

namespace ccompress {

/// Refuses (Unsupported / Error) an algo 'hier' call that has no schedule: no node size,
/// unequal nodes, error feedback, a hierarchical inter-node algo, or an inter_algo for a
/// collective other than allreduce.
void check_hier(CollectiveKind kind, int size, const CollectiveOptions& opt);

/// Whether the call runs as one plan (build_hier): inter_algo two_shot or auto. Otherwise
/// hier_allreduce runs the levels one after the other.
bool hier_in_one_plan(const CollectiveOptions& opt);

/// The leveled all-reduce (opt.algo == Algo::Hier, !hier_in_one_plan(opt)), after the call
/// check and check_hier.
/// @p call numbers the levels' collectives (their message headers).
CollectiveStats hier_allreduce(Transport& t, KernelBackend& k, const void* in, void* out,
                               int64_t n, DType dtype, const Codec& codec,
                               const CollectiveOptions& opt, uint64_t call);

/// buf[chunk_range(n, size, r)] of every rank r reaches every rank, in place.
CollectiveStats allgather_chunks(Transport& t, KernelBackend& k, void* buf, int64_t n,
                                 DType dtype, const Codec& codec, const CollectiveOptions& opt);

}  // namespace ccompress
