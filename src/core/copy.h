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
// CC_COPY=avx2|sse2|libc fixes the kernel (read once per process).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

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

// Picks, call by call, between the vector loop (kernel 0) and memcpy (kernel 1) for calls
// of one kind, from the time calls of about the same size took with each: sizes go in
// buckets of powers of two; the first kSeedCalls calls of a bucket alternate the two, then
// the one with the lower average time per byte runs, and every kExploreEvery-th call the
// other, so that a change of mode is noticed. The ranks of a collective make the same
// calls in the same order, so they seed and try in the same calls; each rank decides from
// its own clock, and ranks that choose differently still copy exactly. Not thread-safe:
// one per communicator and kind, used under the communicator's operation lock.
class CopyChooser {
 public:
  static constexpr size_t kMinBytes = 16 << 10;   // below: the loop, as without a chooser
  static constexpr uint32_t kSeedCalls = 8;       // the first two of them are not timed
  static constexpr uint32_t kExploreEvery = 127;  // odd: the tries alternate odd and even calls

  // The kernel for a call that moves `bytes` (0 or 1), or -1 below kMinBytes.
  int pick(size_t bytes);
  // The call that pick() answered `kernel` for took `nanos`.
  void record(int kernel, size_t bytes, int64_t nanos);
  // The average nanoseconds per byte seen with `kernel` for calls of `bytes`; 0 before any.
  double nanosPerByte(int kernel, size_t bytes) const;
  // kernel 0 or 1 as a CopyKernel.
  static CopyKernel kernel(int which);

 private:
  struct Bucket {
    uint32_t calls = 0;
    std::array<double, 2> nanosPerByte{0, 0};
  };
  static size_t bucketOf(size_t bytes);
  std::array<Bucket, 64> buckets_{};
};

// Runs `work` (returning a Status) with the kernel `chooser` picks for a call that moves
// `bytes`, and tells the chooser how long it took when it succeeded. With CC_COPY set to a
// kernel, or a null chooser, just runs it.
template <typename Work>
auto runWithChosenCopy(CopyChooser* chooser, size_t bytes, Work&& work) {
  const int kernel = chooser != nullptr && copyKernelIsAuto() ? chooser->pick(bytes) : -1;
  const CopyKernelScope scope(kernel >= 0 ? CopyChooser::kernel(kernel) : nullptr);
  const int64_t startNs = kernel >= 0 ? nowNanos() : 0;
  auto status = work();
  if (kernel >= 0 && status.isOk()) chooser->record(kernel, bytes, nowNanos() - startNs);
  return status;
}

}  // namespace cc
