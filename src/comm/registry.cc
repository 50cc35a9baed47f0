#include "comm/registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <string>

#include "core/log.h"
#include "core/socket.h"

namespace cc::comm {
namespace {

constexpr uint64_t kMagic = 0x6363'6d65'6d30'3031;  // "ccmem001"

struct Header {
  uint64_t magic;
  uint64_t serial;
  uint64_t bytes;  // of the whole file, header included
};

struct Allocation {
  int fd;
  uint64_t serial;
  size_t fileBytes;
  int registrations;  // by any communicator; ccMemFree refuses while non-zero
};

// Every live ccMemAlloc allocation of this process, by the address handed out.
std::mutex gAllocationsMutex;
std::map<const std::byte*, Allocation>& allocations() {
  static auto* table = new std::map<const std::byte*, Allocation>();
  return *table;
}
uint64_t gNextSerial = 1;

size_t roundUpToPage(size_t bytes) {
  const size_t page = kSharedHeaderBytes;
  return (bytes + page - 1) / page * page;
}

// The allocation holding [buffer, buffer + bytes), or end(). Caller holds the mutex.
std::map<const std::byte*, Allocation>::iterator containing(const std::byte* buffer, size_t bytes) {
  auto& table = allocations();
  auto it = table.upper_bound(buffer);
  if (it == table.begin()) return table.end();
  --it;
  size_t userBytes = it->second.fileBytes - kSharedHeaderBytes;
  size_t offset = static_cast<size_t>(buffer - it->first);
  if (offset >= userBytes || bytes > userBytes - offset) return table.end();
  return it;
}

uint64_t wordOf(const Allocation& allocation) {
  return static_cast<uint64_t>(static_cast<uint32_t>(allocation.fd)) |
         (allocation.serial & 0xffffffffu) << 32;
}

}  // namespace

Result<void*> allocateShared(size_t bytes) {
  if (bytes == 0) return invalidArgument("ccMemAlloc: size is 0");
  if (bytes > (size_t{1} << 46)) {
    return invalidArgument(fmt::format("ccMemAlloc: size {} is larger than 64 TiB", bytes));
  }
  const size_t fileBytes = kSharedHeaderBytes + roundUpToPage(bytes);
  FileDescriptor fd(memfd_create("cc-mem", MFD_CLOEXEC));
  if (!fd.valid()) return systemError("ccMemAlloc: memfd_create", errno);
  if (ftruncate(fd.get(), static_cast<off_t>(fileBytes)) != 0) {
    return systemError(fmt::format("ccMemAlloc: ftruncate to {} bytes", fileBytes), errno);
  }
  void* base = mmap(nullptr, fileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED)
    return systemError(fmt::format("ccMemAlloc: mmap of {} bytes", fileBytes), errno);
  auto* header = static_cast<Header*>(base);
  std::lock_guard lock(gAllocationsMutex);
  const uint64_t serial = gNextSerial++;
  header->magic = kMagic;
  header->serial = serial;
  header->bytes = fileBytes;
  auto* user = static_cast<std::byte*>(base) + kSharedHeaderBytes;
  allocations()[user] = Allocation{fd.release(), serial, fileBytes, 0};
  return static_cast<void*>(user);
}

Status freeShared(void* pointer) {
  if (pointer == nullptr) return Status::ok();  // as free(NULL)
  std::lock_guard lock(gAllocationsMutex);
  auto& table = allocations();
  auto it = table.find(static_cast<const std::byte*>(pointer));
  if (it == table.end()) {
    return invalidArgument(fmt::format(
        "ccMemFree: ptr {} was not returned by ccMemAlloc (or was freed already)", pointer));
  }
  if (it->second.registrations > 0) {
    return invalidUsage(fmt::format(
        "ccMemFree: ptr {} is still registered ({} registration(s)); ccCommDeregister it first",
        pointer, it->second.registrations));
  }
  munmap(const_cast<std::byte*>(it->first) - kSharedHeaderBytes, it->second.fileBytes);
  close(it->second.fd);
  table.erase(it);
  return Status::ok();
}

Registrations::~Registrations() {
  std::lock_guard lock(gAllocationsMutex);
  for (const auto& entry : entries_) {
    auto it = containing(entry->begin, entry->bytes);
    if (it != allocations().end()) --it->second.registrations;
  }
}

Result<void*> Registrations::add(void* buffer, size_t bytes) {
  auto* begin = static_cast<const std::byte*>(buffer);
  auto entry = std::make_unique<Entry>();
  {
    std::lock_guard lock(gAllocationsMutex);
    auto it = containing(begin, bytes);
    if (it == allocations().end()) {
      return invalidArgument(fmt::format(
          "ccCommRegister: buff {} (size {}) does not lie inside memory from ccMemAlloc; only "
          "ccMemAlloc memory can be shared with the other ranks",
          buffer, bytes));
    }
    ++it->second.registrations;
    *entry = Entry{begin, bytes, wordOf(it->second),
                   kSharedHeaderBytes + static_cast<uint64_t>(begin - it->first)};
  }
  std::lock_guard lock(mutex_);
  void* handle = entry.get();
  entries_.push_back(std::move(entry));
  count_.store(entries_.size(), std::memory_order_release);
  return handle;
}

Status Registrations::remove(void* handle) {
  std::unique_ptr<Entry> removed;
  {
    std::lock_guard lock(mutex_);
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [handle](const auto& entry) { return entry.get() == handle; });
    if (it == entries_.end()) {
      return invalidArgument(fmt::format(
          "ccCommDeregister: handle {} is not a registration of this communicator", handle));
    }
    removed = std::move(*it);
    entries_.erase(it);
    count_.store(entries_.size(), std::memory_order_release);
  }
  std::lock_guard lock(gAllocationsMutex);
  auto it = containing(removed->begin, removed->bytes);
  if (it != allocations().end()) --it->second.registrations;
  return Status::ok();
}

SharedRef Registrations::find(const void* buffer, size_t bytes) const {
  if (buffer == nullptr || count_.load(std::memory_order_acquire) == 0) return {};
  auto* begin = static_cast<const std::byte*>(buffer);
  std::lock_guard lock(mutex_);
  for (const auto& entry : entries_) {
    if (begin < entry->begin) continue;
    auto offset = static_cast<size_t>(begin - entry->begin);
    if (offset > entry->bytes || bytes > entry->bytes - offset) continue;
    return SharedRef{entry->word, entry->fileOffset + offset};
  }
  return {};
}

PeerMappings::~PeerMappings() {
  for (size_t i = mappings_.size(); i > 0; --i) unmap(i - 1);
}

void PeerMappings::unmap(size_t index) {
  munmap(mappings_[index].base, mappings_[index].bytes);
  mappings_.erase(mappings_.begin() + static_cast<std::ptrdiff_t>(index));
}

Result<const std::byte*> PeerMappings::resolve(int rank, pid_t pid, SharedRef ref, size_t bytes) {
  const uint64_t use = ++uses_;
  const auto fdNumber = static_cast<uint32_t>(ref.word);
  // The same descriptor number with another serial: the peer freed that allocation.
  for (size_t i = mappings_.size(); i > 0; --i) {
    const Mapping& mapping = mappings_[i - 1];
    if (mapping.rank == rank && mapping.word != ref.word &&
        static_cast<uint32_t>(mapping.word) == fdNumber) {
      unmap(i - 1);
    }
  }
  auto known = std::find_if(mappings_.begin(), mappings_.end(), [&](const Mapping& mapping) {
    return mapping.rank == rank && mapping.word == ref.word;
  });
  if (known != mappings_.end()) {
    if (ref.offset > known->bytes || bytes > known->bytes - ref.offset) {
      return remoteError(fmt::format(
          "rank {} published a registered buffer of {} bytes at offset {} of an allocation of "
          "{} bytes",
          rank, bytes, ref.offset, known->bytes));
    }
    known->lastUse = use;
    return static_cast<const std::byte*>(known->base + ref.offset);
  }
  const std::string path = fmt::format("/proc/{}/fd/{}", pid, fdNumber);
  FileDescriptor fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    return systemError(fmt::format("mapping rank {}'s registered buffer: open {} (ranks sharing "
                                   "registered memory must run as one user)",
                                   rank, path),
                       errno);
  }
  struct stat info {};
  if (fstat(fd.get(), &info) != 0) return systemError("fstat " + path, errno);
  auto fileBytes = static_cast<size_t>(info.st_size);
  if (fileBytes < kSharedHeaderBytes || ref.offset > fileBytes || bytes > fileBytes - ref.offset) {
    return remoteError(fmt::format(
        "rank {}'s registered buffer ({} bytes at offset {}) is not inside {} ({} bytes)", rank,
        bytes, ref.offset, path, fileBytes));
  }
  // Not MAP_POPULATE: reading the holes of a memfd (pages ZeRO gave back) would fill them.
  void* base = mmap(nullptr, fileBytes, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return systemError("mmap " + path, errno);
  const auto* header = static_cast<const Header*>(base);
  if (header->magic != kMagic || (header->serial & 0xffffffffu) != ref.word >> 32) {
    munmap(base, fileBytes);
    return remoteError(fmt::format(
        "rank {}'s registered buffer is gone: {} is not the allocation it published (freed "
        "during the call?)",
        rank, path));
  }
  if (mappings_.size() >= kMaxMappings) {
    auto oldest =
        std::min_element(mappings_.begin(), mappings_.end(),
                         [](const Mapping& a, const Mapping& b) { return a.lastUse < b.lastUse; });
    unmap(static_cast<size_t>(oldest - mappings_.begin()));
  }
  mappings_.push_back(Mapping{rank, ref.word, static_cast<std::byte*>(base), fileBytes, use});
  log::info("mapped rank {}'s registered allocation {} ({} bytes)", rank, path, fileBytes);
  return static_cast<const std::byte*>(mappings_.back().base + ref.offset);
}

}  // namespace cc::comm
