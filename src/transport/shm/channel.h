// The shared-memory channel between two ranks on one host.
//
// The pair shares one memfd mapping holding two rings, one per direction. A ring is a
// circular array of cache-line-aligned slots; the sender copies a chunk into the next
// free slot and publishes it, the receiver copies it out and advances `tail`, so the two
// copies of a large message overlap. Payloads of up to 24 bytes ride in the slot
// header's own cache line. From CC_SHM_CMA_THRESHOLD on, the sender posts
// only its buffer's address and the receiver reads it straight from the sender's memory
// with process_vm_readv (one copy), when the connection-time probe showed the kernel
// allows it. The Unix socket the pair met on stays open: its hang-up is how a dead peer
// is noticed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/socket.h"
#include "transport/shm/doorbell.h"
#include "transport/transport.h"

namespace cc::transport::shm {

struct SlotHeader;

struct RingGeometry {
  uint32_t slots = 8;
  uint64_t slotBytes = 128 * 1024;
  size_t ringBytes() const;
  size_t pairBytes() const { return 2 * ringBytes(); }
};

// The shared memory of one pair, mapped.
class PairMemory {
 public:
  // `prefault`: mapped populated and every page touched now (doorbell.h, writeEveryPage);
  // otherwise each page on first use.
  static Result<PairMemory> create(const RingGeometry& geometry, bool prefault);
  static Result<PairMemory> attach(FileDescriptor fd, const RingGeometry& geometry, bool prefault);
  PairMemory(PairMemory&& other) noexcept;
  PairMemory& operator=(PairMemory&&) = delete;
  ~PairMemory();
  PairMemory(const PairMemory&) = delete;

  std::byte* base() const { return base_; }
  int fd() const { return fd_.get(); }

 private:
  PairMemory() = default;
  static Result<PairMemory> map(FileDescriptor fd, const RingGeometry& geometry, bool populate);
  FileDescriptor fd_;
  std::byte* base_ = nullptr;
  size_t bytes_ = 0;
};

struct ShmChannelParts {
  int peer = -1;
  pid_t peerPid = 0;
  bool isConnector = false;  // the connector sends on ring 0, the acceptor on ring 1
  RingGeometry geometry;
  PairMemory* memory = nullptr;      // moved into the channel
  Doorbell* peerDoorbell = nullptr;  // moved into the channel
  FileDescriptor control;            // the Unix socket to the peer
  bool peerReadsFromMe = false;      // I may send large messages by address (CMA)
  bool iReadPeer = false;            // the peer may send me messages by address
  size_t cmaThreshold = SIZE_MAX;    // from this many bytes messages go by address
};

class ShmChannel final : public Channel {
 public:
  explicit ShmChannel(ShmChannelParts parts);
  ~ShmChannel() override;

  bool isSharedMemory() const override { return true; }
  bool peerReadsByAddress() const override { return peerReadsFromMe_; }
  bool readsPeerByAddress() const override { return iReadPeer_; }
  uint64_t bytesPostedByAddress() const override { return bytesPostedByAddress_; }
  bool appliesSinks() const override { return true; }
  // process_vm_readv with the pid the probe used (SO_PEERCRED: this process's pid
  // namespace); the large point-to-point messages by address read through it too.
  Status readByAddress(void* destination, uint64_t address, size_t bytes) override;
  const char* kind() const override { return "shm"; }
  Result<Progress> progressSend(Transfer& transfer) override;
  Result<Progress> progressRecv(Transfer& transfer) override;
  Status checkPeer() override;
  // The peer's shared region (its doorbell page and what follows it).
  Doorbell& peerRegion() { return peerDoorbell_; }

 private:
  Result<Progress> receiveByAddress(Transfer& transfer, uint64_t sourceAddress);

  PairMemory memory_;
  Doorbell peerDoorbell_;
  FileDescriptor control_;
  pid_t peerPid_;
  RingGeometry geometry_;
  std::byte* sendRing_;
  std::byte* recvRing_;
  bool peerReadsFromMe_;
  bool iReadPeer_;
  size_t cmaThreshold_;
  uint64_t bytesPostedByAddress_ = 0;
  uint32_t sendHead_ = 0;    // chunks this side has published
  uint32_t cachedTail_ = 0;  // the peer's tail as last read (re-read only when the ring looks full)
  uint32_t recvTail_ = 0;    // chunks this side has consumed
  uint32_t awaitedTail_ = 0;  // a send by address is done when the peer's tail reaches this
  // A piece read by address for a Sink (receiveByAddress), kept for the next one.
  std::unique_ptr<std::byte[]> sinkPiece_;
  size_t sinkPieceBytes_ = 0;
};

// Whether this process can read `address` in process `pid` with process_vm_readv and
// finds `expected` there (the connection-time probe).
bool probeCrossMemoryAttach(pid_t pid, uint64_t address, uint64_t expected);

// Whether the kernel's copy between processes is worth offering as the single copy
// (CC_SHM_USE_CMA=auto): process_vm_readv of 1 MiB of this process's own memory at least
// kCrossMemoryCompetitive times memcpy's speed, the best of a few tries of each, measured
// once per process (a few milliseconds, at the first shm connection that asks). The
// staged path makes two copies, on the two ranks' cores at once; the single copy makes one,
// in the kernel, on the reader's: below about half memcpy's speed it cannot win.
inline constexpr double kCrossMemoryCompetitive = 0.5;
bool crossMemoryCopyCompetitive();
// Tests: the answer crossMemoryCopyCompetitive() gives from now on in this process.
void setCrossMemoryCopyCompetitiveForTesting(bool competitive);

}  // namespace cc::transport::shm
