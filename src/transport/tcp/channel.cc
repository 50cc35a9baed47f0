#include "transport/tcp/channel.h"

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "core/wire.h"

namespace cc::transport::tcp {
namespace {
constexpr uint32_t kMessageMagic = 0x4d544343;  // "CCTM"
constexpr size_t kPartAlignment = 4096;
}  // namespace

TcpChannel::TcpChannel(int peer, std::vector<FileDescriptor> sockets, size_t stripeThreshold)
    : Channel(peer), sockets_(std::move(sockets)), stripeThreshold_(stripeThreshold) {}

std::pair<size_t, size_t> TcpChannel::partRange(size_t bytes, size_t parts, size_t index) const {
  size_t per = (bytes + parts - 1) / parts;
  per = (per + kPartAlignment - 1) / kPartAlignment * kPartAlignment;
  size_t begin = std::min(bytes, per * index);
  size_t end = std::min(bytes, begin + per);
  return {begin, end};
}

void TcpChannel::begin(Direction& direction, const Transfer& transfer) {
  direction.headerDone = 0;
  direction.parts =
      (transfer.bytes >= stripeThreshold_ && sockets_.size() > 1) ? sockets_.size() : 1;
  direction.partDone.assign(direction.parts, 0);
  wire::Writer writer;
  writer.u32(kMessageMagic);
  writer.u32(static_cast<uint32_t>(direction.parts));  // the receiver checks it cut the same way
  writer.u64(transfer.bytes);
  std::memcpy(direction.header.data(), writer.bytes().data(), kHeaderBytes);
}

Status TcpChannel::ioError(const char* operation, int error) const {
  std::string who = "rank " + std::to_string(peer()) + " (tcp)";
  if (error == 0) return remoteError(who + " closed the connection");
  if (error == EPIPE || error == ECONNRESET || error == ENOTCONN) {
    return remoteError(who + " is gone: connection reset during " + operation);
  }
  return systemError(std::string(operation) + " to " + who, error);
}

Result<Progress> TcpChannel::progressSend(Transfer& transfer) {
  if (!transfer.started) {
    begin(send_, transfer);
    transfer.started = true;
  }
  bool moved = false;
  for (size_t index = 0; index < send_.parts; ++index) {
    auto [begin, end] = partRange(transfer.bytes, send_.parts, index);
    int fd = sockets_[index].get();
    while (true) {
      size_t partLeft = end - begin - send_.partDone[index];
      bool headerLeft = index == 0 && send_.headerDone < kHeaderBytes;
      if (partLeft == 0 && !headerLeft) break;
      iovec vectors[2];
      int count = 0;
      if (headerLeft) {
        vectors[count++] = {send_.header.data() + send_.headerDone,
                            kHeaderBytes - send_.headerDone};
      }
      if (partLeft > 0)
        vectors[count++] = {transfer.data + begin + send_.partDone[index], partLeft};
      msghdr message{};
      message.msg_iov = vectors;
      message.msg_iovlen = static_cast<size_t>(count);
      ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        return ioError("send", errno);
      }
      size_t sent = static_cast<size_t>(n);
      moved = moved || sent > 0;
      if (headerLeft) {
        size_t headerPart = std::min(sent, kHeaderBytes - send_.headerDone);
        send_.headerDone += headerPart;
        sent -= headerPart;
      }
      send_.partDone[index] += sent;
      transfer.progressed += sent;
    }
  }
  if (send_.headerDone == kHeaderBytes && transfer.progressed == transfer.bytes)
    return Progress::kDone;
  return moved ? Progress::kMoved : Progress::kIdle;
}

Result<Progress> TcpChannel::progressRecv(Transfer& transfer) {
  if (!transfer.started) {
    begin(recv_, transfer);
    transfer.started = true;
  }
  bool moved = false;
  for (size_t index = 0; index < recv_.parts; ++index) {
    auto [begin, end] = partRange(transfer.bytes, recv_.parts, index);
    int fd = sockets_[index].get();
    while (true) {
      size_t partLeft = end - begin - recv_.partDone[index];
      bool headerLeft = index == 0 && recv_.headerDone < kHeaderBytes;
      if (partLeft == 0 && !headerLeft) break;
      iovec vectors[2];
      int count = 0;
      if (headerLeft) {
        vectors[count++] = {recv_.header.data() + recv_.headerDone,
                            kHeaderBytes - recv_.headerDone};
      }
      if (partLeft > 0)
        vectors[count++] = {transfer.data + begin + recv_.partDone[index], partLeft};
      msghdr message{};
      message.msg_iov = vectors;
      message.msg_iovlen = static_cast<size_t>(count);
      ssize_t n = ::recvmsg(fd, &message, MSG_DONTWAIT);
      if (n == 0) return ioError("receive", 0);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        return ioError("receive", errno);
      }
      size_t received = static_cast<size_t>(n);
      moved = true;
      if (headerLeft) {
        size_t headerPart = std::min(received, kHeaderBytes - recv_.headerDone);
        recv_.headerDone += headerPart;
        received -= headerPart;
        if (recv_.headerDone == kHeaderBytes) {
          wire::Reader reader(recv_.header);
          uint32_t magic = 0;
          uint32_t flags = 0;
          uint64_t bytes = 0;
          (void)reader.u32(magic);
          (void)reader.u32(flags);
          (void)reader.u64(bytes);
          if (magic != kMessageMagic) {
            return remoteError("tcp stream from rank " + std::to_string(peer()) +
                               " is corrupt (bad message magic)");
          }
          if (bytes != transfer.bytes) {
            return invalidUsage("message size mismatch: this rank receives " +
                                std::to_string(transfer.bytes) + " bytes from rank " +
                                std::to_string(peer()) + ", which sent " + std::to_string(bytes));
          }
          if (flags != recv_.parts) {
            return invalidUsage(
                "rank " + std::to_string(peer()) + " cut a message over " + std::to_string(flags) +
                " sockets, this rank over " + std::to_string(recv_.parts) +
                ": CC_TCP_STRIPE_THRESHOLD and CC_NSOCKS_PERTHREAD must match on every rank");
          }
        }
      }
      recv_.partDone[index] += received;
      transfer.progressed += received;
    }
  }
  if (recv_.headerDone == kHeaderBytes && transfer.progressed == transfer.bytes)
    return Progress::kDone;
  return moved ? Progress::kMoved : Progress::kIdle;
}

}  // namespace cc::transport::tcp
