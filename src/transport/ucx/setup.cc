#include "transport/ucx/setup.h"

#include <ifaddrs.h>
#include <netinet/in.h>
#include <poll.h>

#include <cstring>
#include <vector>

#include "core/auth.h"

namespace cc::transport::ucx {
namespace {

bool sameHostAddress(const sockaddr* interfaceAddress, const SocketAddress& address) {
  if (interfaceAddress == nullptr || interfaceAddress->sa_family != address.family()) return false;
  if (address.family() == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(interfaceAddress);
    const auto* b = reinterpret_cast<const sockaddr_in*>(&address.storage);
    return a->sin_addr.s_addr == b->sin_addr.s_addr;
  }
  if (address.family() == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(interfaceAddress);
    const auto* b = reinterpret_cast<const sockaddr_in6*>(&address.storage);
    return std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof(in6_addr)) == 0;
  }
  return false;
}

}  // namespace

std::string interfaceNameOf(const SocketAddress& address) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* entry = list; entry != nullptr && name.empty(); entry = entry->ifa_next) {
    if (sameHostAddress(entry->ifa_addr, address)) name = entry->ifa_name;
  }
  freeifaddrs(list);
  return name;
}

Result<std::unique_ptr<UcxChannel>> setupChannel(int peer, int selfRank,
                                                 const std::shared_ptr<UcxWorker>& worker,
                                                 FileDescriptor control, bool isConnector,
                                                 const Deadline& deadline) {
  int fd = control.get();
  std::vector<std::byte> peerAddress;
  if (isConnector) {
    CC_TRY(auth::sendFrame(fd, wire::FrameType::kUcxAddress, worker->address(), deadline));
    CC_ASSIGN_OR_RETURN(peerAddress, auth::recvFrame(fd, wire::FrameType::kUcxAddress,
                                                     wire::kMaxUcxAddressBytes, deadline));
  } else {
    CC_ASSIGN_OR_RETURN(peerAddress, auth::recvFrame(fd, wire::FrameType::kUcxAddress,
                                                     wire::kMaxUcxAddressBytes, deadline));
    CC_TRY(auth::sendFrame(fd, wire::FrameType::kUcxAddress, worker->address(), deadline));
  }
  if (peerAddress.empty()) {
    return remoteError("rank " + std::to_string(peer) + " sent an empty UCX worker address");
  }
  CC_TRY(setNonBlocking(fd, true));
  auto channel = std::make_unique<UcxChannel>(peer, selfRank, worker, std::move(control));
  CC_TRY(channel->connect(peerAddress));
  return channel;
}

Status waitUntilConnected(UcxWorker& worker, const std::vector<UcxChannel*>& channels,
                          const Deadline& deadline) {
  std::vector<ucs_status_ptr_t> flushes;
  Status failure;
  for (UcxChannel* channel : channels) flushes.push_back(channel->startFlush());
  for (size_t i = 0; i < channels.size(); ++i) {
    while (failure.isOk()) {
      ucs_status_ptr_t request = flushes[i];
      ucs_status_t status = UCS_PTR_IS_ERR(request) ? UCS_PTR_STATUS(request)
                            : request == nullptr    ? UCS_OK
                                                    : ucp_request_check_status(request);
      if (status == UCS_OK) break;
      std::string who = "connecting UCX to rank " + std::to_string(channels[i]->peer());
      if (status != UCS_INPROGRESS) {
        failure = remoteError(who + ": " + ucs_status_string(status));
      } else if (Status alive = channels[i]->checkPeer(); !alive.isOk()) {
        failure = alive.withContext(who);
      } else if (deadline.expired()) {
        failure = timeoutError(who + ": not connected within CC_TIMEOUT_MS");
      } else if (!worker.progress() && worker.arm()) {
        // The peer may still be connecting its other peers: sleep until UCX has news.
        pollfd entry{worker.eventFd(), POLLIN, 0};
        ::poll(&entry, 1, deadline.remainingMs(10));
      }
    }
  }
  for (ucs_status_ptr_t request : flushes) {
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) ucp_request_free(request);
  }
  return failure;
}

}  // namespace cc::transport::ucx
