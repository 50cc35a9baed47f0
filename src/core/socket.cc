#include "core/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/random.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

namespace cc {

void FileDescriptor::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

int Deadline::remainingMs(int cap) const {
  auto left = std::chrono::duration_cast<std::chrono::microseconds>(when_ - Clock::now()).count();
  if (left <= 0) return 0;
  int64_t ms = (left + 999) / 1000;
  return static_cast<int>(std::min<int64_t>(ms, cap));
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return 0;
}

void SocketAddress::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
}

std::string SocketAddress::toString() const {
  char text[INET6_ADDRSTRLEN] = "?";
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, text,
              sizeof(text));
    return std::string(text) + ":" + std::to_string(port());
  }
  if (family() == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, text,
              sizeof(text));
    return "[" + std::string(text) + "]:" + std::to_string(port());
  }
  return "(no address)";
}

bool SocketAddress::isLoopback() const {
  if (family() == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr.s_addr) >> 24) == 127;
  }
  if (family() == AF_INET6) {
    return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr);
  }
  return false;
}

Result<SocketAddress> resolveAddress(const std::string& host, uint16_t port, int family) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &results);
  if (rc != 0 || results == nullptr) {
    return invalidArgument("cannot resolve address '" + host + "': " + gai_strerror(rc));
  }
  SocketAddress address;
  std::memcpy(&address.storage, results->ai_addr, results->ai_addrlen);
  address.length = results->ai_addrlen;
  freeaddrinfo(results);
  address.setPort(port);
  return address;
}

namespace {

bool interfaceMatches(const std::string& pattern, const char* name) {
  if (pattern.empty()) return true;
  if (pattern[0] == '^') return std::strncmp(name, pattern.c_str() + 1, pattern.size() - 1) != 0;
  if (pattern[0] == '=') return pattern.substr(1) == name;
  return std::strncmp(name, pattern.c_str(), pattern.size()) == 0;
}

Status waitFor(int fd, short events, const Deadline& deadline, const char* what) {
  while (true) {
    pollfd entry{fd, events, 0};
    int rc = ::poll(&entry, 1, deadline.remainingMs());
    if (rc > 0) return Status::ok();
    if (rc == 0) return timeoutError(std::string("timed out waiting to ") + what);
    if (errno != EINTR) return systemError(std::string("poll while waiting to ") + what, errno);
  }
}

sockaddr_un abstractAddress(const std::string& name, socklen_t& length) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  size_t size = std::min(name.size(), sizeof(address.sun_path) - 1);
  std::memcpy(address.sun_path + 1, name.data(), size);
  length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + size);
  return address;
}

}  // namespace

Result<SocketAddress> chooseInterfaceAddress(const std::string& ifname, int family) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return systemError("getifaddrs", errno);
  SocketAddress best;
  SocketAddress loopback;
  for (int pass = 0; pass < 2 && best.length == 0; ++pass) {
    // First pass prefers IPv4 when either family will do; second takes IPv6.
    int wanted = family != 0 ? family : (pass == 0 ? AF_INET : AF_INET6);
    for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
      if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != wanted) continue;
      if ((entry->ifa_flags & IFF_UP) == 0) continue;
      if (!interfaceMatches(ifname, entry->ifa_name)) continue;
      SocketAddress candidate;
      candidate.length = wanted == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      std::memcpy(&candidate.storage, entry->ifa_addr, candidate.length);
      if (wanted == AF_INET6 &&
          IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<sockaddr_in6*>(&candidate.storage)->sin6_addr)) {
        continue;  // link-local needs a scope id that peers cannot use
      }
      bool isLoopback = (entry->ifa_flags & IFF_LOOPBACK) != 0;
      if (isLoopback && ifname.empty()) {
        if (loopback.length == 0) loopback = candidate;
        continue;
      }
      best = candidate;
      break;
    }
    if (family != 0) break;
  }
  freeifaddrs(list);
  if (best.length == 0) best = loopback;
  if (best.length == 0) {
    return invalidArgument(
        "no usable network interface" +
        (ifname.empty() ? std::string() : " matches CC_SOCKET_IFNAME=" + ifname));
  }
  best.setPort(0);
  return best;
}

Result<FileDescriptor> listenTcp(SocketAddress& address, int backlog) {
  FileDescriptor fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return systemError("socket", errno);
  int one = 1;
  setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address.storage), address.length) != 0) {
    return systemError("bind " + address.toString(), errno);
  }
  if (::listen(fd.get(), backlog) != 0) return systemError("listen", errno);
  address.length = sizeof(address.storage);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&address.storage), &address.length) != 0) {
    return systemError("getsockname", errno);
  }
  return fd;
}

void setTcpOptions(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

Result<FileDescriptor> connectTcp(const SocketAddress& address, const Deadline& deadline,
                                  bool retryRefused) {
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    FileDescriptor fd(::socket(address.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return systemError("socket", errno);
    int rc =
        ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address.storage), address.length);
    int error = rc == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      Status waited =
          waitFor(fd.get(), POLLOUT, deadline, ("connect to " + address.toString()).c_str());
      if (!waited.isOk()) return waited;
      socklen_t length = sizeof(error);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &length);
    }
    if (error == 0) {
      CC_TRY(setNonBlocking(fd.get(), false));
      setTcpOptions(fd.get());
      return fd;
    }
    if (error == ECONNREFUSED && !retryRefused) {
      return remoteError("connect to " + address.toString() +
                         ": connection refused (the peer is gone)");
    }
    if (error != ECONNREFUSED && error != ETIMEDOUT && error != EAGAIN && error != ENETUNREACH) {
      return systemError("connect to " + address.toString(), error);
    }
    if (deadline.expired()) return timeoutError("timed out connecting to " + address.toString());
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

Result<FileDescriptor> listenUnix(const std::string& abstractName) {
  FileDescriptor fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return systemError("socket(AF_UNIX)", errno);
  socklen_t length = 0;
  sockaddr_un address = abstractAddress(abstractName, length);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), length) != 0) {
    return systemError("bind unix @" + abstractName, errno);
  }
  if (::listen(fd.get(), SOMAXCONN) != 0) return systemError("listen unix", errno);
  return fd;
}

Result<FileDescriptor> connectUnix(const std::string& abstractName, const Deadline& deadline,
                                   bool retryRefused) {
  socklen_t length = 0;
  sockaddr_un address = abstractAddress(abstractName, length);
  while (true) {
    // Non-blocking: a full backlog must not block us past the deadline.
    FileDescriptor fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) return systemError("socket(AF_UNIX)", errno);
    int rc = ::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), length);
    int error = rc == 0 ? 0 : errno;
    if (error == EAGAIN || error == EINPROGRESS) {
      CC_TRY(waitFor(fd.get(), POLLOUT, deadline, "connect to a unix socket"));
      socklen_t errorLength = sizeof(error);
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &errorLength);
    }
    if (error == 0) {
      CC_TRY(setNonBlocking(fd.get(), false));
      return fd;
    }
    if ((error != ECONNREFUSED && error != ENOENT) || !retryRefused) {
      return Status(error == ECONNREFUSED ? ccRemoteError : ccSystemError,
                    "connect unix @" + abstractName + ": " + std::strerror(error));
    }
    if (deadline.expired()) return timeoutError("timed out connecting to unix @" + abstractName);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status setNonBlocking(int fd, bool nonBlocking) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0) return systemError("fcntl(F_GETFL)", errno);
  flags = nonBlocking ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (fcntl(fd, F_SETFL, flags) != 0) return systemError("fcntl(F_SETFL)", errno);
  return Status::ok();
}

Status sendAll(int fd, std::span<const std::byte> data, const Deadline& deadline) {
  size_t sent = 0;
  while (sent < data.size()) {
    ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      CC_TRY(waitFor(fd, POLLOUT, deadline, "send"));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
      return remoteError("connection closed by peer");
    return systemError("send", errno);
  }
  return Status::ok();
}

Status recvAll(int fd, std::span<std::byte> data, const Deadline& deadline) {
  size_t received = 0;
  while (received < data.size()) {
    ssize_t n = ::recv(fd, data.data() + received, data.size() - received, MSG_DONTWAIT);
    if (n > 0) {
      received += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return remoteError("connection closed by peer");
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      CC_TRY(waitFor(fd, POLLIN, deadline, "receive"));
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == ECONNRESET) return remoteError("connection reset by peer");
    return systemError("recv", errno);
  }
  return Status::ok();
}

Status sendWithFds(int fd, std::span<const std::byte> data, std::span<const int> fds,
                   const Deadline& deadline) {
  constexpr size_t kMaxFds = 8;
  if (fds.size() > kMaxFds || data.empty()) return internalError("sendWithFds: bad arguments");
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  iovec vector{const_cast<std::byte*>(data.data()), data.size()};
  msghdr message{};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  if (!fds.empty()) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  CC_TRY(waitFor(fd, POLLOUT, deadline, "send descriptors"));
  ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL);
  if (n < 0) return systemError("sendmsg", errno);
  // The descriptors travel with the first byte; the rest goes as plain data.
  return sendAll(fd, data.subspan(static_cast<size_t>(n)), deadline);
}

Status recvWithFds(int fd, std::span<std::byte> data, std::vector<FileDescriptor>& fds,
                   size_t expectedFds, const Deadline& deadline) {
  constexpr size_t kMaxFds = 8;
  if (expectedFds > kMaxFds || data.empty()) return internalError("recvWithFds: bad arguments");
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  iovec vector{data.data(), data.size()};
  msghdr message{};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof(control);
  CC_TRY(waitFor(fd, POLLIN, deadline, "receive descriptors"));
  ssize_t n = ::recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
  if (n < 0) return systemError("recvmsg", errno);
  if (n == 0) return remoteError("connection closed by peer");
  std::vector<FileDescriptor> received;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
       header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int received_fd = -1;
      std::memcpy(&received_fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
      received.emplace_back(received_fd);
    }
  }
  if ((message.msg_flags & MSG_CTRUNC) != 0 || received.size() != expectedFds) {
    return remoteError("expected " + std::to_string(expectedFds) + " descriptors, got " +
                       std::to_string(received.size()));
  }
  fds = std::move(received);
  return recvAll(fd, data.subspan(static_cast<size_t>(n)), deadline);
}

Status randomBytes(std::span<std::byte> out) {
  size_t filled = 0;
  while (filled < out.size()) {
    ssize_t n = getrandom(out.data() + filled, out.size() - filled, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return systemError("getrandom", errno);
    }
    filled += static_cast<size_t>(n);
  }
  return Status::ok();
}

}  // namespace cc
