// The one way cc waits for its peers. The executor's point-to-point loop and the direct
// collectives' flags both wait through a Waiter, so there is one policy:
//
//   spin     poll with one pause per look and a clock read every 32 looks, for
//            CC_SPIN_US after the last progress. A rank does not give its core away
//            while it spins: sched_yield hands the core to whatever else is runnable
//            there for the rest of that task's slice (milliseconds when a compute thread
//            or another process is busy on it), which is where tail latency under load
//            came from. Only when the ranks on this host outnumber its CPUs does the
//            spin yield between looks (after the first 2 us), because then the peer it
//            waits for may be queued on this very core (CC_SPIN_YIELD overrides).
//            The spin lasts 20 us by default, 1 ms when it yields: a yielding spin
//            costs the ranks sharing the core little, and at np=8 on 2 vCPUs the
//            longer spin beat going to sleep after 20 us (docs/PERFORMANCE.md,
//            "Waiting, load and oversubscription").
//   sleep    then sleep on this rank's doorbell (shm; a peer's ring wakes it) or on
//            epoll (tcp), in slices of at most 10 ms (500 us when one wait spans
//            several communicators or transports, with no single thing to sleep on).
//   check    every 5 ms of waiting, ask the transports whether the peers still live;
//            give up when nothing moved for CC_TIMEOUT_MS since the last progress.
//
// The caller owns the looking, the progress and the errors; the Waiter says what to
// do next after a look that found nothing new.
#pragma once

#include <cstdint>

#include "comm/communicator.h"

namespace cc::comm {

enum class WaitStep {
  kLookAgain,   // look again now (the spin already paused or yielded)
  kCheckPeers,  // ask whether the peers still live, then look again
  kSleep,       // sleep for at most sliceMicros(), unless a last look finds something
  kTimedOut,    // nothing moved for the configured timeout
};

class Waiter {
 public:
  static constexpr int64_t kSliceMicros = 10000;
  static constexpr int64_t kShortSliceMicros = 500;
  static constexpr int64_t kPeerCheckNanos = 5'000'000;
  static constexpr int64_t kPureSpinNanos = 2000;
  static constexpr int64_t kLooksPerClockRead = 32;
  // CC_SPIN_US's defaults: with cores to spare, and when ranks outnumber them (yielding).
  static constexpr int64_t kSpinMicros = 20;
  static constexpr int64_t kYieldingSpinMicros = 1000;

  // `several`: the wait spans several communicators or transports (short slices).
  explicit Waiter(const Communicator& comm, bool several = false);

  // Something moved: back to spinning, and the timeout counts from the next idle look.
  void progressed() { idleSinceNs_ = -1; }
  // The last look found nothing new.
  WaitStep idle();

  int64_t sliceMicros() const { return sliceMicros_; }
  // When this wait first found nothing to do (0 while it never has).
  int64_t waitingSinceNs() const { return waitingSinceNs_; }
  int64_t timeoutMs() const { return timeoutNs_ / 1'000'000; }

 private:
  int64_t timeoutNs_;
  int64_t spinNs_;
  int64_t sliceMicros_;
  bool yield_;
  int64_t idleSinceNs_ = -1;
  int64_t waitingSinceNs_ = 0;
  int64_t lastPeerCheckNs_ = 0;
  int64_t looks_ = 0;
};

// Sleeps on this rank's doorbell for at most `micros`, unless `lastLook()` finds
// something: it runs after the sleep is announced, so a peer that rings after it cannot
// be missed (the futex returns at once). Returns what lastLook returned.
template <typename LastLook>
bool sleepOnDoorbell(Communicator& comm, int64_t micros, LastLook&& lastLook) {
  transport::shm::DoorbellWord& bell = comm.doorbell();
  uint32_t observed = transport::shm::prepareToSleep(bell);
  if (lastLook()) {
    transport::shm::cancelSleep(bell);
    return true;
  }
  transport::shm::sleep(bell, observed, micros);
  return false;
}

// Whether spinning waits should yield the CPU between looks: CC_SPIN_YIELD when it is 0
// or 1; otherwise (auto) when the most ranks on this host any communicator of this
// process has seen exceed the CPUs this host lets the job use.
bool spinShouldYield(const Config& config);
// Called at communicator creation with the ranks it has on this host.
void noteRanksOnHost(int ranks);
// The CPUs of this host the job may use (its cgroup's, not this process's binding).
int usableCpus();

}  // namespace cc::comm
