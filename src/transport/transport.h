// The transport interface: a connected, ordered, point-to-point channel to one peer.
// Algorithms and the communicator see only this; shm and tcp (and later ucx, cuda)
// implement it.
//
// A channel carries one send and one receive at a time (the communicator queues the
// rest). Progress calls never block: they move what they can and say how far they got,
// so one thread can drive many channels at once (a ring exchange in a group).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace cc::transport {

// What a receive does with its payload instead of copying it into `data`: the reductions
// of a ring or a chain combine each arriving piece with their own operand straight from
// the transport's buffer, one pass where a copy and then a reduction were two.
// `apply(state, data + offset, piece, offset, bytes)` stands for the copy of a piece;
// pieces come in order, each once, and start at multiples of 64 bytes (so at whole
// elements). Only channels whose appliesSinks() is true take one.
struct Sink {
  void (*apply)(const void* state, std::byte* destination, const std::byte* piece, size_t offset,
                size_t bytes) = nullptr;
  const void* state = nullptr;
};

// One message in flight on a channel.
struct Transfer {
  std::byte* data = nullptr;  // source of a send (never written) or destination of a receive
  size_t bytes = 0;
  size_t progressed = 0;       // payload bytes moved so far
  bool started = false;        // the transport has begun this message
  const Sink* sink = nullptr;  // a receive's payload goes through it (appliesSinks())
};

enum class Progress { kIdle, kMoved, kDone };

class Channel {
 public:
  explicit Channel(int peer) : peer_(peer) {}
  virtual ~Channel() = default;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  virtual const char* kind() const = 0;
  // Whether waiting for this channel means sleeping on the shm doorbell (else: epoll).
  virtual bool isSharedMemory() const = 0;
  // Whether the peer may read this process's memory by address (shm with the
  // process_vm_readv single copy, CC_SHM_USE_CMA, when the connection-time probe passed).
  virtual bool peerReadsByAddress() const { return false; }
  // Whether this side reads the peer's memory by address (the other half of the pair).
  virtual bool readsPeerByAddress() const { return false; }
  // Copies `bytes` from `address` in the peer's process to `destination` (the peer
  // published the address; it passed this side's probe): the direct collectives' single
  // copy. Transports that cannot read a peer's memory refuse.
  virtual Status readByAddress(void* /*destination*/, uint64_t /*address*/, size_t /*bytes*/) {
    return invalidUsage("rank " + std::to_string(peer_) +
                        ": this transport cannot read a peer's memory by address");
  }
  // Bytes of the messages this side posted by address for the peer to read (how a test
  // tells that the single copy was taken).
  virtual uint64_t bytesPostedByAddress() const { return 0; }
  // Whether receives on this channel take a Sink (Transfer::sink).
  virtual bool appliesSinks() const { return false; }
  int peer() const { return peer_; }

  virtual Result<Progress> progressSend(Transfer& transfer) = 0;
  virtual Result<Progress> progressRecv(Transfer& transfer) = 0;

  // ccRemoteError when the peer is known to be gone (cheap; called while waiting).
  virtual Status checkPeer() = 0;

  // Called just before the waiting thread sleeps on the communicator's epoll set: false
  // when work is already pending and it should poll again instead (ucx arms its worker's
  // event fd here, once per sleep rather than on every idle pass).
  virtual bool readyToSleep() { return true; }

  // The operation using this channel failed or was aborted, and its buffers go back to
  // the caller: a transport that may still write into them later (ucx's posted receives)
  // must stop now. The communicator is broken afterwards; nothing else runs on it.
  virtual void abandon() {}

 private:
  int peer_;
};

}  // namespace cc::transport
