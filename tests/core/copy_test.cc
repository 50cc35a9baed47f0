// The data path's copy kernels (core/copy.h): every kernel this CPU has gives memcpy's
// bytes at every size around its edges (the small-size cut, one vector, four, the
// aligned loop's end) and every alignment of source and destination within a cache line,
// and writes nothing outside the destination. moveBytes gives memmove's bytes when the
// ranges overlap.
#include "core/copy.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

namespace cc {
namespace {

constexpr size_t kGuard = 128;

std::vector<uint8_t> pattern(size_t bytes, uint32_t seed) {
  std::vector<uint8_t> out(bytes);
  uint32_t x = seed * 2654435761u + 1;
  for (uint8_t& b : out) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    b = static_cast<uint8_t>(x);
  }
  return out;
}

// 64-byte-aligned memory of exactly `bytes` (so that AddressSanitizer sees a read or write
// one byte past it), filled with a pattern.
struct Aligned {
  explicit Aligned(size_t bytes, uint32_t seed)
      : size(bytes),
        data(static_cast<uint8_t*>(
            ::operator new (std::max<size_t>(bytes, 1), std::align_val_t{64}))) {
    const std::vector<uint8_t> fill = pattern(bytes, seed);
    if (bytes > 0) std::memcpy(data, fill.data(), bytes);
  }
  ~Aligned() { ::operator delete (data, std::align_val_t{64}); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  size_t size;
  uint8_t* data;
};

// Copies `bytes` with `kernel` from `srcOffset` bytes into a 64-byte-aligned source that
// ends where the copied bytes end, to `dstOffset` bytes past a guard in a 64-byte-aligned
// destination; returns what is wrong ("" when the destination equals the source and
// nothing else changed).
std::string checkCopy(CopyKernel kernel, size_t bytes, size_t srcOffset, size_t dstOffset) {
  Aligned src(srcOffset + bytes, static_cast<uint32_t>(bytes + srcOffset));
  Aligned dst(kGuard + dstOffset + bytes + kGuard, static_cast<uint32_t>(~bytes + dstOffset));
  const std::vector<uint8_t> before(dst.data, dst.data + dst.size);
  const uint8_t* from = src.data + srcOffset;
  const size_t at = kGuard + dstOffset;
  kernel(dst.data + at, from, bytes);
  for (size_t i = 0; i < dst.size; ++i) {
    const bool inside = i >= at && i < at + bytes;
    const uint8_t want = inside ? from[i - at] : before[i];
    if (dst.data[i] != want) {
      return "byte " + std::to_string(static_cast<long>(i) - static_cast<long>(at)) + " of " +
             std::to_string(bytes) + (inside ? " differs from the source" : " outside was written");
    }
  }
  return "";
}

std::vector<std::string> kernelsHere() {
  std::vector<std::string> names;
  for (const char* name : {"libc", "sse2", "avx2"}) {
    if (copyKernelNamed(name) != nullptr) names.emplace_back(name);
  }
  return names;
}

TEST(Copy, EveryKernelCopiesEverySizeAndAlignmentExactly) {
#if defined(__x86_64__)
  // The default is the widest kernel the CPU has.
  if (std::getenv("CC_COPY") == nullptr) {
    EXPECT_STREQ(copyKernelName(), __builtin_cpu_supports("avx2") ? "avx2" : "sse2");
  }
#endif
  EXPECT_EQ(copyKernelNamed("none"), nullptr);
  for (const std::string& name : kernelsHere()) {
    CopyKernel kernel = copyKernelNamed(name);
    // Every size to 600 (the cut at 256, one to eight 32-byte vectors and the loop's end
    // at each), then larger ones off by one around powers of two.
    std::vector<size_t> sizes;
    for (size_t s = 0; s <= 600; ++s) sizes.push_back(s);
    for (size_t p : {size_t{1024}, size_t{4096}, size_t{65536}, size_t{1} << 20}) {
      for (size_t s : {p - 1, p, p + 1, p + 33}) sizes.push_back(s);
    }
    // Offsets within a cache line: every one below a vector's alignment, and either side
    // of 16, 32 and 48.
    const size_t offsets[] = {0, 1, 2, 3, 5, 7, 8, 15, 16, 17, 31, 32, 33, 47, 48, 63};
    const size_t fewOffsets[] = {0, 1, 17, 63};  // for the sizes past 4 KiB
    for (size_t bytes : sizes) {
      for (size_t srcOffset : bytes > 4096 ? std::span<const size_t>(fewOffsets) : offsets) {
        for (size_t dstOffset : bytes > 4096 ? std::span<const size_t>(fewOffsets) : offsets) {
          std::string error = checkCopy(kernel, bytes, srcOffset, dstOffset);
          ASSERT_TRUE(error.empty()) << name << ", source at +" << srcOffset << ", destination at +"
                                     << dstOffset << ": " << error;
        }
      }
    }
  }
}

// Overlapping by a byte or more either way, not at all (shifted by the length, just
// touching), and onto itself.
TEST(Copy, MoveBytesIsMemmoveWhenTheRangesOverlap) {
  for (size_t bytes : {size_t{7}, size_t{300}, size_t{4099}, size_t{70001}}) {
    const auto length = static_cast<long>(bytes);
    for (long shift : {-length, -length + 1, -65L, -1L, 0L, 1L, 31L, 4096L, length - 1, length}) {
      std::vector<uint8_t> buffer = pattern(3 * bytes + 8192, static_cast<uint32_t>(bytes));
      std::vector<uint8_t> expected = buffer;
      const size_t from = bytes + 4096;
      const auto to = static_cast<size_t>(static_cast<long>(from) + shift);
      std::memmove(expected.data() + to, expected.data() + from, bytes);
      moveBytes(buffer.data() + to, buffer.data() + from, bytes);
      ASSERT_EQ(buffer, expected) << bytes << " bytes moved by " << shift;
    }
  }
}

// CC_COPY is read once per process by the copy, and checked with every other setting when
// a communicator is created: a misspelling is an error naming it.
TEST(Copy, AnUnknownCcCopyIsAnErrorNamingIt) {
  const char* outside = std::getenv("CC_COPY");
  const std::string saved = outside != nullptr ? outside : "";
  for (const char* good : {"auto", "libc", "sse2", "avx2"}) {
    setenv("CC_COPY", good, 1);
    EXPECT_TRUE(Config::fromEnvironment().isOk()) << good;
  }
  setenv("CC_COPY", "avx3", 1);
  Result<Config> bad = Config::fromEnvironment();
  if (outside != nullptr) {
    setenv("CC_COPY", saved.c_str(), 1);
  } else {
    unsetenv("CC_COPY");
  }
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), ccInvalidArgument);
  EXPECT_NE(bad.status().message().find("CC_COPY=avx3"), std::string::npos)
      << bad.status().message();
}

// CC_SHM_USE_CMA: auto (the default, -1), 0 or 1; anything else is an error naming it.
TEST(Copy, CcShmUseCmaIsAutoZeroOrOne) {
  const char* outside = std::getenv("CC_SHM_USE_CMA");
  const std::string saved = outside != nullptr ? outside : "";
  unsetenv("CC_SHM_USE_CMA");
  Result<Config> defaults = Config::fromEnvironment();
  ASSERT_TRUE(defaults.isOk()) << defaults.status().message();
  EXPECT_EQ(defaults->shmUseCma, -1);
  for (const auto& [text, value] : {std::pair{"auto", -1}, std::pair{"0", 0}, std::pair{"1", 1}}) {
    setenv("CC_SHM_USE_CMA", text, 1);
    Result<Config> config = Config::fromEnvironment();
    ASSERT_TRUE(config.isOk()) << text;
    EXPECT_EQ(config->shmUseCma, value) << text;
  }
  setenv("CC_SHM_USE_CMA", "2", 1);
  Result<Config> bad = Config::fromEnvironment();
  if (outside != nullptr) {
    setenv("CC_SHM_USE_CMA", saved.c_str(), 1);
  } else {
    unsetenv("CC_SHM_USE_CMA");
  }
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), ccInvalidArgument);
  EXPECT_NE(bad.status().message().find("CC_SHM_USE_CMA"), std::string::npos)
      << bad.status().message();
}

// CopyChooser (the kernel a collective copies with under CC_COPY=auto), fed made-up times:
// kernel 0 is the vector loop, kernel 1 memcpy.
constexpr size_t kSize = size_t{1} << 20;

// Runs `calls` calls of `bytes` where kernel k takes nanos[k] a byte; returns the picks.
std::vector<int> runCalls(CopyChooser& chooser, size_t bytes, int calls, double nanos0,
                          double nanos1) {
  std::vector<int> picks;
  for (int i = 0; i < calls; ++i) {
    const int kernel = chooser.pick(bytes);
    picks.push_back(kernel);
    if (kernel < 0) continue;
    const double perByte = kernel == 0 ? nanos0 : nanos1;
    chooser.record(kernel, bytes, static_cast<int64_t>(perByte * static_cast<double>(bytes)));
  }
  return picks;
}

TEST(CopyChooser, SmallCallsKeepTheProcesssKernel) {
  CopyChooser chooser;
  for (int pick : runCalls(chooser, CopyChooser::kMinBytes - 1, 50, 1.0, 0.1)) EXPECT_EQ(pick, -1);
  EXPECT_EQ(CopyChooser::kernel(0), copyKernelNamed(copyKernelName()));
  EXPECT_EQ(CopyChooser::kernel(1), copyKernelNamed("libc"));
}

TEST(CopyChooser, TriesBothThenRunsTheFasterAndNowAndThenTheOther) {
  for (const auto& [fast, slow] : {std::pair{0, 1}, std::pair{1, 0}}) {
    CopyChooser chooser;
    const int calls = static_cast<int>(CopyChooser::kSeedCalls + 4 * CopyChooser::kExploreEvery);
    const std::vector<int> picks =
        runCalls(chooser, kSize, calls, fast == 0 ? 0.1 : 0.3, fast == 1 ? 0.1 : 0.3);
    for (uint32_t call = 0; call < static_cast<uint32_t>(calls); ++call) {
      int expected = fast;
      if (call < CopyChooser::kSeedCalls) {
        expected = static_cast<int>((call ^ (call >> 1)) & 1);  // 0 1 1 0 0 1 1 0
      } else if (call % CopyChooser::kExploreEvery == CopyChooser::kExploreEvery - 1) {
        expected = slow;
      }
      ASSERT_EQ(picks[call], expected) << "call " << call << ", faster kernel " << fast;
    }
    EXPECT_NEAR(chooser.nanosPerByte(fast, kSize), 0.1, 1e-3);
    EXPECT_NEAR(chooser.nanosPerByte(slow, kSize), 0.3, 1e-3);
  }
}

TEST(CopyChooser, FollowsAChangeOfModeAtItsNextTry) {
  CopyChooser chooser;
  runCalls(chooser, kSize, static_cast<int>(CopyChooser::kSeedCalls + 10), 0.1, 0.3);
  ASSERT_EQ(chooser.pick(kSize), 0);
  chooser.record(0, kSize, static_cast<int64_t>(0.1 * kSize));
  // Now memcpy is three times faster than the loop: the next try of memcpy shows it.
  const std::vector<int> picks =
      runCalls(chooser, kSize, static_cast<int>(2 * CopyChooser::kExploreEvery), 0.3, 0.1);
  EXPECT_EQ(picks.back(), 1);
  // memcpy's first run is its try; the call after it already takes memcpy, and from then on
  // the loop runs only on its own tries.
  const auto firstMemcpy = std::find(picks.begin(), picks.end(), 1) - picks.begin();
  ASSERT_LT(firstMemcpy + 1, static_cast<long>(picks.size()));
  EXPECT_EQ(picks[static_cast<size_t>(firstMemcpy) + 1], 1);
  const auto loopsAfter = std::count(picks.begin() + firstMemcpy, picks.end(), 0);
  EXPECT_LE(loopsAfter, static_cast<long>(picks.size() / CopyChooser::kExploreEvery + 1));
}

TEST(CopyChooser, TwoLateCallsDoNotMoveTheChoiceAndSizesDoNotMix) {
  CopyChooser chooser;
  // The kernels 1.3x apart; then two calls of the faster one that each lost the core 10 ms.
  runCalls(chooser, kSize, static_cast<int>(CopyChooser::kSeedCalls + 10), 0.1, 0.13);
  for (int late = 0; late < 2; ++late) {
    ASSERT_EQ(chooser.pick(kSize), 0);
    chooser.record(0, kSize, static_cast<int64_t>(0.1 * kSize) + 10'000'000);
  }
  EXPECT_LT(chooser.nanosPerByte(0, kSize), chooser.nanosPerByte(1, kSize));
  EXPECT_EQ(chooser.pick(kSize), 0);
  // Four times the size is its own bucket: seeded afresh, memcpy faster there.
  const std::vector<int> picks = runCalls(chooser, 4 * kSize, 12, 0.3, 0.1);
  EXPECT_EQ(picks[0], 0);
  EXPECT_EQ(picks[1], 1);
  EXPECT_EQ(picks.back(), 1);
  EXPECT_EQ(chooser.pick(kSize), 0);
  // The largest sizes have a bucket too.
  EXPECT_EQ(chooser.pick(SIZE_MAX), 0);
}

// Three ways (the single copy offered): the seeds try each four times, then the fastest
// runs and every kExploreEvery-th call one of the two others, each for two tries in turn
// (so each is tried on odd and on even calls). The first run of each way is not timed:
// here it takes 100 times as long, and the averages do not show it.
TEST(CopyChooser, ThreeWaysTryEachThenRunTheFastestAndTheOthersInTurn) {
  constexpr unsigned kAll = CopyChooser::kLoop | CopyChooser::kLibc | CopyChooser::kSingleCopy;
  constexpr std::array<double, 3> kNanos{0.3, 0.1, 0.05};
  constexpr std::array<int, CopyChooser::kSeedCalls3> kSeeds{0, 1, 2, 2, 1, 0, 1, 2, 0, 0, 2, 1};
  CopyChooser chooser;
  std::array<bool, 3> ran{false, false, false};
  std::array<std::array<int, 2>, 3> triesByParity{};
  const uint32_t calls = 4 * CopyChooser::kExploreEvery;
  for (uint32_t call = 0; call < calls; ++call) {
    const int way = chooser.pick(kSize, kAll);
    int expected = 2;
    if (call < CopyChooser::kSeedCalls3) {
      expected = kSeeds[call];
    } else if (call % CopyChooser::kExploreEvery == CopyChooser::kExploreEvery - 1) {
      expected = (call / (2 * CopyChooser::kExploreEvery)) % 2 == 0 ? 0 : 1;
      ++triesByParity[static_cast<size_t>(expected)][call % 2];
    }
    ASSERT_EQ(way, expected) << "call " << call;
    const auto index = static_cast<size_t>(way);
    const double cold = ran[index] ? 1.0 : 100.0;
    ran[index] = true;
    chooser.record(way, kSize, static_cast<int64_t>(cold * kNanos[index] * kSize));
  }
  for (int way = 0; way < 3; ++way) {
    EXPECT_NEAR(chooser.nanosPerByte(way, kSize), kNanos[static_cast<size_t>(way)], 1e-3);
  }
  for (int way = 0; way < 2; ++way) {
    EXPECT_EQ(triesByParity[static_cast<size_t>(way)][0], 1) << "way " << way << ", even calls";
    EXPECT_EQ(triesByParity[static_cast<size_t>(way)][1], 1) << "way " << way << ", odd calls";
  }
  EXPECT_EQ(chooser.fasterKernel(kSize), 1);
  // Offered again without the single copy, the same bucket runs the faster kernel.
  EXPECT_EQ(chooser.pick(kSize), 1);
}

// CC_COPY fixes the kernel: the choice is between it (way 0) and the single copy, seeded
// like two kernels.
TEST(CopyChooser, AFixedKernelAndTheSingleCopy) {
  constexpr unsigned kOffered = CopyChooser::kLoop | CopyChooser::kSingleCopy;
  CopyChooser chooser;
  const std::vector<int> seeds{0, 2, 2, 0, 0, 2, 2, 0};
  for (const int expected : seeds) {
    const int way = chooser.pick(kSize, kOffered);
    ASSERT_EQ(way, expected);
    chooser.record(way, kSize, static_cast<int64_t>((way == 0 ? 0.1 : 0.2) * kSize));
  }
  EXPECT_EQ(chooser.pick(kSize, kOffered), 0);
  EXPECT_EQ(chooser.pick(CopyChooser::kMinBytes - 1, kOffered), -1);
  // One way alone is no choice.
  EXPECT_EQ(chooser.pick(kSize, CopyChooser::kLoop), 0);
}

// runWithChosenCopy tells the work, through singleCopyChosen(), whether its call took the
// single copy: in exactly the calls the chooser picked it for, and never outside a call.
TEST(CopyChooser, TheWorkKnowsWhetherItsCallTookTheSingleCopy) {
  const unsigned offered =
      (copyKernelIsAuto() ? CopyChooser::kLoop | CopyChooser::kLibc : CopyChooser::kLoop) |
      CopyChooser::kSingleCopy;
  CopyChooser chooser;
  CopyChooser mirror;  // the same seeds, picked without running anything
  for (uint32_t call = 0; call < CopyChooser::kSeedCalls; ++call) {
    bool took = false;
    ASSERT_TRUE(runWithChosenCopy(&chooser, kSize, true, [&] {
                  took = singleCopyChosen();
                  return Status::ok();
                }).isOk());
    EXPECT_EQ(took, mirror.pick(kSize, offered) == 2) << "call " << call;
    EXPECT_FALSE(singleCopyChosen());
  }
  // Not offered: never.
  CopyChooser plain;
  for (uint32_t call = 0; call < CopyChooser::kSeedCalls3; ++call) {
    ASSERT_TRUE(runWithChosenCopy(&plain, kSize, false, [&] {
                  EXPECT_FALSE(singleCopyChosen());
                  return Status::ok();
                }).isOk());
  }
}

// copyBytes copies with the scope's kernel on this thread while the scope lives, and with
// the one before it after; runWithChosenCopy without a chooser leaves the kernel alone.
int gCountedCopies = 0;
void countingCopy(void* dst, const void* src, size_t bytes) {
  ++gCountedCopies;
  std::memcpy(dst, src, bytes);
}
void otherCountingCopy(void* dst, const void* src, size_t bytes) {
  gCountedCopies += 100;
  std::memcpy(dst, src, bytes);
}

TEST(CopyChooser, AScopeSetsThisThreadsKernelUntilItEnds) {
  std::vector<uint8_t> from = pattern(4096, 7), to(4096);
  gCountedCopies = 0;
  {
    const CopyKernelScope outer(countingCopy);
    copyBytes(to.data(), from.data(), to.size());
    {
      const CopyKernelScope inner(otherCountingCopy);
      copyBytes(to.data(), from.data(), to.size());
    }
    copyBytes(to.data(), from.data(), to.size());
    EXPECT_TRUE(runWithChosenCopy(nullptr, size_t{1} << 20, [&] {
                  copyBytes(to.data(), from.data(), to.size());
                  return Status::ok();
                }).isOk());
  }
  EXPECT_EQ(gCountedCopies, 103);
  copyBytes(to.data(), from.data(), to.size());
  EXPECT_EQ(gCountedCopies, 103);
  EXPECT_EQ(to, from);
}

// With a chooser, runWithChosenCopy runs the work under the kernel the chooser picks and
// times it: after the seed calls both kernels have an average (CC_COPY left to cc).
TEST(CopyChooser, RunWithChosenCopyTimesEachCallUnderItsKernel) {
  if (!copyKernelIsAuto()) GTEST_SKIP() << "CC_COPY fixes the kernel here";
  CopyChooser chooser;
  std::vector<uint8_t> from = pattern(kSize, 9), to(kSize);
  for (uint32_t call = 0; call < CopyChooser::kSeedCalls; ++call) {
    ASSERT_TRUE(runWithChosenCopy(&chooser, kSize, [&] {
                  copyBytes(to.data(), from.data(), to.size());
                  return Status::ok();
                }).isOk());
  }
  EXPECT_GT(chooser.nanosPerByte(0, kSize), 0);
  EXPECT_GT(chooser.nanosPerByte(1, kSize), 0);
  EXPECT_EQ(to, from);
  // A failed call is not timed: it says nothing about the copy.
  CopyChooser untouched;
  for (uint32_t call = 0; call < CopyChooser::kSeedCalls; ++call) {
    EXPECT_FALSE(runWithChosenCopy(&untouched, kSize, [] {
                   return Status(ccInternalError, "failed");
                 }).isOk());
  }
  EXPECT_EQ(untouched.nanosPerByte(0, kSize), 0);
  EXPECT_EQ(untouched.nanosPerByte(1, kSize), 0);
}

}  // namespace
}  // namespace cc
