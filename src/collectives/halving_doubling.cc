// Rabenseifner's all-reduce. With p the largest power of two not above n, the first
// 2(n-p) ranks pair up and fold: each even one hands its vector to the odd one above it
// and sits out. The p remaining ranks reduce-scatter by recursive halving (exchange half
// of the current range with the partner 2^k away, keep and reduce the other half), then
// all-gather by recursive doubling in the reverse order, and the folded ranks get the
// result back. 2 log2(p) steps moving about 2(p-1)/p of the vector: good for mid-sized
// messages. Halves are exchanged in chunks so scratch stays one chunk.
#include <algorithm>
#include <vector>

#include "collectives/algorithms.h"

namespace cc::collectives {
namespace {

struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

}  // namespace

Status halvingDoublingAllReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  const int n = ctx.size();
  const int r = ctx.rank();
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int extra = n - p;
  const size_t count = args.count;
  const size_t chunk = ctx.chunkElements();
  std::byte* data = args.recv;
  ctx.copy(data, args.send, count);
  std::byte* incoming = ctx.scratch(0, chunk);

  // Fold: the even rank of each of the first `extra` pairs gives its vector away.
  if (r < 2 * extra) {
    if (r % 2 == 0) {
      for (size_t offset = 0; offset < count; offset += chunk) {
        CC_TRY(ctx.send(r + 1, data + ctx.bytes(offset), std::min(chunk, count - offset)));
      }
      // ... and receives the result at the end.
      return ctx.recv(r + 1, data, count);
    }
    for (size_t offset = 0; offset < count; offset += chunk) {
      size_t length = std::min(chunk, count - offset);
      CC_TRY(ctx.recv(r - 1, incoming, length));
      ctx.reduce(data + ctx.bytes(offset), incoming, data + ctx.bytes(offset),
                 length);  // lower rank first
    }
  }
  const int me = r < 2 * extra ? r / 2 : r - extra;
  auto realRank = [&](int virtualRank) {
    return virtualRank < extra ? 2 * virtualRank + 1 : virtualRank + extra;
  };

  std::vector<Range> history;
  Range current{0, count};
  for (int distance = p / 2; distance >= 1; distance /= 2) {
    const int partnerVirtual = me ^ distance;
    const int partner = realRank(partnerVirtual);
    const bool lower = me < partnerVirtual;
    size_t middle = current.begin + current.size() / 2;
    Range low{current.begin, middle};
    Range high{middle, current.end};
    Range keep = lower ? low : high;
    Range give = lower ? high : low;
    size_t longest = std::max(keep.size(), give.size());
    for (size_t offset = 0; offset < longest; offset += chunk) {
      size_t giveLength = give.size() > offset ? std::min(chunk, give.size() - offset) : 0;
      size_t keepLength = keep.size() > offset ? std::min(chunk, keep.size() - offset) : 0;
      CC_TRY(ctx.exchange(partner, data + ctx.bytes(give.begin + offset), giveLength, partner,
                          incoming, keepLength));
      std::byte* mine = data + ctx.bytes(keep.begin + offset);
      if (lower) {
        ctx.reduce(mine, mine, incoming, keepLength);
      } else {
        ctx.reduce(mine, incoming, mine, keepLength);
      }
    }
    history.push_back(current);
    current = keep;
  }
  for (int distance = 1; distance < p; distance *= 2) {
    const int partner = realRank(me ^ distance);
    Range whole = history.back();
    history.pop_back();
    // The partner finished the other part of `whole`.
    Range other = current.begin == whole.begin ? Range{current.end, whole.end}
                                               : Range{whole.begin, current.begin};
    CC_TRY(ctx.exchange(partner, data + ctx.bytes(current.begin), current.size(), partner,
                        data + ctx.bytes(other.begin), other.size()));
    current = whole;
  }
  if (r < 2 * extra) CC_TRY(ctx.send(r - 1, data, count));
  return Status::ok();
}

}  // namespace cc::collectives
