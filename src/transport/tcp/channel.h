// The TCP channel between two ranks: several non-blocking sockets to one peer.
//
// A message is a 16-byte header (magic, size) on socket 0 followed by the payload.
// Messages of at least CC_TCP_STRIPE_THRESHOLD bytes are cut into one contiguous part
// per socket, so large transfers use several TCP streams at once; both sides compute the
// same cut from the size. Readiness comes from the communicator's epoll set, in which
// the sockets are registered edge-triggered.
#pragma once

#include <array>
#include <vector>

#include "core/socket.h"
#include "transport/transport.h"

namespace cc::transport::tcp {

class TcpChannel final : public Channel {
 public:
  // `sockets[0]` carries headers. All sockets must already be non-blocking.
  TcpChannel(int peer, std::vector<FileDescriptor> sockets, size_t stripeThreshold);

  bool isSharedMemory() const override { return false; }
  const char* kind() const override { return "tcp"; }
  Result<Progress> progressSend(Transfer& transfer) override;
  Result<Progress> progressRecv(Transfer& transfer) override;
  Status checkPeer() override { return Status::ok(); }  // EOF and resets surface in I/O

  const std::vector<FileDescriptor>& sockets() const { return sockets_; }

  static constexpr size_t kHeaderBytes = 16;

 private:
  struct Direction {
    std::array<std::byte, kHeaderBytes> header{};
    size_t headerDone = 0;
    size_t parts = 1;
    std::vector<size_t> partDone;
  };
  void begin(Direction& direction, const Transfer& transfer);
  std::pair<size_t, size_t> partRange(size_t bytes, size_t parts, size_t index) const;
  Status ioError(const char* operation, int error) const;

  std::vector<FileDescriptor> sockets_;
  size_t stripeThreshold_;
  Direction send_;
  Direction recv_;
};

}  // namespace cc::transport::tcp
