// Zero-filled memory straight from the kernel (an anonymous mapping) that can hand whole
// pages back. The model keeps its parameters and gradients here so that ZeRO-2/3 can drop
// a layer's full-size gradients or gathered parameters once they are no longer needed:
// released pages stop counting in the resident set and read as zero when touched again,
// which is exactly the state "zeroed gradients" and "parameters not gathered" need.
//
// A shared buffer comes from ccMemAlloc instead (a memfd), so that data parallelism can
// register it with its communicators and the ranks on a host read each other's
// gradients and parameters in place; its released pages are punched out of the memfd.
#pragma once

#include <cstddef>

namespace cc::parallel {

class PageBuffer {
 public:
  PageBuffer() = default;
  enum class Sharing { kPrivate, kShared };
  // Throws std::bad_alloc when the memory cannot be had.
  explicit PageBuffer(size_t bytes, Sharing sharing = Sharing::kPrivate);
  ~PageBuffer();
  PageBuffer(PageBuffer&& other) noexcept;
  PageBuffer& operator=(PageBuffer&& other) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool shared() const { return shared_; }

  // Bytes [begin, end) read as zero afterwards; the whole pages inside are returned to
  // the kernel, the partial pages at either end are cleared in place (a neighbour may
  // still be using the rest of them).
  void release(size_t begin, size_t end);

 private:
  void unmap();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool shared_ = false;
};

}  // namespace cc::parallel
