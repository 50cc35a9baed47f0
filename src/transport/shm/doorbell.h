// A doorbell: one word in shared memory that peers bump when they have done something
// this rank may be waiting for (published data, freed a slot). A rank that ran out of
// spinning sleeps on it with a futex, so eight ranks on two cores do not starve each
// other, and a peer only pays for the wake-up syscall when someone is asleep.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/socket.h"
#include "core/status.h"

namespace cc::transport::shm {

struct alignas(64) DoorbellWord {
  std::atomic<uint32_t> sequence{0};
  alignas(64) std::atomic<uint32_t> sleepers{0};
};

// Peer side, after publishing something with a seq_cst store: wakes the owner if it is
// asleep or about to be. Costs one load when nobody sleeps (the common, spinning case).
// The rings' `published` and `tail` words are stored and loaded seq_cst for this
// handshake (no fences: ThreadSanitizer does not model them); on x86 a seq_cst load is a
// plain load and a seq_cst store one locked instruction.
void ring(DoorbellWord& bell);
// Wakes the owner whatever it is doing (abort).
void ringAlways(DoorbellWord& bell);

// Owner side, in three steps around one last look at the rings:
//   uint32_t observed = prepareToSleep(bell);
//   if (something moved) cancelSleep(bell); else sleep(bell, observed, timeout);
// A peer that publishes after prepareToSleep either is seen by that last look or
// changes the sequence, so the futex wait returns at once: no wake-up is lost.
uint32_t prepareToSleep(DoorbellWord& bell);
void cancelSleep(DoorbellWord& bell);
void sleep(DoorbellWord& bell, uint32_t observed, int64_t timeoutMicros);

// Touch every page of a fresh shared mapping once, at creation, not inside the first
// collectives. In the VMs cc runs on, MAP_POPULATE (and MADV_POPULATE_WRITE) map the pages
// but leave the first store to each page ~8 us of the hypervisor's work, and the first
// load through another process's mapping ~2.5 us (no fault is counted either way): 128 KiB
// first written into staging took ~350 us instead of ~10, which was the slow first rows
// of every sweep (until each staging slot had been used once).
// The owner, before any peer maps the memory (it writes the zero already there):
void writeEveryPage(std::byte* address, size_t bytes);
// A peer, after mapping it:
void readEveryPage(const std::byte* address, size_t bytes);

// A rank's shared memory, created from a memfd: the DoorbellWord in the first page, then
// `extraBytes` for whatever the layers above share through it (the direct collectives'
// flags and staging buffers). Peers get the descriptor at connection and map it all.
class Doorbell {
 public:
  static constexpr size_t kHeaderBytes = 4096;
  static constexpr size_t kMaxExtraBytes = size_t{1} << 32;

  // `prefault`: every page is written now (writeEveryPage); otherwise on first use.
  static Result<Doorbell> create(size_t extraBytes, bool prefault);
  // Maps a region (a peer's, or one just created). `populate` maps and reads every page
  // now (a peer's region, which the direct collectives read from the first call).
  static Result<Doorbell> attach(FileDescriptor fd, bool populate);
  Doorbell(Doorbell&& other) noexcept;
  Doorbell& operator=(Doorbell&& other) noexcept;
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  DoorbellWord& word() { return *word_; }
  int fd() const { return fd_.get(); }
  std::byte* extra() const { return reinterpret_cast<std::byte*>(word_) + kHeaderBytes; }
  size_t extraBytes() const { return mappedBytes_ - kHeaderBytes; }

 private:
  Doorbell() = default;
  FileDescriptor fd_;
  DoorbellWord* word_ = nullptr;
  size_t mappedBytes_ = 0;
};

}  // namespace cc::transport::shm
