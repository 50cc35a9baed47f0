// A communicator: this rank's place in a group of ranks, the channel to every peer,
// and the state that keeps operations ordered, bounded in time and abortable.
//
// Layering: src/comm sits above src/transport and src/core (DESIGN.md lists the
// communicator under core, but it owns transports, so it cannot live below them).
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/registry.h"
#include "core/config.h"
#include "core/copy.h"
#include "core/socket.h"
#include "core/trace.h"
#include "core/wire.h"
#include "topology/planner.h"
#include "transport/shm/doorbell.h"
#include "transport/transport.h"

namespace cc::transport::ucx {
class UcxWorker;
}

namespace cc::comm {

// The first page of a rank's shared region holds the direct collectives' flags.
inline constexpr size_t kDirectControlBytes = 4096;

class Communicator {
 public:
  // Joins the communicator behind `id` (collective over all `nranks` ranks).
  // `trace` is the parent's trace sink for a split, null otherwise. `config` replaces the
  // environment's settings when given (a split's parent's, or ccCommInitRankConfig's).
  static Result<std::shared_ptr<Communicator>> create(const wire::UniqueIdContents& id, int nranks,
                                                      int rank, std::shared_ptr<TraceSink> trace,
                                                      const Config* config = nullptr);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return nranks_; }
  const Config& config() const { return config_; }
  transport::Channel* channel(int peer) const { return channels_[static_cast<size_t>(peer)].get(); }

  // Held for the whole of each operation: operations on a communicator are ordered.
  std::mutex& operationMutex() { return operationMutex_; }
  uint64_t nextSequence() { return nextSequence_++; }

  // Abort: every wait inside cc on this communicator returns within a few milliseconds.
  void abort();
  bool aborted() const { return aborted_.load(std::memory_order_relaxed); }

  // After a transport failure the channels are in an unknown state: the communicator
  // refuses further operations with the original error.
  void markBroken(const Status& status);
  Status brokenStatus() const {
    if (!broken_.load(std::memory_order_acquire)) return Status::ok();
    return brokenStatusSlow();
  }
  ccResult_t asyncError() const { return asyncError_.load(); }
  void setAsyncError(ccResult_t code);

  void setLastError(const std::string& message);
  std::string lastError() const;

  transport::shm::DoorbellWord& doorbell() { return doorbell_->word(); }
  int epollFd() const { return epoll_.get(); }
  FlightRecorder& recorder() { return *recorder_; }
  TraceSink* trace() const { return trace_.get(); }
  const std::shared_ptr<TraceSink>& traceShared() const { return trace_; }
  int lane() const { return lane_; }
  // ccTraceRangePush/Pop: the ranges open on this communicator; pop records the latest in
  // the trace (when there is one) and returns false when none is open.
  void pushRange(std::string name);
  bool popRange();

  // Memory shared with the ranks on this host (collectives/direct.cc decides what goes
  // in it): a rank's region after its doorbell page, null for ranks reached over the
  // network.
  std::byte* sharedRegion(int rank) const { return regions_[static_cast<size_t>(rank)]; }
  // After writing to shared memory with a seq_cst store: wakes `rank` if it sleeps
  // waiting (one load when it does not). wake() wakes it whatever it is doing (failure).
  void ring(int rank) const { transport::shm::ring(*bells_[static_cast<size_t>(rank)]); }
  void wake(int rank) const { transport::shm::ringAlways(*bells_[static_cast<size_t>(rank)]); }
  // Which ranks share a host: equal values, equal host (hostname + boot id + network
  // namespace, or CC_HOSTNAME).
  uint64_t hostOf(int rank) const { return hosts_[static_cast<size_t>(rank)]; }
  // The smallest region among the ranks; 0 unless every rank shares this host.
  size_t sharedRegionBytes() const { return sharedRegionBytes_; }
  // The collectives' overrides: CC_ALGO (an index into kAlgorithmNames) and
  // CC_CHUNK_BYTES at creation; tests set them per call.
  int& algorithmOverride() { return algorithmOverride_; }
  size_t& chunkBytesOverride() { return chunkBytesOverride_; }
  // Traffic counters (ccCommGetTraffic), indexed by ccTrafficKind_t. The running
  // operation's kind decides where the executor's channel bytes go; it changes only
  // under operationMutex, but the executor thread reads it, hence the atomics.
  struct TrafficCounter {
    std::atomic<uint64_t> calls{0};
    std::atomic<uint64_t> bytesSent{0};
    std::atomic<uint64_t> bytesReceived{0};
  };
  TrafficCounter& traffic(int kind) { return traffic_[static_cast<size_t>(kind)]; }
  int trafficKind() const { return trafficKind_.load(std::memory_order_relaxed); }
  // Returns the previous kind, for the caller to restore.
  int setTrafficKind(int kind) { return trafficKind_.exchange(kind, std::memory_order_relaxed); }
  void countTraffic(uint64_t sent, uint64_t received) {
    TrafficCounter& counter = traffic_[static_cast<size_t>(trafficKind())];
    if (sent != 0) counter.bytesSent.fetch_add(sent, std::memory_order_relaxed);
    if (received != 0) counter.bytesReceived.fetch_add(received, std::memory_order_relaxed);
  }
  // The topology plan (topology/planner.h), made at creation from the job's topology:
  // the rings and trees the collectives follow. ringPosition() is this rank's place in
  // the first ring; ringMembers() is null when that ring is plain rank order.
  const topology::Plan& plan() const { return *plan_; }
  int ringPosition() const { return ringIsIdentity_ ? rank_ : ringPosition_; }
  const int* ringMembers() const {
    return ringIsIdentity_ ? nullptr : plan_->rings.front().ranks.data();
  }
  // Registered buffers (ccCommRegister) and the peers' registered allocations this rank
  // mapped (comm/registry.h); the pid of every rank, for finding the peers' memory.
  Registrations& registrations() { return registrations_; }
  PeerMappings& peerMappings() { return peerMappings_; }
  pid_t pidOf(int rank) const { return pids_[static_cast<size_t>(rank)]; }
  // Bytes this rank read from peers' own buffers by address (the direct collectives'
  // single copy, CC_SHM_USE_CMA): how a test or a log tells that path was taken.
  uint64_t& bytesReadByAddress() { return bytesReadByAddress_; }
  // Bytes the ring and chain reductions reduced as they arrived, from a channel's slot or
  // a piece read by address (collectives/context.h, ReduceOnArrival).
  uint64_t& bytesReducedOnArrival() { return bytesReducedOnArrival_; }
  // The last collective decision (collectives/collectives.cc): a call with the same
  // shape, count and overrides skips the cost model.
  struct DecisionCache {
    uint64_t shape = ~uint64_t{0};
    uint64_t count = 0;
    int forcedAlgorithm = 0;
    size_t forcedChunkBytes = 0;
    int algorithm = 0;
    size_t chunkBytes = 0;
    bool oneShot = false;
  };
  DecisionCache& decisionCache() { return decisionCache_; }
  // The copy kernel's choice (core/copy.h) for collectives of one kind, by CollectiveKind,
  // and for blocking sends and receives (kSendCopies, kReceiveCopies) and groups or
  // stream-ordered batches of point-to-point calls on this communicator alone (kGroupCopies).
  static constexpr int kSendCopies = 7, kReceiveCopies = 8, kGroupCopies = 9;
  CopyChooser& copyChooser(int kind) { return copyChoosers_.at(static_cast<size_t>(kind)); }
  // Rounds of the direct collectives so far (the same on every rank).
  uint64_t& directRound() { return directRound_; }
  // The last direct round this rank saw every peer start (so every peer had finished
  // the round before it).
  uint64_t& directSynced() { return directSynced_; }
  // The slot size the direct rounds last used (0: none yet).
  uint64_t& directLayout() { return directLayout_; }

 private:
  Communicator() = default;
  Status brokenStatusSlow() const;
  void collectSharedRegions();
  Status gatherTopology();
  Status checkSamePlan(const topology::Plan& plan);
  Status connectPeers(const std::vector<wire::PeerInfo>& peers, const wire::Secret& secret,
                      FileDescriptor tcpListener, FileDescriptor unixListener);

  Config config_;
  int rank_ = -1;
  int nranks_ = 0;
  int lane_ = 0;  // trace lane: distinguishes communicators within one rank's file
  // The UCP worker of this communicator's ucx channels (null without any); declared
  // before channels_ so that it outlives them.
  std::shared_ptr<transport::ucx::UcxWorker> ucx_;
  std::vector<std::unique_ptr<transport::Channel>> channels_;
  std::unique_ptr<transport::shm::Doorbell> doorbell_;
  std::vector<std::byte*> regions_;
  std::vector<uint64_t> hosts_;
  std::vector<pid_t> pids_;
  Registrations registrations_;
  PeerMappings peerMappings_;
  std::vector<transport::shm::DoorbellWord*> bells_;
  size_t sharedRegionBytes_ = 0;
  uint64_t directRound_ = 0;
  uint64_t directLayout_ = 0;
  uint64_t directSynced_ = 0;
  int algorithmOverride_ = 0;
  DecisionCache decisionCache_;
  std::array<CopyChooser, 10> copyChoosers_{};
  std::shared_ptr<const topology::Plan> plan_;
  int ringPosition_ = 0;
  bool ringIsIdentity_ = true;
  std::array<TrafficCounter, ccNumTrafficKinds> traffic_;
  uint64_t bytesReadByAddress_ = 0;
  uint64_t bytesReducedOnArrival_ = 0;
  std::atomic<int> trafficKind_{ccTrafficSendRecv};
  size_t chunkBytesOverride_ = 0;
  FileDescriptor epoll_;
  FileDescriptor abortEvent_;  // in the epoll set, so an abort wakes a TCP wait
  std::mutex operationMutex_;
  uint64_t nextSequence_ = 0;
  std::atomic<bool> aborted_{false};
  std::atomic<ccResult_t> asyncError_{ccSuccess};
  mutable std::mutex errorMutex_;
  Status brokenReason_;
  std::atomic<bool> broken_{false};
  std::string lastError_;
  std::unique_ptr<FlightRecorder> recorder_;
  std::shared_ptr<TraceSink> trace_;
  std::mutex rangeMutex_;
  std::vector<std::pair<std::string, int64_t>> openRanges_;  // name, start
};

// While it lives, the bytes `comm` moves count as `kind` (a ccTrafficKind_t).
class TrafficScope {
 public:
  TrafficScope(Communicator& comm, int kind) : comm_(comm), previous_(comm.setTrafficKind(kind)) {}
  ~TrafficScope() { comm_.setTrafficKind(previous_); }
  TrafficScope(const TrafficScope&) = delete;
  TrafficScope& operator=(const TrafficScope&) = delete;

 private:
  Communicator& comm_;
  int previous_;
};

}  // namespace cc::comm
