// Every algorithm, one function each, grouped by file. All take a Context whose args
// hold a validated call; each returns when this rank's part is complete.
#pragma once

#include "collectives/context.h"

namespace cc::collectives {

// ring.cc: ring reduce-scatter + all-gather, chains for broadcast and reduce.
Status ringAllReduce(const Context& ctx);
Status ringReduceScatter(const Context& ctx);
Status ringAllGather(const Context& ctx);
Status chainBroadcast(const Context& ctx);
Status chainReduce(const Context& ctx);

// tree.cc: binomial trees, pipelined in chunks.
Status treeBroadcast(const Context& ctx);
Status treeReduce(const Context& ctx);
Status treeAllReduce(const Context& ctx);

// halving_doubling.cc: Rabenseifner's all-reduce (recursive halving reduce-scatter,
// recursive doubling all-gather), folding the ranks beyond a power of two.
Status halvingDoublingAllReduce(const Context& ctx);

// alltoall.cc
Status pairwiseAllToAll(const Context& ctx);
Status bruckAllToAll(const Context& ctx);
Status pairwiseAllToAllv(const Context& ctx);

}  // namespace cc::collectives
