// The shape of a benchmark sweep, shared by every measurement in cc-bench: which sizes,
// how many iterations at each, and how samples become one number. The rules here are the
// same ones bench/ompi_pingpong.c follows, so that cc's and Open MPI's columns compare
// like with like.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

namespace cc::bench {

struct SweepOptions {
  size_t minBytes = 8;
  size_t maxBytes = size_t{256} << 20;
  size_t factor = 4;
  int iterations = 50;  // at most this many timed iterations per size
  int warmup = 5;       // at most this many untimed ones first
};

// Big sizes are capped at about this many bytes moved per measurement, so a default
// sweep stays short; every size still gets at least kMinIterations samples.
inline constexpr size_t kBytesPerMeasurement = size_t{1} << 28;
inline constexpr int kMinIterations = 3;

// minBytes, minBytes*factor, ... and maxBytes itself when the series steps over it.
std::vector<size_t> sizeSeries(const SweepOptions& options);

// max(kMinIterations, min(options.iterations, kBytesPerMeasurement / bytesPerIteration)).
int iterationsFor(const SweepOptions& options, size_t bytesPerIteration);

// min(options.warmup, iterations / 4): big sizes, which run few iterations, skip the warm-up
// (the latency phase has warmed the buffers) rather than spend a quarter of their time on it.
int warmupFor(const SweepOptions& options, int iterations);

double median(std::vector<double> samples);

using Clock = std::chrono::steady_clock;

inline double secondsBetween(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double>(end - start).count();
}

}  // namespace cc::bench
