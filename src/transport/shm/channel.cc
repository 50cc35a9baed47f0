#include "transport/shm/channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "core/copy.h"
#include "core/log.h"
#include "core/trace.h"

namespace cc::transport::shm {

// Per ring: the receiver's `tail` on its own cache line, then the slots. A slot is
// published by writing its `published` word last (release): the receiver polls only the
// slot it expects next, so a small message costs it one cache line, header and data
// together. The sender re-reads `tail` only when its cached copy says the ring is full.
struct alignas(64) RingControl {
  std::atomic<uint32_t> tail;
};
static_assert(sizeof(RingControl) == 64);

enum SlotMode : uint32_t { kInline = 1, kByAddress = 2 };

inline constexpr size_t kInlineBytes = 24;

struct alignas(64) SlotHeader {
  std::atomic<uint32_t> published;  // chunk sequence number + 1, written last
  uint32_t mode;
  uint64_t messageBytes;
  uint64_t offset;
  uint64_t payloadBytes;
  uint64_t sourceAddress;
  std::byte inlineData[kInlineBytes];  // payloads this small travel in the header's line
};
static_assert(sizeof(SlotHeader) == 64);

namespace {

constexpr size_t kCmaPieceBytes = 8u << 20;  // bounds the time between abort/timeout checks

RingControl& control(std::byte* ring) { return *reinterpret_cast<RingControl*>(ring); }

SlotHeader& slotHeader(std::byte* ring, const RingGeometry& geometry, uint32_t index) {
  size_t stride = sizeof(SlotHeader) + geometry.slotBytes;
  return *reinterpret_cast<SlotHeader*>(ring + sizeof(RingControl) +
                                        (index % geometry.slots) * stride);
}

std::byte* slotPayload(SlotHeader& slot) {
  if (slot.payloadBytes <= kInlineBytes) return slot.inlineData;
  return reinterpret_cast<std::byte*>(&slot) + sizeof(SlotHeader);
}

}  // namespace

size_t RingGeometry::ringBytes() const {
  return sizeof(RingControl) + static_cast<size_t>(slots) * (sizeof(SlotHeader) + slotBytes);
}

Result<PairMemory> PairMemory::create(const RingGeometry& geometry, bool prefault) {
  FileDescriptor fd(memfd_create("cc-shm-pair", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return systemError("memfd_create(shm pair)", errno);
  if (ftruncate(fd.get(), static_cast<off_t>(geometry.pairBytes())) != 0) {
    return systemError("ftruncate(shm pair)", errno);
  }
  // Sealed at its size: a peer cannot shrink it under us (which would make our loads
  // fault with SIGBUS).
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return systemError("fcntl(F_ADD_SEALS)", errno);
  }
  CC_ASSIGN_OR_RETURN(PairMemory memory, map(std::move(fd), geometry, prefault));
  if (prefault) writeEveryPage(memory.base_, memory.bytes_);
  return memory;
}

Result<PairMemory> PairMemory::attach(FileDescriptor fd, const RingGeometry& geometry,
                                      bool prefault) {
  CC_ASSIGN_OR_RETURN(PairMemory memory, map(std::move(fd), geometry, prefault));
  if (prefault) readEveryPage(memory.base_, memory.bytes_);
  return memory;
}

Result<PairMemory> PairMemory::map(FileDescriptor fd, const RingGeometry& geometry, bool populate) {
  struct stat info {};
  if (fstat(fd.get(), &info) != 0) return systemError("fstat(shm pair)", errno);
  int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    return remoteError("shm pair memory is not sealed against shrinking");
  if (static_cast<size_t>(info.st_size) != geometry.pairBytes()) {
    return remoteError("shm pair memory is " + std::to_string(info.st_size) + " bytes, expected " +
                       std::to_string(geometry.pairBytes()));
  }
  // With `populate`, mapped populated now and touched by create() or attach() (doorbell.h,
  // writeEveryPage): a page first touched inside a timed call costs microseconds in a VM.
  void* address = mmap(nullptr, geometry.pairBytes(), PROT_READ | PROT_WRITE,
                       MAP_SHARED | (populate ? MAP_POPULATE : 0), fd.get(), 0);
  if (address == MAP_FAILED) return systemError("mmap(shm pair)", errno);
  PairMemory memory;
  memory.fd_ = std::move(fd);
  memory.base_ = static_cast<std::byte*>(address);
  memory.bytes_ = geometry.pairBytes();
  return memory;
}

PairMemory::PairMemory(PairMemory&& other) noexcept
    : fd_(std::move(other.fd_)), base_(other.base_), bytes_(other.bytes_) {
  other.base_ = nullptr;
}

PairMemory::~PairMemory() {
  if (base_ != nullptr) munmap(base_, bytes_);
}

ShmChannel::ShmChannel(ShmChannelParts parts)
    : Channel(parts.peer),
      memory_(std::move(*parts.memory)),
      peerDoorbell_(std::move(*parts.peerDoorbell)),
      control_(std::move(parts.control)),
      peerPid_(parts.peerPid),
      geometry_(parts.geometry),
      sendRing_(memory_.base() + (parts.isConnector ? 0 : geometry_.ringBytes())),
      recvRing_(memory_.base() + (parts.isConnector ? geometry_.ringBytes() : 0)),
      peerReadsFromMe_(parts.peerReadsFromMe),
      iReadPeer_(parts.iReadPeer),
      cmaThreshold_(parts.cmaThreshold) {}

ShmChannel::~ShmChannel() = default;

Result<Progress> ShmChannel::progressSend(Transfer& transfer) {
  RingControl& counters = control(sendRing_);
  bool byAddress = peerReadsFromMe_ && transfer.bytes >= cmaThreshold_ && transfer.bytes > 0;
  if (byAddress && transfer.started) {
    // Posted; done once the peer has read it all and released the slot.
    cachedTail_ = counters.tail.load(std::memory_order_seq_cst);
    if (static_cast<int32_t>(cachedTail_ - awaitedTail_) >= 0) {
      transfer.progressed = transfer.bytes;
      return Progress::kDone;
    }
    return Progress::kIdle;
  }
  bool moved = false;
  while (!transfer.started || transfer.progressed < transfer.bytes) {
    if (sendHead_ - cachedTail_ >= geometry_.slots) {
      cachedTail_ = counters.tail.load(std::memory_order_seq_cst);
      if (sendHead_ - cachedTail_ >= geometry_.slots) break;  // ring full
    }
    SlotHeader& slot = slotHeader(sendRing_, geometry_, sendHead_);
    slot.messageBytes = transfer.bytes;
    slot.offset = transfer.progressed;
    if (byAddress) {
      slot.mode = kByAddress;
      slot.payloadBytes = 0;
      slot.sourceAddress = reinterpret_cast<uint64_t>(transfer.data);
    } else {
      size_t chunk = std::min<size_t>(geometry_.slotBytes, transfer.bytes - transfer.progressed);
      slot.mode = kInline;
      slot.payloadBytes = chunk;
      copyBytes(slotPayload(slot), transfer.data + transfer.progressed, chunk);
      transfer.progressed += chunk;
    }
    ++sendHead_;
    slot.published.store(sendHead_, std::memory_order_seq_cst);
    ring(peerDoorbell_.word());
    transfer.started = true;
    moved = true;
    if (byAddress) {
      awaitedTail_ = sendHead_;
      bytesPostedByAddress_ += transfer.bytes;
      return Progress::kMoved;
    }
  }
  if (transfer.started && transfer.progressed == transfer.bytes && !byAddress)
    return Progress::kDone;
  return moved ? Progress::kMoved : Progress::kIdle;
}

Status ShmChannel::readByAddress(void* destination, uint64_t address, size_t bytes) {
  auto* to = static_cast<std::byte*>(destination);
  size_t done = 0;
  while (done < bytes) {
    iovec local{to + done, bytes - done};
    iovec remote{reinterpret_cast<void*>(address + done), bytes - done};
    ssize_t n = process_vm_readv(peerPid_, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == ESRCH) {
      return remoteError("rank " + std::to_string(peer()) + " exited during a transfer");
    }
    if (n < 0) return systemError("process_vm_readv from rank " + std::to_string(peer()), errno);
    if (n == 0) {
      return remoteError("process_vm_readv from rank " + std::to_string(peer()) +
                         " read nothing: its buffer is gone");
    }
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

Result<Progress> ShmChannel::receiveByAddress(Transfer& transfer, uint64_t sourceAddress) {
  size_t piece = std::min(kCmaPieceBytes, transfer.bytes - transfer.progressed);
  std::byte* destination = transfer.data + transfer.progressed;
  if (transfer.sink == nullptr) {
    CC_TRY(readByAddress(destination, sourceAddress + transfer.progressed, piece));
  } else {
    // A sink's piece is read aside first: its destination may be the very operand the
    // sink combines it with (an in-place ring all-reduce).
    if (sinkPieceBytes_ < piece) {
      sinkPiece_ = std::make_unique_for_overwrite<std::byte[]>(piece);
      sinkPieceBytes_ = piece;
    }
    CC_TRY(readByAddress(sinkPiece_.get(), sourceAddress + transfer.progressed, piece));
    transfer.sink->apply(transfer.sink->state, destination, sinkPiece_.get(), transfer.progressed,
                         piece);
  }
  transfer.progressed += piece;
  transfer.started = true;
  return Progress::kMoved;
}

Result<Progress> ShmChannel::progressRecv(Transfer& transfer) {
  RingControl& counters = control(recvRing_);
  bool moved = false;
  while (!transfer.started || transfer.progressed < transfer.bytes) {
    SlotHeader& slot = slotHeader(recvRing_, geometry_, recvTail_);
    if (slot.published.load(std::memory_order_seq_cst) != recvTail_ + 1)
      break;  // not published yet
    // The slot is written by another process: read each field exactly once (volatile)
    // and check the copies, so that what is checked is what is used.
    const volatile SlotHeader& shared = slot;
    const uint32_t mode = shared.mode;
    const uint64_t messageBytes = shared.messageBytes;
    const uint64_t offset = shared.offset;
    const uint64_t payloadBytes = shared.payloadBytes;
    const uint64_t sourceAddress = shared.sourceAddress;
    if (messageBytes != transfer.bytes) {
      return invalidUsage("message size mismatch: this rank receives " +
                          std::to_string(transfer.bytes) + " bytes from rank " +
                          std::to_string(peer()) + ", which sent " + std::to_string(messageBytes));
    }
    if (mode == kInline) {
      if (offset != transfer.progressed || payloadBytes > geometry_.slotBytes ||
          payloadBytes > transfer.bytes - transfer.progressed) {
        return remoteError("shm ring from rank " + std::to_string(peer()) +
                           " is corrupt (offset or length)");
      }
      if (transfer.sink != nullptr && offset % 64 != 0) {
        return remoteError("shm ring from rank " + std::to_string(peer()) +
                           " is corrupt (a piece at an odd offset)");
      }
      const std::byte* source = payloadBytes <= kInlineBytes
                                    ? slot.inlineData
                                    : reinterpret_cast<std::byte*>(&slot) + sizeof(SlotHeader);
      std::byte* destination = transfer.data + transfer.progressed;
      if (transfer.sink != nullptr) {
        transfer.sink->apply(transfer.sink->state, destination, source, offset, payloadBytes);
      } else {
        copyBytes(destination, source, payloadBytes);
      }
      transfer.progressed += payloadBytes;
      transfer.started = true;
    } else if (mode == kByAddress) {
      auto result = receiveByAddress(transfer, sourceAddress);
      if (!result.isOk()) return result;
      if (transfer.progressed < transfer.bytes) return Progress::kMoved;  // more pieces to read
    } else {
      return remoteError("shm ring from rank " + std::to_string(peer()) + " is corrupt (mode)");
    }
    ++recvTail_;
    counters.tail.store(recvTail_, std::memory_order_seq_cst);
    ring(peerDoorbell_.word());
    moved = true;
  }
  if (transfer.started && transfer.progressed == transfer.bytes) return Progress::kDone;
  return moved ? Progress::kMoved : Progress::kIdle;
}

Status ShmChannel::checkPeer() {
  pollfd entry{control_.get(), POLLIN | POLLRDHUP, 0};
  if (::poll(&entry, 1, 0) <= 0) return Status::ok();
  if ((entry.revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0) {
    return remoteError("rank " + std::to_string(peer()) +
                       " (shm) is gone: its process exited or closed the communicator");
  }
  char byte = 0;
  if (::recv(control_.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
    return remoteError("rank " + std::to_string(peer()) +
                       " (shm) is gone: its process exited or closed the communicator");
  }
  return Status::ok();
}

namespace {
// A test's answer (0 or 1), or -1: measure.
std::atomic<int> gForcedCompetitive{-1};

bool measureCrossMemoryCopy() {
  constexpr size_t kBytes = size_t{1} << 20;
  constexpr int kTries = 5;
  std::vector<std::byte> from(kBytes, std::byte{1});
  std::vector<std::byte> to(kBytes, std::byte{2});
  int64_t bestCopy = INT64_MAX;
  int64_t bestRead = INT64_MAX;
  for (int attempt = 0; attempt < kTries; ++attempt) {
    int64_t start = nowNanos();
    std::memcpy(to.data(), from.data(), kBytes);
    bestCopy = std::min(bestCopy, nowNanos() - start);
    iovec local{to.data(), kBytes};
    iovec remote{from.data(), kBytes};
    start = nowNanos();
    ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n != static_cast<ssize_t>(kBytes)) return false;  // refused: nothing to offer
    bestRead = std::min(bestRead, nowNanos() - start);
  }
  const double ratio =
      static_cast<double>(bestCopy) / static_cast<double>(std::max<int64_t>(bestRead, 1));
  log::info(
      "single copy: process_vm_readv moved {:.2f}x memcpy's bytes a second here (1 MiB); "
      "offered to the copy chooser from {:.2f}x: {}",
      ratio, kCrossMemoryCompetitive, ratio >= kCrossMemoryCompetitive ? "yes" : "no");
  return ratio >= kCrossMemoryCompetitive;
}
}  // namespace

bool crossMemoryCopyCompetitive() {
  const int forced = gForcedCompetitive.load(std::memory_order_relaxed);
  if (forced >= 0) return forced != 0;
  static const bool measured = measureCrossMemoryCopy();  // once, thread-safe
  return measured;
}

void setCrossMemoryCopyCompetitiveForTesting(bool competitive) {
  gForcedCompetitive.store(competitive ? 1 : 0, std::memory_order_relaxed);
}

bool probeCrossMemoryAttach(pid_t pid, uint64_t address, uint64_t expected) {
  uint64_t value = 0;
  iovec local{&value, sizeof(value)};
  iovec remote{reinterpret_cast<void*>(address), sizeof(value)};
  ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  return n == static_cast<ssize_t>(sizeof(value)) && value == expected;
}

}  // namespace cc::transport::shm
