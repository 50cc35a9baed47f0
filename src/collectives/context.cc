#include "collectives/context.h"

#include <algorithm>
#include <vector>

#include "core/copy.h"

namespace cc::collectives {

Context::Context(comm::Communicator& comm, const CollectiveArgs& args, size_t chunkBytes)
    : comm_(comm),
      args_(args),
      rank_(comm.rank()),
      size_(comm.size()),
      elementSize_(dataTypeSize(args.type)),
      chunkElements_(
          std::max<size_t>(1, chunkBytes / std::max<size_t>(1, dataTypeSize(args.type)))),
      kernel_(reduceKernel(args.type, args.op)),
      label_(collectiveName(args.kind)) {}

comm::PointToPoint Context::message(bool isSend, int peer, const void* data, size_t count) const {
  return comm::PointToPoint{&comm_,       isSend, static_cast<std::byte*>(const_cast<void*>(data)),
                            bytes(count), peer,   label_};
}

Status Context::exchange(int sendPeer, const void* sendData, size_t sendCount, int recvPeer,
                         void* recvData, size_t recvCount, const transport::Sink* recvSink) const {
  comm::PointToPoint messages[2];
  size_t used = 0;
  if (sendPeer >= 0) messages[used++] = message(true, sendPeer, sendData, sendCount);
  if (recvPeer >= 0) {
    messages[used] = message(false, recvPeer, recvData, recvCount);
    messages[used++].sink = recvSink;
  }
  return comm::execute(std::span(messages, used));
}

bool Context::reducesOnArrival(int peer) const {
  return peer != rank_ && comm_.channel(peer)->appliesSinks();
}

ReduceOnArrival::ReduceOnArrival(const Context& ctx, const std::byte* own)
    : ctx_(ctx), own_(own), sink_{&ReduceOnArrival::apply, this} {}

void ReduceOnArrival::apply(const void* state, std::byte* destination, const std::byte* piece,
                            size_t offset, size_t bytes) {
  const auto& self = *static_cast<const ReduceOnArrival*>(state);
  self.ctx_.reduce(destination, self.own_ + offset, piece, bytes / self.ctx_.elementSize());
  self.ctx_.comm().bytesReducedOnArrival() += bytes;
}

Status Context::run(std::span<comm::PointToPoint> messages) const {
  return comm::execute(messages);
}

void Context::copy(void* dst, const void* src, size_t count) const {
  moveBytes(dst, src, bytes(count));
}

std::byte* Context::scratch(int which, size_t count) const {
  thread_local std::vector<std::byte> buffers[8];
  std::vector<std::byte>& buffer = buffers[which];
  size_t needed = bytes(count);
  if (buffer.size() < needed) {
    buffer.clear();
    buffer.shrink_to_fit();
    buffer.resize(needed);
  }
  return buffer.data();
}

}  // namespace cc::collectives
