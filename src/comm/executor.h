// Runs a set of point-to-point operations to completion, all progressing together, so
// that a group in which every rank sends right and receives left cannot deadlock.
// Everything above (barrier, split, and the collectives of later issues) is built from
// this one loop. It never waits without a bound: it spins briefly, then sleeps on the
// doorbell (shm) or epoll (tcp) in short slices, checking for abort, dead peers and the
// CC_TIMEOUT_MS deadline between slices.
#pragma once

#include <mutex>
#include <span>
#include <vector>

#include "comm/communicator.h"

namespace cc::comm {

struct PointToPoint {
  Communicator* comm = nullptr;
  bool isSend = false;
  std::byte* data = nullptr;
  size_t bytes = 0;
  int peer = -1;
  const char* label = "";  // what the user called: "send", "recv", "barrier", "split"
  // A receive's payload goes through it instead of a copy (transport.h); only on a
  // receive from a peer whose channel's appliesSinks() is true (else ccInvalidUsage).
  const transport::Sink* sink = nullptr;
};

// Holds the operation locks of a set of communicators (in address order, so two
// threads locking overlapping sets cannot deadlock).
class OperationLocks {
 public:
  explicit OperationLocks(std::vector<Communicator*> comms);
  OperationLocks(const OperationLocks&) = delete;
  OperationLocks& operator=(const OperationLocks&) = delete;

 private:
  std::vector<std::unique_lock<std::mutex>> locks_;
};

// The caller holds the OperationLocks of every communicator involved. Sends to self
// are matched in order with receives from self in the same call.
Status execute(std::span<PointToPoint> ops);

}  // namespace cc::comm
