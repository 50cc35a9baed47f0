// Binomial trees rooted at the root: position v = rank - root; v's parent is v with its
// lowest set bit cleared, its children v + 2^k for every 2^k below that bit. log2(n)
// rounds, so they win for small messages; chunks keep every level busy for large ones.
// Reductions combine a node's own value with its children's in increasing distance,
// a fixed order, so every run gives the same bits.
#include <algorithm>
#include <vector>

#include "collectives/algorithms.h"

namespace cc::collectives {
namespace {

int wrap(int value, int n) { return ((value % n) + n) % n; }

struct TreeLinks {
  int parent = -1;            // rank, or -1 at the root
  std::vector<int> children;  // ranks, nearest first
};

TreeLinks binomialLinks(int rank, int root, int n) {
  TreeLinks links;
  int v = wrap(rank - root, n);
  int lowest = v == 0 ? n : (v & -v);  // the root may have children at every distance
  if (v != 0) links.parent = wrap(v - lowest + root, n);
  for (int distance = 1; distance < lowest && v + distance < n; distance *= 2) {
    links.children.push_back(wrap(v + distance + root, n));
  }
  return links;
}

Status broadcastFrom(const Context& ctx, int root, std::byte* buffer, size_t count) {
  const int n = ctx.size();
  TreeLinks links = binomialLinks(ctx.rank(), root, n);
  const size_t chunk = ctx.chunkElements();
  const size_t chunks = (count + chunk - 1) / chunk;
  auto length = [&](size_t t) { return std::min(chunk, count - t * chunk); };
  std::vector<comm::PointToPoint> messages;
  // The root sends chunk t at step t; the others receive chunk t while forwarding t-1.
  const bool isRoot = links.parent < 0;
  for (size_t t = 0; t <= chunks; ++t) {
    messages.clear();
    if (!isRoot && t < chunks) messages.push_back(ctx.message(false, links.parent, buffer + ctx.bytes(t * chunk), length(t)));
    size_t forward = isRoot ? t : t - 1;
    if ((isRoot && t < chunks) || (!isRoot && t > 0)) {
      for (int child : links.children) {
        messages.push_back(ctx.message(true, child, buffer + ctx.bytes(forward * chunk), length(forward)));
      }
    }
    CC_TRY(ctx.run(messages));
  }
  return Status::ok();
}

// The reduction of every rank's `source` arrives at `root`'s `result`.
Status reduceTo(const Context& ctx, int root, const std::byte* source, std::byte* result, size_t count) {
  const int n = ctx.size();
  TreeLinks links = binomialLinks(ctx.rank(), root, n);
  const size_t chunk = ctx.chunkElements();
  const size_t chunks = (count + chunk - 1) / chunk;
  auto length = [&](size_t t) { return std::min(chunk, count - t * chunk); };
  const size_t fanIn = links.children.size();
  std::vector<std::byte*> incoming;
  // Scratch 0 and 1 hold this step's and the last step's partial result; children's
  // chunks go to one buffer, one child after another.
  std::byte* childData = ctx.scratch(2, chunk * std::max<size_t>(1, fanIn));
  for (size_t c = 0; c < fanIn; ++c) incoming.push_back(childData + ctx.bytes(c * chunk));
  std::vector<comm::PointToPoint> messages;
  std::vector<const void*> sources;
  const std::byte* finished = nullptr;
  for (size_t t = 0; t <= chunks; ++t) {
    messages.clear();
    if (t < chunks) {
      for (size_t c = 0; c < fanIn; ++c) messages.push_back(ctx.message(false, links.children[c], incoming[c], length(t)));
    }
    if (links.parent >= 0 && t > 0) messages.push_back(ctx.message(true, links.parent, finished, length(t - 1)));
    CC_TRY(ctx.run(messages));
    if (t == chunks) break;
    const std::byte* own = source + ctx.bytes(t * chunk);
    if (fanIn == 0) {
      finished = own;
      continue;
    }
    sources.assign(1, own);
    for (std::byte* child : incoming) sources.push_back(child);
    std::byte* dst = links.parent < 0 ? result + ctx.bytes(t * chunk) : ctx.scratch(static_cast<int>(t % 2), chunk);
    ctx.reduceMany(dst, sources.data(), static_cast<int>(sources.size()), length(t));
    finished = dst;
  }
  if (links.parent < 0 && fanIn == 0) ctx.copy(result, source, count);
  return Status::ok();
}

}  // namespace

Status treeBroadcast(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  if (ctx.rank() == args.root) ctx.copy(args.recv, args.send, args.count);
  return broadcastFrom(ctx, args.root, args.recv, args.count);
}

Status treeReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  return reduceTo(ctx, args.root, args.send, args.recv, args.count);
}

Status treeAllReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  CC_TRY(reduceTo(ctx, 0, args.send, args.recv, args.count));
  return broadcastFrom(ctx, 0, args.recv, args.count);
}

}  // namespace cc::collectives
