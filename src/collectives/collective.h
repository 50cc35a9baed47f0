// What a collective call asks for, and the one entry point that runs it: validation has
// happened above (the C API); this layer picks an algorithm (tuner.h) and runs it over
// the communicator's channels.
#pragma once

#include <cc/cc.h>

#include <cstddef>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace cc::collectives {

enum class CollectiveKind {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllToAll,
  kAllToAllv
};
static_assert(static_cast<int>(CollectiveKind::kAllToAllv) == ccTrafficAllToAllv,
              "CollectiveKind values index the traffic counters (ccTrafficKind_t)");

// In the order of kAlgorithmNames (core/config.h), which CC_ALGO is parsed against.
enum class Algorithm {
  kAuto,
  kRing,
  kTree,
  kDirect,
  kHalvingDoubling,
  kPairwise,
  kBruck,
  kHierarchical,
  kDoubleBinaryTree
};

struct CollectiveArgs {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  const std::byte* send = nullptr;
  std::byte* recv = nullptr;
  // Elements: all-reduce, broadcast, reduce: the whole buffer; all-gather: each rank's
  // contribution; reduce-scatter: each rank's result; all-to-all: each block.
  size_t count = 0;
  ccDataType_t type = ccFloat32;
  ccRedOp_t op = ccSum;
  int root = 0;
  // All-to-allv, in elements, one entry per rank.
  std::vector<size_t> sendCounts, sendDispls, recvCounts, recvDispls;
};

const char* collectiveName(CollectiveKind kind);
const char* algorithmName(Algorithm algorithm);
// "ring", "hd", ...; kAuto for "auto" or anything unknown.
Algorithm parseAlgorithm(std::string_view name);

// Runs one collective. The caller holds the communicator's operation lock.
Status runCollective(comm::Communicator& comm, const CollectiveArgs& args);

}  // namespace cc::collectives
