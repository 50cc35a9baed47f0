#include "comm/communicator.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "comm/wait.h"
#include "core/bootstrap.h"
#include "core/log.h"
#include "transport/shm/channel.h"
#include "transport/ucx/worker.h"

namespace cc::comm {
namespace {

std::string randomHex(size_t bytes) {
  std::vector<std::byte> raw(bytes);
  (void)randomBytes(raw);
  return wire::toHex(raw);
}

std::atomic<int> gNextLane{0};

}  // namespace

void Communicator::collectSharedRegions() {
  regions_.assign(static_cast<size_t>(nranks_), nullptr);
  bells_.assign(static_cast<size_t>(nranks_), nullptr);
  size_t smallest = doorbell_->extraBytes();
  bool allLocal = true;
  for (int peer = 0; peer < nranks_; ++peer) {
    transport::shm::Doorbell* region = nullptr;
    if (peer == rank_) {
      region = doorbell_.get();
    } else if (auto* shm = dynamic_cast<transport::shm::ShmChannel*>(channel(peer))) {
      region = &shm->peerRegion();
    }
    if (region == nullptr) {
      allLocal = false;
      continue;
    }
    regions_[static_cast<size_t>(peer)] = region->extra();
    bells_[static_cast<size_t>(peer)] = &region->word();
    smallest = std::min(smallest, region->extraBytes());
  }
  sharedRegionBytes_ = allLocal ? smallest : 0;
}

Result<std::shared_ptr<Communicator>> Communicator::create(const wire::UniqueIdContents& id,
                                                           int nranks, int rank,
                                                           std::shared_ptr<TraceSink> trace,
                                                           const Config* baseConfig) {
  log::ScopedRank scopedRank(rank);
  std::shared_ptr<Communicator> comm(new Communicator());
  if (baseConfig != nullptr) {
    comm->config_ = *baseConfig;
  } else {
    CC_ASSIGN_OR_RETURN(comm->config_, Config::fromEnvironment());
  }
  comm->rank_ = rank;
  comm->nranks_ = nranks;
  comm->lane_ = gNextLane.fetch_add(1);
  comm->recorder_ =
      std::make_unique<FlightRecorder>(static_cast<size_t>(comm->config_.flightRecorderEntries));
  comm->trace_ = trace ? std::move(trace) : TraceSink::open(comm->config_.tracePath, rank);

  // The region after the doorbell page: a page of flags and the staging buffers of the
  // direct collectives (collectives/direct.cc), every page written at creation
  // (CC_DIRECT_BYTES of resident memory a rank; doorbell.h says why) unless
  // CC_SHM_PREFAULT=0.
  CC_ASSIGN_OR_RETURN(
      transport::shm::Doorbell doorbell,
      transport::shm::Doorbell::create(kDirectControlBytes + comm->config_.directBytes,
                                       comm->config_.shmPrefault));
  comm->doorbell_ = std::make_unique<transport::shm::Doorbell>(std::move(doorbell));
  comm->epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  if (!comm->epoll_.valid()) return systemError("epoll_create1", errno);
  comm->abortEvent_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!comm->abortEvent_.valid()) return systemError("eventfd", errno);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = comm->abortEvent_.get();
  if (epoll_ctl(comm->epoll_.get(), EPOLL_CTL_ADD, comm->abortEvent_.get(), &event) != 0) {
    return systemError("epoll_ctl", errno);
  }

  // Listeners for the peers that will connect to us: TCP on the chosen interface (the
  // root's family when it is loopback-only), and an abstract Unix socket for shm.
  const Config& config = comm->config_;
  SocketAddress tcpAddress;
  if (id.rootAddress.isLoopback() && config.socketIfname.empty()) {
    tcpAddress = id.rootAddress;
    tcpAddress.setPort(0);
  } else {
    CC_ASSIGN_OR_RETURN(tcpAddress,
                        chooseInterfaceAddress(config.socketIfname, config.socketFamily));
  }
  CC_ASSIGN_OR_RETURN(FileDescriptor tcpListener, listenTcp(tcpAddress));
  std::string unixName = "cc-" + randomHex(12);
  CC_ASSIGN_OR_RETURN(FileDescriptor unixListener, listenUnix(unixName));

  wire::PeerInfo self;
  self.rank = rank;
  self.pid = static_cast<uint32_t>(getpid());
  self.hostHash = bootstrap::hostHash();
  self.hostName = bootstrap::hostName();
  self.tcpAddress = tcpAddress;
  self.unixName = unixName;
  int64_t startNs = nowNanos();
  CC_ASSIGN_OR_RETURN(std::vector<wire::PeerInfo> peers,
                      bootstrap::exchangePeerInfo(id, nranks, self, config));
  int ranksHere = 0;
  for (const wire::PeerInfo& peer : peers) {
    comm->hosts_.push_back(peer.hostHash);
    comm->pids_.push_back(static_cast<pid_t>(peer.pid));
    ranksHere += peer.hostHash == self.hostHash;
  }
  noteRanksOnHost(ranksHere);
  int64_t bootstrapNs = nowNanos();
  CC_TRY(comm->connectPeers(peers, id.secret, std::move(tcpListener), std::move(unixListener)));
  comm->collectSharedRegions();
  int64_t connectedNs = nowNanos();
  CC_TRY(comm->gatherTopology().withContext("gathering the job's topology"));
  comm->algorithmOverride_ = comm->config_.algorithm;
  comm->chunkBytesOverride_ = comm->config_.chunkBytes;
  log::info(
      "communicator of {} ranks ready: bootstrap {:.1f} ms, connections {:.1f} ms, topology {:.1f} "
      "ms",
      nranks, static_cast<double>(bootstrapNs - startNs) / 1e6,
      static_cast<double>(connectedNs - bootstrapNs) / 1e6,
      static_cast<double>(nowNanos() - connectedNs) / 1e6);
  return comm;
}

Communicator::~Communicator() {
  // After an abort or a failure, ucx endpoints are torn down rather than flushed.
  if (ucx_ && (aborted() || broken_.load())) ucx_->setForceClose();
}

void Communicator::abort() {
  aborted_.store(true);
  transport::shm::ringAlways(doorbell_->word());
  uint64_t one = 1;
  ssize_t ignored = ::write(abortEvent_.get(), &one, sizeof(one));
  (void)ignored;
}

void Communicator::markBroken(const Status& status) {
  std::lock_guard lock(errorMutex_);
  if (brokenReason_.isOk()) brokenReason_ = status;
  broken_.store(true, std::memory_order_release);
  if (asyncError_.load() == ccSuccess) asyncError_.store(status.code());
}

Status Communicator::brokenStatusSlow() const {
  std::lock_guard lock(errorMutex_);
  return Status(brokenReason_.code(),
                "communicator is unusable after an earlier failure: " + brokenReason_.message());
}

void Communicator::setAsyncError(ccResult_t code) {
  ccResult_t expected = ccSuccess;
  asyncError_.compare_exchange_strong(expected, code);
}

void Communicator::pushRange(std::string name) {
  std::lock_guard lock(rangeMutex_);
  openRanges_.emplace_back(std::move(name), nowNanos());
}

bool Communicator::popRange() {
  std::lock_guard lock(rangeMutex_);
  if (openRanges_.empty()) return false;
  if (trace_) trace_->recordRange(openRanges_.back().first, openRanges_.back().second, nowNanos());
  openRanges_.pop_back();
  return true;
}

void Communicator::setLastError(const std::string& message) {
  std::lock_guard lock(errorMutex_);
  lastError_ = message;
}

std::string Communicator::lastError() const {
  std::lock_guard lock(errorMutex_);
  return lastError_;
}

}  // namespace cc::comm
