// first-touch: what the first access to each page of fresh shared memory costs on this
// machine, the measurement behind writeEveryPage/readEveryPage (src/transport/shm/
// doorbell.h; docs/PERFORMANCE.md, "That was not all of it").
//
// A memfd of SLOTS slots of 512 KiB, mapped MAP_SHARED | MAP_POPULATE the way cc maps its
// staging; 128 KiB copied into each slot, timed per slot, twice (first use, then again):
//   populated          the mapping as MAP_POPULATE leaves it
//   written once       after one byte of every page was written (the owner's touch)
// and 128 KiB read from each slot through a second mapping of the same memfd (a peer's):
//   populated          as MAP_POPULATE leaves it
//   read once          after one byte of every page was read (the peer's touch)
// Prints microseconds per slot; the minor faults counted during the timed loops show
// whether the cost is the guest kernel's.
//
//   first-touch [slots=8]
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kSlotBytes = 512 << 10;
constexpr size_t kUsedBytes = 128 << 10;
constexpr size_t kPageBytes = 4096;

long minorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// A fresh memfd of `bytes`, mapped populated; the caller unmaps and closes.
char* freshMapping(size_t bytes, int& fd) {
  fd = memfd_create("first-touch", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    std::perror("memfd");
    std::exit(1);
  }
  void* address = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (address == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  return static_cast<char*>(address);
}

// Copies kUsedBytes into (or out of) every slot, twice; prints each copy's microseconds.
void timeSlots(const char* label, char* slots, size_t count, bool write, std::vector<char>& user) {
  long faultsBefore = minorFaults();
  std::printf("%-30s", label);
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 1) std::printf(" |");
    for (size_t slot = 0; slot < count; ++slot) {
      auto start = std::chrono::steady_clock::now();
      if (write) {
        std::memcpy(slots + slot * kSlotBytes, user.data(), kUsedBytes);
      } else {
        std::memcpy(user.data(), slots + slot * kSlotBytes, kUsedBytes);
      }
      std::chrono::duration<double, std::micro> took = std::chrono::steady_clock::now() - start;
      std::printf(" %.0f", took.count());
    }
  }
  std::printf("   (minor faults: %ld)\n", minorFaults() - faultsBefore);
}

// One case: a fresh memfd, optionally touched, then timed through the owner's mapping
// (writes) or a second mapping (reads).
void runCase(const char* label, size_t count, bool write, bool touch) {
  const size_t bytes = count * kSlotBytes;
  int fd = -1;
  char* owner = freshMapping(bytes, fd);
  char* target = owner;
  if (!write) {
    // The owner writes everything first, as cc's owner does, so only the reader's first
    // access is measured.
    for (size_t offset = 0; offset < bytes; offset += kPageBytes) owner[offset] = 0;
    void* second = mmap(nullptr, bytes, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (second == MAP_FAILED) {
      std::perror("mmap");
      std::exit(1);
    }
    target = static_cast<char*>(second);
  }
  if (touch) {
    for (size_t offset = 0; offset < bytes; offset += kPageBytes) {
      if (write) {
        *reinterpret_cast<volatile char*>(target + offset) = 0;
      } else {
        (void)*reinterpret_cast<volatile const char*>(target + offset);
      }
    }
  }
  std::vector<char> user(kUsedBytes, 1);
  timeSlots(label, target, count, write, user);
  if (target != owner) munmap(target, bytes);
  munmap(owner, bytes);
  close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  long slots = argc > 1 ? std::strtol(argv[1], nullptr, 10) : 8;
  if (slots < 1 || slots > 1024) {
    std::fprintf(stderr, "first-touch: slots must be 1 to 1024, not %s\n", argv[1]);
    return 2;
  }
  const auto count = static_cast<size_t>(slots);
  std::printf("# us per 128 KiB copy, slot by slot: first use | second use\n");
  runCase("write, populated", count, true, false);
  runCase("write, written once", count, true, true);
  runCase("read (2nd map), populated", count, false, false);
  runCase("read (2nd map), read once", count, false, true);
  return 0;
}
