// All-to-all. Pairwise exchange: at step s every rank sends to rank+s and receives from
// rank-s, n-1 steps each moving one block each way; good for large blocks. Bruck: the
// blocks are rotated so that slot i holds what goes i ranks ahead, then in step k every
// slot with bit k set travels 2^k ranks ahead; log2(n) steps moving about half the
// blocks each, so fewer, larger messages for small blocks.
#include <algorithm>
#include <vector>

#include "collectives/algorithms.h"

namespace cc::collectives {
namespace {

int wrap(int value, int n) { return ((value % n) + n) % n; }

}  // namespace

Status pairwiseAllToAll(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t block = args.count;
  ctx.copy(ctx.recvAt(static_cast<size_t>(r) * block), ctx.sendAt(static_cast<size_t>(r) * block),
           block);
  for (int s = 1; s < n; ++s) {
    int to = wrap(r + s, n);
    int from = wrap(r - s, n);
    CC_TRY(ctx.exchange(to, ctx.sendAt(static_cast<size_t>(to) * block), block, from,
                        ctx.recvAt(static_cast<size_t>(from) * block), block));
  }
  return Status::ok();
}

Status pairwiseAllToAllv(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  const int n = ctx.size();
  const int r = ctx.rank();
  const auto me = static_cast<size_t>(r);
  ctx.copy(ctx.recvAt(args.recvDispls[me]), ctx.sendAt(args.sendDispls[me]), args.sendCounts[me]);
  for (int s = 1; s < n; ++s) {
    auto to = static_cast<size_t>(wrap(r + s, n));
    auto from = static_cast<size_t>(wrap(r - s, n));
    CC_TRY(ctx.exchange(static_cast<int>(to), ctx.sendAt(args.sendDispls[to]), args.sendCounts[to],
                        static_cast<int>(from), ctx.recvAt(args.recvDispls[from]),
                        args.recvCounts[from]));
  }
  return Status::ok();
}

Status bruckAllToAll(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t block = args.count;
  const auto slots = static_cast<size_t>(n);
  // slot i: the block bound for rank r+i.
  std::byte* rotated = ctx.scratch(0, slots * block);
  for (size_t i = 0; i < slots; ++i) {
    ctx.copy(rotated + ctx.bytes(i * block),
             ctx.sendAt(static_cast<size_t>(wrap(r + static_cast<int>(i), n)) * block), block);
  }
  std::byte* packed = ctx.scratch(1, slots * block);
  std::byte* unpacked = ctx.scratch(2, slots * block);
  for (int distance = 1; distance < n; distance *= 2) {
    size_t moving = 0;
    for (size_t i = 0; i < slots; ++i) {
      if ((i & static_cast<size_t>(distance)) == 0) continue;
      ctx.copy(packed + ctx.bytes(moving * block), rotated + ctx.bytes(i * block), block);
      ++moving;
    }
    CC_TRY(ctx.exchange(wrap(r + distance, n), packed, moving * block, wrap(r - distance, n),
                        unpacked, moving * block));
    size_t arrived = 0;
    for (size_t i = 0; i < slots; ++i) {
      if ((i & static_cast<size_t>(distance)) == 0) continue;
      ctx.copy(rotated + ctx.bytes(i * block), unpacked + ctx.bytes(arrived * block), block);
      ++arrived;
    }
  }
  // Slot i now holds the block that rank r-i sent to r.
  for (size_t i = 0; i < slots; ++i) {
    ctx.copy(ctx.recvAt(static_cast<size_t>(wrap(r - static_cast<int>(i), n)) * block),
             rotated + ctx.bytes(i * block), block);
  }
  return Status::ok();
}

}  // namespace cc::collectives
