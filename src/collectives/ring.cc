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

Blocks evenParts(size_t count, int n) {
  Blocks blocks;
  for (int b = 0; b < n; ++b) {
    blocks.begin.push_back(partBegin(count, n, b));
    blocks.length.push_back(partLength(count, n, b));
    blocks.longest = std::max(blocks.longest, blocks.length.back());
  }
  return blocks;
}

Blocks strided(size_t blockCount, int n) {
  Blocks blocks;
  for (int b = 0; b < n; ++b) {
    blocks.begin.push_back(static_cast<size_t>(b) * blockCount);
    blocks.length.push_back(blockCount);
  }
  blocks.longest = blockCount;
  return blocks;
}

// Block `rank` of `source`, reduced over all ranks, lands in `result`. Partial sums go
// to `work` at their block's place when given (all-reduce: the receive buffer), else to
// per-thread scratch.
Status reduceScatterCore(const Context& ctx, const std::byte* source, std::byte* work, const Blocks& blocks,
                         std::byte* result) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const int right = wrap(r + 1, n);
  const int left = wrap(r - 1, n);
  const size_t chunk = ctx.chunkElements();
  std::byte* incoming = ctx.scratch(0, chunk);
  for (size_t offset = 0; offset < blocks.longest; offset += chunk) {
    const std::byte* outgoing = nullptr;
    for (int s = 0; s < n - 1; ++s) {
      int sendBlock = wrap(r - s - 1, n);
      int recvBlock = wrap(r - s - 2, n);
      const std::byte* sendData = s == 0 ? source + ctx.bytes(blocks.at(sendBlock, offset)) : outgoing;
      size_t recvCount = blocks.piece(recvBlock, offset, chunk);
      CC_TRY(ctx.exchange(right, sendData, blocks.piece(sendBlock, offset, chunk), left, incoming, recvCount));
      std::byte* dst = nullptr;
      if (s == n - 2) {
        dst = result + ctx.bytes(offset);
      } else if (work != nullptr) {
        dst = work + ctx.bytes(blocks.at(recvBlock, offset));
      } else {
        dst = ctx.scratch(1 + s % 2, chunk);
      }
      ctx.reduce(dst, source + ctx.bytes(blocks.at(recvBlock, offset)), incoming, recvCount);
      outgoing = dst;
    }
  }
  return Status::ok();
}

// Every block of `buffer` everywhere, given that block `rank` is in place.
Status allGatherCore(const Context& ctx, std::byte* buffer, const Blocks& blocks) {
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t chunk = ctx.chunkElements();
  for (size_t offset = 0; offset < blocks.longest; offset += chunk) {
    for (int s = 0; s < n - 1; ++s) {
      int sendBlock = wrap(r - s, n);
      int recvBlock = wrap(r - s - 1, n);
      CC_TRY(ctx.exchange(wrap(r + 1, n), buffer + ctx.bytes(blocks.at(sendBlock, offset)),
                          blocks.piece(sendBlock, offset, chunk), wrap(r - 1, n),
                          buffer + ctx.bytes(blocks.at(recvBlock, offset)), blocks.piece(recvBlock, offset, chunk)));
    }
  }
  return Status::ok();
}

}  // namespace

Status ringAllReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  Blocks blocks = evenParts(args.count, ctx.size());
  std::byte* own = ctx.recvAt(blocks.begin[static_cast<size_t>(ctx.rank())]);
  CC_TRY(reduceScatterCore(ctx, args.send, args.recv, blocks, own));
  return allGatherCore(ctx, args.recv, blocks);
}

Status ringReduceScatter(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  return reduceScatterCore(ctx, args.send, nullptr, strided(args.count, ctx.size()), args.recv);
}

Status ringAllGather(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  ctx.copy(ctx.recvAt(static_cast<size_t>(ctx.rank()) * args.count), args.send, args.count);
  return allGatherCore(ctx, args.recv, strided(args.count, ctx.size()));
}

// Rank order from the root: position v = rank - root. Chunk t travels from v-1 to v
// while chunk t-1 travels from v to v+1.
Status chainBroadcast(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  const int n = ctx.size();
  const int v = wrap(ctx.rank() - args.root, n);
  const int prev = v == 0 ? -1 : wrap(ctx.rank() - 1, n);
  const int next = v == n - 1 ? -1 : wrap(ctx.rank() + 1, n);
  const size_t chunk = ctx.chunkElements();
  const size_t chunks = (args.count + chunk - 1) / chunk;
  if (v == 0) ctx.copy(args.recv, args.send, args.count);
  auto length = [&](size_t t) { return std::min(chunk, args.count - t * chunk); };
  for (size_t t = 0; t <= chunks; ++t) {
    bool receiving = prev >= 0 && t < chunks;
    bool sending = next >= 0 && t > 0;
    if (v == 0) {
      // The root has everything: it sends chunk t at step t.
      receiving = false;
      sending = t < chunks;
    }
    size_t sendChunk = v == 0 ? t : t - 1;
    CC_TRY(ctx.exchange(sending ? next : -1, sending ? ctx.recvAt(sendChunk * chunk) : nullptr,
                        sending ? length(sendChunk) : 0, receiving ? prev : -1,
                        receiving ? ctx.recvAt(t * chunk) : nullptr, receiving ? length(t) : 0));
  }
  return Status::ok();
}

// Partial results flow from the far end of the chain toward the root: position v adds
// its own chunk to what v+1 sent and passes it to v-1.
Status chainReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  const int n = ctx.size();
  const int v = wrap(ctx.rank() - args.root, n);
  const int towardRoot = v == 0 ? -1 : wrap(ctx.rank() - 1, n);
  const int away = v == n - 1 ? -1 : wrap(ctx.rank() + 1, n);
  const size_t chunk = ctx.chunkElements();
  const size_t chunks = (args.count + chunk - 1) / chunk;
  auto length = [&](size_t t) { return std::min(chunk, args.count - t * chunk); };
  std::byte* incoming = ctx.scratch(0, chunk);
  const std::byte* finished = nullptr;  // partial result of chunk t-1, to pass on
  for (size_t t = 0; t <= chunks; ++t) {
    bool receiving = away >= 0 && t < chunks;
    bool sending = towardRoot >= 0 && t > 0;
    CC_TRY(ctx.exchange(sending ? towardRoot : -1, finished, sending ? length(t - 1) : 0, receiving ? away : -1,
                        incoming, receiving ? length(t) : 0));
    if (t == chunks) break;
    const std::byte* own = ctx.sendAt(t * chunk);
    std::byte* dst = v == 0 ? ctx.recvAt(t * chunk) : ctx.scratch(1 + static_cast<int>(t % 2), chunk);
    if (away >= 0) {
      ctx.reduce(dst, own, incoming, length(t));
    } else if (v == 0) {
      ctx.copy(dst, own, length(t));  // a single rank
    } else {
      dst = const_cast<std::byte*>(own);  // the far end sends its own data as it is
    }
    finished = dst;
  }
  return Status::ok();
}

}  // namespace cc::collectives
