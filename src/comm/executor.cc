#include "comm/executor.h"

#include <immintrin.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>

#include "core/log.h"

namespace cc::comm {
namespace {

using transport::Progress;
using transport::Transfer;

// A sleeping waiter wakes at least this often to check abort, deadlines and peers.
constexpr int64_t kSliceMicros = 10000;
constexpr int64_t kPeerCheckNanos = 5'000'000;

struct Pending {
  PointToPoint* op;
  uint64_t sequence;
  Transfer transfer;
  int64_t startNs;
};

// One ordered queue per (communicator, peer, direction): a channel carries one message
// per direction at a time.
struct QueueKey {
  Communicator* comm;
  int peer;
  bool isSend;
  bool operator<(const QueueKey& other) const {
    return std::tie(comm, peer, isSend) < std::tie(other.comm, other.peer, other.isSend);
  }
};

std::string describe(const Pending& pending) {
  const PointToPoint& op = *pending.op;
  transport::Channel* channel = op.comm->channel(op.peer);
  return fmt::format("{} #{} {} rank {} ({}, {} bytes, {} moved)", op.label, pending.sequence,
                     op.isSend ? "to" : "from", op.peer, channel ? channel->kind() : "self", op.bytes,
                     pending.transfer.progressed);
}

Status copyToSelf(std::span<PointToPoint> ops, std::vector<uint64_t>& sequences) {
  std::map<Communicator*, std::deque<size_t>> sends;
  std::map<Communicator*, std::deque<size_t>> recvs;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].peer != ops[i].comm->rank()) continue;
    (ops[i].isSend ? sends : recvs)[ops[i].comm].push_back(i);
  }
  for (auto& [comm, sendList] : sends) {
    auto& recvList = recvs[comm];
    if (sendList.size() != recvList.size()) {
      return invalidUsage(fmt::format("rank {} has {} send(s) to itself and {} receive(s) from itself in one group; "
                                      "each send to self needs a matching receive in the same group",
                                      comm->rank(), sendList.size(), recvList.size()));
    }
    for (size_t k = 0; k < sendList.size(); ++k) {
      PointToPoint& send = ops[sendList[k]];
      PointToPoint& recv = ops[recvList[k]];
      if (send.bytes != recv.bytes) {
        return invalidUsage(fmt::format("message size mismatch: send #{} to self has {} bytes, receive #{} from self "
                                        "{} bytes",
                                        sequences[sendList[k]], send.bytes, sequences[recvList[k]], recv.bytes));
      }
      if (send.bytes > 0 && send.data != recv.data) std::memmove(recv.data, send.data, send.bytes);
    }
  }
  for (auto& [comm, recvList] : recvs) {
    if (!recvList.empty() && sends[comm].empty()) {
      return invalidUsage(fmt::format("rank {} receives from itself without a matching send in the same group",
                                      comm->rank()));
    }
  }
  return Status::ok();
}

}  // namespace

OperationLocks::OperationLocks(std::vector<Communicator*> comms) {
  std::sort(comms.begin(), comms.end());
  comms.erase(std::unique(comms.begin(), comms.end()), comms.end());
  for (Communicator* comm : comms) locks_.emplace_back(comm->operationMutex());
}

Status execute(std::span<PointToPoint> ops) {
  if (ops.empty()) return Status::ok();
  std::vector<Communicator*> comms;
  for (const PointToPoint& op : ops) comms.push_back(op.comm);
  std::sort(comms.begin(), comms.end());
  comms.erase(std::unique(comms.begin(), comms.end()), comms.end());
  for (Communicator* comm : comms) {
    if (comm->aborted()) return invalidUsage("communicator was aborted");
    CC_TRY(comm->brokenStatus());
  }

  std::vector<uint64_t> sequences(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    sequences[i] = ops[i].comm->nextSequence();
    ops[i].comm->recorder().begin(sequences[i], ops[i].label, ops[i].peer, ops[i].bytes);
  }
  int64_t startNs = nowNanos();
  auto finishAll = [&](OpState state) {
    for (size_t i = 0; i < ops.size(); ++i) ops[i].comm->recorder().finish(sequences[i], state);
  };
  Status selfStatus = copyToSelf(ops, sequences);
  if (!selfStatus.isOk()) {
    finishAll(OpState::kFailed);
    return selfStatus;
  }

  std::map<QueueKey, std::deque<Pending>> queues;
  for (size_t i = 0; i < ops.size(); ++i) {
    PointToPoint& op = ops[i];
    if (op.peer == op.comm->rank()) {
      op.comm->recorder().finish(sequences[i], OpState::kDone);
      continue;
    }
    Transfer transfer;
    transfer.data = op.data;
    transfer.bytes = op.bytes;
    queues[{op.comm, op.peer, op.isSend}].push_back(Pending{&op, sequences[i], transfer, startNs});
  }

  bool anyShm = false;
  bool anyTcp = false;
  for (auto& [key, queue] : queues) {
    std::string_view kind = key.comm->channel(key.peer)->kind();
    anyShm = anyShm || kind == "shm";
    anyTcp = anyTcp || kind == "tcp";
  }
  Communicator* primary = comms.front();
  const Config& config = primary->config();
  int64_t timeoutNs = config.timeoutMs * 1'000'000;
  int64_t spinNs = config.spinMicros * 1000;
  int64_t lastProgressNs = nowNanos();
  int64_t lastPeerCheckNs = lastProgressNs;
  int64_t idleSinceNs = -1;

  auto fail = [&](Status status, const Pending* culprit) -> Status {
    if (culprit != nullptr) status = status.withContext(describe(*culprit));
    for (auto& [key, queue] : queues) {
      for (Pending& pending : queue) pending.op->comm->recorder().finish(pending.sequence, OpState::kFailed);
    }
    bool fatal = status.code() != ccInvalidArgument;
    for (Communicator* comm : comms) {
      if (fatal && !comm->aborted()) comm->markBroken(status);
      if (status.code() == ccTimeout || status.code() == ccRemoteError) {
        log::warn("{}\nflight recorder of this rank (last operations, oldest first):\n{}", status.message(),
                  comm->recorder().dump(32));
      }
    }
    return status;
  };

  while (!queues.empty()) {
    // Read the doorbell before looking at the rings: a peer that publishes after this
    // read also bumps the sequence, so the sleep below returns at once.
    uint32_t observed = primary->doorbell().sequence.load(std::memory_order_seq_cst);
    bool moved = false;
    for (auto it = queues.begin(); it != queues.end();) {
      auto& queue = it->second;
      Pending& head = queue.front();
      transport::Channel* channel = it->first.comm->channel(it->first.peer);
      auto result = head.op->isSend ? channel->progressSend(head.transfer) : channel->progressRecv(head.transfer);
      if (!result.isOk()) return fail(result.status(), &head);
      if (*result != Progress::kIdle) moved = true;
      if (*result == Progress::kDone) {
        Communicator* comm = head.op->comm;
        comm->recorder().finish(head.sequence, OpState::kDone);
        if (TraceSink* trace = comm->trace()) {
          trace->record(head.op->label, comm->lane(), head.startNs, nowNanos(), head.op->peer, head.op->bytes,
                        head.sequence);
        }
        queue.pop_front();
        if (queue.empty()) {
          it = queues.erase(it);
          continue;
        }
        queue.front().startNs = nowNanos();
      }
      ++it;
    }
    if (queues.empty()) break;
    int64_t now = nowNanos();
    if (moved) {
      lastProgressNs = now;
      idleSinceNs = -1;
      continue;
    }
    for (Communicator* comm : comms) {
      if (comm->aborted()) return fail(invalidUsage("communicator was aborted"), &queues.begin()->second.front());
    }
    if (now - lastProgressNs > timeoutNs) {
      return fail(timeoutError(fmt::format("nothing moved for {} ms (CC_TIMEOUT_MS); still waiting on", config.timeoutMs)),
                  &queues.begin()->second.front());
    }
    if (now - lastPeerCheckNs > kPeerCheckNanos) {
      lastPeerCheckNs = now;
      for (auto& [key, queue] : queues) {
        Status alive = key.comm->channel(key.peer)->checkPeer();
        if (!alive.isOk()) {
          // The peer may have published its last bytes and then exited: look once more.
          Pending& head = queue.front();
          transport::Channel* channel = key.comm->channel(key.peer);
          auto result = head.op->isSend ? channel->progressSend(head.transfer) : channel->progressRecv(head.transfer);
          if (result.isOk() && *result != Progress::kIdle) {
            moved = true;
            break;
          }
          return fail(alive, &head);
        }
      }
      if (moved) continue;
    }
    if (idleSinceNs < 0) idleSinceNs = now;
    if (now - idleSinceNs < spinNs) {
      for (int i = 0; i < 32; ++i) _mm_pause();
      continue;
    }
    // Sleep until a peer rings, a socket is ready, or the slice ends.
    if (anyTcp) {
      epoll_event events[16];
      int sliceMs = anyShm ? 0 : static_cast<int>(kSliceMicros / 1000);
      epoll_wait(primary->epollFd(), events, 16, sliceMs);
      for (Communicator* comm : comms) {
        if (comm != primary) epoll_wait(comm->epollFd(), events, 16, 0);
      }
    }
    if (anyShm) {
      bool several = comms.size() > 1 || anyTcp;
      transport::shm::sleepOn(primary->doorbell(), observed, several ? 500 : kSliceMicros);
    }
    if (!anyShm && !anyTcp) sched_yield();
  }
  return Status::ok();
}

}  // namespace cc::comm
