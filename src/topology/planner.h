// The planner: from a System and where each rank runs, the rings and trees the
// collectives should follow and the NIC each rank should use. docs/TOPOLOGY.md explains
// the rules; in short:
//   rings  each a permutation of all ranks; a host's ranks are contiguous (so a ring
//          crosses each host boundary once), and within a host a NUMA node's ranks are
//          contiguous. With several NICs per host, one ring per NIC (up to a cap), each
//          entering and leaving a host through ranks near its NIC.
//   trees  per host a chain from a host leader; across hosts a binary tree over the
//          leaders (two mirrored trees, a double binary tree, when there are 2+ hosts),
//          so a tree has exactly hosts-1 edges between hosts.
//   NICs   each rank gets its nearest usable NIC (same NUMA node, then same socket, then
//          any), ranks spread over equally near NICs.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "topology/system.h"

namespace cc::topology {

struct Ring {
  // ranks[i] sends to ranks[i + 1]; the last sends to the first.
  std::vector<int> ranks;
  // On every host the ring uses the host's usable NIC number nicSlot % (their count).
  int nicSlot = 0;
};

struct Tree {
  int root = 0;
  std::vector<int> parent;                 // per rank; -1 at the root
  std::vector<std::vector<int>> children;  // per rank
};

struct Plan {
  std::vector<RankPlace> places;       // the input placement, per rank
  std::vector<int> numaOfRank;         // effectiveNuma() per rank: what rings group by
  int hostCount = 0;                   // hosts that hold at least one rank
  std::vector<Ring> rings;             // at least one
  std::vector<Tree> trees;             // one, or two (double binary) across hosts
  std::vector<int> nicOfRank;          // index into the rank's host's nics; -1: none
  std::vector<std::string> nicNames;   // per rank, for people ("" when none)
  std::vector<std::string> hostNames;  // per System host
  // Per System host, Host::cpuCount() (0: none listed). Every rank plans from the same
  // descriptions, so the tuner may decide by it and the ranks still agree.
  std::vector<int> cpusOfHost;
};

struct PlanOptions {
  int maxRings = 4;  // cap on rings (one per NIC) when there are several hosts
};

// Plans for `places.size()` ranks, places[r] being rank r's. Every index must exist in
// `system` (ccInvalidArgument naming the rank otherwise).
Result<Plan> planCollectives(const System& system, std::span<const RankPlace> places,
                             const PlanOptions& options = {});

// Several lines: the rings, the trees and each host's NIC use (for CC_DEBUG=INFO and
// cc-topo). Ring lines show hosts as [hN: ...] and NUMA boundaries as "/".
std::string describe(const Plan& plan);

// A placement when nothing better is known: ranks in contiguous, balanced blocks over
// the hosts; within a host one rank per GPU when it has GPUs, else round-robin over the
// NUMA nodes that have CPUs.
Result<std::vector<RankPlace>> placeRanks(const System& system, int rankCount);

// The NICs of `host` a rank may be given: those that are up, RDMA ones only when there
// are any, and of those the ones at least half as fast as the fastest (so a 1 Gb/s
// management port never carries a collective next to a 200 Gb/s one).
std::vector<int> usableNics(const Host& host);

// How far a rank on NUMA node `numa` is from `nic`: 0 same NUMA node, 1 same socket,
// 2 farther or unknown.
int nicDistance(const Host& host, int numa, const Nic& nic);

// The NUMA node that matters for a rank's data: its GPU's when it has one placed,
// else its own (-1 when unbound).
int effectiveNuma(const Host& host, const RankPlace& place);

}  // namespace cc::topology
