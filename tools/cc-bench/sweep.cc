// Sizes, iteration counts and medians for a sweep (see sweep.h).
#include "sweep.h"

#include <algorithm>

namespace cc::bench {

std::vector<size_t> sizeSeries(const SweepOptions& options) {
  std::vector<size_t> sizes;
  for (size_t bytes = options.minBytes;;) {
    sizes.push_back(bytes);
    if (bytes == options.maxBytes) break;
    bytes = bytes > options.maxBytes / options.factor ? options.maxBytes : bytes * options.factor;
  }
  return sizes;
}

int iterationsFor(const SweepOptions& options, size_t bytesPerIteration) {
  size_t budget = kBytesPerMeasurement / std::max<size_t>(bytesPerIteration, 1);
  size_t iterations = std::min(static_cast<size_t>(options.iterations), budget);
  return std::max(kMinIterations, static_cast<int>(iterations));
}

int warmupFor(const SweepOptions& options, int iterations) {
  return std::min(options.warmup, iterations / 4);
}

double median(std::vector<double> samples) {
  if (samples.empty()) return 0;
  size_t middle = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + static_cast<ptrdiff_t>(middle),
                   samples.end());
  double upper = samples[middle];
  if (samples.size() % 2 == 1) return upper;
  double lower =
      *std::max_element(samples.begin(), samples.begin() + static_cast<ptrdiff_t>(middle));
  return 0.5 * (lower + upper);
}

}  // namespace cc::bench
