#include "parallel/model/page_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <utility>

namespace cc::parallel {

PageBuffer::PageBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  data_ = mapped;
}

PageBuffer::~PageBuffer() {
  if (data_ != nullptr) ::munmap(data_, bytes_);
}

PageBuffer::PageBuffer(PageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PageBuffer& PageBuffer::operator=(PageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, bytes_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
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
  // zero-filled on the next touch.
  ::madvise(base + firstWhole, lastWhole - firstWhole, MADV_DONTNEED);
}

}  // namespace cc::parallel
