#include "comm/executor.h"

#include <sys/epoll.h>

#include <algorithm>
#include <cstring>

#include "comm/wait.h"
#include "core/copy.h"
#include "core/log.h"

namespace cc::comm {
namespace {

using transport::Progress;
using transport::Transfer;

struct Pending {
  PointToPoint* op;
  uint64_t sequence;
  Transfer transfer;
  int64_t startNs;
};

// The messages to one peer in one direction, in order: a channel carries one message
// per direction at a time. [next, end) indexes the sorted pending list.
struct Queue {
  transport::Channel* channel;
  bool isSend;
  size_t next;
  size_t end;
};

bool sameQueue(const Pending& a, const Pending& b) {
  return a.op->comm == b.op->comm && a.op->peer == b.op->peer && a.op->isSend == b.op->isSend;
}
bool queueOrder(const Pending& a, const Pending& b) {
  if (a.op->comm != b.op->comm) return a.op->comm < b.op->comm;
  if (a.op->peer != b.op->peer) return a.op->peer < b.op->peer;
  return a.op->isSend < b.op->isSend;
}

std::string describe(const Pending& pending) {
  const PointToPoint& op = *pending.op;
  transport::Channel* channel = op.comm->channel(op.peer);
  // "send #12 to rank 3", or "barrier #7 (recv) from rank 2" for messages inside a call.
  const char* direction = op.isSend ? "send" : "recv";
  std::string what = std::strcmp(op.label, direction) == 0
                         ? fmt::format("{} #{}", op.label, pending.sequence)
                         : fmt::format("{} #{} ({})", op.label, pending.sequence, direction);
  return fmt::format("{} {} rank {} ({}, {} bytes, {} moved)", what, op.isSend ? "to" : "from",
                     op.peer, channel ? channel->kind() : "self", op.bytes,
                     pending.transfer.progressed);
}

// Matches the k-th send to self with the k-th receive from self, per communicator.
Status copyToSelf(std::span<PointToPoint> ops, std::span<const uint64_t> sequences) {
  for (size_t i = 0; i < ops.size(); ++i) {
    PointToPoint& send = ops[i];
    if (!send.isSend || send.peer != send.comm->rank()) continue;
    size_t sendIndex = 0;
    for (size_t j = 0; j < i; ++j) {
      sendIndex += ops[j].isSend && ops[j].comm == send.comm && ops[j].peer == send.comm->rank();
    }
    size_t seen = 0;
    PointToPoint* recv = nullptr;
    uint64_t recvSequence = 0;
    for (size_t j = 0; j < ops.size() && recv == nullptr; ++j) {
      if (!ops[j].isSend && ops[j].comm == send.comm && ops[j].peer == send.comm->rank() &&
          seen++ == sendIndex) {
        recv = &ops[j];
        recvSequence = sequences[j];
      }
    }
    if (recv == nullptr) {
      return invalidUsage(
          fmt::format("send #{} from rank {} to itself has no matching receive from itself in the "
                      "same group; each send to self needs one",
                      sequences[i], send.comm->rank()));
    }
    if (send.bytes != recv->bytes) {
      return invalidUsage(fmt::format(
          "message size mismatch: send #{} to self has {} bytes, receive #{} from self {} "
          "bytes",
          sequences[i], send.bytes, recvSequence, recv->bytes));
    }
    moveBytes(recv->data, send.data, send.bytes);
  }
  size_t sends = 0;
  size_t recvs = 0;
  for (const PointToPoint& op : ops) {
    if (op.peer != op.comm->rank()) continue;
    (op.isSend ? sends : recvs) += 1;
  }
  if (recvs > sends) {
    return invalidUsage("a receive from self has no matching send to self in the same group");
  }
  return Status::ok();
}

// Scratch space reused by every call on this thread: the hot path allocates nothing.
struct Scratch {
  std::vector<Communicator*> comms;
  std::vector<uint64_t> sequences;
  std::vector<Pending> pending;
  std::vector<Queue> queues;
};
thread_local Scratch gScratch;

}  // namespace

OperationLocks::OperationLocks(std::vector<Communicator*> comms) {
  std::sort(comms.begin(), comms.end());
  comms.erase(std::unique(comms.begin(), comms.end()), comms.end());
  for (Communicator* comm : comms) locks_.emplace_back(comm->operationMutex());
}

Status execute(std::span<PointToPoint> ops) {
  if (ops.empty()) return Status::ok();
  Scratch& scratch = gScratch;
  auto& comms = scratch.comms;
  comms.clear();
  for (const PointToPoint& op : ops) {
    if (std::find(comms.begin(), comms.end(), op.comm) == comms.end()) comms.push_back(op.comm);
  }
  for (Communicator* comm : comms) {
    if (comm->aborted()) return invalidUsage("communicator was aborted");
    CC_TRY(comm->brokenStatus());
  }
  for (const PointToPoint& op : ops) {
    if (op.sink == nullptr) continue;
    const bool fromPeer = !op.isSend && op.peer != op.comm->rank();
    if (!fromPeer || !op.comm->channel(op.peer)->appliesSinks()) {
      return invalidUsage(fmt::format(
          "{} with rank {}: only a receive from a peer over shm can combine what arrives", op.label,
          op.peer));
    }
  }

  // A clock read costs tens of nanoseconds under KVM: take it up front only for the
  // trace; the flight recorder gets its start times when the loop first has to wait.
  const bool tracing = std::any_of(comms.begin(), comms.end(),
                                   [](Communicator* c) { return c->trace() != nullptr; });
  int64_t startNs = tracing ? nowNanos() : 0;
  auto& sequences = scratch.sequences;
  sequences.resize(ops.size());
  bool anySelf = false;
  for (size_t i = 0; i < ops.size(); ++i) {
    sequences[i] = ops[i].comm->nextSequence();
    ops[i].comm->recorder().begin(sequences[i], ops[i].label, ops[i].isSend ? "send" : "recv",
                                  ops[i].peer, ops[i].bytes, startNs);
    anySelf = anySelf || ops[i].peer == ops[i].comm->rank();
  }
  if (anySelf) {
    Status selfStatus = copyToSelf(ops, sequences);
    if (!selfStatus.isOk()) {
      for (size_t i = 0; i < ops.size(); ++i)
        ops[i].comm->recorder().finish(sequences[i], OpState::kFailed, nowNanos());
      return selfStatus;
    }
  }

  auto& pending = scratch.pending;
  pending.clear();
  for (size_t i = 0; i < ops.size(); ++i) {
    PointToPoint& op = ops[i];
    if (op.peer == op.comm->rank()) {
      op.comm->recorder().finish(sequences[i], OpState::kDone);
      continue;
    }
    Transfer transfer;
    transfer.data = op.data;
    transfer.bytes = op.bytes;
    transfer.sink = op.sink;
    pending.push_back(Pending{&op, sequences[i], transfer, startNs});
  }
  if (pending.size() > 1) std::stable_sort(pending.begin(), pending.end(), queueOrder);
  auto& queues = scratch.queues;
  queues.clear();
  bool anyShm = false;
  bool anyTcp = false;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (i > 0 && sameQueue(pending[i - 1], pending[i])) {
      queues.back().end = i + 1;
      continue;
    }
    transport::Channel* channel = pending[i].op->comm->channel(pending[i].op->peer);
    queues.push_back(Queue{channel, pending[i].op->isSend, i, i + 1});
    bool isShm = channel->isSharedMemory();
    anyShm = anyShm || isShm;
    anyTcp = anyTcp || !isShm;
  }

  Communicator* primary = comms.front();
  Waiter waiter(*primary, comms.size() > 1 || (anyShm && anyTcp));
  size_t remaining = pending.size();

  auto fail = [&](Status status, const Pending* culprit) -> Status {
    if (culprit != nullptr) status = status.withContext(describe(*culprit));
    int64_t failedNs = nowNanos();
    for (const Queue& queue : queues) {
      for (size_t i = queue.next; i < queue.end; ++i) {
        pending[i].op->comm->recorder().finish(pending[i].sequence, OpState::kFailed, failedNs);
      }
      if (queue.next < queue.end) queue.channel->abandon();
    }
    for (Communicator* comm : comms) {
      if (!comm->aborted()) comm->markBroken(status);
      if (status.code() == ccTimeout || status.code() == ccRemoteError) {
        log::warn("{}\nflight recorder of this rank (last operations, oldest first):\n{}",
                  status.message(), comm->recorder().dump(32));
      }
    }
    return status;
  };
  auto firstPending = [&]() -> const Pending* {
    for (const Queue& queue : queues) {
      if (queue.next < queue.end) return &pending[queue.next];
    }
    return nullptr;
  };

  // One pass over the queue heads; returns whether anything moved, or the first error.
  const Pending* failed = nullptr;
  Status failure;
  auto progressAll = [&]() -> bool {
    bool moved = false;
    for (Queue& queue : queues) {
      if (queue.next == queue.end) continue;
      Pending& head = pending[queue.next];
      auto result = queue.isSend ? queue.channel->progressSend(head.transfer)
                                 : queue.channel->progressRecv(head.transfer);
      if (!result.isOk()) {
        failed = &head;
        failure = result.status();
        return false;
      }
      if (*result == Progress::kIdle) continue;
      moved = true;
      if (*result == Progress::kDone) {
        Communicator* comm = head.op->comm;
        comm->recorder().finish(head.sequence, OpState::kDone);
        if (queue.isSend) {
          comm->countTraffic(head.op->bytes, 0);
        } else {
          comm->countTraffic(0, head.op->bytes);
        }
        if (comm->trafficKind() == ccTrafficSendRecv) {
          comm->traffic(ccTrafficSendRecv).calls.fetch_add(1, std::memory_order_relaxed);
        }
        if (TraceSink* trace = comm->trace()) {
          trace->record(head.op->label, comm->lane(), head.startNs, nowNanos(), head.op->peer,
                        head.op->bytes, head.sequence);
        }
        ++queue.next;
        --remaining;
        if (queue.next < queue.end && comm->trace() != nullptr)
          pending[queue.next].startNs = nowNanos();
      }
    }
    return moved;
  };

  bool startsRecorded = startNs != 0;  // tracing gave them their start already
  while (remaining > 0) {
    bool moved = progressAll();
    if (failed != nullptr) return fail(failure, failed);
    // Checked on every pass, so that a transfer that never stops moving still ends
    // promptly when another thread calls ccCommAbort.
    for (Communicator* comm : comms) {
      if (comm->aborted())
        return fail(invalidUsage("communicator was aborted by ccCommAbort"), firstPending());
    }
    if (moved) {
      waiter.progressed();
      continue;
    }
    WaitStep step = waiter.idle();
    if (!startsRecorded && waiter.waitingSinceNs() != 0) {
      // First wait of this call: from now on the flight recorder can say how long.
      startsRecorded = true;
      for (const Queue& queue : queues) {
        for (size_t i = queue.next; i < queue.end; ++i) {
          pending[i].op->comm->recorder().setStart(pending[i].sequence, waiter.waitingSinceNs());
        }
      }
    }
    switch (step) {
      case WaitStep::kLookAgain:
        break;
      case WaitStep::kTimedOut:
        return fail(
            timeoutError(fmt::format("nothing moved for {} ms (CC_TIMEOUT_MS); still waiting on",
                                     waiter.timeoutMs())),
            firstPending());
      case WaitStep::kCheckPeers:
        for (Queue& queue : queues) {
          if (queue.next == queue.end) continue;
          Status alive = queue.channel->checkPeer();
          if (alive.isOk()) continue;
          // The peer may have published its last bytes and then exited: look once more.
          if (progressAll()) {
            waiter.progressed();
            break;
          }
          if (failed != nullptr) return fail(failure, failed);
          return fail(alive, &pending[queue.next]);
        }
        break;
      case WaitStep::kSleep: {
        // Sleep until a peer rings, a socket is ready, or the slice ends.
        bool maySleep = true;
        for (Queue& queue : queues) {
          if (queue.next < queue.end && !queue.channel->isSharedMemory()) {
            maySleep = queue.channel->readyToSleep() && maySleep;
          }
        }
        if (!maySleep) break;
        if (anyShm) {
          bool movedNow = sleepOnDoorbell(*primary, waiter.sliceMicros(), [&] {
            if (progressAll() || failed != nullptr) return true;
            if (anyTcp) {
              epoll_event events[16];
              for (Communicator* comm : comms) epoll_wait(comm->epollFd(), events, 16, 0);
            }
            return false;
          });
          if (failed != nullptr) return fail(failure, failed);
          if (movedNow) waiter.progressed();
        } else if (anyTcp) {
          epoll_event events[16];
          epoll_wait(primary->epollFd(), events, 16, static_cast<int>(waiter.sliceMicros() / 1000));
          for (Communicator* comm : comms) {
            if (comm != primary) epoll_wait(comm->epollFd(), events, 16, 0);
          }
        }
        break;
      }
    }
  }
  return Status::ok();
}

}  // namespace cc::comm
