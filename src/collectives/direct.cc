// Direct collectives for ranks that share a host: every rank maps every other rank's
// staging buffers (their shared regions, see Communicator::sharedRegion), so data is
// copied into shared memory once and read straight from there by whoever needs it,
// instead of hopping through point-to-point rings.
//
// Work proceeds in rounds, numbered alike on every rank (Communicator::directRound).
// Round k uses half k % 2 of each rank's staging, so a rank can fill one half while
// slower peers still read the other. Three flags per rank, each the last round it
// finished a phase, order everything:
//   ready     my staging holds my data for round k;
//   reduced   my share of the result for round k is in my staging;
//   released  I have finished reading everyone's staging for round k.
// A rank writes half h for round k only when every peer has released round k-2.
//
// All-reduce of a large block: each rank exports the slices the others reduce, reduces
// its own slice from its own input and the others' staging (in rank order, so every
// rank computes a slice the same way), publishes the result and copies everyone else's:
// per rank about 2 reads and 2 writes of the vector (docs/PERFORMANCE.md). Small blocks
// go one-shot: everyone exports everything and every rank reduces everything, one
// synchronisation instead of two.
//
// Waiting is comm::Waiter's (comm/wait.h: spin, then sleep on the rank's doorbell),
// and gives up on abort, on a peer that died (its shm socket hung up), on a peer that
// reported a failure through its flags (a mismatched call), or when no peer published
// anything for CC_TIMEOUT_MS.
#include "collectives/direct.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "comm/wait.h"
#include "core/copy.h"
#include "core/log.h"

namespace cc::collectives {
namespace {

enum Flag : size_t { kReady = 0, kReduced = 1, kReleased = 2, kFailed = 3 };

// The control page: one cache line per flag, then the call descriptors of the two
// halves (written before `ready`, read after it).
struct alignas(64) FlagLine {
  std::atomic<uint64_t> value;
};
struct alignas(64) CallLine {
  std::atomic<uint64_t> shape;  // kind | type << 8 | op << 16 | root << 24
  std::atomic<uint64_t> count;
  // The rank's registered send and receive buffers (comm/registry.h), which the peers
  // read in place; word 0: not shared, its data goes through staging.
  std::atomic<uint64_t> sendWord;
  std::atomic<uint64_t> sendOffset;
  std::atomic<uint64_t> recvWord;
  std::atomic<uint64_t> recvOffset;
  // The send buffer's address in the rank's own process, when the peers read it there
  // with process_vm_readv (CC_SHM_USE_CMA) instead of through staging; 0: they do not.
  std::atomic<uint64_t> sendAddress;
};
static_assert(sizeof(CallLine) == 64);
constexpr uint64_t kMaxSlots = 32;
// Small all-reduces travel inside one cache line with their round and call, so a
// reader misses once instead of three times (flag, call, data). Two lines, by round
// parity: a rank writes round k+1's line only after seeing every peer's round k, which
// each peer publishes after it finished reading round k-1, the line's last user.
constexpr size_t kInlineBytes = 40;
struct alignas(64) InlineLine {
  std::atomic<uint64_t> round;
  uint64_t shape;
  uint64_t count;
  std::byte data[kInlineBytes];
};
struct Control {
  FlagLine flags[4];
  CallLine calls[kMaxSlots];  // one per staging slot
  InlineLine inlines[2];
};
static_assert(sizeof(Control) <= comm::kDirectControlBytes);

uint64_t shapeOf(const CollectiveArgs& args) {
  return static_cast<uint64_t>(args.kind) | static_cast<uint64_t>(args.type) << 8 |
         static_cast<uint64_t>(args.op) << 16 |
         static_cast<uint64_t>(static_cast<uint32_t>(args.root)) << 24;
}

std::string describeCall(uint64_t shape, uint64_t count) {
  auto kind = static_cast<CollectiveKind>(shape & 0xff);
  auto type = static_cast<ccDataType_t>((shape >> 8) & 0xff);
  auto op = static_cast<ccRedOp_t>((shape >> 16) & 0xff);
  auto root = static_cast<int>(shape >> 24);
  std::string text =
      fmt::format("{}(count {}, {}", collectiveName(kind), count, dataTypeName(type));
  if (kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduce ||
      kind == CollectiveKind::kReduceScatter) {
    text += fmt::format(", {}", redOpName(op));
  }
  if (kind == CollectiveKind::kBroadcast || kind == CollectiveKind::kReduce)
    text += fmt::format(", root {}", root);
  return text + ")";
}

class Direct {
 public:
  // The staging is cut into slots of about `wantedSlotBytes` (the tuner's chunk), at
  // least two and at most kMaxSlots of them: round k uses slot k % slots, so a rank can
  // run up to `slots` rounds ahead of its slowest reader.
  Direct(const Context& ctx, size_t wantedSlotBytes)
      : ctx_(ctx), comm_(ctx.comm()), n_(ctx.size()), me_(ctx.rank()) {
    size_t staging = directStagingHalfBytes(comm_) * 2;
    slotBytes_ = std::clamp<size_t>((wantedSlotBytes + 63) / 64 * 64, 64 * static_cast<size_t>(n_),
                                    staging / 2);
    slots_ = std::min<uint64_t>(kMaxSlots, staging / slotBytes_);
  }
  ~Direct() { comm_.countTraffic(sent_, received_); }
  Direct(const Direct&) = delete;
  Direct& operator=(const Direct&) = delete;

  // Traffic (ccCommGetTraffic), counted where data crosses between ranks: `received`
  // bytes this rank read from peers' staging, `sent` bytes of its staging that peers
  // read (known from the algorithm, so no shared counters on the hot path).
  void tally(size_t sent, size_t received) {
    sent_ += sent;
    received_ += received;
  }

  // Bytes of one staging slot.
  size_t slotBytes() const { return slotBytes_; }

  // Lets the peers read this rank's send and/or receive buffer in place, each where it
  // is registered with the communicator, instead of through staging. Every round's call
  // line carries the answer, and the call ends with finishShared(), so the user gets the
  // buffers back only when no peer reads them any more.
  //
  // `byAddress`: a send buffer that is not registered is read by the peers where it lies,
  // in this process, with process_vm_readv (one copy instead of two through staging), when
  // CC_SHM_USE_CMA allows it (1: from the threshold; auto: when the call chose it). Only for
  // collectives that copy what they read (broadcast, all-gather, all-to-all, through readInput): a
  // reduction needs a pointer it can load.
  void share(bool send, bool recv, bool byAddress = false) {
    const CollectiveArgs& args = ctx_.args();
    if (send) mySend_ = comm_.registrations().find(args.send, sendBytes());
    if (recv) myRecv_ = comm_.registrations().find(args.recv, recvBytes());
    if (send && byAddress && !mySend_.registered() && readableByAddress()) {
      myAddress_ = reinterpret_cast<uint64_t>(args.send);
    }
  }
  bool sendShared() const { return mySend_.registered() || myAddress_ != 0; }
  bool recvShared() const { return myRecv_.registered(); }
  // Where to read `peer`'s input (or output) for `round`: `sharedAt` bytes into its
  // registered buffer when it shares one, else `stagedAt` bytes into its staging. Known
  // once checkCall() accepted the peer's call in this call's first round.
  // (Not for a peer that shares by address: that pointer is in its process; readInput.)
  const std::byte* peerInput(int peer, uint64_t round, size_t sharedAt, size_t stagedAt) const {
    const std::byte* shared = shared_ ? peers()[static_cast<size_t>(peer)].send : nullptr;
    return shared != nullptr ? shared + sharedAt : staging(peer, round) + stagedAt;
  }
  // Copies `bytes` of `peer`'s input for `round` to `destination`: from its staging, its
  // registered buffer, or its own process (process_vm_readv) when it shares by address.
  Status readInput(int peer, uint64_t round, void* destination, size_t sharedAt, size_t stagedAt,
                   size_t bytes) {
    const PeerBuffers* buffers = shared_ ? &peers()[static_cast<size_t>(peer)] : nullptr;
    if (buffers == nullptr || !buffers->sendByAddress) {
      copyBytes(destination, peerInput(peer, round, sharedAt, stagedAt), bytes);
      return Status::ok();
    }
    Status status = comm_.channel(peer)->readByAddress(
        destination, reinterpret_cast<uint64_t>(buffers->send) + sharedAt, bytes);
    // A peer that failed (a timeout, an abort, a mismatch) says so before its call returns,
    // and with it the buffer just read: the user may have reused it meanwhile.
    if (status.isOk() && control(peer).flags[kFailed].value.load(std::memory_order_seq_cst) != 0) {
      status =
          remoteError(fmt::format("rank {} failed while its buffer was read (see its log)", peer));
    }
    if (!status.isOk()) {
      return fail(status.withContext(fmt::format("direct {}: reading rank {}'s buffer",
                                                 collectiveName(ctx_.args().kind), peer)));
    }
    comm_.bytesReadByAddress() += bytes;
    return Status::ok();
  }
  const std::byte* peerOutput(int peer, uint64_t round, size_t sharedAt, size_t stagedAt) const {
    const std::byte* shared = shared_ ? peers()[static_cast<size_t>(peer)].recv : nullptr;
    return shared != nullptr ? shared + sharedAt : staging(peer, round) + stagedAt;
  }
  // After the last round: when the peers read this rank's own buffers, wait until they
  // all released that round.
  Status finishShared(uint64_t lastRound) {
    if (!sendShared() && !myRecv_.registered()) return Status::ok();
    return waitFor(kReleased, lastRound);
  }

  // The slot layout changes with the chunk size: before rounds of a new layout reuse
  // memory, every earlier round must have been released everywhere.
  Status adoptLayout() {
    uint64_t& layout = comm_.directLayout();
    if (layout == slotBytes_) return Status::ok();
    if (comm_.directRound() > 0) CC_TRY(waitFor(kReleased, comm_.directRound()));
    layout = slotBytes_;
    return Status::ok();
  }

  // Round k may write its slot once every peer has released the round that used it last.
  Status beginRound(uint64_t round) {
    if (round > slots_) return waitFor(kReleased, round - slots_);
    return Status::ok();
  }

  Control& control(int rank) const { return *reinterpret_cast<Control*>(comm_.sharedRegion(rank)); }
  std::byte* staging(int rank, uint64_t round) const {
    return comm_.sharedRegion(rank) + comm::kDirectControlBytes + (round % slots_) * slotBytes_;
  }

  uint64_t nextRound() { return ++comm_.directRound(); }

  void publish(Flag flag, uint64_t round) {
    control(me_).flags[flag].value.store(round, std::memory_order_seq_cst);
    ringPeers();
  }
  // Two flags at once, with one ring: `first` is stored before `second`.
  void publish(Flag first, Flag second, uint64_t round) {
    control(me_).flags[first].value.store(round, std::memory_order_seq_cst);
    publish(second, round);
  }

  // Inline rounds: the call and up to kInlineBytes of data, then the round, in one line.
  Status publishInline(uint64_t round, const void* data, size_t bytes) {
    // The line was last used by round-2; unless this rank saw every peer start round-1
    // (after finishing round-2), wait until they say they are done with it.
    if (round > 2 && comm_.directSynced() + 1 < round) CC_TRY(waitFor(kReleased, round - 2));
    InlineLine& line = control(me_).inlines[round % 2];
    line.shape = shapeOf(ctx_.args());
    line.count = ctx_.args().count;
    std::memcpy(line.data, data, bytes);
    line.round.store(round, std::memory_order_seq_cst);
    ringPeers();
    return Status::ok();
  }
  const InlineLine& inlineOf(int rank, uint64_t round) const {
    return control(rank).inlines[round % 2];
  }

  Status checkInlineCall(int peer, uint64_t round) {
    const InlineLine& line = inlineOf(peer, round);
    if (line.shape == shapeOf(ctx_.args()) && line.count == ctx_.args().count) return Status::ok();
    return fail(invalidUsage(
        fmt::format("mismatched collectives: rank {} called {} while rank {} called {}", me_,
                    describeCall(shapeOf(ctx_.args()), ctx_.args().count), peer,
                    describeCall(line.shape, line.count))));
  }

  void describe(uint64_t round) {
    CallLine& line = control(me_).calls[round % slots_];
    line.shape.store(shapeOf(ctx_.args()), std::memory_order_relaxed);
    line.count.store(ctx_.args().count, std::memory_order_relaxed);
    line.sendWord.store(mySend_.word, std::memory_order_relaxed);
    line.sendOffset.store(mySend_.offset, std::memory_order_relaxed);
    line.recvWord.store(myRecv_.word, std::memory_order_relaxed);
    line.recvOffset.store(myRecv_.offset, std::memory_order_relaxed);
    line.sendAddress.store(myAddress_, std::memory_order_relaxed);
  }

  // This rank's data for `round` is in its staging (or shared): say so, with the call.
  void publishReady(uint64_t round) {
    describe(round);
    publish(kReady, round);
  }
  // publishReady, then wait until every other rank has said the same.
  Status exchangeReady(uint64_t round) {
    publishReady(round);
    return waitFor(kReady, round);
  }

  // Runs `read(p)` for every other rank p as soon as p has published `flag` for `round`
  // (for `ready`, after checking p's call), whichever comes first, instead of waiting for
  // the slowest rank before reading anyone. With more ranks than cores, the ranks that
  // have run can be read while the others wait for a core. Starts after this rank, so
  // that the ranks do not all read rank 0 first.
  template <typename Read>
  Status readEachWhen(Flag flag, uint64_t round, Read&& read) {
    auto words = flagWords(flag);
    thread_local std::vector<int> pending;
    pending.clear();
    for (int step = 1; step < n_; ++step) pending.push_back((me_ + step) % n_);
    while (!pending.empty()) {
      bool found = false;
      for (size_t i = 0; i < pending.size();) {
        const int p = pending[i];
        if (words(p).load(std::memory_order_seq_cst) < round) {
          ++i;
          continue;
        }
        if (flag == kReady) CC_TRY(checkCall(p, round));
        CC_TRY(read(p));
        pending[i] = pending.back();
        pending.pop_back();
        found = true;
      }
      if (!found) CC_TRY(waitForAnother(flag, round, static_cast<int>(pending.size())));
    }
    // Every peer has started the round (publishInline's shortcut, as after waitFor).
    if (flag == kReady) comm_.directSynced() = round;
    return Status::ok();
  }

  // After `ready` of round k from `peer`: did it make the same call?
  Status checkCall(int peer, uint64_t round) {
    CallLine& line = control(peer).calls[round % slots_];
    uint64_t shape = line.shape.load(std::memory_order_relaxed);
    uint64_t count = line.count.load(std::memory_order_relaxed);
    if (shape == shapeOf(ctx_.args()) && count == ctx_.args().count) {
      bool shares = line.sendWord.load(std::memory_order_relaxed) != 0 ||
                    line.recvWord.load(std::memory_order_relaxed) != 0 ||
                    line.sendAddress.load(std::memory_order_relaxed) != 0;
      if (!shares || (shared_ && peers()[static_cast<size_t>(peer)].resolved)) return Status::ok();
      return resolveShared(peer, line);
    }
    Status status = invalidUsage(fmt::format(
        "mismatched collectives: rank {} called {} while rank {} called {}", me_,
        describeCall(shapeOf(ctx_.args()), ctx_.args().count), peer, describeCall(shape, count)));
    return fail(status);
  }

  // Rank p's word of `flag`, for waitOn.
  auto flagWords(Flag flag) {
    return [this, flag](int p) -> std::atomic<uint64_t>& { return control(p).flags[flag].value; };
  }
  // Returns when `peer`'s (or, with -1, every other rank's) flag has reached `round`.
  Status waitFor(Flag flag, uint64_t round, int peer = -1) {
    CC_TRY(waitOn(flagWords(flag), round, peer, flagName(flag)));
    if (flag == kReady && peer < 0) comm_.directSynced() = round;
    return Status::ok();
  }
  // Returns when fewer than `missing` ranks lack `flag` for `round`: the caller saw that
  // many missing (counting now could miss one that arrived in between, and then wait for
  // one that never comes).
  Status waitForAnother(Flag flag, uint64_t round, int missing) {
    return waitOn(flagWords(flag), round, -1, flagName(flag), missing - 1);
  }
  // The same for the inline line of `round`.
  Status waitForInline(uint64_t round) {
    CC_TRY(waitOn([this, round](int p)
                      -> std::atomic<uint64_t>& { return control(p).inlines[round % 2].round; },
                  round, -1, "inline data"));
    comm_.directSynced() = round;
    return Status::ok();
  }

  // Returns when at most `enough` of the ranks waited for are still missing (0: all there).
  template <typename WordOf>
  Status waitOn(WordOf wordOf, uint64_t round, int peer, const char* what, int enough = 0) {
    int missing = missingPeers(wordOf, round, peer);
    if (missing <= enough) return Status::ok();
    comm::Waiter waiter(comm_);
    while (true) {
      if (comm_.aborted()) return fail(invalidUsage("communicator was aborted by ccCommAbort"));
      switch (waiter.idle()) {
        case comm::WaitStep::kLookAgain:
          break;
        case comm::WaitStep::kCheckPeers:
          CC_TRY(checkPeers(wordOf, round, peer));
          break;
        case comm::WaitStep::kTimedOut:
          return fail(timeoutError(
              fmt::format("nothing moved for {} ms (CC_TIMEOUT_MS) in direct {}: waiting for {} "
                          "to publish round {} ({})",
                          waiter.timeoutMs(), collectiveName(ctx_.args().kind),
                          laggards(wordOf, round, peer), round, what)));
        case comm::WaitStep::kSleep:
          comm::sleepOnDoorbell(comm_, waiter.sliceMicros(),
                                [&] { return missingPeers(wordOf, round, peer) < missing; });
          break;
      }
      int now = missingPeers(wordOf, round, peer);
      if (now <= enough) return Status::ok();
      if (now < missing) {
        // A peer arrived: that is progress, and the timeout starts again.
        missing = now;
        waiter.progressed();
      }
    }
  }

  void ringPeers() {
    for (int peer = 0; peer < n_; ++peer) {
      if (peer != me_) comm_.ring(peer);
    }
  }

  Status fail(Status status) {
    // Tell the peers, so that they stop waiting for this rank at once.
    control(me_).flags[kFailed].value.store(1, std::memory_order_seq_cst);
    for (int peer = 0; peer < n_; ++peer) {
      if (peer != me_) comm_.wake(peer);
    }
    if (!comm_.aborted()) comm_.markBroken(status);
    return status;
  }

 private:
  static const char* flagName(Flag flag) {
    switch (flag) {
      case kReady:
        return "ready";
      case kReduced:
        return "reduced";
      case kReleased:
        return "released";
      default:
        return "failed";
    }
  }

  // How many of the ranks waited for (`peer`, or every other rank) have not yet
  // published `round`.
  template <typename WordOf>
  int missingPeers(WordOf& wordOf, uint64_t round, int peer) const {
    if (peer >= 0) return wordOf(peer).load(std::memory_order_seq_cst) < round ? 1 : 0;
    int missing = 0;
    for (int p = 0; p < n_; ++p) {
      missing += p != me_ && wordOf(p).load(std::memory_order_seq_cst) < round;
    }
    return missing;
  }

  template <typename WordOf>
  std::string laggards(WordOf& wordOf, uint64_t round, int peer) const {
    std::string names;
    for (int p = 0; p < n_; ++p) {
      if (p == me_ || (peer >= 0 && p != peer)) continue;
      if (wordOf(p).load(std::memory_order_seq_cst) >= round) continue;
      names += (names.empty() ? "rank " : ", rank ") + std::to_string(p);
    }
    return names;
  }

  template <typename WordOf>
  Status checkPeers(WordOf& wordOf, uint64_t round, int peer) {
    for (int p = 0; p < n_; ++p) {
      if (p == me_ || (peer >= 0 && p != peer)) continue;
      if (control(p).flags[kFailed].value.load(std::memory_order_seq_cst) != 0) {
        return fail(remoteError(fmt::format("rank {} failed during direct {} (see its log)", p,
                                            collectiveName(ctx_.args().kind))));
      }
      if (wordOf(p).load(std::memory_order_seq_cst) >= round) continue;
      Status alive = comm_.channel(p)->checkPeer();
      if (!alive.isOk()) {
        return fail(alive.withContext(
            fmt::format("direct {}: rank {} is gone", collectiveName(ctx_.args().kind), p)));
      }
    }
    return Status::ok();
  }

  // Whether the peers may read this rank's send buffer by address: CC_SHM_USE_CMA is on,
  // each peer reads at least CC_SHM_CMA_THRESHOLD bytes of it (the crossover, as for
  // point-to-point messages), and every peer passed the connection-time probe (ptrace
  // scope and containers may refuse it; then staging, as without the option).
  bool readableByAddress() const {
    const Config& config = comm_.config();
    // CC_SHM_USE_CMA=1: from the threshold on; auto: when the call chose the single copy.
    const bool wanted = config.shmUseCma == 1
                            ? ctx_.bytes(ctx_.args().count) >= config.shmCmaThreshold
                            : config.shmUseCma < 0 && singleCopyChosen();
    if (!wanted) return false;
    for (int p = 0; p < n_; ++p) {
      if (p != me_ && !comm_.channel(p)->peerReadsByAddress()) return false;
    }
    return true;
  }

  // Bytes of this call's send and receive buffers (every rank's are the same size).
  size_t sendBytes() const {
    const CollectiveArgs& args = ctx_.args();
    bool perRank =
        args.kind == CollectiveKind::kReduceScatter || args.kind == CollectiveKind::kAllToAll;
    return ctx_.bytes(args.count) * (perRank ? static_cast<size_t>(n_) : 1);
  }
  size_t recvBytes() const {
    const CollectiveArgs& args = ctx_.args();
    bool perRank =
        args.kind == CollectiveKind::kAllGather || args.kind == CollectiveKind::kAllToAll;
    return ctx_.bytes(args.count) * (perRank ? static_cast<size_t>(n_) : 1);
  }

  // Maps the buffers `peer` shares in this call (its call line says where they lie).
  Status resolveShared(int peer, const CallLine& line) {
    const auto index = static_cast<size_t>(peer);
    if (!shared_) {
      // Only calls where some peer shares a buffer clear the table.
      peers().assign(static_cast<size_t>(n_), PeerBuffers{});
      shared_ = true;
    }
    PeerBuffers& buffers = peers()[index];
    comm::SharedRef send{line.sendWord.load(std::memory_order_relaxed),
                         line.sendOffset.load(std::memory_order_relaxed)};
    comm::SharedRef recv{line.recvWord.load(std::memory_order_relaxed),
                         line.recvOffset.load(std::memory_order_relaxed)};
    comm::PeerMappings& mappings = comm_.peerMappings();
    const uint64_t address = line.sendAddress.load(std::memory_order_relaxed);
    buffers.sendByAddress = address != 0;
    if (address != 0) buffers.send = reinterpret_cast<const std::byte*>(address);
    if (send.registered()) {
      Result<const std::byte*> mapped =
          mappings.resolve(peer, comm_.pidOf(peer), send, sendBytes());
      if (!mapped.isOk()) return fail(mapped.status());
      buffers.send = *mapped;
    }
    if (recv.registered()) {
      Result<const std::byte*> mapped =
          mappings.resolve(peer, comm_.pidOf(peer), recv, recvBytes());
      if (!mapped.isOk()) return fail(mapped.status());
      buffers.recv = *mapped;
    }
    buffers.resolved = true;
    return Status::ok();
  }

  const Context& ctx_;
  comm::Communicator& comm_;
  int n_;
  int me_;
  comm::SharedRef mySend_;
  comm::SharedRef myRecv_;
  uint64_t myAddress_ = 0;  // the send buffer, when the peers read it by address
  // The peers' shared buffers in this process: one table per thread, reused from call to
  // call (no allocation on the hot path), valid in this call once shared_ is set.
  struct PeerBuffers {
    const std::byte* send = nullptr;  // in the peer's process when sendByAddress
    const std::byte* recv = nullptr;
    bool sendByAddress = false;
    bool resolved = false;
  };
  static std::vector<PeerBuffers>& peers() {
    thread_local std::vector<PeerBuffers> table;
    return table;
  }
  bool shared_ = false;
  size_t slotBytes_ = 0;
  uint64_t slots_ = 2;
  uint64_t sent_ = 0;
  uint64_t received_ = 0;
};

// Source pointers for a reduction, one per rank, reused from call to call (no
// allocation on the hot path).
std::vector<const void*>& sourceList(int n) {
  thread_local std::vector<const void*> sources;
  sources.resize(static_cast<size_t>(n));
  return sources;
}

// A vector that fits a cache line: one round, one line per rank, nothing in staging.
Status allReduceInline(const Context& ctx, Direct& direct) {
  const int n = ctx.size();
  std::vector<const void*>& sources = sourceList(n);
  uint64_t round = direct.nextRound();
  CC_TRY(direct.publishInline(round, ctx.sendAt(0), ctx.bytes(ctx.args().count)));
  CC_TRY(direct.waitForInline(round));
  for (int p = 0; p < n; ++p) {
    if (p != ctx.rank()) CC_TRY(direct.checkInlineCall(p, round));
    sources[static_cast<size_t>(p)] = direct.inlineOf(p, round).data;
  }
  ctx.reduceMany(ctx.recvAt(0), sources.data(), n, ctx.args().count);
  direct.publish(kReleased, round);
  size_t others = ctx.bytes(ctx.args().count) * static_cast<size_t>(n - 1);
  direct.tally(others, others);
  return Status::ok();
}

Status allReduceOneShot(const Context& ctx, Direct& direct, size_t blockElements) {
  const CollectiveArgs& args = ctx.args();
  const int n = ctx.size();
  std::vector<const void*>& sources = sourceList(n);
  // A registered input is read in place, out of place only: in place, a rank's result
  // would overwrite the input its peers are still reading.
  direct.share(args.send != args.recv, false);
  uint64_t round = 0;
  for (size_t offset = 0; offset < args.count; offset += blockElements) {
    size_t length = std::min(blockElements, args.count - offset);
    round = direct.nextRound();
    CC_TRY(direct.beginRound(round));
    if (!direct.sendShared()) {
      copyBytes(direct.staging(ctx.rank(), round), ctx.sendAt(offset), ctx.bytes(length));
    }
    CC_TRY(direct.exchangeReady(round));
    for (int p = 0; p < n; ++p) {
      if (p == ctx.rank()) {
        sources[static_cast<size_t>(p)] = ctx.sendAt(offset);
        continue;
      }
      CC_TRY(direct.checkCall(p, round));
      sources[static_cast<size_t>(p)] = direct.peerInput(p, round, ctx.bytes(offset), 0);
    }
    ctx.reduceMany(ctx.recvAt(offset), sources.data(), n, length);
    direct.publish(kReleased, round);
    size_t others = ctx.bytes(length) * static_cast<size_t>(n - 1);
    direct.tally(others, others);
  }
  return direct.finishShared(round);
}

Status allReduceSliced(const Context& ctx, Direct& direct, size_t blockElements, bool toAllRanks) {
  const CollectiveArgs& args = ctx.args();
  const int n = ctx.size();
  const int me = ctx.rank();
  const bool isRoot = me == args.root;
  std::vector<const void*>& sources = sourceList(n);
  // Registered buffers are read in place: no export of the input, no copy of the result.
  // In place, only the result: sharing the input too (a rank's imports then land on the
  // lines its peers have just read as its input) ran below the staged call in 13 of 15
  // runs (np=2, 1-256 MiB, 0.35-1.27x); sharing only the result ran at 1.04-2.15x
  // (docs/PERFORMANCE.md, "Registered buffers").
  // A reduce's other ranks never write their buffer, so in place theirs is read in place
  // too.
  const bool inPlace = args.send == args.recv;
  direct.share(!inPlace || (!toAllRanks && !isRoot), toAllRanks);
  const bool sendShared = direct.sendShared();
  const bool recvShared = direct.recvShared();
  uint64_t round = 0;
  for (size_t offset = 0; offset < args.count; offset += blockElements) {
    size_t length = std::min(blockElements, args.count - offset);
    round = direct.nextRound();
    CC_TRY(direct.beginRound(round));
    std::byte* mine = direct.staging(me, round);
    // Export the slices the others reduce.
    for (int p = 0; p < n && !sendShared; ++p) {
      if (p == me) continue;
      size_t begin = partBegin(length, n, p);
      copyBytes(mine + ctx.bytes(begin), ctx.sendAt(offset + begin),
                ctx.bytes(partLength(length, n, p)));
    }
    CC_TRY(direct.exchangeReady(round));
    size_t myBegin = partBegin(length, n, me);
    size_t myLength = partLength(length, n, me);
    for (int p = 0; p < n; ++p) {
      if (p == me) {
        sources[static_cast<size_t>(p)] = ctx.sendAt(offset + myBegin);
        continue;
      }
      CC_TRY(direct.checkCall(p, round));
      sources[static_cast<size_t>(p)] =
          direct.peerInput(p, round, ctx.bytes(offset + myBegin), ctx.bytes(myBegin));
    }
    if (toAllRanks) {
      // Reduce into my output, then publish a copy for the others (unless they read it
      // from my registered output).
      ctx.reduceMany(ctx.recvAt(offset + myBegin), sources.data(), n, myLength);
      if (!recvShared) {
        copyBytes(mine + ctx.bytes(myBegin), ctx.recvAt(offset + myBegin), ctx.bytes(myLength));
      }
    } else if (isRoot) {
      // The root's own slice goes straight to its output: it is the one rank that also
      // copies everyone else's, so a round through its staging would cost it most.
      ctx.reduceMany(ctx.recvAt(offset + myBegin), sources.data(), n, myLength);
    } else {
      ctx.reduceMany(mine + ctx.bytes(myBegin), sources.data(), n, myLength);
    }
    // Each peer read the slice I exported for it; I read my slice from every peer.
    direct.tally(ctx.bytes(length - myLength), ctx.bytes(myLength) * static_cast<size_t>(n - 1));
    direct.publish(kReduced, round);
    if (toAllRanks || isRoot) {
      // Each peer's reduced slice as soon as it is there.
      CC_TRY(direct.readEachWhen(kReduced, round, [&](int p) {
        size_t begin = partBegin(length, n, p);
        copyBytes(ctx.recvAt(offset + begin),
                  direct.peerOutput(p, round, ctx.bytes(offset + begin), ctx.bytes(begin)),
                  ctx.bytes(partLength(length, n, p)));
        return Status::ok();
      }));
      direct.tally(0, ctx.bytes(length - myLength));
    }
    // My reduced slice is read by every peer (all-reduce) or by the root (reduce).
    if (toAllRanks) {
      direct.tally(ctx.bytes(myLength) * static_cast<size_t>(n - 1), 0);
    } else if (!isRoot) {
      direct.tally(ctx.bytes(myLength), 0);
    }
    direct.publish(kReleased, round);
  }
  return direct.finishShared(round);
}

// Small reduces: the others export their block and go on (they read nothing, so they
// release the round at once); the root alone waits for them and reduces it all: one
// synchronisation, and only the root waits.
Status reduceOneShot(const Context& ctx, Direct& direct, size_t blockElements) {
  const CollectiveArgs& args = ctx.args();
  const int n = ctx.size();
  const int me = ctx.rank();
  std::vector<const void*>& sources = sourceList(n);
  // A registered input is read by the root in place; the rank then returns when the
  // root has released the last round instead of at once.
  direct.share(me != args.root, false);
  const bool sendShared = direct.sendShared();
  uint64_t round = 0;
  for (size_t offset = 0; offset < args.count; offset += blockElements) {
    size_t length = std::min(blockElements, args.count - offset);
    round = direct.nextRound();
    CC_TRY(direct.beginRound(round));
    if (me != args.root) {
      if (!sendShared) {
        copyBytes(direct.staging(me, round), ctx.sendAt(offset), ctx.bytes(length));
      }
      direct.describe(round);
      // It reads nothing, so the round is released as it is published, with one ring.
      direct.publish(kReleased, kReady, round);
      direct.tally(ctx.bytes(length), 0);
      continue;
    }
    CC_TRY(direct.waitFor(kReady, round));
    for (int p = 0; p < n; ++p) {
      if (p == me) {
        sources[static_cast<size_t>(p)] = ctx.sendAt(offset);
        continue;
      }
      CC_TRY(direct.checkCall(p, round));
      sources[static_cast<size_t>(p)] = direct.peerInput(p, round, ctx.bytes(offset), 0);
    }
    ctx.reduceMany(ctx.recvAt(offset), sources.data(), n, length);
    direct.publish(kReleased, round);
    direct.tally(0, ctx.bytes(length) * static_cast<size_t>(n - 1));
  }
  return direct.finishShared(round);
}

}  // namespace

bool directAvailable(const comm::Communicator& comm) {
  return comm.size() > 1 && comm.sharedRegionBytes() >= comm::kDirectControlBytes + 2 * 4096;
}

size_t directStagingHalfBytes(const comm::Communicator& comm) {
  if (!directAvailable(comm)) return 0;
  return (comm.sharedRegionBytes() - comm::kDirectControlBytes) / 2 / 64 * 64;
}

Status directAllReduce(const Context& ctx, bool oneShot) {
  Direct direct(ctx, ctx.bytes(ctx.chunkElements()));
  CC_TRY(direct.adoptLayout());
  size_t blockElements = std::max<size_t>(1, direct.slotBytes() / ctx.elementSize());
  if (oneShot && ctx.bytes(ctx.args().count) <= kInlineBytes) return allReduceInline(ctx, direct);
  if (oneShot) return allReduceOneShot(ctx, direct, blockElements);
  return allReduceSliced(ctx, direct, blockElements, true);
}

Status directReduce(const Context& ctx, bool oneShot) {
  Direct direct(ctx, ctx.bytes(ctx.chunkElements()));
  CC_TRY(direct.adoptLayout());
  size_t blockElements = std::max<size_t>(1, direct.slotBytes() / ctx.elementSize());
  if (oneShot) return reduceOneShot(ctx, direct, blockElements);
  return allReduceSliced(ctx, direct, blockElements, false);
}

Status directBroadcast(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  Direct direct(ctx, ctx.bytes(ctx.chunkElements()));
  CC_TRY(direct.adoptLayout());
  const int root = args.root;
  const bool isRoot = ctx.rank() == root;
  size_t blockElements = std::max<size_t>(1, direct.slotBytes() / ctx.elementSize());
  // A registered root buffer is read in place, and so is any other with CC_SHM_USE_CMA.
  direct.share(isRoot, false, true);
  const bool sendShared = direct.sendShared();
  uint64_t round = 0;
  for (size_t offset = 0; offset < args.count; offset += blockElements) {
    size_t length = std::min(blockElements, args.count - offset);
    round = direct.nextRound();
    if (isRoot) {
      CC_TRY(direct.beginRound(round));
      if (!sendShared) {
        copyBytes(direct.staging(root, round), ctx.sendAt(offset), ctx.bytes(length));
      }
      direct.publishReady(round);
      // The root's own copy (out of place) while the peers read the block.
      ctx.copy(ctx.recvAt(offset), ctx.sendAt(offset), length);
      direct.tally(ctx.bytes(length) * static_cast<size_t>(ctx.size() - 1), 0);
    } else {
      CC_TRY(direct.waitFor(kReady, round, root));
      CC_TRY(direct.checkCall(root, round));
      CC_TRY(direct.readInput(root, round, ctx.recvAt(offset), ctx.bytes(offset), 0,
                              ctx.bytes(length)));
      direct.tally(0, ctx.bytes(length));
    }
    direct.publish(kReleased, round);
  }
  return direct.finishShared(round);
}

Status directAllGather(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  Direct direct(ctx, ctx.bytes(ctx.chunkElements()));
  CC_TRY(direct.adoptLayout());
  const int n = ctx.size();
  const int me = ctx.rank();
  size_t blockElements = std::max<size_t>(1, direct.slotBytes() / ctx.elementSize());
  direct.share(true, false, true);
  const bool sendShared = direct.sendShared();
  uint64_t round = 0;
  for (size_t offset = 0; offset < args.count; offset += blockElements) {
    size_t length = std::min(blockElements, args.count - offset);
    round = direct.nextRound();
    CC_TRY(direct.beginRound(round));
    if (!sendShared) copyBytes(direct.staging(me, round), ctx.sendAt(offset), ctx.bytes(length));
    direct.publishReady(round);
    // My own block, while the peers fill their staging. (In place it is already there;
    // the send buffer is read before, never after, this copy.)
    ctx.copy(ctx.recvAt(static_cast<size_t>(me) * args.count + offset), ctx.sendAt(offset), length);
    CC_TRY(direct.readEachWhen(kReady, round, [&](int p) {
      return direct.readInput(p, round, ctx.recvAt(static_cast<size_t>(p) * args.count + offset),
                              ctx.bytes(offset), 0, ctx.bytes(length));
    }));
    size_t others = ctx.bytes(length) * static_cast<size_t>(n - 1);
    direct.tally(others, others);
    direct.publish(kReleased, round);
  }
  return direct.finishShared(round);
}

namespace {

// Reduce-scatter and all-to-all: block p of the input (elements p * count + offset, for
// `length`) goes to slot position p of this rank's staging, for rank p to read.
void exportPeerBlocks(const Context& ctx, std::byte* staging, size_t offset, size_t length) {
  const int me = ctx.rank();
  for (int p = 0; p < ctx.size(); ++p) {
    if (p == me) continue;
    auto block = static_cast<size_t>(p);
    copyBytes(staging + ctx.bytes(block * length), ctx.sendAt(block * ctx.args().count + offset),
              ctx.bytes(length));
  }
}

}  // namespace

Status directReduceScatter(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  Direct direct(ctx, ctx.bytes(ctx.chunkElements()) * static_cast<size_t>(ctx.size()));
  CC_TRY(direct.adoptLayout());
  const int n = ctx.size();
  const int me = ctx.rank();
  size_t perRank = direct.slotBytes() / static_cast<size_t>(n);
  size_t blockElements = std::max<size_t>(1, perRank / ctx.elementSize());
  std::vector<const void*>& sources = sourceList(n);
  const size_t myBlock = static_cast<size_t>(me) * args.count;
  direct.share(true, false);
  const bool sendShared = direct.sendShared();
  uint64_t round = 0;
  for (size_t offset = 0; offset < args.count; offset += blockElements) {
    size_t length = std::min(blockElements, args.count - offset);
    round = direct.nextRound();
    CC_TRY(direct.beginRound(round));
    if (!sendShared) exportPeerBlocks(ctx, direct.staging(me, round), offset, length);
    CC_TRY(direct.exchangeReady(round));
    for (int p = 0; p < n; ++p) {
      if (p == me) {
        sources[static_cast<size_t>(p)] = ctx.sendAt(myBlock + offset);
        continue;
      }
      CC_TRY(direct.checkCall(p, round));
      sources[static_cast<size_t>(p)] = direct.peerInput(
          p, round, ctx.bytes(myBlock + offset), ctx.bytes(static_cast<size_t>(me) * length));
    }
    ctx.reduceMany(ctx.recvAt(offset), sources.data(), n, length);
    size_t others = ctx.bytes(length) * static_cast<size_t>(n - 1);
    direct.tally(others, others);
    direct.publish(kReleased, round);
  }
  return direct.finishShared(round);
}

Status directAllToAll(const Context& ctx) {
  const CollectiveArgs& args = ctx.args();
  Direct direct(ctx, ctx.bytes(ctx.chunkElements()) * static_cast<size_t>(ctx.size()));
  CC_TRY(direct.adoptLayout());
  const int n = ctx.size();
  const int me = ctx.rank();
  size_t perRank = direct.slotBytes() / static_cast<size_t>(n);
  size_t blockElements = std::max<size_t>(1, perRank / ctx.elementSize());
  const auto block = [&](int p) { return static_cast<size_t>(p) * args.count; };
  // (Never in place: the API refuses overlapping buffers, so a shared send buffer is
  // not overwritten by this rank's own receives.)
  direct.share(true, false, true);
  const bool sendShared = direct.sendShared();
  uint64_t round = 0;
  for (size_t offset = 0; offset < args.count; offset += blockElements) {
    size_t length = std::min(blockElements, args.count - offset);
    round = direct.nextRound();
    CC_TRY(direct.beginRound(round));
    if (!sendShared) exportPeerBlocks(ctx, direct.staging(me, round), offset, length);
    direct.publishReady(round);
    // The block I keep, while the peers fill their staging.
    ctx.copy(ctx.recvAt(block(me) + offset), ctx.sendAt(block(me) + offset), length);
    CC_TRY(direct.readEachWhen(kReady, round, [&](int p) {
      return direct.readInput(p, round, ctx.recvAt(block(p) + offset),
                              ctx.bytes(block(me) + offset),
                              ctx.bytes(static_cast<size_t>(me) * length), ctx.bytes(length));
    }));
    size_t others = ctx.bytes(length) * static_cast<size_t>(n - 1);
    direct.tally(others, others);
    direct.publish(kReleased, round);
  }
  return direct.finishShared(round);
}

}  // namespace cc::collectives
