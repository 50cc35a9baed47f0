// The C API: argument checks, handles, groups, and the translation of Status into
// ccResult_t plus a message for ccGetLastError. Nothing below throws across this line:
// every entry point catches what the C++ library might throw (std::bad_alloc).
#include <cc/cc.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "collectives/collective.h"
#include "collectives/reduce_kernels.h"
#include "comm/communicator.h"
#include "comm/executor.h"
#include "comm/handles.h"
#include "comm/launcher.h"
#include "comm/stream.h"
#include "core/bootstrap.h"
#include "core/log.h"

struct ccComm {
  std::shared_ptr<cc::comm::Communicator> impl;
};
struct ccStream {
  // Shared with queued groups, so that destroying the handle cannot free a stream that a
  // pending ccGroupEnd still refers to.
  std::shared_ptr<cc::comm::Stream> impl;
};

namespace cc {
namespace {

using comm::Communicator;
using comm::PointToPoint;

// Live handles: a destroyed or made-up handle is an error, not a crash.
std::mutex gHandlesMutex;
std::unordered_set<ccComm*> gComms;
std::unordered_set<ccStream*> gStreams;

thread_local std::string gThreadLastError;
thread_local std::string gReturnedError;

ccResult_t report(Communicator* comm, const Status& status) {
  if (status.isOk()) return ccSuccess;
  gThreadLastError = status.message();
  if (comm != nullptr) comm->setLastError(status.message());
  if (status.code() != ccInProgress) log::warn("{}", status.message());
  return status.code();
}

template <typename Body>
ccResult_t guarded(Communicator* comm, Body&& body) {
  try {
    return report(comm, body());
  } catch (const std::bad_alloc&) {
    return report(comm, Status(ccSystemError, "out of memory"));
  } catch (const std::exception& error) {
    return report(comm, internalError(std::string("unexpected exception: ") + error.what()));
  }
}

Result<std::shared_ptr<Communicator>> lookup(ccComm_t handle, const char* name = "comm") {
  if (handle == nullptr) return invalidArgument(std::string(name) + " is NULL");
  std::lock_guard lock(gHandlesMutex);
  if (gComms.count(handle) == 0) {
    return invalidArgument(std::string(name) +
                           " is not a live communicator (destroyed, aborted or never created)");
  }
  return handle->impl;
}

// The communicator behind a handle, or null: for attaching an error message.
std::shared_ptr<Communicator> tryLookup(ccComm_t handle) {
  std::lock_guard lock(gHandlesMutex);
  if (handle == nullptr || gComms.count(handle) == 0) return nullptr;
  return handle->impl;
}

// A C caller may pass any int as an enum; reading an out-of-range value through the enum
// type is undefined in C++, so take its bits as an int.
int rawDataType(const ccDataType_t* type) {
  int raw = 0;
  static_assert(sizeof(*type) == sizeof(raw));
  std::memcpy(&raw, type, sizeof(raw));
  return raw;
}

Result<std::shared_ptr<comm::Stream>> lookupStream(ccStream_t handle) {
  if (handle == nullptr) return std::shared_ptr<comm::Stream>();
  std::lock_guard lock(gHandlesMutex);
  if (gStreams.count(handle) == 0)
    return invalidArgument("stream is not a live ccStream_t (destroyed or never created)");
  return handle->impl;
}

ccComm_t publish(std::shared_ptr<Communicator> impl) {
  auto* handle = new ccComm{std::move(impl)};
  std::lock_guard lock(gHandlesMutex);
  gComms.insert(handle);
  return handle;
}

// A destroyed handle's memory is never reused: it stays as an empty tombstone (a few
// bytes per communicator ever destroyed), so a stale handle can never alias a newer
// communicator that happens to get the same address.
std::vector<std::unique_ptr<ccComm>> gTombstones;

std::shared_ptr<Communicator> unpublish(ccComm_t handle) {
  std::lock_guard lock(gHandlesMutex);
  if (gComms.erase(handle) == 0) return nullptr;
  auto impl = std::move(handle->impl);
  gTombstones.emplace_back(handle);
  return impl;
}

// The element size of a raw datatype value, 0 for one that is not a ccDataType_t (checked
// before the enum is formed: an out-of-range enum value is undefined).
size_t typeSize(int type) {
  if (type < 0 || type >= ccNumTypes) return 0;
  return collectives::dataTypeSize(static_cast<ccDataType_t>(type));
}

Result<size_t> byteCount(size_t count, int type) {
  size_t size = typeSize(type);
  if (size == 0)
    return invalidArgument("datatype " + std::to_string(type) + " is not a ccDataType_t");
  if (count > SIZE_MAX / size) {
    return invalidArgument("count " + std::to_string(count) + " of " + std::to_string(size) +
                           "-byte elements overflows size_t");
  }
  return count * size;
}

// The environment's settings with what a ccConfig_t overrides.
Result<Config> configWith(const ccConfig_t* userConfig, const char* call) {
  CC_ASSIGN_OR_RETURN(Config config, Config::fromEnvironment());
  if (userConfig == nullptr) return config;
  if (userConfig->size != sizeof(ccConfig_t)) {
    return invalidArgument(std::string(call) + ": config->size is " +
                           std::to_string(userConfig->size) + ", not sizeof(ccConfig_t) " +
                           std::to_string(sizeof(ccConfig_t)) +
                           " (start from CC_CONFIG_INITIALIZER)");
  }
  if (userConfig->timeoutMs != CC_CONFIG_UNDEF_INT) {
    if (userConfig->timeoutMs < 1) {
      return invalidArgument(std::string(call) + ": config->timeoutMs " +
                             std::to_string(userConfig->timeoutMs) + " is below 1");
    }
    config.timeoutMs = userConfig->timeoutMs;
  }
  return config;
}

// Groups: operations between ccGroupStart and ccGroupEnd are collected per thread.
struct GroupedOp {
  std::shared_ptr<Communicator> comm;
  PointToPoint op;
  std::shared_ptr<comm::Stream> stream;
  // Set for a collective in a group: collectives run in call order, before the
  // group's point-to-point operations.
  std::shared_ptr<const collectives::CollectiveArgs> collective;
};
struct GroupState {
  int depth = 0;
  std::vector<GroupedOp> ops;
  Status error;
};
thread_local GroupState gGroup;

// A bad operation inside a group drops the whole group at ccGroupEnd, so that no rank runs
// half of what it meant to. Every entry point that may join a group returns through this.
ccResult_t dropGroupOnFailure(ccResult_t result) {
  if (result != ccSuccess && gGroup.depth > 0 && gGroup.error.isOk())
    gGroup.error = Status(result, gThreadLastError);
  return result;
}

// Runs a group now (NULL stream) or queues it on its stream, as one task: all of its
// operations progress together. A group must use one stream; operations split over
// several streams could not progress together and would deadlock.
Status launch(std::vector<GroupedOp> ops) {
  if (ops.empty()) return Status::ok();
  std::shared_ptr<comm::Stream> stream = ops.front().stream;
  for (const GroupedOp& op : ops) {
    if (op.stream != stream) {
      return invalidUsage(
          "the operations of one group use different streams; cc runs a group as one unit on one "
          "stream (use one stream, or one group per stream)");
    }
  }
  std::vector<std::shared_ptr<Communicator>> comms;
  for (auto& op : ops) comms.push_back(op.comm);
  std::sort(comms.begin(), comms.end());
  comms.erase(std::unique(comms.begin(), comms.end()), comms.end());
  // The task keeps the communicators alive, never the stream (it runs on that stream).
  std::vector<PointToPoint> p2p;
  std::vector<std::pair<Communicator*, std::shared_ptr<const collectives::CollectiveArgs>>> colls;
  for (auto& op : ops) {
    if (op.collective) {
      colls.emplace_back(op.comm.get(), op.collective);
    } else {
      p2p.push_back(op.op);
    }
  }
  auto run = [p2p = std::move(p2p), colls = std::move(colls), comms]() mutable -> Status {
    std::vector<Communicator*> raw;
    for (auto& comm : comms) raw.push_back(comm.get());
    comm::OperationLocks locks(raw);
    log::ScopedRank scopedRank(raw.front()->rank());
    for (auto& [comm, args] : colls) CC_TRY(collectives::runCollective(*comm, *args));
    // Point-to-point calls on one communicator copy with the kernel its recent groups of
    // about as many bytes ran fastest with (core/copy.h); across several, the process's.
    const bool oneComm = !p2p.empty() && std::all_of(p2p.begin(), p2p.end(), [&](const auto& op) {
      return op.comm == p2p.front().comm;
    });
    size_t bytes = 0;
    for (const PointToPoint& op : p2p)
      bytes = op.bytes > SIZE_MAX - bytes ? SIZE_MAX : bytes + op.bytes;
    CopyChooser* chooser =
        oneComm ? &p2p.front().comm->copyChooser(Communicator::kGroupCopies) : nullptr;
    return runWithChosenCopy(chooser, bytes, [&] { return comm::execute(p2p); });
  };
  if (stream == nullptr) return run();
  stream->enqueue(std::move(run), comms);
  return Status::ok();
}

Status pointToPoint(bool isSend, const void* buffer, size_t count, int type, int peer,
                    const std::shared_ptr<Communicator>& comm, ccComm_t handle,
                    ccStream_t streamHandle) {
  const char* call = isSend ? "ccSend" : "ccRecv";
  if (!comm) {
    Status missing = lookup(handle).status();
    return missing.isOk() ? invalidArgument("comm is not a live communicator") : missing;
  }
  CC_ASSIGN_OR_RETURN(size_t bytes, byteCount(count, type));
  if (buffer == nullptr && bytes > 0) {
    return invalidArgument(std::string(call) + ": " + (isSend ? "sendbuff" : "recvbuff") +
                           " is NULL with count " + std::to_string(count));
  }
  if (peer < 0 || peer >= comm->size()) {
    return invalidArgument(std::string(call) + ": peer " + std::to_string(peer) +
                           " is out of range for a communicator of " +
                           std::to_string(comm->size()) + " ranks");
  }
  CC_ASSIGN_OR_RETURN(std::shared_ptr<comm::Stream> stream, lookupStream(streamHandle));
  PointToPoint op{comm.get(), isSend, static_cast<std::byte*>(const_cast<void*>(buffer)),
                  bytes,      peer,   isSend ? "send" : "recv"};
  if (gGroup.depth > 0) {
    gGroup.ops.push_back(GroupedOp{comm, op, stream});
    return Status::ok();
  }
  if (stream == nullptr) {
    // The common blocking call: no queue, no allocation.
    std::lock_guard lock(comm->operationMutex());
    log::ScopedRank scopedRank(comm->rank());
    CopyChooser& chooser =
        comm->copyChooser(isSend ? Communicator::kSendCopies : Communicator::kReceiveCopies);
    // Never the single copy here (CC_SHM_USE_CMA=auto offers it to collectives only): a
    // send by address completes only once the peer has read it, where a staged one of up to
    // the ring's size completes before the peer posts its receive, and a program that sends
    // before it receives must not start to hang on hosts where the offer is made.
    Status status =
        runWithChosenCopy(&chooser, bytes, [&] { return comm::execute(std::span(&op, 1)); });
    if (status.isOk()) return status;
    return status.withContext(std::string(call) + " on rank " + std::to_string(comm->rank()));
  }
  std::vector<GroupedOp> single{GroupedOp{comm, op, stream}};
  return launch(std::move(single));
}

// Whether [a, a+aBytes) and [b, b+bBytes) share a byte.
bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a);
  auto y = reinterpret_cast<uintptr_t>(b);
  return aBytes > 0 && bBytes > 0 && x < y + bBytes && y < x + aBytes;
}

Result<size_t> multiply(size_t count, size_t factor, const char* what) {
  if (factor != 0 && count > SIZE_MAX / factor) {
    return invalidArgument(std::string(what) + " " + std::to_string(count) + " times " +
                           std::to_string(factor) + " overflows size_t");
  }
  return count * factor;
}

// Gather and scatter: one group of point-to-point messages between the root and every
// rank (NCCL's guide expresses them so; cc.h names them), run as one unit like any group,
// or added to the caller's open group.
Status rootedExchange(bool isGather, const void* sendbuff, void* recvbuff, size_t count, int type,
                      int root, const std::shared_ptr<Communicator>& comm, ccComm_t handle,
                      ccStream_t streamHandle) {
  const char* call = isGather ? "ccGather" : "ccScatter";
  if (!comm) {
    Status missing = lookup(handle).status();
    return (missing.isOk() ? invalidArgument("comm is not a live communicator") : missing)
        .withContext(call);
  }
  const int n = comm->size();
  const int me = comm->rank();
  CC_ASSIGN_OR_RETURN(size_t bytes, byteCount(count, type));
  if (root < 0 || root >= n) {
    return invalidArgument(std::string(call) + ": root " + std::to_string(root) +
                           " is out of range for a communicator of " + std::to_string(n) +
                           " ranks");
  }
  CC_ASSIGN_OR_RETURN(size_t total, multiply(bytes, static_cast<size_t>(n), "count bytes"));
  CC_ASSIGN_OR_RETURN(std::shared_ptr<comm::Stream> stream, lookupStream(streamHandle));
  // The root's side holds a block per rank: gather's recvbuff, scatter's sendbuff.
  auto* blocks = static_cast<std::byte*>(isGather ? recvbuff : const_cast<void*>(sendbuff));
  auto* single = static_cast<std::byte*>(isGather ? const_cast<void*>(sendbuff) : recvbuff);
  const char* blocksName = isGather ? "recvbuff" : "sendbuff";
  const char* singleName = isGather ? "sendbuff" : "recvbuff";
  if (bytes > 0 && single == nullptr)
    return invalidArgument(std::string(call) + ": " + singleName + " is NULL with count " +
                           std::to_string(count));
  if (bytes > 0 && me == root && blocks == nullptr)
    return invalidArgument(std::string(call) + ": " + blocksName +
                           " is NULL on the root with count " + std::to_string(count));
  std::byte* own = me == root ? blocks + bytes * static_cast<size_t>(root) : nullptr;
  if (me == root && single != own && overlaps(single, bytes, blocks, total)) {
    return invalidArgument(std::string(call) +
                           ": sendbuff and recvbuff overlap without being the " +
                           "in-place layout (the root's own block, see cc.h)");
  }
  std::vector<GroupedOp> ops;
  auto add = [&](bool isSend, std::byte* data, int peer) {
    ops.push_back(GroupedOp{
        comm, PointToPoint{comm.get(), isSend, data, bytes, peer, isGather ? "gather" : "scatter"},
        stream});
  };
  if (bytes == 0) {
    // Nothing moves on any rank.
  } else if (me != root) {
    add(isGather, single, root);
  } else {
    for (int peer = 0; peer < n; ++peer) {
      if (peer != root) add(!isGather, blocks + bytes * static_cast<size_t>(peer), peer);
    }
    if (single != own) {  // the root's own block: a message to itself
      add(true, isGather ? single : own, root);
      add(false, isGather ? own : single, root);
    }
  }
  if (gGroup.depth > 0) {
    for (GroupedOp& op : ops) gGroup.ops.push_back(std::move(op));
    return Status::ok();
  }
  Status status = launch(std::move(ops));
  if (status.isOk()) return status;
  return status.withContext(std::string(call) + " on rank " + std::to_string(me));
}

// Checks a collective call against the communicator; fills in nothing, only refuses.
Status validateCollective(const char* call, const collectives::CollectiveArgs& args, int rawOp,
                          const Communicator& comm) {
  using collectives::CollectiveKind;
  const int n = comm.size();
  const int me = comm.rank();
  CC_ASSIGN_OR_RETURN(size_t bytes, byteCount(args.count, static_cast<int>(args.type)));
  const bool reduces = args.kind == CollectiveKind::kAllReduce ||
                       args.kind == CollectiveKind::kReduce ||
                       args.kind == CollectiveKind::kReduceScatter;
  if (reduces && (rawOp < 0 || rawOp >= ccNumOps)) {
    return invalidArgument(std::string(call) + ": op " + std::to_string(rawOp) +
                           " is not a ccRedOp_t");
  }
  const bool rooted =
      args.kind == CollectiveKind::kBroadcast || args.kind == CollectiveKind::kReduce;
  if (rooted && (args.root < 0 || args.root >= n)) {
    return invalidArgument(std::string(call) + ": root " + std::to_string(args.root) +
                           " is out of range for a communicator of " + std::to_string(n) +
                           " ranks");
  }
  if (args.kind == CollectiveKind::kAllToAllv) return Status::ok();  // checked by the caller
  size_t sendBytes = bytes;
  size_t recvBytes = bytes;
  const char* countName = "count";
  if (args.kind == CollectiveKind::kAllGather) {
    countName = "sendcount";
    CC_ASSIGN_OR_RETURN(recvBytes, multiply(bytes, static_cast<size_t>(n), "sendcount bytes"));
  } else if (args.kind == CollectiveKind::kReduceScatter) {
    countName = "recvcount";
    CC_ASSIGN_OR_RETURN(sendBytes, multiply(bytes, static_cast<size_t>(n), "recvcount bytes"));
  } else if (args.kind == CollectiveKind::kAllToAll) {
    CC_ASSIGN_OR_RETURN(sendBytes, multiply(bytes, static_cast<size_t>(n), "count bytes"));
    recvBytes = sendBytes;
  }
  if (bytes == 0) return Status::ok();
  const bool needsSend = !(args.kind == CollectiveKind::kBroadcast && me != args.root);
  const bool needsRecv = !(args.kind == CollectiveKind::kReduce && me != args.root);
  if (needsSend && args.send == nullptr) {
    return invalidArgument(std::string(call) + ": sendbuff is NULL with " + countName + " " +
                           std::to_string(args.count));
  }
  if (needsRecv && args.recv == nullptr) {
    return invalidArgument(std::string(call) + ": recvbuff is NULL with " + countName + " " +
                           std::to_string(args.count));
  }
  if (!needsSend || !needsRecv) return Status::ok();
  const void* inPlaceSend = args.recv;
  const void* sendBase = args.send;
  if (args.kind == CollectiveKind::kAllGather)
    inPlaceSend = args.recv + bytes * static_cast<size_t>(me);
  if (args.kind == CollectiveKind::kReduceScatter)
    sendBase = args.send + bytes * static_cast<size_t>(me);
  const bool inPlace = args.kind == CollectiveKind::kReduceScatter ? sendBase == args.recv
                                                                   : args.send == inPlaceSend;
  if (args.kind == CollectiveKind::kAllToAll &&
      overlaps(args.send, sendBytes, args.recv, recvBytes)) {
    return invalidArgument(std::string(call) +
                           ": sendbuff and recvbuff overlap; all-to-all is not done in place");
  }
  if (!inPlace && overlaps(args.send, sendBytes, args.recv, recvBytes)) {
    return invalidArgument(
        std::string(call) +
        ": sendbuff and recvbuff overlap without being the in-place layout (see cc.h)");
  }
  return Status::ok();
}

// The common path of every collective entry point. The blocking call (NULL stream,
// no group) keeps its arguments on the stack: no allocation on the hot path.
template <typename Fill>
ccResult_t collectiveEntry(const char* call, ccComm_t handle, ccStream_t streamHandle, int rawOp,
                           Fill&& fill) {
  std::shared_ptr<Communicator> comm = tryLookup(handle);
  ccResult_t result = guarded(comm.get(), [&]() -> Status {
    if (!comm) {
      Status missing = lookup(handle).status();
      return (missing.isOk() ? invalidArgument("comm is not a live communicator") : missing)
          .withContext(call);
    }
    collectives::CollectiveArgs args;
    CC_TRY(fill(args, *comm));
    CC_TRY(validateCollective(call, args, rawOp, *comm));
    CC_ASSIGN_OR_RETURN(std::shared_ptr<comm::Stream> stream, lookupStream(streamHandle));
    Status status;
    if (gGroup.depth > 0 || stream != nullptr) {
      GroupedOp grouped{comm, PointToPoint{}, stream,
                        std::make_shared<collectives::CollectiveArgs>(std::move(args))};
      if (gGroup.depth > 0) {
        gGroup.ops.push_back(std::move(grouped));
        return Status::ok();
      }
      std::vector<GroupedOp> single;
      single.push_back(std::move(grouped));
      status = launch(std::move(single));
    } else {
      std::lock_guard lock(comm->operationMutex());
      log::ScopedRank scopedRank(comm->rank());
      status = collectives::runCollective(*comm, args);
    }
    if (status.isOk()) return status;
    return status.withContext(std::string(call) + " on rank " + std::to_string(comm->rank()));
  });
  return dropGroupOnFailure(result);
}

int rawRedOp(const ccRedOp_t* op) {
  int raw = 0;
  static_assert(sizeof(*op) == sizeof(raw));
  std::memcpy(&raw, op, sizeof(raw));
  return raw;
}

Status fillCommon(collectives::CollectiveArgs& args, const void* sendbuff, void* recvbuff,
                  size_t count, int rawType, int rawOp, int root) {
  if (typeSize(rawType) == 0)
    return invalidArgument("datatype " + std::to_string(rawType) + " is not a ccDataType_t");
  args.send = static_cast<const std::byte*>(sendbuff);
  args.recv = static_cast<std::byte*>(recvbuff);
  args.count = count;
  args.type = static_cast<ccDataType_t>(rawType);
  args.op = static_cast<ccRedOp_t>(rawOp >= 0 && rawOp < ccNumOps ? rawOp : 0);
  args.root = root;
  return Status::ok();
}

// Dissemination barrier: ceil(log2 n) rounds of empty messages.
Status barrier(Communicator& comm) {
  comm::OperationLocks locks({&comm});
  log::ScopedRank scopedRank(comm.rank());
  comm::TrafficScope control(comm, ccTrafficControl);
  int n = comm.size();
  for (int distance = 1; distance < n; distance *= 2) {
    PointToPoint ops[2] = {
        {&comm, true, nullptr, 0, (comm.rank() + distance) % n, "barrier"},
        {&comm, false, nullptr, 0, (comm.rank() - distance + n) % n, "barrier"},
    };
    CC_TRY(comm::execute(ops));
  }
  return Status::ok();
}

Status split(const std::shared_ptr<Communicator>& parent, int color, int key, ccComm_t* out) {
  int n = parent->size();
  int me = parent->rank();
  std::vector<int32_t> table(static_cast<size_t>(2 * n));
  int32_t mine[2] = {color, key};
  std::vector<PointToPoint> ops;
  for (int peer = 0; peer < n; ++peer) {
    ops.push_back(
        {parent.get(), true, reinterpret_cast<std::byte*>(mine), sizeof(mine), peer, "split"});
    ops.push_back({parent.get(), false,
                   reinterpret_cast<std::byte*>(&table[static_cast<size_t>(2 * peer)]),
                   sizeof(mine), peer, "split"});
  }
  std::vector<int> members;
  wire::UniqueIdContents id;
  {
    comm::OperationLocks locks({parent.get()});
    comm::TrafficScope control(*parent, ccTrafficControl);
    log::ScopedRank scopedRank(me);
    CC_TRY(comm::execute(ops));
    if (color == CC_SPLIT_NOCOLOR) {
      *out = nullptr;
      return Status::ok();
    }
    for (int peer = 0; peer < n; ++peer) {
      if (table[static_cast<size_t>(2 * peer)] == color) members.push_back(peer);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return table[static_cast<size_t>(2 * a + 1)] < table[static_cast<size_t>(2 * b + 1)];
    });
    // The first member starts the new communicator's root and hands out its id.
    char encoded[CC_UNIQUE_ID_BYTES] = {};
    std::vector<PointToPoint> idOps;
    if (members.front() == me) {
      CC_ASSIGN_OR_RETURN(id, bootstrap::startRoot(parent->config()));
      wire::encodeUniqueId(id, encoded);
      for (int member : members) {
        if (member != me)
          idOps.push_back({parent.get(), true, reinterpret_cast<std::byte*>(encoded),
                           sizeof(encoded), member, "split"});
      }
    } else {
      idOps.push_back({parent.get(), false, reinterpret_cast<std::byte*>(encoded), sizeof(encoded),
                       members.front(), "split"});
    }
    CC_TRY(comm::execute(idOps));
    if (members.front() != me) {
      CC_ASSIGN_OR_RETURN(id, wire::parseUniqueId(std::as_bytes(std::span(encoded))));
    }
  }
  int newRank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  CC_ASSIGN_OR_RETURN(auto child,
                      Communicator::create(id, static_cast<int>(members.size()), newRank,
                                           parent->traceShared(), &parent->config()));
  *out = publish(std::move(child));
  return Status::ok();
}

}  // namespace
}  // namespace cc

namespace cc::comm {
std::shared_ptr<Communicator> communicatorOf(ccComm_t handle) { return tryLookup(handle); }
Result<std::shared_ptr<Stream>> streamOf(ccStream_t handle) { return lookupStream(handle); }
ccResult_t reportStatus(const Status& status, const std::shared_ptr<Communicator>& comm) {
  return report(comm.get(), status);
}
}  // namespace cc::comm

using namespace cc;  // NOLINT: the C entry points below

extern "C" {

ccResult_t ccGetVersion(int* version) {
  return guarded(nullptr, [&]() -> Status {
    if (version == nullptr) return invalidArgument("ccGetVersion: version is NULL");
    *version = CC_VERSION_CODE;
    return Status::ok();
  });
}

const char* ccGetErrorString(ccResult_t result) {
  switch (result) {
    case ccSuccess:
      return "no error";
    case ccSystemError:
      return "system error (a system call failed)";
    case ccInternalError:
      return "internal error (a bug in cc)";
    case ccInvalidArgument:
      return "invalid argument";
    case ccInvalidUsage:
      return "invalid usage";
    case ccRemoteError:
      return "remote error (a peer died or misbehaved)";
    case ccInProgress:
      return "operation in progress";
    case ccTimeout:
      return "timeout (nothing moved for CC_TIMEOUT_MS)";
    default:
      return "unknown result code";
  }
}

const char* ccGetLastError(ccComm_t handle) {
  gReturnedError = gThreadLastError;
  if (handle != nullptr) {
    std::lock_guard lock(gHandlesMutex);
    if (gComms.count(handle) != 0) gReturnedError = handle->impl->lastError();
  }
  return gReturnedError.c_str();
}

ccResult_t ccGetUniqueId(ccUniqueId* uniqueId) { return ccGetUniqueIdConfig(uniqueId, nullptr); }

ccResult_t ccGetUniqueIdConfig(ccUniqueId* uniqueId, const ccConfig_t* userConfig) {
  return guarded(nullptr, [&]() -> Status {
    if (uniqueId == nullptr) return invalidArgument("ccGetUniqueId: uniqueId is NULL");
    CC_ASSIGN_OR_RETURN(Config config, configWith(userConfig, "ccGetUniqueIdConfig"));
    CC_ASSIGN_OR_RETURN(wire::UniqueIdContents id, bootstrap::startRoot(config));
    wire::encodeUniqueId(id, uniqueId->internal);
    return Status::ok();
  });
}

ccResult_t ccCommInitRank(ccComm_t* comm, int nranks, ccUniqueId commId, int rank) {
  return ccCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ccResult_t ccCommInitRankConfig(ccComm_t* comm, int nranks, ccUniqueId commId, int rank,
                                const ccConfig_t* userConfig) {
  return guarded(nullptr, [&]() -> Status {
    if (comm == nullptr) return invalidArgument("ccCommInitRank: comm is NULL");
    *comm = nullptr;
    if (nranks < 1 || nranks > wire::kMaxRanks) {
      return invalidArgument("ccCommInitRank: nranks " + std::to_string(nranks) +
                             " is out of range [1, " + std::to_string(wire::kMaxRanks) + "]");
    }
    if (rank < 0 || rank >= nranks) {
      return invalidArgument("ccCommInitRank: rank " + std::to_string(rank) +
                             " is out of range for nranks " + std::to_string(nranks));
    }
    CC_ASSIGN_OR_RETURN(Config config, configWith(userConfig, "ccCommInitRankConfig"));
    CC_ASSIGN_OR_RETURN(wire::UniqueIdContents id,
                        wire::parseUniqueId(std::as_bytes(std::span(commId.internal))));
    CC_ASSIGN_OR_RETURN(auto impl, comm::Communicator::create(id, nranks, rank, nullptr, &config));
    *comm = publish(std::move(impl));
    return Status::ok();
  });
}

ccResult_t ccCommInitAll(ccComm_t* comms, int ndev, const int* devlist) {
  (void)devlist;  // no GPU placement yet: ranks are host threads
  return guarded(nullptr, [&]() -> Status {
    if (comms == nullptr) return invalidArgument("ccCommInitAll: comms is NULL");
    if (ndev < 1 || ndev > 4096)
      return invalidArgument("ccCommInitAll: ndev " + std::to_string(ndev) +
                             " is out of range [1, 4096]");
    CC_ASSIGN_OR_RETURN(Config config, Config::fromEnvironment());
    CC_ASSIGN_OR_RETURN(wire::UniqueIdContents id, bootstrap::startRoot(config));
    std::vector<Result<std::shared_ptr<Communicator>>> results(static_cast<size_t>(ndev),
                                                               Status(ccInternalError, "not run"));
    std::vector<std::thread> threads;
    Status started;
    for (int rank = 0; rank < ndev && started.isOk(); ++rank) {
      try {
        threads.emplace_back([&, rank] {
          results[static_cast<size_t>(rank)] = Communicator::create(id, ndev, rank, nullptr);
        });
      } catch (const std::system_error& error) {
        // The ranks already started cannot finish without this one; they fail at the
        // bootstrap deadline, and we wait for them before reporting.
        started = Status(ccSystemError,
                         std::string("ccCommInitAll: cannot start a thread: ") + error.what());
      }
    }
    for (auto& thread : threads) thread.join();
    CC_TRY(started);
    for (auto& result : results) {
      if (!result.isOk()) return result.status().withContext("ccCommInitAll");
    }
    for (int rank = 0; rank < ndev; ++rank)
      comms[rank] = publish(std::move(results[static_cast<size_t>(rank)]).value());
    return Status::ok();
  });
}

ccResult_t ccCommInitFromEnv(ccComm_t* comm) {
  return guarded(nullptr, [&]() -> Status {
    if (comm == nullptr) return invalidArgument("ccCommInitFromEnv: comm is NULL");
    *comm = nullptr;
    CC_ASSIGN_OR_RETURN(Config config, Config::fromEnvironment());
    CC_ASSIGN_OR_RETURN(comm::LaunchInfo launch, comm::rendezvousFromEnvironment(config));
    log::info("ccCommInitFromEnv: launcher {}, rank {} of {}, root {}", launch.launcher,
              launch.rank, launch.nranks, launch.id.rootAddress.toString());
    auto impl = Communicator::create(launch.id, launch.nranks, launch.rank, nullptr);
    if (!impl.isOk())
      return impl.status().withContext("ccCommInitFromEnv (" + launch.launcher + ")");
    *comm = publish(std::move(impl).value());
    return Status::ok();
  });
}

ccResult_t ccCommSplit(ccComm_t handle, int color, int key, ccComm_t* newcomm) {
  return guarded(nullptr, [&]() -> Status {
    if (newcomm == nullptr) return invalidArgument("ccCommSplit: newcomm is NULL");
    *newcomm = nullptr;
    CC_ASSIGN_OR_RETURN(auto parent, lookup(handle));
    if (color < 0 && color != CC_SPLIT_NOCOLOR) {
      return invalidArgument("ccCommSplit: color " + std::to_string(color) +
                             " is negative (use CC_SPLIT_NOCOLOR to opt out)");
    }
    return split(parent, color, key, newcomm)
        .withContext("ccCommSplit on rank " + std::to_string(parent->rank()));
  });
}

ccResult_t ccCommDestroy(ccComm_t handle) {
  return guarded(nullptr, [&]() -> Status {
    if (handle == nullptr) return invalidArgument("ccCommDestroy: comm is NULL");
    auto impl = unpublish(handle);
    if (!impl)
      return invalidArgument("ccCommDestroy: comm is not a live communicator (destroyed twice?)");
    // Operations already queued on streams hold their own reference and finish first.
    return Status::ok();
  });
}

ccResult_t ccCommAbort(ccComm_t handle) {
  return guarded(nullptr, [&]() -> Status {
    if (handle == nullptr) return invalidArgument("ccCommAbort: comm is NULL");
    auto impl = unpublish(handle);
    if (!impl) return invalidArgument("ccCommAbort: comm is not a live communicator");
    impl->abort();
    // Wait for an operation in flight on another thread to notice (one sleep slice).
    std::lock_guard lock(impl->operationMutex());
    return Status::ok();
  });
}

ccResult_t ccCommGetAsyncError(ccComm_t handle, ccResult_t* asyncError) {
  return guarded(nullptr, [&]() -> Status {
    if (asyncError == nullptr) return invalidArgument("ccCommGetAsyncError: asyncError is NULL");
    CC_ASSIGN_OR_RETURN(auto comm, lookup(handle));
    *asyncError = comm->asyncError();
    return Status::ok();
  });
}

ccResult_t ccCommCount(const ccComm_t handle, int* count) {
  return guarded(nullptr, [&]() -> Status {
    if (count == nullptr) return invalidArgument("ccCommCount: count is NULL");
    CC_ASSIGN_OR_RETURN(auto comm, lookup(handle));
    *count = comm->size();
    return Status::ok();
  });
}

ccResult_t ccCommGetTraffic(const ccComm_t handle, ccTrafficKind_t kind, ccTraffic_t* traffic) {
  return guarded(nullptr, [&]() -> Status {
    if (traffic == nullptr) return invalidArgument("ccCommGetTraffic: traffic is NULL");
    if (static_cast<int>(kind) < 0 || static_cast<int>(kind) >= ccNumTrafficKinds) {
      return invalidArgument("ccCommGetTraffic: kind " + std::to_string(static_cast<int>(kind)) +
                             " is not a ccTrafficKind_t (0.." +
                             std::to_string(ccNumTrafficKinds - 1) + ")");
    }
    CC_ASSIGN_OR_RETURN(auto comm, lookup(handle));
    auto& counter = comm->traffic(kind);
    traffic->calls = counter.calls.load(std::memory_order_relaxed);
    traffic->bytesSent = counter.bytesSent.load(std::memory_order_relaxed);
    traffic->bytesReceived = counter.bytesReceived.load(std::memory_order_relaxed);
    return Status::ok();
  });
}

ccResult_t ccMemAlloc(void** ptr, size_t size) {
  return guarded(nullptr, [&]() -> Status {
    if (ptr == nullptr) return invalidArgument("ccMemAlloc: ptr is NULL");
    *ptr = nullptr;
    CC_ASSIGN_OR_RETURN(*ptr, comm::allocateShared(size));
    return Status::ok();
  });
}

ccResult_t ccMemFree(void* ptr) {
  return guarded(nullptr, [&]() -> Status { return comm::freeShared(ptr); });
}

ccResult_t ccCommRegister(const ccComm_t handle, void* buff, size_t size, void** registration) {
  return guarded(nullptr, [&]() -> Status {
    if (registration == nullptr) return invalidArgument("ccCommRegister: handle is NULL");
    *registration = nullptr;
    if (buff == nullptr) return invalidArgument("ccCommRegister: buff is NULL");
    if (size == 0) return invalidArgument("ccCommRegister: size is 0");
    CC_ASSIGN_OR_RETURN(auto comm, lookup(handle));
    CC_ASSIGN_OR_RETURN(*registration, comm->registrations().add(buff, size));
    return Status::ok();
  });
}

ccResult_t ccCommDeregister(const ccComm_t handle, void* registration) {
  return guarded(nullptr, [&]() -> Status {
    if (registration == nullptr) return invalidArgument("ccCommDeregister: handle is NULL");
    CC_ASSIGN_OR_RETURN(auto comm, lookup(handle));
    return comm->registrations().remove(registration);
  });
}

ccResult_t ccTraceRangePush(ccComm_t handle, const char* name) {
  return guarded(nullptr, [&]() -> Status {
    if (name == nullptr) return invalidArgument("ccTraceRangePush: name is NULL");
    CC_ASSIGN_OR_RETURN(auto comm, lookup(handle));
    comm->pushRange(name);
    return Status::ok();
  });
}

ccResult_t ccTraceRangePop(ccComm_t handle) {
  return guarded(nullptr, [&]() -> Status {
    CC_ASSIGN_OR_RETURN(auto comm, lookup(handle));
    if (!comm->popRange())
      return invalidArgument("ccTraceRangePop: no range is open on this communicator");
    return Status::ok();
  });
}

ccResult_t ccCommUserRank(const ccComm_t handle, int* rank) {
  return guarded(nullptr, [&]() -> Status {
    if (rank == nullptr) return invalidArgument("ccCommUserRank: rank is NULL");
    CC_ASSIGN_OR_RETURN(auto comm, lookup(handle));
    *rank = comm->rank();
    return Status::ok();
  });
}

ccResult_t ccSend(const void* sendbuff, size_t count, ccDataType_t datatype, int peer,
                  ccComm_t comm, ccStream_t stream) {
  // Held for the whole call: another thread may abort the communicator meanwhile.
  std::shared_ptr<Communicator> keep = tryLookup(comm);
  ccResult_t result = guarded(keep.get(), [&] {
    return pointToPoint(true, sendbuff, count, rawDataType(&datatype), peer, keep, comm, stream);
  });
  return dropGroupOnFailure(result);
}

ccResult_t ccGather(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                    int root, ccComm_t comm, ccStream_t stream) {
  std::shared_ptr<Communicator> keep = tryLookup(comm);
  ccResult_t result = guarded(keep.get(), [&] {
    return rootedExchange(true, sendbuff, recvbuff, count, rawDataType(&datatype), root, keep, comm,
                          stream);
  });
  return dropGroupOnFailure(result);
}

ccResult_t ccScatter(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                     int root, ccComm_t comm, ccStream_t stream) {
  std::shared_ptr<Communicator> keep = tryLookup(comm);
  ccResult_t result = guarded(keep.get(), [&] {
    return rootedExchange(false, sendbuff, recvbuff, count, rawDataType(&datatype), root, keep,
                          comm, stream);
  });
  return dropGroupOnFailure(result);
}

ccResult_t ccRecv(void* recvbuff, size_t count, ccDataType_t datatype, int peer, ccComm_t comm,
                  ccStream_t stream) {
  std::shared_ptr<Communicator> keep = tryLookup(comm);
  ccResult_t result = guarded(keep.get(), [&] {
    return pointToPoint(false, recvbuff, count, rawDataType(&datatype), peer, keep, comm, stream);
  });
  return dropGroupOnFailure(result);
}

ccResult_t ccGroupStart(void) {
  ++gGroup.depth;
  return ccSuccess;
}

ccResult_t ccGroupEnd(void) {
  return guarded(nullptr, [&]() -> Status {
    if (gGroup.depth == 0) return invalidUsage("ccGroupEnd without a matching ccGroupStart");
    if (--gGroup.depth > 0) return Status::ok();
    std::vector<GroupedOp> ops = std::move(gGroup.ops);
    gGroup.ops.clear();
    Status error = gGroup.error;
    gGroup.error = Status::ok();
    if (!error.isOk())
      return error.withContext(
          "ccGroupEnd: the group was dropped because an operation in it failed");
    Communicator* first = ops.empty() ? nullptr : ops.front().comm.get();
    Status status = launch(std::move(ops));
    if (!status.isOk() && first != nullptr) first->setLastError(status.message());
    return status.withContext("ccGroupEnd");
  });
}

ccResult_t ccBarrier(ccComm_t handle, ccStream_t streamHandle) {
  return guarded(nullptr, [&]() -> Status {
    CC_ASSIGN_OR_RETURN(auto comm, lookup(handle));
    if (gGroup.depth > 0)
      return invalidUsage("ccBarrier cannot be called inside ccGroupStart/ccGroupEnd");
    CC_ASSIGN_OR_RETURN(std::shared_ptr<comm::Stream> stream, lookupStream(streamHandle));
    if (stream != nullptr) {
      stream->enqueue([comm] { return barrier(*comm); }, {comm});
      return Status::ok();
    }
    Status status = barrier(*comm).withContext("ccBarrier on rank " + std::to_string(comm->rank()));
    if (!status.isOk()) comm->setLastError(status.message());
    return status;
  });
}

ccResult_t ccAllReduce(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                       ccRedOp_t op, ccComm_t comm, ccStream_t stream) {
  int rawOp = rawRedOp(&op);
  return collectiveEntry(
      "ccAllReduce", comm, stream, rawOp, [&](collectives::CollectiveArgs& args, Communicator&) {
        args.kind = collectives::CollectiveKind::kAllReduce;
        return fillCommon(args, sendbuff, recvbuff, count, rawDataType(&datatype), rawOp, 0);
      });
}

ccResult_t ccBroadcast(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                       int root, ccComm_t comm, ccStream_t stream) {
  return collectiveEntry(
      "ccBroadcast", comm, stream, ccSum, [&](collectives::CollectiveArgs& args, Communicator&) {
        args.kind = collectives::CollectiveKind::kBroadcast;
        return fillCommon(args, sendbuff, recvbuff, count, rawDataType(&datatype), ccSum, root);
      });
}

ccResult_t ccReduce(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                    ccRedOp_t op, int root, ccComm_t comm, ccStream_t stream) {
  int rawOp = rawRedOp(&op);
  return collectiveEntry(
      "ccReduce", comm, stream, rawOp, [&](collectives::CollectiveArgs& args, Communicator&) {
        args.kind = collectives::CollectiveKind::kReduce;
        return fillCommon(args, sendbuff, recvbuff, count, rawDataType(&datatype), rawOp, root);
      });
}

ccResult_t ccAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                       ccDataType_t datatype, ccComm_t comm, ccStream_t stream) {
  return collectiveEntry(
      "ccAllGather", comm, stream, ccSum, [&](collectives::CollectiveArgs& args, Communicator&) {
        args.kind = collectives::CollectiveKind::kAllGather;
        return fillCommon(args, sendbuff, recvbuff, sendcount, rawDataType(&datatype), ccSum, 0);
      });
}

ccResult_t ccReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                           ccDataType_t datatype, ccRedOp_t op, ccComm_t comm, ccStream_t stream) {
  int rawOp = rawRedOp(&op);
  return collectiveEntry("ccReduceScatter", comm, stream, rawOp,
                         [&](collectives::CollectiveArgs& args, Communicator&) {
                           args.kind = collectives::CollectiveKind::kReduceScatter;
                           return fillCommon(args, sendbuff, recvbuff, recvcount,
                                             rawDataType(&datatype), rawOp, 0);
                         });
}

ccResult_t ccAllToAll(const void* sendbuff, void* recvbuff, size_t count, ccDataType_t datatype,
                      ccComm_t comm, ccStream_t stream) {
  return collectiveEntry(
      "ccAllToAll", comm, stream, ccSum, [&](collectives::CollectiveArgs& args, Communicator&) {
        args.kind = collectives::CollectiveKind::kAllToAll;
        return fillCommon(args, sendbuff, recvbuff, count, rawDataType(&datatype), ccSum, 0);
      });
}

ccResult_t ccAllToAllv(const void* sendbuff, const size_t sendcounts[], const size_t sdispls[],
                       void* recvbuff, const size_t recvcounts[], const size_t rdispls[],
                       ccDataType_t datatype, ccComm_t comm, ccStream_t stream) {
  return collectiveEntry(
      "ccAllToAllv", comm, stream, ccSum,
      [&](collectives::CollectiveArgs& args, Communicator& c) -> Status {
        args.kind = collectives::CollectiveKind::kAllToAllv;
        CC_TRY(fillCommon(args, sendbuff, recvbuff, 0, rawDataType(&datatype), ccSum, 0));
        const char* names[4] = {"sendcounts", "sdispls", "recvcounts", "rdispls"};
        const size_t* arrays[4] = {sendcounts, sdispls, recvcounts, rdispls};
        for (int i = 0; i < 4; ++i) {
          if (arrays[i] == nullptr)
            return invalidArgument(std::string("ccAllToAllv: ") + names[i] + " is NULL");
        }
        auto n = static_cast<size_t>(c.size());
        args.sendCounts.assign(sendcounts, sendcounts + n);
        args.sendDispls.assign(sdispls, sdispls + n);
        args.recvCounts.assign(recvcounts, recvcounts + n);
        args.recvDispls.assign(rdispls, rdispls + n);
        size_t element = typeSize(static_cast<int>(args.type));
        for (size_t peer = 0; peer < n; ++peer) {
          for (int side = 0; side < 2; ++side) {
            size_t count = side == 0 ? args.sendCounts[peer] : args.recvCounts[peer];
            size_t displ = side == 0 ? args.sendDispls[peer] : args.recvDispls[peer];
            const void* buffer = side == 0 ? sendbuff : recvbuff;
            if (count > SIZE_MAX / element || displ > SIZE_MAX / element - count) {
              return invalidArgument(fmt::format("ccAllToAllv: {}[{}] + {}[{}] overflows size_t",
                                                 names[2 * side], peer, names[2 * side + 1], peer));
            }
            if (count > 0 && buffer == nullptr) {
              return invalidArgument(fmt::format("ccAllToAllv: {} is NULL with {}[{}] = {}",
                                                 side == 0 ? "sendbuff" : "recvbuff",
                                                 names[2 * side], peer, count));
            }
          }
        }
        return Status::ok();
      });
}

ccResult_t ccStreamCreate(ccStream_t* stream) {
  return guarded(nullptr, [&]() -> Status {
    if (stream == nullptr) return invalidArgument("ccStreamCreate: stream is NULL");
    auto* handle = new ccStream{std::make_shared<comm::Stream>()};
    std::lock_guard lock(gHandlesMutex);
    gStreams.insert(handle);
    *stream = handle;
    return Status::ok();
  });
}

ccResult_t ccStreamSynchronize(ccStream_t handle) {
  return guarded(nullptr, [&]() -> Status {
    if (handle == nullptr) return Status::ok();  // the NULL stream never has anything pending
    CC_ASSIGN_OR_RETURN(std::shared_ptr<comm::Stream> stream, lookupStream(handle));
    return stream->synchronize();
  });
}

ccResult_t ccStreamQuery(ccStream_t handle) {
  return guarded(nullptr, [&]() -> Status {
    if (handle == nullptr) return Status::ok();
    CC_ASSIGN_OR_RETURN(std::shared_ptr<comm::Stream> stream, lookupStream(handle));
    return stream->query();
  });
}

ccResult_t ccStreamDestroy(ccStream_t handle) {
  return guarded(nullptr, [&]() -> Status {
    if (handle == nullptr) return invalidArgument("ccStreamDestroy: stream is NULL");
    std::unique_ptr<ccStream> owned;
    {
      std::lock_guard lock(gHandlesMutex);
      if (gStreams.erase(handle) == 0)
        return invalidArgument("ccStreamDestroy: stream is not a live ccStream_t");
      owned.reset(handle);
    }
    Status status = owned->impl->synchronize();
    owned.reset();  // joins the worker
    return status;
  });
}

}  // extern "C"
