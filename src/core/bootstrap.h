// Bootstrap: how the ranks of a new communicator find each other.
//
// ccGetUniqueId starts a root in the calling process: a TCP listener and a thread that
// waits for every rank to register (after the challenge-response of auth.h), then sends
// each the table of all ranks (address, host, pid) and closes. Strangers, garbage, huge
// lengths and silent connections are dropped and logged; the root carries on.
#pragma once

#include <memory>
#include <vector>

#include "core/config.h"
#include "core/wire.h"

namespace cc::bootstrap {

// Starts a root for one communicator and returns the id that leads to it. The root
// lives until every rank registered or `timeoutMs` passed.
Result<wire::UniqueIdContents> startRoot(const Config& config);

// Same, listening on a given address (torchrun-style MASTER_ADDR:MASTER_PORT) with a
// given secret.
Status startRootAt(const SocketAddress& address, const wire::Secret& secret, int64_t timeoutMs);

// Registers `self` with the root and returns the table of all ranks, indexed by rank.
Result<std::vector<wire::PeerInfo>> exchangePeerInfo(const wire::UniqueIdContents& id, int nranks,
                                                     const wire::PeerInfo& self,
                                                     const Config& config);

// A value that is equal on two ranks exactly when they share a host: hostname, boot id
// and network namespace, or CC_HOSTNAME when set (so tests can make several "hosts").
uint64_t hostHash();
std::string hostName();

}  // namespace cc::bootstrap
