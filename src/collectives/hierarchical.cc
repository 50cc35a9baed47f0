// Hierarchical all-reduce, for ranks spread over several hosts: each host reduces to
// its leader (its lowest rank) along a chain over shared memory, the leaders all-reduce
// over the network with the ring, and each leader broadcasts the result back along its
// host's chain. Only one rank per host crosses the network, with the host's whole
// contribution, instead of every rank of the flat ring. Every chunk is reduced in one
// place and copied everywhere else, so all ranks get the same bits.
#include <algorithm>
#include <vector>

#include "collectives/algorithms.h"

namespace cc::collectives {
namespace {

struct Hierarchy {
  std::vector<int> local;    // the ranks on this host, ascending; local[0] leads
  std::vector<int> leaders;  // every host's leader, ascending
  int localIndex = 0;
  int leaderIndex = -1;  // this rank's place among the leaders, -1 if it is not one
};

Hierarchy hierarchyOf(const comm::Communicator& comm) {
  Hierarchy h;
  const uint64_t mine = comm.hostOf(comm.rank());
  for (int r = 0; r < comm.size(); ++r) {
    if (comm.hostOf(r) == mine) {
      if (r == comm.rank()) h.localIndex = static_cast<int>(h.local.size());
      h.local.push_back(r);
    }
    bool first = true;
    for (int earlier = 0; earlier < r && first; ++earlier)
      first = comm.hostOf(earlier) != comm.hostOf(r);
    if (first) {
      if (r == comm.rank()) h.leaderIndex = static_cast<int>(h.leaders.size());
      h.leaders.push_back(r);
    }
  }
  return h;
}

}  // namespace

bool hierarchyUseful(const comm::Communicator& comm) {
  Hierarchy h = hierarchyOf(comm);
  return h.leaders.size() > 1 && h.leaders.size() < static_cast<size_t>(comm.size());
}

Status hierarchicalAllReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  const Hierarchy h = hierarchyOf(ctx.comm());
  const int localSize = static_cast<int>(h.local.size());
  const int towardLeader = h.localIndex > 0 ? h.local[static_cast<size_t>(h.localIndex - 1)] : -1;
  const int away =
      h.localIndex + 1 < localSize ? h.local[static_cast<size_t>(h.localIndex + 1)] : -1;

  // 1. Within the host, toward the leader (who ends with the host's sum in recv).
  CC_TRY(chainReduceAlong(ctx, towardLeader, away, args.send, args.recv, args.count));

  // 2. Across hosts, among the leaders, in place.
  if (h.leaderIndex >= 0 && h.leaders.size() > 1) {
    RingView ring{static_cast<int>(h.leaders.size()), h.leaderIndex, h.leaders.data()};
    Blocks blocks = evenParts(args.count, ring.size);
    std::byte* own = ctx.recvAt(blocks.begin[static_cast<size_t>(h.leaderIndex)]);
    CC_TRY(reduceScatterCore(ctx, ring, args.recv, args.recv, blocks, own));
    CC_TRY(allGatherCore(ctx, ring, args.recv, blocks));
  }

  // 3. Back within the host, from the leader.
  return chainBroadcastAlong(ctx, towardLeader, away, args.recv, args.count);
}

}  // namespace cc::collectives
