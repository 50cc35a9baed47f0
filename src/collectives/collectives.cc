// runCollective: the trivial cases, the optional same-call check (CC_CHECK=1), the
// tuner's choice, the algorithm, and ccAvg's division.
#include <cstring>
#include <string_view>

#include "collectives/algorithms.h"
#include "collectives/collective.h"
#include "collectives/direct.h"
#include "collectives/tuner.h"
#include "core/copy.h"
#include "core/log.h"

namespace cc::collectives {
namespace {

// A single rank: every collective is a copy.
void runAlone(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  if (args.kind == CollectiveKind::kAllToAllv) {
    ctx.copy(ctx.recvAt(args.recvDispls[0]), ctx.sendAt(args.sendDispls[0]), args.sendCounts[0]);
  } else if (args.recv != nullptr) {
    ctx.copy(args.recv, args.send, args.count);
  }
}

bool isEmpty(const CollectiveArgs& args) {
  if (args.kind != CollectiveKind::kAllToAllv) return args.count == 0;
  for (size_t i = 0; i < args.sendCounts.size(); ++i) {
    if (args.sendCounts[i] != 0 || args.recvCounts[i] != 0) return false;
  }
  return true;
}

struct CallDescriptor {
  uint32_t kind;
  uint32_t type;
  uint32_t op;
  int32_t root;
  uint64_t count;
};

std::string describe(const CallDescriptor& call) {
  auto kind = static_cast<CollectiveKind>(call.kind);
  std::string text = fmt::format("{}(count {}, {}", collectiveName(kind), call.count,
                                 dataTypeName(static_cast<ccDataType_t>(call.type)));
  if (kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduce ||
      kind == CollectiveKind::kReduceScatter) {
    text += fmt::format(", {}", redOpName(static_cast<ccRedOp_t>(call.op)));
  }
  if (kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce)
    text += fmt::format(", root {}", call.root);
  return text + ")";
}

// CC_CHECK=1: every rank sends its call to every other before running it.
Status checkSameCall(comm::Communicator& comm, const CollectiveArgs& args) {
  const int n = comm.size();
  CallDescriptor mine{static_cast<uint32_t>(args.kind), static_cast<uint32_t>(args.type),
                      static_cast<uint32_t>(args.op), args.root,
                      args.kind == CollectiveKind::kAllToAllv ? 0 : args.count};
  std::vector<CallDescriptor> theirs(static_cast<size_t>(n));
  std::vector<comm::PointToPoint> messages;
  for (int peer = 0; peer < n; ++peer) {
    if (peer == comm.rank()) continue;
    messages.push_back(
        {&comm, true, reinterpret_cast<std::byte*>(&mine), sizeof(mine), peer, "check"});
    messages.push_back({&comm, false,
                        reinterpret_cast<std::byte*>(&theirs[static_cast<size_t>(peer)]),
                        sizeof(mine), peer, "check"});
  }
  CC_TRY(comm::execute(messages));
  for (int peer = 0; peer < n; ++peer) {
    if (peer == comm.rank()) continue;
    if (std::memcmp(&theirs[static_cast<size_t>(peer)], &mine, sizeof(mine)) == 0) continue;
    return invalidUsage(fmt::format(
        "mismatched collectives (CC_CHECK=1): rank {} called {} while rank {} called {}",
        comm.rank(), describe(mine), peer, describe(theirs[static_cast<size_t>(peer)])));
  }
  return Status::ok();
}

Status dispatch(const Context& ctx, const Choice& choice) {
  const CollectiveArgs& args = ctx.args();
  switch (args.kind) {
    case CollectiveKind::kAllReduce:
      switch (choice.algorithm) {
        case Algorithm::kDirect:
          return directAllReduce(ctx, choice.oneShot);
        case Algorithm::kTree:
          return treeAllReduce(ctx);
        case Algorithm::kHalvingDoubling:
          return halvingDoublingAllReduce(ctx);
        case Algorithm::kHierarchical:
          return hierarchicalAllReduce(ctx);
        case Algorithm::kDoubleBinaryTree:
          return doubleBinaryTreeAllReduce(ctx);
        default:
          return ringAllReduce(ctx);
      }
    case CollectiveKind::kBroadcast:
      switch (choice.algorithm) {
        case Algorithm::kDirect:
          return directBroadcast(ctx);
        case Algorithm::kTree:
          return treeBroadcast(ctx);
        default:
          return chainBroadcast(ctx);
      }
    case CollectiveKind::kReduce:
      switch (choice.algorithm) {
        case Algorithm::kDirect:
          return directReduce(ctx, choice.oneShot);
        case Algorithm::kTree:
          return treeReduce(ctx);
        default:
          return chainReduce(ctx);
      }
    case CollectiveKind::kAllGather:
      return choice.algorithm == Algorithm::kDirect ? directAllGather(ctx) : ringAllGather(ctx);
    case CollectiveKind::kReduceScatter:
      return choice.algorithm == Algorithm::kDirect ? directReduceScatter(ctx)
                                                    : ringReduceScatter(ctx);
    case CollectiveKind::kAllToAll:
      switch (choice.algorithm) {
        case Algorithm::kDirect:
          return directAllToAll(ctx);
        case Algorithm::kBruck:
          return bruckAllToAll(ctx);
        default:
          return pairwiseAllToAll(ctx);
      }
    case CollectiveKind::kAllToAllv:
      return pairwiseAllToAllv(ctx);
  }
  return internalError("unknown collective");
}

void divideAverage(const comm::Communicator& comm, const CollectiveArgs& args) {
  if (args.op != ccAvg) return;
  if (args.kind == CollectiveKind::kReduce && comm.rank() != args.root) return;
  divideForAverage(args.recv, args.count, args.type, comm.size());
}

// The tuner's choice, remembered for the next call of the same shape.
Choice decide(comm::Communicator& comm, const CollectiveArgs& args) {
  comm::Communicator::DecisionCache& cache = comm.decisionCache();
  const uint64_t shape = static_cast<uint64_t>(args.kind) | static_cast<uint64_t>(args.type) << 8 |
                         static_cast<uint64_t>(args.op) << 16 |
                         static_cast<uint64_t>(static_cast<uint32_t>(args.root)) << 24;
  const bool cacheable =
      args.kind != CollectiveKind::kAllToAllv && !log::enabled(log::Level::kInfo);
  if (cacheable && cache.shape == shape && cache.count == args.count &&
      cache.forcedAlgorithm == comm.algorithmOverride() &&
      cache.forcedChunkBytes == comm.chunkBytesOverride()) {
    Choice choice;
    choice.algorithm = static_cast<Algorithm>(cache.algorithm);
    choice.chunkBytes = cache.chunkBytes;
    choice.oneShot = cache.oneShot;
    return choice;
  }
  Choice choice = choose(comm, args, static_cast<Algorithm>(comm.algorithmOverride()),
                         comm.chunkBytesOverride());
  if (cacheable) {
    cache = {shape,
             args.count,
             comm.algorithmOverride(),
             comm.chunkBytesOverride(),
             static_cast<int>(choice.algorithm),
             choice.chunkBytes,
             choice.oneShot};
  }
  return choice;
}

}  // namespace

const char* collectiveName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllReduce:
      return "allreduce";
    case CollectiveKind::kBroadcast:
      return "broadcast";
    case CollectiveKind::kReduce:
      return "reduce";
    case CollectiveKind::kAllGather:
      return "allgather";
    case CollectiveKind::kReduceScatter:
      return "reducescatter";
    case CollectiveKind::kAllToAll:
      return "alltoall";
    case CollectiveKind::kAllToAllv:
      return "alltoallv";
  }
  return "?";
}

const char* algorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kDirect:
      return "direct";
    case Algorithm::kHalvingDoubling:
      return "hd";
    case Algorithm::kPairwise:
      return "pairwise";
    case Algorithm::kBruck:
      return "bruck";
    case Algorithm::kHierarchical:
      return "hier";
    case Algorithm::kDoubleBinaryTree:
      return "dbt";
  }
  return "?";
}

Algorithm parseAlgorithm(std::string_view name) {
  for (Algorithm algorithm : {Algorithm::kRing, Algorithm::kTree, Algorithm::kDirect,
                              Algorithm::kHalvingDoubling, Algorithm::kPairwise, Algorithm::kBruck,
                              Algorithm::kHierarchical, Algorithm::kDoubleBinaryTree}) {
    if (name == algorithmName(algorithm)) return algorithm;
  }
  return Algorithm::kAuto;
}

namespace {

// Whether a call may take the single copy (CC_SHM_USE_CMA=auto): broadcast, all-gather
// and all-to-all on the direct algorithm, the collectives that copy what they read from
// the peers' memory, when every pair of this rank and a peer reads the other by address
// (shm, the probe passed, and each side found the kernel's copy fast enough to offer;
// transport/shm/channel.h). Both ways, so that every rank of the communicator comes to
// the same answer and the ranks seed and try the same ways in the same calls.
bool offersSingleCopy(const comm::Communicator& comm, CollectiveKind kind, Algorithm algorithm) {
  if (comm.config().shmUseCma >= 0 || algorithm != Algorithm::kDirect) return false;
  if (kind != CollectiveKind::kBroadcast && kind != CollectiveKind::kAllGather &&
      kind != CollectiveKind::kAllToAll) {
    return false;
  }
  for (int peer = 0; peer < comm.size(); ++peer) {
    if (peer == comm.rank()) continue;
    const transport::Channel* channel = comm.channel(peer);
    if (!channel->peerReadsByAddress() || !channel->readsPeerByAddress()) return false;
  }
  return true;
}

}  // namespace

Status runCollective(comm::Communicator& comm, const CollectiveArgs& args) {
  if (comm.aborted()) return invalidUsage("communicator was aborted");
  CC_TRY(comm.brokenStatus());
  const Config& config = comm.config();
  if (config.checkCalls && comm.size() > 1) {
    comm::TrafficScope control(comm, ccTrafficControl);
    CC_TRY(checkSameCall(comm, args));
  }
  comm::TrafficScope scope(comm, static_cast<int>(args.kind));
  comm.traffic(static_cast<int>(args.kind)).calls.fetch_add(1, std::memory_order_relaxed);
  if (isEmpty(args)) return Status::ok();
  if (comm.size() == 1) {
    runAlone(Context(comm, args, 1));
    return Status::ok();
  }
  Choice choice = decide(comm, args);
  if (log::enabled(log::Level::kInfo)) {
    log::info("{} of {} x {} on {} ranks: {}{} chunk {} B ({})", collectiveName(args.kind),
              args.count, dataTypeName(args.type), comm.size(), algorithmName(choice.algorithm),
              choice.oneShot ? " one-shot" : "", choice.chunkBytes, choice.why);
  }
  int64_t startNs = comm.trace() != nullptr ? nowNanos() : 0;
  uint64_t sequence = comm.nextSequence();
  comm.recorder().begin(sequence, collectiveName(args.kind), algorithmName(choice.algorithm), -1,
                        args.count * dataTypeSize(args.type), startNs);
  Context ctx(comm, args, choice.chunkBytes);
  // The copy kernel for this call: the loop or memcpy, whichever this communicator's calls
  // of this kind and size found faster lately (core/copy.h, CopyChooser). All-to-allv's
  // sizes differ between ranks: it keeps the process's kernel.
  static_assert(comm::Communicator::kSendCopies > static_cast<int>(CollectiveKind::kAllToAllv),
                "the point-to-point copy choosers follow the collectives' (comm/communicator.h)");
  const size_t bytes =
      args.kind == CollectiveKind::kAllToAllv ? 0 : args.count * dataTypeSize(args.type);
  Status status = runWithChosenCopy(&comm.copyChooser(static_cast<int>(args.kind)), bytes,
                                    offersSingleCopy(comm, args.kind, choice.algorithm),
                                    [&] { return dispatch(ctx, choice); });
  comm.recorder().finish(sequence, status.isOk() ? OpState::kDone : OpState::kFailed);
  if (!status.isOk()) {
    if (!comm.aborted()) comm.markBroken(status);
    return status.withContext(fmt::format("{} ({}) on rank {}", collectiveName(args.kind),
                                          algorithmName(choice.algorithm), comm.rank()));
  }
  divideAverage(comm, args);
  if (TraceSink* trace = comm.trace()) {
    trace->record(collectiveName(args.kind), comm.lane(), startNs, nowNanos(), -1,
                  args.count * dataTypeSize(args.type), sequence);
  }
  return Status::ok();
}

}  // namespace cc::collectives
