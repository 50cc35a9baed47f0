#include "core/copy.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/log.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cc {
namespace {

// Below this memcpy is as good (glibc copies small sizes with vectors too) and the
// kernels need at least four vectors.
constexpr size_t kKernelMinBytes = 256;

void copyLibc(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

#if defined(__x86_64__)
// One body for both widths: the first vector unaligned, then four vectors a step stored
// at addresses aligned to the vector, then the last four vectors unaligned (they may
// overlap what the loop wrote, which is harmless as src and dst do not overlap).
// Needs bytes >= 4 vectors. A macro, not a template: a template body compiled for the
// default target cannot call the AVX2 intrinsics, and one written with GCC's vector types
// and __builtin_memcpy went through the stack in 16-byte pieces (tried); the intrinsics
// make each load and store one instruction.
#define CC_COPY_BODY(Vec, kWidth, loadu, store, storeu)                                          \
  const Vec head = loadu(reinterpret_cast<const Vec*>(src));                                     \
  const size_t skip = kWidth - (reinterpret_cast<uintptr_t>(dst) & (kWidth - 1));                \
  std::byte* out = dst + skip;                                                                   \
  const std::byte* in = src + skip;                                                              \
  std::byte* const end = dst + bytes;                                                            \
  while (static_cast<size_t>(end - out) > 4 * kWidth) {                                          \
    const Vec v0 = loadu(reinterpret_cast<const Vec*>(in));                                      \
    const Vec v1 = loadu(reinterpret_cast<const Vec*>(in + kWidth));                             \
    const Vec v2 = loadu(reinterpret_cast<const Vec*>(in + 2 * kWidth));                         \
    const Vec v3 = loadu(reinterpret_cast<const Vec*>(in + 3 * kWidth));                         \
    store(reinterpret_cast<Vec*>(out), v0);                                                      \
    store(reinterpret_cast<Vec*>(out + kWidth), v1);                                             \
    store(reinterpret_cast<Vec*>(out + 2 * kWidth), v2);                                         \
    store(reinterpret_cast<Vec*>(out + 3 * kWidth), v3);                                         \
    out += 4 * kWidth;                                                                           \
    in += 4 * kWidth;                                                                            \
  }                                                                                              \
  for (size_t last = bytes - 4 * kWidth; last < bytes; last += kWidth) {                         \
    storeu(reinterpret_cast<Vec*>(dst + last), loadu(reinterpret_cast<const Vec*>(src + last))); \
  }                                                                                              \
  storeu(reinterpret_cast<Vec*>(dst), head);

void copySse2Body(std::byte* dst, const std::byte* src, size_t bytes) {
  CC_COPY_BODY(__m128i, size_t{16}, _mm_loadu_si128, _mm_store_si128, _mm_storeu_si128)
}

__attribute__((target("avx2"))) void copyAvx2Body(std::byte* dst, const std::byte* src,
                                                  size_t bytes) {
  CC_COPY_BODY(__m256i, size_t{32}, _mm256_loadu_si256, _mm256_store_si256, _mm256_storeu_si256)
}
#undef CC_COPY_BODY

// A body for kKernelMinBytes and more, memcpy below.
template <void (*body)(std::byte*, const std::byte*, size_t)>
void anySize(void* dst, const void* src, size_t bytes) {
  if (bytes < kKernelMinBytes) return copyLibc(dst, src, bytes);
  body(static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), bytes);
}
constexpr CopyKernel copySse2 = anySize<copySse2Body>;
constexpr CopyKernel copyAvx2 = anySize<copyAvx2Body>;
#endif

struct Chosen {
  CopyKernel kernel;
  const char* name;
};

Chosen named(std::string_view name) {
  if (name == "libc") return {copyLibc, "libc"};
#if defined(__x86_64__)
  if (name == "sse2") return {copySse2, "sse2"};
  if (name == "avx2" && __builtin_cpu_supports("avx2")) return {copyAvx2, "avx2"};
#endif
  return {nullptr, nullptr};
}

Chosen choose() {
  Chosen best = named("avx2");
  if (best.kernel == nullptr) best = named("sse2");
  if (best.kernel == nullptr) best = named("libc");
  const char* forced = std::getenv("CC_COPY");
  if (forced == nullptr || *forced == '\0' || std::string_view(forced) == "auto") return best;
  const Chosen asked = named(forced);
  if (asked.kernel != nullptr) return asked;
  log::warn("CC_COPY={}: this CPU lacks it; using {}", forced, best.name);
  return best;
}

const Chosen& chosen() {
  static const Chosen kernel = choose();
  return kernel;
}

thread_local CopyKernel tScopedKernel = nullptr;
thread_local bool tSingleCopy = false;

}  // namespace

void copyBytes(void* dst, const void* src, size_t bytes) {
  (tScopedKernel != nullptr ? tScopedKernel : chosen().kernel)(dst, src, bytes);
}

void moveBytes(void* dst, const void* src, size_t bytes) {
  const auto d = reinterpret_cast<uintptr_t>(dst);
  const auto s = reinterpret_cast<uintptr_t>(src);
  if (d == s || bytes == 0) return;
  if (d < s + bytes && s < d + bytes) {
    std::memmove(dst, src, bytes);
    return;
  }
  copyBytes(dst, src, bytes);
}

const char* copyKernelName() { return chosen().name; }

CopyKernel copyKernelNamed(std::string_view name) { return named(name).kernel; }

bool copyKernelIsAuto() {
  static const bool isAuto = [] {
    // Where the process's kernel is memcpy (no vector loop on this CPU), there is no choice.
    if (chosen().kernel == copyLibc) return false;
    const char* forced = std::getenv("CC_COPY");
    return forced == nullptr || *forced == '\0' || std::string_view(forced) == "auto" ||
           named(forced).kernel == nullptr;  // a kernel this CPU lacks: auto, as choose() warns
  }();
  return isAuto;
}

CopyKernelScope::CopyKernelScope(CopyKernel kernel) : previous_(tScopedKernel) {
  if (kernel != nullptr) tScopedKernel = kernel;
}
CopyKernelScope::~CopyKernelScope() { tScopedKernel = previous_; }

bool singleCopyChosen() { return tSingleCopy; }

SingleCopyScope::SingleCopyScope(bool chosen) : previous_(tSingleCopy) { tSingleCopy = chosen; }
SingleCopyScope::~SingleCopyScope() { tSingleCopy = previous_; }

CopyKernel CopyChooser::kernel(int which) { return which == 0 ? chosen().kernel : copyLibc; }

size_t CopyChooser::bucketOf(size_t bytes) {
  return std::min<size_t>(static_cast<size_t>(std::bit_width(bytes)), 63);
}

int CopyChooser::pick(size_t bytes, unsigned offered) {
  if (bytes < kMinBytes) return -1;
  std::array<int, 3> ways{};
  size_t count = 0;
  for (int way = 0; way < 3; ++way) {
    if ((offered >> way & 1) != 0) ways[count++] = way;
  }
  if (count < 2) return count == 1 ? ways[0] : -1;
  Bucket& bucket = buckets_[bucketOf(bytes)];
  const uint32_t call = bucket.calls++;
  // Two ways: 0 1 1 0 0 1 1 0. Three: 0 1 2 2 1 0 1 2 0 0 2 1. Either way the odd calls
  // and the even ones each see every way, so a workload that alternates two kinds of call
  // in one bucket gives each way both.
  static constexpr std::array<uint8_t, kSeedCalls3> kThreeWays{0, 1, 2, 2, 1, 0, 1, 2, 0, 0, 2, 1};
  if (count == 2 && call < kSeedCalls) return ways[(call ^ (call >> 1)) & 1];
  if (count == 3 && call < kSeedCalls3) return ways[kThreeWays[call]];
  // The lowest average wins; a way never timed (0) counts as lowest, so it gets timed.
  size_t best = 0;
  for (size_t i = 1; i < count; ++i) {
    if (bucket.nanosPerByte[static_cast<size_t>(ways[i])] <
        bucket.nanosPerByte[static_cast<size_t>(ways[best])]) {
      best = i;
    }
  }
  if (call % kExploreEvery != kExploreEvery - 1) return ways[best];
  // A try: the other way, or with three the two others, each twice in turn: the tries
  // fall on even and odd calls in turn (kExploreEvery is odd), so each of the two gets both.
  const size_t other = count == 2 ? 0 : (call / (2 * kExploreEvery)) % 2;
  return ways[(best + 1 + other) % count];
}

void CopyChooser::record(int way, size_t bytes, int64_t nanos) {
  if (way < 0 || way > 2 || bytes < kMinBytes || nanos <= 0) return;
  Bucket& bucket = buckets_[bucketOf(bytes)];
  // The first run of each way: pages and caches are cold.
  if (bucket.runs[static_cast<size_t>(way)]++ == 0) return;
  double sample = static_cast<double>(nanos) / static_cast<double>(bytes);
  double& average = bucket.nanosPerByte[static_cast<size_t>(way)];
  if (average == 0) {
    average = sample;
    return;
  }
  // Down at once, up by a quarter of the way to at most 1.25x: a call is slower than the
  // copy allows when its rank or a peer lost the core for a while, never faster, so the low
  // samples say most, and one late call lifts the average by 6.25% at most. A way that
  // really became slower climbs 6.25% a call until another one is tried.
  if (sample < average) {
    average = sample;
  } else {
    average += (std::min(sample, 1.25 * average) - average) / 4;
  }
}

int CopyChooser::fasterKernel(size_t bytes) const {
  const Bucket& bucket = buckets_[bucketOf(bytes)];
  const double loop = bucket.nanosPerByte[0];
  const double libc = bucket.nanosPerByte[1];
  return libc > 0 && (loop == 0 || libc < loop) ? 1 : 0;
}

double CopyChooser::nanosPerByte(int kernel, size_t bytes) const {
  return buckets_[bucketOf(bytes)].nanosPerByte[static_cast<size_t>(kernel)];
}

}  // namespace cc
