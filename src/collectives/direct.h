// Direct collectives over memory shared by every rank of a communicator on one host
// (direct.cc explains the protocol).
#pragma once

#include "collectives/context.h"

namespace cc::collectives {

// Every rank of `comm` is on this host and has staging memory.
bool directAvailable(const comm::Communicator& comm);
// Bytes of one of a rank's two staging halves (0 when direct is unavailable).
size_t directStagingHalfBytes(const comm::Communicator& comm);

// oneShot: every rank reduces the whole vector from everyone's staging (one
// synchronisation; for small vectors); otherwise each reduces a slice and copies the
// others' results.
Status directAllReduce(const Context& ctx, bool oneShot);
// oneShot: the root reduces everything from everyone's staging (small vectors);
// otherwise each rank reduces a slice for the root to collect.
Status directReduce(const Context& ctx, bool oneShot);
Status directBroadcast(const Context& ctx);
Status directAllGather(const Context& ctx);
Status directReduceScatter(const Context& ctx);
Status directAllToAll(const Context& ctx);

}  // namespace cc::collectives
