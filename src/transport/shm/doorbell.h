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

// A rank's shared memory, created from a memfd: the DoorbellWord in the first page, then
// `extraBytes` for whatever the layers above share through it (the direct collectives'
// flags and staging buffers). Peers get the descriptor at connection and map it all.
class Doorbell {
 public:
  static constexpr size_t kHeaderBytes = 4096;
  static constexpr size_t kMaxExtraBytes = size_t{1} << 32;

  static Result<Doorbell> create(size_t extraBytes = 0);
  // Maps a region (a peer's, or one just created). `populate` faults every page in now.
  static Result<Doorbell> attach(FileDescriptor fd, bool populate = false);
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
