#include "transport/shm/doorbell.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace cc::transport::shm {
namespace {
constexpr size_t kPageBytes = 4096;

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  // Shared (not FUTEX_PRIVATE) because the word lives in memory mapped by several processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}
}  // namespace

void ring(DoorbellWord& bell) {
  // The caller published with a seq_cst store; this seq_cst load is ordered after it, and
  // the owner's seq_cst increment of `sleepers` before its last seq_cst look at the ring
  // (prepareToSleep): one of the two sides must see the other.
  if (bell.sleepers.load(std::memory_order_seq_cst) == 0) return;
  bell.sequence.fetch_add(1, std::memory_order_seq_cst);
  futex(&bell.sequence, FUTEX_WAKE, INT_MAX, nullptr);
}

void ringAlways(DoorbellWord& bell) {
  bell.sequence.fetch_add(1, std::memory_order_seq_cst);
  futex(&bell.sequence, FUTEX_WAKE, INT_MAX, nullptr);
}

uint32_t prepareToSleep(DoorbellWord& bell) {
  bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
  return bell.sequence.load(std::memory_order_seq_cst);
}

void cancelSleep(DoorbellWord& bell) { bell.sleepers.fetch_sub(1, std::memory_order_seq_cst); }

void sleep(DoorbellWord& bell, uint32_t observed, int64_t timeoutMicros) {
  timespec timeout{static_cast<time_t>(timeoutMicros / 1000000),
                   static_cast<long>((timeoutMicros % 1000000) * 1000)};
  futex(&bell.sequence, FUTEX_WAIT, observed, &timeout);
  bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

Result<Doorbell> Doorbell::create(size_t extraBytes, bool prefault) {
  if (extraBytes > kMaxExtraBytes || extraBytes % kPageBytes != 0) {
    return invalidArgument("shared region of " + std::to_string(extraBytes) +
                           " bytes: not a multiple of a page up to 4 GiB");
  }
  FileDescriptor fd(memfd_create("cc-doorbell", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd.valid()) return systemError("memfd_create(doorbell)", errno);
  if (ftruncate(fd.get(), static_cast<off_t>(kHeaderBytes + extraBytes)) != 0)
    return systemError("ftruncate(doorbell)", errno);
  if (fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    return systemError("fcntl(F_ADD_SEALS)", errno);
  }
  // The owner allocates and writes its pages now, so the first collectives do not pay
  // for them; peers map them populated (connect.cc).
  CC_ASSIGN_OR_RETURN(Doorbell bell, attach(std::move(fd), false));
  if (prefault) writeEveryPage(reinterpret_cast<std::byte*>(bell.word_), bell.mappedBytes_);
  return bell;
}

// Volatile: the accesses must happen though the store writes the value already there and
// the load's value is unused.
void writeEveryPage(std::byte* address, size_t bytes) {
  for (size_t offset = 0; offset < bytes; offset += kPageBytes) {
    *reinterpret_cast<volatile std::byte*>(address + offset) = std::byte{0};
  }
}

void readEveryPage(const std::byte* address, size_t bytes) {
  for (size_t offset = 0; offset < bytes; offset += kPageBytes) {
    (void)*reinterpret_cast<const volatile std::byte*>(address + offset);
  }
}

Result<Doorbell> Doorbell::attach(FileDescriptor fd, bool populate) {
  struct stat info {};
  if (fstat(fd.get(), &info) != 0) return systemError("fstat(doorbell)", errno);
  auto size = static_cast<size_t>(info.st_size);
  if (size < kHeaderBytes || size > kHeaderBytes + kMaxExtraBytes || size % kPageBytes != 0) {
    return remoteError("peer's shared region has a bad size (" + std::to_string(size) + " bytes)");
  }
  int seals = fcntl(fd.get(), F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0)
    return remoteError("doorbell memory is not sealed against shrinking");
  void* address = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                       MAP_SHARED | (populate ? MAP_POPULATE : 0), fd.get(), 0);
  if (address == MAP_FAILED) return systemError("mmap(doorbell)", errno);
  if (populate) readEveryPage(static_cast<const std::byte*>(address), size);
  Doorbell bell;
  bell.fd_ = std::move(fd);
  // Not constructed: the memory starts zeroed (ftruncate), which is the initial state, and a
  // second process attaching must not reset what the first wrote.
  bell.word_ = static_cast<DoorbellWord*>(address);
  bell.mappedBytes_ = size;
  return bell;
}

Doorbell::Doorbell(Doorbell&& other) noexcept
    : fd_(std::move(other.fd_)), word_(other.word_), mappedBytes_(other.mappedBytes_) {
  other.word_ = nullptr;
}

Doorbell& Doorbell::operator=(Doorbell&& other) noexcept {
  if (this != &other) {
    if (word_ != nullptr) munmap(word_, mappedBytes_);
    fd_ = std::move(other.fd_);
    word_ = other.word_;
    mappedBytes_ = other.mappedBytes_;
    other.word_ = nullptr;
  }
  return *this;
}

Doorbell::~Doorbell() {
  if (word_ != nullptr) munmap(word_, mappedBytes_);
}

}  // namespace cc::transport::shm
