// What every algorithm works with: the communicator, the element type and its kernel,
// the chunk size, and blocking exchanges with peers (each a set of point-to-point
// messages run to completion together by the executor, so a ring step cannot
// deadlock). Scratch buffers are per thread and reused from call to call.
#pragma once

#include <cstddef>

#include "collectives/collective.h"
#include "collectives/reduce_kernels.h"
#include "comm/executor.h"

namespace cc::collectives {

class Context {
 public:
  Context(comm::Communicator& comm, const CollectiveArgs& args, size_t chunkBytes);

  comm::Communicator& comm() const { return comm_; }
  const CollectiveArgs& args() const { return args_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t elementSize() const { return elementSize_; }
  // Chunk size in elements (at least 1).
  size_t chunkElements() const { return chunkElements_; }

  std::byte* sendAt(size_t element) const {
    return const_cast<std::byte*>(args_.send) + element * elementSize_;
  }
  std::byte* recvAt(size_t element) const { return args_.recv + element * elementSize_; }
  size_t bytes(size_t elements) const { return elements * elementSize_; }

  // Sends to one peer while receiving from another (either may be -1: none); returns
  // when both are done. Counts are in elements. With `recvSink` the received payload
  // goes through it instead of being copied to recvData (ReduceOnArrival below).
  Status exchange(int sendPeer, const void* sendData, size_t sendCount, int recvPeer,
                  void* recvData, size_t recvCount,
                  const transport::Sink* recvSink = nullptr) const;
  // Whether a receive from `peer` may reduce as it arrives (its channel takes a Sink).
  bool reducesOnArrival(int peer) const;
  Status send(int peer, const void* data, size_t count) const {
    return exchange(peer, data, count, -1, nullptr, 0);
  }
  Status recv(int peer, void* data, size_t count) const {
    return exchange(-1, nullptr, 0, peer, data, count);
  }
  // Any set of messages at once (counts already in bytes).
  Status run(std::span<comm::PointToPoint> messages) const;
  comm::PointToPoint message(bool isSend, int peer, const void* data, size_t count) const;

  // dst = a op b (element order: a's value first).
  void reduce(void* dst, const void* a, const void* b, size_t count) const {
    const void* sources[2] = {a, b};
    kernel_(dst, sources, 2, count);
  }
  void reduceMany(void* dst, const void* const* sources, int sourceCount, size_t count) const {
    kernel_(dst, sources, sourceCount, count);
  }
  void copy(void* dst, const void* src, size_t count) const;

  // Per-thread scratch buffer `which` (0..7) of at least `count` elements.
  std::byte* scratch(int which, size_t count) const;

 private:
  comm::Communicator& comm_;
  const CollectiveArgs& args_;
  int rank_;
  int size_;
  size_t elementSize_;
  size_t chunkElements_;
  ReduceKernel kernel_;
  const char* label_;
};

// A receive that reduces as it arrives: each piece p at byte offset o becomes
// own[o..] op p (own's value first, as Context::reduce) in the receive buffer, read
// straight from the shm slot (a piece that comes by address is read aside first: the
// destination may be `own` itself). Same bits as receiving and then reducing; only for
// peers where Context::reducesOnArrival.
class ReduceOnArrival {
 public:
  ReduceOnArrival(const Context& ctx, const std::byte* own);
  ReduceOnArrival(const ReduceOnArrival&) = delete;
  ReduceOnArrival& operator=(const ReduceOnArrival&) = delete;
  const transport::Sink* sink() const { return &sink_; }

 private:
  static void apply(const void* state, std::byte* destination, const std::byte* piece,
                    size_t offset, size_t bytes);
  const Context& ctx_;
  const std::byte* own_;
  transport::Sink sink_;
};

// Element ranges: [begin, end) of part `index` when `count` is cut into `parts` nearly
// equal parts (the first count % parts parts one longer).
inline size_t partBegin(size_t count, int parts, int index) {
  size_t base = count / static_cast<size_t>(parts);
  size_t extra = count % static_cast<size_t>(parts);
  size_t i = static_cast<size_t>(index);
  return base * i + (i < extra ? i : extra);
}
inline size_t partLength(size_t count, int parts, int index) {
  return partBegin(count, parts, index + 1) - partBegin(count, parts, index);
}

}  // namespace cc::collectives
