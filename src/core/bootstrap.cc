#include "core/bootstrap.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "core/auth.h"
#include "core/log.h"

namespace cc::bootstrap {
namespace {

// A stranger gets this long to authenticate before it is dropped.
constexpr int64_t kAuthTimeoutMs = 5000;
constexpr uint32_t kMaxRegisterBytes = 4096;

// Listening sockets of roots alive in this process. A child made by fork() must not keep
// them (it would hold the port open after the parent's root finished), so an atfork
// handler closes them in the child. Plain atomics: the child may not take locks.
constexpr int kMaxRoots = 256;
std::atomic<int> gRootFds[kMaxRoots];

void closeRootFdsInChild() {
  for (auto& slot : gRootFds) {
    int fd = slot.exchange(-1);
    if (fd >= 0) ::close(fd);
  }
}

void registerRootFd(int fd) {
  static std::once_flag once;
  std::call_once(once, [] {
    for (auto& slot : gRootFds) slot.store(-1);
    pthread_atfork(nullptr, nullptr, closeRootFdsInChild);
  });
  for (auto& slot : gRootFds) {
    int expected = -1;
    if (slot.compare_exchange_strong(expected, fd)) return;
  }
}

void unregisterRootFd(int fd) {
  for (auto& slot : gRootFds) {
    int expected = fd;
    if (slot.compare_exchange_strong(expected, -1)) return;
  }
}

struct Registration {
  FileDescriptor fd;
  wire::RegisterMessage message;
};

// State shared by the root thread and its per-connection handlers.
struct RootState {
  wire::Secret secret{};
  std::mutex mutex;
  int nranks = 0;  // from the first registration
  std::vector<std::optional<Registration>> ranks;
  int registered = 0;
  bool finished = false;
  FileDescriptor wake{eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};  // a registration arrived
  std::atomic<int> handshakesInFlight{0};
};

// Strangers may open many connections at once; beyond this many unauthenticated ones
// the root drops new connections at once instead of starting threads for them.
constexpr int kMaxPendingHandshakes = 256;

void handleConnection(std::shared_ptr<RootState> state, FileDescriptor fd, std::string from) {
  struct InFlight {
    RootState& state;
    ~InFlight() {
      auth::releaseThreadState();
      state.handshakesInFlight.fetch_sub(1);
    }
  } inFlight{*state};
  Deadline deadline = Deadline::afterMs(kAuthTimeoutMs);
  uint64_t context = 0;
  Status status = auth::serverHandshake(fd.get(), state->secret, wire::Purpose::kRootRegister,
                                        context, deadline);
  if (!status.isOk()) {
    log::warn("bootstrap root: dropped connection from {}: {}", from, status.message());
    return;
  }
  auto payload = auth::recvFrame(fd.get(), wire::FrameType::kRegister, kMaxRegisterBytes, deadline);
  if (!payload.isOk()) {
    log::warn("bootstrap root: dropped connection from {}: {}", from, payload.status().message());
    return;
  }
  auto message = wire::parseRegister(*payload);
  if (!message.isOk()) {
    log::warn("bootstrap root: dropped connection from {}: {}", from, message.status().message());
    return;
  }
  std::lock_guard lock(state->mutex);
  if (state->finished) return;
  if (state->nranks == 0) {
    state->nranks = message->nranks;
    state->ranks.resize(static_cast<size_t>(message->nranks));
  }
  int rank = message->self.rank;
  if (message->nranks != state->nranks) {
    log::warn("bootstrap root: rank {} says nranks={}, others said {}; dropped", rank,
              message->nranks, state->nranks);
    return;
  }
  if (state->ranks[static_cast<size_t>(rank)].has_value()) {
    log::warn("bootstrap root: rank {} registered twice (from {}); dropped the second", rank, from);
    return;
  }
  state->ranks[static_cast<size_t>(rank)] = Registration{std::move(fd), std::move(message).value()};
  ++state->registered;
  uint64_t one = 1;
  ssize_t ignored = ::write(state->wake.get(), &one, sizeof(one));
  (void)ignored;
}

void runRoot(std::shared_ptr<RootState> state, FileDescriptor listener, int64_t timeoutMs) {
  struct ReleaseOnExit {
    ~ReleaseOnExit() { auth::releaseThreadState(); }
  } release;
  Deadline deadline = Deadline::afterMs(timeoutMs);
  std::vector<pollfd> entries;
  std::vector<int> entryRanks;
  std::string lostRank;
  while (lostRank.empty()) {
    // Listen, and watch the ranks already registered: one that disconnects (its process
    // died) can never be part of the communicator, so the others are told at once
    // instead of at the deadline.
    entries.assign({{listener.get(), POLLIN, 0}, {state->wake.get(), POLLIN, 0}});
    entryRanks.assign(2, -1);
    {
      std::unique_lock lock(state->mutex);
      if (state->nranks > 0 && state->registered == state->nranks) break;
      for (int r = 0; r < state->nranks; ++r) {
        if (!state->ranks[static_cast<size_t>(r)].has_value()) continue;
        entries.push_back({state->ranks[static_cast<size_t>(r)]->fd.get(), POLLRDHUP, 0});
        entryRanks.push_back(r);
      }
    }
    if (deadline.expired()) break;
    int rc = ::poll(entries.data(), entries.size(), std::min(deadline.remainingMs(), 1000));
    for (size_t i = 2; rc > 0 && i < entries.size(); ++i) {
      if ((entries[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0)
        lostRank = std::to_string(entryRanks[i]);
    }
    if (!lostRank.empty()) break;
    if (rc <= 0 || (entries[0].revents & POLLIN) == 0) {
      uint64_t drained = 0;
      ssize_t ignored = ::read(state->wake.get(), &drained, sizeof(drained));
      (void)ignored;
      continue;
    }
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    int fd = ::accept4(listener.get(), reinterpret_cast<sockaddr*>(&peer), &length, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: the listener stays readable, so back off instead of spinning.
      if (errno == EMFILE || errno == ENFILE)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    FileDescriptor connection(fd);
    SocketAddress from;
    from.storage = peer;
    from.length = length;
    if (state->handshakesInFlight.load() >= kMaxPendingHandshakes) {
      log::warn("bootstrap root: dropped connection from {}: {} handshakes already pending",
                from.toString(), kMaxPendingHandshakes);
      continue;
    }
    state->handshakesInFlight.fetch_add(1);
    try {
      std::thread(handleConnection, state, std::move(connection), from.toString()).detach();
    } catch (const std::system_error& error) {
      state->handshakesInFlight.fetch_sub(1);
      log::warn("bootstrap root: dropped connection from {}: cannot start a thread: {}",
                from.toString(), error.what());
    }
  }
  unregisterRootFd(listener.get());
  listener.reset();

  std::unique_lock lock(state->mutex);
  state->finished = true;
  if (!lostRank.empty()) {
    log::warn(
        "bootstrap root: rank {} disconnected before all ranks registered; closing, so the others "
        "fail now",
        lostRank);
    return;
  }
  if (state->nranks == 0 || state->registered < state->nranks) {
    std::string missing;
    for (int r = 0; r < state->nranks && missing.size() < 200; ++r) {
      if (!state->ranks[static_cast<size_t>(r)].has_value()) missing += " " + std::to_string(r);
    }
    log::warn("bootstrap root: gave up after {} ms with {} of {} ranks registered (missing:{})",
              timeoutMs, state->registered, state->nranks, missing.empty() ? " all" : missing);
    return;  // closing the registered connections tells those ranks
  }
  std::vector<wire::PeerInfo> table;
  table.reserve(static_cast<size_t>(state->nranks));
  for (auto& registration : state->ranks) table.push_back(registration->message.self);
  std::vector<std::byte> encoded = wire::encodePeerTable(table);
  Deadline sendDeadline = Deadline::afterMs(timeoutMs);
  for (auto& registration : state->ranks) {
    Status status =
        auth::sendFrame(registration->fd.get(), wire::FrameType::kPeerTable, encoded, sendDeadline);
    if (!status.isOk()) {
      log::warn("bootstrap root: could not send the table to rank {}: {}",
                registration->message.self.rank, status.message());
    }
  }
  log::info("bootstrap root: {} ranks joined", state->nranks);
}

uint64_t fnv1a(const std::string& text, uint64_t hash = 1469598103934665603ull) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  return hash;
}

// Starts the root's thread; its listener is registered for the atfork handler first (the
// thread may unregister it as soon as it runs) and unregistered again if no thread starts.
Status launchRoot(FileDescriptor listener, const SocketAddress& bound, const wire::Secret& secret,
                  int64_t timeoutMs) {
  auto state = std::make_shared<RootState>();
  state->secret = secret;
  int fd = listener.get();
  registerRootFd(fd);
  try {
    std::thread(runRoot, state, std::move(listener), timeoutMs).detach();
  } catch (const std::system_error& error) {
    unregisterRootFd(fd);
    return Status(ccSystemError,
                  std::string("cannot start the bootstrap root's thread: ") + error.what());
  }
  log::info("bootstrap root listening on {}", bound.toString());
  return Status::ok();
}

}  // namespace

std::string hostName() {
  if (const char* forced = std::getenv("CC_HOSTNAME"); forced != nullptr && *forced != '\0')
    return forced;
  char buffer[256] = {};
  if (gethostname(buffer, sizeof(buffer) - 1) != 0) return "unknown-host";
  return buffer;
}

uint64_t hostHash() {
  if (const char* forced = std::getenv("CC_HOSTNAME"); forced != nullptr && *forced != '\0') {
    return fnv1a(std::string("forced:") + forced);
  }
  std::string identity = hostName();
  std::ifstream bootId("/proc/sys/kernel/random/boot_id");
  std::string line;
  if (std::getline(bootId, line)) identity += "|" + line;
  // Ranks in different network namespaces cannot reach each other's abstract Unix
  // sockets, so for cc they are on different hosts.
  char target[128] = {};
  if (readlink("/proc/self/ns/net", target, sizeof(target) - 1) > 0)
    identity += "|" + std::string(target);
  return fnv1a(identity);
}

Status startRootAt(const SocketAddress& address, const wire::Secret& secret, int64_t timeoutMs) {
  SocketAddress bound = address;
  CC_ASSIGN_OR_RETURN(FileDescriptor listener, listenTcp(bound));
  return launchRoot(std::move(listener), bound, secret, timeoutMs);
}

Result<wire::UniqueIdContents> startRoot(const Config& config) {
  wire::UniqueIdContents id;
  CC_ASSIGN_OR_RETURN(id.rootAddress,
                      chooseInterfaceAddress(config.socketIfname, config.socketFamily));
  CC_TRY(randomBytes(id.secret));
  SocketAddress bound = id.rootAddress;
  CC_ASSIGN_OR_RETURN(FileDescriptor listener, listenTcp(bound));
  id.rootAddress = bound;
  CC_TRY(launchRoot(std::move(listener), bound, id.secret, config.timeoutMs));
  return id;
}

Result<std::vector<wire::PeerInfo>> exchangePeerInfo(const wire::UniqueIdContents& id, int nranks,
                                                     const wire::PeerInfo& self,
                                                     const Config& config) {
  Deadline deadline = Deadline::afterMs(config.timeoutMs);
  auto fd = connectTcp(id.rootAddress, deadline);
  if (!fd.isOk())
    return fd.status().withContext("bootstrap: cannot reach the root at " +
                                   id.rootAddress.toString());
  Status status = auth::clientHandshake(fd->get(), id.secret, wire::Purpose::kRootRegister,
                                        static_cast<uint64_t>(self.rank), deadline);
  if (!status.isOk()) return status.withContext("bootstrap: root at " + id.rootAddress.toString());
  wire::RegisterMessage message{nranks, self};
  CC_TRY(auth::sendFrame(fd->get(), wire::FrameType::kRegister, wire::encodeRegister(message),
                         deadline));
  uint32_t limit = static_cast<uint32_t>(
      std::min<uint64_t>(wire::kMaxFrameBytes, 4096ull * static_cast<uint64_t>(nranks) + 64));
  auto payload = auth::recvFrame(fd->get(), wire::FrameType::kPeerTable, limit, deadline);
  if (!payload.isOk()) {
    return payload.status().withContext("bootstrap: waiting for all " + std::to_string(nranks) +
                                        " ranks at the root " + id.rootAddress.toString());
  }
  return wire::parsePeerTable(*payload, nranks);
}

}  // namespace cc::bootstrap
