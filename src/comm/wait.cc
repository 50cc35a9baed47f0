#include "comm/wait.h"

#include <immintrin.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>

#include "topology/discover.h"

namespace cc::comm {
namespace {

std::atomic<int> gMostRanksOnHost{1};

}  // namespace

// The discovered host lists the processing units left to this process's cgroup, not
// its binding, which launchers narrow to one core per rank even when every rank has its
// own.
int usableCpus() {
  static const int cpus = [] {
    int count = 0;
    if (Result<topology::Host> host = topology::discoverLocalHost(); host.isOk()) {
      count = host->cpuCount();
    }
    if (count <= 0) count = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
    return count > 0 ? count : 1;
  }();
  return cpus;
}

void noteRanksOnHost(int ranks) {
  (void)usableCpus();  // discovered now, not inside the first wait
  int seen = gMostRanksOnHost.load(std::memory_order_relaxed);
  while (ranks > seen && !gMostRanksOnHost.compare_exchange_weak(seen, ranks)) {
  }
}

bool spinShouldYield(const Config& config) {
  if (config.spinYield >= 0) return config.spinYield != 0;
  return gMostRanksOnHost.load(std::memory_order_relaxed) > usableCpus();
}

Waiter::Waiter(const Communicator& comm, bool several)
    : timeoutNs_(comm.config().timeoutMs * 1'000'000),
      sliceMicros_(several ? kShortSliceMicros : kSliceMicros),
      yield_(spinShouldYield(comm.config())) {
  int64_t spinMicros = comm.config().spinMicros;
  if (spinMicros < 0) spinMicros = yield_ ? kYieldingSpinMicros : kSpinMicros;
  spinNs_ = spinMicros * 1000;
}

WaitStep Waiter::idle() {
  // Between clock reads, one pause: a message is seen within tens of nanoseconds (a
  // pause costs up to ~65 cycles on Zen; a clock read under KVM more).
  if (idleSinceNs_ >= 0 && ++looks_ % kLooksPerClockRead != 0) {
    _mm_pause();
    return WaitStep::kLookAgain;
  }
  int64_t now = nowNanos();
  if (idleSinceNs_ < 0) {
    if (waitingSinceNs_ == 0) {
      waitingSinceNs_ = now;
      lastPeerCheckNs_ = now;
    }
    idleSinceNs_ = now;
    looks_ = 0;
  }
  if (now - idleSinceNs_ > timeoutNs_) return WaitStep::kTimedOut;
  if (now - lastPeerCheckNs_ > kPeerCheckNanos) {
    lastPeerCheckNs_ = now;
    return WaitStep::kCheckPeers;
  }
  if (now - idleSinceNs_ < spinNs_) {
    if (yield_ && now - idleSinceNs_ > kPureSpinNanos) sched_yield();
    return WaitStep::kLookAgain;
  }
  return WaitStep::kSleep;
}

}  // namespace cc::comm
