// memcpy bandwidth (see memcpy_bench.h). Small copies take nanoseconds, less than a clock
// read is worth, so each sample repeats the copy until it has moved kMinBytesPerSample.
#include "memcpy_bench.h"

#include <algorithm>
#include <cstring>

namespace cc::bench {
namespace {

constexpr size_t kMinBytesPerSample = size_t{1} << 20;

// Keeps the compiler from merging or dropping copies whose result nobody reads.
inline void keep(void* pointer) { asm volatile("" : : "r"(pointer) : "memory"); }

}  // namespace

std::vector<MemcpyPoint> measureMemcpy(const SweepOptions& options) {
  // Value-initialized: every page is touched before the first timed copy.
  std::vector<std::byte> source(options.maxBytes, std::byte{1});
  std::vector<std::byte> destination(options.maxBytes);
  std::vector<MemcpyPoint> points;
  for (size_t bytes : sizeSeries(options)) {
    size_t repeats = std::max<size_t>(1, kMinBytesPerSample / bytes);
    int iterations = iterationsFor(options, bytes * repeats);
    int warmup = std::max(1, warmupFor(options, iterations));
    std::vector<double> samples;
    for (int i = 0; i < warmup + iterations; ++i) {
      Clock::time_point start = Clock::now();
      for (size_t r = 0; r < repeats; ++r) {
        std::memcpy(destination.data(), source.data(), bytes);
        keep(destination.data());
      }
      Clock::time_point end = Clock::now();
      if (i >= warmup)
        samples.push_back(static_cast<double>(bytes * repeats) / secondsBetween(start, end) / 1e9);
    }
    points.push_back({bytes, median(std::move(samples))});
  }
  return points;
}

}  // namespace cc::bench
