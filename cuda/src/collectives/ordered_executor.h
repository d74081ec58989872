// The executor for ordered transports (NCCL): every transfer of a collective gets a group
// key (level, slice) that both of its ends compute alike, and every rank posts its groups in
// increasing key order without waiting on the host in between.
//
// The level of a message is one more than the highest level of the messages its sender had
// to receive first (0 when it depends on none), so a group's sends only need data from
// groups of lower level: whichever group is the lowest still incomplete anywhere has every
// one of its transfers at the head of both ends' queues, and completes. Levels span ranks,
// so they are computed over every rank's plan (each rank builds them all; plans are
// deterministic). Within a level, a group per slice lets the codec work of one slice
// overlap the transfers of the next.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "ccompress/kernel_backend.h"
#include "ccompress/transport.h"
#include "collectives/executor.h"
#include "collectives/plan.h"

namespace ccompress {

/// The (level, slice) group key of every transfer op of plans[rank], in op order (other
/// ops get {-1, -1}). Throws Error when the plans do not pair every receive with one send.
std::vector<std::pair<int, int64_t>> transfer_group_keys(const std::vector<Plan>& plans,
                                                         const PlanContext& ctx);

/// The group keys of a one-level schedule's transfers, from this rank's plan alone: where no
/// rank's send waits on a message it received (the all-to-all), every message is of level
/// 0, so the key of a transfer is (0, its slice). Throws Error when a send of @p plan waits
/// on a receive; that every rank's schedule is one-level is the caller's to know.
std::vector<std::pair<int, int64_t>> one_level_group_keys(const Plan& plan,
                                                          const PlanContext& ctx);

/// Runs plans[ctx.rank] over @p t: compute steps on the backend in dependency order, each
/// transfer group posted once its sends' data is issued, then waits for the transfers
/// (OrderedTransport::drain) and checks the received message headers.
ExecResult execute_ordered(const std::vector<Plan>& plans, const PlanContext& ctx,
                          const ExecBuffers& bufs, OrderedTransport& t, KernelBackend& k,
                          const CollectiveOptions& opt);

/// execute_ordered for a one-level schedule (one_level_group_keys): this rank's plan alone.
ExecResult execute_ordered_one_level(const Plan& plan, const PlanContext& ctx,
                                     const ExecBuffers& bufs, OrderedTransport& t,
                                     KernelBackend& k, const CollectiveOptions& opt);

}  // namespace ccompress
