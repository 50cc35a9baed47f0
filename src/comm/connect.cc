// Connecting a new communicator's ranks pairwise, after the bootstrap table arrived.
//
// Each rank connects to every lower rank and accepts from every higher one; every
// connection first passes the challenge-response of auth.h. Ranks on one host (same
// host hash) meet on abstract Unix sockets and share memory (memfds passed with
// SCM_RIGHTS); others open CC_NSOCKS_PERTHREAD TCP sockets, or, for ucx, one TCP control
// socket over which the UCP worker addresses are exchanged. The listeners close when all
// expected peers have connected, so nothing stays open to strangers.
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "comm/communicator.h"
#include "core/auth.h"
#include "core/log.h"
#include "transport/shm/channel.h"
#include "transport/tcp/channel.h"
#include "transport/ucx/setup.h"

namespace cc::comm {
namespace {

using transport::shm::Doorbell;
using transport::shm::PairMemory;
using transport::shm::RingGeometry;
using transport::shm::ShmChannel;
using transport::shm::ShmChannelParts;
using transport::tcp::TcpChannel;

constexpr int64_t kStrangerAuthMs = 2000;

// The authenticated context of a peer connection: who connects, how many sockets it
// opens to us and which one this is, and whether it is a ucx control socket (the
// connecting side chooses between tcp and ucx; see connectPeers).
constexpr uint64_t kUcxControlFlag = uint64_t{1} << 15;
uint64_t packContext(int rank, int sockets, int index, bool ucx = false) {
  return (static_cast<uint64_t>(rank) << 16) | (ucx ? kUcxControlFlag : 0) |
         (static_cast<uint64_t>(sockets) << 8) | static_cast<uint64_t>(index);
}
void unpackContext(uint64_t context, int& rank, int& sockets, int& index, bool& ucx) {
  rank = static_cast<int>(context >> 16);
  ucx = (context & kUcxControlFlag) != 0;
  sockets = static_cast<int>((context >> 8) & 0x7f);
  index = static_cast<int>(context & 0xff);
}

// Whether UCX on this host can use an RDMA transport (CC_TRANSPORT=auto), asked once
// per process: the answer does not change, and a UCP context costs milliseconds.
// Empty: no; else the transports UCX listed.
std::mutex gRdmaMutex;
bool gRdmaKnown = false;
std::string gRdmaResources;

pid_t peerPid(int fd) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return 0;
  return credentials.pid;
}

// A frame together with descriptors (shm setup).
Status sendFrameWithFds(int fd, wire::FrameType type, const std::vector<std::byte>& payload,
                        std::span<const int> fds, const Deadline& deadline) {
  std::vector<std::byte> bytes(wire::kFrameHeaderBytes);
  auto header = wire::encodeFrameHeader({static_cast<uint32_t>(payload.size()), type});
  std::copy(header.begin(), header.end(), bytes.begin());
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return sendWithFds(fd, bytes, fds, deadline);
}

Result<std::vector<std::byte>> recvFrameWithFds(int fd, wire::FrameType type, size_t payloadBytes,
                                                std::vector<FileDescriptor>& fds,
                                                size_t expectedFds, const Deadline& deadline) {
  std::vector<std::byte> bytes(wire::kFrameHeaderBytes + payloadBytes);
  CC_TRY(recvWithFds(fd, bytes, fds, expectedFds, deadline));
  CC_ASSIGN_OR_RETURN(wire::FrameHeader header,
                      wire::parseFrameHeader(std::span(bytes).first(wire::kFrameHeaderBytes),
                                             static_cast<uint32_t>(payloadBytes)));
  if (header.type != type || header.length != payloadBytes)
    return remoteError("unexpected shm setup frame");
  return std::vector<std::byte>(bytes.begin() + wire::kFrameHeaderBytes, bytes.end());
}

struct Probe {
  uint64_t value = 0;
};

// Whether this side will read the peer's messages by address (the single copy): the
// probe passed, and CC_SHM_USE_CMA is 1, or auto on a host where the kernel's copy is fast
// enough to offer it (transport/shm/channel.h).
bool mayReadByAddress(const Config& config, pid_t pid, uint64_t address, uint64_t value) {
  if (config.shmUseCma == 0 || pid <= 0) return false;
  if (!transport::shm::probeCrossMemoryAttach(pid, address, value)) return false;
  return config.shmUseCma == 1 || transport::shm::crossMemoryCopyCompetitive();
}

// Both sides end the shm setup the same way: log what was agreed and build the channel.
std::unique_ptr<transport::Channel> makeShmChannel(int peer, pid_t pid, bool isConnector,
                                                   const RingGeometry& geometry, PairMemory& memory,
                                                   Doorbell& peerDoorbell, FileDescriptor control,
                                                   bool iRead, bool peerReads,
                                                   const Config& config) {
  log::info(
      "transport to rank {}: shm (same host; single copy by process_vm_readv: I read {}, peer "
      "reads {})",
      peer, iRead ? "yes" : "no", peerReads ? "yes" : "no");
  ShmChannelParts parts;
  parts.peer = peer;
  parts.peerPid = pid;
  parts.isConnector = isConnector;
  parts.geometry = geometry;
  parts.memory = &memory;
  parts.peerDoorbell = &peerDoorbell;
  parts.control = std::move(control);
  parts.peerReadsFromMe = peerReads;
  parts.iReadPeer = iRead;
  // Point-to-point messages go by address only with CC_SHM_USE_CMA=1 (auto offers the
  // single copy to the direct collectives alone: collectives/collectives.cc).
  parts.cmaThreshold = config.shmUseCma == 1 ? config.shmCmaThreshold : SIZE_MAX;
  return std::make_unique<ShmChannel>(std::move(parts));
}

// Connector side of the shm setup: creates the pair memory.
Result<std::unique_ptr<transport::Channel>> shmConnect(int peer, FileDescriptor control,
                                                       const Config& config, Doorbell& ownDoorbell,
                                                       const Probe& probe,
                                                       const Deadline& deadline) {
  RingGeometry geometry{static_cast<uint32_t>(config.shmSlots), config.shmSlotBytes};
  CC_ASSIGN_OR_RETURN(PairMemory memory, PairMemory::create(geometry, config.shmPrefault));
  wire::ShmSetup setup{geometry.slots, geometry.slotBytes, reinterpret_cast<uint64_t>(&probe.value),
                       probe.value};
  int fds[2] = {memory.fd(), ownDoorbell.fd()};
  CC_TRY(sendFrameWithFds(control.get(), wire::FrameType::kShmSetup, wire::encodeShmSetup(setup),
                          fds, deadline));
  std::vector<FileDescriptor> received;
  CC_ASSIGN_OR_RETURN(auto replyBytes,
                      recvFrameWithFds(control.get(), wire::FrameType::kShmSetupReply,
                                       wire::kShmSetupReplyBytes, received, 1, deadline));
  CC_ASSIGN_OR_RETURN(wire::ShmSetupReply reply, wire::parseShmSetupReply(replyBytes));
  // Every page mapped now (MAP_POPULATE) unless CC_SHM_PREFAULT=0: the direct collectives
  // read the peer's staging from the first call, and a page faulted in inside a timed call
  // costs microseconds.
  CC_ASSIGN_OR_RETURN(Doorbell peerDoorbell,
                      Doorbell::attach(std::move(received[0]), config.shmPrefault));
  pid_t pid = peerPid(control.get());
  bool canRead = mayReadByAddress(config, pid, reply.probeAddress, reply.probeValue);
  wire::ShmSetupReply final{0, 0, static_cast<uint8_t>(canRead ? 1 : 0)};
  CC_TRY(auth::sendFrame(control.get(), wire::FrameType::kShmSetupReply,
                         wire::encodeShmSetupReply(final), deadline));
  return makeShmChannel(peer, pid, true, geometry, memory, peerDoorbell, std::move(control),
                        canRead, reply.canReadYou != 0, config);
}

// Acceptor side of the shm setup: maps the connector's pair memory.
Result<std::unique_ptr<transport::Channel>> shmAccept(int peer, FileDescriptor control,
                                                      const Config& config, Doorbell& ownDoorbell,
                                                      const Probe& probe,
                                                      const Deadline& deadline) {
  std::vector<FileDescriptor> received;
  CC_ASSIGN_OR_RETURN(auto setupBytes,
                      recvFrameWithFds(control.get(), wire::FrameType::kShmSetup,
                                       wire::kShmSetupBytes, received, 2, deadline));
  CC_ASSIGN_OR_RETURN(wire::ShmSetup setup, wire::parseShmSetup(setupBytes));
  RingGeometry geometry{setup.slots, setup.slotBytes};
  CC_ASSIGN_OR_RETURN(PairMemory memory,
                      PairMemory::attach(std::move(received[0]), geometry, config.shmPrefault));
  // Populated, as in shmConnect.
  CC_ASSIGN_OR_RETURN(Doorbell peerDoorbell,
                      Doorbell::attach(std::move(received[1]), config.shmPrefault));
  pid_t pid = peerPid(control.get());
  bool canRead = mayReadByAddress(config, pid, setup.probeAddress, setup.probeValue);
  wire::ShmSetupReply reply{reinterpret_cast<uint64_t>(&probe.value), probe.value,
                            static_cast<uint8_t>(canRead ? 1 : 0)};
  int fds[1] = {ownDoorbell.fd()};
  CC_TRY(sendFrameWithFds(control.get(), wire::FrameType::kShmSetupReply,
                          wire::encodeShmSetupReply(reply), fds, deadline));
  CC_ASSIGN_OR_RETURN(auto finalBytes,
                      auth::recvFrame(control.get(), wire::FrameType::kShmSetupReply,
                                      wire::kShmSetupReplyBytes, deadline));
  CC_ASSIGN_OR_RETURN(wire::ShmSetupReply final, wire::parseShmSetupReply(finalBytes));
  return makeShmChannel(peer, pid, false, geometry, memory, peerDoorbell, std::move(control),
                        canRead, final.canReadYou != 0, config);
}

// Authenticated connections, handed from the handshake threads to the accepting loop.
struct Handshake {
  FileDescriptor fd;
  bool isUnix = false;
  uint64_t context = 0;
};

struct HandshakeQueue {
  std::mutex mutex;
  std::vector<Handshake> finished;
  std::atomic<int> inFlight{0};
  FileDescriptor wake{eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};

  std::vector<Handshake> takeFinished() {
    uint64_t drained = 0;
    ssize_t ignored = ::read(wake.get(), &drained, sizeof(drained));
    (void)ignored;
    std::lock_guard lock(mutex);
    return std::exchange(finished, {});
  }
};

constexpr int kMaxPendingHandshakes = 64;

void startHandshake(const std::shared_ptr<HandshakeQueue>& queue, FileDescriptor fd, bool isUnix,
                    const wire::Secret& secret, Deadline deadline) {
  if (queue->inFlight.load() >= kMaxPendingHandshakes) {
    log::warn("dropped a connection to this rank's {} listener: {} handshakes already pending",
              isUnix ? "unix" : "tcp", kMaxPendingHandshakes);
    return;
  }
  queue->inFlight.fetch_add(1);
  auto work = [queue, fd = std::make_shared<FileDescriptor>(std::move(fd)), isUnix, secret,
               deadline]() {
    uint64_t context = 0;
    Status status = auth::serverHandshake(
        fd->get(), secret, isUnix ? wire::Purpose::kPeerShm : wire::Purpose::kPeerTcp, context,
        deadline);
    if (status.isOk()) {
      std::lock_guard lock(queue->mutex);
      queue->finished.push_back(Handshake{std::move(*fd), isUnix, context});
    } else {
      log::warn("dropped a connection to this rank's {} listener: {}", isUnix ? "unix" : "tcp",
                status.message());
    }
    auth::releaseThreadState();
    queue->inFlight.fetch_sub(1);
    uint64_t one = 1;
    ssize_t ignored = ::write(queue->wake.get(), &one, sizeof(one));
    (void)ignored;
  };
  try {
    std::thread(std::move(work)).detach();
  } catch (const std::system_error& error) {
    queue->inFlight.fetch_sub(1);
    log::warn("dropped a connection: cannot start a handshake thread: {}", error.what());
  }
}

}  // namespace

Status Communicator::connectPeers(const std::vector<wire::PeerInfo>& peers,
                                  const wire::Secret& secret, FileDescriptor tcpListener,
                                  FileDescriptor unixListener) {
  const Config& config = config_;
  Deadline deadline = Deadline::afterMs(config.timeoutMs);
  channels_.resize(static_cast<size_t>(nranks_));
  uint64_t myHost = peers[static_cast<size_t>(rank_)].hostHash;
  Probe probe;
  {
    std::byte raw[8];
    CC_TRY(randomBytes(raw));
    std::memcpy(&probe.value, raw, sizeof(raw));
  }

  std::vector<bool> useShm(static_cast<size_t>(nranks_), false);
  for (int peer = 0; peer < nranks_; ++peer) {
    bool sameHost = peers[static_cast<size_t>(peer)].hostHash == myHost;
    if (config.transport == TransportChoice::kShm && !sameHost && peer != rank_) {
      return invalidArgument("CC_TRANSPORT=shm, but rank " + std::to_string(peer) +
                             " is on another host (" + peers[static_cast<size_t>(peer)].hostName +
                             ")");
    }
    useShm[static_cast<size_t>(peer)] = sameHost && config.transport != TransportChoice::kTcp &&
                                        config.transport != TransportChoice::kUcx;
  }

  // The UCX worker, made when the first ucx peer needs it (both sides of a ucx channel
  // must have one; the acceptor follows the connector's choice).
  // CC_TRANSPORT=auto across hosts: ucx where UCX reports an RDMA transport, else tcp.
  std::string autoReason;
  auto rdmaAvailable = [&]() -> Result<bool> {
    std::lock_guard lock(gRdmaMutex);
    if (!gRdmaKnown) {
      // A UCX that cannot start (a bad UCX_TLS, a container it does not like) means no
      // RDMA here, not a failed communicator: tcp still works.
      auto found = transport::ucx::UcxWorker::probeRdma();
      if (found.isOk()) {
        for (const std::string& resource : found.value()) {
          gRdmaResources += (gRdmaResources.empty() ? "" : ", ") + resource;
        }
      } else {
        log::warn("UCX could not be asked for RDMA transports ({}); using tcp between hosts",
                  found.status().message());
      }
      gRdmaKnown = true;
    }
    autoReason = gRdmaResources.empty() ? "auto: UCX found no RDMA transport"
                                        : "auto: UCX found RDMA transports " + gRdmaResources;
    return !gRdmaResources.empty();
  };
  bool anyRemote = false;
  for (int peer = 0; peer < nranks_; ++peer) {
    anyRemote = anyRemote || (peer != rank_ && !useShm[static_cast<size_t>(peer)]);
  }
  // Across hosts under auto: CC_NET when set, else ucx where UCX finds RDMA.
  const bool netForced =
      config.transport == TransportChoice::kAuto && config.net != NetChoice::kAuto;
  if (config.transport != TransportChoice::kAuto && config.net != NetChoice::kAuto && rank_ == 0) {
    log::warn("CC_NET is ignored: CC_TRANSPORT={} picks the transport for every peer",
              config.transport == TransportChoice::kShm   ? "shm"
              : config.transport == TransportChoice::kTcp ? "tcp"
                                                          : "ucx");
  }
  const bool ucxWanted =
      config.transport == TransportChoice::kUcx || (netForced && config.net == NetChoice::kUcx);
  bool rdmaFound = false;
  if (anyRemote && config.transport != TransportChoice::kTcp && (!netForced || ucxWanted)) {
    CC_ASSIGN_OR_RETURN(rdmaFound, rdmaAvailable());
  }
  if (netForced) autoReason = config.net == NetChoice::kUcx ? "CC_NET=ucx" : "CC_NET=tcp";
  const bool remoteUcx = netForced ? config.net == NetChoice::kUcx : rdmaFound;
  transport::ucx::WorkerOptions ucxOptions;
  ucxOptions.registrationCache = rdmaFound;
  if (ucxWanted && !rdmaFound) {
    // Forced ucx without RDMA runs over UCX's tcp (and shared memory) transports: keep its sockets
    // on the interface cc's own sockets use (CC_SOCKET_IFNAME), where the peers' addresses are
    // reachable; other interfaces (docker bridges, another namespace's loopback) may look reachable
    // to UCX and are not. UCX_NET_DEVICES, when set, wins.
    ucxOptions.netDevices =
        transport::ucx::interfaceNameOf(peers[static_cast<size_t>(rank_)].tcpAddress);
  }
  auto ensureUcxWorker = [&]() -> Status {
    if (ucx_) return Status::ok();
    CC_ASSIGN_OR_RETURN(ucx_, transport::ucx::UcxWorker::create(ucxOptions));
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = ucx_->eventFd();
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, ucx_->eventFd(), &event) != 0) {
      return systemError("epoll_ctl", errno);
    }
    return Status::ok();
  };
  std::vector<bool> useUcx(static_cast<size_t>(nranks_), false);
  for (int peer = 0; peer < rank_; ++peer) {
    if (useShm[static_cast<size_t>(peer)]) continue;
    if (config.transport == TransportChoice::kUcx) {
      useUcx[static_cast<size_t>(peer)] = true;
    } else if (config.transport == TransportChoice::kAuto) {
      useUcx[static_cast<size_t>(peer)] = remoteUcx;
    }
  }
  auto addUcxChannel = [&](int peer, FileDescriptor control, bool isConnector) -> Status {
    CC_TRY(ensureUcxWorker());
    CC_ASSIGN_OR_RETURN(
        auto channel,
        transport::ucx::setupChannel(peer, rank_, ucx_, std::move(control), isConnector, deadline));
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    event.data.fd = channel->controlFd();
    if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, channel->controlFd(), &event) != 0) {
      return systemError("epoll_ctl", errno);
    }
    std::string why = config.transport == TransportChoice::kUcx ? std::string("CC_TRANSPORT=ucx")
                      : isConnector || netForced
                          ? autoReason
                          : "auto: the choice of rank " + std::to_string(peer) + ", which connects";
    log::info("transport to rank {}: ucx ({}; control socket {} on {}; UCX_NET_DEVICES {})", peer,
              why, peers[static_cast<size_t>(peer)].tcpAddress.toString(),
              peers[static_cast<size_t>(peer)].hostName,
              std::getenv("UCX_NET_DEVICES") != nullptr ? std::getenv("UCX_NET_DEVICES")
              : ucxOptions.netDevices.empty()           ? "all"
                                                        : ucxOptions.netDevices);
    channels_[static_cast<size_t>(peer)] = std::move(channel);
    return Status::ok();
  };

  auto addTcpChannel = [&](int peer, std::vector<FileDescriptor> sockets) -> Status {
    std::string why = config.transport == TransportChoice::kTcp ? "; CC_TRANSPORT=tcp"
                      : peer < rank_ || netForced               ? "; " + autoReason
                                                                : "; auto: the choice of rank " +
                                                        std::to_string(peer) + ", which connects";
    for (auto& socket : sockets) {
      CC_TRY(setNonBlocking(socket.get(), true));
      epoll_event event{};
      event.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
      event.data.fd = socket.get();
      if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, socket.get(), &event) != 0)
        return systemError("epoll_ctl", errno);
    }
    log::info("transport to rank {}: tcp ({} on {}, {} sockets{})", peer,
              peers[static_cast<size_t>(peer)].tcpAddress.toString(),
              peers[static_cast<size_t>(peer)].hostName, sockets.size(), why);
    channels_[static_cast<size_t>(peer)] =
        std::make_unique<TcpChannel>(peer, std::move(sockets), config.tcpStripeThreshold);
    return Status::ok();
  };

  // Phase 1: connect to every lower rank.
  for (int peer = 0; peer < rank_; ++peer) {
    const wire::PeerInfo& info = peers[static_cast<size_t>(peer)];
    std::string who = "connecting to rank " + std::to_string(peer);
    if (useShm[static_cast<size_t>(peer)]) {
      // The table arrived, so every listener was up: a refusal means the peer is gone.
      auto control = connectUnix(info.unixName, deadline, /*retryRefused=*/false);
      if (!control.isOk()) return control.status().withContext(who);
      CC_TRY(auth::clientHandshake(control->get(), secret, wire::Purpose::kPeerShm,
                                   packContext(rank_, 1, 0), deadline)
                 .withContext(who));
      auto channel =
          shmConnect(peer, std::move(control).value(), config, *doorbell_, probe, deadline);
      if (!channel.isOk()) return channel.status().withContext(who);
      channels_[static_cast<size_t>(peer)] = std::move(channel).value();
    } else if (useUcx[static_cast<size_t>(peer)]) {
      auto control = connectTcp(info.tcpAddress, deadline, /*retryRefused=*/false);
      if (!control.isOk()) return control.status().withContext(who);
      CC_TRY(auth::clientHandshake(control->get(), secret, wire::Purpose::kPeerTcp,
                                   packContext(rank_, 1, 0, /*ucx=*/true), deadline)
                 .withContext(who));
      CC_TRY(
          addUcxChannel(peer, std::move(control).value(), /*isConnector=*/true).withContext(who));
    } else {
      std::vector<FileDescriptor> sockets;
      int count = config.tcpSocketsPerPeer;
      for (int index = 0; index < count; ++index) {
        auto socket = connectTcp(info.tcpAddress, deadline, /*retryRefused=*/false);
        if (!socket.isOk()) return socket.status().withContext(who);
        CC_TRY(auth::clientHandshake(socket->get(), secret, wire::Purpose::kPeerTcp,
                                     packContext(rank_, count, index), deadline)
                   .withContext(who));
        sockets.push_back(std::move(socket).value());
      }
      CC_TRY(addTcpChannel(peer, std::move(sockets)));
    }
  }

  // Phase 2: accept every higher rank. Each new connection authenticates on its own
  // short-lived thread (at most kMaxPendingHandshakes at once), so a stranger that
  // connects and says nothing delays no one. Connections that fail authentication or
  // say something unexpected are dropped and logged; we keep waiting for the real peers.
  auto handshakes = std::make_shared<HandshakeQueue>();
  std::map<int, std::vector<FileDescriptor>> pendingTcp;
  int missing = nranks_ - 1 - rank_;
  while (missing > 0) {
    pollfd entries[3] = {{tcpListener.get(), POLLIN, 0},
                         {unixListener.get(), POLLIN, 0},
                         {handshakes->wake.get(), POLLIN, 0}};
    int rc = ::poll(entries, 3, std::min(deadline.remainingMs(), 100));
    if (deadline.expired()) {
      std::string list;
      for (int peer = rank_ + 1; peer < nranks_; ++peer) {
        if (!channels_[static_cast<size_t>(peer)]) list += " " + std::to_string(peer);
      }
      return timeoutError("timed out waiting for ranks" + list + " to connect");
    }
    // A peer on this host that died after registering will never connect: say so now
    // rather than at the deadline.
    for (int peer = rank_ + 1; peer < nranks_; ++peer) {
      const wire::PeerInfo& info = peers[static_cast<size_t>(peer)];
      if (channels_[static_cast<size_t>(peer)] || info.hostHash != myHost) continue;
      if (kill(static_cast<pid_t>(info.pid), 0) != 0 && errno == ESRCH) {
        return remoteError("rank " + std::to_string(peer) + " (pid " + std::to_string(info.pid) +
                           ") exited while the communicator was being set up");
      }
    }
    if (rc <= 0) continue;
    for (int which = 0; which < 2; ++which) {
      if ((entries[which].revents & POLLIN) == 0) continue;
      int fd = ::accept4(entries[which].fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      bool isUnix = which == 1;
      if (!isUnix) setTcpOptions(fd);
      startHandshake(handshakes, FileDescriptor(fd), isUnix, secret,
                     Deadline(std::min(deadline.when(),
                                       Clock::now() + std::chrono::milliseconds(kStrangerAuthMs))));
    }
    for (Handshake& done : handshakes->takeFinished()) {
      int peer = 0;
      int sockets = 0;
      int index = 0;
      bool ucx = false;
      unpackContext(done.context, peer, sockets, index, ucx);
      bool isUnix = done.isUnix;
      // The connector chose ucx or tcp; under a forced CC_TRANSPORT it must be that one.
      bool ucxAllowed =
          config.transport == TransportChoice::kUcx || config.transport == TransportChoice::kAuto;
      bool tcpAllowed = config.transport != TransportChoice::kUcx;
      bool valid =
          peer > rank_ && peer < nranks_ && !channels_[static_cast<size_t>(peer)] &&
          useShm[static_cast<size_t>(peer)] == isUnix && (!ucx || (!isUnix && ucxAllowed)) &&
          (ucx || isUnix || tcpAllowed) && !(ucx && pendingTcp.count(peer) != 0) &&
          (isUnix || ucx ? (sockets == 1 && index == 0) : (sockets >= 1 && index < sockets));
      if (!valid) {
        const char* kind = isUnix ? "unix" : ucx ? "ucx control" : "tcp";
        log::warn("dropped an authenticated but unexpected connection (rank {}, socket {}/{}, {})",
                  peer, index, sockets, kind);
        continue;
      }
      if (ucx) {
        CC_TRY(addUcxChannel(peer, std::move(done.fd), /*isConnector=*/false)
                   .withContext("accepting rank " + std::to_string(peer)));
        --missing;
        continue;
      }
      if (isUnix) {
        auto channel = shmAccept(peer, std::move(done.fd), config, *doorbell_, probe, deadline);
        if (!channel.isOk())
          return channel.status().withContext("accepting rank " + std::to_string(peer));
        channels_[static_cast<size_t>(peer)] = std::move(channel).value();
        --missing;
        continue;
      }
      auto& list = pendingTcp[peer];
      if (list.empty()) list.resize(static_cast<size_t>(sockets));
      if (list.size() != static_cast<size_t>(sockets) || list[static_cast<size_t>(index)].valid()) {
        log::warn("dropped a duplicate tcp connection from rank {}", peer);
        continue;
      }
      list[static_cast<size_t>(index)] = std::move(done.fd);
      bool complete =
          std::all_of(list.begin(), list.end(), [](const FileDescriptor& s) { return s.valid(); });
      if (complete) {
        CC_TRY(addTcpChannel(peer, std::move(list)));
        pendingTcp.erase(peer);
        --missing;
      }
    }
  }
  if (ucx_) {
    std::vector<transport::ucx::UcxChannel*> ucxChannels;
    for (auto& channel : channels_) {
      auto* ucx = dynamic_cast<transport::ucx::UcxChannel*>(channel.get());
      if (ucx != nullptr) ucxChannels.push_back(ucx);
    }
    CC_TRY(transport::ucx::waitUntilConnected(*ucx_, ucxChannels, deadline));
  }
  return Status::ok();
}

}  // namespace cc::comm
