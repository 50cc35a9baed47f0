// Sockets for the bootstrap and the transports: an owning file descriptor, addresses
// (IPv4 and IPv6), interface choice, and blocking reads and writes bounded by a
// deadline. Unix sockets live in the abstract namespace, so nothing is left on disk.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace cc {

class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() { reset(); }
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(other.release()) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  static Deadline afterMs(int64_t ms) {
    return Deadline(Clock::now() + std::chrono::milliseconds(ms));
  }
  explicit Deadline(Clock::time_point when) : when_(when) {}
  bool expired() const { return Clock::now() >= when_; }
  // Milliseconds left, rounded up, at least 0 and at most `cap`.
  int remainingMs(int cap = 1 << 30) const;
  Clock::time_point when() const { return when_; }

 private:
  Clock::time_point when_;
};

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  int family() const { return storage.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  std::string toString() const;
  bool isLoopback() const;
};

// Parses "1.2.3.4", "::1" or a host name (first result of getaddrinfo).
Result<SocketAddress> resolveAddress(const std::string& host, uint16_t port, int family = 0);

// The address sockets should use: CC_SOCKET_IFNAME's interface when set (a name or a
// prefix; "^eth0" means anything but eth0), else the first non-loopback interface that
// is up, else loopback.
Result<SocketAddress> chooseInterfaceAddress(const std::string& ifname, int family);

// Listening TCP socket on `address` (port 0 picks a free port); the bound address is
// written back into `address`.
Result<FileDescriptor> listenTcp(SocketAddress& address, int backlog = SOMAXCONN);
// Connects, retrying refused connections until the deadline when `retryRefused` (the
// listener may not be up yet: the bootstrap root); without it a refusal is a
// ccRemoteError at once (a peer whose listener was up and is gone). The socket returned
// is blocking with TCP_NODELAY set.
Result<FileDescriptor> connectTcp(const SocketAddress& address, const Deadline& deadline,
                                  bool retryRefused = true);

// Abstract-namespace Unix sockets (the name is given without the leading NUL).
Result<FileDescriptor> listenUnix(const std::string& abstractName);
Result<FileDescriptor> connectUnix(const std::string& abstractName, const Deadline& deadline,
                                   bool retryRefused = true);

// Blocking exact-length I/O bounded by a deadline; EOF is a ccRemoteError.
Status sendAll(int fd, std::span<const std::byte> data, const Deadline& deadline);
Status recvAll(int fd, std::span<std::byte> data, const Deadline& deadline);

// File descriptors over a Unix socket (SCM_RIGHTS) with a small payload.
Status sendWithFds(int fd, std::span<const std::byte> data, std::span<const int> fds,
                   const Deadline& deadline);
Status recvWithFds(int fd, std::span<std::byte> data, std::vector<FileDescriptor>& fds,
                   size_t expectedFds, const Deadline& deadline);

Status setNonBlocking(int fd, bool nonBlocking);
void setTcpOptions(int fd);  // TCP_NODELAY, keepalive, larger buffers

// Fills `out` from the kernel's random source.
Status randomBytes(std::span<std::byte> out);

}  // namespace cc
