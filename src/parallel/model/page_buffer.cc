#include "parallel/model/page_buffer.h"

#include <cc/cc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <utility>

namespace cc::parallel {

PageBuffer::PageBuffer(size_t bytes, Sharing sharing)
    : bytes_(bytes), shared_(sharing == Sharing::kShared) {
  if (bytes == 0) return;
  if (shared_) {
    // Zero-filled like the anonymous mapping: a fresh memfd reads as zero.
    if (ccMemAlloc(&data_, bytes) != ccSuccess) throw std::bad_alloc();
    return;
  }
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  data_ = mapped;
}

PageBuffer::~PageBuffer() { unmap(); }

void PageBuffer::unmap() {
  if (data_ == nullptr) return;
  // A shared buffer still registered somewhere is refused by ccMemFree and stays mapped
  // (data parallelism deregisters before the model goes; only a failed run leaks it).
  if (shared_) {
    (void)ccMemFree(data_);
  } else {
    ::munmap(data_, bytes_);
  }
  data_ = nullptr;
}

PageBuffer::PageBuffer(PageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      shared_(std::exchange(other.shared_, false)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    unmap();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    shared_ = std::exchange(other.shared_, false);
  }
  return *this;
}

void PageBuffer::release(size_t begin, size_t end) {
  if (end > bytes_) end = bytes_;
  if (begin >= end) return;
  static const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  char* base = static_cast<char*>(data_);
  // The mapping starts on a page, so offsets round like addresses.
  const size_t firstWhole = (begin + kPage - 1) / kPage * kPage;
  const size_t lastWhole = end / kPage * kPage;
  if (firstWhole >= lastWhole) {
    std::memset(base + begin, 0, end - begin);
    return;
  }
  std::memset(base + begin, 0, firstWhole - begin);
  std::memset(base + lastWhole, 0, end - lastWhole);
  // MADV_DONTNEED on a private anonymous mapping: the pages are freed now and come back
  // zero-filled on the next touch. A shared mapping would keep the memfd's pages (and
  // their old contents): MADV_REMOVE punches them out of the file instead.
  ::madvise(base + firstWhole, lastWhole - firstWhole, shared_ ? MADV_REMOVE : MADV_DONTNEED);
}

}  // namespace cc::parallel
