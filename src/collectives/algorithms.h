// Every algorithm, one function each, grouped by file. All take a Context whose args
// hold a validated call; each returns when this rank's part is complete.
#pragma once

#include <algorithm>
#include <vector>

#include "collectives/context.h"

namespace cc::collectives {

// ring.cc: ring reduce-scatter + all-gather, chains for broadcast and reduce. The cores
// take the ring's members (null: ranks 0..size-1) so hierarchical.cc can run them over
// a subset, and chains take their neighbours (-1: none).
struct RingView {
  int size = 0;
  int index = 0;                 // this rank's position
  const int* members = nullptr;  // rank at each position
  int rankAt(int position) const;
};
struct Blocks {
  std::vector<size_t> begin;
  std::vector<size_t> length;
  size_t longest = 0;
  // Elements of block b's piece starting `offset` elements into the block.
  size_t piece(int b, size_t offset, size_t chunk) const {
    size_t len = length[static_cast<size_t>(b)];
    return len > offset ? std::min(chunk, len - offset) : 0;
  }
  size_t at(int b, size_t offset) const { return begin[static_cast<size_t>(b)] + offset; }
};
Blocks evenParts(size_t count, int parts);
Status reduceScatterCore(const Context& ctx, const RingView& ring, const std::byte* source,
                         std::byte* work, const Blocks& blocks, std::byte* result);
Status allGatherCore(const Context& ctx, const RingView& ring, std::byte* buffer,
                     const Blocks& blocks);
Status chainBroadcastAlong(const Context& ctx, int prev, int next, std::byte* buffer, size_t count);
Status chainReduceAlong(const Context& ctx, int towardRoot, int away, const std::byte* source,
                        std::byte* result, size_t count);

// The chain a broadcast or reduce from `root` follows: the topology planner's first ring
// (each host's ranks together, so across hosts it crosses at most once per host), cut
// just before the root. prev is the neighbour toward the root, next the one away from
// it (-1: none).
struct ChainLinks {
  int prev = -1;
  int next = -1;
};
ChainLinks chainFromRoot(const comm::Communicator& comm, int rank, int root);

Status ringAllReduce(const Context& ctx);
Status ringReduceScatter(const Context& ctx);
Status ringAllGather(const Context& ctx);
Status chainBroadcast(const Context& ctx);
Status chainReduce(const Context& ctx);

// tree.cc: binomial trees and the double binary tree, pipelined in chunks.
struct TreeLinks {
  int parent = -1;            // rank, or -1 at the root
  std::vector<int> children;  // ranks
};
// The tree a broadcast or reduce from `root` follows: across hosts the planner's tree
// (a chain per host, a tree over the hosts' leaders) hung from the root instead of its
// planned root, so it still crosses between hosts hosts-1 times; within one host the
// binomial tree over rank numbers.
TreeLinks treeFromRoot(const comm::Communicator& comm, int rank, int root);
Status treeBroadcast(const Context& ctx);
Status treeReduce(const Context& ctx);
Status treeAllReduce(const Context& ctx);
// Two binary trees over complementary rank orders, each carrying half of the vector.
Status doubleBinaryTreeAllReduce(const Context& ctx);

// halving_doubling.cc: Rabenseifner's all-reduce (recursive halving reduce-scatter,
// recursive doubling all-gather), folding the ranks beyond a power of two.
Status halvingDoublingAllReduce(const Context& ctx);

// hierarchical.cc: ranks spread over hosts reduce within each host (shm), all-reduce
// across hosts among one leader per host (network), and broadcast back within each host.
bool hierarchyUseful(const comm::Communicator& comm);
Status hierarchicalAllReduce(const Context& ctx);

// alltoall.cc
Status pairwiseAllToAll(const Context& ctx);
Status bruckAllToAll(const Context& ctx);
Status pairwiseAllToAllv(const Context& ctx);

}  // namespace cc::collectives
