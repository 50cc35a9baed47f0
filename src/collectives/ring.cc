// Ring algorithms. Reduce-scatter passes partial sums around the ring: at step s rank r
// sends block r-s-1 and receives block r-s-2, which it reduces with its own, so after
// n-1 steps it holds block r reduced over everyone (each block reduced along one chain,
// so every rank ends with the same bits). All-gather passes finished blocks the same
// way. Broadcast and reduce are chains from (or toward) the root, pipelined in chunks
// so that every link carries data at once.
#include <algorithm>
#include <vector>

#include "collectives/algorithms.h"

namespace cc::collectives {
namespace {

int wrap(int value, int n) { return ((value % n) + n) % n; }

}  // namespace

int RingView::rankAt(int position) const {
  int p = wrap(position, size);
  return members == nullptr ? p : members[p];
}

Blocks evenParts(size_t count, int n) {
  Blocks blocks;
  for (int b = 0; b < n; ++b) {
    blocks.begin.push_back(partBegin(count, n, b));
    blocks.length.push_back(partLength(count, n, b));
    blocks.longest = std::max(blocks.longest, blocks.length.back());
  }
  return blocks;
}

namespace {

Blocks strided(size_t blockCount, int n) {
  Blocks blocks;
  for (int b = 0; b < n; ++b) {
    blocks.begin.push_back(static_cast<size_t>(b) * blockCount);
    blocks.length.push_back(blockCount);
  }
  blocks.longest = blockCount;
  return blocks;
}

}  // namespace

// Block `index` of `source`, reduced over the ring, lands in `result`. Partial sums go
// to `work` at their block's place when given (all-reduce: the receive buffer), else to
// per-thread scratch.
Status reduceScatterCore(const Context& ctx, const RingView& ring, const std::byte* source,
                         std::byte* work, const Blocks& blocks, std::byte* result) {
  const int n = ring.size;
  const int r = ring.index;
  const int right = ring.rankAt(r + 1);
  const int left = ring.rankAt(r - 1);
  const size_t chunk = ctx.chunkElements();
  // Over shared memory the partial sum is reduced with ours as it arrives; elsewhere it
  // is received into `incoming` first. (The destination is never what this step sends.)
  const bool onArrival = ctx.reducesOnArrival(left);
  std::byte* incoming = onArrival ? nullptr : ctx.scratch(0, chunk);
  for (size_t offset = 0; offset < blocks.longest; offset += chunk) {
    const std::byte* outgoing = nullptr;
    for (int s = 0; s < n - 1; ++s) {
      int sendBlock = wrap(r - s - 1, n);
      int recvBlock = wrap(r - s - 2, n);
      const std::byte* sendData =
          s == 0 ? source + ctx.bytes(blocks.at(sendBlock, offset)) : outgoing;
      size_t recvCount = blocks.piece(recvBlock, offset, chunk);
      std::byte* dst = nullptr;
      if (s == n - 2) {
        dst = result + ctx.bytes(offset);
      } else if (work != nullptr) {
        dst = work + ctx.bytes(blocks.at(recvBlock, offset));
      } else {
        dst = ctx.scratch(1 + s % 2, chunk);
      }
      const std::byte* own = source + ctx.bytes(blocks.at(recvBlock, offset));
      ReduceOnArrival reduction(ctx, own);
      CC_TRY(ctx.exchange(right, sendData, blocks.piece(sendBlock, offset, chunk), left,
                          onArrival ? dst : incoming, recvCount,
                          onArrival ? reduction.sink() : nullptr));
      if (!onArrival) ctx.reduce(dst, own, incoming, recvCount);
      outgoing = dst;
    }
  }
  return Status::ok();
}

// Every block of `buffer` everywhere, given that block `rank` is in place.
Status allGatherCore(const Context& ctx, const RingView& ring, std::byte* buffer,
                     const Blocks& blocks) {
  const int n = ring.size;
  const int r = ring.index;
  const size_t chunk = ctx.chunkElements();
  for (size_t offset = 0; offset < blocks.longest; offset += chunk) {
    for (int s = 0; s < n - 1; ++s) {
      int sendBlock = wrap(r - s, n);
      int recvBlock = wrap(r - s - 1, n);
      CC_TRY(ctx.exchange(ring.rankAt(r + 1), buffer + ctx.bytes(blocks.at(sendBlock, offset)),
                          blocks.piece(sendBlock, offset, chunk), ring.rankAt(r - 1),
                          buffer + ctx.bytes(blocks.at(recvBlock, offset)),
                          blocks.piece(recvBlock, offset, chunk)));
    }
  }
  return Status::ok();
}

namespace {

// The ring the topology planner chose (each host's ranks together, each NUMA node's
// together: comm/topology_plan.cc), or plain rank order.
RingView plannedRing(const Context& ctx) {
  return RingView{ctx.size(), ctx.comm().ringPosition(), ctx.comm().ringMembers()};
}

// The cores index blocks by ring position; reduce-scatter and all-gather fix block b to
// rank b, so their blocks are listed in ring order.
Blocks stridedInRingOrder(size_t blockCount, const RingView& ring) {
  Blocks blocks = strided(blockCount, ring.size);
  for (int p = 0; p < ring.size; ++p) {
    blocks.begin[static_cast<size_t>(p)] = static_cast<size_t>(ring.rankAt(p)) * blockCount;
  }
  return blocks;
}

}  // namespace

Status ringAllReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  RingView ring = plannedRing(ctx);
  Blocks blocks = evenParts(args.count, ctx.size());
  std::byte* own = ctx.recvAt(blocks.begin[static_cast<size_t>(ring.index)]);
  CC_TRY(reduceScatterCore(ctx, ring, args.send, args.recv, blocks, own));
  return allGatherCore(ctx, ring, args.recv, blocks);
}

Status ringReduceScatter(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  RingView ring = plannedRing(ctx);
  return reduceScatterCore(ctx, ring, args.send, nullptr, stridedInRingOrder(args.count, ring),
                           args.recv);
}

Status ringAllGather(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  RingView ring = plannedRing(ctx);
  ctx.copy(ctx.recvAt(static_cast<size_t>(ctx.rank()) * args.count), args.send, args.count);
  return allGatherCore(ctx, ring, args.recv, stridedInRingOrder(args.count, ring));
}

// Along a chain from the root (chainFromRoot): chunk t travels from v-1 to v while
// chunk t-1 travels from v to v+1.
Status chainBroadcastAlong(const Context& ctx, int prev, int next, std::byte* buffer,
                           size_t count) {
  const size_t chunk = ctx.chunkElements();
  const size_t chunks = (count + chunk - 1) / chunk;
  const bool isHead = prev < 0;
  auto length = [&](size_t t) { return std::min(chunk, count - t * chunk); };
  for (size_t t = 0; t <= chunks; ++t) {
    // The head has everything: it sends chunk t at step t; the others receive chunk t
    // while forwarding chunk t-1.
    bool receiving = !isHead && t < chunks;
    bool sending = next >= 0 && (isHead ? t < chunks : t > 0);
    size_t sendChunk = isHead ? t : t - 1;
    CC_TRY(ctx.exchange(
        sending ? next : -1, sending ? buffer + ctx.bytes(sendChunk * chunk) : nullptr,
        sending ? length(sendChunk) : 0, receiving ? prev : -1,
        receiving ? buffer + ctx.bytes(t * chunk) : nullptr, receiving ? length(t) : 0));
  }
  return Status::ok();
}

ChainLinks chainFromRoot(const comm::Communicator& comm, int rank, int root) {
  const int n = comm.size();
  RingView ring{n, 0, comm.ringMembers()};
  int position = -1;
  int rootPosition = -1;
  for (int p = 0; p < n; ++p) {
    if (ring.rankAt(p) == rank) position = p;
    if (ring.rankAt(p) == root) rootPosition = p;
  }
  const int v = wrap(position - rootPosition, n);  // distance from the root along the ring
  return ChainLinks{v == 0 ? -1 : ring.rankAt(position - 1),
                    v == n - 1 ? -1 : ring.rankAt(position + 1)};
}

Status chainBroadcast(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  ChainLinks chain = chainFromRoot(ctx.comm(), ctx.rank(), args.root);
  if (chain.prev < 0) ctx.copy(args.recv, args.send, args.count);
  return chainBroadcastAlong(ctx, chain.prev, chain.next, args.recv, args.count);
}

// Partial results flow from the far end of the chain toward the root: position v adds
// its own chunk to what v+1 sent and passes it to v-1.
Status chainReduceAlong(const Context& ctx, int towardRoot, int away, const std::byte* source,
                        std::byte* result, size_t count) {
  const size_t chunk = ctx.chunkElements();
  const size_t chunks = (count + chunk - 1) / chunk;
  const bool isRoot = towardRoot < 0;
  auto length = [&](size_t t) { return std::min(chunk, count - t * chunk); };
  // Over shared memory what comes from `away` is reduced with ours as it arrives, into
  // the buffer the next step sends from (the root: into the result); elsewhere it is
  // received into `incoming` first.
  const bool onArrival = away >= 0 && ctx.reducesOnArrival(away);
  std::byte* incoming = away >= 0 && !onArrival ? ctx.scratch(0, chunk) : nullptr;
  const std::byte* finished = nullptr;  // partial result of chunk t-1, to pass on
  for (size_t t = 0; t <= chunks; ++t) {
    bool receiving = away >= 0 && t < chunks;
    bool sending = !isRoot && t > 0;
    const std::byte* own = t < chunks ? source + ctx.bytes(t * chunk) : nullptr;
    std::byte* dst = nullptr;
    if (t < chunks) {
      dst =
          isRoot ? result + ctx.bytes(t * chunk) : ctx.scratch(1 + static_cast<int>(t % 2), chunk);
    }
    ReduceOnArrival reduction(ctx, own);
    CC_TRY(ctx.exchange(sending ? towardRoot : -1, finished, sending ? length(t - 1) : 0,
                        receiving ? away : -1, onArrival ? dst : incoming,
                        receiving ? length(t) : 0, onArrival ? reduction.sink() : nullptr));
    if (t == chunks) break;
    if (away < 0 && isRoot) {
      ctx.copy(dst, own, length(t));  // a chain of one
    } else if (away < 0) {
      dst = const_cast<std::byte*>(own);  // the far end sends its own data as it is
    } else if (!onArrival) {
      ctx.reduce(dst, own, incoming, length(t));
    }
    finished = dst;
  }
  return Status::ok();
}

Status chainReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  ChainLinks chain = chainFromRoot(ctx.comm(), ctx.rank(), args.root);
  return chainReduceAlong(ctx, chain.prev, chain.next, args.send, args.recv, args.count);
}

}  // namespace cc::collectives
