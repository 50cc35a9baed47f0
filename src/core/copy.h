// The data path's copy: every byte a collective or a shared-memory channel moves between
// a user buffer and staging (or a peer's buffer) goes through copyBytes.
//
// Why not memcpy: from 2 KiB up, glibc (2.36, on the AMD EPYC KVM guests cc is developed
// on) copies with `rep movsb`, whose speed there depends on the two addresses and swings
// from call to call and run to run. np=2 broadcast of 256 KiB took 12 or 21 us a call
// depending on the buffers' offsets in their pages, and the same offsets gave either in
// different phases of one process; with glibc's own vector loop instead (its tunable
// x86_rep_movsb_threshold raised) it took 10.6-11.3 us at every offset
// (docs/PERFORMANCE.md, "The copy"). copyBytes is that vector loop: unaligned loads,
// stores aligned to the vector, four vectors a step, with AVX2 where the CPU has it.
//
// CC_COPY=libc uses memcpy instead (read once per process).
#pragma once

#include <cstddef>
#include <string_view>

namespace cc {

using CopyKernel = void (*)(void* dst, const void* src, size_t bytes);

// CC_COPY's values (docs/CONFIG.md): auto, then the kernels by name.
inline constexpr std::string_view kCopyNames[] = {"auto", "libc", "sse2", "avx2"};

// Copies `bytes` from `src` to `dst`; the two ranges must not overlap.
void copyBytes(void* dst, const void* src, size_t bytes);

// Like memmove: the ranges may overlap (then memmove does it).
void moveBytes(void* dst, const void* src, size_t bytes);

// "avx2", "sse2" or "libc": what copyBytes uses in this process.
const char* copyKernelName();
// The kernel of that name (any size, like copyBytes), or nullptr where this CPU or build
// lacks it: for tests and benchmarks.
CopyKernel copyKernelNamed(std::string_view name);

}  // namespace cc
