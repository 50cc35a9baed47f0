// The data path's copy: every byte a collective or a shared-memory channel moves between
// a user buffer and staging (or a peer's buffer) goes through copyBytes, with one of two
// kernels: cc's vector loop (unaligned loads, stores aligned to the vector, four vectors a
// step, AVX2 where the CPU has it) or memcpy.
//
// Neither is right everywhere. On the AMD EPYC KVM guests cc is developed on, glibc (2.36)
// copies with `rep movsb` from 2 KiB up, and copies between the two vCPUs run in modes the
// guest cannot see. In one, memcpy's speed depended on the buffers' offsets in their pages
// (np=2 broadcast of 256 KiB: 12 or 21 us a call) while the loop took 10.6-11.3 us at every
// offset (docs/PERFORMANCE.md, "The copy"); in another, the loop ran up to 3.4x slower
// than memcpy in every collective and 4x in point-to-point ("Two copies, chosen by the clock"). So
// by default (CC_COPY unset or auto) a call of CopyChooser::kMinBytes or more (a
// collective, a blocking send or receive, a group of point-to-point calls on one
// communicator) runs with whichever of the two its communicator's recent calls of that
// kind and size found faster (runWithChosenCopy), trying the other every kExploreEvery
// calls; smaller calls use the loop.
//
// The same choice takes in a third way of moving the bytes where it is offered: the single
// copy (CC_SHM_USE_CMA=auto, the default: the direct broadcast, all-gather and all-to-all
// on a host whose kernel copies between processes at least half as fast as memcpy;
// collectives.cc, transport/shm/channel.h), in which the peers read this rank's plain
// buffer where it lies with process_vm_readv instead of through staging.
// singleCopyChosen() tells the data path, on the calling thread, that the call took it.
//
// CC_COPY=avx2|sse2|libc fixes the kernel (read once per process).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "core/trace.h"

namespace cc {

using CopyKernel = void (*)(void* dst, const void* src, size_t bytes);

// CC_COPY's values (docs/CONFIG.md): auto, then the kernels by name.
inline constexpr std::string_view kCopyNames[] = {"auto", "libc", "sse2", "avx2"};

// Copies `bytes` from `src` to `dst`; the two ranges must not overlap.
void copyBytes(void* dst, const void* src, size_t bytes);

// Like memmove: the ranges may overlap (then memmove does it).
void moveBytes(void* dst, const void* src, size_t bytes);

// "avx2", "sse2" or "libc": what copyBytes uses in this process outside the calls a
// CopyChooser picks for (CC_COPY, or the widest loop this CPU has).
const char* copyKernelName();
// The kernel of that name (any size, like copyBytes), or nullptr where this CPU or build
// lacks it: for tests and benchmarks.
CopyKernel copyKernelNamed(std::string_view name);

// Whether CC_COPY leaves the kernel to cc (unset or auto): then CopyChooser decides per call.
bool copyKernelIsAuto();

// While one lives, copyBytes on this thread uses `kernel` (nullptr: leaves it as it is).
class CopyKernelScope {
 public:
  explicit CopyKernelScope(CopyKernel kernel);
  ~CopyKernelScope();
  CopyKernelScope(const CopyKernelScope&) = delete;
  CopyKernelScope& operator=(const CopyKernelScope&) = delete;

 private:
  CopyKernel previous_;
};

// Whether the call running on this thread moves its data by the single copy (a
// CopyChooser chose it; false outside any chosen call).
bool singleCopyChosen();

// While one lives, singleCopyChosen() on this thread answers `chosen`.
class SingleCopyScope {
 public:
  explicit SingleCopyScope(bool chosen);
  ~SingleCopyScope();
  SingleCopyScope(const SingleCopyScope&) = delete;
  SingleCopyScope& operator=(const SingleCopyScope&) = delete;

 private:
  bool previous_;
};

// Picks, call by call, between the vector loop (kernel 0) and memcpy (kernel 1) for calls
// of one kind, and the single copy (2) where the caller offers it, from the time calls of
// about the same size took with each: sizes go in buckets of powers of two; the first
// calls of a bucket try every offered way in turn (kSeedCalls for two, kSeedCalls3 for
// three; the first call of each is not timed), then the one with the lower average time
// per byte runs, and every kExploreEvery-th call another (with three, the two others,
// two tries each in turn), so that a change of mode is noticed. The ranks of a collective make the
// same calls in the same order, so they seed and try in the same calls; each rank decides from its
// own clock, and ranks that choose differently still move the same bytes. Not thread-safe: one per
// communicator and kind, used under the communicator's operation lock.
class CopyChooser {
 public:
  static constexpr size_t kMinBytes = 16 << 10;   // below: the loop, as without a chooser
  static constexpr uint32_t kSeedCalls = 8;       // two ways: 0 1 1 0 0 1 1 0
  static constexpr uint32_t kSeedCalls3 = 12;     // three: 0 1 2 2 1 0 1 2 0 0 2 1
  static constexpr uint32_t kExploreEvery = 127;  // odd: the tries alternate odd and even calls
  // The ways a call may take, as a mask of (1 << way).
  static constexpr unsigned kLoop = 1, kLibc = 2, kSingleCopy = 4;

  // The way for a call that moves `bytes` (0 loop, 1 memcpy, 2 single copy), one of
  // `offered` (at least two ways), or -1 below kMinBytes.
  int pick(size_t bytes, unsigned offered = kLoop | kLibc);
  // The call that pick() answered `way` for took `nanos`.
  void record(int way, size_t bytes, int64_t nanos);
  // The average nanoseconds per byte seen with `way` for calls of `bytes`; 0 before any.
  double nanosPerByte(int way, size_t bytes) const;
  // The faster of the loop and memcpy for calls of `bytes` so far (the loop before any).
  int fasterKernel(size_t bytes) const;
  // kernel 0 or 1 as a CopyKernel.
  static CopyKernel kernel(int which);

 private:
  struct Bucket {
    uint32_t calls = 0;
    std::array<double, 3> nanosPerByte{0, 0, 0};
    std::array<uint32_t, 3> runs{0, 0, 0};
  };
  static size_t bucketOf(size_t bytes);
  std::array<Bucket, 64> buckets_{};
};

// Runs `work` (returning a Status) the way `chooser` picks for a call that moves `bytes`,
// and tells the chooser how long it took when it succeeded. `singleCopy`: the single copy
// is offered to this call. With CC_COPY set to a kernel the choice is only between that
// kernel and the single copy, and without the single copy there is none; with a null
// chooser it just runs `work`.
template <typename Work>
auto runWithChosenCopy(CopyChooser* chooser, size_t bytes, bool singleCopy, Work&& work) {
  const unsigned offered =
      (copyKernelIsAuto() ? CopyChooser::kLoop | CopyChooser::kLibc : CopyChooser::kLoop) |
      (singleCopy ? CopyChooser::kSingleCopy : 0u);
  const bool choice = chooser != nullptr && offered != CopyChooser::kLoop;
  const int way = choice ? chooser->pick(bytes, offered) : -1;
  const int kernel = way == 2 ? (copyKernelIsAuto() ? chooser->fasterKernel(bytes) : -1) : way;
  const CopyKernelScope scope(kernel >= 0 ? CopyChooser::kernel(kernel) : nullptr);
  const SingleCopyScope copyOnce(way == 2 || (way < 0 && singleCopyChosen()));
  const int64_t startNs = way >= 0 ? nowNanos() : 0;
  auto status = work();
  if (way >= 0 && status.isOk()) chooser->record(way, bytes, nowNanos() - startNs);
  return status;
}
template <typename Work>
auto runWithChosenCopy(CopyChooser* chooser, size_t bytes, Work&& work) {
  return runWithChosenCopy(chooser, bytes, false, std::forward<Work>(work));
}

}  // namespace cc
