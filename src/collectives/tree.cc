// Trees. Binomial trees rooted at the root: position v = rank - root; v's parent is v
// with its lowest set bit cleared, its children v + 2^k for every 2^k below that bit.
// log2(n) rounds, so they win for small messages; chunks keep every level busy for
// large ones.
//
// The double binary tree splits the vector in two halves, each reduced and broadcast
// over its own binary tree: tree A is a heap over ranks 0..n-1 (parent of position p is
// (p-1)/2), tree B the same heap over the ranks in reverse, so a rank that forwards in
// one tree is (nearly always) a leaf in the other and the forwarding work is shared,
// where a single tree leaves the leaves idle. (The two trees run one after the other,
// see doubleBinaryTreeAllReduce.) Across hosts both all-reduce trees come from the
// topology planner instead (plannedTree), and broadcast and reduce hang the planner's
// first tree from their root (treeFromRoot).
//
// Reductions combine a node's own value with its children's in a fixed order (the
// node's own first, then its children in the order listed), so every run gives the same
// bits, and the root's result is broadcast down the same tree, so every rank does too.
#include <algorithm>
#include <vector>

#include "collectives/algorithms.h"

namespace cc::collectives {
namespace {

int wrap(int value, int n) { return ((value % n) + n) % n; }

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

// A heap over the ranks in `order` (rank at position p = order(p)).
template <typename Order>
TreeLinks heapLinks(int position, int n, Order order) {
  TreeLinks links;
  if (position > 0) links.parent = order((position - 1) / 2);
  for (int child : {2 * position + 1, 2 * position + 2}) {
    if (child < n) links.children.push_back(order(child));
  }
  return links;
}

// One tree's share of the work: its links and its part of the vector.
struct TreeJob {
  TreeLinks links;
  const std::byte* source = nullptr;  // reduce: this rank's input
  std::byte* buffer = nullptr;        // reduce: the root's result; broadcast: the data
  size_t count = 0;
  int scratchBase = 0;  // scratch buffers scratchBase .. scratchBase + 2
};

size_t chunksOf(size_t count, size_t chunk) { return (count + chunk - 1) / chunk; }

// Across hosts the all-reduce trees are the topology planner's (topology/planner.h):
// a chain per host under its leader and a binary tree over the leaders, so each tree
// crosses between hosts hosts-1 times, where a binomial tree over rank numbers can cross
// at almost every edge. Within one host the rank-number trees are as good.
const topology::Tree* plannedTree(const Context& ctx, size_t which) {
  const topology::Plan& plan = ctx.comm().plan();
  if (plan.hostCount < 2 || which >= plan.trees.size()) return nullptr;
  return &plan.trees[which];
}

TreeLinks linksIn(const topology::Tree& tree, int rank) {
  return TreeLinks{tree.parent[static_cast<size_t>(rank)],
                   tree.children[static_cast<size_t>(rank)]};
}

// The reduction of every job (one tree each; callers pass trees that cannot wait on one
// another), chunk by chunk: at step t each node receives chunk t from its children
// while sending chunk t-1's partial result to its parent.
Status reduceJobs(const Context& ctx, std::vector<TreeJob>& jobs) {
  const size_t chunk = ctx.chunkElements();
  size_t steps = 0;
  for (const TreeJob& job : jobs) steps = std::max(steps, chunksOf(job.count, chunk));
  struct State {
    std::vector<std::byte*> incoming;
    const std::byte* finished = nullptr;
  };
  std::vector<State> states(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    size_t fanIn = jobs[j].links.children.size();
    std::byte* childData = ctx.scratch(jobs[j].scratchBase + 2, chunk * std::max<size_t>(1, fanIn));
    for (size_t c = 0; c < fanIn; ++c)
      states[j].incoming.push_back(childData + ctx.bytes(c * chunk));
  }
  std::vector<comm::PointToPoint> messages;
  std::vector<const void*> sources;
  for (size_t t = 0; t <= steps; ++t) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      const TreeJob& job = jobs[j];
      const size_t chunks = chunksOf(job.count, chunk);
      messages.clear();
      if (t < chunks) {
        size_t length = std::min(chunk, job.count - t * chunk);
        for (size_t c = 0; c < job.links.children.size(); ++c) {
          messages.push_back(
              ctx.message(false, job.links.children[c], states[j].incoming[c], length));
        }
      }
      if (job.links.parent >= 0 && t > 0 && t <= chunks) {
        messages.push_back(ctx.message(true, job.links.parent, states[j].finished,
                                       std::min(chunk, job.count - (t - 1) * chunk)));
      }
      CC_TRY(ctx.run(messages));
      if (t >= chunks) continue;
      size_t length = std::min(chunk, job.count - t * chunk);
      const std::byte* own = job.source + ctx.bytes(t * chunk);
      if (job.links.children.empty()) {
        if (job.links.parent < 0)
          ctx.copy(job.buffer + ctx.bytes(t * chunk), own, length);  // a tree of one
        states[j].finished = own;
        continue;
      }
      sources.assign(1, own);
      for (std::byte* child : states[j].incoming) sources.push_back(child);
      std::byte* dst = job.links.parent < 0
                           ? job.buffer + ctx.bytes(t * chunk)
                           : ctx.scratch(job.scratchBase + static_cast<int>(t % 2), chunk);
      ctx.reduceMany(dst, sources.data(), static_cast<int>(sources.size()), length);
      states[j].finished = dst;
    }
  }
  return Status::ok();
}

// The broadcasts of every job, together: the root sends chunk t at step t; the others
// receive chunk t while forwarding chunk t-1.
Status broadcastJobs(const Context& ctx, const std::vector<TreeJob>& jobs) {
  const size_t chunk = ctx.chunkElements();
  size_t steps = 0;
  for (const TreeJob& job : jobs) steps = std::max(steps, chunksOf(job.count, chunk));
  std::vector<comm::PointToPoint> messages;
  for (size_t t = 0; t <= steps; ++t) {
    for (const TreeJob& job : jobs) {
      messages.clear();
      const size_t chunks = chunksOf(job.count, chunk);
      const bool isRoot = job.links.parent < 0;
      auto length = [&](size_t c) { return std::min(chunk, job.count - c * chunk); };
      if (!isRoot && t < chunks) {
        messages.push_back(
            ctx.message(false, job.links.parent, job.buffer + ctx.bytes(t * chunk), length(t)));
      }
      size_t forward = isRoot ? t : t - 1;
      if ((isRoot && t < chunks) || (!isRoot && t > 0 && t <= chunks)) {
        for (int child : job.links.children) {
          messages.push_back(
              ctx.message(true, child, job.buffer + ctx.bytes(forward * chunk), length(forward)));
        }
      }
      CC_TRY(ctx.run(messages));
    }
  }
  return Status::ok();
}

}  // namespace

TreeLinks treeFromRoot(const comm::Communicator& comm, int rank, int root) {
  const topology::Plan& plan = comm.plan();
  const int n = comm.size();
  if (plan.hostCount < 2 || plan.trees.empty()) return binomialLinks(rank, root, n);
  // The planned tree's edges, undirected, each rank's neighbours in a fixed order (its
  // planned parent, then its planned children), walked outward from the root.
  const topology::Tree& tree = plan.trees.front();
  auto forEachNeighbour = [&](int r, auto&& visit) {
    if (tree.parent[static_cast<size_t>(r)] >= 0) visit(tree.parent[static_cast<size_t>(r)]);
    for (int child : tree.children[static_cast<size_t>(r)]) visit(child);
  };
  std::vector<int> parent(static_cast<size_t>(n), -2);  // -2: not reached yet
  std::vector<int> queue{root};
  queue.reserve(static_cast<size_t>(n));
  parent[static_cast<size_t>(root)] = -1;
  for (size_t head = 0; head < queue.size(); ++head) {
    const int from = queue[head];
    forEachNeighbour(from, [&](int next) {
      if (parent[static_cast<size_t>(next)] != -2) return;
      parent[static_cast<size_t>(next)] = from;
      queue.push_back(next);
    });
  }
  TreeLinks links;
  links.parent = parent[static_cast<size_t>(rank)];
  forEachNeighbour(rank, [&](int next) {
    if (parent[static_cast<size_t>(next)] == rank) links.children.push_back(next);
  });
  return links;
}

Status treeBroadcast(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  if (ctx.rank() == args.root) ctx.copy(args.recv, args.send, args.count);
  std::vector<TreeJob> jobs{
      {treeFromRoot(ctx.comm(), ctx.rank(), args.root), nullptr, args.recv, args.count, 0}};
  return broadcastJobs(ctx, jobs);
}

Status treeReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  std::vector<TreeJob> jobs{
      {treeFromRoot(ctx.comm(), ctx.rank(), args.root), args.send, args.recv, args.count, 0}};
  return reduceJobs(ctx, jobs);
}

Status treeAllReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  const topology::Tree* planned = plannedTree(ctx, 0);
  TreeLinks links =
      planned != nullptr ? linksIn(*planned, ctx.rank()) : binomialLinks(ctx.rank(), 0, ctx.size());
  std::vector<TreeJob> jobs{{std::move(links), args.send, args.recv, args.count, 0}};
  CC_TRY(reduceJobs(ctx, jobs));
  return broadcastJobs(ctx, jobs);
}

Status doubleBinaryTreeAllReduce(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  const int n = ctx.size();
  const int r = ctx.rank();
  const size_t half = args.count / 2;
  // The trees run one after the other. Run in lockstep they would deadlock in this
  // blocking executor: a rank waiting for its child in one tree can be the child its
  // parent (in the other tree) waits for. Overlapping them needs per-message
  // completion, which the executor does not offer yet.
  const topology::Tree* plannedA = plannedTree(ctx, 0);
  const topology::Tree* plannedB = plannedTree(ctx, 1);
  const bool planned = plannedA != nullptr && plannedB != nullptr;
  TreeLinks linksA = planned ? linksIn(*plannedA, r) : heapLinks(r, n, [](int p) { return p; });
  TreeLinks linksB =
      planned ? linksIn(*plannedB, r) : heapLinks(n - 1 - r, n, [n](int p) { return n - 1 - p; });
  std::vector<TreeJob> treeA{{std::move(linksA), args.send, args.recv, half, 0}};
  std::vector<TreeJob> treeB{{std::move(linksB), args.send + ctx.bytes(half),
                              args.recv + ctx.bytes(half), args.count - half, 3}};
  CC_TRY(reduceJobs(ctx, treeA));
  CC_TRY(reduceJobs(ctx, treeB));
  CC_TRY(broadcastJobs(ctx, treeA));
  return broadcastJobs(ctx, treeB);
}

}  // namespace cc::collectives
