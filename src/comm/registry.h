// Registered buffers: memory the ranks on one host read from each other directly, with
// no copy through staging (ccMemAlloc, ccCommRegister; issue #17).
//
// ccMemAlloc backs each allocation with its own memfd: a header page (a magic word, the
// allocation's serial number and size), then the user's bytes. Nothing is named in the
// file system, so a killed process leaves nothing behind. A peer on the same host maps
// the allocation by opening /proc/<pid>/fd/<fd> of the owner, which the kernel allows
// to a process of the same user (a PTRACE_MODE_READ check, which Yama's ptrace scopes
// do not restrict, unlike process_vm_readv's attach check). It then checks the header's
// serial against the one it was told, so a file descriptor number reused after
// ccMemFree is noticed and never read as the old buffer.
//
// ccCommRegister makes a range of such memory known to one communicator; the direct
// collectives then publish where a registered send or receive buffer lies (SharedRef)
// instead of copying it into their staging, and the peers read it in place. Each rank
// decides for its own buffers, so a job where only some ranks register still works.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.h"

namespace cc::comm {

// Where a registered buffer lies, as a peer on the host can find it: the memfd's number
// in the owner's process and the allocation's serial (fd | serial << 32), and the
// buffer's byte offset in the file. word == 0: not registered.
struct SharedRef {
  uint64_t word = 0;
  uint64_t offset = 0;
  bool registered() const { return word != 0; }
};

// ccMemAlloc and ccMemFree. Freeing memory that a communicator still has registered is
// refused (ccCommDeregister it first, or destroy the communicator).
Result<void*> allocateShared(size_t bytes);
Status freeShared(void* pointer);
// Bytes of the header page in front of every allocation.
inline constexpr size_t kSharedHeaderBytes = 4096;

// The buffers registered with one communicator. Thread-safe: the user's thread registers
// while a stream's worker runs collectives that look buffers up.
class Registrations {
 public:
  Registrations() = default;
  ~Registrations();
  Registrations(const Registrations&) = delete;
  Registrations& operator=(const Registrations&) = delete;

  // Registers [buffer, buffer + bytes), which must lie inside one ccMemAlloc allocation;
  // returns the handle for remove().
  Result<void*> add(void* buffer, size_t bytes);
  Status remove(void* handle);
  // Where [buffer, buffer + bytes) lies, when one registration holds all of it.
  SharedRef find(const void* buffer, size_t bytes) const;

 private:
  struct Entry {
    const std::byte* begin;
    size_t bytes;
    uint64_t word;
    uint64_t fileOffset;  // of `begin`
  };
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Entry>> entries_;
  std::atomic<size_t> count_{0};  // lets find() skip the lock when nothing is registered
};

// The peers' allocations this rank has mapped, for one communicator: mapped on first
// use and kept (at most kMaxMappings, least recently used dropped first), since a
// training loop registers its buffers once and uses them every step.
class PeerMappings {
 public:
  static constexpr size_t kMaxMappings = 64;
  PeerMappings() = default;
  ~PeerMappings();
  PeerMappings(const PeerMappings&) = delete;
  PeerMappings& operator=(const PeerMappings&) = delete;

  // The address of `ref`'s buffer (which holds at least `bytes`) in this process.
  Result<const std::byte*> resolve(int rank, pid_t pid, SharedRef ref, size_t bytes);
  // Allocations mapped now.
  size_t count() const { return mappings_.size(); }

 private:
  struct Mapping {
    int rank;
    uint64_t word;
    std::byte* base;
    size_t bytes;
    uint64_t lastUse;
  };
  void unmap(size_t index);
  std::vector<Mapping> mappings_;
  uint64_t uses_ = 0;
};

}  // namespace cc::comm
